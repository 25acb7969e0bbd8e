/*
 * metrics_registry.c - the server's series: host-wide response counters and one set of
 * series per registered model; the hot-path updates.
 *
 * DESIGN
 * A model's series live in one struct allocated at registration (model load), so an
 * update is one relaxed atomic add on memory that never moves: no lookup, no lock, no
 * allocation. Requests by status code are a dense array of counters indexed by the
 * code (100..599, plus one for anything else), about 4 KB per model, rather than a map
 * that would need a lock to grow. The registry's mutex guards only the list of models,
 * which changes at load/unload and is walked by metrics_render, and each model's
 * queue-depth source (a callback into the scheduler read at render time, so that the
 * gauge is the queue's real depth rather than a count of ins and outs that can drift).
 *
 * Invariants: a model is updated only between its register and unregister (the caller
 * stops its workers and HTTP handlers first); relaxed ordering is enough because every
 * value is independent and read with atomic loads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "metrics/metrics_internal.h"

/* 0.1 ms .. 10 s: queueing of a few hundred microseconds up to a response_timeout. */
const uint64_t metrics_latency_bounds_us[] = {
    100,    250,    500,     1000,    2500,    5000,    10000,   25000,
    50000,  100000, 250000,  500000,  1000000, 2500000, 5000000, 10000000,
};
const int metrics_latency_bound_count = (int)CORE_ARRAY_LEN(metrics_latency_bounds_us);

inferd_code metrics_histogram_init(metrics_histogram *h, const uint64_t *bounds, int count, inferd_status *st) {
  if (count < 1 || count > METRICS_MAX_BUCKETS)
    return core_fail(st, INFERD_INVALID_ARG, "histogram: %d bounds, want 1..%d", count, METRICS_MAX_BUCKETS);
  for (int i = 1; i < count; i++)
    if (bounds[i] <= bounds[i - 1])
      return core_fail(st, INFERD_INVALID_ARG, "histogram: bound %d (%llu) is not above bound %d (%llu)", i,
                       (unsigned long long)bounds[i], i - 1, (unsigned long long)bounds[i - 1]);
  h->bound_count = count;
  h->bounds = bounds;
  for (int i = 0; i <= METRICS_MAX_BUCKETS; i++) atomic_init(&h->buckets[i], 0);
  atomic_init(&h->sum, 0);
  return INFERD_OK;
}

metrics_registry *metrics_registry_new(const metrics_registry_params *params) {
  metrics_registry *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  char host[256] = "";
  const char *name = params && params->hostname ? params->hostname : NULL;
  if (!name) {
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    name = host;
  }
  r->hostname = strdup(name);
  if (!r->hostname || pthread_mutex_init(&r->lock, NULL) != 0) {
    free(r->hostname);
    free(r);
    return NULL;
  }
  return r;
}

void metrics_registry_free(metrics_registry *r) {
  if (!r) return;
  for (metrics_model *m = r->models, *next; m; m = next) {
    next = m->next;
    free(m->name);
    free(m->version);
    free(m);
  }
  pthread_mutex_destroy(&r->lock);
  free(r->hostname);
  free(r);
}

void metrics_response(metrics_registry *r, int status) {
  if (status >= 200 && status < 300) metrics_counter_add(&r->responses_2xx, 1);
  else if (status >= 400 && status < 500) metrics_counter_add(&r->responses_4xx, 1);
  else if (status >= 500 && status < 600) metrics_counter_add(&r->responses_5xx, 1);
}

/* le=1..max when that fits; otherwise powers of two below max, then max. */
static int batch_bounds(uint64_t *bounds, int max) {
  int n = 0;
  if (max <= METRICS_MAX_BUCKETS) {
    for (int i = 1; i <= max; i++) bounds[n++] = (uint64_t)i;
  } else {
    for (uint64_t b = 1; b < (uint64_t)max; b *= 2) bounds[n++] = b;
    bounds[n++] = (uint64_t)max;
  }
  return n;
}

inferd_code metrics_model_register(metrics_registry *r, const metrics_model_params *p, metrics_model **out,
                                   inferd_status *st) {
  *out = NULL;
  if (!p->name || !p->name[0]) return core_fail(st, INFERD_INVALID_ARG, "metrics: a model needs a name");
  if (p->max_batch_size < 0)
    return core_fail(st, INFERD_INVALID_ARG, "metrics: model '%s': batch size %d", p->name, p->max_batch_size);
  const char *version = p->version ? p->version : "default";

  metrics_model *m = calloc(1, sizeof *m);
  if (!m) return core_fail(st, INFERD_NO_MEMORY, "metrics: out of memory");
  m->name = strdup(p->name);
  m->version = strdup(version);
  int nb = batch_bounds(m->batch_bounds, p->max_batch_size ? p->max_batch_size : 1);
  inferd_code rc = INFERD_OK;
  if (!m->name || !m->version) rc = core_fail(st, INFERD_NO_MEMORY, "metrics: out of memory");
  if (rc == INFERD_OK)
    rc = metrics_histogram_init(&m->queue_latency, metrics_latency_bounds_us, metrics_latency_bound_count, st);
  if (rc == INFERD_OK)
    rc = metrics_histogram_init(&m->inference_latency, metrics_latency_bounds_us, metrics_latency_bound_count, st);
  if (rc == INFERD_OK) rc = metrics_histogram_init(&m->batch_size, m->batch_bounds, nb, st);
  if (rc != INFERD_OK) {
    free(m->name);
    free(m->version);
    free(m);
    return rc;
  }

  pthread_mutex_lock(&r->lock);
  metrics_model **tail = &r->models;
  for (; *tail; tail = &(*tail)->next)
    if (strcmp((*tail)->name, m->name) == 0 && strcmp((*tail)->version, m->version) == 0) {
      pthread_mutex_unlock(&r->lock);
      rc = core_fail(st, INFERD_ALREADY_EXISTS, "metrics: model '%s' version '%s' is already registered", m->name,
                     m->version);
      free(m->name);
      free(m->version);
      free(m);
      return rc;
    }
  *tail = m;
  pthread_mutex_unlock(&r->lock);
  *out = m;
  return INFERD_OK;
}

void metrics_model_detach(metrics_registry *r, metrics_model *m) {
  if (!m) return;
  pthread_mutex_lock(&r->lock);
  for (metrics_model **p = &r->models; *p; p = &(*p)->next)
    if (*p == m) {
      *p = m->next;
      break;
    }
  m->next = NULL;
  pthread_mutex_unlock(&r->lock);
}

void metrics_model_unregister(metrics_registry *r, metrics_model *m) {
  if (!m) return;
  metrics_model_detach(r, m);
  free(m->name);
  free(m->version);
  free(m);
}

void metrics_model_response(metrics_model *m, int status) {
  int slot = status >= METRICS__STATUS_FIRST && status <= METRICS__STATUS_LAST ? status - METRICS__STATUS_FIRST
                                                                              : METRICS__STATUS_SLOTS - 1;
  metrics_counter_add(&m->responses[slot], 1);
}

void metrics_model_queue_time(metrics_model *m, uint64_t us) { metrics_histogram_observe(&m->queue_latency, us); }
void metrics_model_inference_time(metrics_model *m, uint64_t us) { metrics_histogram_observe(&m->inference_latency, us); }
void metrics_model_ts_request(metrics_model *m) { metrics_counter_add(&m->ts_requests, 1); }
void metrics_model_ts_answered(metrics_model *m, uint64_t us, uint64_t queue_us) {
  metrics_counter_add(&m->ts_inference_us, us);
  metrics_counter_add(&m->ts_queue_us, queue_us);
}
void metrics_model_batch(metrics_model *m, int size) { metrics_histogram_observe(&m->batch_size, size > 0 ? (uint64_t)size : 0); }
void metrics_model_queue_depth_add(metrics_model *m, int64_t delta) { metrics_gauge_add(&m->queue_depth, delta); }
void metrics_model_set_sources(metrics_registry *r, metrics_model *m, metrics_gauge_fn queue_depth,
                               metrics_gauge_fn workers, void *ctx) {
  pthread_mutex_lock(&r->lock); /* render reads them under it */
  m->queue_depth_fn = queue_depth;
  m->workers_fn = workers;
  m->source_ctx = queue_depth || workers ? ctx : NULL;
  pthread_mutex_unlock(&r->lock);
}
void metrics_model_set_workers(metrics_model *m, int64_t workers) { metrics_gauge_set(&m->workers, workers); }
void metrics_model_set_memory(metrics_model *m, uint64_t bytes) {
  metrics_gauge_set(&m->memory_bytes, bytes > INT64_MAX ? INT64_MAX : (int64_t)bytes);
}
