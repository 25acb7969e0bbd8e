/*
 * sched.h - per-model request queues, the dynamic batcher and the worker pool.
 *
 * A sched_model serves one loaded inferd_model: a bounded FIFO of requests
 * (job_queue_size), and a pool of worker threads that each own an inferd_session and
 * their batch buffers. The HTTP layer submits requests; a worker takes up to
 * batch_size of them, copies their inputs into one batch, runs the engine once, copies
 * each request's row of every output back and calls each request's `done`.
 *
 * The batching rule (DESIGN.md §5 made work-conserving; details in sched_worker.c):
 * a worker that is free takes at once whatever is queued, up to batch_size. It holds a
 * partial batch open to let it fill only while ALL of these hold:
 *   - the requests were already queued when the worker came back from its previous
 *     batch, some accepted while it ran (they had to wait: the model is busy), rather
 *     than arriving to a worker that was idle or being left over from a full batch with
 *     nothing accepted since (low load: run them now);
 *   - no other worker of the model is idle (spare capacity would run them now anyway);
 *   - the oldest request has waited less than max_batch_delay_ms (0: never wait), and
 *     less than half of its time to answer (its deadline), with time left to run.
 * So a batch is dispatched as soon as it is full, or the oldest request has waited
 * max_batch_delay_ms, or waiting stops paying; batching adds no latency at low load and
 * no request ever waits more than max_batch_delay_ms for a batch to fill.
 *
 * Ownership of a request (the caller allocates it, e.g. from a pool; the scheduler
 * never allocates per request):
 *   1. The caller fills input, output, done, user (and deadline) and calls sched_submit.
 *   2. sched_submit returns INFERD_OK: the request and both buffers now belong to the
 *      scheduler. `done` will be called exactly once, on a worker thread (or, for
 *      requests still queued when a model is drained without workers, on the thread
 *      calling sched_model_drain). Until done is called, the caller must not free or
 *      reuse the request, its input or its output - even after cancelling it.
 *      sched_submit returns anything else: nothing was queued, done is NOT called,
 *      req->status says why, and the caller keeps everything (answer 503 at once).
 *   3. At any time after a successful submit the caller may call
 *      sched_request_cancel (e.g. its own response timeout fired and it already
 *      answered 504). That transfers nothing: the scheduler still owns the request.
 *      A cancelled request that has not run yet is skipped (its output is not
 *      written); one already running finishes. Either way done is called once, with
 *      INFERD_TIMEOUT.
 *   4. When done is called, ownership returns to the caller for good: from inside done
 *      on, the scheduler never touches the request again, so done may recycle it.
 * A request whose deadline passes while it is queued completes with INFERD_TIMEOUT
 * without running. A request that runs gets INFERD_OK (output written), or the
 * engine's error with its message in req->status.
 *
 * Threading: sched_submit, sched_request_cancel, sched_model_ready,
 * sched_model_describe and the size getters may be called from any thread at any time
 * between sched_model_new and sched_model_free. The management calls (scale,
 * wait_ready, drain, free) may be called from any thread (they serialize on the
 * model's management lock) but never from a worker thread, i.e. never from inside a
 * done, bind or stats callback: they wait for workers. Each model has its own mutex;
 * there is no lock shared by models. Callbacks run on worker threads without the
 * model's lock held; done and stats must be quick and must not block (hand the result
 * to the event loop, e.g. with h2o_multithread_send_message).
 */
#ifndef INFERD_SCHED_H
#define INFERD_SCHED_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "inferd/inferd.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  SCHED_MAX_WORKERS = 256,   /* per model */
  SCHED_MAX_BATCH = 1024,    /* the engine's default largest batch */
  SCHED_MAX_QUEUE = 1 << 24, /* job_queue_size bound */
  SCHED_CORES_MAX = 96,      /* bytes of a worker's core list ("0-3,8") */
};

typedef struct sched_model sched_model;
typedef struct sched_request sched_request;

/* Called exactly once per accepted request, on a worker thread, without any lock held.
 * `code`: OK (output written), TIMEOUT (deadline passed or cancelled), UNAVAILABLE
 * (the model lost all its workers), or an engine error. */
typedef void (*sched_done_fn)(sched_request *request, inferd_code code, void *user);

/* Caller-allocated (a pool in the HTTP layer); see the ownership protocol above. */
struct sched_request {
  /* Set by the caller before sched_submit; only read by the scheduler. */
  const float *input; /* [sched_model_input_elems]: one item, the model input without
                         its batch axis, dense row-major */
  float *output;      /* [sched_model_output_elems]: receives the request's row of every
                         output, back to back in the model's output order
                         (output i at sched_model_output_offset(m, i)) */
  double deadline;    /* seconds on the core_now_seconds() clock (CLOCK_MONOTONIC);
                         0: enqueue_time + the model's response_timeout_ms (none if 0).
                         On acceptance it holds the deadline in force: reset it to 0
                         before reusing the request to get the default again. */
  sched_done_fn done;
  void *user;         /* passed to done as is */
  /* Set with sched_request_cancel. sched_submit keeps it: a request cancelled before
     it was submitted (its client left while the caller prepared it) is accepted and
     skipped like one cancelled in the queue. Clear it before reusing a request. */
  atomic_bool cancelled;
  /* Written by the scheduler. */
  double enqueue_time;  /* seconds, when sched_submit accepted it */
  double start_time;    /* seconds, when a worker took it into a batch; 0 if it never ran */
  inferd_status status; /* why, when done's code is not OK or sched_submit refused */
};

/* Marks an accepted request cancelled (any thread). Ownership does not change. */
void sched_request_cancel(sched_request *request);

/* ---- worker placement and per-batch statistics (hooks for topo/ and metrics/) ------ */

/* What a worker's bind callback learns and reports. */
typedef struct sched_binding {
  int slot;      /* in: 0..workers-1, the smallest placement index no other worker of
                    this model holds (reused after scale-down; a scale that changes
                    the count renumbers the running workers 0..n-1, so a worker that
                    failed to start leaves no hole): the index into a topo placement
                    plan */
  int worker_id; /* in */
  int threads;   /* out: the session's thread count; 0 keeps threads_per_worker */
  char cores[SCHED_CORES_MAX]; /* out: the CPUs it is bound to ("0-3"), for describe */
} sched_binding;

/* Binds the calling worker thread. Called first thing on each new worker thread,
 * before its session and buffers exist, so that the session's OpenMP team and the
 * memory the worker first touches land on its cores. Returns OK, or an error with a
 * message in `status`: the worker then fails to start (state FAILED).
 * Called again on every running worker after sched_model_scale changed the worker
 * count: at the worker's next batch boundary (never during a batch), with its slot in
 * the plan for the new count, which the caller must install before scaling. If the
 * thread count it reports differs from the session's, the worker makes a new session
 * of that many threads. An error then is logged and the worker keeps its old binding
 * and session. With topo/:
 *   const topo_worker *tw = &plan->workers[b->slot % plan->worker_count];
 *   b->threads = tw->thread_count;
 *   snprintf(b->cores, sizeof b->cores, "%s", tw->cpu_list);
 *   return topo_bind_current_thread(tw, status);                                   */
typedef inferd_code (*sched_bind_fn)(void *ctx, sched_binding *binding, inferd_status *status);

typedef struct sched_worker_params {
  int threads;        /* compute threads of each worker's session; 0 = the engine's
                         default (every CPU the process may use) */
  sched_bind_fn bind; /* NULL (default): workers are not bound */
  void *bind_ctx;     /* borrowed; must outlive the model */
} sched_worker_params;

/* One batch, as a worker saw it. Borrowed for the duration of the callback. */
typedef struct sched_batch_stats {
  const char *model;           /* the model's name */
  int worker_id;
  int batch_size;              /* requests run together (0: every request taken was skipped) */
  int expired;                 /* completed with TIMEOUT without running: deadline passed */
  int cancelled;               /* completed with TIMEOUT without running: cancelled */
  const double *queue_seconds; /* [batch_size]: each run request's wait, enqueue -> batch start */
  double inference_seconds;    /* the engine runs; 0 when nothing ran */
  int engine_runs;             /* 1, or the chunks a batch of another size ran in (sched_worker.c) */
  inferd_code code;            /* of the engine runs (OK when nothing ran) */
  int queue_depth;             /* requests left queued when this batch was taken */
} sched_batch_stats;

/* Called on the worker thread after each batch, before its requests' done callbacks. */
typedef void (*sched_stats_fn)(void *ctx, const sched_batch_stats *stats);

/* ---- models --------------------------------------------------------------------------- */

typedef struct sched_model_params {
  const char *name;        /* for logs, stats and describe; copied. NULL: "model" */
  int batch_size;          /* most requests per batch, 1..SCHED_MAX_BATCH; 0: 1 */
  int max_batch_delay_ms;  /* longest a request waits for its batch to fill; 0: never wait */
  int response_timeout_ms; /* default deadline after enqueue; 0: none */
  int job_queue_size;      /* queued requests before sched_submit refuses; 0: 100 */
  int workers;             /* started by sched_model_new, 0..SCHED_MAX_WORKERS; 0: none
                              (the model is not ready until scaled up) */
  sched_worker_params worker;
  sched_stats_fn on_batch; /* NULL: none */
  void *stats_ctx;         /* borrowed; must outlive the model */
} sched_model_params;

/* Creates the queue and starts params->workers workers; returns without waiting for
 * them (see sched_model_wait_ready). `model` is borrowed and must outlive the
 * sched_model; it must have exactly one input (float, any batch). INVALID_ARG for a
 * parameter out of range, UNSUPPORTED for a model the scheduler cannot batch.
 * Free with sched_model_free. */
inferd_code sched_model_new(inferd_model *model, const sched_model_params *params,
                            sched_model **out, inferd_status *status);

/* Floats in one request's input, and in its output: one item of every model output. */
size_t sched_model_input_elems(const sched_model *m);
size_t sched_model_output_elems(const sched_model *m);
/* The model's outputs (1..8), and where output i's item (`elems` floats, the product of
 * its dims after the batch axis) lies in a request's output. */
int sched_model_output_count(const sched_model *m);
size_t sched_model_output_offset(const sched_model *m, int i);
size_t sched_model_output_item(const sched_model *m, int i);

/* Ready: all the model's workers have once been started together with none failed
 * (each bound itself, created its session and bound the plans of batch 1 and batch_size
 * to it, so those are compiled before the first request), at least one worker is running now, and
 * the model is not draining. A later scale-up does not make a ready model unready
 * while its new workers start. Takes the model's lock briefly. */
bool sched_model_ready(sched_model *m);
/* Waits until no worker is still starting or has yet to re-bind after a scale, or
 * timeout_ms (< 0: no limit) passes.
 * OK when ready and no worker failed to start; otherwise the first start failure's code
 * and message (also when other workers keep the model ready: a scale-up whose new
 * workers failed), UNAVAILABLE (no workers, or draining) or TIMEOUT. */
inferd_code sched_model_wait_ready(sched_model *m, int timeout_ms, inferd_status *status);

/* Queues `request`; never blocks on the engine. OK: the scheduler owns the request
 * until its done call (see the ownership protocol). UNAVAILABLE at once when the queue
 * holds job_queue_size requests, the model is draining or has no workers (the HTTP
 * layer answers 503 with Retry-After); INVALID_ARG for a request without input,
 * output or done. On refusal request->status says why and done is not called. */
inferd_code sched_submit(sched_model *m, sched_request *request);
/* Queues requests[0..n) in order as n sched_submit calls would, but under one lock with
 * one wake-up: the worker it wakes takes them together (up to batch_size). Separate
 * submits could wake an idle worker for the first alone and leave the rest queued as if
 * the model were busy, to a batch held open for max_batch_delay_ms (a KServe v2 infer
 * of 3 rows on an idle model waited the whole maxBatchDelay). Returns k, how many were
 * accepted: requests[0..k) are the scheduler's as after an accepting sched_submit; when
 * k < n, requests[k] was refused as by sched_submit (its status says why) and the ones
 * after it were not looked at. */
int sched_submit_many(sched_model *m, sched_request *const *requests, int n);

/* Sets the number of workers (TorchServe's scale workers, min_worker). New workers
 * start in the background (wait with sched_model_wait_ready). When the count changes
 * and there is a bind callback, the workers that keep running re-bind to their slot of
 * the new placement between two batches (see sched_bind_fn); sched_model_wait_ready
 * also waits for that. Workers removed finish
 * the batch they are running and are joined before this returns; if none are left,
 * requests still queued complete with UNAVAILABLE. Workers that failed to start are
 * forgotten here. UNAVAILABLE once draining, INVALID_ARG out of 0..SCHED_MAX_WORKERS. */
inferd_code sched_model_scale(sched_model *m, int workers, inferd_status *status);

typedef enum sched_worker_state {
  SCHED_WORKER_STARTING, /* binding, creating its session, warming up */
  SCHED_WORKER_READY,    /* waiting for requests (or for a batch to fill) */
  SCHED_WORKER_BUSY,     /* running a batch */
  SCHED_WORKER_STOPPING, /* asked to stop (scale-down, drain); finishes its batch */
  SCHED_WORKER_FAILED,   /* could not start; see error */
} sched_worker_state;
const char *sched_worker_state_name(sched_worker_state state); /* "READY" */

typedef struct sched_worker_info {
  int id;                      /* unique in the model, never reused */
  int slot;                    /* placement index given to bind */
  sched_worker_state state;
  int threads;                 /* its session's threads (0: the engine's default) */
  double start_time;           /* seconds, core_now_seconds() clock */
  long batches;                /* batches run */
  long requests;               /* requests run */
  char cores[SCHED_CORES_MAX]; /* what bind reported; "" when unbound */
  size_t arena_bytes;          /* its session's scratch arena (inferd_session_arena_bytes),
                                  mapped at its start for the plans of batch 1 and
                                  batch_size; 0 while it starts */
  size_t scratch_bytes;        /* what its runs took of that arena: the scratch of the
                                  largest batch size it ran; 0 before its first batch */
  inferd_status error;         /* FAILED: why */
} sched_worker_info;

typedef struct sched_model_info {
  const char *name;            /* borrowed from the model */
  int batch_size;
  int max_batch_delay_ms;
  int response_timeout_ms;
  int job_queue_size;
  int queue_depth;             /* requests queued now */
  int workers;                 /* live workers: starting, ready or busy */
  bool ready;
  bool draining;
  long accepted;               /* requests accepted so far */
  long refused;                /* refused by sched_submit (queue full, draining, no workers) */
} sched_model_info;

/* Fills *info (may be NULL) and up to max_workers entries of `workers` (may be NULL),
 * in id order; returns the number of workers the model lists (live, stopping, failed). */
int sched_model_describe(sched_model *m, sched_model_info *info, sched_worker_info *workers,
                         int max_workers);

/* Graceful stop: from now on sched_submit refuses (UNAVAILABLE); workers finish every
 * request already queued, then exit and are joined. Returns when all done callbacks
 * have returned. Idempotent. */
void sched_model_drain(sched_model *m);
/* Drains if not yet drained, then frees. The inferd_model is not freed. */
void sched_model_free(sched_model *m);

#ifdef __cplusplus
}
#endif
#endif /* INFERD_SCHED_H */
