/*
 * bench.h - `inferd bench`: the decentralized-vs-centralized experiment (DESIGN.md §7).
 *
 *   server mode: N POSTs of one image from C concurrent keep-alive clients (libcurl's
 *                multi interface, one multi handle per process, C easy handles reused),
 *                optionally spread over P forked processes whose results are piped back.
 *                Closed loop by default (a client sends its next request when the last
 *                is answered); with a request rate R, open loop: request i is due at
 *                start + i/R whatever the answers, C bounds the requests in flight, and
 *                a request's latency counts from when it was due, so time spent waiting
 *                for a free client is not hidden (no coordinated omission).
 *   local mode:  N independent jobs, at most C at once, each a fresh process (this same
 *                binary re-executed as `inferd bench --mode job`) that loads the model,
 *                preprocesses the image, runs it with one thread and prints its top-5.
 *
 * While either runs, a sampling thread reads /proc/stat and /proc/meminfo every 100 ms
 * for the machine's peak CPU % and memory %, and draws a progress bar on stderr when
 * stderr is a terminal.
 *
 * Threading: every function here is called from the thread that runs the benchmark;
 * the sampler is internal. Nothing is thread-safe beyond that.
 */
#ifndef INFERD_BENCH_H
#define INFERD_BENCH_H

#include <stddef.h>
#include <stdint.h>

enum {
  BENCH_STATUS_SLOTS = 1000, /* HTTP statuses 0..999 (0 = no answer; libcurl takes any three digits, and a
                                 server's 999 is an answer) or exit statuses 0..255 */
  BENCH_NO_ANSWER_SLOTS = 128, /* why a request got no answer: libcurl's CURLcode (CURL_LAST is 99 in 7.88); a
                                  later code past the table is counted in its last slot */
  BENCH_MAX_HEADERS = 16,
  BENCH_JOB_OUTPUT_MAX = 4096, /* bytes of a local job's stdout kept (its top-5) */
  BENCH_JOB_ERROR_MAX = 512,   /* bytes of a local job's stderr kept (its reason to fail) */
};

typedef enum bench_mode { BENCH_MODE_SERVER, BENCH_MODE_LOCAL } bench_mode;

typedef struct bench_params {
  bench_mode mode;
  const char *url;                          /* server mode */
  const char *cacert;                       /* server mode, https: the CA (PEM) to trust; NULL: the system's */
  const char *file;                         /* the image sent or classified */
  const char *model, *labels;               /* local mode; labels may be NULL */
  const char *headers[BENCH_MAX_HEADERS];   /* extra request headers, "Name: value" */
  int header_count;
  int64_t requests;                         /* N */
  int concurrency;                          /* C */
  int processes;                            /* P (server mode), default 1 */
  double request_rate;                      /* R requests/s (server mode); 0 = closed loop */
  double timeout_seconds;                   /* per request or job, default 60 */
  const char *self_exe;                     /* what local mode re-executes: /proc/self/exe */
} bench_params;

/* One job of local mode. */
typedef struct bench_job {
  int exit_status; /* 0 success; 128 + signal when killed */
  double ms;       /* wall time from fork to exit, milliseconds */
  char output[BENCH_JOB_OUTPUT_MAX]; /* its stdout, NUL-terminated (truncated if longer) */
  char error[BENCH_JOB_ERROR_MAX];   /* a failed job's reason: the last line of its stderr (cut to
                                        fit), or why the run killed it; "" for a success */
} bench_job;

typedef struct bench_result {
  int64_t done;                          /* requests or jobs finished */
  int64_t status_count[BENCH_STATUS_SLOTS]; /* by HTTP status (0 = connection failure or
                                               timeout), or by exit status in local mode */
  int64_t no_answer[BENCH_NO_ANSWER_SLOTS]; /* server mode: the requests of status 0 by why (libcurl's
                                               CURLcode: refused, timed out, reset, ...) */
  double *latency_ms;                    /* [done], owned; freed by bench_result_free. A
                                            failed request's (not 2xx; local: exit not 0)
                                            is stored negated (bench_latency), so that the
                                            percentiles count successes only */
  bench_job *jobs;                       /* [done] in local mode, else NULL; owned */
  int64_t connections;                   /* server mode: TCP connections opened (keep-alive:
                                            about one per client) */
  int64_t delayed;                       /* open loop: requests due while all C clients
                                            were busy, sent late (their wait is in their
                                            latency) */
  int interrupted;                       /* the signal that stopped the run early (bench_request_stop), or 0:
                                            then `done` may be below the requests asked for */
  double seconds;                        /* wall time of the whole run (to the stop, when interrupted) */
  double peak_cpu_percent, peak_memory_percent; /* of the machine */
} bench_result;

/* Run the benchmark; *result is filled (free with bench_result_free) and 0 returned,
 * or -1 with a one-line reason in `err` when it could not run at all (not for failed
 * requests: those are counted). */
int bench_server_run(const bench_params *params, bench_result *result, char *err, size_t err_size);
int bench_local_run(const bench_params *params, bench_result *result, char *err, size_t err_size);
void bench_result_free(bench_result *result);

/* Stops the run in progress early, as Ctrl-C stops perf_analyzer, wrk or hey with a report:
 * no more requests or jobs start, the ones in flight are dropped (local mode: its running
 * jobs are killed), and the run returns 0 with what finished and result->interrupted =
 * signo. --processes children are told (SIGTERM) and send back what they finished. Every
 * later run in this process stops at once. Async-signal-safe (it stores signo in a flag):
 * the CLI calls it from its SIGINT and SIGTERM handlers. */
void bench_request_stop(int signo);
/* SIGINT and SIGTERM call bench_request_stop from now on, with sigaction's `sa_flags`
 * (SA_RESETHAND: a second signal takes the default action); one this process ignored
 * at start (a script's background job ignores SIGINT) stays ignored. */
void bench_catch_stop_signals(int sa_flags);

/* The hidden `inferd bench --mode job`: classify `file` with `model` on one thread and
 * print the top-5 JSON on stdout. Returns the exit status (0, 2 bad input, 1 other). */
int bench_job_main(const char *model, const char *file, const char *labels);

/* Printing: text for people or one JSON object (jansson). */
void bench_report(const bench_params *params, const bench_result *result, int json);
/* After the n runs of a concurrency sweep, each already reported as text: a table with
 * a row per run; or, for --json (nothing printed before), one object whose "sweep" array
 * holds each run's object. */
void bench_report_sweep(const bench_params *params, const bench_result *results, int n, int json);

/* ---- internal, shared by the files of src/bench/ ---------------------------------- */

/* The sampler: peak CPU and memory of the machine every 100 ms, plus a progress bar of
 * *progress out of `total` on stderr when it is a terminal. `progress` is read only. */
typedef struct bench__sampler bench__sampler;
bench__sampler *bench__sampler_start(const volatile int64_t *progress, int64_t total);
/* Stops the thread and writes the peaks. */
void bench__sampler_stop(bench__sampler *sampler, double *peak_cpu, double *peak_memory);

double bench__now(void); /* seconds, CLOCK_MONOTONIC */
int bench__stop_signal(void); /* the signal given to bench_request_stop, or 0 */

/* The sampler's readings of /proc texts (pure functions; tests/fuzz/fuzz_proc.c).
 * /proc/stat: its first line, "cpu" then user nice system idle iowait irq softirq steal
 * (at least the first four) in jiffies; busy is all but idle and iowait. Returns 0, or -1
 * when the line is not that or a number or the sum passes ULLONG_MAX. */
int bench__parse_proc_stat(const char *text, unsigned long long *busy, unsigned long long *total);
/* /proc/meminfo: used memory in % of MemTotal (MemTotal - MemAvailable), in [0, 100);
 * 0 when either line is missing. */
double bench__parse_meminfo(const char *text);
/* The busy % of the CPUs between two /proc/stat readings, in [0, 100]; -1 when total did
 * not grow (nothing to measure). */
double bench__cpu_percent(unsigned long long last_busy, unsigned long long last_total, unsigned long long busy,
                          unsigned long long total);
/* A sample for bench_result.latency_ms: `ms`, negated (and never 0) when it failed. */
static inline double bench_latency(double ms, int ok) { return ok ? ms : -(ms > 1e-9 ? ms : 1e-9); }
/* The q-quantile (0 < q <= 1) of n sorted values by the nearest-rank method: the
 * ceil(q * n)-th smallest; 0 when n is 0. */
double bench_nearest_rank(const double *sorted, int64_t n, double q);

#endif /* INFERD_BENCH_H */
