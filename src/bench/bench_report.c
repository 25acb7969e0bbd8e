/*
 * bench_report.c - what `inferd bench` prints: total time, throughput (requests/s and
 * images/s: one image per request), latency p50/p90/p99/max, counts by HTTP status (or
 * job exit status) and, for status 0, why there was no answer in libcurl's words
 * ("Couldn't connect to server"), errors, peak CPU % and memory % of the machine; as
 * text, or as one JSON object built with jansson (--json). Local mode adds each job's top-5; open loop
 * (--request-rate) adds the rate and the delayed requests. A concurrency sweep prints
 * each level's report and then a table of them all, or one JSON object with an array.
 *
 * Latency is of the requests answered with success (2xx; in local mode, jobs that exit
 * 0), as Triton's perf_analyzer reports it: a fast 503 from a full queue would otherwise
 * pull the percentiles down exactly when the server is overloaded; failures show in the
 * status counts and errors. Percentiles are nearest-rank over every such sample (no
 * histogram): the sample at ceil(q * n) in sorted order. With no success there is no
 * latency: the text says so (a dash in the sweep's table); the JSON keeps 0 with "ok": 0.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

typedef struct latency_summary {
  double p50, p90, p99, max, mean; /* milliseconds */
} latency_summary;

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_nearest_rank(const double *sorted, int64_t n, double q) {
  if (n == 0) return 0;
  int64_t rank = (int64_t)ceil(q * (double)n);
  if (rank < 1) rank = 1;
  if (rank > n) rank = n;
  return sorted[rank - 1];
}

/* Of the successes, or of the failures (stored negated: bench_latency). */
static latency_summary summarize(const bench_result *r, bool failures) {
  latency_summary s = {0};
  if (r->done == 0) return s;
  double *sorted = malloc((size_t)r->done * sizeof(double));
  if (!sorted) return s;
  int64_t n = 0;
  for (int64_t i = 0; i < r->done; i++)
    if ((r->latency_ms[i] < 0) == failures) sorted[n++] = fabs(r->latency_ms[i]);
  if (n == 0) {
    free(sorted);
    return s;
  }
  qsort(sorted, (size_t)n, sizeof(double), compare_double);
  double sum = 0;
  for (int64_t i = 0; i < n; i++) sum += sorted[i];
  s.p50 = bench_nearest_rank(sorted, n, 0.50);
  s.p90 = bench_nearest_rank(sorted, n, 0.90);
  s.p99 = bench_nearest_rank(sorted, n, 0.99);
  s.max = sorted[n - 1];
  s.mean = sum / (double)n;
  free(sorted);
  return s;
}

/* A success is HTTP 200 in server mode, exit status 0 in local mode. */
/* Answered with success: any 2xx (as the latency samples count it), or exit status 0. */
static int64_t successes(const bench_params *p, const bench_result *r) {
  if (p->mode != BENCH_MODE_SERVER) return r->status_count[0];
  int64_t ok = 0;
  for (int status = 200; status < 300 && status < BENCH_STATUS_SLOTS; status++) ok += r->status_count[status];
  return ok;
}

static double per_second(int64_t n, const bench_result *r) { return r->seconds > 0 ? (double)n / r->seconds : 0; }

static json_t *latency_json(const latency_summary *s) {
  json_t *l = json_object();
  json_object_set_new(l, "p50", json_real(s->p50));
  json_object_set_new(l, "p90", json_real(s->p90));
  json_object_set_new(l, "p99", json_real(s->p99));
  json_object_set_new(l, "max", json_real(s->max));
  json_object_set_new(l, "mean", json_real(s->mean));
  return l;
}

/* Why the requests of status 0 got no answer, as libcurl words it: {"Timeout was reached": 4}. */
static json_t *no_answer_json(const bench_result *r) {
  json_t *o = json_object();
  for (int i = 0; i < BENCH_NO_ANSWER_SLOTS; i++)
    if (r->no_answer[i]) json_object_set_new(o, curl_easy_strerror((CURLcode)i), json_integer(r->no_answer[i]));
  return o;
}

/* A JSON string of text from outside (a job's stderr, which may quote a file name in any
 * encoding): json_string refuses text that is not UTF-8, so each byte past ASCII becomes
 * '?' then, rather than the string being lost. */
static json_t *outside_text(const char *text) {
  json_t *s = json_string(text);
  if (s) return s;
  char *copy = strdup(text);
  if (!copy) return json_null();
  for (char *c = copy; *c; c++)
    if ((unsigned char)*c >= 0x80) *c = '?';
  s = json_string(copy);
  free(copy);
  return s ? s : json_null();
}

static json_t *report_json(const bench_params *p, const bench_result *r) {
  latency_summary s = summarize(r, false);
  int server = p->mode == BENCH_MODE_SERVER;
  int64_t ok = successes(p, r);
  json_t *o = json_object();
  json_object_set_new(o, "mode", json_string(server ? "server" : "local"));
  json_object_set_new(o, "requests", json_integer(p->requests));
  json_object_set_new(o, "concurrency", json_integer(p->concurrency));
  if (server) json_object_set_new(o, "processes", json_integer(p->processes));
  if (server && p->request_rate > 0) {
    json_object_set_new(o, "request_rate", json_real(p->request_rate));
    json_object_set_new(o, "delayed", json_integer(r->delayed));
  }
  if (server) json_object_set_new(o, "connections", json_integer(r->connections));
  json_object_set_new(o, "completed", json_integer(r->done));
  json_object_set_new(o, "interrupted", json_boolean(r->interrupted != 0));
  json_object_set_new(o, "ok", json_integer(ok));
  json_object_set_new(o, "errors", json_integer(r->done - ok));
  json_object_set_new(o, "total_seconds", json_real(r->seconds));
  json_object_set_new(o, "requests_per_second", json_real(per_second(r->done, r)));
  json_object_set_new(o, "images_per_second", json_real(per_second(ok, r)));
  json_object_set_new(o, "latency_ms", latency_json(&s));
  if (r->done > ok) {
    latency_summary f = summarize(r, true);
    json_object_set_new(o, "failed_latency_ms", latency_json(&f));
  }
  json_t *st = json_object();
  for (int i = 0; i < BENCH_STATUS_SLOTS; i++)
    if (r->status_count[i]) {
      char key[16];
      snprintf(key, sizeof key, "%d", i);
      json_object_set_new(st, key, json_integer(r->status_count[i]));
    }
  json_object_set_new(o, server ? "status" : "exit_status", st);
  if (server) json_object_set_new(o, "no_answer", no_answer_json(r));
  json_object_set_new(o, "peak_cpu_percent", json_real(r->peak_cpu_percent));
  json_object_set_new(o, "peak_memory_percent", json_real(r->peak_memory_percent));
  if (!server && r->jobs) {
    json_t *jobs = json_array();
    for (int64_t i = 0; i < r->done; i++) {
      json_t *j = json_object();
      json_object_set_new(j, "exit_status", json_integer(r->jobs[i].exit_status));
      json_object_set_new(j, "ms", json_real(r->jobs[i].ms));
      json_t *top = json_loads(r->jobs[i].output, 0, NULL);
      json_object_set_new(j, "top5", top ? top : json_null());
      if (r->jobs[i].error[0]) json_object_set_new(j, "error", outside_text(r->jobs[i].error));
      json_array_append_new(jobs, j);
    }
    json_object_set_new(o, "jobs", jobs);
  }
  return o;
}

static void print_json(json_t *o) {
  char *text = json_dumps(o, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
  if (text) printf("%s\n", text);
  free(text);
  json_decref(o);
  fflush(stdout);
}

void bench_report(const bench_params *p, const bench_result *r, int json) {
  if (json) {
    print_json(report_json(p, r));
    return;
  }
  latency_summary s = summarize(r, false);
  int server = p->mode == BENCH_MODE_SERVER;
  int64_t ok = successes(p, r);
  if (!server && r->jobs)
    for (int64_t i = 0; i < r->done; i++)
      printf("job %lld: exit %d, %.1f ms%s%s\n%s", (long long)(i + 1), r->jobs[i].exit_status, r->jobs[i].ms,
             r->jobs[i].error[0] ? ": " : "", r->jobs[i].error, r->jobs[i].output);
  printf("mode:        %s, %lld %s, concurrency %d", server ? "server" : "local", (long long)p->requests,
         server ? "requests" : "jobs", p->concurrency);
  if (server) printf(", %d process%s", p->processes, p->processes == 1 ? "" : "es");
  if (server && p->request_rate > 0) printf(", open loop at %.2f requests/s", p->request_rate);
  printf("\n");
  if (r->interrupted) {
    const char *by = r->interrupted == SIGINT ? "SIGINT" : r->interrupted == SIGTERM ? "SIGTERM" : "a signal";
    printf("interrupted: by %s after %lld of %lld %s (those in flight were dropped: not counted)\n", by,
           (long long)r->done, (long long)p->requests, server ? "requests" : "jobs");
  }
  printf("total time:  %.3f s\n", r->seconds);
  printf("throughput:  %.2f requests/s, %.2f images/s\n", per_second(r->done, r), per_second(ok, r));
  if (ok > 0) printf("latency:     p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n", s.p50, s.p90, s.p99, s.max);
  else printf("latency:     none: no %s succeeded\n", server ? "request" : "job"); /* not 0.00 ms */
  printf("%s", server ? "status:     " : "exit status:");
  for (int i = 0; i < BENCH_STATUS_SLOTS; i++)
    if (r->status_count[i]) printf(" %d x %lld", i, (long long)r->status_count[i]);
  printf("\n");
  if (server && r->status_count[0]) { /* status 0: say why */
    printf("no answer:  ");
    for (int i = 0, first = 1; i < BENCH_NO_ANSWER_SLOTS; i++)
      if (r->no_answer[i]) {
        printf("%s %s x %lld", first ? "" : ";", curl_easy_strerror((CURLcode)i), (long long)r->no_answer[i]);
        first = 0;
      }
    printf("\n");
  }
  printf("errors:      %lld\n", (long long)(r->done - ok));
  if (r->done > ok) {
    latency_summary f = summarize(r, true);
    printf("their latency: p50 %.2f ms, p99 %.2f ms, max %.2f ms (not in the latency above)\n", f.p50, f.p99, f.max);
  }
  if (server && p->request_rate > 0)
    printf("delayed:     %lld (due while all %d clients were busy; their wait counts in the latency)\n",
           (long long)r->delayed, p->concurrency);
  if (server) printf("connections: %lld opened\n", (long long)r->connections);
  printf("peak CPU:    %.1f %%\npeak memory: %.1f %%\n", r->peak_cpu_percent, r->peak_memory_percent);
  fflush(stdout);
}

void bench_report_sweep(const bench_params *params, const bench_result *results, int n, int json) {
  if (json) {
    json_t *o = json_object(), *runs = json_array();
    json_object_set_new(o, "mode", json_string(params[0].mode == BENCH_MODE_SERVER ? "server" : "local"));
    for (int i = 0; i < n; i++) json_array_append_new(runs, report_json(&params[i], &results[i]));
    json_object_set_new(o, "sweep", runs);
    print_json(o);
    return;
  }
  printf("\n%11s %12s %10s %9s %9s %9s %9s %7s\n", "concurrency", "requests/s", "images/s", "p50 ms", "p90 ms",
         "p99 ms", "max ms", "errors");
  for (int i = 0; i < n; i++) {
    const bench_result *r = &results[i];
    latency_summary s = summarize(r, false);
    int64_t ok = successes(&params[i], r);
    if (ok > 0)
      printf("%11d %12.2f %10.2f %9.2f %9.2f %9.2f %9.2f %7lld\n", params[i].concurrency, per_second(r->done, r),
             per_second(ok, r), s.p50, s.p90, s.p99, s.max, (long long)(r->done - ok));
    else /* no success, no latency: a dash, not 0.00 */
      printf("%11d %12.2f %10.2f %9s %9s %9s %9s %7lld\n", params[i].concurrency, per_second(r->done, r),
             per_second(ok, r), "-", "-", "-", "-", (long long)(r->done - ok));
  }
  fflush(stdout);
}
