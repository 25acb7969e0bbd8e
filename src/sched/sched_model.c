/*
 * sched_model.c - a model's queue and worker pool: creation, submit, scaling,
 * readiness, describe, drain. The worker thread and the batching rule are in
 * sched_worker.c; the public contract (ownership of requests, threading) in sched.h.
 *
 * DESIGN
 * The queue is a ring of job_queue_size request pointers allocated with the model: a
 * submit is lock, check, store a pointer, maybe signal one condition variable, unlock.
 * Nothing is allocated per request or per batch; requests are the caller's.
 *
 * Each model has its own mutex and three condition variables (all on CLOCK_MONOTONIC):
 *   work   idle workers wait for requests; a submit signals one when a worker is idle
 *          and none is holding a batch open;
 *   fill   the one worker holding a partial batch open waits for it to fill; a submit
 *          that fills it, a peer going idle, drain and stop signal it;
 *   state  management calls wait for workers to start or exit.
 * No lock is shared between models, and the engine runs outside the model's lock.
 *
 * Counters under the lock: `live` is the number of workers that will serve (not
 * stopping, failed or exited); a submit is refused when it is 0. Scale-down marks the
 * highest slots to stop first (so the slots in use stay 0..n-1, matching a placement
 * plan; a scale that changes the placement first renumbers them 0..n-1, closing the
 * hole a worker that failed to start leaves), wakes them, and joins them once they
 * have finished their current batch.
 * Workers that exited (stopped or failed) stay listed, for describe, until the next
 * scale or drain joins and frees them. A scale that changes the count (with a bind
 * callback) also bumps `placement`: the caller has installed a plan for the new count,
 * and every running worker re-binds to its slot of it between two batches (see
 * sched_worker.c), so workers never share cores after a scale-up and never keep a
 * scaled-down share after a scale-down.
 *
 * Drain sets `draining` (submits refused from then on), wakes everyone, and waits for
 * every worker to exit: a draining worker never holds a batch open and exits only
 * when the queue is empty. It then joins them.
 *
 * Config keys obeyed (through sched_model_params, filled by the server): batchSize
 * (batch_size), maxBatchDelay (max_batch_delay_ms), responseTimeout
 * (response_timeout_ms), job_queue_size, minWorkers / default_workers_per_model
 * (workers), and the placement plan's threads per worker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched/sched_internal.h"

/* ---- helpers ---------------------------------------------------------------------------- */

const char *sched_worker_state_name(sched_worker_state state) {
  static const char *const names[] = {
      [SCHED_WORKER_STARTING] = "STARTING", [SCHED_WORKER_READY] = "READY",   [SCHED_WORKER_BUSY] = "BUSY",
      [SCHED_WORKER_STOPPING] = "STOPPING", [SCHED_WORKER_FAILED] = "FAILED",
  };
  return (unsigned)state < CORE_ARRAY_LEN(names) ? names[state] : "?";
}

void sched_request_cancel(sched_request *request) {
  atomic_store_explicit(&request->cancelled, true, memory_order_release);
}

size_t sched_model_input_elems(const sched_model *m) { return m->input_elems; }
size_t sched_model_output_elems(const sched_model *m) { return m->output_total; }
int sched_model_output_count(const sched_model *m) { return m->n_outputs; }
size_t sched_model_output_offset(const sched_model *m, int i) { return m->output_offset[i]; }
size_t sched_model_output_item(const sched_model *m, int i) { return m->output_elems[i]; }

static bool any_state_locked(const sched_model *m, sched_worker_state state) {
  for (int i = 0; i < m->n_workers; i++)
    if (m->workers[i]->state == state && !m->workers[i]->exited) return true;
  return false;
}

/* A running worker has yet to re-bind to the model's current placement. */
static bool any_rebind_pending_locked(const sched_model *m) {
  for (int i = 0; i < m->n_workers; i++) {
    const sched_worker *w = m->workers[i];
    if (!w->stop && !w->exited && w->state != SCHED_WORKER_FAILED && w->placement != m->placement) return true;
  }
  return false;
}

static bool ready_locked(const sched_model *m) {
  if (m->draining || !m->warmed) return false;
  for (int i = 0; i < m->n_workers; i++) {
    const sched_worker *w = m->workers[i];
    if (!w->stop && (w->state == SCHED_WORKER_READY || w->state == SCHED_WORKER_BUSY)) return true;
  }
  return false;
}

/* ---- workers: start, stop, join -------------------------------------------------------------- */

/* Starts one worker. Caller holds m->lock (the new thread waits for it). */
static inferd_code add_worker_locked(sched_model *m, inferd_status *st) {
  if (m->n_workers == SCHED_MAX_WORKERS)
    return core_fail(st, INFERD_INVALID_ARG, "model '%s': at most %d workers", m->name, SCHED_MAX_WORKERS);
  int slot = 0; /* the smallest one free: slots in use stay 0..n-1 */
  for (int i = 0; i < m->n_workers; i++)
    if (m->workers[i]->slot == slot) slot++, i = -1;
  sched_worker *w = calloc(1, sizeof *w);
  if (!w) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  w->model = m;
  w->id = m->next_id++;
  w->slot = slot;
  w->state = SCHED_WORKER_STARTING;
  w->start_time = core_now_seconds();
  w->threads = m->params.worker.threads;
  w->placement = m->placement; /* it binds to the plan in force now */
  int err = pthread_create(&w->thread, NULL, sched__worker_main, w);
  if (err) {
    free(w);
    return core_fail(st, INFERD_INTERNAL, "model '%s': cannot start a worker thread: %s", m->name, strerror(err));
  }
  m->workers[m->n_workers++] = w;
  m->live++;
  return INFERD_OK;
}

/* Joins and frees every exited worker. Caller holds m->lock; it is dropped while
 * joining (an exited worker is only freeing its session, without the lock). */
static void reap_locked(sched_model *m) {
  sched_worker *gone[SCHED_MAX_WORKERS];
  int n_gone = 0, kept = 0;
  for (int i = 0; i < m->n_workers; i++) {
    sched_worker *w = m->workers[i];
    if (w->exited) gone[n_gone++] = w;
    else m->workers[kept++] = w;
  }
  m->n_workers = kept;
  if (!n_gone) return;
  pthread_mutex_unlock(&m->lock);
  for (int i = 0; i < n_gone; i++) {
    pthread_join(gone[i]->thread, NULL);
    free(gone[i]);
  }
  pthread_mutex_lock(&m->lock);
  sched__update_warmed_locked(m); /* a failed worker forgotten may leave only running ones */
}

/* Renumbers the slots of the workers that will serve 0..k-1, in their order. A worker
 * that failed to start leaves a hole (slots 0, 2, 3), and a scale-down that stops the
 * highest slots would leave slot 2 in a plan of 2 workers, which has none: the caller's
 * bind callback would put it on another slot's cores. Caller holds m->lock; the
 * placement is about to change, so every renumbered worker re-binds. */
static void compact_slots_locked(sched_model *m) {
  for (int next = 0;; next++) {
    sched_worker *pick = NULL; /* the smallest slot >= next among those not renumbered */
    for (int i = 0; i < m->n_workers; i++) {
      sched_worker *w = m->workers[i];
      if (w->stop || w->exited || w->state == SCHED_WORKER_FAILED || w->slot < next) continue;
      if (!pick || w->slot < pick->slot) pick = w;
    }
    if (!pick) return;
    pick->slot = next;
  }
}

/* Stops `count` live workers, highest slot first, and waits for them to exit. */
static void remove_workers_locked(sched_model *m, int count) {
  for (; count > 0; count--) {
    sched_worker *pick = NULL;
    for (int i = 0; i < m->n_workers; i++) {
      sched_worker *w = m->workers[i];
      if (w->stop || w->exited || w->state == SCHED_WORKER_FAILED) continue;
      if (!pick || w->slot > pick->slot) pick = w;
    }
    if (!pick) break;
    pick->stop = true;
    m->live--;
  }
  pthread_cond_broadcast(&m->work);
  pthread_cond_broadcast(&m->fill);
  for (;;) {
    bool waiting = false;
    for (int i = 0; i < m->n_workers; i++) waiting |= m->workers[i]->stop && !m->workers[i]->exited;
    if (!waiting) break;
    pthread_cond_wait(&m->state, &m->lock);
  }
  reap_locked(m);
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

static inferd_code check_params(const sched_model_params *p, inferd_status *st) {
  if (p->batch_size < 0 || p->batch_size > SCHED_MAX_BATCH)
    return core_fail(st, INFERD_INVALID_ARG, "batch_size %d outside 1..%d", p->batch_size, SCHED_MAX_BATCH);
  if (p->max_batch_delay_ms < 0)
    return core_fail(st, INFERD_INVALID_ARG, "max_batch_delay %d ms is negative", p->max_batch_delay_ms);
  if (p->response_timeout_ms < 0)
    return core_fail(st, INFERD_INVALID_ARG, "response_timeout %d ms is negative", p->response_timeout_ms);
  if (p->job_queue_size < 0 || p->job_queue_size > SCHED_MAX_QUEUE)
    return core_fail(st, INFERD_INVALID_ARG, "job_queue_size %d outside 1..%d", p->job_queue_size, SCHED_MAX_QUEUE);
  if (p->workers < 0 || p->workers > SCHED_MAX_WORKERS)
    return core_fail(st, INFERD_INVALID_ARG, "workers %d outside 0..%d", p->workers, SCHED_MAX_WORKERS);
  if (p->worker.threads < 0 || p->worker.threads > 4096)
    return core_fail(st, INFERD_INVALID_ARG, "threads per worker %d outside 0..4096", p->worker.threads);
  return INFERD_OK;
}

/* Item sizes from the model's declared I/O: axis 0 is the batch, the rest is one item. */
static inferd_code describe_model(sched_model *m, inferd_status *st) {
  inferd_model *em = m->engine_model;
  int n_in = inferd_model_num_inputs(em), n_out = inferd_model_num_outputs(em);
  if (n_in != 1)
    return core_fail(st, INFERD_UNSUPPORTED, "model '%s' has %d inputs; the scheduler batches single-input models",
                     m->name, n_in);
  if (n_out < 1 || n_out > SCHED__MAX_OUTPUTS)
    return core_fail(st, INFERD_UNSUPPORTED, "model '%s' has %d outputs; 1..%d supported", m->name, n_out,
                     SCHED__MAX_OUTPUTS);
  inferd_tensor_info info;
  if (inferd_model_input(em, 0, &info) != INFERD_OK || info.rank < 1)
    return core_fail(st, INFERD_UNSUPPORTED, "model '%s': input has no batch axis", m->name);
  int64_t elems = core_shape_count(info.rank - 1, info.dims + 1);
  if (elems <= 0)
    return core_fail(st, INFERD_UNSUPPORTED, "model '%s': input '%s' has no elements per item", m->name, info.name);
  m->input_elems = (size_t)elems;
  m->n_outputs = n_out;
  for (int i = 0; i < n_out; i++) {
    inferd_tensor_info *o = &m->output_info[i];
    if (inferd_model_output(em, i, o) != INFERD_OK || o->rank < 1)
      return core_fail(st, INFERD_UNSUPPORTED, "model '%s': output %d has no batch axis", m->name, i);
    elems = core_shape_count(o->rank - 1, o->dims + 1);
    if (elems < 0 || (i == 0 && elems == 0))
      return core_fail(st, INFERD_UNSUPPORTED, "model '%s': output '%s' has no usable item size", m->name, o->name);
    m->output_elems[i] = (size_t)elems;
    m->output_offset[i] = m->output_total;
    if ((size_t)elems > SIZE_MAX / sizeof(float) - m->output_total)
      return core_fail(st, INFERD_UNSUPPORTED, "model '%s': its outputs are too large", m->name);
    m->output_total += (size_t)elems;
  }
  return INFERD_OK;
}

inferd_code sched_model_new(inferd_model *model, const sched_model_params *params, sched_model **out,
                            inferd_status *st) {
  *out = NULL;
  sched_model_params p = params ? *params : (sched_model_params){0};
  inferd_code rc = check_params(&p, st);
  if (rc != INFERD_OK) return rc;
  if (!model) return core_fail(st, INFERD_INVALID_ARG, "no model");
  if (p.batch_size == 0) p.batch_size = 1;
  if (p.job_queue_size == 0) p.job_queue_size = 100;

  sched_model *m = calloc(1, sizeof *m);
  if (!m) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  m->engine_model = model;
  snprintf(m->name, sizeof m->name, "%s", p.name ? p.name : "model");
  p.name = m->name;
  m->params = p;
  if ((rc = describe_model(m, st)) != INFERD_OK) {
    free(m);
    return rc;
  }
  m->ring = calloc((size_t)p.job_queue_size, sizeof *m->ring);
  if (!m->ring) {
    free(m);
    return core_fail(st, INFERD_NO_MEMORY, "out of memory for a queue of %d", p.job_queue_size);
  }
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_mutex_init(&m->lock, NULL);
  pthread_mutex_init(&m->manage, NULL);
  pthread_cond_init(&m->work, &attr);
  pthread_cond_init(&m->fill, &attr);
  pthread_cond_init(&m->state, &attr);
  pthread_condattr_destroy(&attr);

  core_log(CORE_LOG_INFO, "model '%s': %d workers, batch_size %d, max_batch_delay %d ms, job_queue_size %d", m->name,
           p.workers, p.batch_size, p.max_batch_delay_ms, p.job_queue_size);
  pthread_mutex_lock(&m->lock);
  for (int i = 0; i < p.workers && rc == INFERD_OK; i++) rc = add_worker_locked(m, st);
  pthread_mutex_unlock(&m->lock);
  if (rc != INFERD_OK) {
    sched_model_free(m);
    return rc;
  }
  *out = m;
  return INFERD_OK;
}

void sched_model_drain(sched_model *m) {
  pthread_mutex_lock(&m->manage);
  pthread_mutex_lock(&m->lock);
  if (!m->draining) {
    m->draining = true;
    pthread_cond_broadcast(&m->work);
    pthread_cond_broadcast(&m->fill);
    pthread_cond_broadcast(&m->state);
  }
  for (;;) {
    bool running = false;
    for (int i = 0; i < m->n_workers; i++) running |= !m->workers[i]->exited;
    if (!running) break;
    pthread_cond_wait(&m->state, &m->lock);
  }
  reap_locked(m);
  /* Only when there were no workers to run them (live is 0 here). */
  sched__flush_locked(m, INFERD_UNAVAILABLE, "shut down with no worker to run it");
  pthread_mutex_unlock(&m->lock);
  pthread_mutex_unlock(&m->manage);
}

void sched_model_free(sched_model *m) {
  if (!m) return;
  sched_model_drain(m);
  pthread_cond_destroy(&m->work);
  pthread_cond_destroy(&m->fill);
  pthread_cond_destroy(&m->state);
  pthread_mutex_destroy(&m->lock);
  pthread_mutex_destroy(&m->manage);
  free(m->ring);
  free(m);
}

/* ---- requests ---------------------------------------------------------------------------------- */

/* Queues r (NULL), or says why it is refused. Caller holds m->lock; signals nothing. */
static const char *submit_locked(sched_model *m, sched_request *r, double now) {
  const char *refusal = m->draining ? "is shutting down"
                        : m->live == 0 ? "has no workers"
                        : m->count == m->params.job_queue_size ? "job queue is full"
                                                               : NULL;
  if (refusal) {
    m->refused++;
    return refusal;
  }
  r->start_time = 0;
  r->enqueue_time = now;
  r->deadline = r->deadline > 0 ? r->deadline
                : m->params.response_timeout_ms > 0 ? now + m->params.response_timeout_ms * 1e-3
                                                    : 0;
  int tail = m->head + m->count;
  if (tail >= m->params.job_queue_size) tail -= m->params.job_queue_size;
  m->ring[tail] = r;
  m->count++;
  m->accepted++;
  return NULL;
}

inferd_code sched_submit(sched_model *m, sched_request *r) {
  if (!r) return INFERD_INVALID_ARG;
  return sched_submit_many(m, &r, 1) == 1 ? INFERD_OK : r->status.code;
}

int sched_submit_many(sched_model *m, sched_request *const *requests, int n) {
  int valid = 0; /* checked before the lock: a request without input, output or done is refused */
  while (valid < n && requests[valid] && requests[valid]->input && requests[valid]->output && requests[valid]->done)
    valid++;
  double now = core_now_seconds();
  int accepted = 0, depth;
  const char *refusal = NULL;
  pthread_mutex_lock(&m->lock);
  while (accepted < valid && !(refusal = submit_locked(m, requests[accepted], now))) accepted++;
  /* One wake-up for all: the worker it wakes takes them together. Signalled under the
   * lock: once it is dropped, an accepted request may run and be answered, and the last
   * reference to the model go with it (a preprocessing thread submits a job whose model
   * reference the loop thread drops), before this call returns. */
  if (accepted > 0) {
    if (m->forming) {
      if (m->count >= sched__fill_target(m)) pthread_cond_signal(&m->fill);
    } else if (m->idle > 0) {
      pthread_cond_signal(&m->work);
    }
  }
  depth = m->count;
  pthread_mutex_unlock(&m->lock);
  sched_request *r = accepted < n ? requests[accepted] : NULL;
  if (r) r->start_time = 0;
  if (r && refusal)
    core_fail(&r->status, INFERD_UNAVAILABLE, "model '%s' %s (%d requests queued)", m->name, refusal, depth);
  else if (r)
    core_fail(&r->status, INFERD_INVALID_ARG, "request without %s",
              !r->input ? "input" : !r->output ? "output" : "done");
  return accepted;
}

/* ---- management -------------------------------------------------------------------------------- */

inferd_code sched_model_scale(sched_model *m, int workers, inferd_status *st) {
  if (workers < 0 || workers > SCHED_MAX_WORKERS)
    return core_fail(st, INFERD_INVALID_ARG, "workers %d outside 0..%d", workers, SCHED_MAX_WORKERS);
  inferd_code rc = INFERD_OK;
  pthread_mutex_lock(&m->manage);
  pthread_mutex_lock(&m->lock);
  if (m->draining) {
    rc = core_fail(st, INFERD_UNAVAILABLE, "model '%s' is shutting down", m->name);
  } else {
    reap_locked(m); /* workers that failed to start */
    int from = m->live;
    if (workers != from && m->params.worker.bind) {
      /* The caller's plan for the new count is in force: every running worker re-binds
       * at its next batch boundary (sched_worker.c); new ones bind to it at start. */
      m->placement++;
      compact_slots_locked(m);
      pthread_cond_broadcast(&m->work);
      pthread_cond_broadcast(&m->fill);
    }
    if (workers > m->live) {
      while (rc == INFERD_OK && m->live < workers) rc = add_worker_locked(m, st);
    } else if (workers < m->live) {
      remove_workers_locked(m, m->live - workers);
    }
    core_log(CORE_LOG_INFO, "model '%s': scaled from %d to %d workers", m->name, from, m->live);
  }
  pthread_mutex_unlock(&m->lock);
  pthread_mutex_unlock(&m->manage);
  return rc;
}

bool sched_model_ready(sched_model *m) {
  pthread_mutex_lock(&m->lock);
  bool ready = ready_locked(m);
  pthread_mutex_unlock(&m->lock);
  return ready;
}

inferd_code sched_model_wait_ready(sched_model *m, int timeout_ms, inferd_status *st) {
  double until = timeout_ms >= 0 ? core_now_seconds() + timeout_ms * 1e-3 : 0;
  inferd_code rc = INFERD_OK;
  pthread_mutex_lock(&m->lock);
  while ((any_state_locked(m, SCHED_WORKER_STARTING) || any_rebind_pending_locked(m)) && !m->draining) {
    if (timeout_ms < 0) {
      pthread_cond_wait(&m->state, &m->lock);
    } else if (core_now_seconds() < until) {
      sched__wait_until(&m->state, &m->lock, until);
    } else {
      rc = core_fail(st, INFERD_TIMEOUT, "model '%s': workers still starting or re-binding after %d ms", m->name,
                     timeout_ms);
      break;
    }
  }
  if (rc == INFERD_OK) {
    /* A worker that failed to start fails the wait even when others keep the model
     * ready: a scale-up that could not add its workers must not say it did. Failed
     * workers stay listed until the next scale reaps them. */
    const sched_worker *failed = NULL;
    for (int i = 0; i < m->n_workers && !failed; i++)
      if (m->workers[i]->state == SCHED_WORKER_FAILED && !m->workers[i]->stop) failed = m->workers[i];
    if (failed) {
      rc = failed->error.code;
      if (st) *st = failed->error;
    } else if (!ready_locked(m)) {
      rc = core_fail(st, INFERD_UNAVAILABLE, "model '%s' %s", m->name, m->draining ? "is shutting down" : "has no workers");
    }
  }
  pthread_mutex_unlock(&m->lock);
  if (rc == INFERD_OK) core_status_ok(st);
  return rc;
}

int sched_model_describe(sched_model *m, sched_model_info *info, sched_worker_info *workers, int max_workers) {
  pthread_mutex_lock(&m->lock);
  if (info) {
    *info = (sched_model_info){
        .name = m->name,
        .batch_size = m->params.batch_size,
        .max_batch_delay_ms = m->params.max_batch_delay_ms,
        .response_timeout_ms = m->params.response_timeout_ms,
        .job_queue_size = m->params.job_queue_size,
        .queue_depth = m->count,
        .workers = m->live,
        .ready = ready_locked(m),
        .draining = m->draining,
        .accepted = m->accepted,
        .refused = m->refused,
    };
  }
  int n = m->n_workers;
  for (int i = 0; workers && i < n && i < max_workers; i++) {
    const sched_worker *w = m->workers[i];
    workers[i] = (sched_worker_info){
        .id = w->id,
        .slot = w->slot,
        .state = w->stop && w->state != SCHED_WORKER_FAILED ? SCHED_WORKER_STOPPING : w->state,
        .threads = w->threads,
        .start_time = w->start_time,
        .batches = w->batches,
        .requests = w->requests,
        .arena_bytes = w->arena_bytes,
        .scratch_bytes = w->scratch_bytes,
        .error = w->error,
    };
    memcpy(workers[i].cores, w->cores, sizeof w->cores);
  }
  pthread_mutex_unlock(&m->lock);
  return n;
}
