/*
 * metrics_internal.h - what the files of src/metrics/ share; not for other subsystems.
 */
#ifndef INFERD_METRICS_INTERNAL_H
#define INFERD_METRICS_INTERNAL_H

#include <pthread.h>

#include "metrics/metrics.h"

/* HTTP status codes 100..599 each have a counter; anything else goes to the last one. */
enum { METRICS__STATUS_FIRST = 100, METRICS__STATUS_LAST = 599,
       METRICS__STATUS_SLOTS = METRICS__STATUS_LAST - METRICS__STATUS_FIRST + 2 };

struct metrics_model {
  metrics_model *next; /* registration order */
  char *name, *version;
  metrics_counter responses[METRICS__STATUS_SLOTS]; /* [status - 100]; the last: any other */
  metrics_histogram queue_latency;     /* microseconds */
  metrics_histogram inference_latency; /* microseconds */
  metrics_histogram batch_size;        /* items */
  metrics_counter ts_requests, ts_inference_us, ts_queue_us; /* TorchServe's meanings */
  uint64_t batch_bounds[METRICS_MAX_BUCKETS];
  metrics_gauge queue_depth, workers, memory_bytes;
  /* metrics_model_set_sources, under the registry's lock; NULL: render the gauge */
  metrics_gauge_fn queue_depth_fn, workers_fn;
  void *source_ctx;
};

struct metrics_registry {
  pthread_mutex_t lock; /* guards the model list; never taken by updates */
  metrics_model *models;
  char *hostname;
  metrics_counter responses_2xx, responses_4xx, responses_5xx;
};

#endif /* INFERD_METRICS_INTERNAL_H */
