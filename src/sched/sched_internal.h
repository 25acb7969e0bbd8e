/*
 * sched_internal.h - what sched_model.c and sched_worker.c share: the model and worker
 * structs. Not for other subsystems (they include sched.h).
 *
 * Locking: every field marked [lock] is read and written only under model->lock.
 * Fields marked [worker] belong to the worker thread alone. Fields marked [const] are
 * set before the worker thread starts (or at model creation) and never change.
 */
#ifndef INFERD_SCHED_INTERNAL_H
#define INFERD_SCHED_INTERNAL_H

#include <pthread.h>

#include "core/core.h"
#include "sched/sched.h"

enum { SCHED__MAX_OUTPUTS = 8, SCHED__NAME_MAX = 128 };

typedef struct sched_worker {
  struct sched_model *model; /* [const] */
  int id;                    /* [const] */
  int slot;                  /* [lock] its place in the caller's plan: 0..n-1 over the
                                live workers; renumbered by a scale that re-binds them */
  pthread_t thread;          /* [const] once started */
  int session_threads;       /* [worker] its session's thread count */
  size_t run_scratch;        /* [worker] the largest scratch a run of its session took
                                (inferd_session_scratch_bytes of the batch size) */

  /* [lock] */
  sched_worker_state state;
  bool stop;      /* asked to exit after its current batch (scale-down) */
  bool exited;    /* its thread has left the loop; only join remains */
  double start_time;
  long batches;
  long requests;
  int threads;
  char cores[SCHED_CORES_MAX];
  inferd_status error;
  unsigned placement; /* the model's placement generation it is bound for; it re-binds
                         at its next batch boundary when the model's moves on */
  size_t arena_bytes;   /* its session's arena, as of its last start, batch or re-bind */
  size_t scratch_bytes; /* what its runs took of the arena: run_scratch, as of its last
                           batch; 0 before its first and after a re-bind's new session */
  long accepted_at_take; /* the model's `accepted` when it took its last batch: requests
                            queued as it comes back are load only if some came since */

  /* [worker]: allocated on the worker thread at start, never per batch */
  inferd_session *session;
  float *input;                           /* [batch_size, input item] */
  size_t input_bytes;
  float *outputs[SCHED__MAX_OUTPUTS];     /* [batch_size, output i item] each */
  size_t output_bytes[SCHED__MAX_OUTPUTS];
  sched_request **batch;                  /* [batch_size] requests being run */
  sched_request **skipped;                /* [batch_size] expired or cancelled ones */
  double *queue_seconds;                  /* [batch_size] */
  unsigned char *shape_checked;           /* [batch_size + 1]: outputs verified at batch b */
  double last_batch_seconds;              /* its last batch's engine time: how long before
                                             a request's deadline a held batch must start */
} sched_worker;

struct sched_model {
  inferd_model *engine_model;   /* [const] borrowed */
  char name[SCHED__NAME_MAX];   /* [const] */
  sched_model_params params;    /* [const] with defaults applied; name points to `name` */
  size_t input_elems;           /* [const] floats per item */
  int n_outputs;                /* [const] */
  size_t output_elems[SCHED__MAX_OUTPUTS]; /* [const] floats per item of each output */
  size_t output_offset[SCHED__MAX_OUTPUTS]; /* [const] where each lies in a request's output */
  size_t output_total;                      /* [const] floats of a request's output */
  inferd_tensor_info output_info[SCHED__MAX_OUTPUTS]; /* [const] */

  pthread_mutex_t lock;
  pthread_cond_t work;   /* idle workers wait here for requests */
  pthread_cond_t fill;   /* the worker holding a batch open waits here */
  pthread_cond_t state;  /* management calls wait here for worker state changes */

  /* [lock] the queue: a ring of job_queue_size pointers, allocated once */
  sched_request **ring;
  int head;
  int count;

  /* [lock] the pool */
  sched_worker *workers[SCHED_MAX_WORKERS]; /* ordered by id; includes stopping/failed */
  int n_workers;
  int live;      /* workers not stopping, not failed, not exited: who will serve */
  int idle;      /* workers waiting on `work` */
  bool forming;  /* a worker is holding a partial batch open, waiting on `fill` */
  bool draining;
  bool warmed;   /* all workers once started with none failed (sticky) */
  unsigned placement; /* bumped by a scale that changes the worker count (with a bind
                         callback): every running worker re-binds to its slot */
  int next_id;
  long accepted;
  long refused;

  pthread_mutex_t manage; /* serializes scale, drain and free (never taken by workers) */
};

/* How many queued requests end a held batch: batch_size, or job_queue_size when the
 * queue is shorter (a full queue is as full as the batch can get). */
static inline int sched__fill_target(const struct sched_model *m) {
  return m->params.job_queue_size < m->params.batch_size ? m->params.job_queue_size : m->params.batch_size;
}

/* sched_worker.c */
void *sched__worker_main(void *arg);
/* pthread_cond_timedwait until `until`, seconds on the core_now_seconds() clock (the
 * model's condition variables use CLOCK_MONOTONIC). */
void sched__wait_until(pthread_cond_t *cond, pthread_mutex_t *mutex, double until);
/* Sets the sticky `warmed` once no worker is starting, none failed and one runs: when
 * a worker has started or failed, and when failed workers are forgotten. Caller holds
 * model->lock. */
void sched__update_warmed_locked(struct sched_model *m);
/* Pops the oldest queued request. Caller holds model->lock and count > 0. */
sched_request *sched__pop_locked(struct sched_model *m);
/* Completes everything queued with `code` while no worker is live (scale to 0, every
 * worker failed, drain without workers); a cancelled or expired request with TIMEOUT,
 * as a batch take would. Called with model->lock held; drops it around each done call. */
void sched__flush_locked(struct sched_model *m, inferd_code code, const char *why);

#endif /* INFERD_SCHED_INTERNAL_H */
