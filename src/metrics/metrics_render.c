/*
 * metrics_render.c - Prometheus text exposition (format 0.0.4) of the registry.
 *
 * DESIGN
 * One table lists every family in the order it is written: name, type, help and what
 * series it shows. Per family: "# HELP", "# TYPE", then one sample per model (in
 * registration order), so that each family appears once however many models there
 * are. Families of models are left out while no model is registered.
 *
 *   name                                    type       labels                         TorchServe
 *   Requests2XX / Requests4XX / Requests5XX counter    Level="Host",Hostname          same name
 *   ts_inference_requests_total             counter    model_name,model_version       same name (no uuid)
 *   ts_inference_latency_microseconds       counter    model_name,model_version       same name
 *   ts_queue_latency_microseconds           counter    model_name,model_version       same name
 *   inferd_requests_total                   counter    model_name,model_version,code  -
 *   inferd_queue_latency_milliseconds       histogram  model_name,model_version       - (QueueTime is a gauge there)
 *   inferd_inference_latency_milliseconds   histogram  model_name,model_version       -
 *   inferd_batch_size                       histogram  model_name,model_version       -
 *   inferd_queue_depth                      gauge      model_name,model_version       -
 *   inferd_workers                          gauge      model_name,model_version       -
 *   inferd_model_memory_bytes               gauge      model_name,model_version       -
 *
 * The three ts_* counters are TorchServe's "legacy" Prometheus metrics, with its
 * meanings: ts_inference_requests_total counts HTTP inference requests whose input was
 * read and decoded, as they go to the queue (a v2 infer of n rows is one; a body that
 * does not parse or an image that does not decode is not);
 * ts_inference_latency_microseconds adds, per request answered with success, the time
 * from its arrival to its answer (queue and run included), and
 * ts_queue_latency_microseconds the part of it spent waiting for a worker. The
 * inferd_* latency histograms are per row of a batch that ran without error and time
 * the queue and the batch's run apart; inferd_batch_size counts failed batches too.
 * inferd_requests_total shows only the codes seen so far (as a client library creates
 * labelled children lazily).
 *
 * Values are integers held in atomics; latencies are kept in microseconds and written
 * in milliseconds as exact decimals ("2.5", "1234.567"), never through a double.
 * Label values are escaped (backslash, double quote, newline) and invalid UTF-8 bytes
 * become U+FFFD, so a model name can never break the format.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "metrics/metrics_internal.h"

/* ---- buffer --------------------------------------------------------------------------- */

void metrics_buffer_free(metrics_buffer *b) {
  free(b->data);
  *b = (metrics_buffer){0};
}

typedef struct writer {
  metrics_buffer *out;
  int failed; /* sticky: the buffer could not grow */
} writer;

static int reserve(writer *w, size_t more) {
  metrics_buffer *b = w->out;
  if (w->failed) return -1;
  if (b->length + more + 1 <= b->capacity) return 0;
  size_t cap = b->capacity ? b->capacity : 4096;
  while (cap < b->length + more + 1) cap *= 2;
  char *p = realloc(b->data, cap);
  if (!p) {
    w->failed = 1;
    return -1;
  }
  b->data = p;
  b->data[b->length] = '\0'; /* a render that selects nothing is still a string */
  b->capacity = cap;
  return 0;
}

static void put(writer *w, const char *s, size_t n) {
  if (reserve(w, n)) return;
  memcpy(w->out->data + w->out->length, s, n);
  w->out->length += n;
  w->out->data[w->out->length] = '\0';
}

static void puts_(writer *w, const char *s) { put(w, s, strlen(s)); }

static void printf_(writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void printf_(writer *w, const char *fmt, ...) {
  char small[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof small) {
    put(w, small, (size_t)n);
    return;
  }
  if (reserve(w, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(w->out->data + w->out->length, (size_t)n + 1, fmt, ap);
  va_end(ap);
  w->out->length += (size_t)n;
}

/* ---- escaping and numbers ----------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 if invalid. */
static size_t utf8_length(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len;
  unsigned min;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
  else return 0;
  if (n < len) return 0;
  unsigned cp = c & (0x7F >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

/* A label value between double quotes: \ " and newline escaped, bad UTF-8 replaced. */
static void put_label_value(writer *w, const char *value) {
  const unsigned char *s = (const unsigned char *)value;
  size_t n = strlen(value);
  put(w, "\"", 1);
  for (size_t i = 0; i < n;) {
    if (s[i] == '\\') put(w, "\\\\", 2), i++;
    else if (s[i] == '"') put(w, "\\\"", 2), i++;
    else if (s[i] == '\n') put(w, "\\n", 2), i++;
    else {
      size_t len = utf8_length(s + i, n - i);
      if (len) put(w, (const char *)s + i, len), i += len;
      else put(w, "\xEF\xBF\xBD", 3), i++;
    }
  }
  put(w, "\"", 1);
}

/* value / scale as an exact decimal without trailing zeros: 2500/1000 -> "2.5". scale is
 * a power of ten; buf has room for any uint64 (48 bytes). Returns the length. */
static int format_decimal(char buf[48], uint64_t value, uint64_t scale) {
  int n = snprintf(buf, 48, "%llu", (unsigned long long)(value / scale));
  uint64_t frac = value % scale;
  if (frac) {
    int digits = 0;
    for (uint64_t s = scale; s > 1; s /= 10) digits++;
    n += snprintf(buf + n, 48 - (size_t)n, ".%0*llu", digits, (unsigned long long)frac);
    while (buf[n - 1] == '0') buf[--n] = '\0';
  }
  return n;
}

static void put_decimal(writer *w, uint64_t value, uint64_t scale) {
  char buf[48];
  put(w, buf, (size_t)format_decimal(buf, value, scale));
}

/* ---- families ------------------------------------------------------------------------------- */

typedef enum {
  SERIES_TS_REQUESTS,  /* HTTP inference requests */
  SERIES_TS_INFER_US,  /* arrival to answer of the successful ones, microseconds */
  SERIES_TS_QUEUE_US,  /* the part of it in the queue, microseconds */
  SERIES_BY_STATUS,    /* requests by HTTP status code */
  SERIES_QUEUE_HIST,
  SERIES_INFER_HIST,
  SERIES_BATCH_HIST,
  SERIES_QUEUE_DEPTH,
  SERIES_WORKERS,
  SERIES_MEMORY,
} series_kind;

static const struct family {
  const char *name, *type, *help;
  series_kind kind;
} model_families[] = {
    {"ts_inference_requests_total", "counter", "Total number of inference requests.", SERIES_TS_REQUESTS},
    {"ts_inference_latency_microseconds", "counter", "Cumulative inference duration in microseconds.", SERIES_TS_INFER_US},
    {"ts_queue_latency_microseconds", "counter", "Cumulative queue duration in microseconds.", SERIES_TS_QUEUE_US},
    {"inferd_requests_total", "counter", "Responses to requests for a model, by HTTP status code.", SERIES_BY_STATUS},
    {"inferd_queue_latency_milliseconds", "histogram", "Time from a request's acceptance until a worker takes it, in milliseconds (rows of batches that succeeded).", SERIES_QUEUE_HIST},
    {"inferd_inference_latency_milliseconds", "histogram", "Time a request's batch spent running in a worker, in milliseconds (batches that succeeded).", SERIES_INFER_HIST},
    {"inferd_batch_size", "histogram", "Requests per batch run.", SERIES_BATCH_HIST},
    {"inferd_queue_depth", "gauge", "Requests waiting in the model's queue.", SERIES_QUEUE_DEPTH},
    {"inferd_workers", "gauge", "Worker threads running the model.", SERIES_WORKERS},
    {"inferd_model_memory_bytes", "gauge", "Memory held by the model's weights (one copy, shared by its workers), in bytes.", SERIES_MEMORY},
};

static void put_header(writer *w, const char *name, const char *type, const char *help) {
  printf_(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{model_name="..",model_version=".."[,extra="value"]} */
static void put_series_name(writer *w, const char *name, const char *suffix, const metrics_model *m, const char *extra,
                            const char *extra_value) {
  puts_(w, name);
  puts_(w, suffix);
  puts_(w, "{model_name=");
  put_label_value(w, m->name);
  puts_(w, ",model_version=");
  put_label_value(w, m->version);
  if (extra) {
    printf_(w, ",%s=", extra);
    put_label_value(w, extra_value);
  }
  puts_(w, "} ");
}

static uint64_t load(const _Atomic uint64_t *v) { return atomic_load_explicit((_Atomic uint64_t *)v, memory_order_relaxed); }

static void put_histogram(writer *w, const char *name, const metrics_model *m, const metrics_histogram *h,
                          uint64_t scale) {
  uint64_t cumulative = 0;
  for (int i = 0; i <= h->bound_count; i++) {
    cumulative += load(&h->buckets[i]);
    char le[48];
    if (i < h->bound_count) format_decimal(le, h->bounds[i], scale);
    else snprintf(le, sizeof le, "+Inf");
    put_series_name(w, name, "_bucket", m, "le", le);
    printf_(w, "%llu\n", (unsigned long long)cumulative);
  }
  put_series_name(w, name, "_sum", m, NULL, NULL);
  put_decimal(w, load(&h->sum), scale);
  put(w, "\n", 1);
  put_series_name(w, name, "_count", m, NULL, NULL);
  printf_(w, "%llu\n", (unsigned long long)cumulative); /* the +Inf bucket, read once */
}

static void put_model_series(writer *w, const struct family *f, const metrics_model *m) {
  switch (f->kind) {
  case SERIES_TS_REQUESTS:
  case SERIES_TS_INFER_US:
  case SERIES_TS_QUEUE_US: {
    const metrics_counter *c = f->kind == SERIES_TS_REQUESTS   ? &m->ts_requests
                               : f->kind == SERIES_TS_INFER_US ? &m->ts_inference_us
                                                               : &m->ts_queue_us;
    put_series_name(w, f->name, "", m, NULL, NULL);
    printf_(w, "%llu\n", (unsigned long long)metrics_counter_get(c));
    break;
  }
  case SERIES_BY_STATUS:
    for (int i = 0; i < METRICS__STATUS_SLOTS; i++) {
      uint64_t n = metrics_counter_get(&m->responses[i]);
      if (!n) continue;
      char code[16];
      if (i == METRICS__STATUS_SLOTS - 1) snprintf(code, sizeof code, "other");
      else snprintf(code, sizeof code, "%d", METRICS__STATUS_FIRST + i);
      put_series_name(w, f->name, "", m, "code", code);
      printf_(w, "%llu\n", (unsigned long long)n);
    }
    break;
  case SERIES_QUEUE_HIST: put_histogram(w, f->name, m, &m->queue_latency, 1000); break;
  case SERIES_INFER_HIST: put_histogram(w, f->name, m, &m->inference_latency, 1000); break;
  case SERIES_BATCH_HIST: put_histogram(w, f->name, m, &m->batch_size, 1); break;
  case SERIES_QUEUE_DEPTH: /* the registry's lock is held: the source cannot change */
    put_series_name(w, f->name, "", m, NULL, NULL);
    printf_(w, "%lld\n", (long long)(m->queue_depth_fn ? m->queue_depth_fn(m->source_ctx)
                                                         : metrics_gauge_get(&m->queue_depth)));
    break;
  case SERIES_WORKERS: /* as the queue depth */
    put_series_name(w, f->name, "", m, NULL, NULL);
    printf_(w, "%lld\n", (long long)(m->workers_fn ? m->workers_fn(m->source_ctx) : metrics_gauge_get(&m->workers)));
    break;
  case SERIES_MEMORY:
    put_series_name(w, f->name, "", m, NULL, NULL);
    printf_(w, "%lld\n", (long long)metrics_gauge_get(&m->memory_bytes));
    break;
  }
}

/* Is the family `name` of `type` among names[0..count)? All are when count is 0. */
static bool wanted(const char *const *names, size_t count, const char *name, const char *type) {
  if (count == 0) return true;
  size_t len = strlen(name);
  bool histogram = strcmp(type, "histogram") == 0;
  for (size_t i = 0; i < count; i++) {
    if (strncmp(names[i], name, len) != 0) continue;
    const char *suffix = names[i] + len;
    if (*suffix == '\0' ||
        (histogram && (!strcmp(suffix, "_bucket") || !strcmp(suffix, "_sum") || !strcmp(suffix, "_count"))))
      return true;
  }
  return false;
}

static void put_host_counter(writer *w, const metrics_registry *r, const char *name, const char *help,
                             const metrics_counter *c) {
  put_header(w, name, "counter", help);
  puts_(w, name);
  puts_(w, "{Level=\"Host\",Hostname=");
  put_label_value(w, r->hostname);
  printf_(w, "} %llu\n", (unsigned long long)metrics_counter_get(c));
}

inferd_code metrics_render(metrics_registry *r, const char *const *names, size_t count, metrics_buffer *out,
                           inferd_status *st) {
  const struct {
    const char *name, *help;
    const metrics_counter *counter;
  } host[] = {
      {"Requests2XX", "Responses with a 2xx status code.", &r->responses_2xx},
      {"Requests4XX", "Responses with a 4xx status code.", &r->responses_4xx},
      {"Requests5XX", "Responses with a 5xx status code.", &r->responses_5xx},
  };
  writer w = {.out = out};
  if (reserve(&w, 0)) return core_fail(st, INFERD_NO_MEMORY, "metrics: out of memory");
  for (size_t h = 0; h < CORE_ARRAY_LEN(host); h++)
    if (wanted(names, count, host[h].name, "counter"))
      put_host_counter(&w, r, host[h].name, host[h].help, host[h].counter);
  pthread_mutex_lock(&r->lock);
  if (r->models)
    for (size_t f = 0; f < CORE_ARRAY_LEN(model_families); f++) {
      if (!wanted(names, count, model_families[f].name, model_families[f].type)) continue;
      put_header(&w, model_families[f].name, model_families[f].type, model_families[f].help);
      for (const metrics_model *m = r->models; m; m = m->next) put_model_series(&w, &model_families[f], m);
    }
  pthread_mutex_unlock(&r->lock);
  if (w.failed) return core_fail(st, INFERD_NO_MEMORY, "metrics: out of memory while rendering");
  return INFERD_OK;
}
