/*
 * http_models.c - the registry of served models: what `load_models`, POST /models and
 * DELETE /models change, and what every prediction looks up.
 *
 * DESIGN
 *
 * Loading one model (http__registry_register, on the thread that asked: `inferd serve`'s
 * main thread at start, the management thread later):
 *   model store path -> archive_open (.mar / directory / bare .onnx) -> name, version,
 *   handler, index_to_name.json -> inferd_model_load_memory (the engine checks the whole
 *   graph now) -> the archive's ONNX bytes are dropped -> a placement plan on the
 *   machine's topology (topo_plan_new: workers x threads inside the usable physical
 *   cores) -> metrics series -> sched_model_new, whose workers bind themselves to the
 *   plan (bind_worker) and warm up. The metrics' queue depth reads the scheduler's
 *   queue at each scrape (queue_depth). Settings come from the request, else from
 *   models={...} in the config, else from the global keys (batch_size, max_batch_delay,
 *   default_response_timeout, default_workers_per_model, job_queue_size).
 * A bare .onnx file is served with the image_classifier handler; its labels are an
 * index_to_name.json next to it when there is one (so models/ works as it is).
 *
 * Lookup and lifetime: the registry is an immutable sorted array of model pointers (a
 * snapshot), replaced whole by each register, unregister and set-default. A request
 * finds its model in it by binary search, without a lock (see "reading" below), takes a
 * reference (an atomic count) and drops it when answered; the registry holds one more.
 * Unregistering publishes a snapshot without the model, drains its scheduler (queued
 * requests are answered) and drops the registry's reference; whoever drops the last
 * one hands the model to the management thread, which frees it (freeing joins worker
 * threads: never on an HTTP thread).
 *
 * Default versions follow TorchServe: the first version registered under a name, or
 * the one marked defaultVersion in models={...}, or the one set with set-default.
 *
 * Placement: each model has its own plan (its workers share the machine's cores with
 * other models' workers, as TorchServe's do). Scaling makes a new plan for the new
 * count and installs it before sched_model_scale: new workers bind to their slot of
 * it, and every worker already running re-binds to its slot (bind_worker again, at its
 * next batch boundary; a new session when its thread count changes), so workers never
 * share cores and workers x threads stays within the usable cores after any scale;
 * describe shows the new cores. cpu_launcher_args (--use_logical_core, --node_id, --ncores_per_instance) apply
 * when cpu_launcher_enable=true.
 *
 * Threading: lookups from any thread; registration, scaling and unregistration from
 * one thread at a time: the main thread until startup_done (the HTTP threads already
 * serve, but the management API refuses every change until then), then the management
 * thread.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "archive/archive.h"
#include "http/http_internal.h"

_Static_assert((int)CONFIG_MAX_WORKERS == (int)SCHED_MAX_WORKERS, "the config's worker range is the scheduler's");

/* A model served as tensors only (HANDLER_TENSOR, KServe v2 infer) is what a bare .onnx
 * whose input is not an image gets, or what a manifest may name. */
#define LABELS_FILE "index_to_name.json" /* the image_classifier's labels, as TorchServe names them */

/* ---- placement ------------------------------------------------------------------------- */

typedef struct http__placement {
  pthread_mutex_t lock; /* bind_worker runs on worker threads while scale swaps plans */
  const topo *topo;     /* NULL: no pinning */
  topo_plan_params params;
  topo_plan *plan;      /* NULL until a plan is made (0 workers, or no topo) */
  char model[160];      /* for logs */
  bool warned;
} http__placement;

/* sched_bind_fn: called first thing on every new worker thread, and again on every
 * running worker (between batches) after a scale installed a new plan. */
static inferd_code bind_worker(void *ctx, sched_binding *b, inferd_status *st) {
  http__placement *p = ctx;
  pthread_mutex_lock(&p->lock);
  if (p->plan && p->plan->worker_count > 0) {
    const topo_worker *tw = &p->plan->workers[b->slot % p->plan->worker_count];
    b->threads = tw->thread_count;
    snprintf(b->cores, sizeof b->cores, "%s", tw->cpu_list);
    inferd_status bind_st;
    if (topo_get_machine(p->topo)->bindable && topo_bind_current_thread(tw, &bind_st) != INFERD_OK && !p->warned) {
      /* Unpinned workers still serve; say so once rather than failing the model. */
      core_log(CORE_LOG_WARN, "model %s: worker %d runs unpinned: %s", p->model, b->worker_id, bind_st.message);
      p->warned = true;
    }
  }
  pthread_mutex_unlock(&p->lock);
  (void)st;
  return INFERD_OK;
}

/* Makes a plan for `workers` (0: automatic) and installs it; *count gets the plan's
 * worker count (workers when there is no topology). */
static inferd_code placement_plan(http__placement *p, int workers, int *count, inferd_status *st) {
  if (!p->topo) {
    *count = workers > 0 ? workers : 1;
    return INFERD_OK;
  }
  topo_plan_params params = p->params;
  params.workers = workers;
  topo_plan *plan;
  inferd_code code = topo_plan_new(p->topo, &params, &plan, st);
  if (code != INFERD_OK) return code;
  char summary[512];
  core_log(CORE_LOG_INFO, "model %s: placement %s", p->model, topo_plan_summary(plan, summary, sizeof summary));
  for (int i = 0; i < plan->warning_count; i++) core_log(CORE_LOG_WARN, "model %s: %s", p->model, plan->warnings[i]);
  pthread_mutex_lock(&p->lock);
  topo_plan *old = p->plan;
  p->plan = plan;
  pthread_mutex_unlock(&p->lock);
  topo_plan_free(old); /* bind_worker copies what it needs under the lock */
  *count = plan->worker_count;
  return INFERD_OK;
}

static void placement_free(http__placement *p) {
  if (!p) return;
  topo_plan_free(p->plan);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

/* ---- the registry ------------------------------------------------------------------------- */

/* The models as HTTP threads see them: immutable once published, sorted by name then
 * version, each entry with whether it is its name's default version. */
typedef struct http__entry {
  http__model *model;
  bool is_default;
} http__entry;

typedef struct http__snapshot {
  int count;
  http__entry entries[];
} http__snapshot;

struct http__registry {
  http_server *server;
  pthread_mutex_t lock;              /* writers, and readers off the HTTP threads */
  _Atomic(http__snapshot *) current; /* holds the registry's reference to each model */
  atomic_bool startup_done;
};

static http__snapshot *snapshot_new(int count) {
  http__snapshot *snap = malloc(sizeof *snap + (size_t)(count ? count : 1) * sizeof snap->entries[0]);
  if (snap) snap->count = count;
  return snap;
}

inferd_code http__registry_new(http_server *server, http__registry **out, inferd_status *st) {
  http__registry *r = calloc(1, sizeof *r);
  http__snapshot *empty = snapshot_new(0);
  if (!r || !empty) {
    free(r);
    free(empty);
    return core_fail(st, INFERD_NO_MEMORY, "model registry: out of memory");
  }
  r->server = server;
  pthread_mutex_init(&r->lock, NULL);
  atomic_init(&r->current, empty);
  *out = r;
  return INFERD_OK;
}

void http__model_destroy(http__model *m) {
  if (!m) return;
  /* No scrape may read the queue through m once the scheduler is gone. */
  if (m->metrics) metrics_model_set_sources(m->server->metrics, m->metrics, NULL, NULL, NULL);
  if (m->sched) sched_model_free(m->sched); /* drains first; joins the workers */
  if (m->metrics) metrics_model_unregister(m->server->metrics, m->metrics);
  inferd_model_free(m->engine);
  handler_labels_free(m->labels);
  placement_free(m->placement);
  free(m->name);
  free(m->version);
  free(m->url);
  free(m->downloaded);
  free(m->handler);
  free(m);
}

void http__registry_free(http__registry *r) {
  if (!r) return;
  http__snapshot *snap = atomic_load(&r->current);
  for (int i = 0; i < snap->count; i++) http__model_destroy(snap->entries[i].model);
  free(snap);
  pthread_mutex_destroy(&r->lock);
  free(r);
}

void http__model_release(http__model *m) {
  if (atomic_fetch_sub(&m->refs, 1) == 1) http__management_destroy_later(m->server->management, m);
}

/* ---- reading: no lock on the HTTP threads ---------------------------------------------------
 * An HTTP thread of this server reads the published snapshot inside a read section
 * (http__read_begin, http_server.c); a writer publishes a new snapshot under the writers'
 * lock, waits out the sections that may still read the old one (http__read_synchronize),
 * and only then frees it or drops a removed model's reference. Other threads (the
 * management thread, the main thread) read under the writers' lock instead. */

/* *opened: a read section was opened; else the writers' lock is held. */
static http__snapshot *read_begin(http__registry *r, bool *opened) {
  *opened = http__read_begin(r->server);
  if (!*opened) pthread_mutex_lock(&r->lock);
  return atomic_load(&r->current);
}

static void read_end(http__registry *r, bool opened) {
  if (opened)
    http__read_end(true);
  else
    pthread_mutex_unlock(&r->lock);
}

/* Scratch the workers of every registered model will still take: a worker's arena is
 * mapped for its batch_size plan (inferd_model_scratch_bytes) as it starts, but its pages
 * are taken only as batches run, a full batch's all of them. So what a starting or idle
 * worker will take is not yet in the memory the kernel counts: each counts as holding
 * what its runs took (sched_worker_info.scratch_bytes: nothing before its first batch,
 * less while it ran only smaller ones). A scale to 2 workers passed the check with the
 * first one idle, and the two under load got the server killed by its cgroup. *live (may be NULL) gets
 * `model`'s live workers. Takes the registry's read side, then each model's lock
 * (sched_model_describe); never called with the registry's lock held. */
static uint64_t scratch_to_come(http__registry *r, const http__model *model, int *live) {
  enum { MAX_DESCRIBED = SCHED_MAX_WORKERS * 2 }; /* live ones and those stopping */
  sched_worker_info *workers = malloc(MAX_DESCRIBED * sizeof *workers);
  uint64_t total = 0;
  if (live) *live = 0;
  bool opened;
  const http__snapshot *snap = read_begin(r, &opened);
  for (int i = 0; i < snap->count; i++) {
    const http__model *m = snap->entries[i].model;
    if (!m->sched) continue;
    uint64_t need = inferd_model_scratch_bytes(m->engine);
    sched_model_info info;
    int n = sched_model_describe(m->sched, &info, workers, workers ? MAX_DESCRIBED : 0);
    if (m == model && live) *live = info.workers;
    if (!workers) { /* no memory to look: as if none had started */
      total += (uint64_t)info.workers * need;
      continue;
    }
    for (int k = 0; k < n && k < MAX_DESCRIBED; k++) {
      const sched_worker_info *w = &workers[k];
      bool staying = w->state == SCHED_WORKER_STARTING || w->state == SCHED_WORKER_READY || w->state == SCHED_WORKER_BUSY;
      uint64_t held = w->scratch_bytes; /* pages are taken as batches run */
      if (staying && held < need) total += need - held;
    }
  }
  read_end(r, opened);
  free(workers);
  return total;
}

/* Refuses `bytes` more than the memory left to the process (topo_memory_available) less
 * the scratch running workers will still take (scratch_to_come, `to_come`): loading a
 * model or starting workers past it gets the whole server killed (by the OOM killer, or
 * its cgroup's when a container's or a unit's limit is reached), not an error.
 * TorchServe answers an OutOfMemoryError with 507, as the change's reply does. *left_out
 * (when not NULL) gets the memory left, UINT64_MAX when nothing limits it. */
static inferd_code memory_fits(const char *model, const char *what, uint64_t bytes, uint64_t to_come,
                               uint64_t *left_out, inferd_status *st) {
  char source[256];
  uint64_t left = topo_memory_available("", source, sizeof source);
  if (left_out) *left_out = left;
  if (bytes <= left && to_come <= left - bytes) return INFERD_OK;
  if (to_come == 0)
    return core_fail(st, INFERD_NO_MEMORY, "model %s: %s need %llu MB, and %llu MB of memory are left (%s)", model,
                     what, (unsigned long long)(bytes >> 20), (unsigned long long)(left >> 20), source);
  return core_fail(st, INFERD_NO_MEMORY,
                   "model %s: %s need %llu MB, and %llu MB of memory are left (%s), of which the workers running "
                   "will still take %llu MB for their batches",
                   model, what, (unsigned long long)(bytes >> 20), (unsigned long long)(left >> 20), source,
                   (unsigned long long)(to_come >> 20));
}

/* Under the writers' lock: makes next current, waits out every section that may still
 * read the old one, frees it. */
static void publish_locked(http__registry *r, http__snapshot *next) {
  http__snapshot *old = atomic_exchange(&r->current, next);
  http__read_synchronize(r->server);
  free(old);
}

/* name (len bytes) against a model's name, in strcmp's order. */
static int compare_name(const char *model_name, const char *name, size_t len) {
  size_t n = strlen(model_name);
  int c = memcmp(model_name, name, n < len ? n : len);
  return c ? c : (n > len) - (n < len);
}

/* The first entry with this name, or -1 (binary search: entries are sorted by name). */
static int first_of(const http__snapshot *snap, const char *name, size_t len) {
  int lo = 0, hi = snap->count;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (compare_name(snap->entries[mid].model->name, name, len) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < snap->count && compare_name(snap->entries[lo].model->name, name, len) == 0 ? lo : -1;
}

/* The entry of name/version (version NULL or "": the default), or NULL. */
static const http__entry *find(const http__snapshot *snap, const char *name, size_t name_len, const char *version,
                               size_t version_len) {
  int i = first_of(snap, name, name_len);
  for (; i >= 0 && i < snap->count && compare_name(snap->entries[i].model->name, name, name_len) == 0; i++) {
    const http__entry *e = &snap->entries[i];
    if (version && version_len ? compare_name(e->model->version, version, version_len) == 0 : e->is_default)
      return e;
  }
  return NULL;
}

static inferd_code not_found(const http__snapshot *snap, const char *name, size_t name_len, const char *version,
                             size_t version_len, inferd_status *st) {
  int shown = (int)CORE_MIN(name_len, 200);
  if (version && version_len && first_of(snap, name, name_len) >= 0)
    return core_fail(st, INFERD_NOT_FOUND, "Model version: %.*s does not exist for model: %.*s",
                     (int)CORE_MIN(version_len, 64), version, shown, name);
  return core_fail(st, INFERD_NOT_FOUND, "Model not found: %.*s", shown, name);
}

http__model *http__model_acquire(http__registry *r, const char *name, size_t name_len, const char *version,
                                 size_t version_len, inferd_status *st) {
  bool opened;
  const http__snapshot *snap = read_begin(r, &opened);
  const http__entry *e = find(snap, name, name_len, version, version_len);
  http__model *m = e ? e->model : NULL;
  if (m)
    atomic_fetch_add(&m->refs, 1);
  else
    not_found(snap, name, name_len, version, version_len, st);
  read_end(r, opened);
  return m;
}

http__model *http__model_acquire_or_reply(http_server *s, h2o_req_t *req, const char *name, size_t name_len,
                                          const char *version, size_t version_len) {
  inferd_status st;
  http__model *m = http__model_acquire(s->registry, name, name_len, version, version_len, &st);
  if (!m) http__send_status(req, &st);
  return m;
}

/* A model scaled to 0 workers on purpose does not make the server unhealthy, as in
 * TorchServe (its /ping compares the workers running with the sum of minWorkers): a
 * balancer would take every other model of the server out of service with it. Its own
 * v2 model ready still says false. */
bool http__registry_ready(http__registry *r) {
  if (!atomic_load(&r->startup_done)) return false;
  bool ready = true;
  bool opened;
  const http__snapshot *snap = read_begin(r, &opened);
  for (int i = 0; i < snap->count && ready; i++) {
    http__model *m = snap->entries[i].model;
    if (m->loaded_at_startup && atomic_load(&m->min_workers) > 0) ready = sched_model_ready(m->sched);
  }
  read_end(r, opened);
  return ready;
}

void http__registry_startup_done(http__registry *r) { atomic_store(&r->startup_done, true); }

bool http__registry_startup_over(http__registry *r) { return atomic_load(&r->startup_done); }

int http__registry_list(http__registry *r, const char *name, bool all, http__model ***out) {
  bool opened;
  const http__snapshot *snap = read_begin(r, &opened);
  http__model **list = malloc((size_t)(snap->count ? snap->count : 1) * sizeof *list);
  int n = 0;
  for (int i = 0; list && i < snap->count; i++) {
    const http__entry *e = &snap->entries[i];
    if (name && strcmp(e->model->name, name) != 0) continue;
    if (!all && !e->is_default) continue;
    atomic_fetch_add(&e->model->refs, 1);
    list[n++] = e->model;
  }
  read_end(r, opened);
  *out = list;
  return list ? n : 0;
}

/* ---- registration -------------------------------------------------------------------------- */

/* sched_stats_fn: one batch ran (worker thread). Its rows' latencies count only when
 * it succeeded, as TorchServe's ts_*_latency counters count only successful answers: a
 * failed batch (its rows answered with errors, inferd_requests_total counts them) would
 * mix the time it took to fail into the time answers take. */
static void on_batch(void *ctx, const sched_batch_stats *b) {
  http__model *m = ctx;
  if (b->batch_size > 0) metrics_model_batch(m->metrics, b->batch_size);
  if (b->code != INFERD_OK) return;
  uint64_t inference_us = (uint64_t)(b->inference_seconds * 1e6);
  for (int i = 0; i < b->batch_size; i++) {
    metrics_model_queue_time(m->metrics, (uint64_t)(b->queue_seconds[i] * 1e6));
    metrics_model_inference_time(m->metrics, inference_us);
  }
}

/* metrics_gauge_fn: inferd_queue_depth is the scheduler's queue as a scrape finds it, so
 * that no way out of the queue (a batch, an expiry, a cancel, the flush when the last
 * worker goes, a drain) can leave the gauge behind. */
static int64_t queue_depth(void *ctx) {
  const http__model *m = ctx;
  sched_model_info info;
  sched_model_describe(m->sched, &info, NULL, 0);
  return info.queue_depth;
}

/* metrics_gauge_fn: inferd_workers is the workers starting, ready or busy as a scrape
 * finds them (not the count asked for: a worker may fail to start, or be scaled away). */
static int64_t live_workers(void *ctx) {
  const http__model *m = ctx;
  sched_model_info info;
  sched_model_describe(m->sched, &info, NULL, 0);
  return info.workers;
}

inferd_code http__resolve_path(const config_server *cfg, const char *given, bool from_api, char *out, size_t size,
                               inferd_status *st) {
  if (strstr(given, "://"))
    return core_fail(st, INFERD_UNSUPPORTED,
                     "'%s': only http:// and https:// urls are downloaded, by POST /models; copy the file into "
                     "model_store and register it by file name",
                     given);
  if (from_api && (given[0] == '/' || strcmp(given, "..") == 0 || strncmp(given, "../", 3) == 0 ||
                   strstr(given, "/../") || (strlen(given) >= 3 && strcmp(given + strlen(given) - 3, "/..") == 0)))
    return core_fail(st, INFERD_INVALID_ARG, "url '%s' must name a file inside model_store", given);
  if (given[0] == '/') {
    if (snprintf(out, size, "%s", given) >= (int)size) return core_fail(st, INFERD_INVALID_ARG, "path too long");
    return INFERD_OK;
  }
  if (!cfg->model_store)
    return core_fail(st, INFERD_INVALID_ARG, "'%s' is relative but no model_store is set (--model-store DIR)", given);
  if (snprintf(out, size, "%s/%s", cfg->model_store, given) >= (int)size)
    return core_fail(st, INFERD_INVALID_ARG, "path too long");
  return INFERD_OK;
}

/* The model must take one float image batch [N,3,224,224] (image_classifier). */
static bool is_image_model(const inferd_model *engine) {
  inferd_tensor_info in;
  return inferd_model_num_inputs(engine) == 1 && inferd_model_input(engine, 0, &in) == INFERD_OK &&
         in.dtype == INFERD_DTYPE_FLOAT && in.rank == 4 && in.dims[1] == HANDLER_IMAGE_CHANNELS &&
         in.dims[2] == HANDLER_IMAGE_CROP && in.dims[3] == HANDLER_IMAGE_CROP;
}

/* Inputs that declare their batch size as a number run that batch size only: a batch
 * of 1 is served with batchSize 1 (each request its own batch); another number cannot
 * take the partial batches a queue forms, and is refused. */
static inferd_code fit_fixed_batch(http__model *m, inferd_status *st) {
  for (int k = 0; k < inferd_model_num_inputs(m->engine); k++) {
    inferd_tensor_info in;
    if (inferd_model_input(m->engine, k, &in) != INFERD_OK || in.dims[0] < 0) continue;
    if (in.dims[0] != 1)
      return core_fail(st, INFERD_UNSUPPORTED,
                       "model %s: input '%s' declares a fixed batch size of %lld; inferd serve needs a dynamic "
                       "batch axis (or a batch size of 1)",
                       m->name, in.name, (long long)in.dims[0]);
    if (m->batch_size > 1)
      core_log(CORE_LOG_WARN,
               "model %s: input '%s' declares a fixed batch size of 1: batchSize %d lowered to 1 (export the "
               "model with a dynamic batch axis to batch requests)",
               m->name, in.name, m->batch_size);
    m->batch_size = 1;
  }
  return INFERD_OK;
}

static inferd_code check_image_model(const inferd_model *engine, const char *name, inferd_status *st) {
  inferd_tensor_info in;
  if (inferd_model_num_inputs(engine) != 1 || inferd_model_input(engine, 0, &in) != INFERD_OK)
    return core_fail(st, INFERD_UNSUPPORTED, "model %s: image_classifier needs a model with one input", name);
  if (in.dtype != INFERD_DTYPE_FLOAT || in.rank != 4 || in.dims[1] != HANDLER_IMAGE_CHANNELS ||
      in.dims[2] != HANDLER_IMAGE_CROP || in.dims[3] != HANDLER_IMAGE_CROP) {
    char shape[96];
    return core_fail(st, INFERD_UNSUPPORTED,
                     "model %s: image_classifier needs a float input [N,3,224,224], input '%s' is %s %s", name, in.name,
                     core_dtype_name(in.dtype), core_shape_str(in.rank, in.dims, shape, sizeof shape));
  }
  return INFERD_OK;
}

/* Labels: index_to_name.json inside the archive, or next to a bare .onnx. */
static inferd_code load_labels(const archive_model *ar, handler_labels **out, inferd_status *st) {
  *out = NULL;
  size_t size;
  const void *json = archive_file(ar, LABELS_FILE, &size);
  if (json) return handler_labels_parse(json, size, LABELS_FILE, out, st);
  if (archive_get_kind(ar) != ARCHIVE_ONNX) return INFERD_OK;
  char sibling[4096];
  snprintf(sibling, sizeof sibling, "%s/" LABELS_FILE, archive_onnx_dir(ar));
  inferd_code code = handler_labels_load(sibling, out, st);
  return code == INFERD_NOT_FOUND ? INFERD_OK : code;
}

static int pick(int requested, int from_archive, int from_config) {
  if (requested >= 0) return requested;
  if (from_archive >= 0) return from_archive;
  return from_config;
}

/* The archive's model-config.yaml when its manifest names one (else *out is left as
 * it is); the keys inferd does not use are logged. */
static inferd_code read_model_yaml(const archive_model *ar, const http__model *m, config_model_yaml *out,
                                   inferd_status *st) {
  const char *name = archive_config_file(ar);
  if (!name) return INFERD_OK;
  inferd_code code;
  size_t size = 0;
  const void *text = archive_file(ar, name, &size);
  if (!text)
    return core_fail(st, INFERD_INVALID_ARG, "model %s: the manifest's configFile '%s' is not in the archive",
                     m->name, name);
  if ((code = config_model_yaml_parse(text, size, name, out, st)) != INFERD_OK) {
    core_status_prefix(st, "model %s", m->name);
    return code;
  }
  if (out->ignored[0])
    core_log(CORE_LOG_INFO, "model %s version %s: %s: not used by inferd: %s", m->name, m->version, name,
             out->ignored);
  return INFERD_OK;
}

static int compare_models(const void *a, const void *b) {
  const http__model *x = *(http__model *const *)a, *y = *(http__model *const *)b;
  int c = strcmp(x->name, y->name);
  return c ? c : strcmp(x->version, y->version);
}

/* Publishes the registry with m added (sorted), making it the default when it is its
 * name's first version or the config says so (*was_default: the version that was the
 * default before, or NULL), and takes a reference for the caller before (an unregister
 * may run as soon as the lock is released). ALREADY_EXISTS when the name/version is
 * taken. */
static inferd_code insert(http__registry *r, http__model *m, bool config_default, http__model **was_default,
                          inferd_status *st) {
  *was_default = NULL;
  pthread_mutex_lock(&r->lock);
  const http__snapshot *cur = atomic_load(&r->current);
  size_t name_len = strlen(m->name);
  inferd_code code = INFERD_OK;
  http__snapshot *next = NULL;
  if (find(cur, m->name, name_len, m->version, strlen(m->version)))
    code = core_fail(st, INFERD_ALREADY_EXISTS, "Model version %s is already registered for model %s", m->version,
                     m->name);
  else if (!(next = snapshot_new(cur->count + 1)))
    code = core_fail(st, INFERD_NO_MEMORY, "model registry: out of memory");
  if (code == INFERD_OK) {
    bool first = first_of(cur, m->name, name_len) < 0, is_default = first || config_default;
    int at = 0;
    while (at < cur->count && compare_models(&cur->entries[at].model, &m) < 0) at++;
    for (int i = 0, j = 0; i < next->count; i++) {
      if (i == at) {
        next->entries[i] = (http__entry){m, is_default};
        continue;
      }
      next->entries[i] = cur->entries[j++];
      if (is_default && !first && strcmp(next->entries[i].model->name, m->name) == 0) {
        if (next->entries[i].is_default) *was_default = next->entries[i].model;
        next->entries[i].is_default = false;
        atomic_store(&next->entries[i].model->is_default, false);
      }
    }
    atomic_store(&m->is_default, is_default);
    atomic_fetch_add(&m->refs, 1);
    publish_locked(r, next);
  }
  pthread_mutex_unlock(&r->lock);
  return code;
}

static inferd_code unregister(http__registry *r, const char *name, const char *version, bool rollback,
                              http__model *restore, inferd_status *st);

typedef struct inflate_check {
  http__registry *registry;
  const char *model; /* its name, or its url while the archive's manifest is unread */
} inflate_check;

/* archive_params.before_copy: a .mar's deflated .onnx is inflated into memory, and
 * then the engine copies its weights out of it. Both must fit before the inflating
 * starts: a TorchServe archive (torch-model-archiver deflates) larger than the memory
 * left got the server killed while it inflated, before the weights' check below. */
static inferd_code onnx_copy_fits(void *ctx, uint64_t onnx_bytes, inferd_status *st) {
  const inflate_check *ic = ctx;
  uint64_t both = onnx_bytes > UINT64_MAX / 2 ? UINT64_MAX : 2 * onnx_bytes;
  return memory_fits(ic->model, "its .onnx, inflated from the archive, and the weights copied from it", both,
                     scratch_to_come(ic->registry, NULL, NULL), NULL, st);
}

/* Waits for m's workers to start (or re-bind) after a register or a scale. A worker that
 * cannot start is the server's failure, whatever its own code (a plan that does not
 * compile is INVALID_ARG from the engine, which a scale answered as a 400): 500 "Failed
 * to start workers ...", as TorchServe's ApiUtils.updateModelWorkers answers a register
 * and a scale alike; a drain (the server stops) stays 503, and a worker out of memory
 * stays NO_MEMORY (507 for the change, as when the memory check refuses it first). */
static inferd_code wait_workers(http__model *m, inferd_status *st) {
  inferd_code code = sched_model_wait_ready(m->sched, -1, st);
  if (code == INFERD_OK) return code;
  if (code != INFERD_UNAVAILABLE && code != INFERD_NO_MEMORY) st->code = code = INFERD_INTERNAL;
  core_status_prefix(st, "Failed to start workers for model %s version: %s", m->name, m->version);
  return code;
}

inferd_code http__registry_register(http__registry *r, const http__register_params *p, http__model **out,
                                    inferd_status *st) {
  const config_server *cfg = r->server->config;
  /* modelUrl goes into JSON bodies (list, describe), which must be UTF-8: a model whose
   * url could not be listed would vanish from GET /models */
  if (!http__utf8_valid(p->path, strlen(p->path)))
    return core_fail(st, INFERD_INVALID_ARG, "url '%s' is not valid UTF-8", p->path);
  char path[4096];
  inferd_code code = http__resolve_path(cfg, p->path, !p->loaded_at_startup, path, sizeof path, st);
  if (code != INFERD_OK) return code;
  double t0 = core_now_seconds();
  core_log(CORE_LOG_INFO, "loading %s%s%s", p->path, p->name ? " as model " : "", p->name ? p->name : "");
  archive_model *ar = NULL;
  /* only the files it uses: an archive may carry more (the PyTorch checkpoint, a
   * handler's data), which would cost memory and count against the extra-file bound */
  static const char *const used_files[] = {LABELS_FILE};
  inflate_check ic = {r, p->name ? p->name : p->path};
  const archive_params ap = {.only_files = used_files,
                             .only_file_count = (int)CORE_ARRAY_LEN(used_files),
                             .before_copy = onnx_copy_fits,
                             .before_copy_ctx = &ic};
  code = archive_open(path, &ap, &ar, st);
  if (code != INFERD_OK) return code;

  http__model *m = calloc(1, sizeof *m), *was_default = NULL;
  http__placement *placement = calloc(1, sizeof *placement);
  const char *name = p->name ? p->name : archive_model_name(ar);
  const char *handler = archive_handler(ar) ? archive_handler(ar) : HANDLER_IMAGE_CLASSIFIER;
  if (!m || !placement) {
    free(placement);
    free(m);
    archive_close(ar);
    return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  }
  m->server = r->server;
  atomic_init(&m->refs, 1);
  atomic_init(&m->decoding, 0);
  m->placement = placement;
  pthread_mutex_init(&placement->lock, NULL);
  m->name = strdup(name);
  m->version = strdup(archive_model_version(ar));
  m->url = strdup(p->url ? p->url : p->path);
  if (p->url && !(m->downloaded = strdup(p->path))) code = core_fail(st, INFERD_NO_MEMORY, "out of memory");
  m->handler = strdup(handler);
  m->loaded_at_startup = p->loaded_at_startup;
  if (!m->name || !m->version || !m->url || !m->handler) code = core_fail(st, INFERD_NO_MEMORY, "out of memory");
  if (code == INFERD_OK && !config_valid_model_name(m->name))
    code = core_fail(st, INFERD_INVALID_ARG, "'%s' is not a valid model name ([A-Za-z0-9][A-Za-z0-9_.-]*)", m->name);
  if (code == INFERD_OK && !handler_served(handler))
    code = core_fail(st, INFERD_UNSUPPORTED, "model %s: handler '%s' is not built in (inferd has: " HANDLER_SERVED ")",
                     m->name, handler);
  if (code == INFERD_OK) {
    bool opened;
    if (find(read_begin(r, &opened), m->name, strlen(m->name), m->version, strlen(m->version)))
      code = core_fail(st, INFERD_ALREADY_EXISTS, "Model version %s is already registered for model %s", m->version,
                       m->name);
    read_end(r, opened);
  }

  config_model_yaml yaml = CONFIG_MODEL_YAML_NONE;
  if (code == INFERD_OK) code = read_model_yaml(ar, m, &yaml, st);
  const config_model *cm = code == INFERD_OK ? config_find_model(cfg, m->name, m->version) : NULL;
  const config_model *y = &yaml.values;
  /* the request, then the archive's model-config.yaml, then models={...}, then the
   * global keys: TorchServe's order, except that there the yaml wins even over an
   * explicit initial_workers or response_timeout */
  m->batch_size = pick(p->batch_size, y->batch_size, cm ? cm->batch_size : cfg->batch_size);
  m->max_batch_delay_ms = pick(p->max_batch_delay_ms, y->max_batch_delay_ms,
                               cm ? cm->max_batch_delay_ms : cfg->max_batch_delay);
  m->response_timeout_s = pick(p->response_timeout_s, y->response_timeout_s,
                               cm ? cm->response_timeout_s : cfg->default_response_timeout);
  m->precision = pick(-1, y->precision, cm && cm->precision >= 0 ? cm->precision : INFERD_PRECISION_FP32);
  /* Workers, as TorchServe counts them: the yaml's minWorkers and maxWorkers only
   * together, with 0 < minWorkers <= maxWorkers (else they are logged and left). Over the
   * API: initial_workers, the yaml's, default_workers_per_model when set above 0, else
   * none. At startup: the yaml's, models={...}'s minWorkers, default_workers_per_model,
   * where 0 is "automatic" (one per NUMA node). */
  bool yaml_workers = y->min_workers > 0 && y->max_workers >= y->min_workers;
  if (code == INFERD_OK && !yaml_workers && (y->min_workers >= 0 || y->max_workers >= 0))
    core_log(CORE_LOG_WARN, "model %s: %s: minWorkers %d and maxWorkers %d are not used (TorchServe takes them when "
             "0 < minWorkers <= maxWorkers)", m->name, archive_config_file(ar), y->min_workers, y->max_workers);
  bool api = !p->loaded_at_startup;
  int workers = pick(p->workers, yaml_workers ? y->min_workers : -1,
                     api || !cm ? cfg->default_workers_per_model : cm->min_workers);
  bool none = api && workers == 0;
  int max_workers = yaml_workers ? y->max_workers : cm ? cm->max_workers : 0; /* only reported */
  if (m->batch_size < 1) m->batch_size = 1;
  if (code == INFERD_OK) code = load_labels(ar, &m->labels, st);
  double t_archive = core_now_seconds() - t0, t_engine = 0;
  if (code == INFERD_OK) {
    size_t size = 0;
    const void *onnx = archive_onnx(ar, &size);
    /* a plan per batch size the workers run (all sizes up to 16, and batchSize; larger
     * batches of other sizes run in chunks, sched_worker.c): workers share them instead
     * of each recompiling a size the model's cache evicted (the engine caps the cache at
     * 32); kernels and weight layouts tuned for full batches, what a loaded server runs */
    uint64_t to_come = scratch_to_come(r, NULL, NULL);
    inferd_model_params mp = {.max_batch = m->batch_size,
                              .max_cached_plans = m->batch_size,
                              .opt_batch = m->batch_size,
                              .mapped_file = archive_onnx_mapped(ar),
                              /* a download is one file: what lies beside it in
                               * model_store is other models', never its weights */
                              .external_data_dir = p->url ? NULL : archive_onnx_dir(ar),
                              .precision = (inferd_precision)m->precision};
    /* the engine's copy is about the file's size, plus the weights it keeps in files
     * beside it (external data), which the engine adds up before reading them */
    uint64_t left;
    code = memory_fits(m->name, "its weights", size, to_come, &left, st);
    if (left != UINT64_MAX) mp.max_external_bytes = left > to_come + size + 1 ? left - to_come - size : 1;
    if (code == INFERD_OK) code = inferd_model_load_memory(onnx, size, &mp, &m->engine, st);
    if (code != INFERD_OK) core_status_prefix(st, "model %s (%s)", m->name, p->path);
    t_engine = core_now_seconds() - t0 - t_archive;
  }
  bool chosen = archive_handler(ar) != NULL;
  archive_close(ar); /* the engine holds its own weights now */
  if (code == INFERD_OK && !chosen && !is_image_model(m->engine)) {
    /* a bare .onnx that takes no image: served as tensors (v2 infer) */
    free(m->handler);
    if (!(m->handler = strdup(HANDLER_TENSOR))) code = core_fail(st, INFERD_NO_MEMORY, "out of memory");
  }
  m->image_classifier = code == INFERD_OK && strcmp(m->handler, HANDLER_IMAGE_CLASSIFIER) == 0;
  if (code == INFERD_OK && m->image_classifier) code = check_image_model(m->engine, m->name, st);
  if (code == INFERD_OK) code = fit_fixed_batch(m, st);

  /* Placement: the plan decides the worker count when it is automatic (0). */
  int sched_workers = workers;
  if (code == INFERD_OK) {
    const config_launcher *launcher = &cfg->cpu_launcher_args;
    placement->topo = r->server->topo;
    placement->params = TOPO_PLAN_PARAMS_DEFAULT;
    if (cfg->cpu_launcher_enable) {
      placement->params.use_logical_core = launcher->use_logical_core;
      placement->params.node_id = launcher->node_id;
      placement->params.threads_per_worker = launcher->ncores_per_instance;
      if (workers == 0 && launcher->ninstances > 0) workers = launcher->ninstances;
    }
    snprintf(placement->model, sizeof placement->model, "%s/%s", m->name, m->version);
    if (!none) code = placement_plan(placement, workers, &sched_workers, st);
    else sched_workers = 0;
  }
  if (code == INFERD_OK && sched_workers > 0)
    code = memory_fits(m->name, "its workers' scratch", (uint64_t)sched_workers * inferd_model_scratch_bytes(m->engine),
                       scratch_to_come(r, NULL, NULL), NULL, st);
  if (code == INFERD_OK) {
    metrics_model_params mp = {.name = m->name, .version = m->version, .max_batch_size = m->batch_size};
    code = metrics_model_register(r->server->metrics, &mp, &m->metrics, st);
  }
  if (code == INFERD_OK) {
    sched_model_params sp = {
        .name = placement->model,
        .batch_size = m->batch_size,
        .max_batch_delay_ms = m->max_batch_delay_ms,
        .response_timeout_ms = m->response_timeout_s * 1000,
        .job_queue_size = cfg->job_queue_size,
        .workers = sched_workers,
        .worker = {.threads = placement->plan ? placement->plan->threads_per_worker : 0,
                   .bind = bind_worker,
                   .bind_ctx = placement},
        .on_batch = on_batch,
        .stats_ctx = m,
    };
    code = sched_model_new(m->engine, &sp, &m->sched, st);
  }
  if (code == INFERD_OK) {
    atomic_init(&m->min_workers, sched_workers);
    atomic_init(&m->max_workers, CORE_MAX(max_workers, sched_workers));
    m->input_elems = sched_model_input_elems(m->sched);
    sched_model_info info;
    sched_model_describe(m->sched, &info, NULL, 0);
    m->job_queue_size = info.job_queue_size;
    m->output_elems = sched_model_output_elems(m->sched);
    m->classes = sched_model_output_item(m->sched, 0);
    m->answer_bytes = handler_classify_json_size(m->labels, HANDLER_TOPK);
    metrics_model_set_workers(m->metrics, sched_workers);
    metrics_model_set_memory(m->metrics, inferd_model_weights_bytes(m->engine));
    metrics_model_set_sources(r->server->metrics, m->metrics, queue_depth, live_workers, m);
    code = insert(r, m, cm && cm->default_version, &was_default, st);
  }
  if (code != INFERD_OK) {
    http__model_destroy(m);
    return code;
  }
  core_log(CORE_LOG_INFO, "model %s version %s (%s) loaded in %.2f s (archive %.2f s, engine %.2f s): batch_size %d, "
           "max_batch_delay %d ms, response_timeout %d s, %d worker%s",
           m->name, m->version, p->path, core_now_seconds() - t0, t_archive, t_engine, m->batch_size,
           m->max_batch_delay_ms, m->response_timeout_s, sched_workers, sched_workers == 1 ? "" : "s");
  if (p->synchronous && sched_workers > 0) {
    code = wait_workers(m, st);
    if (code != INFERD_OK) {
      inferd_status ignored;
      unregister(r, m->name, m->version, true, was_default, &ignored);
      http__model_release(m);
      return code;
    }
  }
  if (out)
    *out = m; /* with insert's reference */
  else
    http__model_release(m);
  return INFERD_OK;
}

/* ---- unregister, default version, scale ----------------------------------------------------- */

/* rollback: the register of this version failed after insert; it goes even when it is the
 * default while other versions exist, and the default goes to restore when it is still
 * registered, else to the first version left: the version may have become the default by a
 * set-default that ran while its register waited for its workers (set-default runs on the
 * HTTP threads), and a name must never be left without a default (no lookup without a
 * version would find it, nor GET /models list it). */
static inferd_code unregister(http__registry *r, const char *name, const char *version, bool rollback,
                              http__model *restore, inferd_status *st) {
  size_t name_len = strlen(name), version_len = version ? strlen(version) : 0;
  pthread_mutex_lock(&r->lock);
  const http__snapshot *cur = atomic_load(&r->current);
  const http__entry *e = find(cur, name, name_len, version, version_len);
  http__model *m = e ? e->model : NULL;
  http__snapshot *next = NULL;
  inferd_code code = INFERD_OK;
  if (!m) {
    code = not_found(cur, name, name_len, version, version_len, st);
  } else {
    int versions = 0;
    for (int i = 0; i < cur->count; i++) versions += strcmp(cur->entries[i].model->name, name) == 0;
    if (e->is_default && versions > 1 && !rollback)
      code = core_fail(st, INFERD_INVALID_ARG,
                       "Cannot remove default version %s of model %s while other versions exist: set another "
                       "default version first",
                       m->version, m->name);
    else if (!(next = snapshot_new(cur->count - 1)))
      code = core_fail(st, INFERD_NO_MEMORY, "model registry: out of memory");
  }
  if (code == INFERD_OK) {
    const http__model *heir = NULL; /* the name's next default, when m is its default */
    for (int i = 0; rollback && e->is_default && i < cur->count; i++) {
      const http__model *x = cur->entries[i].model;
      if (x == m || strcmp(x->name, name) != 0) continue;
      if (!heir || x == restore) heir = x;
    }
    for (int i = 0, j = 0; i < cur->count; i++) {
      if (cur->entries[i].model == m) continue;
      next->entries[j] = cur->entries[i];
      if (cur->entries[i].model == heir) {
        next->entries[j].is_default = true;
        atomic_store(&next->entries[j].model->is_default, true);
      }
      j++;
    }
    publish_locked(r, next); /* no HTTP thread can find m from here on */
  }
  pthread_mutex_unlock(&r->lock);
  if (code != INFERD_OK) return code;
  core_log(CORE_LOG_INFO, "model %s version %s unregistered; draining its queue", m->name, m->version);
  sched_model_drain(m->sched); /* queued requests are answered; new ones can no longer find it */
  /* Its series leave /metrics now, not when its last answer has been sent from an HTTP
   * thread (http__model_destroy), so that the same name and version can be registered
   * again as soon as this unregister is answered. */
  if (m->metrics) metrics_model_detach(m->server->metrics, m->metrics);
  /* as TorchServe's ModelArchive.removeModel: what was downloaded for it goes with it
   * (its weights are in memory; the file is read only while registering) */
  if (m->downloaded) http__fetch_remove(m->server->config, m->downloaded);
  http__model_release(m);
  return INFERD_OK;
}

inferd_code http__registry_unregister(http__registry *r, const char *name, const char *version, inferd_status *st) {
  return unregister(r, name, version, false, NULL, st);
}

inferd_code http__registry_set_default(http__registry *r, const char *name, const char *version, inferd_status *st) {
  size_t name_len = strlen(name), version_len = strlen(version);
  pthread_mutex_lock(&r->lock);
  const http__snapshot *cur = atomic_load(&r->current);
  const http__entry *e = find(cur, name, name_len, version, version_len);
  http__snapshot *next = NULL;
  inferd_code code = e ? INFERD_OK : not_found(cur, name, name_len, version, version_len, st);
  if (code == INFERD_OK && !(next = snapshot_new(cur->count)))
    code = core_fail(st, INFERD_NO_MEMORY, "model registry: out of memory");
  if (code == INFERD_OK) {
    for (int i = 0; i < cur->count; i++) {
      next->entries[i] = cur->entries[i];
      if (strcmp(cur->entries[i].model->name, name) == 0) {
        next->entries[i].is_default = cur->entries[i].model == e->model;
        atomic_store(&next->entries[i].model->is_default, next->entries[i].is_default);
      }
    }
    publish_locked(r, next);
  }
  pthread_mutex_unlock(&r->lock);
  return code;
}

inferd_code http__registry_scale(http__registry *r, const char *name, const char *version, int workers,
                                 int max_workers, bool synchronous, inferd_status *st) {
  http__model *m = http__model_acquire(r, name, strlen(name), version, version ? strlen(version) : 0, st);
  if (!m) return st->code;
  inferd_code code = INFERD_OK;
  /* the new workers' scratch, and what those running (this model's too) will still take */
  int count = workers, live;
  uint64_t to_come = scratch_to_come(r, m, &live);
  if (workers > live)
    code = memory_fits(m->name, "the new workers' scratch",
                       (uint64_t)(workers - live) * inferd_model_scratch_bytes(m->engine), to_come, NULL, st);
  if (code == INFERD_OK && workers > 0) code = placement_plan(m->placement, workers, &count, st);
  /* min_workers before the workers go: a scale to 0 waits for their batches to end, and
   * /ping (http__registry_ready) must not count the model as one that should run them */
  int min_before = atomic_load(&m->min_workers);
  if (code == INFERD_OK) atomic_store(&m->min_workers, workers);
  if (code == INFERD_OK && (code = sched_model_scale(m->sched, workers, st)) != INFERD_OK)
    atomic_store(&m->min_workers, min_before);
  if (code == INFERD_OK) {
    atomic_store(&m->max_workers, max_workers);
    metrics_model_set_workers(m->metrics, workers);
    core_log(CORE_LOG_INFO, "model %s version %s scaled to %d worker%s", m->name, m->version, workers,
             workers == 1 ? "" : "s");
    if (synchronous && workers > 0) code = wait_workers(m, st);
  }
  http__model_release(m);
  return code;
}

/* ---- load_models at start ---------------------------------------------------------------------- */

static int compare_strings(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every model in model_store: *.mar, *.onnx, and directories with MAR-INF/MANIFEST.json. */
static inferd_code list_store(const char *store, char ***out, int *count, inferd_status *st) {
  DIR *dir = opendir(store);
  if (!dir) return core_fail(st, INFERD_NOT_FOUND, "model_store %s: %s", store, strerror(errno));
  char **names = NULL;
  int n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(dir)) != NULL) {
    if (e->d_name[0] == '.') continue;
    size_t len = strlen(e->d_name);
    bool take = (len > 4 && strcmp(e->d_name + len - 4, ".mar") == 0) ||
                (len > 5 && strcmp(e->d_name + len - 5, ".onnx") == 0);
    if (!take) {
      char manifest[4096];
      struct stat sb;
      snprintf(manifest, sizeof manifest, "%s/%s/MAR-INF/MANIFEST.json", store, e->d_name);
      take = stat(manifest, &sb) == 0 && S_ISREG(sb.st_mode);
    }
    if (!take) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      char **grown = realloc(names, (size_t)cap * sizeof *names);
      if (!grown) break;
      names = grown;
    }
    if ((names[n] = strdup(e->d_name)) != NULL) n++;
  }
  closedir(dir);
  qsort(names, (size_t)n, sizeof *names, compare_strings);
  *out = names;
  *count = n;
  return INFERD_OK;
}

inferd_code http_server_load_models(http_server *s, inferd_status *st) {
  const config_server *cfg = s->config;
  http__registry *r = s->registry;
  char **all = NULL;
  int count = cfg->load_models.count;
  inferd_code code = INFERD_OK;
  if (cfg->load_models.all) {
    if (!cfg->model_store) return core_fail(st, INFERD_INVALID_ARG, "load_models=all needs model_store");
    code = list_store(cfg->model_store, &all, &count, st);
    if (code != INFERD_OK) return code;
  }
  http__model **loaded = calloc((size_t)(count ? count : 1), sizeof *loaded);
  if (!loaded) code = core_fail(st, INFERD_NO_MEMORY, "out of memory");
  double t0 = core_now_seconds();
  /* Register all first (their workers warm up in parallel), then wait for each. Each
   * loaded[i] holds its own reference: nothing may free a model under the wait (the
   * management API refuses changes until startup_done, http_management.c). */
  for (int i = 0; i < count && code == INFERD_OK; i++) {
    http__register_params p = {
        .path = all ? all[i] : cfg->load_models.items[i].path,
        .name = all ? NULL : cfg->load_models.items[i].name,
        .workers = -1, .batch_size = -1, .max_batch_delay_ms = -1, .response_timeout_s = -1,
        .loaded_at_startup = true,
    };
    code = http__registry_register(r, &p, &loaded[i], st);
  }
  for (int i = 0; i < count && code == INFERD_OK; i++) {
    code = sched_model_wait_ready(loaded[i]->sched, -1, st);
    if (code != INFERD_OK) core_status_prefix(st, "model %s", loaded[i]->name);
  }
  if (code == INFERD_OK) {
    http__registry_startup_done(r);
    if (count) core_log(CORE_LOG_INFO, "%d model%s ready in %.2f s", count, count == 1 ? "" : "s", core_now_seconds() - t0);
  }
  for (int i = 0; loaded && i < count; i++)
    if (loaded[i]) http__model_release(loaded[i]);
  for (int i = 0; all && i < count; i++) free(all[i]);
  free(all);
  free(loaded);
  return code;
}
