/*
 * http_predict.c - POST /predictions/{model}[/{version}]: TorchServe's image_classifier
 * over HTTP.
 *
 * The path of one prediction (DESIGN.md §1), all on the HTTP thread that owns the
 * connection except the decoding of step 3 and step 4:
 *   1. look the model up and take a reference (404 when unknown);
 *   2. find the image: the raw body, or form field `data` (else `file`, else `body`)
 *      of a multipart/form-data body (400 when empty or malformed; h2o already refused
 *      bodies above max_request_size with 413);
 *   3. take a job from this thread's free list, copy the image bytes into it, and queue
 *      it to this thread's preprocessing thread (http_prep.c), which decodes the image
 *      into the job's input slot (handler_image_preprocess) and submits the job to the
 *      model's scheduler; a bad image (400) or a refusal (503 + Retry-After: queue full,
 *      draining) comes back through the done queue of step 4. The request now waits;
 *      the loop serves other connections;
 *   4. a worker runs the batch and calls on_done on its own thread, which only sends
 *      the job to the owning loop with h2o_multithread_send_message;
 *   5. on_jobs_done, back on the loop thread, renders the top-5 JSON
 *      (handler_classify_json) into the request's pool and sends it; or the error:
 *      TIMEOUT -> 504 (response_timeout), UNAVAILABLE -> 503, an engine error -> 500,
 *      a body larger than max_response_size -> 500 (http__response_fits, which v2
 *      infer's answers go through too; TorchServe's default is 6553500 bytes).
 * Every accepted request gets exactly one response, from exactly one of steps 1-3
 * or 5.
 *
 * A client that goes away while its job is queued: over HTTP/2, h2o disposes the
 * request, and its dispose hook (http_hook.c) clears job->req and cancels the
 * job (the scheduler skips it if it has not run); the job still comes back through
 * step 5 and is recycled there without an answer. Over HTTP/1.x h2o does not read the
 * connection while a request on it is processed, so it never sees the client leave:
 * the tick below peeks at the socket instead.
 *
 * Response timeout: a waiting request is on its loop's `waiting` list with its
 * deadline (received + the model's response_timeout). While the list is not empty a
 * tick runs every 100 ms (h2o's hundred_ms_timeout) and answers 504 to every request
 * past its deadline, and 499 to every HTTP/1 request whose client closed its
 * connection, then lets it go as a client that left: req cleared, the dispose hook
 * disarmed, its jobs cancelled. So a client waits at most about response_timeout,
 * even when its batch runs longer (the engine cannot stop a batch; the scheduler's own
 * deadline check happens only when a worker takes the request), and a client that
 * left stops holding the model within about 100 ms.
 *
 * The jobs are shared with KServe v2 infer (http_v2.c): http__job_get / http__job_put
 * recycle them, http__job_submit queues one with on_done as its callback, and
 * on_jobs_done hands each job that comes back to its own `finish` (finish_prediction
 * here; http_v2.c's waits for all rows of a request). http__send_job_error is the one
 * mapping of a failed job to 504 / 503 / 500.
 *
 * Memory: jobs (with their input and output slots: 602 KB for a 224x224 image) are
 * recycled per HTTP thread; after warm-up a prediction allocates from h2o's request
 * pool; its dispose hook (http__job_wait) is recycled too (http_hook.c). The
 * number of jobs alive is bounded by the requests in flight, which the models'
 * job_queue_size (their scheduler's queue, and each loop's queue of images to decode)
 * and batch sizes bound; a loop keeps at most FREE_JOBS_KEPT of them between requests,
 * each with an image buffer of at most IMAGE_KEPT_BYTES. Answers of 1 KB and more (v2
 * infer's), which h2o's pool would malloc, go to answer blocks that the same hook
 * gives back to the loop once h2o has sent them and disposes the request
 * (http__answer_memory); the loop keeps at most BLOCKS_KEPT of at most BLOCK_KEPT_BYTES.
 *
 * Threading: everything here runs on the loop thread that owns the request, except
 * http__job_submit (called by the preprocessing thread) and on_done (worker threads),
 * which touch only the job's scheduler request, code and message.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "http/http_internal.h"

static const char *const FORM_FIELDS[] = {"data", "file", "body"};

/* ---- jobs ---------------------------------------------------------------------------------- */

static bool grow(float **slot, size_t *capacity, size_t floats) {
  if (*capacity >= floats) return true;
  free(*slot);
  *slot = NULL;
  *capacity = 0;
  void *p;
  if (posix_memalign(&p, 64, floats * sizeof(float)) != 0) return false;
  *slot = p;
  *capacity = floats;
  return true;
}

/* What a loop keeps of the jobs it recycles: at most FREE_JOBS_KEPT jobs (a burst's
 * are freed past that), each with an image buffer of at most IMAGE_KEPT_BYTES. */
enum { FREE_JOBS_KEPT = 256 };
#define IMAGE_KEPT_BYTES ((size_t)512 << 10)

static void job_free(http__job *job) {
  free(job->input);
  free(job->output);
  free(job->image);
  free(job);
}

http__job *http__job_get(http__loop *loop, const http__model *m) {
  http__job *job = loop->free_jobs;
  if (job) {
    loop->free_jobs = job->next_free;
    loop->free_job_count--;
  } else if (!(job = calloc(1, sizeof *job))) {
    return NULL;
  }
  if (!grow(&job->input, &job->input_capacity, m->input_elems) ||
      !grow(&job->output, &job->output_capacity, m->output_elems)) {
    job_free(job);
    return NULL;
  }
  job->loop = loop;
  job->next_free = NULL;
  job->first_row = job->next_row = NULL;
  job->rows_pending = 0;
  job->call = NULL;
  job->image_len = 0;
  job->prep_failed = false;
  atomic_store(&job->request.cancelled, false); /* a recycled job may have been cancelled */
  return job;
}

void http__job_put(http__loop *loop, http__job *job) {
  if (loop->free_job_count >= FREE_JOBS_KEPT) {
    job_free(job);
    return;
  }
  job->req = NULL;
  job->hook = NULL; /* the request's hook, if any, was disarmed (hook->job = NULL) */
  job->model = NULL;
  job->finish = NULL;
  job->first_row = job->next_row = NULL;
  job->call = NULL;
  if (job->image_cap > IMAGE_KEPT_BYTES) {
    free(job->image);
    job->image = NULL;
    job->image_cap = 0;
  }
  job->next_free = loop->free_jobs;
  loop->free_jobs = job;
  loop->free_job_count++;
}

void http__job_cancel(http__job *first) {
  for (http__job *row = first; row; row = row->next_row) sched_request_cancel(&row->request);
}

/* ---- answer blocks ----------------------------------------------------------------------------- */

enum {
  BLOCKS_KEPT = 16,              /* free answer blocks a loop keeps */
  BLOCK_MIN_BYTES = 16 << 10,    /* a new block holds at least this much */
};
#define BLOCK_KEPT_BYTES ((size_t)1 << 20) /* larger blocks are freed, not kept */

char *http__answer_memory(http__job *first, size_t bytes) {
  http__hook *hook = first->hook;
  http__loop *loop = first->loop;
  if (!hook || hook->block) return NULL;
  http__block **at = &loop->free_blocks;
  while (*at && (*at)->cap < bytes) at = &(*at)->next_free;
  http__block *b = *at;
  if (b) {
    *at = b->next_free;
    loop->free_block_count--;
  } else {
    size_t cap = bytes < BLOCK_MIN_BYTES ? BLOCK_MIN_BYTES : bytes;
    if (cap > SIZE_MAX - sizeof *b || !(b = malloc(sizeof *b + cap))) return NULL;
    b->cap = cap;
  }
  hook->block = b;
  return b->data;
}

static void block_put(http__loop *loop, http__block *b) {
  if (b->cap > BLOCK_KEPT_BYTES || loop->free_block_count >= BLOCKS_KEPT) {
    free(b);
    return;
  }
  b->next_free = loop->free_blocks;
  loop->free_blocks = b;
  loop->free_block_count++;
}

/* h2o disposes a request. One that waited: after its answer was sent (the answer block
 * goes back to the loop), or before we answered (client gone, HTTP/2 stream reset):
 * counted under 499 as an HTTP/1 client that left is (let_go). */
void http__request_disposed(h2o_logger_t *self, h2o_req_t *req) {
  (void)self;
  http__loop *loop = http__loop_of(req);
  http__hook *hook = http__hook_detach(loop, req);
  if (!hook) return;
  if (hook->block) block_put(loop, hook->block);
  http__job *first = hook->job;
  http__hook_put(loop, hook);
  if (!first) return; /* answered already */
  metrics_model_response(first->model->metrics, 499);
  first->req = NULL;
  first->hook = NULL;
  http__job_unwait(first);
  http__job_cancel(first);
}

/* ---- response timeout and clients that left ------------------------------------------------ */

/* An HTTP/1.x client that closed its connection while its request waits. h2o 2.2 stops
 * reading an HTTP/1 connection while a request on it is processed, so it cannot see the
 * close and never disposes the request: peek at the socket instead. End of stream or a
 * reset means the client left (a client that only shut down its sending side is taken as
 * gone too, as nginx does). Over TLS a closing client sends its close_notify record
 * before the end of stream, so the peek finds bytes: there the end of stream itself is
 * asked for (POLLRDHUP), whatever was sent before it. HTTP/2 keeps reading: a reset
 * stream disposes the request. */
static bool client_left(h2o_req_t *req) {
  if (req->version >= 0x200 || !req->conn->callbacks->get_socket) return false;
  h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
  int fd = sock ? h2o_socket_get_fd(sock) : -1;
  if (fd < 0) return false;
  if (h2o_socket_get_ssl_protocol_version(sock)) {
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
  }
  char byte;
  ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Answers a waiting request now (504 at its deadline; 499, which nobody reads, when its
 * client left, so that h2o writes, fails and closes the connection) and lets it go as a
 * client that left: req cleared, the dispose hook disarmed, its jobs cancelled (a job
 * the scheduler has not run is skipped; every job still comes back through
 * on_jobs_done, which recycles it without an answer). */
static void let_go(http__job *first, bool client_gone) {
  h2o_linklist_unlink(&first->waiting);
  http__model *m = first->model;
  first->hook->job = NULL; /* answered: the dispose hook must not touch the job */
  int status = 499;
  if (client_gone)
    http__send_error(first->req, HTTP__E_CLIENT_GONE, "The client closed the connection before the answer");
  else
    status = http__send_job_error(first->req, m, INFERD_TIMEOUT, NULL);
  metrics_model_response(m->metrics, status);
  first->req = NULL;
  http__job_cancel(first);
}

/* Every 100 ms while requests wait: those past their response timeout, and HTTP/1
 * requests whose client left. */
static void on_deadline_tick(h2o_timeout_entry_t *entry) {
  http__loop *loop = H2O_STRUCT_FROM_MEMBER(http__loop, deadline_tick, entry);
  double now = core_now_seconds();
  for (h2o_linklist_t *node = loop->waiting.next, *next; node != &loop->waiting; node = next) {
    next = node->next;
    http__job *first = H2O_STRUCT_FROM_MEMBER(http__job, waiting, node);
    if (now >= first->deadline)
      let_go(first, false);
    else if (client_left(first->req))
      let_go(first, true);
  }
  if (!h2o_linklist_is_empty(&loop->waiting))
    h2o_timeout_link(loop->ctx.loop, &loop->ctx.hundred_ms_timeout, &loop->deadline_tick);
}

bool http__job_wait(http__job *first, h2o_req_t *req) {
  http__loop *loop = first->loop;
  if (!(first->hook = http__hook_attach(loop, req))) return false;
  first->hook->job = first;
  first->req = req;
  int timeout_s = first->model->response_timeout_s;
  first->deadline = timeout_s > 0 ? first->received + timeout_s : INFINITY;
  h2o_linklist_insert(&loop->waiting, &first->waiting);
  if (!h2o_timeout_is_linked(&loop->deadline_tick))
    h2o_timeout_link(loop->ctx.loop, &loop->ctx.hundred_ms_timeout, &loop->deadline_tick);
  return true;
}

void http__job_unwait(http__job *first) {
  if (h2o_linklist_is_linked(&first->waiting)) h2o_linklist_unlink(&first->waiting);
}

/* Worker thread: hand the job back to the loop that owns its connection. */
static void on_done(sched_request *request, inferd_code code, void *user) {
  (void)request;
  http__job *job = user;
  job->code = code;
  h2o_multithread_send_message(&job->loop->done_receiver, &job->message);
}

/* Why the scheduler refused, in TorchServe's words where it has them. */
static void refusal_message(http__model *m, const inferd_status *why, inferd_status *st) {
  sched_model_info info;
  sched_model_describe(m->sched, &info, NULL, 0);
  if (info.draining)
    core_fail(st, INFERD_UNAVAILABLE, "Model \"%s\" Version %s is being unregistered", m->name, m->version);
  else if (info.workers == 0)
    core_fail(st, INFERD_UNAVAILABLE,
              "Model \"%s\" Version %s has no worker to serve inference request. Please use scale workers API to "
              "add workers.",
              m->name, m->version);
  else
    core_fail(st, INFERD_UNAVAILABLE, "Model \"%s\" Version %s is busy: %s; retry later", m->name, m->version,
              why->message);
}

static void job_request(http__job *job) {
  job->request.input = job->input;
  job->request.output = job->output;
  job->request.deadline = 0; /* the model's response_timeout after enqueue */
  job->request.done = on_done;
  job->request.user = job;
  job->message = (h2o_multithread_message_t){{NULL, NULL}};
}

static inferd_code job_refused(const http__job *job, inferd_status *st) {
  inferd_code code = job->request.status.code;
  if (code == INFERD_UNAVAILABLE)
    refusal_message(job->model, &job->request.status, st);
  else
    *st = job->request.status;
  return code;
}

inferd_code http__job_submit(http__job *job, inferd_status *st) {
  job_request(job);
  return sched_submit(job->model->sched, &job->request) == INFERD_OK ? INFERD_OK : job_refused(job, st);
}

int http__rows_submit(http__job *first, int n, inferd_status *st) {
  sched_request **requests = http__loop_scratch(first->loop, (size_t)n * sizeof *requests);
  int k = 0;
  for (http__job *row = first; row && k < n; row = row->next_row) {
    job_request(row);
    if (requests) requests[k] = &row->request;
    k++;
  }
  if (!requests) { /* no memory for the list: one by one */
    k = 0;
    for (http__job *row = first; row && k < n; row = row->next_row, k++)
      if (sched_submit(first->model->sched, &row->request) != INFERD_OK) break;
  } else {
    k = sched_submit_many(first->model->sched, requests, k);
  }
  if (k < n) {
    http__job *refused = first;
    for (int i = 0; i < k; i++) refused = refused->next_row;
    job_refused(refused, st);
  }
  return k;
}

int http__send_job_error(h2o_req_t *req, const http__model *m, inferd_code code, const inferd_status *why) {
  if (code == INFERD_TIMEOUT) {
    http__send_error(req, HTTP__E_TIMEOUT, "Model \"%s\" did not answer within its response timeout (%d s)", m->name,
                     m->response_timeout_s);
    return 504;
  }
  if (code == INFERD_UNAVAILABLE) {
    http__send_error(req, HTTP__E_UNAVAILABLE, "Model \"%s\" has no worker left to serve the request: %s", m->name,
                     why->message);
    return 503;
  }
  http__send_error(req, HTTP__E_INTERNAL, "Model \"%s\" failed on this request: %s", m->name, why->message);
  return 500;
}

void http__ts_answered(const http__model *m, const http__job *first) {
  double taken = first->received; /* when the last of its rows went into a batch */
  for (const http__job *row = first; row; row = row->next_row)
    if (row->request.start_time > taken) taken = row->request.start_time;
  double now = core_now_seconds();
  metrics_model_ts_answered(m->metrics, (uint64_t)((now - first->received) * 1e6),
                            (uint64_t)((taken - first->received) * 1e6));
}

bool http__response_fits(h2o_req_t *req, const http__model *m, size_t len) {
  int64_t limit = http__loop_of(req)->server->config->max_response_size;
  if ((uint64_t)len <= (uint64_t)limit) return true;
  http__send_error(req, HTTP__E_INTERNAL,
                   "Model \"%s\": the response is %zu bytes, more than max_response_size (%lld bytes)", m->name, len,
                   (long long)limit);
  return false;
}

/* ---- answering ---------------------------------------------------------------------------------- */

static void answer(http__job *job) {
  h2o_req_t *req = job->req;
  http__model *m = job->model;
  job->hook->job = NULL; /* the dispose hook must not touch a recycled job */
  int status;
  if (job->prep_failed && job->code != INFERD_TIMEOUT) { /* the image, a refusal (http_prep.c) */
    http__send_status(req, &job->request.status);
    status = http__error_status(http__error_from_code(job->code));
  } else if (job->code == INFERD_OK) {
    char *body = h2o_mem_alloc_pool(&req->pool, m->answer_bytes);
    size_t len = 0;
    inferd_status st;
    if (handler_classify_json(job->output, (int)m->classes, HANDLER_TOPK, m->labels, body, m->answer_bytes, &len,
                              &st) == INFERD_OK) {
      if (http__response_fits(req, m, len)) {
        status = 200; /* TorchServe's bytes: json.dumps(indent=2), no newline */
        http__send_json(req, status, body, len);
        http__ts_answered(m, job);
      } else {
        status = 500;
      }
    } else {
      status = 500;
      http__send_error(req, HTTP__E_INTERNAL, "model %s: %s", m->name, st.message);
    }
  } else {
    status = http__send_job_error(req, m, job->code, &job->request.status);
  }
  metrics_model_response(m->metrics, status);
}

/* The prediction's job is back from the scheduler (loop thread). */
static void finish_prediction(http__job *job) {
  http__loop *loop = job->loop;
  http__job_unwait(job);
  if (job->req) answer(job);
  http__model_release(job->model);
  atomic_fetch_sub(&loop->server->in_flight, 1);
  http__job_put(loop, job);
}

static void on_jobs_done(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages) {
  (void)receiver;
  while (!h2o_linklist_is_empty(messages)) {
    h2o_multithread_message_t *message = H2O_STRUCT_FROM_MEMBER(h2o_multithread_message_t, link, messages->next);
    h2o_linklist_unlink(&message->link);
    http__job *job = H2O_STRUCT_FROM_MEMBER(http__job, message, message);
    job->finish(job);
  }
}

void http__predict_loop_init(http__loop *loop) {
  h2o_linklist_init_anchor(&loop->waiting);
  loop->deadline_tick = (h2o_timeout_entry_t){.cb = on_deadline_tick};
  handler_image_params params = {.scaled_jpeg = loop->server->config->jpeg_dct_scaling};
  loop->prep = http__prep_start(loop, &params);
  if (!loop->prep)
    core_log(CORE_LOG_ERROR, "http thread %d: cannot start its image preprocessing thread: its predictions get 503",
             loop->index);
  loop->base64 = EVP_ENCODE_CTX_new();
  h2o_multithread_register_receiver(loop->queue, &loop->done_receiver, on_jobs_done);
}

void http__predict_loop_stop(http__loop *loop) {
  http__job *left = http__prep_stop(loop->prep); /* joined: it sends nothing more */
  loop->prep = NULL;
  h2o_evloop_run(loop->evloop, 0); /* what it sent back: answered, recycled */
  for (http__job *job = left, *next; job; job = next) { /* never decoded: let go */
    next = job->next_prep;
    http__job_unwait(job);
    if (job->req) job->hook->job = NULL; /* its request lives on (to the process exit) */
    atomic_fetch_sub(&job->model->decoding, 1);
    http__model_release(job->model);
    atomic_fetch_sub(&loop->server->in_flight, 1);
    http__job_put(loop, job);
  }
}

void http__predict_loop_free(http__loop *loop) {
  /* before h2o_context_dispose, which wants its timeouts empty */
  if (h2o_timeout_is_linked(&loop->deadline_tick)) h2o_timeout_unlink(&loop->deadline_tick);
  h2o_multithread_unregister_receiver(loop->queue, &loop->done_receiver);
  while (loop->free_jobs) {
    http__job *job = loop->free_jobs;
    loop->free_jobs = job->next_free;
    job_free(job);
  }
  loop->free_job_count = 0;
  while (loop->free_blocks) {
    http__block *b = loop->free_blocks;
    loop->free_blocks = b->next_free;
    free(b);
  }
  loop->free_block_count = 0;
  http__hooks_free(loop);
  EVP_ENCODE_CTX_free(loop->base64);
  loop->base64 = NULL;
  free(loop->scratch);
  loop->scratch = NULL;
  loop->scratch_cap = 0;
}

/* ---- the request ---------------------------------------------------------------------------------- */

/* The image bytes: the raw body, or a form field of a multipart body. */
static bool find_image(h2o_req_t *req, h2o_iovec_t *image, inferd_status *st) {
  *image = req->entity;
  ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
  if (i < 0) return true;
  h2o_iovec_t type = req->headers.entries[i].value;
  const char *boundary;
  size_t boundary_len = http_multipart_boundary(type.base, type.len, &boundary);
  if (boundary_len == 0) {
    if (type.len >= 10 && h2o_lcstris(type.base, 10, H2O_STRLIT("multipart/"))) {
      core_fail(st, INFERD_INVALID_ARG, "multipart body without a valid boundary in its Content-Type");
      return false;
    }
    return true; /* any other type: the body is the image */
  }
  http_multipart_part part;
  if (http_multipart_find(req->entity.base, req->entity.len, boundary, boundary_len, FORM_FIELDS,
                          (int)CORE_ARRAY_LEN(FORM_FIELDS), &part, st) != INFERD_OK) {
    st->code = INFERD_INVALID_ARG;
    return false;
  }
  *image = h2o_iovec_init(part.data, part.size);
  return true;
}

void *http__loop_scratch(http__loop *loop, size_t bytes) {
  if (bytes > loop->scratch_cap) {
    uint8_t *bigger = realloc(loop->scratch, bytes);
    if (!bigger) return NULL;
    loop->scratch = bigger;
    loop->scratch_cap = bytes;
  }
  return loop->scratch;
}

/* TorchServe's image_classifier takes an image sent as text (a text/plain body, a
 * form field that is not a file) as base64 and decodes it. Bytes that are not a JPEG
 * or PNG are decoded here as base64 (OpenSSL's decoder, which skips line breaks) into
 * the loop's scratch buffer, and used when they decode to a JPEG or PNG; anything else
 * stays as it came, for the image decoder's "not a JPEG or PNG". */
static void from_base64(http__loop *loop, h2o_iovec_t *image) {
  if (handler_image_detect(image->base, image->len) != HANDLER_IMAGE_UNKNOWN || !loop->base64 || image->len > INT_MAX)
    return;
  uint8_t *decoded = http__loop_scratch(loop, image->len + 4); /* base64 decodes to 3 bytes per 4 */
  int n = 0, tail = 0;
  if (!decoded) return;
  EVP_DecodeInit(loop->base64);
  if (EVP_DecodeUpdate(loop->base64, decoded, &n, (const unsigned char *)image->base, (int)image->len) < 0 ||
      EVP_DecodeFinal(loop->base64, decoded + n, &tail) < 0)
    return;
  if (handler_image_detect(decoded, (size_t)(n + tail)) != HANDLER_IMAGE_UNKNOWN)
    *image = h2o_iovec_init(decoded, (size_t)(n + tail));
}

void http__predict(http_server *s, h2o_req_t *req, const http__path *path) {
  http__loop *loop = http__loop_of(req);
  if (atomic_load(&s->draining)) {
    http__send_canned(req, HTTP__CANNED_SHUTTING_DOWN);
    return;
  }
  h2o_iovec_t name = path->segments[1];
  h2o_iovec_t version = path->count == 3 ? path->segments[2] : h2o_iovec_init("", 0);
  inferd_status st;
  http__model *m = http__model_acquire_or_reply(s, req, name.base, name.len, version.base, version.len);
  if (!m) return;
  h2o_iovec_t image;
  int status = 0;
  if (!m->image_classifier) {
    http__send_error(req, HTTP__E_BAD_REQUEST, "model %s takes tensors (handler '%s'): POST them to /v2/models/%s/infer",
                     m->name, m->handler, m->name);
    status = 400;
  } else if (req->entity.base == NULL || req->entity.len == 0) {
    http__send_canned(req, HTTP__CANNED_EMPTY_BODY);
    status = 400;
  } else if (!find_image(req, &image, &st)) {
    http__send_status(req, &st);
    status = http__error_status(http__error_from_code(st.code));
  } else if (image.len == 0) {
    http__send_canned(req, HTTP__CANNED_EMPTY_BODY);
    status = 400;
  } else if (loop->prep && atomic_fetch_add(&m->decoding, 1) >= m->job_queue_size) { /* as a full scheduler queue */
    atomic_fetch_sub(&m->decoding, 1);
    http__send_error(req, HTTP__E_UNAVAILABLE, "Model \"%s\" has %d requests waiting for their images to be decoded",
                     m->name, m->job_queue_size);
    status = 503;
  }
  if (status) {
    metrics_model_response(m->metrics, status);
    http__model_release(m);
    return;
  }
  from_base64(loop, &image);
  http__job *job = loop->prep ? http__job_get(loop, m) : NULL;
  if (job && image.len > job->image_cap) {
    uint8_t *bigger = malloc(image.len);
    if (bigger) {
      free(job->image);
      job->image = bigger;
      job->image_cap = image.len;
    } else {
      http__job_put(loop, job);
      job = NULL;
    }
  }
  if (!job) {
    if (loop->prep) atomic_fetch_sub(&m->decoding, 1);
    http__send_error(req, HTTP__E_UNAVAILABLE, "out of memory for a request of model %s", m->name);
    metrics_model_response(m->metrics, 503);
    http__model_release(m);
    return;
  }
  job->received = core_now_seconds();
  job->model = m;
  job->finish = finish_prediction;
  memcpy(job->image, image.base, image.len);
  job->image_len = image.len;
  /* Queued for decoding (http_prep.c), then the scheduler's until on_done; the model
   * reference goes with the job. */
  if (!http__job_wait(job, req)) {
    atomic_fetch_sub(&m->decoding, 1);
    http__send_error(req, HTTP__E_UNAVAILABLE, "out of memory for a request of model %s", m->name);
    metrics_model_response(m->metrics, 503);
    http__job_put(loop, job);
    http__model_release(m);
    return;
  }
  atomic_fetch_add(&s->in_flight, 1);
  http__prep_push(loop->prep, job);
}
