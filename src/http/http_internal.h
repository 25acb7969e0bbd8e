/*
 * http_internal.h - what the files of src/http/ share; nothing outside src/http/
 * includes it (tests/fuzz includes only http.h). Names carry the http__ prefix.
 *
 * Files:
 *   http_server.c     listeners, HTTP threads (one h2o event loop each), the done
 *                     queue from workers back to loops, drain and stop
 *   http_reply.c      the one error renderer, status -> HTTP code, canned replies
 *   http_auth.c       token keys, key_file.json, the Authorization check, /token
 *   http_routes.c     request routing for the three APIs; /ping, /metrics
 *   http_models.c     the registry of loaded models: load from the model store (archive
 *                     -> engine -> scheduler with a placement plan), lookup, references
 *   http_predict.c    POST /predictions: preprocess, submit, answer from the done queue;
 *                     the jobs (submit, done queue, recycling) that http_v2.c shares
 *   http_v2.c         KServe v2 / Open Inference Protocol: health, metadata, readiness,
 *                     infer (JSON tensors and the binary tensor data extension)
 *   http_management.c the management API; slow operations run on its own thread
 *   http_multipart.c  multipart/form-data reader
 *   http_fetch.c      POST /models?url=https://...: the archive downloaded into model_store
 *   http_json_arena.c jansson's allocator: a per-thread arena for the v2 infer parse
 */
#ifndef INFERD_HTTP_INTERNAL_H
#define INFERD_HTTP_INTERNAL_H

/* libh2o-evloop is built with its own epoll loop, not libuv; its headers cannot tell. */
#define H2O_USE_EPOLL 1
#include <h2o.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "config/config.h"
#include "core/core.h"
#include "handler/handler.h"
#include "http/http.h"
#include "metrics/metrics.h"
#include "sched/sched.h"
#include "topo/topo.h"

/* ---- errors (http_reply.c) -------------------------------------------------------------
 * Every error a client can get, with its HTTP status, reason phrase and the "type" of
 * TorchServe's error body. inferd_code values map onto these in http__error_from_code
 * (the one place where a status becomes an HTTP code). */
#define HTTP__ERROR_MAP(X)                                                                  \
  X(BAD_REQUEST, 400, "Bad Request", "BadRequestException")                                  \
  X(UNAUTHORIZED, 401, "Unauthorized", "InvalidKeyException")                                \
  X(FORBIDDEN, 403, "Forbidden", "InvalidModelVersionException")                             \
  X(MODEL_NOT_FOUND, 404, "Not Found", "ModelNotFoundException")                             \
  X(NO_ROUTE, 404, "Not Found", "ResourceNotFoundException")                                 \
  X(METHOD, 405, "Method Not Allowed", "MethodNotAllowedException")                          \
  X(CONFLICT, 409, "Conflict", "ConflictStatusException")                                    \
  X(TOO_LARGE, 413, "Payload Too Large", "RequestEntityTooLargeException")                   \
  X(EXPECTATION, 417, "Expectation Failed", "ExpectationFailedException")                    \
  X(CLIENT_GONE, 499, "Client Closed Request", "ClientClosedRequestException")                \
  X(INTERNAL, 500, "Internal Server Error", "InternalServerException")                       \
  X(UNSUPPORTED, 501, "Not Implemented", "UnsupportedOperationException")                    \
  X(UNAVAILABLE, 503, "Service Unavailable", "ServiceUnavailableException")                  \
  X(TIMEOUT, 504, "Gateway Timeout", "RequestTimeoutException")                             \
  X(INSUFFICIENT_STORAGE, 507, "Insufficient Storage", "OutOfMemoryError")

typedef enum http__error {
#define HTTP__ERROR_ENUM(name, status, reason, type) HTTP__E_##name,
  HTTP__ERROR_MAP(HTTP__ERROR_ENUM)
#undef HTTP__ERROR_ENUM
  HTTP__ERROR_COUNT
} http__error;

/* Replies prepared once at start (Redis's shared.* objects): same body every time. */
typedef enum http__canned {
  HTTP__CANNED_NO_ROUTE,      /* 404 unknown path */
  HTTP__CANNED_METHOD,        /* 405 */
  HTTP__CANNED_UNAUTHORIZED,  /* 401 missing or wrong token */
  HTTP__CANNED_SHUTTING_DOWN, /* 503 while draining */
  HTTP__CANNED_EMPTY_BODY,    /* 400 prediction without a body */
  HTTP__CANNED_COUNT
} http__canned;

/* Fills the canned bodies, once per process (later calls do nothing); every server
 * calls it before its HTTP threads start. */
void http__reply_init(void);
http__error http__error_from_code(inferd_code code);
int http__error_status(http__error e);

/* Renders {"code": N, "type": "...", "message": "..."} into buf (the one renderer of
 * every error body). The message is JSON-escaped, CR/LF become spaces, each ill-formed
 * UTF-8 sequence becomes \ufffd. Returns the length (truncated to fit, never inside a
 * character; always a complete JSON object for cap >= 128). */
size_t http__render_error(char *buf, size_t cap, http__error e, const char *message);
/* The error body for this request: http__render_error's, or for a request under /v2
 * the Open Inference Protocol's {"error": "..."} (same escaping and truncation). */
size_t http__reply_error(const h2o_req_t *req, char *buf, size_t cap, http__error e, const char *message);

/* Each of these sends exactly one response and finishes the request. */
void http__send_error(h2o_req_t *req, http__error e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void http__send_status(h2o_req_t *req, const inferd_status *status); /* error from a status */
void http__send_canned(h2o_req_t *req, http__canned which);
/* A JSON body (`body` in req->pool or static) with the given HTTP status. */
void http__send_json(h2o_req_t *req, int status, const char *body, size_t len);
/* A text body (Prometheus exposition). */
void http__send_text(h2o_req_t *req, int status, const char *content_type, const char *body, size_t len);

/* The filter every response passes: it rewrites h2o's own plain-text errors (413 when a
 * body exceeds max_request_size, 400 for a broken Content-Length) into the JSON error
 * body, and adds the CORS headers cors[0..2] (Access-Control-Allow-Origin, -Methods,
 * -Headers; NULL: none; borrowed for the server's life). */
void http__register_error_filter(h2o_pathconf_t *pathconf, size_t max_request_size, const char *const cors[3]);

/* A growing string in a request's pool: JSON bodies are built here, no malloc. */
typedef struct http__buf {
  h2o_mem_pool_t *pool;
  char *data;
  size_t len, cap;
} http__buf;
void http__buf_init(http__buf *b, h2o_mem_pool_t *pool, size_t initial);
/* The same over `cap` bytes at `data` that outlive the request's answer (growth past
 * them goes to the pool). */
void http__buf_init_over(http__buf *b, h2o_mem_pool_t *pool, char *data, size_t cap);
void http__buf_append(http__buf *b, const char *s, size_t len);
void http__buf_printf(http__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void http__buf_json_string(http__buf *b, const char *s, size_t len); /* "quoted, escaped" */

/* http_number.c: x as a JSON number, the text snprintf "%.9g" writes for (double)x (which
 * reads back as x), or null for NaN and infinities; NUL-terminated. Returns its length. */
enum { HTTP__FLOAT_CHARS = 16 }; /* "-1.23456789e-38" and the NUL */
size_t http__float_json(float x, char out[HTTP__FLOAT_CHARS]);
/* True when s[0..n) is well-formed UTF-8 (what JSON text must be). */
bool http__utf8_valid(const char *s, size_t n);

/* ---- token auth (http_auth.c) ---------------------------------------------------------- */

typedef enum http__key_kind { HTTP__KEY_INFERENCE, HTTP__KEY_MANAGEMENT, HTTP__KEY_API, HTTP__KEY_COUNT } http__key_kind;

typedef struct http__auth http__auth;
/* Generates the three keys and writes the key file. enabled=false: no keys, every
 * check passes. server: whose HTTP threads will check keys (NULL: no server's). */
inferd_code http__auth_new(bool enabled, const char *key_file, const http_server *server, http__auth **out,
                          inferd_status *status);
void http__auth_free(http__auth *auth);
/* True when the request's Authorization header is "Bearer <the current key of kind>"
 * and that key has not expired. On the server's HTTP threads (elsewhere, not during a
 * regeneration). Constant time in the key's length. */
bool http__auth_check(http__auth *auth, const h2o_req_t *req, http__key_kind kind);
/* GET /token?type=inference|management (authorized with the API key): new key of that
 * kind, key file rewritten. Any thread. */
inferd_code http__auth_regenerate(http__auth *auth, http__key_kind kind, inferd_status *status);
/* token_expiration_min: the lifetime of the inference and management keys (minutes > 0);
 * re-dates the current two from now and rewrites the key file. Any thread. */
inferd_code http__auth_set_expiration(http__auth *auth, double minutes, inferd_status *status);

/* ---- server and loops (http_server.c) ------------------------------------------------- */

typedef struct http__listener {
  const config_address *address;
  unsigned apis;           /* bit (1u << http_api) for each API served here */
  int port;                /* bound port (resolved when the configured one was 0) */
  int *fds;                /* [thread_count] listening sockets, one per HTTP thread */
  bool made_socket_file;   /* unix: this server's bind made the socket file; removed at the end */
  dev_t socket_dev;        /* unix: that file (lstat after the bind); a file at the path */
  ino_t socket_ino;        /* that is not this one is someone else's and is left alone */
  h2o_hostconf_t *hostconf;
  h2o_hostconf_t *hosts[2]; /* NULL-terminated, for h2o_accept_ctx_t */
  SSL_CTX *ssl_ctx;          /* https: the server's (http_tls.c); NULL: cleartext */
  struct http__handler *handler;
} http__listener;

/* The handler of one listener's catch-all path: routes by the APIs served there. */
typedef struct http__handler {
  h2o_handler_t super;
  unsigned apis;
} http__handler;

typedef struct http__loop {
  h2o_context_t ctx; /* first: a request's conn->ctx points at its loop */
  http_server *server;
  int index;
  h2o_evloop_t *evloop;
  h2o_accept_ctx_t accept_ctx[HTTP_API_COUNT]; /* one per listener */
  h2o_socket_t *sockets[HTTP_API_COUNT];
  /* Linked while accepting is paused because the process is out of file descriptors
   * (accept fails with EMFILE): the listeners are read again when it fires. */
  h2o_timeout_entry_t accept_resume;
  double accept_warned;     /* core_now_seconds() of the last "out of descriptors" warning */
  h2o_multithread_queue_t *queue;
  h2o_multithread_receiver_t wake_receiver; /* an empty message: look at `stop` */
  h2o_multithread_receiver_t done_receiver; /* predictions finished by workers */
  h2o_multithread_receiver_t management_receiver; /* management replies */
  atomic_bool stop;
  pthread_t thread;
  bool thread_started;
  struct http__prep *prep;  /* this thread's image preprocessing thread (http_prep.c) */
  EVP_ENCODE_CTX *base64;   /* for images sent as base64 text (NULL: out of memory) */
  uint8_t *scratch;         /* http__loop_scratch */
  size_t scratch_cap;
  struct http__job *free_jobs; /* recycled prediction jobs, this thread only */
  int free_job_count;
  struct http__block *free_blocks; /* recycled answer blocks (http__answer_memory) */
  int free_block_count;
  struct http__hook **hooks;   /* hooks of requests not yet disposed, by request (http_hook.c) */
  size_t hooks_mask, hook_count;
  struct http__hook *free_hooks;
  h2o_linklist_t waiting;      /* requests waiting for the scheduler, by http__job.waiting */
  h2o_timeout_entry_t deadline_tick; /* linked while `waiting` is not empty */
  /* Odd inside a read section (http__read_begin); written by this thread only, read by
   * writers waiting the sections out. */
  atomic_uint read_seq;
} http__loop;

/* The loop of the calling HTTP thread; NULL on every other thread. */
extern _Thread_local http__loop *http__current_loop;

/* Read sections, for what HTTP threads read without a lock and a writer replaces whole
 * (the model registry's snapshot, the token keys): the reader brackets its read with
 * http__read_begin / http__read_end; the writer publishes the new version with a
 * sequentially consistent store or exchange, calls http__read_synchronize, and only then
 * frees the old one. A writer waits for as long as a section lasts: keep them short, never
 * wait in one on anything a writer may hold (the registry's sections take a model's
 * scheduler lock briefly and may malloc), and never nest them. http__read_begin returns
 * false, opening nothing, on a thread that is not one of s's loops: such a reader must
 * keep writers out some other way. http__read_synchronize(NULL) returns at once. */
bool http__read_begin(const http_server *s);
void http__read_end(bool opened);
void http__read_synchronize(const http_server *s);

struct http_server {
  const config_server *config;
  char *key_file;
  http__auth *auth;
  h2o_globalconf_t globalconf;
  int listener_count;
  http__listener listeners[HTTP_API_COUNT];
  int listener_of_api[HTTP_API_COUNT];
  int thread_count;
  http__loop *loops;      /* [thread_count] */
  atomic_bool draining;   /* set by http_server_drain */
  atomic_long in_flight;  /* predictions accepted and not yet answered */
  pthread_mutex_t start_lock;
  pthread_cond_t start_cond;
  int loops_ready;        /* under start_lock */
  metrics_registry *metrics;
  const topo *topo;       /* borrowed; NULL: workers are not pinned */
  struct http__registry *registry;
  struct http__management *management;
  SSL_CTX *ssl_ctx;       /* of the https listeners; NULL when there is none */
};

/* ---- TLS (http_tls.c) ------------------------------------------------------------------- */

/* The TLS context of the https addresses, from cfg's certificate_file and private_key_file
 * (PEM, checked against each other); INVALID_ARG naming the file and the reason. Freed
 * with SSL_CTX_free. */
inferd_code http__tls_new(const config_server *cfg, SSL_CTX **out, inferd_status *st);

static inline http__loop *http__loop_of(h2o_req_t *req) { return (http__loop *)req->conn->ctx; }

struct addrinfo;
/* Which of getaddrinfo's answers for a listening host is bound (an element of the
 * list): the first IPv4 one, else the first. Java prefers IPv4 when it resolves
 * TorchServe's inference_address ("localhost": 127.0.0.1 even where ::1 comes first). */
struct addrinfo *http__listen_address(struct addrinfo *list);

/* ---- routing (http_routes.c) ------------------------------------------------------------ */

/* Serves one request that arrived on a listener serving `apis`; always answers. */
void http__route(http_server *server, h2o_req_t *req, unsigned apis);

/* A request path cut at '/', and its query. Segments point into the request. */
enum { HTTP__MAX_SEGMENTS = 8 };
typedef struct http__path {
  int count;
  h2o_iovec_t segments[HTTP__MAX_SEGMENTS];
  h2o_iovec_t query; /* after '?', or empty */
} http__path;

/* Cuts req->path (up to req->query_at) after its leading '/' at each '/' into
 * path->segments, dropping trailing empty ones (inner empty segments stay), and points
 * path->query after the '?'. False when there are more than HTTP__MAX_SEGMENTS
 * segments. */
bool http__parse_path(h2o_req_t *req, http__path *path);

/* Answers the OpenAPI 3.0.1 description of the APIs in `apis` (1 << http_api bits),
 * for OPTIONS / and /api-description (http_describe.c); register and unregister only
 * with `model_api` (enable_model_api), as the router serves them. */
void http__describe(h2o_req_t *req, unsigned apis, bool model_api);
struct json_t;
/* The document http__describe answers; NULL when memory ran out (never a part of it).
 * Free with json_decref. */
struct json_t *http__describe_document(unsigned apis, bool model_api);

/* The (first) value of query parameter `name`, percent-decoded into req->pool and
 * NUL-terminated; false when absent. Items are separated by '&' or ';', and keys are
 * decoded before they are compared, as Netty's QueryStringDecoder does. */
bool http__query_param(h2o_req_t *req, const http__path *path, const char *name, h2o_iovec_t *value);

/* Every value of query parameter `name` (a repeated key, as name[]=a&name[]=b), decoded
 * as http__query_param's, in order into values[0..max). Returns how many there are,
 * which may be more than max (the first max are filled; the count stops at max + 1). */
size_t http__query_values(h2o_req_t *req, const http__path *path, const char *name, h2o_iovec_t *values,
                          size_t max);

/* Integer query parameter `name` (an optional '-' and 1-10 decimal digits) within
 * [lo, hi] into *out; false when it is given and is not one. Absent or empty, it
 * leaves *out as it was (TorchServe's getIntParameter: an empty value is the default,
 * so a pager may send next_page_token= on its first page). */
bool http__query_int(h2o_req_t *req, const http__path *path, const char *name, int lo, int hi, int *out);
/* The same reading of one value (not empty) into *out; false when it is not one. */
bool http__parse_int(h2o_iovec_t v, int lo, int hi, int *out);
bool http__segment_is(h2o_iovec_t segment, const char *text);

/* ---- models (http_models.c) --------------------------------------------------------------- */

/* One registered model version. Immutable after registration except where noted; the
 * registry holds one reference, every request in flight for it one more. */
typedef struct http__model {
  char *name;
  char *version;
  char *url;                 /* modelUrl: what it was registered from, as given */
  char *downloaded;          /* the archive's name in model_store when it was downloaded from
                                url (deleted again by the unregister); else NULL */
  char *handler;             /* "image_classifier", or "tensor" (KServe v2 infer only) */
  bool image_classifier;     /* /predictions takes images: handler image_classifier */
  bool loaded_at_startup;
  atomic_bool is_default;    /* written under the registry's lock; for describe (lookups use the snapshot's) */
  inferd_model *engine;
  sched_model *sched;
  handler_labels *labels;    /* NULL: class indices as names */
  metrics_model *metrics;
  struct http__placement *placement;
  size_t input_elems;        /* floats of one request's input */
  size_t output_elems;       /* floats of one request's output: an item of every output */
  size_t classes;            /* floats of the first output's item: an image classifier's classes */
  size_t answer_bytes;       /* bound of one top-5 answer's JSON */
  int batch_size, max_batch_delay_ms, response_timeout_s;
  int precision;             /* inferd_precision: model-config.yaml's, then models={...}'s, else fp32 */
  /* Set by scale (management thread), read by describe (HTTP threads). The model runs
   * min_workers; max_workers (>= min_workers) is only reported, as inferd does not
   * autoscale. A describe during a scale may see one of the two from before it. */
  atomic_int min_workers, max_workers;
  int job_queue_size;        /* the scheduler's, as it took it (read per v2 request, lock-free) */
  atomic_int decoding;       /* predictions queued for or in their image decode, on every HTTP thread */
  atomic_int refs;
  http_server *server;
} http__model;

typedef struct http__registry http__registry;

/* Downloads an http(s) url into model_store (http_fetch.c has the checks and their
 * answers); on success `name` is the archive's file name there. Blocks for the whole
 * download; stops with UNAVAILABLE once *cancel is set. Management thread. */
inferd_code http__fetch(const config_server *cfg, const char *url, const atomic_bool *cancel, char *name,
                        size_t name_size, inferd_status *status);
/* Deletes model_store/name, a download whose model is gone (or failed to register). */
void http__fetch_remove(const config_server *cfg, const char *name);

/* The file a registration names (`given`, a url or load_models item): absolute, or
 * below model_store, into `out`. Registrations over the API (from_api) may not leave
 * model_store: an absolute name or a ".." segment is INVALID_ARG; a URL is
 * UNSUPPORTED (an http(s) one is downloaded by http__fetch first, over the API only). */
inferd_code http__resolve_path(const config_server *cfg, const char *given, bool from_api, char *out, size_t size,
                               inferd_status *status);

inferd_code http__registry_new(http_server *server, http__registry **out, inferd_status *status);
/* Drains and frees every model (no request may be in flight). */
void http__registry_free(http__registry *registry);

/* What a registration asks for; -1 (or NULL) for "from the config, else the defaults". */
typedef struct http__register_params {
  const char *path;          /* as given: relative to model_store, or absolute */
  const char *url;           /* the url path was downloaded from (http__fetch), or NULL */
  const char *name;          /* NULL: the archive's modelName */
  int workers, batch_size, max_batch_delay_ms, response_timeout_s;
  bool loaded_at_startup;
  bool synchronous;          /* wait for the workers to be ready */
} http__register_params;

/* Loads and registers a model; blocks for the whole load (call off the HTTP threads).
 * ALREADY_EXISTS when that name and version are registered. On success, when out is not
 * NULL, *out is the registered model with a reference of the caller's (taken when it
 * was inserted, so no unregister can free it first): drop it with http__model_release. */
inferd_code http__registry_register(http__registry *r, const http__register_params *params, http__model **out,
                                    inferd_status *status);
/* http__model_acquire on the server's registry, or the error answered to req (404 for an
 * unknown model or version) and NULL. */
http__model *http__model_acquire_or_reply(http_server *server, h2o_req_t *req, const char *name, size_t name_len,
                                          const char *version, size_t version_len);
/* Takes a reference on name/version (version NULL or empty: the default version).
 * NOT_FOUND with TorchServe's message when there is none. Any thread. */
http__model *http__model_acquire(http__registry *r, const char *name, size_t name_len, const char *version,
                                 size_t version_len, inferd_status *status);
/* Drops a reference; the last one frees the model on the management thread. */
void http__model_release(http__model *m);
/* Removes name/version (NULL: the default version; refused while other versions exist
 * and it is the default, as TorchServe does) from the registry and drains it; the model
 * is freed once its last request has been answered. Blocks: management thread only. */
inferd_code http__registry_unregister(http__registry *r, const char *name, const char *version, inferd_status *status);
inferd_code http__registry_set_default(http__registry *r, const char *name, const char *version, inferd_status *status);
/* Runs min_workers workers for name/version (placement re-planned) and records
 * max_workers (>= min_workers) for describe. Management thread only. */
inferd_code http__registry_scale(http__registry *r, const char *name, const char *version, int min_workers,
                                 int max_workers, bool synchronous, inferd_status *status);
/* True when startup is over and every model loaded at startup that is asked to run
 * workers (min_workers > 0: not one scaled to 0 on purpose) is ready. */
bool http__registry_ready(http__registry *r);
/* http_server_load_models has loaded and waited for every model of load_models. Until
 * then the management API refuses every change (register, scale, unregister,
 * set-default) with 503. Any thread. */
void http__registry_startup_done(http__registry *r);
bool http__registry_startup_over(http__registry *r);
/* Snapshots with a reference each (release each with http__model_release, free the
 * array with free): every version (all=true) or only default versions, sorted by name
 * then version, optionally only those named `name`. */
int http__registry_list(http__registry *r, const char *name, bool all, http__model ***out);
/* Frees a model whose last reference is gone (the management thread calls this). */
void http__model_destroy(http__model *m);

/* ---- jobs: requests between submit and answer (http_predict.c) ---------------------------- */

/* Memory an answer is written into when it must outlive the jobs (http__answer_memory). */
typedef struct http__block {
  struct http__block *next_free;
  size_t cap;
  char data[];
} http__block;

/* The dispose hook of a request that waited (http_hook.c): found by its request when
 * h2o disposes it (http__request_disposed). `job` is the first job while its client
 * waits (NULL once answered or let go); `block` the answer block to give back. */
typedef struct http__hook {
  h2o_req_t *req; /* the table's key */
  struct http__job *job;
  http__block *block;
  struct http__hook *next_free;
} http__hook;

/* A hook for `req`, in the loop's table until h2o disposes the request (NULL: out of
 * memory). */
http__hook *http__hook_attach(struct http__loop *loop, h2o_req_t *req);
/* Takes req's hook out of the table (NULL: it has none); http__hook_put recycles it. */
http__hook *http__hook_detach(struct http__loop *loop, const h2o_req_t *req);
void http__hook_put(struct http__loop *loop, http__hook *hook);
/* Frees the table and the recycled hooks (the loop's end). */
void http__hooks_free(struct http__loop *loop);

/* One scheduler request between its submit and its answer, with its input and output
 * slots. Recycled per HTTP thread. A prediction is one job; a KServe v2 infer of n
 * rows is n jobs linked in row order from the first, which answers for all. */
typedef struct http__job {
  sched_request request;             /* what the scheduler sees; request.user == this */
  h2o_multithread_message_t message; /* back to `loop` when done */
  inferd_code code;                  /* from the done callback */
  http__loop *loop;
  h2o_req_t *req;                    /* NULL once the client is gone (v2: first row only) */
  struct http__hook *hook;           /* req's hook (http_hook.c): hook->job points back here until answered */
  http__model *model;                /* one reference (v2: held by the first row) */
  float *input;                      /* [input_capacity] */
  float *output;                     /* [output_capacity] */
  size_t input_capacity, output_capacity;
  double received;                   /* core_now_seconds() when the request arrived */
  double deadline;                   /* answer 504 after this (received + response_timeout) */
  h2o_linklist_t waiting;            /* in loop->waiting while its client waits (v2: first row) */
  /* Loop thread, once the scheduler is done with the job (it came back through the done
   * queue): answer, drop references, recycle. */
  void (*finish)(struct http__job *job);
  struct http__job *first_row;       /* v2: the first job of the request (itself there) */
  struct http__job *next_row;        /* v2: the next row's job, NULL after the last */
  int rows_pending;                  /* v2, first row: rows submitted and not yet back */
  void *call;                        /* v2, first row: the call's state in req->pool */
  uint8_t *image;                    /* prediction: the image bytes, copied for http_prep.c */
  size_t image_len, image_cap;
  bool prep_failed;                  /* came back from http_prep.c: answer request.status */
  struct http__job *next_prep;       /* in its loop's preprocessing queue */
  struct http__job *next_free;
} http__job;

/* A job of this loop's free list with slots for m's input and output (NULL: out of
 * memory), its row links cleared. The caller fills input and sets model and finish;
 * http__job_submit fills the scheduler request. */
http__job *http__job_get(http__loop *loop, const http__model *m);
void http__job_put(http__loop *loop, http__job *job);
/* The jobs of `first` (a prediction's job, or the first row of a v2 infer, with the
 * rows after it) are queued and the client of `req` waits for them: sets first->req and
 * a dispose hook (the client leaving cancels the jobs, which are then
 * recycled without an answer when they come back), and from now on answers 504 once
 * the model's response_timeout has passed since the request was received, even while
 * its batch still runs (the scheduler's own check covers only requests still queued).
 * False, with nothing changed, when there is no memory for the hook. */
bool http__job_wait(http__job *first, h2o_req_t *req);
/* `bytes` of memory for the answer of `first`'s request (after http__job_wait) that
 * lives until h2o disposes the request, when the dispose hook gives it back to the
 * loop: an answer block, recycled per HTTP thread, instead of a block of the request's
 * pool, which h2o 2.2 mallocs and frees per request at 1 KB and more (a v2 answer of a
 * 1000-class output is ~12 KB). NULL when out of memory: use the pool then. */
char *http__answer_memory(http__job *first, size_t bytes);
/* The listeners' logger: h2o runs it for every request it disposes. For a request that
 * waited (it has an http__hook), gives the answer block back to the loop, which keeps
 * at most 16 of at most 1 MB, and when the client left before the answer, cancels the
 * jobs. */
void http__request_disposed(h2o_logger_t *self, h2o_req_t *req);
/* The request of `first` needs no timeout any more: it came back, or its client left. */
void http__job_unwait(http__job *first);
/* Cancels `first` and every row after it (sched_request_cancel): a row not run yet is
 * skipped; each still comes back to its finish. */
void http__job_cancel(http__job *first);
/* Submits job->input to job->model's scheduler, to come back to job->finish on this
 * loop. OK: the scheduler owns the job until then. Else nothing was queued and *st
 * says why (UNAVAILABLE: queue full, draining, no workers; 503 + Retry-After). The loop
 * thread (v2 rows) or its preprocessing thread (predictions). */
inferd_code http__job_submit(http__job *job, inferd_status *st);
/* Submits the n rows from `first` (v2 infer) in row order at once (sched_submit_many:
 * an idle worker takes them together instead of the first alone). Returns how many were
 * queued; when fewer than n, *st says why the next one was refused. The loop thread;
 * uses its scratch buffer (http__loop_scratch). */
int http__rows_submit(http__job *first, int n, inferd_status *st);
/* Answers a job that came back with `code` != OK (504, 503 or 500); returns the status sent. */
int http__send_job_error(h2o_req_t *req, const http__model *m, inferd_code code, const inferd_status *why);
/* max_response_size bounds every body that carries model output (/predictions, v2
 * infer): true when a body of `len` bytes may go out; else req is answered 500 with a
 * message naming both sizes and nothing else may be sent. */
bool http__response_fits(h2o_req_t *req, const http__model *m, size_t len);
/* Adds a request answered with success (its first job; its rows follow next_row) to
 * TorchServe's latency counters: arrival to now, and arrival to when its last row was
 * taken into a batch. */
void http__ts_answered(const http__model *m, const http__job *first);

void http__predict(http_server *server, h2o_req_t *req, const http__path *path);
void http__predict_loop_init(http__loop *loop);  /* on the loop thread */
/* The loop's scratch buffer, at least `bytes` long, for what a handler needs only until
 * it returns (an image decoded from base64, a v2 input's numbers before they are copied
 * into the jobs): grown to the largest asked for (bounded by max_request_size), kept,
 * never freed per request. NULL when it cannot grow. Loop thread only. */
void *http__loop_scratch(http__loop *loop, size_t bytes);
/* Stops the loop's preprocessing thread and answers what it sent back: before the
 * loop's models may go away, whether or not the loop's h2o objects are then freed. */
void http__predict_loop_stop(http__loop *loop);  /* on the loop thread, at exit */
void http__predict_loop_free(http__loop *loop);  /* on the loop thread, at exit, after stop */

/* ---- image preprocessing off the loop (http_prep.c) ----------------------------------- */

typedef struct http__prep http__prep;
/* Starts `loop`'s preprocessing thread; NULL when out of memory or threads. */
http__prep *http__prep_start(http__loop *loop, const handler_image_params *params);
/* True when `limit` jobs already wait to be decoded (answer 503 then). Only the loop
 * pushes, so a false answer holds until its next push. Loop thread. */
/* Queues a prediction's job whose image (job->image) is to be decoded into its input
 * slot and submitted; a failure comes back through the loop's done queue with
 * job->prep_failed. Loop thread. */
void http__prep_push(http__prep *p, http__job *job);
/* Stops and frees the thread (NULL: nothing); returns the jobs it had not started, linked
 * by next_prep, for the loop to recycle. Loop thread, at exit. */
http__job *http__prep_stop(http__prep *p);

/* ---- KServe v2 (http_v2.c) -------------------------------------------------------------- */

/* Everything under /v2 (health, server and model metadata, readiness, infer). */
void http__v2(http_server *server, h2o_req_t *req, const http__path *path);
bool http__server_ready(http_server *server); /* not draining, every startup model ready */
bool http__method_is(h2o_req_t *req, const char *method);

/* ---- jansson's allocator for the v2 parse (http_json_arena.c) ---------------------------
 * Installed once per process (json_set_alloc_funcs) by http_server_new. While an arena is
 * active on a thread, jansson allocates from that thread's arena and its frees of those
 * blocks do nothing; otherwise it uses malloc/free as before. Every function acts on the
 * calling thread's arena only. */
void http__json_arena_install(void);        /* idempotent; first call wins */
void http__json_arena_set_keep(size_t bytes); /* kept across requests per thread; 0: 64 MB */
/* From begin to end every jansson allocation on this thread comes from its arena; end
 * resets it (keeping up to the keep limit of chunks). Nothing allocated in between may be
 * used after end. Not nested. */
void http__json_arena_begin(void);
void http__json_arena_end(void);
void http__json_arena_thread_free(void); /* frees this thread's chunks (thread exit does too) */
typedef struct http__json_arena_stats {
  size_t chunks;             /* chunks this thread's arena holds now */
  size_t bytes;              /* their total size */
  uint64_t chunk_mallocs;    /* malloc calls made for chunks (this thread, since it started) */
  uint64_t fallback_mallocs; /* jansson allocations served by malloc (this thread, no arena active) */
  uint64_t arena_allocs;     /* jansson allocations served by the arena (this thread) */
} http__json_arena_stats;
void http__json_arena_get_stats(http__json_arena_stats *out);

/* ---- management (http_management.c) ----------------------------------------------------- */

typedef struct http__management http__management;
inferd_code http__management_new(http_server *server, http__management **out, inferd_status *status);
/* Runs what is queued (model frees included), then stops the thread; later model
 * frees run on the caller's thread. */
void http__management_stop(http__management *management);
void http__management_free(http__management *management);
/* Serves a management API request (the HTTP thread; slow parts are queued). */
void http__management_route(http_server *server, h2o_req_t *req, const http__path *path);
void http__management_loop_init(http__loop *loop);
/* Queues the destruction of a model whose references are gone (any thread). */
void http__management_destroy_later(http__management *management, http__model *model);

#endif /* INFERD_HTTP_INTERNAL_H */
