/*
 * cli_bench.c - `inferd bench`: the decentralized-vs-centralized experiment as one
 * command (DESIGN.md §7; the work is in src/bench/).
 *
 *   inferd bench --mode server --url URL --file IMAGE --requests N --concurrency C
 *                [--request-rate R] [--processes P] [--header 'Name: value']...
 *                [--cacert FILE] [--timeout S] [--json]
 *   inferd bench --mode server ... --requests N --concurrency-range START:END[:STEP] ...
 *   inferd bench --mode local --model FILE --file IMAGE --requests N --concurrency C
 *                [--labels index_to_name.json] [--timeout S] [--json]
 *
 * An https URL is checked against the system's CAs, or against --cacert's (a server's
 * self-signed certificate), and is spoken as HTTP/1.1 as a cleartext one is, one
 * connection per client (libcurl would otherwise put every client on one HTTP/2
 * connection); there is no way to skip the check.
 * --request-rate R runs open loop (requests due at a fixed rate, at most C in flight);
 * --concurrency-range runs the closed-loop measurement once per concurrency level, as
 * Triton's perf_analyzer does, and ends with a table of the levels.
 *
 * Exit status: 0 when the run finished (failed requests are counted and reported, not
 * fatal), 2 for bad flags (one line on stderr), 1 when the run could not start.
 * SIGINT (Ctrl-C) or SIGTERM stops the run early, as perf_analyzer, wrk and hey do: what
 * finished is reported (marked interrupted; a sweep reports the levels run so far) and
 * the exit status is 128 + the signal. A second one ends the process at once.
 * `--mode job` is the hidden per-job entry point that local mode re-executes.
 */
#include <ctype.h>
#include <signal.h>
#include <curl/curl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/bench.h"
#include "cli/cli_internal.h"

static void bench_usage(FILE *f) {
  fprintf(f,
          "usage: inferd bench --mode server --url URL --file IMAGE --requests N --concurrency C\n"
          "                    [--request-rate R] [--processes P] [--header 'Name: value']... [--cacert FILE]\n"
          "                    [--timeout S] [--json]\n"
          "       inferd bench --mode server ... --requests N --concurrency-range START:END[:STEP] ...\n"
          "       inferd bench --mode local --model FILE.onnx --file IMAGE --requests N --concurrency C\n"
          "                    [--labels index_to_name.json] [--timeout S] [--json]\n"
          "server: N POSTs of IMAGE from C keep-alive clients (over P processes); with --request-rate,\n"
          "        open loop: a request every 1/R s, at most C in flight, latency counted from when it was due;\n"
          "        --concurrency-range: N requests at each concurrency START, START+STEP, ..., END, then a table;\n"
          "local: N jobs, at most C at once, each a process that loads the model and classifies IMAGE.\n"
          "--cacert: the certificate (PEM) an https server is checked against, as curl's.\n"
          "--timeout: seconds per request or job (default 60).\n");
}

/* The parser's refusals, into the status (core_fail keeps them one line: an argument
 * may hold a newline). */
static inferd_code refuse(inferd_status *st, const char *msg, const char *arg) {
  if (arg) return core_fail(st, INFERD_INVALID_ARG, "%s: '%s'", msg, arg);
  return core_fail(st, INFERD_INVALID_ARG, "%s", msg);
}

/* A refusal after parsing: refuse()'s one line on stderr, exit status 2. */
static int bad(const char *msg, const char *arg) {
  inferd_status st;
  refuse(&st, msg, arg);
  fprintf(stderr, "inferd bench: %s\n", st.message);
  return 2;
}

/* A regular file this process may read: a directory fails only late, in every job, and
 * a FIFO would block the bench. */
static bool readable_file(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && access(path, R_OK) == 0;
}

/* An http:// or https:// URL that libcurl parses: anything else would only fail every
 * request with status 0. */
static bool http_url(const char *url) {
  CURLU *u = curl_url();
  char *scheme = NULL;
  bool ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
            (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0);
  curl_free(scheme);
  curl_url_cleanup(u);
  return ok;
}

/* Raises the soft limit on open files to `needed` if it is lower (up to the hard
 * limit); -1 when that is not enough: the connections or job pipes beyond it would fail
 * and be counted as the server's errors. */
static int raise_fd_limit(long needed) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)needed) return 0;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= (rlim_t)needed ? (rlim_t)needed : rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < (rlim_t)needed) return -1;
  return 0;
}

/* "Name: value" as an HTTP header line: a name of token characters (RFC 9110), a ':',
 * and no CR or LF anywhere. libcurl sends each --header as given and ends it with CRLF
 * itself, so a newline inside would have added a header line of its own. */
static bool header_line(const char *s) {
  static const char token_punctuation[] = "!#$%&'*+-.^_`|~";
  const char *colon = strchr(s, ':');
  if (!colon || colon == s) return false;
  for (const char *p = s; p < colon; p++)
    if (!isalnum((unsigned char)*p) && !strchr(token_punctuation, *p)) return false;
  return !strpbrk(colon, "\r\n");
}

/* "START:END" or "START:END:STEP", each in 1..10000, START <= END. */
static int parse_range(const char *s, int range[3]) {
  long long v[3] = {0, 0, 1};
  int n = 0;
  const char *at = s;
  for (;;) {
    char *end;
    if (n == 3 || *at < '0' || *at > '9') return -1;
    v[n++] = strtoll(at, &end, 10);
    if (*end == '\0') break;
    if (*end != ':') return -1;
    at = end + 1;
  }
  if (n < 2 || v[0] < 1 || v[1] > 10000 || v[0] > v[1] || v[2] < 1 || v[2] > 10000) return -1;
  for (int i = 0; i < 3; i++) range[i] = (int)v[i];
  return 0;
}

/* A number in (0, hi]. */
static int parse_positive(const char *s, double hi, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (*s == '\0' || *end != '\0' || !(v > 0 && v <= hi)) return -1;
  *out = v;
  return 0;
}

static int parse_count(const char *s, long long lo, long long hi, long long *out) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* --concurrency-range: one closed-loop run per level, one after another. */
static int run_sweep(const bench_params *base, const int range[3], int json) {
  int n = (range[1] - range[0]) / range[2] + 1;
  bench_params *ps = calloc((size_t)n, sizeof *ps);
  bench_result *rs = calloc((size_t)n, sizeof *rs);
  int rc = 0, done = 0;
  if (!ps || !rs) {
    fprintf(stderr, "inferd bench: out of memory\n");
    rc = 1;
  }
  for (; rc == 0 && done < n; done++) {
    ps[done] = *base;
    ps[done].concurrency = range[0] + done * range[2];
    if (ps[done].processes > ps[done].concurrency) ps[done].processes = ps[done].concurrency;
    char err[512] = "";
    if (!json) printf("%s== concurrency %d\n", done ? "\n" : "", ps[done].concurrency);
    if (bench_server_run(&ps[done], &rs[done], err, sizeof err) != 0) {
      fprintf(stderr, "inferd bench: concurrency %d: %s\n", ps[done].concurrency, err);
      rc = 1;
      break;
    }
    if (!json) bench_report(&ps[done], &rs[done], 0);
    if (rs[done].interrupted) { /* the levels so far, this one marked */
      rc = 128 + rs[done].interrupted;
      done++;
      break;
    }
  }
  if (rc != 1) bench_report_sweep(ps, rs, done, json);
  for (int i = 0; i < done && rs; i++) bench_result_free(&rs[i]);
  free(ps);
  free(rs);
  return rc;
}

inferd_code cli__bench_parse(int argc, char **argv, cli__bench_options *o, inferd_status *st) {
  enum {
    OPT_MODE = CLI__LONG_ONLY, OPT_URL, OPT_FILE, OPT_MODEL, OPT_LABELS, OPT_REQUESTS, OPT_CONCURRENCY,
    OPT_PROCESSES, OPT_HEADER, OPT_TIMEOUT, OPT_RATE, OPT_RANGE, OPT_JSON, OPT_CACERT,
  };
  static const char shorts[] = ":h";
  static const struct option longs[] = {
      {"mode", required_argument, 0, OPT_MODE},         {"url", required_argument, 0, OPT_URL},
      {"file", required_argument, 0, OPT_FILE},         {"model", required_argument, 0, OPT_MODEL},
      {"labels", required_argument, 0, OPT_LABELS},     {"requests", required_argument, 0, OPT_REQUESTS},
      {"concurrency", required_argument, 0, OPT_CONCURRENCY}, {"processes", required_argument, 0, OPT_PROCESSES},
      {"header", required_argument, 0, OPT_HEADER},     {"timeout", required_argument, 0, OPT_TIMEOUT},
      {"request-rate", required_argument, 0, OPT_RATE}, {"concurrency-range", required_argument, 0, OPT_RANGE},
      {"json", no_argument, 0, OPT_JSON},               {"help", no_argument, 0, 'h'},
      {"cacert", required_argument, 0, OPT_CACERT},
      {0, 0, 0, 0},
  };
  *o = (cli__bench_options){.params = {.processes = 1, .timeout_seconds = 60, .self_exe = "/proc/self/exe"}};
  bench_params *p = &o->params;
  int *range = o->range;
  const char *mode = NULL;
  int have_requests = 0, have_concurrency = 0;
  long long v;
  optind = 0; /* glibc: start afresh; 1 would go on inside an option cluster an earlier parse left */
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
    switch (ch) {
    case OPT_MODE: mode = optarg; break;
    case OPT_URL: p->url = optarg; break;
    case OPT_CACERT: p->cacert = optarg; break;
    case OPT_FILE: p->file = optarg; break;
    case OPT_MODEL: p->model = optarg; break;
    case OPT_LABELS: p->labels = optarg; break;
    case OPT_REQUESTS:
      if (parse_count(optarg, 1, 100000000, &v)) return refuse(st, "--requests wants 1..100000000", optarg);
      p->requests = v, have_requests = 1;
      break;
    case OPT_CONCURRENCY:
      if (parse_count(optarg, 1, 10000, &v)) return refuse(st, "--concurrency wants 1..10000", optarg);
      p->concurrency = (int)v, have_concurrency = 1;
      break;
    case OPT_PROCESSES:
      if (parse_count(optarg, 1, 1024, &v)) return refuse(st, "--processes wants 1..1024", optarg);
      p->processes = (int)v;
      break;
    case OPT_HEADER:
      if (p->header_count == BENCH_MAX_HEADERS) return refuse(st, "too many --header (at most 16)", NULL);
      if (!header_line(optarg)) return refuse(st, "--header wants 'Name: value' (a token name, one line)", optarg);
      /* libcurl sends a given Content-Length as it is, with the whole --file after it: the
       * server reads another body than was sent, and the rest as the next request */
      if (strncasecmp(optarg, "content-length:", 15) == 0)
        return refuse(st, "--header Content-Length: the length is the --file's, bench sets it", optarg);
      p->headers[p->header_count++] = optarg;
      break;
    case OPT_TIMEOUT:
      if (parse_positive(optarg, 86400, &p->timeout_seconds))
        return refuse(st, "--timeout wants seconds in (0, 86400]", optarg);
      break;
    case OPT_RATE:
      if (parse_positive(optarg, 1e6, &p->request_rate))
        return refuse(st, "--request-rate wants requests/s in (0, 1000000]", optarg);
      break;
    case OPT_RANGE:
      if (parse_range(optarg, range))
        return refuse(st, "--concurrency-range wants START:END[:STEP], 1 <= START <= END <= 10000", optarg);
      break;
    case OPT_JSON: o->json = 1; break;
    case 'h': o->help = true; return INFERD_OK;
    case ':': return refuse(st, "missing value for", argv[optind - 1]);
    default: {
      char letter[3];
      return refuse(st, "unknown option", cli__refused_option(ch, argv, shorts, letter));
    }
    }
  }
  if (optind < argc) return refuse(st, "unexpected argument", argv[optind]);
  if (!mode) return refuse(st, "--mode server or --mode local is required", NULL);
  if (strcmp(mode, "job") == 0) { /* hidden: one job of local mode */
    if (!p->model || !p->file) return refuse(st, "--mode job wants --model and --file", NULL);
    o->job = true;
    return INFERD_OK;
  }
  if (strcmp(mode, "server") == 0) {
    p->mode = BENCH_MODE_SERVER;
    if (!p->url) return refuse(st, "--mode server wants --url", NULL);
    if (p->model || p->labels) return refuse(st, "--model and --labels are for --mode local", NULL);
    if (range[0] && have_concurrency) return refuse(st, "--concurrency and --concurrency-range exclude each other", NULL);
    if (range[0] && p->request_rate > 0) return refuse(st, "--concurrency-range is closed loop: drop --request-rate", NULL);
    if (range[0]) have_concurrency = 1;
  } else if (strcmp(mode, "local") == 0) {
    p->mode = BENCH_MODE_LOCAL;
    if (!p->model) return refuse(st, "--mode local wants --model", NULL);
    if (p->url || p->header_count || p->processes != 1 || p->request_rate > 0 || range[0] || p->cacert)
      return refuse(st,
                    "--url, --header, --processes, --request-rate, --concurrency-range and --cacert are for --mode "
                    "server",
                    NULL);
    /* each job's output is kept for the report (BENCH_JOB_OUTPUT_MAX bytes): 100000 is
     * 400 MB of it, and days of processes that each load the model */
    if (p->requests > 100000) return refuse(st, "--mode local runs at most 100000 jobs (--requests)", NULL);
  } else {
    return refuse(st, "--mode wants server or local", mode);
  }
  if (!p->file) return refuse(st, "--file is required", NULL);
  if (!have_requests) return refuse(st, "--requests is required", NULL);
  if (range[0] && range[0] + (range[1] - range[0]) / range[2] * range[2] > p->requests)
    return refuse(st, "--concurrency-range goes above --requests: a level cannot have more clients than requests", NULL);
  if (!have_concurrency) return refuse(st, "--concurrency is required", NULL);
  if (p->url && !http_url(p->url)) return refuse(st, "--url wants an http:// or https:// URL", p->url);
  if (p->request_rate > 0 && (double)(p->requests - 1) / p->request_rate > 86400)
    return refuse(st, "--request-rate is so low that the last request would be due after a day", NULL);
  return INFERD_OK;
}

int cli_bench(int argc, char **argv) {
  cli__bench_options o;
  inferd_status st;
  if (cli__bench_parse(argc, argv, &o, &st) != INFERD_OK) {
    fprintf(stderr, "inferd bench: %s\n", st.message);
    return 2;
  }
  if (o.help) {
    bench_usage(stdout);
    return 0;
  }
  bench_params p = o.params;
  const int *range = o.range;
  int json = o.json;
  if (o.job) return bench_job_main(p.model, p.file, p.labels);
  /* What runs, and so what the report says: never more clients than requests, nor more
   * processes than clients. */
  if (p.concurrency > p.requests) p.concurrency = (int)p.requests;
  /* a sweep has no --concurrency (0 here): run_sweep caps the processes per level */
  if (!range[0] && p.processes > p.concurrency) p.processes = p.concurrency;
  if (!readable_file(p.file)) return bad("--file is not a readable regular file", p.file);
  if (p.model && !readable_file(p.model)) return bad("--model is not a readable regular file", p.model);
  if (p.labels && !readable_file(p.labels)) return bad("--labels is not a readable regular file", p.labels);
  if (p.cacert && !readable_file(p.cacert)) return bad("--cacert is not a readable regular file", p.cacert);
  if (raise_fd_limit(2L * (range[0] ? range[1] : p.concurrency) + 64) != 0)
    return bad("--concurrency needs more open files than this process may have (ulimit -n)", NULL);

  /* Ctrl-C or SIGTERM: the run stops and reports. SA_RESETHAND: a second one takes the
   * default action, for a run that does not stop. No SA_RESTART: a blocking call returns
   * EINTR and the run looks at the flag. */
  bench_catch_stop_signals(SA_RESETHAND);
  if (range[0]) return run_sweep(&p, range, json);
  bench_result r;
  char err[512] = "";
  int rc = p.mode == BENCH_MODE_SERVER ? bench_server_run(&p, &r, err, sizeof err)
                                       : bench_local_run(&p, &r, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "inferd bench: %s\n", err);
    return 1;
  }
  bench_report(&p, &r, json);
  bench_result_free(&r);
  return r.interrupted ? 128 + r.interrupted : 0;
}
