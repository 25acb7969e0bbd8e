/*
 * metrics.h - counters, gauges and histograms, and their Prometheus text exposition.
 *
 * Two layers:
 *   - primitives (metrics_counter, metrics_gauge, metrics_histogram): C11 atomics that
 *     any number of threads update at once, without a lock and without allocating;
 *   - a registry of the server's series: host-wide response counters and, per model
 *     (registered at model load), requests by status code, queue and inference latency
 *     histograms, a batch-size histogram, queue depth, workers and model memory.
 *     metrics_render writes them all in the Prometheus text format 0.0.4.
 *
 * Names (see metrics_render.c for the full list): TorchServe's where it has one with the
 * same meaning, so that existing dashboards keep working (ts_inference_requests_total,
 * ts_inference_latency_microseconds, ts_queue_latency_microseconds, Requests2XX/4XX/5XX);
 * inferd_* for what TorchServe does not export (latency and batch-size histograms,
 * requests by status code, queue depth, workers, memory).
 *
 * Threading: updates (metrics_counter_add, metrics_model_response, ...) may be called
 * from any thread at any time between register and unregister; they never lock or
 * allocate. metrics_model_register / metrics_model_unregister / metrics_render take the
 * registry's lock and may be called from any thread. A scrape racing with updates sees
 * each value at some instant; a histogram's _count always equals its +Inf bucket, its
 * _sum may include an observation its buckets do not yet show.
 */
#ifndef INFERD_METRICS_H
#define INFERD_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "inferd/inferd.h"

/* The Content-Type of metrics_render's output. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* ---- primitives ----------------------------------------------------------------------- */

typedef struct metrics_counter {
  _Atomic uint64_t value;
} metrics_counter;

typedef struct metrics_gauge {
  _Atomic int64_t value;
} metrics_gauge;

enum { METRICS_MAX_BUCKETS = 64 };

/* Fixed upper bounds (inclusive, "le"), in the unit values are observed in (integers:
 * microseconds for latencies, items for batch sizes). buckets[i] counts observations in
 * (bounds[i-1], bounds[i]]; buckets[bound_count] those above the last bound. Counts are
 * per bucket, made cumulative when rendered. */
typedef struct metrics_histogram {
  int bound_count;
  const uint64_t *bounds; /* [bound_count] ascending; borrowed, must outlive the histogram */
  _Atomic uint64_t buckets[METRICS_MAX_BUCKETS + 1];
  _Atomic uint64_t sum;   /* of every observed value */
} metrics_histogram;

static inline void metrics_counter_add(metrics_counter *c, uint64_t n) {
  atomic_fetch_add_explicit(&c->value, n, memory_order_relaxed);
}
static inline uint64_t metrics_counter_get(const metrics_counter *c) {
  return atomic_load_explicit(&((metrics_counter *)c)->value, memory_order_relaxed);
}
static inline void metrics_gauge_set(metrics_gauge *g, int64_t v) {
  atomic_store_explicit(&g->value, v, memory_order_relaxed);
}
static inline void metrics_gauge_add(metrics_gauge *g, int64_t delta) {
  atomic_fetch_add_explicit(&g->value, delta, memory_order_relaxed);
}
static inline int64_t metrics_gauge_get(const metrics_gauge *g) {
  return atomic_load_explicit(&((metrics_gauge *)g)->value, memory_order_relaxed);
}

/* Zeroes h and sets its bounds. INVALID_ARG when count is not 1..METRICS_MAX_BUCKETS or
 * the bounds do not strictly ascend. Not thread-safe: before h is shared. */
inferd_code metrics_histogram_init(metrics_histogram *h, const uint64_t *bounds, int count, inferd_status *status);

static inline void metrics_histogram_observe(metrics_histogram *h, uint64_t value) {
  int i = 0;
  while (i < h->bound_count && value > h->bounds[i]) i++; /* a few dozen bounds at most */
  atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum, value, memory_order_relaxed);
}

/* The default latency bounds in microseconds: 0.1 ms to 10 s in 1-2.5-5 steps. */
extern const uint64_t metrics_latency_bounds_us[];
extern const int metrics_latency_bound_count;

/* ---- output buffer -------------------------------------------------------------------- */

/* A growable string. Zero-initialise; data is NUL-terminated once a render has run
 * ("" when it selected nothing); free with metrics_buffer_free. */
typedef struct metrics_buffer {
  char *data;
  size_t length;
  size_t capacity;
} metrics_buffer;

void metrics_buffer_free(metrics_buffer *b);

/* ---- the registry ---------------------------------------------------------------------- */

typedef struct metrics_registry metrics_registry;
typedef struct metrics_model metrics_model;

typedef struct metrics_registry_params {
  const char *hostname; /* the Hostname label of host-level series; NULL: gethostname() */
} metrics_registry_params;

/* params may be NULL. Returns NULL when out of memory. Free with metrics_registry_free,
 * which also frees the models still registered. */
metrics_registry *metrics_registry_new(const metrics_registry_params *params);
void metrics_registry_free(metrics_registry *r);

/* A response sent by any API of the server (Requests2XX/4XX/5XX); a request for a
 * model is counted here and, with metrics_model_response, under its model. */
void metrics_response(metrics_registry *r, int http_status);

typedef struct metrics_model_params {
  const char *name;    /* model_name label (copied; any bytes, escaped when rendered) */
  const char *version; /* model_version label (copied); NULL: "default", as TorchServe */
  int max_batch_size;  /* the batch-size histogram has buckets le=1..max (at most
                          METRICS_MAX_BUCKETS; beyond, powers of two and max); 0 = 1 */
} metrics_model_params;

/* Adds a model's series, all zero. ALREADY_EXISTS when name and version are registered,
 * INVALID_ARG for an empty name or a negative batch size. The model is owned by the
 * registry: pass it to metrics_model_unregister once no thread updates it any more. */
inferd_code metrics_model_register(metrics_registry *r, const metrics_model_params *params, metrics_model **out,
                                   inferd_status *status);
void metrics_model_unregister(metrics_registry *r, metrics_model *m);
/* Takes a model's series out of the registry (no longer rendered, and its name and
 * version may be registered again) while threads may still update it; free it later
 * with metrics_model_unregister. Detaching twice is harmless. */
void metrics_model_detach(metrics_registry *r, metrics_model *m);

/* Updates; any thread, no lock, no allocation. Latencies are in microseconds. */
void metrics_model_response(metrics_model *m, int http_status);      /* a response to a request for m */
/* per request of a batch that ran without error: accepted -> taken by a worker, and its batch's run */
void metrics_model_queue_time(metrics_model *m, uint64_t us);
void metrics_model_inference_time(metrics_model *m, uint64_t us);
void metrics_model_batch(metrics_model *m, int size);                /* per batch run */
/* TorchServe's legacy counters, with its meanings (InferenceRequestHandler, RestJob):
 * an inference request for m was parsed and is about to be queued (one per HTTP
 * request, whatever its rows; counted even if the queue then refuses it); one was
 * answered with success, `us` after it was received, of which `queue_us` waiting for
 * a worker. */
void metrics_model_ts_request(metrics_model *m);
void metrics_model_ts_answered(metrics_model *m, uint64_t us, uint64_t queue_us);
void metrics_model_queue_depth_add(metrics_model *m, int64_t delta); /* +1 enqueued, -n taken;
                                                                        unused while a source is set */
void metrics_model_set_workers(metrics_model *m, int64_t workers);
void metrics_model_set_memory(metrics_model *m, uint64_t bytes);

/* Reads a gauge's current value from its owner, e.g. the scheduler's queue depth. */
typedef int64_t (*metrics_gauge_fn)(void *ctx);

/* From now on m's inferd_queue_depth is queue_depth(ctx) and its inferd_workers
 * workers(ctx), called by metrics_render on the scraping thread with the registry's lock
 * held (they must not call into the registry), instead of the sum of
 * metrics_model_queue_depth_add and the value of metrics_model_set_workers: a count kept
 * by increments drifts as soon as one way out of the queue is missed (requests flushed
 * when the last worker goes, or skipped as expired), and a worker count set at
 * registration misses workers that failed to start; the owner's own counts cannot. A
 * NULL fn: back to the stored value. Takes the registry's lock: once it returns no
 * render is still calling the old fns, so the caller may free what ctx points to. `ctx`
 * is borrowed until then. */
void metrics_model_set_sources(metrics_registry *r, metrics_model *m, metrics_gauge_fn queue_depth,
                               metrics_gauge_fn workers, void *ctx);

/* Appends the series of the families named in names[0..count) to out in the
 * Prometheus text format 0.0.4; every family when count is 0 (TorchServe's
 * GET /metrics?name[]=...). A name selects a family by its own name or, for a
 * histogram, by one of its series' (name_bucket, name_sum, name_count); unknown names
 * select nothing. NO_MEMORY when the buffer cannot grow (out keeps what was written). */
inferd_code metrics_render(metrics_registry *r, const char *const *names, size_t count, metrics_buffer *out,
                           inferd_status *status);

#endif /* INFERD_METRICS_H */
