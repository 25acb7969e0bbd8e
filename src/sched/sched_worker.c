/*
 * sched_worker.c - one worker thread of a model: start-up, the dynamic batcher, running
 * a batch, exit.
 *
 * DESIGN
 * Start-up, on the worker thread itself, in this order:
 *   0. the thread marks itself batch work (SCHED_BATCH, worker_mark_batch), which the
 *      session's OpenMP team inherits;
 *   1. bind (params.worker.bind, e.g. topo_bind_current_thread): before the session,
 *      so that the session's OpenMP team inherits the worker's CPUs and the memory the
 *      worker touches first is local to its NUMA node;
 *   2. its inferd_session (threads from the binding, else params.worker.threads);
 *   3. its buffers, sized for batch_size once: the batch input [batch_size, item],
 *      every output [batch_size, item], and the request/skip/queue-time arrays. They
 *      are never reallocated; running a batch allocates nothing;
 *   4. warm-up: the plans of batch 1 and of batch_size are compiled, their kernels
 *      generated and bound to the session (inferd_session_output_shape), and the output
 *      shapes checked at both sizes, before the model says it is ready: a model whose
 *      outputs do not follow the batch fails here, and the first full batch binds
 *      nothing (resnet152 at batch 8: ~20 ms more start-up; the plan compiled at load
 *      serves). The arena is mapped for the larger of the two; its pages are taken by
 *      the runs (scratch_bytes counts what they took).
 * A failure anywhere leaves the worker FAILED with the message (describe shows it,
 * sched_model_wait_ready returns it). The sizes in between (a batch held open that the
 * delay ended) are compiled (engine plan cache) and bound lazily, by their first batch.
 *
 * Re-binding. A scale that changes the worker count makes the caller's placement plan
 * change for every worker (fewer or more cores each), so sched_model_scale bumps the
 * model's placement generation and wakes everyone. A running worker notices it only
 * between batches - idle, holding a partial batch open, or coming back from one; never
 * during a run - and then calls bind again for its slot (slots stay 0..n-1), and, when
 * the thread count changed, makes a new session of that many threads (its plans of
 * batch 1 and batch_size bound, as at start) and frees the old one. Requests wait in the queue meanwhile;
 * the worker stays READY (the model stays ready). sched_model_wait_ready waits for
 * pending re-binds as it waits for starting workers. If bind or the new session fails
 * the worker keeps its previous session and serves on, with a warning.
 *
 * The batcher. All of it runs under the model's mutex; the engine runs without it.
 * Work conservation and DESIGN.md §5 ("a batch is dispatched as soon as it is full or
 * the oldest request waited max_batch_delay") fit together like this:
 *   - Idle workers sleep on `work`. A submit wakes one. The woken worker takes at once
 *     whatever is queued, up to batch_size: the requests arrived to a worker that had
 *     nothing to do, i.e. the model has spare capacity and waiting would only add
 *     latency. At low load every request runs alone, immediately.
 *   - A worker coming back from a batch that finds requests queued, some accepted while
 *     it ran that batch, knows they queued because every worker was busy: the model is
 *     saturated. (What is left over from a full batch, with nothing accepted since, is
 *     not: a burst larger than batch_size at low load, a v2 infer of more rows; it runs
 *     at once.) If there are
 *     fewer than batch_size, it may hold the batch open on `fill` (one worker at a
 *     time; others that come back meanwhile go idle) until the first of:
 *       the queue holds batch_size requests          -> dispatch a full batch
 *         (or job_queue_size, when that is smaller: a full queue cannot grow, and
 *         every submit meanwhile would be refused),
 *       the oldest queued request has waited max_batch_delay_ms -> dispatch (§5),
 *       the oldest has spent half of its response timeout (or all of it but this
 *         worker's last batch time) -> dispatch: holding it longer would turn it into
 *         a 504 (a maxBatchDelay above responseTimeout did, without it ever running),
 *       another worker becomes idle                  -> dispatch: capacity is free,
 *       drain or stop.
 *     With max_batch_delay_ms = 0 it never holds.
 *   Under load, batches fill by themselves (requests pile up while a batch runs) and
 *   the hold tops them up; at low load nothing waits. No request waits longer than
 *   max_batch_delay_ms for its batch to fill, counted from its enqueue.
 *   - Taking a batch pops from the head (FIFO), completing without running, with
 *     INFERD_TIMEOUT, any request that was cancelled or whose deadline has passed
 *     (they do not count toward the batch; at most batch_size of them per take).
 *   - A worker that leaves requests queued when others are idle wakes one of them.
 *
 * Running a batch (no lock): copy each request's input into its row of the batch
 * input, check once per batch size that every output has shape [batch, item...] (so
 * the buffers sized at start can never overflow), run, copy row k of every output to
 * request k (back to back: sched_model_output_offset), call the stats hook, then every done. A batch of up to
 * SCHED_EXACT_BATCH requests, or of exactly batch_size, is one engine run; one of
 * another size runs as chunks of SCHED_EXACT_BATCH rows and a remainder, one after
 * another in the same buffers. So a worker binds at most SCHED_EXACT_BATCH + 1 batch
 * sizes, within what its session keeps (INFERD_SESSION_BATCH_SIZES) and the model's
 * plan cache: with batchSize 64 and a batch size per run, every new size would compile
 * a plan (15-25 ms for a ResNet) and bind it in the session with malloc under the
 * model's lock, again each time the caches evict it. Rows are independent (the
 * batcher already relies on it), so the chunks give the answers one run would.
 * A request cancelled while its batch ran still gets INFERD_TIMEOUT (its output was
 * written; the caller has answered already). After done is called the worker never
 * touches that request again.
 *
 * Exit: after a stop (scale-down) or when draining finds the queue empty. The worker
 * marks itself exited under the lock, then frees its session and buffers on its own
 * thread; the management call that joins it frees the struct. If the last live worker
 * leaves requests queued (scale to 0, every worker failed to start), it completes them
 * with INFERD_UNAVAILABLE: nothing else would (those cancelled or past their deadline
 * with INFERD_TIMEOUT, as a take would).
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched/sched_internal.h"

/* Batch sizes a worker runs in one engine call: 1..SCHED_EXACT_BATCH and batch_size. */
enum { SCHED_EXACT_BATCH = 16 };
_Static_assert(SCHED_EXACT_BATCH + 1 <= INFERD_SESSION_BATCH_SIZES, "a session must keep every size a worker runs");

/* Rows of the next engine run when `left` rows of the batch remain. */
static int chunk_rows(int left, int batch_size) {
  return left <= SCHED_EXACT_BATCH || left == batch_size ? left : SCHED_EXACT_BATCH;
}

/* ---- start-up ------------------------------------------------------------------------ */

/* Verifies, once per batch size, that output i of a batch of `batch` is [batch, item i]:
 * the buffers are sized from the batch-1 shapes. Compiles the plan when it is new. */
static inferd_code worker_check_shapes(sched_worker *w, inferd_session *session, int batch, inferd_status *st) {
  if (w->shape_checked[batch]) return INFERD_OK;
  sched_model *m = w->model;
  for (int i = 0; i < m->n_outputs; i++) {
    const inferd_tensor_info *info = &m->output_info[i];
    int rank = 0;
    int64_t dims[INFERD_MAX_RANK];
    inferd_code rc = inferd_session_output_shape(session, batch, i, &rank, dims, st);
    if (rc != INFERD_OK) return rc;
    bool same = rank == info->rank && dims[0] == batch;
    for (int d = 1; same && d < rank; d++) same = dims[d] == info->dims[d];
    if (!same) {
      int64_t want[INFERD_MAX_RANK];
      memcpy(want, info->dims, sizeof want);
      want[0] = batch;
      char got_s[128], want_s[128];
      return core_fail(st, INFERD_UNSUPPORTED, "output '%s' at batch %d has shape %s; batching needs %s",
                       info->name, batch, core_shape_str(rank, dims, got_s, sizeof got_s),
                       core_shape_str(info->rank, want, want_s, sizeof want_s));
    }
  }
  w->shape_checked[batch] = 1;
  return INFERD_OK;
}

static inferd_code worker_alloc(sched_worker *w, inferd_status *st) {
  sched_model *m = w->model;
  size_t batch = (size_t)m->params.batch_size;
  /* Pages (huge-page advised) touched first by this thread: local to its node. */
  w->input_bytes = batch * m->input_elems * sizeof(float);
  w->input = core_pages_alloc(w->input_bytes);
  if (!w->input) return core_fail(st, INFERD_NO_MEMORY, "no memory for a %zu-byte batch input", w->input_bytes);
  for (int i = 0; i < m->n_outputs; i++) {
    w->output_bytes[i] = CORE_MAX(batch * m->output_elems[i] * sizeof(float), sizeof(float));
    w->outputs[i] = core_pages_alloc(w->output_bytes[i]);
    if (!w->outputs[i])
      return core_fail(st, INFERD_NO_MEMORY, "no memory for a %zu-byte batch output", w->output_bytes[i]);
  }
  w->batch = calloc(batch, sizeof *w->batch);
  w->skipped = calloc(batch, sizeof *w->skipped);
  w->queue_seconds = calloc(batch, sizeof *w->queue_seconds);
  w->shape_checked = calloc(batch + 1, 1);
  if (!w->batch || !w->skipped || !w->queue_seconds || !w->shape_checked)
    return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  return INFERD_OK;
}

/* Frees what worker_start made (any part of it). On the worker thread. */
static void worker_release(sched_worker *w) {
  inferd_session_free(w->session);
  w->session = NULL;
  if (w->input) core_pages_free(w->input, w->input_bytes);
  w->input = NULL;
  for (int i = 0; i < SCHED__MAX_OUTPUTS; i++) {
    if (w->outputs[i]) core_pages_free(w->outputs[i], w->output_bytes[i]);
    w->outputs[i] = NULL;
  }
  free(w->batch);
  free(w->skipped);
  free(w->queue_seconds);
  free(w->shape_checked);
  w->batch = w->skipped = NULL;
  w->queue_seconds = NULL;
  w->shape_checked = NULL;
}

/* Calls the bind callback for the worker's slot and records what it reported. *threads
 * gets the thread count its session must have. On the worker thread, without the lock. */
static inferd_code worker_bind(sched_worker *w, int *threads, inferd_status *st) {
  sched_model *m = w->model;
  *threads = m->params.worker.threads;
  if (!m->params.worker.bind) return INFERD_OK;
  pthread_mutex_lock(&m->lock);
  sched_binding b = {.slot = w->slot, .worker_id = w->id};
  pthread_mutex_unlock(&m->lock);
  inferd_code rc = m->params.worker.bind(m->params.worker.bind_ctx, &b, st);
  if (rc != INFERD_OK) {
    if (st && st->code == INFERD_OK) core_fail(st, rc, "%s", inferd_code_str(rc));
    core_status_prefix(st, "bind");
    return rc;
  }
  if (b.threads > 0) *threads = b.threads;
  b.cores[sizeof b.cores - 1] = '\0';
  pthread_mutex_lock(&m->lock);
  w->threads = *threads;
  memcpy(w->cores, b.cores, sizeof w->cores);
  pthread_mutex_unlock(&m->lock);
  return INFERD_OK;
}

/* A new session of `threads` threads with the plans of batch 1 and batch_size bound. */
static inferd_code worker_new_session(sched_worker *w, int threads, inferd_session **out, inferd_status *st) {
  sched_model *m = w->model;
  inferd_session_params sp = {.threads = threads};
  inferd_code rc = inferd_session_new(m->engine_model, &sp, out, st);
  if (rc != INFERD_OK) return rc;
  /* Checked before a run writes into the buffers: a model whose outputs do not follow
   * the batch fails its start, not its first full batch. */
  rc = worker_check_shapes(w, *out, 1, st);
  if (rc == INFERD_OK) rc = worker_check_shapes(w, *out, m->params.batch_size, st);
  /* Binds both plans (compiled, kernels generated, arena mapped) before the session
   * serves, also for a session made by a re-bind, whose shapes are checked already.
   * No run of a batch of zeros: it would only add its time to start-up. */
  const int sizes[2] = {1, m->params.batch_size};
  for (int i = 0; rc == INFERD_OK && i < 2; i++) { /* a size bound already is looked up, not bound again */
    int rank;
    int64_t dims[INFERD_MAX_RANK];
    rc = inferd_session_output_shape(*out, sizes[i], 0, &rank, dims, st);
    if (rc != INFERD_OK) core_status_prefix(st, "binding the batch-%d plan", sizes[i]);
  }
  if (rc != INFERD_OK) {
    inferd_session_free(*out);
    *out = NULL;
  }
  return rc;
}

/* Marks the calling thread as batch work (Linux's SCHED_BATCH, nice unchanged): woken
 * by a submit, it no longer preempts the thread running on its core - the HTTP thread
 * that queued the request, a client - but runs when that one blocks or its time slice
 * ends. On an idle core it runs at once, as before. What it gives up is at most one
 * slice (a few milliseconds) of wake-up latency, and only while its core is busy: little
 * next to a real model's batch. What it saves is a pair of context switches per request
 * when requests are small and many: the HTTP thread queues a whole round of them before
 * the worker takes them (bench/http.sh: v2 infer of a tiny model, 10-20% more requests
 * per second on 2 cores shared with the load). The engine's thread team, made by this
 * thread's first run, inherits the policy. A refusal (a container's seccomp) is no
 * reason not to serve: the thread keeps the normal policy. */
static void worker_mark_batch(const sched_worker *w) {
  struct sched_param param = {.sched_priority = 0};
  int err = pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
  if (err != 0)
    core_log(CORE_LOG_DEBUG, "model '%s' worker %d keeps the normal scheduling policy: %s", w->model->name, w->id,
             strerror(err));
}

static inferd_code worker_start(sched_worker *w, inferd_status *st) {
  int threads;
  worker_mark_batch(w);
  inferd_code rc = worker_bind(w, &threads, st);
  if (rc != INFERD_OK) return rc;
  rc = worker_alloc(w, st);
  if (rc == INFERD_OK) rc = worker_new_session(w, threads, &w->session, st);
  if (rc == INFERD_OK) w->session_threads = threads;
  return rc;
}

/* Re-binds a running worker after a scale changed the placement plan (see DESIGN): the
 * bind callback again for its slot, and a new session when the thread count changed.
 * Between batches, on the worker thread, without the lock. A failure keeps the worker
 * serving as it was and is logged: a placement that cannot change is no reason to stop
 * serving. */
static void worker_rebind(sched_worker *w, unsigned placement) {
  sched_model *m = w->model;
  inferd_status st;
  core_status_ok(&st);
  int threads;
  inferd_code rc = worker_bind(w, &threads, &st);
  bool bound = rc == INFERD_OK;
  if (rc == INFERD_OK && threads != w->session_threads) {
    inferd_session *session = NULL;
    rc = worker_new_session(w, threads, &session, &st);
    if (rc == INFERD_OK) {
      inferd_session_free(w->session);
      w->session = session;
      w->session_threads = threads;
      w->run_scratch = 0; /* a new arena: no run has taken its pages */
    }
  }
  pthread_mutex_lock(&m->lock);
  w->placement = placement; /* tried once per scale, even when it failed */
  w->threads = w->session_threads;
  int slot = w->slot;
  pthread_cond_broadcast(&m->state);
  pthread_mutex_unlock(&m->lock);
  if (rc != INFERD_OK && !bound)
    core_log(CORE_LOG_WARN, "model '%s' worker %d keeps its previous placement: %s", m->name, w->id, st.message);
  else if (rc != INFERD_OK)
    core_log(CORE_LOG_WARN, "model '%s' worker %d re-bound to slot %d%s%s but keeps its %d-thread session: %s", m->name,
             w->id, slot, w->cores[0] ? ", cores " : "", w->cores, w->session_threads, st.message);
  else
    core_log(CORE_LOG_INFO, "model '%s': worker %d re-bound (slot %d, %d threads%s%s)", m->name, w->id, slot,
             threads, w->cores[0] ? ", cores " : "", w->cores);
}

/* ---- the batcher ---------------------------------------------------------------------- */

typedef struct batch_take {
  int n;         /* requests to run: w->batch[0..n) */
  int skipped;   /* w->skipped[0..skipped): complete with TIMEOUT without running */
  int expired;
  int cancelled;
  int depth;     /* left queued */
} batch_take;

void sched__wait_until(pthread_cond_t *cond, pthread_mutex_t *mutex, double until) {
  struct timespec ts;
  ts.tv_sec = (time_t)until;
  ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  if (ts.tv_nsec < 0) ts.tv_nsec = 0;
  pthread_cond_timedwait(cond, mutex, &ts); /* clock: CLOCK_MONOTONIC (sched_model_new) */
}

sched_request *sched__pop_locked(sched_model *m) {
  sched_request *r = m->ring[m->head];
  m->ring[m->head] = NULL;
  m->head = m->head + 1 == m->params.job_queue_size ? 0 : m->head + 1;
  m->count--;
  return r;
}

typedef enum skip_reason { SKIP_NONE, SKIP_CANCELLED, SKIP_EXPIRED } skip_reason;

/* Whether r, just popped, must complete with INFERD_TIMEOUT instead of running (sched.h):
 * cancelled while queued, or its deadline passed there; its status then says which. A
 * batch take and the flush when the last worker goes both skip by this. */
static skip_reason skip_queued(const sched_model *m, sched_request *r, double now) {
  double waited_ms = (now - r->enqueue_time) * 1e3;
  if (atomic_load_explicit(&r->cancelled, memory_order_acquire)) {
    core_fail(&r->status, INFERD_TIMEOUT, "model '%s': cancelled after %.0f ms in the queue", m->name, waited_ms);
    return SKIP_CANCELLED;
  }
  if (r->deadline > 0 && now >= r->deadline) {
    core_fail(&r->status, INFERD_TIMEOUT, "model '%s': response timeout: %.0f ms in the queue", m->name, waited_ms);
    return SKIP_EXPIRED;
  }
  return SKIP_NONE;
}

void sched__flush_locked(sched_model *m, inferd_code code, const char *why) {
  while (m->count > 0 && m->live == 0) {
    sched_request *r = sched__pop_locked(m);
    inferd_code r_code = INFERD_TIMEOUT;
    if (skip_queued(m, r, core_now_seconds()) == SKIP_NONE)
      r_code = core_fail(&r->status, code, "model '%s': %s", m->name, why);
    pthread_mutex_unlock(&m->lock);
    r->done(r, r_code, r->user);
    pthread_mutex_lock(&m->lock);
  }
}

typedef enum take_result {
  TAKE_EXIT,   /* stopped, or draining with nothing left */
  TAKE_BATCH,  /* *t holds a batch to run */
  TAKE_REBIND, /* the placement changed: re-bind, then take again */
} take_result;

static bool rebind_due_locked(const sched_worker *w) { return w->placement != w->model->placement; }

/* Waits for and takes the next batch (see DESIGN). Caller holds the model's lock. */
static take_result worker_take_locked(sched_worker *w, batch_take *t) {
  sched_model *m = w->model;
  const int batch_size = m->params.batch_size, fill = sched__fill_target(m);
  /* Requests that arrived while this worker ran its previous batch and wait as it comes
   * back: the model is saturated. Requests left over from a batch that was full (a burst
   * larger than batch_size, a v2 infer of more rows) with nothing accepted since are not:
   * holding them open would wait for arrivals that are not coming. */
  bool saturated = m->count > 0 && m->accepted != w->accepted_at_take;
  for (;;) {
    while (!w->stop && !rebind_due_locked(w) && (m->count == 0 || m->forming)) {
      if (m->draining && m->count == 0) return TAKE_EXIT;
      w->state = SCHED_WORKER_READY;
      m->idle++;
      if (m->forming) pthread_cond_signal(&m->fill); /* an idle peer: stop holding */
      pthread_cond_wait(&m->work, &m->lock);
      m->idle--;
      saturated = false; /* woken by an arrival: spare capacity */
    }
    if (w->stop) return TAKE_EXIT;
    if (rebind_due_locked(w)) {
      if (m->count > 0 && m->idle > 0) pthread_cond_signal(&m->work); /* it may have been woken for them */
      return TAKE_REBIND;
    }
    if (!saturated || m->count >= fill || m->params.max_batch_delay_ms == 0 || m->draining || m->idle > 0)
      break;
    /* Hold the partial batch open until it fills, the oldest has waited
     * max_batch_delay, a peer goes idle, or we must stop or re-bind. */
    const sched_request *oldest = m->ring[m->head];
    double until = oldest->enqueue_time + m->params.max_batch_delay_ms * 1e-3;
    if (oldest->deadline > 0) { /* a hold spends at most half of the oldest's time to answer */
      double latest = oldest->deadline - CORE_MAX(w->last_batch_seconds, (oldest->deadline - oldest->enqueue_time) / 2);
      if (latest < until) until = latest;
    }
    m->forming = true;
    w->state = SCHED_WORKER_READY;
    while (!w->stop && !rebind_due_locked(w) && !m->draining && m->count > 0 && m->count < fill &&
           m->idle == 0 && core_now_seconds() < until)
      sched__wait_until(&m->fill, &m->lock, until);
    m->forming = false;
    if (w->stop || rebind_due_locked(w)) {
      if (m->count > 0 && m->idle > 0) pthread_cond_signal(&m->work);
      return w->stop ? TAKE_EXIT : TAKE_REBIND;
    }
    if (m->count > 0) break;
    saturated = false; /* defensive: nothing can take the queue from the holder */
  }

  double now = core_now_seconds();
  w->accepted_at_take = m->accepted;
  *t = (batch_take){0};
  while (m->count > 0 && t->n < batch_size && t->skipped < batch_size) {
    sched_request *r = sched__pop_locked(m);
    skip_reason skip = skip_queued(m, r, now);
    if (skip != SKIP_NONE) {
      w->skipped[t->skipped++] = r;
      if (skip == SKIP_CANCELLED) t->cancelled++;
      else t->expired++;
    } else {
      r->start_time = now;
      w->queue_seconds[t->n] = now - r->enqueue_time;
      w->batch[t->n++] = r;
    }
  }
  t->depth = m->count;
  if (m->count > 0 && m->idle > 0) pthread_cond_signal(&m->work);
  /* Draining with nothing left: idle workers must wake to exit. */
  if (m->count == 0 && m->draining) pthread_cond_broadcast(&m->work);
  w->state = SCHED_WORKER_BUSY;
  return TAKE_BATCH;
}

/* ---- running a batch ------------------------------------------------------------------ */

static void worker_run(sched_worker *w, const batch_take *t) {
  sched_model *m = w->model;
  const size_t in_item = m->input_elems;
  inferd_status st;
  core_status_ok(&st);
  inferd_code rc = INFERD_OK;
  double seconds = 0;
  int runs = 0;
  if (t->n > 0) {
    for (int k = 0; k < t->n; k++) memcpy(w->input + (size_t)k * in_item, w->batch[k]->input, in_item * sizeof(float));
    for (int row = 0, rows; rc == INFERD_OK && row < t->n; row += rows) {
      rows = chunk_rows(t->n - row, m->params.batch_size);
      if ((rc = worker_check_shapes(w, w->session, rows, &st)) != INFERD_OK) break;
      const float *inputs[1] = {w->input + (size_t)row * in_item};
      float *outputs[SCHED__MAX_OUTPUTS];
      for (int i = 0; i < m->n_outputs; i++) outputs[i] = w->outputs[i] + (size_t)row * m->output_elems[i];
      double t0 = core_now_seconds();
      rc = inferd_session_run(w->session, rows, inputs, outputs, &st);
      seconds += core_now_seconds() - t0;
      size_t scratch = inferd_session_scratch_bytes(w->session, rows); /* bound by now, if it was not */
      if (scratch > w->run_scratch) w->run_scratch = scratch;
      runs++;
    }
    w->last_batch_seconds = seconds;
    if (rc == INFERD_OK)
      for (int k = 0; k < t->n; k++)
        for (int i = 0; i < m->n_outputs; i++)
          memcpy(w->batch[k]->output + m->output_offset[i], w->outputs[i] + (size_t)k * m->output_elems[i],
                 m->output_elems[i] * sizeof(float));
    else
      core_status_prefix(&st, "model '%s', batch of %d", m->name, t->n);
  }

  if (m->params.on_batch) {
    sched_batch_stats s = {
        .model = m->name,
        .worker_id = w->id,
        .batch_size = t->n,
        .expired = t->expired,
        .cancelled = t->cancelled,
        .queue_seconds = w->queue_seconds,
        .inference_seconds = seconds,
        .engine_runs = runs,
        .code = rc,
        .queue_depth = t->depth,
    };
    m->params.on_batch(m->params.stats_ctx, &s);
  }

  /* From each done call on, that request belongs to the caller again. */
  for (int k = 0; k < t->skipped; k++) {
    sched_request *r = w->skipped[k];
    r->done(r, INFERD_TIMEOUT, r->user);
  }
  for (int k = 0; k < t->n; k++) {
    sched_request *r = w->batch[k];
    inferd_code code = rc;
    if (rc != INFERD_OK) {
      r->status = st;
    } else if (atomic_load_explicit(&r->cancelled, memory_order_acquire)) {
      code = INFERD_TIMEOUT;
      core_fail(&r->status, code, "model '%s': cancelled while running", m->name);
    } else {
      core_status_ok(&r->status);
    }
    r->done(r, code, r->user);
  }
}

/* ---- the thread ------------------------------------------------------------------------ */

void sched__update_warmed_locked(sched_model *m) {
  bool starting = false, failed = false, running = false;
  for (int i = 0; i < m->n_workers; i++) {
    const sched_worker *x = m->workers[i];
    starting |= x->state == SCHED_WORKER_STARTING;
    failed |= x->state == SCHED_WORKER_FAILED;
    running |= !x->stop && (x->state == SCHED_WORKER_READY || x->state == SCHED_WORKER_BUSY);
  }
  if (!starting && !failed && running) m->warmed = true;
}

void *sched__worker_main(void *arg) {
  sched_worker *w = arg;
  sched_model *m = w->model;
  inferd_status st;
  core_status_ok(&st);
  double t0 = core_now_seconds();
  inferd_code rc = worker_start(w, &st);

  pthread_mutex_lock(&m->lock);
  if (rc != INFERD_OK) {
    core_status_prefix(&st, "model '%s' worker %d", m->name, w->id);
    core_log(CORE_LOG_ERROR, "%s", st.message);
    w->error = st;
    w->state = SCHED_WORKER_FAILED;
    if (!w->stop) m->live--;
  } else {
    w->arena_bytes = inferd_session_arena_bytes(w->session);
    w->state = w->stop ? SCHED_WORKER_STOPPING : SCHED_WORKER_READY;
    core_log(CORE_LOG_INFO, "model '%s': worker %d ready in %.0f ms (slot %d, %d threads%s%s)", m->name, w->id,
             (core_now_seconds() - t0) * 1e3, w->slot, w->threads, w->cores[0] ? ", cores " : "", w->cores);
  }
  sched__update_warmed_locked(m);
  pthread_cond_broadcast(&m->state);

  if (rc == INFERD_OK) {
    batch_take t = {0}; /* gcc -O1 (the TSan build) cannot tell TAKE_BATCH fills it */
    take_result take;
    while ((take = worker_take_locked(w, &t)) != TAKE_EXIT) {
      unsigned placement = m->placement;
      pthread_mutex_unlock(&m->lock);
      if (take == TAKE_REBIND) worker_rebind(w, placement);
      else worker_run(w, &t);
      pthread_mutex_lock(&m->lock);
      w->arena_bytes = inferd_session_arena_bytes(w->session); /* a re-bind's session, or a size run first */
      w->scratch_bytes = w->run_scratch;
      if (take == TAKE_BATCH) {
        if (t.n > 0) w->batches++;
        w->requests += t.n;
      }
    }
    if (!w->stop) m->live--; /* draining and the queue is empty */
    w->state = SCHED_WORKER_STOPPING;
  }
  if (m->live == 0 && m->count > 0) sched__flush_locked(m, INFERD_UNAVAILABLE, "no worker left to run it");
  w->exited = true;
  pthread_cond_broadcast(&m->state);
  pthread_mutex_unlock(&m->lock);
  /* `w` stays valid until the management call joins this thread. */
  worker_release(w);
  return NULL;
}
