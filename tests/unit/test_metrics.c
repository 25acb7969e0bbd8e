/*
 * test_metrics.c - counters, gauges and histograms under concurrent updates, and the
 * Prometheus text they render.
 *
 * DESIGN
 * check_exposition() is a small, independent reader of the text format 0.0.4: it
 * checks every line (HELP/TYPE once per family and before its samples, metric and
 * label names, quoted label values with only the three allowed escapes, numeric
 * values), and for histograms that buckets ascend in `le`, are cumulative, end with
 * +Inf and that _count equals the +Inf bucket. Every rendering in these tests goes
 * through it. Exact values are then read back by series name with sample_value().
 *
 * Invariants: the concurrency test's expected values are computed in closed form, not
 * by running the same code; assertions print the value got and the value expected.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics.h"

/* ==== a tiny exposition-format checker ================================================= */

typedef struct family_seen {
  char name[128];
  char type[16];
  bool help, typed, has_samples;
} family_seen;

static family_seen *find_family(family_seen *f, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(f[i].name, name) == 0) return &f[i];
  return NULL;
}

static bool is_name_start(int c) { return isalpha(c) || c == '_' || c == ':'; }
static bool is_name_char(int c) { return isalnum(c) || c == '_' || c == ':'; }

/* Returns NULL when `text` is valid exposition, else a description of the first error. */
static const char *check_exposition(const char *text, char *err, size_t errsize) {
  family_seen fam[64];
  int nfam = 0;
  char prev_series[128 + 512 + 2] = "", prev_le_text[64] = "";
  double prev_le = -INFINITY, prev_bucket = -1, inf_bucket = -1;
  size_t len = strlen(text);
  if (len == 0 || text[len - 1] != '\n') return "text does not end with a newline";
  int lineno = 0;
  for (const char *line = text; *line;) {
    const char *eol = strchr(line, '\n');
    char buf[2048];
    size_t n = (size_t)(eol - line);
    lineno++;
    if (n == 0 || n >= sizeof buf) return snprintf(err, errsize, "line %d: empty or too long", lineno), err;
    memcpy(buf, line, n);
    buf[n] = '\0';
    line = eol + 1;

    if (buf[0] == '#') {
      char name[128], rest[1024] = "";
      if (strncmp(buf, "# HELP ", 7) == 0 || strncmp(buf, "# TYPE ", 7) == 0) {
        bool help = buf[2] == 'H';
        if (sscanf(buf + 7, "%127s %1023[^\n]", name, rest) < 1) return snprintf(err, errsize, "line %d: bad comment", lineno), err;
        family_seen *f = find_family(fam, nfam, name);
        if (!f) {
          if (nfam == 64) return "too many families";
          f = &fam[nfam++];
          *f = (family_seen){0};
          snprintf(f->name, sizeof f->name, "%s", name);
        }
        if (f->has_samples) return snprintf(err, errsize, "line %d: %s after samples of %s", lineno, help ? "HELP" : "TYPE", name), err;
        if (help) {
          if (f->help) return snprintf(err, errsize, "line %d: second HELP for %s", lineno, name), err;
          f->help = true;
        } else {
          if (f->typed) return snprintf(err, errsize, "line %d: second TYPE for %s", lineno, name), err;
          if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram") && strcmp(rest, "summary") &&
              strcmp(rest, "untyped"))
            return snprintf(err, errsize, "line %d: unknown type '%s'", lineno, rest), err;
          f->typed = true;
          snprintf(f->type, sizeof f->type, "%.15s", rest);
        }
      }
      continue;
    }

    /* A sample: name{label="value",...} value */
    const char *p = buf;
    char name[128];
    size_t k = 0;
    if (!is_name_start((unsigned char)*p)) return snprintf(err, errsize, "line %d: bad metric name", lineno), err;
    while (is_name_char((unsigned char)*p) && k < sizeof name - 1) name[k++] = *p++;
    name[k] = '\0';
    char labels_wo_le[512] = "", le[64] = "";
    if (*p == '{') {
      p++;
      while (*p != '}') {
        char lname[64], lvalue[512];
        size_t a = 0, b = 0;
        if (!(isalpha((unsigned char)*p) || *p == '_')) return snprintf(err, errsize, "line %d: bad label name", lineno), err;
        while ((isalnum((unsigned char)*p) || *p == '_') && a < sizeof lname - 1) lname[a++] = *p++;
        lname[a] = '\0';
        if (p[0] != '=' || p[1] != '"') return snprintf(err, errsize, "line %d: label %s without =\"", lineno, lname), err;
        p += 2;
        while (*p != '"') {
          if (*p == '\0') return snprintf(err, errsize, "line %d: unterminated label value", lineno), err;
          if (*p == '\\') {
            if (p[1] != '\\' && p[1] != '"' && p[1] != 'n') return snprintf(err, errsize, "line %d: bad escape \\%c", lineno, p[1]), err;
            if (b < sizeof lvalue - 2) lvalue[b++] = *p, lvalue[b++] = p[1];
            p += 2;
          } else {
            if (b < sizeof lvalue - 1) lvalue[b++] = *p;
            p++;
          }
        }
        lvalue[b] = '\0';
        p++;
        if (strcmp(lname, "le") == 0) snprintf(le, sizeof le, "%.63s", lvalue);
        else {
          size_t used = strlen(labels_wo_le), ln = strlen(lname), vn = strlen(lvalue);
          if (used + ln + vn + 3 > sizeof labels_wo_le) return "labels too long for the checker";
          memcpy(labels_wo_le + used, lname, ln);
          labels_wo_le[used + ln] = '=';
          memcpy(labels_wo_le + used + ln + 1, lvalue, vn);
          memcpy(labels_wo_le + used + ln + 1 + vn, ";", 2);
        }
        if (*p == ',') p++;
        else if (*p != '}') return snprintf(err, errsize, "line %d: expected , or }", lineno), err;
      }
      p++;
    }
    if (*p != ' ') return snprintf(err, errsize, "line %d: no space before the value", lineno), err;
    p++;
    double value;
    char *end;
    if (strcmp(p, "+Inf") == 0) value = INFINITY;
    else if (strcmp(p, "-Inf") == 0) value = -INFINITY;
    else if (strcmp(p, "NaN") == 0) value = NAN;
    else {
      value = strtod(p, &end);
      if (end == p || *end != '\0') return snprintf(err, errsize, "line %d: bad value '%s'", lineno, p), err;
    }

    /* Which family: a histogram's samples carry _bucket/_sum/_count. */
    char base[128];
    snprintf(base, sizeof base, "%s", name);
    const char *suffix = "";
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    for (int i = 0; i < 3; i++) {
      size_t bl = strlen(name), sl = strlen(suffixes[i]);
      if (bl > sl && strcmp(name + bl - sl, suffixes[i]) == 0) {
        char cand[128];
        snprintf(cand, sizeof cand, "%.*s", (int)(bl - sl), name);
        family_seen *f = find_family(fam, nfam, cand);
        if (f && strcmp(f->type, "histogram") == 0) {
          snprintf(base, sizeof base, "%s", cand);
          suffix = suffixes[i];
        }
      }
    }
    family_seen *f = find_family(fam, nfam, base);
    if (!f || !f->typed || !f->help) return snprintf(err, errsize, "line %d: %s has no HELP/TYPE before it", lineno, name), err;
    f->has_samples = true;
    if (strcmp(f->type, "histogram") == 0) {
      char series[sizeof base + sizeof labels_wo_le + 2];
      snprintf(series, sizeof series, "%s{%s}", base, labels_wo_le);
      if (strcmp(suffix, "_bucket") == 0) {
        if (!le[0]) return snprintf(err, errsize, "line %d: bucket without le", lineno), err;
        double bound = strcmp(le, "+Inf") == 0 ? INFINITY : strtod(le, &end);
        if (strcmp(series, prev_series) != 0) {
          snprintf(prev_series, sizeof prev_series, "%s", series);
          prev_le = -INFINITY, prev_bucket = -1, inf_bucket = -1;
        }
        if (!(bound > prev_le)) return snprintf(err, errsize, "line %d: le %s after %s", lineno, le, prev_le_text), err;
        if (value < prev_bucket) return snprintf(err, errsize, "line %d: buckets not cumulative", lineno), err;
        prev_le = bound, prev_bucket = value;
        snprintf(prev_le_text, sizeof prev_le_text, "%s", le);
        if (isinf(bound)) inf_bucket = value;
      } else if (strcmp(suffix, "_count") == 0) {
        if (strcmp(series, prev_series) != 0 || inf_bucket < 0)
          return snprintf(err, errsize, "line %d: _count without +Inf bucket before it", lineno), err;
        if (value != inf_bucket) return snprintf(err, errsize, "line %d: _count %g != +Inf bucket %g", lineno, value, inf_bucket), err;
      } else if (strcmp(suffix, "") == 0) {
        return snprintf(err, errsize, "line %d: histogram sample without suffix", lineno), err;
      }
    }
  }
  for (int i = 0; i < nfam; i++)
    if (!fam[i].typed) return snprintf(err, errsize, "family %s has no TYPE", fam[i].name), err;
  return NULL;
}

static void assert_valid_exposition(const char *text) {
  char err[256];
  const char *problem = check_exposition(text, err, sizeof err);
  if (problem) {
    fprintf(stderr, "invalid exposition: %s\n---\n%s---\n", problem, text);
    fail_msg("invalid exposition: %s", problem);
  }
}

/* The value of the sample whose name and labels are exactly `series`; fails if absent. */
static double sample_value(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *line = text; *line;) {
    const char *eol = strchr(line, '\n');
    if (strncmp(line, series, n) == 0 && line[n] == ' ') return strtod(line + n + 1, NULL);
    line = eol + 1;
  }
  fail_msg("no sample '%s' in:\n%s", series, text);
  return NAN;
}

static bool has_line(const char *text, const char *expected) {
  size_t n = strlen(expected);
  for (const char *line = text; *line;) {
    const char *eol = strchr(line, '\n');
    if ((size_t)(eol - line) == n && strncmp(line, expected, n) == 0) return true;
    line = eol + 1;
  }
  return false;
}

/* ==== the checker checks itself ======================================================= */

static void test_checker_rejects_bad_text(void **state) {
  (void)state;
  char err[256];
  static const char *const bad[] = {
      "x 1\n",                                                                   /* no TYPE */
      "# HELP x h\n# TYPE x counter\nx 1\n# TYPE x counter\n",                   /* TYPE after samples */
      "# HELP x h\n# TYPE x counter\nx{a=\"b\\q\"} 1\n",                       /* bad escape */
      "# HELP x h\n# TYPE x counter\nx{a=\"b} 1\n",                             /* unterminated */
      "# HELP x h\n# TYPE x counter\nx one\n",                                   /* value */
      "# HELP x h\n# TYPE x counter\nx 1",                                       /* no final newline */
      "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
      "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
      "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 2\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (!check_exposition(bad[i], err, sizeof err)) fail_msg("checker accepted bad text %zu:\n%s", i, bad[i]);
  assert_null(check_exposition("# HELP x h\n# TYPE x counter\nx{a=\"\\\\\\\"\\n\"} 1\n", err, sizeof err));
}

/* ==== primitives ====================================================================== */

static void test_histogram_init_rejects_bad_bounds(void **state) {
  (void)state;
  metrics_histogram h;
  inferd_status st = {0};
  static const uint64_t descending[] = {5, 3};
  assert_int_equal(metrics_histogram_init(&h, descending, 2, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "bound 1 (3) is not above bound 0 (5)"));
  static const uint64_t repeated[] = {1, 4, 4}; /* a bucket that could never hold anything */
  assert_int_equal(metrics_histogram_init(&h, repeated, 3, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "bound 2 (4) is not above bound 1 (4)"));
  assert_int_equal(metrics_histogram_init(&h, descending, 0, &st), INFERD_INVALID_ARG);
  assert_int_equal(metrics_histogram_init(&h, descending, METRICS_MAX_BUCKETS + 1, &st), INFERD_INVALID_ARG);
  static const uint64_t ok[] = {1, 10};
  assert_int_equal(metrics_histogram_init(&h, ok, 2, &st), INFERD_OK);
  metrics_histogram_observe(&h, 0);
  metrics_histogram_observe(&h, 1);  /* le is inclusive */
  metrics_histogram_observe(&h, 2);
  metrics_histogram_observe(&h, 10);
  metrics_histogram_observe(&h, 11);
  assert_int_equal(atomic_load(&h.buckets[0]), 2);
  assert_int_equal(atomic_load(&h.buckets[1]), 2);
  assert_int_equal(atomic_load(&h.buckets[2]), 1);
  assert_int_equal(atomic_load(&h.sum), 24);
}

static void test_register_errors(void **state) {
  (void)state;
  metrics_registry *r = metrics_registry_new(&(metrics_registry_params){.hostname = "h"});
  assert_non_null(r);
  inferd_status st = {0};
  metrics_model *m = NULL, *again = NULL;
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = ""}, &m, &st), INFERD_INVALID_ARG);
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "a", .max_batch_size = -1}, &m, &st),
                   INFERD_INVALID_ARG);
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "a"}, &m, &st), INFERD_OK);
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "a", .version = "default"}, &again, &st),
                   INFERD_ALREADY_EXISTS);
  assert_null(again);
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "a", .version = "2"}, &again, &st), INFERD_OK);
  metrics_model_unregister(r, m);
  /* Unregistered, the name may come back. */
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "a"}, &m, &st), INFERD_OK);
  /* Detached (a model unregistered while its last requests finish), the name may come
   * back at once, the old series still take updates and are no longer rendered. */
  metrics_model *old = m;
  metrics_model_response(old, 200);
  metrics_model_detach(r, old);
  metrics_model_detach(r, old);
  metrics_model_response(old, 200);
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "a"}, &m, &st), INFERD_OK);
  metrics_buffer b = {0};
  assert_int_equal(metrics_render(r, NULL, 0, &b, &st), INFERD_OK);
  assert_null(strstr(b.data, "code=\"200\""));
  assert_non_null(strstr(b.data, "model_name=\"a\""));
  metrics_buffer_free(&b);
  metrics_model_unregister(r, old);
  metrics_registry_free(r); /* frees the two registered models */
}

/* ==== concurrency: exact counts ========================================================= */

enum { THREADS = 4, PER_THREAD = 100000 };

typedef struct shared {
  metrics_registry *r;
  metrics_model *m;
  metrics_counter counter;
  metrics_gauge gauge;
  _Atomic int running;
  _Atomic int renders;
  char render_error[256];
} shared;

static void *updater(void *arg) {
  shared *s = arg;
  for (int i = 0; i < PER_THREAD; i++) {
    metrics_counter_add(&s->counter, 1);
    metrics_gauge_add(&s->gauge, 1);
    metrics_model_queue_depth_add(s->m, 1);
    metrics_model_response(s->m, i % 10 == 0 ? 503 : 200);
    metrics_response(s->r, i % 10 == 0 ? 503 : 200);
    metrics_model_queue_time(s->m, (uint64_t)(i % 2000));
    metrics_model_inference_time(s->m, (uint64_t)(i % 7) * 1000);
    if (i % 2 == 0) { /* every other row is a whole request, answered */
      metrics_model_ts_request(s->m);
      metrics_model_ts_answered(s->m, (uint64_t)(i % 2000) + 3000, (uint64_t)(i % 2000));
    }
    metrics_model_batch(s->m, 1 + i % 8);
    metrics_model_queue_depth_add(s->m, -1);
  }
  return NULL;
}

/* Renders again and again while the updaters run; each rendering must be valid. */
static void *scraper(void *arg) {
  shared *s = arg;
  while (atomic_load(&s->running)) {
    metrics_buffer b = {0};
    inferd_status st = {0};
    if (metrics_render(s->r, NULL, 0, &b, &st) != INFERD_OK) snprintf(s->render_error, sizeof s->render_error, "%.200s", st.message);
    char err[256];
    const char *problem = check_exposition(b.data, err, sizeof err);
    if (problem && !s->render_error[0]) snprintf(s->render_error, sizeof s->render_error, "%s", problem);
    metrics_buffer_free(&b);
    atomic_fetch_add(&s->renders, 1);
  }
  return NULL;
}

static void test_concurrent_updates_are_exact(void **state) {
  (void)state;
  shared s = {0};
  s.r = metrics_registry_new(&(metrics_registry_params){.hostname = "h"});
  inferd_status st = {0};
  assert_int_equal(metrics_model_register(s.r, &(metrics_model_params){.name = "m", .max_batch_size = 8}, &s.m, &st), INFERD_OK);
  atomic_store(&s.running, 1);
  pthread_t threads[THREADS], scrape;
  assert_int_equal(pthread_create(&scrape, NULL, scraper, &s), 0);
  for (int t = 0; t < THREADS; t++) assert_int_equal(pthread_create(&threads[t], NULL, updater, &s), 0);
  for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  atomic_store(&s.running, 0);
  pthread_join(scrape, NULL);
  if (s.render_error[0]) fail_msg("a rendering during updates was invalid: %s", s.render_error);
  assert_true(atomic_load(&s.renders) > 0);

  const uint64_t total = (uint64_t)THREADS * PER_THREAD;
  assert_int_equal(metrics_counter_get(&s.counter), total);
  assert_int_equal(metrics_gauge_get(&s.gauge), (int64_t)total);

  metrics_buffer b = {0};
  assert_int_equal(metrics_render(s.r, NULL, 0, &b, &st), INFERD_OK);
  assert_valid_exposition(b.data);
  const char *t = b.data;
  const double errors = THREADS * (PER_THREAD / 10), oks = (double)total - errors;
  assert_true(sample_value(t, "inferd_requests_total{model_name=\"m\",model_version=\"default\",code=\"200\"}") == oks);
  assert_true(sample_value(t, "inferd_requests_total{model_name=\"m\",model_version=\"default\",code=\"503\"}") == errors);
  assert_true(sample_value(t, "Requests2XX{Level=\"Host\",Hostname=\"h\"}") == oks);
  assert_true(sample_value(t, "Requests5XX{Level=\"Host\",Hostname=\"h\"}") == errors);
  assert_true(sample_value(t, "Requests4XX{Level=\"Host\",Hostname=\"h\"}") == 0);
  assert_true(sample_value(t, "inferd_queue_depth{model_name=\"m\",model_version=\"default\"}") == 0);

  /* Queue times i % 2000 us: each thread observes 0..1999 fifty times. */
  const double queue_sum_us = THREADS * 50.0 * (1999.0 * 2000.0 / 2.0);
  /* TorchServe's counters: the even i, whose i % 2000 are 0, 2, .., 1998 fifty times */
  const double ts_queue_us = THREADS * 50.0 * (999.0 * 1000.0);
  assert_true(sample_value(t, "ts_queue_latency_microseconds{model_name=\"m\",model_version=\"default\"}") == ts_queue_us);
  assert_true(sample_value(t, "ts_inference_latency_microseconds{model_name=\"m\",model_version=\"default\"}") ==
              ts_queue_us + total / 2 * 3000.0);
  assert_true(sample_value(t, "inferd_queue_latency_milliseconds_sum{model_name=\"m\",model_version=\"default\"}") ==
              queue_sum_us / 1000.0);
  assert_true(sample_value(t, "inferd_queue_latency_milliseconds_count{model_name=\"m\",model_version=\"default\"}") == (double)total);
  /* le=0.1 ms holds 0..100 us: 101 values per 2000. */
  assert_true(sample_value(t, "inferd_queue_latency_milliseconds_bucket{model_name=\"m\",model_version=\"default\",le=\"0.1\"}") ==
              THREADS * 50.0 * 101);
  /* le=1 ms holds 0..1000 us. */
  assert_true(sample_value(t, "inferd_queue_latency_milliseconds_bucket{model_name=\"m\",model_version=\"default\",le=\"1\"}") ==
              THREADS * 50.0 * 1001);
  /* Batch sizes 1..8, each an eighth of the batches; le="3" holds 1..3. */
  assert_true(sample_value(t, "inferd_batch_size_bucket{model_name=\"m\",model_version=\"default\",le=\"3\"}") == total / 8.0 * 3);
  assert_true(sample_value(t, "inferd_batch_size_sum{model_name=\"m\",model_version=\"default\"}") == total / 8.0 * 36);
  /* Requests, not rows: half of them. */
  assert_true(sample_value(t, "ts_inference_requests_total{model_name=\"m\",model_version=\"default\"}") == total / 2.0);
  double infer_sum_ms = 0;
  for (int i = 0; i < PER_THREAD; i++) infer_sum_ms += i % 7;
  assert_true(sample_value(t, "inferd_inference_latency_milliseconds_sum{model_name=\"m\",model_version=\"default\"}") ==
              THREADS * infer_sum_ms);
  metrics_buffer_free(&b);
  metrics_registry_free(s.r);
}

/* ==== exposition of a known state ===================================================== */

static void test_exposition_of_known_state(void **state) {
  (void)state;
  metrics_registry *r = metrics_registry_new(&(metrics_registry_params){.hostname = "box-1"});
  inferd_status st = {0};
  metrics_model *a = NULL, *weird = NULL;
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "resnet-152", .version = "1.0", .max_batch_size = 4}, &a, &st),
                   INFERD_OK);
  /* A name with every character that needs escaping, and a byte that is not UTF-8. */
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "we\"ird\\na\nme\xff"}, &weird, &st), INFERD_OK);

  metrics_response(r, 200);
  metrics_response(r, 200);
  metrics_response(r, 404);
  metrics_response(r, 503);
  metrics_response(r, 302); /* not counted: TorchServe has no 3XX series */
  metrics_model_response(a, 200);
  metrics_model_response(a, 200);
  metrics_model_response(a, 503);
  metrics_model_response(a, 42); /* not an HTTP status: code="other" */
  metrics_model_queue_time(a, 300);
  metrics_model_queue_time(a, 1500);
  metrics_model_inference_time(a, 20000);
  metrics_model_inference_time(a, 20001);
  metrics_model_ts_request(a);
  metrics_model_ts_request(a);
  metrics_model_ts_answered(a, 20000, 300);
  metrics_model_ts_answered(a, 20001, 1500);
  metrics_model_batch(a, 2);
  metrics_model_batch(a, 5); /* above max_batch_size: only in +Inf */
  metrics_model_queue_depth_add(a, 3);
  metrics_model_queue_depth_add(a, -1);
  metrics_model_set_workers(a, 2);
  metrics_model_set_memory(a, 123456789);
  metrics_model_set_workers(weird, 1);

  metrics_buffer b = {0};
  assert_int_equal(metrics_render(r, NULL, 0, &b, &st), INFERD_OK);
  assert_valid_exposition(b.data);
  assert_int_equal(strlen(b.data), b.length);

#define A "{model_name=\"resnet-152\",model_version=\"1.0\""
#define W "{model_name=\"we\\\"ird\\\\na\\nme\xEF\xBF\xBD\",model_version=\"default\""
  static const char *const expected[] = {
      "# HELP Requests2XX Responses with a 2xx status code.",
      "# TYPE Requests2XX counter",
      "Requests2XX{Level=\"Host\",Hostname=\"box-1\"} 2",
      "Requests4XX{Level=\"Host\",Hostname=\"box-1\"} 1",
      "Requests5XX{Level=\"Host\",Hostname=\"box-1\"} 1",
      "# TYPE ts_inference_requests_total counter",
      "ts_inference_requests_total" A "} 2",
      "ts_inference_requests_total" W "} 0",
      "# TYPE ts_inference_latency_microseconds counter",
      "ts_inference_latency_microseconds" A "} 40001",
      "ts_queue_latency_microseconds" A "} 1800",
      "# TYPE inferd_requests_total counter",
      "inferd_requests_total" A ",code=\"200\"} 2",
      "inferd_requests_total" A ",code=\"503\"} 1",
      "inferd_requests_total" A ",code=\"other\"} 1",
      "# TYPE inferd_queue_latency_milliseconds histogram",
      "inferd_queue_latency_milliseconds_bucket" A ",le=\"0.1\"} 0",
      "inferd_queue_latency_milliseconds_bucket" A ",le=\"0.25\"} 0",
      "inferd_queue_latency_milliseconds_bucket" A ",le=\"0.5\"} 1",
      "inferd_queue_latency_milliseconds_bucket" A ",le=\"1\"} 1",
      "inferd_queue_latency_milliseconds_bucket" A ",le=\"2.5\"} 2",
      "inferd_queue_latency_milliseconds_bucket" A ",le=\"10000\"} 2",
      "inferd_queue_latency_milliseconds_bucket" A ",le=\"+Inf\"} 2",
      "inferd_queue_latency_milliseconds_sum" A "} 1.8",
      "inferd_queue_latency_milliseconds_count" A "} 2",
      "inferd_inference_latency_milliseconds_bucket" A ",le=\"10\"} 0",
      "inferd_inference_latency_milliseconds_bucket" A ",le=\"25\"} 2",
      "inferd_inference_latency_milliseconds_sum" A "} 40.001",
      "inferd_inference_latency_milliseconds_sum" W "} 0",
      "# TYPE inferd_batch_size histogram",
      "inferd_batch_size_bucket" A ",le=\"1\"} 0",
      "inferd_batch_size_bucket" A ",le=\"2\"} 1",
      "inferd_batch_size_bucket" A ",le=\"3\"} 1",
      "inferd_batch_size_bucket" A ",le=\"4\"} 1",
      "inferd_batch_size_bucket" A ",le=\"+Inf\"} 2",
      "inferd_batch_size_sum" A "} 7",
      "inferd_batch_size_count" A "} 2",
      "inferd_batch_size_bucket" W ",le=\"1\"} 0",
      "inferd_batch_size_bucket" W ",le=\"+Inf\"} 0",
      "# TYPE inferd_queue_depth gauge",
      "inferd_queue_depth" A "} 2",
      "inferd_workers" A "} 2",
      "inferd_workers" W "} 1",
      "inferd_model_memory_bytes" A "} 123456789",
  };
#undef A
#undef W
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
    if (!has_line(b.data, expected[i])) fail_msg("missing line:\n  %s\nin:\n%s", expected[i], b.data);
  /* No status code other than those seen; the 3XX response is nowhere. */
  assert_null(strstr(b.data, "code=\"404\""));
  assert_null(strstr(b.data, "Requests3XX"));
  /* Families appear once each, in the table's order, with both models under each. */
  const char *first = strstr(b.data, "# TYPE ts_inference_requests_total"), *last = strstr(b.data, "# TYPE inferd_model_memory_bytes");
  assert_true(first && last && first < last);
  metrics_buffer_free(&b);

  /* Unregistered models disappear; with none left, only the host series remain. */
  metrics_model_unregister(r, a);
  metrics_model_unregister(r, weird);
  assert_int_equal(metrics_render(r, NULL, 0, &b, &st), INFERD_OK);
  assert_valid_exposition(b.data);
  assert_null(strstr(b.data, "model_name"));
  assert_null(strstr(b.data, "ts_inference")); /* not even the families' HELP and TYPE lines */
  assert_null(strstr(b.data, "inferd_"));
  assert_non_null(strstr(b.data, "Requests2XX{Level=\"Host\",Hostname=\"box-1\"} 2\n"));
  metrics_buffer_free(&b);
  metrics_registry_free(r);
}

/* With a queue-depth source the gauge is whatever the source says at render time (the
 * scheduler's real queue), whatever the increments were; without one, the increments. */
static int64_t fake_depth(void *ctx) { return *(const int64_t *)ctx; }

static void test_queue_depth_source(void **state) {
  (void)state;
  metrics_registry *r = metrics_registry_new(&(metrics_registry_params){.hostname = "box-1"});
  inferd_status st = {0};
  metrics_model *a = NULL;
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "m", .version = "1"}, &a, &st), INFERD_OK);
  const char *series = "inferd_queue_depth{model_name=\"m\",model_version=\"1\"} ";
  const char *workers_series = "inferd_workers{model_name=\"m\",model_version=\"1\"} ";
  metrics_model_queue_depth_add(a, 2); /* two submits whose requests never came out through a batch */
  int64_t depth = 0;
  metrics_model_set_workers(a, 3); /* what a registration asked for */
  metrics_model_set_sources(r, a, fake_depth, fake_depth, &depth);
  const int64_t seen[] = {0, 5, 0};
  for (size_t i = 0; i < sizeof seen / sizeof *seen; i++) {
    depth = seen[i];
    metrics_buffer b = {0};
    assert_int_equal(metrics_render(r, NULL, 0, &b, &st), INFERD_OK);
    assert_valid_exposition(b.data);
    const char *at = strstr(b.data, series);
    assert_non_null(at);
    assert_int_equal(strtoll(at + strlen(series), NULL, 10), seen[i]);
    at = strstr(b.data, workers_series);
    assert_non_null(at);
    assert_int_equal(strtoll(at + strlen(workers_series), NULL, 10), seen[i]);
    metrics_buffer_free(&b);
  }
  metrics_model_set_sources(r, a, NULL, NULL, NULL);
  metrics_buffer b = {0};
  assert_int_equal(metrics_render(r, NULL, 0, &b, &st), INFERD_OK);
  const char *at = strstr(b.data, series);
  assert_non_null(at);
  assert_int_equal(strtoll(at + strlen(series), NULL, 10), 2);
  at = strstr(b.data, workers_series); /* back to the stored count */
  assert_non_null(at);
  assert_int_equal(strtoll(at + strlen(workers_series), NULL, 10), 3);
  metrics_buffer_free(&b);
  metrics_registry_free(r);
}

static void test_large_batch_bounds(void **state) {
  (void)state;
  metrics_registry *r = metrics_registry_new(NULL);
  inferd_status st = {0};
  metrics_model *m = NULL;
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "big", .max_batch_size = 100}, &m, &st), INFERD_OK);
  metrics_model_batch(m, 100);
  metrics_model_batch(m, 65);
  metrics_buffer b = {0};
  assert_int_equal(metrics_render(r, NULL, 0, &b, &st), INFERD_OK);
  assert_valid_exposition(b.data);
  /* Powers of two, then the maximum. */
  assert_true(sample_value(b.data, "inferd_batch_size_bucket{model_name=\"big\",model_version=\"default\",le=\"64\"}") == 0);
  assert_true(sample_value(b.data, "inferd_batch_size_bucket{model_name=\"big\",model_version=\"default\",le=\"100\"}") == 2);
  assert_null(strstr(b.data, "le=\"65\""));
  metrics_buffer_free(&b);
  metrics_registry_free(r);

  /* METRICS_MAX_BUCKETS is the largest size with a bucket per batch size; a power of two
   * above it is the last bound once, not twice. */
  static const struct {
    int max_batch_size;
    const char *has, *lacks;
  } edges[] = {
      {METRICS_MAX_BUCKETS, "le=\"63\"", "le=\"65\""},
      {2 * METRICS_MAX_BUCKETS, "le=\"128\"", "le=\"127\""},
  };
  for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) {
    r = metrics_registry_new(NULL);
    metrics_model_params params = {.name = "big", .max_batch_size = edges[i].max_batch_size};
    inferd_code rc = metrics_model_register(r, &params, &m, &st);
    if (rc != INFERD_OK) fail_msg("max_batch_size %d: %s", edges[i].max_batch_size, st.message);
    assert_int_equal(metrics_render(r, NULL, 0, &b, &st), INFERD_OK);
    assert_valid_exposition(b.data);
    if (!strstr(b.data, edges[i].has) || strstr(b.data, edges[i].lacks))
      fail_msg("max_batch_size %d: want %s and no %s in:\n%s", edges[i].max_batch_size, edges[i].has, edges[i].lacks,
               b.data);
    metrics_buffer_free(&b);
    metrics_registry_free(r);
  }
}

/* The host counters take 200..299, 400..499 and 500..599 and nothing else; a model's
 * code series has a slot for each of 100..599 and "other" outside. */
static void test_status_code_edges(void **state) {
  (void)state;
  metrics_registry *r = metrics_registry_new(&(metrics_registry_params){.hostname = "h"});
  inferd_status st = {0};
  metrics_model *m = NULL;
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "m"}, &m, &st), INFERD_OK);
  static const int statuses[] = {199, 200, 299, 300, 399, 400, 499, 500, 599, 600};
  for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++) metrics_response(r, statuses[i]);
  static const int model_statuses[] = {99, 100, 599, 600};
  for (size_t i = 0; i < sizeof model_statuses / sizeof *model_statuses; i++)
    metrics_model_response(m, model_statuses[i]);
  metrics_buffer b = {0};
  assert_int_equal(metrics_render(r, NULL, 0, &b, &st), INFERD_OK);
  assert_valid_exposition(b.data);
  static const char *const expected[] = {
      "Requests2XX{Level=\"Host\",Hostname=\"h\"} 2",
      "Requests4XX{Level=\"Host\",Hostname=\"h\"} 2",
      "Requests5XX{Level=\"Host\",Hostname=\"h\"} 2",
      "inferd_requests_total{model_name=\"m\",model_version=\"default\",code=\"100\"} 1",
      "inferd_requests_total{model_name=\"m\",model_version=\"default\",code=\"599\"} 1",
      "inferd_requests_total{model_name=\"m\",model_version=\"default\",code=\"other\"} 2",
  };
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
    if (!has_line(b.data, expected[i])) fail_msg("missing line:\n  %s\nin:\n%s", expected[i], b.data);
  metrics_buffer_free(&b);
  metrics_registry_free(r);
}

/* A label value with overlong UTF-8 (a 3-byte NUL, a 4-byte U+FFFF): each invalid byte
 * becomes U+FFFD, as any other invalid byte does. */
static void test_overlong_utf8_label(void **state) {
  (void)state;
  metrics_registry *r = metrics_registry_new(&(metrics_registry_params){.hostname = "h"});
  inferd_status st = {0};
  metrics_model *m = NULL;
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "a\xE0\x80\x80" "b\xF0\x8F\xBF\xBF"}, &m,
                                          &st), INFERD_OK);
  metrics_buffer b = {0};
  assert_int_equal(metrics_render(r, NULL, 0, &b, &st), INFERD_OK);
  assert_valid_exposition(b.data);
#define R "\xEF\xBF\xBD"
  const char *want = "inferd_workers{model_name=\"a" R R R "b" R R R R "\",model_version=\"default\"} 0";
#undef R
  if (!has_line(b.data, want)) fail_msg("missing line:\n  %s\nin:\n%s", want, b.data);
  metrics_buffer_free(&b);
  metrics_registry_free(r);
}

/* GET /metrics?name[]=...: only the families named, by their own name or, for a
 * histogram, one of its series' names; a prefix or an unknown name selects nothing. */
static void test_render_filter(void **state) {
  (void)state;
  metrics_registry *r = metrics_registry_new(&(metrics_registry_params){.hostname = "h"});
  inferd_status st = {0};
  metrics_model *m = NULL;
  assert_int_equal(metrics_model_register(r, &(metrics_model_params){.name = "m", .max_batch_size = 4}, &m, &st), INFERD_OK);
  metrics_model_batch(m, 3);
  static const struct {
    const char *names[3];
    size_t count;
    const char *has, *lacks[3];
  } cases[] = {
      {{"Requests4XX"}, 1, "Requests4XX{", {"Requests2XX", "Requests5XX", "ts_inference"}},
      {{"inferd_batch_size_count", "nope"}, 2, "inferd_batch_size_bucket{", {"Requests2XX", "inferd_workers", "ts_"}},
      {{"inferd_workers", "ts_inference_requests_total"}, 2, "ts_inference_requests_total{",
       {"inferd_batch_size", "Requests2XX", "inferd_queue"}},
      {{"inferd_batch", "Requests4XX_count", "inferd_workers_sum"}, 3, NULL, {"# TYPE", "Requests", "inferd_"}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    metrics_buffer b = {0};
    assert_int_equal(metrics_render(r, cases[i].names, cases[i].count, &b, &st), INFERD_OK);
    if (cases[i].has) {
      assert_valid_exposition(b.data);
      if (!strstr(b.data, cases[i].has)) fail_msg("case %zu lacks '%s':\n%s", i, cases[i].has, b.data);
    } else if (b.length != 0) {
      fail_msg("case %zu selects nothing, got:\n%s", i, b.data);
    }
    for (int k = 0; k < 3; k++)
      if (b.data && strstr(b.data, cases[i].lacks[k])) fail_msg("case %zu has '%s':\n%s", i, cases[i].lacks[k], b.data);
    metrics_buffer_free(&b);
  }
  metrics_registry_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_checker_rejects_bad_text),
      cmocka_unit_test(test_histogram_init_rejects_bad_bounds),
      cmocka_unit_test(test_register_errors),
      cmocka_unit_test(test_concurrent_updates_are_exact),
      cmocka_unit_test(test_exposition_of_known_state),
      cmocka_unit_test(test_large_batch_bounds),
      cmocka_unit_test(test_render_filter),
      cmocka_unit_test(test_status_code_edges),
      cmocka_unit_test(test_overlong_utf8_label),
      cmocka_unit_test(test_queue_depth_source),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
