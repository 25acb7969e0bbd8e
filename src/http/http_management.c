/*
 * http_management.c - TorchServe's management API (port 8081) and the management
 * thread.
 *
 *   GET    /models[?limit=N&next_page_token=T]    list (default versions), paginated
 *                                                  as TorchServe: limit above 100 or
 *                                                  below 0 is 100, 0 lists none; a
 *                                                  token below 0 is 0
 *   GET    /models/{m}[/{v}|/all]                  describe: settings, queue, workers with
 *                                                  ids, state, threads and pinned cores
 *   POST   /models?url=F[&model_name&initial_workers&batch_size&max_batch_delay
 *                    &response_timeout&synchronous]  register from model_store, or
 *                                                  from an http(s) url downloaded into
 *                                                  it first (http_fetch.c; the unregister
 *                                                  deletes it again); the
 *                                                  same keys as a JSON object body with
 *                                                  Content-Type: application/json); as
 *                                                  TorchServe's RegisterModelRequest,
 *                                                  synchronous defaults to true (the
 *                                                  answer waits for the workers), false
 *                                                  answers 202 once the model is loaded
 *   PUT    /models/{m}[/{v}][?min_worker=N&max_worker=M&model_version=V&synchronous]
 *                                                  scale workers: as TorchServe's
 *                                                  handleScaleModel, min_worker defaults
 *                                                  to 1 and max_worker to min_worker
 *                                                  (max < min: 400); the model runs
 *                                                  min_worker workers (no autoscaling),
 *                                                  describe reports both
 *   DELETE /models/{m}[/{v}]                       unregister (drains its queue); the
 *                                                  default version while others exist:
 *                                                  403, as TorchServe
 *   PUT    /models/{m}/{v}/set-default             default version
 *   GET    /token?type=inference|management        new key (API key required)
 * Register and unregister need --enable-model-api (enable_model_api=true); without it
 * they get 405 MethodNotAllowedException, as TorchServe answers. Everything else needs
 * the management key (http_auth.c). Bodies are TorchServe's: {"status": "..."} for
 * changes, the describe array, {"models": [...], "nextPageToken": "..."}.
 *
 * Start-up: TorchServe opens its management port only once the models of load_models
 * are loaded. inferd listens from the start (the reads answer), but every change
 * (register, scale, unregister, set-default) gets 503 until http_server_load_models is
 * done: the start-up registers and waits for its models on the main thread, and a
 * change from here would race it (an unregister would free a model it waits for).
 *
 * Threading: reads (list, describe) and set-default run on the HTTP thread. Loading a
 * model, scaling and unregistering block for up to seconds (engine load, warm-up,
 * joining workers), so the HTTP thread queues them to the one management thread, which
 * runs them in order and sends the reply back to the loop that owns the connection
 * (h2o_multithread, as predictions do). That thread also frees models whose last
 * reference was dropped, so no HTTP thread ever joins a worker. At most MAX_PENDING
 * client changes wait or run at once; one more is a 503 at once (an asynchronous scale
 * answers 202 before it runs, so a client could otherwise queue them without bound).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "http/http_internal.h"

/* TorchServe's default and largest page of GET /models (ApiUtils.getModelList). */
enum { LIST_LIMIT_MAX = 100 };

typedef enum op { OP_REGISTER, OP_SCALE, OP_UNREGISTER, OP_DESTROY } op;

typedef struct mgmt_job {
  h2o_multithread_message_t message; /* the reply, back to `loop` */
  http__loop *loop;
  h2o_req_t *req;           /* NULL once the client is gone (loop thread only) */
  struct mgmt_job **hook;   /* in req->pool */
  op op;
  char *path, *name, *version; /* owned */
  char *scaled;             /* OP_SCALE: the version it scales, found when the request came (owned) */
  int workers, max_workers, batch_size, max_batch_delay_ms, response_timeout_s;
  bool synchronous;
  http__model *model;       /* OP_DESTROY */
  int status;               /* the reply: HTTP status and body (owned) */
  char *body;
  size_t len;
  struct mgmt_job *next;
} mgmt_job;

enum { MAX_PENDING = 64 };

/* A status message: a model name and a version (255 bytes each, config_valid_model_name)
 * and TorchServe's longest sentence around them, "... registered with 0 initial workers.
 * Use scale workers API to add workers for the model." */
enum { MESSAGE_MAX = 2 * 255 + 256 };

struct http__management {
  http_server *server;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  mgmt_job *head, *tail;    /* under lock */
  int pending;              /* under lock: client changes queued or running */
  bool stop;                /* under lock */
  bool stopped;             /* under lock: the thread is gone; destroy inline */
  pthread_t thread;
  bool started;
};

/* ---- replies ---------------------------------------------------------------------------- */

static char *dump(json_t *json, size_t *len) {
  char *text = json_dumps(json, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(json);
  *len = text ? strlen(text) : 0;
  return text;
}

static void send_json_owned(h2o_req_t *req, int status, char *text, size_t len) {
  if (!text) {
    http__send_error(req, HTTP__E_INTERNAL, "out of memory rendering the reply");
    return;
  }
  char *body = h2o_mem_alloc_pool(&req->pool, len + 1);
  memcpy(body, text, len);
  body[len++] = '\n';
  free(text);
  http__send_json(req, status, body, len);
}

static char *status_text(const char *message, size_t *len) { return dump(json_pack("{s:s}", "status", message), len); }

/* The reply of a failed operation, rendered by the one error renderer. */
static void fail_reply(mgmt_job *job, const inferd_status *st) {
  /* a model or workers that do not fit in memory: 507, TorchServe's OutOfMemoryError (a
   * request's out of memory stays 503, transient, which a balancer retries elsewhere; so
   * does an unregister's, which only a failed small malloc gives) */
  bool grows = job->op == OP_REGISTER || job->op == OP_SCALE;
  http__error e = grows && st->code == INFERD_NO_MEMORY ? HTTP__E_INSUFFICIENT_STORAGE : http__error_from_code(st->code);
  /* the one refusal of an unregister: the default version while others exist, which
   * TorchServe answers 403 InvalidModelVersionException (its ModelManager.unregisterModel) */
  if (job->op == OP_UNREGISTER && st->code == INFERD_INVALID_ARG) e = HTTP__E_FORBIDDEN;
  size_t cap = 160 + 6 * strlen(st->message);
  job->body = malloc(cap);
  job->status = http__error_status(e);
  job->len = job->body ? http__render_error(job->body, cap, e, st->message) : 0;
}

static void ok_reply(mgmt_job *job, int status, const char *message) {
  job->status = status;
  job->body = status_text(message, &job->len);
}

/* ---- the management thread -------------------------------------------------------------- */

static void run(http__management *g, mgmt_job *job) {
  http__registry *r = g->server->registry;
  inferd_status st;
  char message[MESSAGE_MAX];
  inferd_code code;
  switch (job->op) {
  case OP_DESTROY:
    http__model_destroy(job->model);
    return;
  case OP_REGISTER: {
    if (atomic_load(&g->server->draining)) { /* queued before the drain: loading it would only delay the exit */
      core_fail(&st, INFERD_UNAVAILABLE, "The server is shutting down and registers no model: %s", job->path);
      fail_reply(job, &st);
      return;
    }
    /* an http(s) url: its archive is downloaded into model_store first, and registered
     * from there (the file is deleted again when the register fails, or by the unregister) */
    char fetched[256] = "";
    bool remote = http_url_is_remote(job->path);
    if (remote && http__fetch(g->server->config, job->path, &g->server->draining, fetched, sizeof fetched, &st) !=
                      INFERD_OK) {
      fail_reply(job, &st);
      return;
    }
    http__register_params p = {.path = remote ? fetched : job->path, .url = remote ? job->path : NULL,
                               .name = job->name, .workers = job->workers, .batch_size = job->batch_size,
                               .max_batch_delay_ms = job->max_batch_delay_ms,
                               .response_timeout_s = job->response_timeout_s, .synchronous = job->synchronous};
    http__model *m;
    code = http__registry_register(r, &p, &m, &st);
    if (code == INFERD_NOT_FOUND) core_status_prefix(&st, "Model not found in model store: %s", job->path);
    if (code != INFERD_OK && remote) http__fetch_remove(g->server->config, fetched);
    if (code != INFERD_OK) {
      fail_reply(job, &st);
    } else if (atomic_load(&m->min_workers) == 0) {
      snprintf(message, sizeof message,
               "Model \"%s\" Version: %s registered with 0 initial workers. Use scale workers API to add workers "
               "for the model.",
               m->name, m->version);
      ok_reply(job, 200, message);
    } else if (job->synchronous) {
      snprintf(message, sizeof message, "Model \"%s\" Version: %s registered with %d initial workers", m->name,
               m->version, atomic_load(&m->min_workers));
      ok_reply(job, 200, message);
    } else {
      ok_reply(job, 202, "Processing worker updates...");
    }
    if (code == INFERD_OK) http__model_release(m);
    return;
  }
  case OP_SCALE:
    code = http__registry_scale(r, job->name, job->scaled, job->workers, job->max_workers, job->synchronous, &st);
    if (code != INFERD_OK && !job->loop) {
      /* an asynchronous scale was answered 202 before it ran: no client waits for a
       * reply, and without this line a scale refused (507: its workers do not fit) or
       * failed left no trace but the unchanged worker count */
      core_log(CORE_LOG_WARN, "model %s: the scale to %d workers (answered 202) failed: %s", job->name, job->workers,
               st.message);
    } else if (code != INFERD_OK) {
      fail_reply(job, &st);
    } else if (job->synchronous) {
      /* TorchServe's ApiUtils.updateModelWorkers names the version when the request did */
      snprintf(message, sizeof message, "Workers scaled to %d for model: %s%s%s", job->workers, job->name,
               job->version ? ", version: " : "", job->version ? job->version : "");
      ok_reply(job, 200, message);
    } else {
      ok_reply(job, 202, "Processing worker updates...");
    }
    return;
  case OP_UNREGISTER:
    code = http__registry_unregister(r, job->name, job->version, &st);
    if (code != INFERD_OK) {
      fail_reply(job, &st);
    } else {
      snprintf(message, sizeof message, "Model \"%s\" unregistered", job->name);
      ok_reply(job, 200, message);
    }
    return;
  }
}

static void job_free(mgmt_job *job) {
  free(job->path);
  free(job->name);
  free(job->version);
  free(job->scaled);
  free(job->body);
  free(job);
}

static void *management_main(void *arg) {
  http__management *g = arg;
  pthread_mutex_lock(&g->lock);
  for (;;) {
    while (!g->head && !g->stop) pthread_cond_wait(&g->cond, &g->lock);
    mgmt_job *job = g->head;
    if (!job) break; /* stop, and nothing left */
    g->head = job->next;
    if (!g->head) g->tail = NULL;
    pthread_mutex_unlock(&g->lock);
    run(g, job);
    if (job->op != OP_DESTROY) {
      pthread_mutex_lock(&g->lock);
      g->pending--;
      pthread_mutex_unlock(&g->lock);
    }
    if (job->op == OP_DESTROY || !job->loop) /* no client waits for it */
      job_free(job);
    else
      h2o_multithread_send_message(&job->loop->management_receiver, &job->message);
    pthread_mutex_lock(&g->lock);
  }
  g->stopped = true;
  pthread_mutex_unlock(&g->lock);
  return NULL;
}

/* Why a client's change was not queued. */
typedef enum { QUEUED, REFUSED_BUSY, REFUSED_STOPPED } enqueue_result;

/* Queues a job. A client change is refused beyond MAX_PENDING, and once the thread is
 * gone (the server stops: nothing would run it, and its client would never be answered). */
static enqueue_result enqueue(http__management *g, mgmt_job *job) {
  pthread_mutex_lock(&g->lock);
  if (job->op != OP_DESTROY) {
    enqueue_result refused = g->stopped ? REFUSED_STOPPED : g->pending == MAX_PENDING ? REFUSED_BUSY : QUEUED;
    if (refused != QUEUED) {
      pthread_mutex_unlock(&g->lock);
      return refused;
    }
    g->pending++;
  }
  bool inline_destroy = g->stopped && job->op == OP_DESTROY;
  if (!inline_destroy) {
    job->next = NULL;
    if (g->tail)
      g->tail->next = job;
    else
      g->head = job;
    g->tail = job;
    pthread_cond_signal(&g->cond);
  }
  pthread_mutex_unlock(&g->lock);
  if (inline_destroy) {
    http__model_destroy(job->model);
    job_free(job);
  }
  return QUEUED;
}

/* The 503 for a change enqueue refused; frees the job. */
static void refuse(h2o_req_t *req, mgmt_job *job, enqueue_result why) {
  job_free(job);
  if (why == REFUSED_STOPPED)
    http__send_error(req, HTTP__E_UNAVAILABLE, "the server is shutting down");
  else
    http__send_error(req, HTTP__E_UNAVAILABLE, "%d model changes are already queued or running; retry later",
                     MAX_PENDING);
}

void http__management_destroy_later(http__management *g, http__model *model) {
  mgmt_job *job = calloc(1, sizeof *job);
  if (!g || !job) { /* no thread (yet) or no memory: do it here */
    free(job);
    http__model_destroy(model);
    return;
  }
  job->op = OP_DESTROY;
  job->model = model;
  enqueue(g, job);
}

inferd_code http__management_new(http_server *server, http__management **out, inferd_status *st) {
  /* The keys exist already (http__auth_new has no config): give them their lifetime
   * before any request can be served. */
  inferd_code code = http__auth_set_expiration(server->auth, server->config->token_expiration_min, st);
  if (code != INFERD_OK) return code;
  http__management *g = calloc(1, sizeof *g);
  if (!g) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  g->server = server;
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->cond, NULL);
  if (pthread_create(&g->thread, NULL, management_main, g) != 0) {
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cond);
    free(g);
    return core_fail(st, INFERD_INTERNAL, "cannot start the management thread");
  }
  g->started = true;
  *out = g;
  return INFERD_OK;
}

void http__management_stop(http__management *g) {
  if (!g || !g->started) return;
  pthread_mutex_lock(&g->lock);
  g->stop = true;
  pthread_cond_signal(&g->cond);
  pthread_mutex_unlock(&g->lock);
  pthread_join(g->thread, NULL);
  g->started = false;
}

void http__management_free(http__management *g) {
  if (!g) return;
  http__management_stop(g);
  pthread_mutex_destroy(&g->lock);
  pthread_cond_destroy(&g->cond);
  free(g);
}

/* ---- replies back on the loop thread ---------------------------------------------------------- */

/* A management call's client leaving: h2o's own per-request callback, a shared entry in
 * the request's pool (one malloc per call; predictions, the hot path, recycle theirs in
 * http_hook.c). */
static void on_job_dispose(void *p) {
  mgmt_job *job = *(mgmt_job **)p;
  if (job) job->req = NULL;
}

static void on_replies(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages) {
  (void)receiver;
  while (!h2o_linklist_is_empty(messages)) {
    h2o_multithread_message_t *message = H2O_STRUCT_FROM_MEMBER(h2o_multithread_message_t, link, messages->next);
    h2o_linklist_unlink(&message->link);
    mgmt_job *job = H2O_STRUCT_FROM_MEMBER(mgmt_job, message, message);
    if (job->req) {
      *job->hook = NULL;
      if (job->body && job->status >= 400) {
        /* already rendered by http__render_error */
        char *body = h2o_mem_alloc_pool(&job->req->pool, job->len);
        memcpy(body, job->body, job->len);
        http__send_json(job->req, job->status, body, job->len);
      } else {
        send_json_owned(job->req, job->status, job->body, job->len);
        job->body = NULL;
      }
    }
    job_free(job);
  }
}

void http__management_loop_init(http__loop *loop) {
  h2o_multithread_register_receiver(loop->queue, &loop->management_receiver, on_replies);
}

/* Queues job; the reply comes back to this request (or, for asynchronous scaling,
 * goes out now and the job runs without a client). */
static void submit(http_server *s, h2o_req_t *req, mgmt_job *job) {
  job->loop = http__loop_of(req);
  job->req = req;
  job->hook = h2o_mem_alloc_shared(&req->pool, sizeof *job->hook, on_job_dispose);
  *job->hook = job;
  enqueue_result queued = enqueue(s->management, job);
  if (queued != QUEUED) {
    *job->hook = NULL;
    job->req = NULL;
    refuse(req, job, queued);
  }
}

/* ---- the reads ---------------------------------------------------------------------------- */

static json_t *describe(http__model *m) {
  sched_model_info info;
  sched_worker_info workers[SCHED_MAX_WORKERS];
  int n = sched_model_describe(m->sched, &info, workers, SCHED_MAX_WORKERS);
  if (n > SCHED_MAX_WORKERS) n = SCHED_MAX_WORKERS;
  struct timeval tv;
  gettimeofday(&tv, NULL);
  double wall_now = (double)tv.tv_sec + tv.tv_usec / 1e6, mono_now = core_now_seconds();
  json_t *list = json_array();
  for (int i = 0; i < n; i++) {
    const sched_worker_info *w = &workers[i];
    char id[16], started[40];
    snprintf(id, sizeof id, "%d", 9000 + w->id);
    time_t wall = (time_t)(wall_now - (mono_now - w->start_time));
    struct tm tm;
    gmtime_r(&wall, &tm);
    strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *worker = json_pack("{s:s, s:s, s:s, s:i, s:s, s:i, s:I, s:I, s:i, s:b, s:s}", "id", id, "startTime",
                               started, "status", sched_worker_state_name(w->state), "slot", w->slot, "cores", w->cores,
                               "threads", w->threads, "batches", (json_int_t)w->batches, "requests",
                               (json_int_t)w->requests, "pid", (int)getpid(), "gpu", 0, "gpuUsage", "N/A");
    if (worker && w->state == SCHED_WORKER_FAILED) json_object_set_new(worker, "error", json_string(w->error.message));
    json_array_append_new(list, worker);
  }
  json_t *d = json_pack(
      "{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:b, s:I}", "modelName", m->name,
      "modelVersion", m->version, "modelUrl", m->url, "engine", "inferd", "runtime", "onnx", "handler", m->handler,
      "minWorkers", atomic_load(&m->min_workers), "maxWorkers", atomic_load(&m->max_workers), "batchSize",
      info.batch_size, "maxBatchDelay", info.max_batch_delay_ms, "responseTimeout", m->response_timeout_s,
      "loadedAtStartup", m->loaded_at_startup, "isDefault", atomic_load(&m->is_default), "ready", info.ready,
      "memoryUsage", (json_int_t)inferd_model_weights_bytes(m->engine));
  json_object_set_new(d, "precision", json_string(config_precision_name(m->precision))); /* inferd only */
  json_object_set_new(d, "jobQueueStatus", json_pack("{s:i, s:i, s:i}", "queueSize", info.job_queue_size,
                                                     "remainingCapacity", info.job_queue_size - info.queue_depth,
                                                     "pendingRequests", info.queue_depth));
  json_object_set_new(d, "workers", list);
  return d;
}

static void describe_models(http_server *s, h2o_req_t *req, const char *name, const char *version) {
  bool all = version && strcmp(version, "all") == 0;
  http__model **models = NULL;
  int n = 0;
  if (version && !all) {
    http__model *m = http__model_acquire_or_reply(s, req, name, strlen(name), version, strlen(version));
    if (!m) return;
    models = malloc(sizeof *models);
    if (models) models[n++] = m;
    else http__model_release(m);
  } else {
    n = http__registry_list(s->registry, name, all, &models);
  }
  if (n == 0) {
    free(models);
    http__send_error(req, HTTP__E_MODEL_NOT_FOUND, "Model not found: %s", name);
    return;
  }
  json_t *array = json_array();
  for (int i = 0; i < n; i++) {
    json_array_append_new(array, describe(models[i]));
    http__model_release(models[i]);
  }
  free(models);
  size_t len;
  char *text = dump(array, &len);
  send_json_owned(req, 200, text, len);
}

static bool parse_bool(h2o_iovec_t v) { return h2o_lcstris(v.base, v.len, H2O_STRLIT("true")) || http__segment_is(v, "1"); }

static void list_models(http_server *s, h2o_req_t *req, const http__path *path) {
  int limit = LIST_LIMIT_MAX, offset = 0;
  if (!http__query_int(req, path, "limit", INT32_MIN, INT32_MAX, &limit)) {
    http__send_error(req, HTTP__E_BAD_REQUEST, "limit must be an integer");
    return;
  }
  /* TorchServe's ApiUtils.getModelList: if (limit > 100 || limit < 0) limit = 100; */
  if (limit > LIST_LIMIT_MAX || limit < 0) limit = LIST_LIMIT_MAX;
  /* bounded so that offset + limit cannot overflow; no list holds that many models */
  if (!http__query_int(req, path, "next_page_token", INT32_MIN, INT32_MAX - LIST_LIMIT_MAX, &offset)) {
    http__send_error(req, HTTP__E_BAD_REQUEST, "next_page_token must come from a previous list");
    return;
  }
  if (offset < 0) offset = 0; /* as TorchServe */
  http__model **models;
  int n = http__registry_list(s->registry, NULL, false, &models);
  json_t *list = json_array();
  for (int i = 0; i < n; i++) {
    if (i >= offset && i < offset + limit)
      json_array_append_new(list, json_pack("{s:s, s:s}", "modelName", models[i]->name, "modelUrl", models[i]->url));
    http__model_release(models[i]);
  }
  free(models);
  json_t *body = json_object();
  /* TorchServe sends a token whenever the page does not run past the end, also when it
   * ends exactly there (the next page is then empty) */
  if (offset + limit <= n) {
    char token[16];
    snprintf(token, sizeof token, "%d", offset + limit);
    json_object_set_new(body, "nextPageToken", json_string(token));
  }
  json_object_set_new(body, "models", list);
  size_t len;
  char *text = dump(body, &len);
  send_json_owned(req, 200, text, len);
}

/* ---- routing ---------------------------------------------------------------------------------- */

/* Answers 503 to a change while the models of load_models are still loading (see the
 * top of the file); false when the change may go ahead. */
static bool refuse_while_starting(http_server *s, h2o_req_t *req) {
  if (http__registry_startup_over(s->registry)) return false;
  http__send_error(req, HTTP__E_UNAVAILABLE,
                   "The server is still loading the models of load_models: models cannot be registered, scaled, "
                   "unregistered or set as default until it is ready (GET /ping answers 200); retry then");
  return true;
}

static char *dup_iovec(h2o_iovec_t v) { return v.base ? strndup(v.base, v.len) : NULL; }

static void token(http_server *s, h2o_req_t *req, const http__path *path) {
  if (path->count != 1 || !http__method_is(req, "GET")) {
    http__send_canned(req, path->count != 1 ? HTTP__CANNED_NO_ROUTE : HTTP__CANNED_METHOD);
    return;
  }
  if (!http__auth_check(s->auth, req, HTTP__KEY_API)) {
    http__send_canned(req, HTTP__CANNED_UNAUTHORIZED);
    return;
  }
  h2o_iovec_t type;
  http__key_kind kind = HTTP__KEY_COUNT;
  if (http__query_param(req, path, "type", &type)) {
    if (http__segment_is(type, "inference")) kind = HTTP__KEY_INFERENCE;
    if (http__segment_is(type, "management")) kind = HTTP__KEY_MANAGEMENT;
  }
  inferd_status st;
  if (http__auth_regenerate(s->auth, kind, &st) != INFERD_OK) {
    http__send_status(req, &st);
    return;
  }
  size_t len;
  char *text = status_text("Key file updated", &len);
  send_json_owned(req, 200, text, len);
}

/* A register's parameters: from the query, or from a JSON body when the request's
 * Content-Type is application/json (TorchServe's parseRequest reads one or the other;
 * its RegisterModelRequest has the same keys either way). */
typedef struct register_args {
  h2o_iovec_t url, name; /* base NULL: not given; NUL-terminated, in req->pool */
  int workers, batch_size, max_batch_delay_ms, response_timeout_s; /* -1: not given */
  bool synchronous;
} register_args;

static const char *const BAD_WORKERS = "initial_workers must be an integer in 0..256",
                         *const BAD_BATCH = "batch_size must be an integer in 1..1024",
                         *const BAD_DELAY = "max_batch_delay must be an integer number of milliseconds in 0..600000",
                         *const BAD_TIMEOUT = "response_timeout must be an integer number of seconds in 1..86400";

static const char *args_from_query(h2o_req_t *req, const http__path *path, register_args *a) {
  h2o_iovec_t v;
  if (http__query_param(req, path, "url", &v)) a->url = v;
  if (http__query_param(req, path, "model_name", &v)) a->name = v;
  if (http__query_param(req, path, "synchronous", &v)) a->synchronous = parse_bool(v);
  if (!http__query_int(req, path, "initial_workers", 0, SCHED_MAX_WORKERS, &a->workers)) return BAD_WORKERS;
  if (!http__query_int(req, path, "batch_size", 1, SCHED_MAX_BATCH, &a->batch_size)) return BAD_BATCH;
  if (!http__query_int(req, path, "max_batch_delay", 0, 600000, &a->max_batch_delay_ms)) return BAD_DELAY;
  if (!http__query_int(req, path, "response_timeout", 1, 86400, &a->response_timeout_s)) return BAD_TIMEOUT;
  return NULL;
}

/* Member `key` of a JSON register body: an integer in lo..hi into *out (absent or null:
 * *out kept); false when it is not one. As TorchServe's Gson reads an int field, 2.0
 * and "2" are 2 too. */
static bool json_int_member(const json_t *root, const char *key, int lo, int hi, int *out) {
  const json_t *x = json_object_get(root, key);
  if (!x || json_is_null(x)) return true;
  if (json_is_string(x)) return http__parse_int(h2o_iovec_init(json_string_value(x), json_string_length(x)), lo, hi, out);
  if (!json_is_number(x)) return false;
  double v = json_number_value(x);
  if (!(v >= lo && v <= hi) || v != (double)(int)v) return false;
  *out = (int)v;
  return true;
}

/* Member `key` of a JSON register body: a string, copied into the request's pool (absent
 * or null: *out kept); false when it is not one. */
static bool json_string_member(h2o_req_t *req, const json_t *root, const char *key, h2o_iovec_t *out) {
  const json_t *x = json_object_get(root, key);
  if (!x || json_is_null(x)) return true;
  if (!json_is_string(x)) return false;
  *out = h2o_strdup(&req->pool, json_string_value(x), json_string_length(x));
  return true;
}

static const char *args_from_json(h2o_req_t *req, register_args *a) {
  json_error_t error;
  json_t *root = json_loadb(req->entity.base, req->entity.len, JSON_REJECT_DUPLICATES, &error);
  const char *bad = NULL;
  if (!json_is_object(root)) {
    char *text = h2o_mem_alloc_pool(&req->pool, 256);
    snprintf(text, 256, "a JSON register body must be one object%s%s", root ? "" : ": ", root ? "" : error.text);
    bad = text;
  } else if (!json_string_member(req, root, "url", &a->url) || !json_string_member(req, root, "model_name", &a->name)) {
    bad = "url and model_name must be strings";
  } else if (!json_int_member(root, "initial_workers", 0, SCHED_MAX_WORKERS, &a->workers)) {
    bad = BAD_WORKERS;
  } else if (!json_int_member(root, "batch_size", 1, SCHED_MAX_BATCH, &a->batch_size)) {
    bad = BAD_BATCH;
  } else if (!json_int_member(root, "max_batch_delay", 0, 600000, &a->max_batch_delay_ms)) {
    bad = BAD_DELAY;
  } else if (!json_int_member(root, "response_timeout", 1, 86400, &a->response_timeout_s)) {
    bad = BAD_TIMEOUT;
  } else {
    const json_t *sync = json_object_get(root, "synchronous"); /* true, false, or "true" / "false" as Gson takes */
    const char *text = json_is_string(sync) ? json_string_value(sync) : NULL;
    if (json_is_boolean(sync))
      a->synchronous = json_is_true(sync);
    else if (text && (!strcasecmp(text, "true") || !strcasecmp(text, "false")))
      a->synchronous = !strcasecmp(text, "true");
    else if (sync && !json_is_null(sync))
      bad = "synchronous must be true or false";
  }
  json_decref(root);
  return bad;
}

static bool body_is_json(h2o_req_t *req) {
  ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
  if (i < 0) return false;
  h2o_iovec_t type = req->headers.entries[i].value;
  size_t n = 0; /* the media type, before any parameter */
  while (n < type.len && type.base[n] != ';' && type.base[n] != ' ' && type.base[n] != '\t') n++;
  return h2o_lcstris(type.base, n, H2O_STRLIT("application/json"));
}

static void register_model(http_server *s, h2o_req_t *req, const http__path *path) {
  /* TorchServe's defaults: synchronous for a register (a scale's is false); no workers
   * unless model-config.yaml names some */
  register_args a = {.workers = -1, .batch_size = -1, .max_batch_delay_ms = -1, .response_timeout_s = -1,
                     .synchronous = true};
  const char *bad = body_is_json(req) ? args_from_json(req, &a) : args_from_query(req, path, &a);
  if (bad) {
    http__send_error(req, HTTP__E_BAD_REQUEST, "%s", bad);
    return;
  }
  if (!a.url.base || a.url.len == 0) {
    http__send_error(req, HTTP__E_BAD_REQUEST, "Parameter url is required.");
    return;
  }
  /* a decoded %00 would cut the file name short: refuse it, never open another file */
  if (memchr(a.url.base, '\0', a.url.len) || (a.name.base && memchr(a.name.base, '\0', a.name.len))) {
    http__send_error(req, HTTP__E_BAD_REQUEST, "url and model_name may not contain a NUL byte (%%00)");
    return;
  }
  /* both end up in JSON bodies, which must be UTF-8 (the registry checks url too) */
  if (!http__utf8_valid(a.url.base, a.url.len) || (a.name.base && !http__utf8_valid(a.name.base, a.name.len))) {
    http__send_error(req, HTTP__E_BAD_REQUEST, "url and model_name must be valid UTF-8: url '%s'", a.url.base);
    return;
  }
  if (a.name.base && !config_valid_model_name(a.name.base)) {
    http__send_error(req, HTTP__E_BAD_REQUEST, "model_name must match [A-Za-z0-9][A-Za-z0-9_.-]*");
    return;
  }
  mgmt_job *job = calloc(1, sizeof *job);
  if (job) {
    *job = (mgmt_job){.op = OP_REGISTER, .path = dup_iovec(a.url), .name = dup_iovec(a.name), .workers = a.workers,
                      .batch_size = a.batch_size, .max_batch_delay_ms = a.max_batch_delay_ms,
                      .response_timeout_s = a.response_timeout_s, .synchronous = a.synchronous};
  }
  if (!job || !job->path || (a.name.base && !job->name)) {
    http__send_error(req, HTTP__E_UNAVAILABLE, "out of memory");
    if (job) job_free(job);
    return;
  }
  submit(s, req, job);
}

void http__management_route(http_server *s, h2o_req_t *req, const http__path *path) {
  if (http__segment_is(path->segments[0], "token")) {
    token(s, req, path);
    return;
  }
  if (path->count > 4) {
    http__send_canned(req, HTTP__CANNED_NO_ROUTE);
    return;
  }
  if (!http__auth_check(s->auth, req, HTTP__KEY_MANAGEMENT)) {
    http__send_canned(req, HTTP__CANNED_UNAUTHORIZED);
    return;
  }
  bool model_api = s->config->enable_model_api;
  if (path->count == 1) { /* /models */
    if (http__method_is(req, "GET")) {
      list_models(s, req, path);
    } else if (http__method_is(req, "POST") && model_api) {
      if (!refuse_while_starting(s, req)) register_model(s, req, path);
    } else {
      http__send_canned(req, HTTP__CANNED_METHOD);
    }
    return;
  }
  /* /models/{m}[/{v}[/set-default]] */
  char *name = h2o_mem_alloc_pool(&req->pool, path->segments[1].len + 1);
  memcpy(name, path->segments[1].base, path->segments[1].len);
  name[path->segments[1].len] = '\0';
  char *version = NULL;
  if (path->count >= 3) {
    h2o_iovec_t seg = path->segments[2];
    if (path->count == 3 && http__segment_is(seg, "set-default")) {
      http__send_canned(req, HTTP__CANNED_NO_ROUTE); /* set-default needs a version */
      return;
    }
    version = h2o_mem_alloc_pool(&req->pool, seg.len + 1);
    memcpy(version, seg.base, seg.len);
    version[seg.len] = '\0';
  }
  bool set_default = path->count == 4 && http__segment_is(path->segments[3], "set-default");
  if (path->count == 4 && !set_default) {
    http__send_canned(req, HTTP__CANNED_NO_ROUTE);
    return;
  }
  if (set_default) {
    if (!http__method_is(req, "PUT")) {
      http__send_canned(req, HTTP__CANNED_METHOD);
      return;
    }
    if (refuse_while_starting(s, req)) return;
    inferd_status st;
    if (http__registry_set_default(s->registry, name, version, &st) != INFERD_OK) {
      http__send_status(req, &st);
      return;
    }
    char message[MESSAGE_MAX];
    snprintf(message, sizeof message, "Default version successfully updated for model \"%s\" to \"%s\"", name, version);
    size_t len;
    char *text = status_text(message, &len);
    send_json_owned(req, 200, text, len);
    return;
  }
  if (http__method_is(req, "GET")) {
    describe_models(s, req, name, version);
    return;
  }
  mgmt_job *job;
  h2o_iovec_t v;
  if (http__method_is(req, "PUT")) {
    if (refuse_while_starting(s, req)) return;
    /* TorchServe's handleScaleModel: min_worker defaults to 1, max_worker to min_worker;
     * the version comes from the path, else from model_version. */
    int workers = 1, max_workers;
    if (!http__query_int(req, path, "min_worker", 0, SCHED_MAX_WORKERS, &workers)) {
      http__send_error(req, HTTP__E_BAD_REQUEST, "min_worker must be an integer in 0..256");
      return;
    }
    max_workers = workers;
    if (!http__query_int(req, path, "max_worker", 0, SCHED_MAX_WORKERS, &max_workers)) {
      http__send_error(req, HTTP__E_BAD_REQUEST, "max_worker must be an integer in 0..256");
      return;
    }
    if (max_workers < workers) {
      http__send_error(req, HTTP__E_BAD_REQUEST, "max_worker cannot be less than min_worker.");
      return;
    }
    if (!version && http__query_param(req, path, "model_version", &v) && v.len > 0) {
      if (memchr(v.base, '\0', v.len)) { /* the version looked up must be the one named */
        http__send_error(req, HTTP__E_BAD_REQUEST, "model_version may not contain a NUL byte (%%00)");
        return;
      }
      version = v.base; /* NUL-terminated by http__query_param */
    }
    http__model *m = http__model_acquire_or_reply(s, req, name, strlen(name), version, version ? strlen(version) : 0);
    if (!m) return;
    /* Without a version, the default one now: TorchServe finds it when the request comes,
     * so a set-default while an asynchronous scale waits in the queue does not move it. */
    bool made = (job = calloc(1, sizeof *job)) && (job->name = strdup(name)) &&
                (!version || (job->version = strdup(version))) && (job->scaled = strdup(m->version));
    http__model_release(m);
    if (!made) {
      if (job) job_free(job);
      http__send_error(req, HTTP__E_UNAVAILABLE, "out of memory");
      return;
    }
    job->op = OP_SCALE;
    job->workers = workers;
    job->max_workers = max_workers;
    job->synchronous = http__query_param(req, path, "synchronous", &v) && parse_bool(v);
    if (!job->synchronous) {
      /* TorchServe answers 202 at once and scales in the background. */
      static const char accepted[] = "{\n  \"status\": \"Processing worker updates...\"\n}\n";
      enqueue_result queued = enqueue(s->management, job); /* loop == NULL: no reply to send */
      if (queued != QUEUED) {
        refuse(req, job, queued);
        return;
      }
      http__send_json(req, 202, accepted, sizeof accepted - 1);
      return;
    }
    submit(s, req, job);
    return;
  }
  if (http__method_is(req, "DELETE")) {
    if (!model_api) {
      http__send_canned(req, HTTP__CANNED_METHOD);
      return;
    }
    if (refuse_while_starting(s, req)) return;
    if (!(job = calloc(1, sizeof *job)) || !(job->name = strdup(name)) || (version && !(job->version = strdup(version)))) {
      if (job) job_free(job);
      http__send_error(req, HTTP__E_UNAVAILABLE, "out of memory");
      return;
    }
    job->op = OP_UNREGISTER;
    submit(s, req, job);
    return;
  }
  http__send_canned(req, HTTP__CANNED_METHOD);
}
