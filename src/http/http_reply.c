/*
 * http_reply.c - every response inferd's HTTP layer sends goes out through here.
 *
 * Design (Redis's single error emitter):
 *   - http__error_from_code is the only place where an inferd_code becomes an HTTP
 *     status; HTTP__ERROR_MAP (http_internal.h) is the only table of statuses,
 *     reason phrases and TorchServe error types.
 *   - http__render_error is the only code that writes an error body:
 *       {"code": 404, "type": "ModelNotFoundException", "message": "Model not found: x"}
 *     pretty-printed as TorchServe does. User text in messages is JSON-escaped and
 *     CR/LF become spaces, so a message is always one line of valid JSON.
 *   - A request under /v2 (KServe v2, the Open Inference Protocol) gets that protocol's
 *     error body instead, {"error": "Model not found: x"}, with the same status: its
 *     clients (Triton's among them) read the message from "error" (http__reply_error
 *     picks the shape by the request's path; canned replies are rendered per request
 *     there).
 *   - JSON text must be UTF-8, and user text need not be (a percent-decoded query, a
 *     path): both escapers keep every well-formed UTF-8 sequence and replace each
 *     ill-formed one (overlong forms, surrogates, code points above U+10FFFF, stray
 *     continuation bytes, sequences cut short) with \ufffd, one per maximal subpart as
 *     Unicode recommends (utf8_next).
 *   - Common errors with fixed text are rendered once at start into static buffers and
 *     sent without copying (canned replies).
 *   - h2o answers some malformed requests itself (413 when Content-Length or a chunked
 *     body exceeds max_request_size, 400 for a broken Content-Length, 417 for an Expect
 *     it does not know) with plain text;
 *     an output filter on every path rewrites those bodies through the same renderer.
 *
 * Memory: bodies are built in the request's h2o pool (http__buf) or are static; no
 * malloc per request. 503 replies carry Retry-After: 1 (TorchServe clients retry).
 *
 * Threading: http__reply_init renders the canned bodies once per process, before the
 * first server's HTTP threads start (pthread_once: a later server, made while another
 * serves, must not rewrite what that one's threads send); everything else runs on the
 * HTTP thread that owns the request.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "http/http_internal.h"

static const struct {
  int status;
  const char *reason, *type;
} errors[HTTP__ERROR_COUNT] = {
#define HTTP__ERROR_ROW(name, status, reason, type) {status, reason, type},
    HTTP__ERROR_MAP(HTTP__ERROR_ROW)
#undef HTTP__ERROR_ROW
};

http__error http__error_from_code(inferd_code code) {
  switch (code) {
  case INFERD_INVALID_ARG: return HTTP__E_BAD_REQUEST;
  case INFERD_NOT_FOUND: return HTTP__E_MODEL_NOT_FOUND;
  case INFERD_UNAVAILABLE: return HTTP__E_UNAVAILABLE;
  case INFERD_UNSUPPORTED: return HTTP__E_BAD_REQUEST; /* e.g. an image format we do not decode */
  case INFERD_ALREADY_EXISTS: return HTTP__E_CONFLICT;
  case INFERD_TIMEOUT: return HTTP__E_TIMEOUT;
  case INFERD_TOO_LARGE: return HTTP__E_TOO_LARGE;
  case INFERD_NO_MEMORY: return HTTP__E_UNAVAILABLE; /* transient: try again */
  case INFERD_OK:
  case INFERD_INTERNAL:
  default: return HTTP__E_INTERNAL;
  }
}

int http__error_status(http__error e) { return errors[e].status; }

/* ---- UTF-8 ---------------------------------------------------------------------------- */

/* The sequence that starts at s[0] (n >= 1 bytes left): returns how many bytes it takes
 * and sets *valid when they are one well-formed UTF-8 character (Unicode's Table 3-7:
 * no overlong form, no surrogate, nothing above U+10FFFF). An ill-formed sequence takes
 * its maximal subpart: the lead byte and the continuation bytes that could still have
 * completed it (at least 1 byte), which the escapers replace with one U+FFFD. */
static size_t utf8_next(const unsigned char *s, size_t n, bool *valid) {
  unsigned char c = s[0], second_lo = 0x80, second_hi = 0xBF;
  size_t need;
  *valid = false;
  if (c < 0x80) {
    *valid = true;
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF) need = 2;
  else if (c == 0xE0) need = 3, second_lo = 0xA0;     /* below: overlong */
  else if (c == 0xED) need = 3, second_hi = 0x9F;     /* above: surrogates */
  else if (c >= 0xE1 && c <= 0xEF) need = 3;
  else if (c == 0xF0) need = 4, second_lo = 0x90;     /* below: overlong */
  else if (c == 0xF4) need = 4, second_hi = 0x8F;     /* above: past U+10FFFF */
  else if (c >= 0xF1 && c <= 0xF3) need = 4;
  else return 1; /* 0x80-0xC1 (a continuation byte, an overlong lead), 0xF5-0xFF */
  size_t i = 1;
  for (; i < need && i < n; i++) {
    unsigned char lo = i == 1 ? second_lo : 0x80, hi = i == 1 ? second_hi : 0xBF;
    if (s[i] < lo || s[i] > hi) break;
  }
  *valid = i == need;
  return i;
}

bool http__utf8_valid(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    bool valid;
    i += utf8_next((const unsigned char *)s + i, n - i, &valid);
    if (!valid) return false;
  }
  return true;
}

/* ---- the renderer ------------------------------------------------------------------- */

/* Appends s as JSON string content (no quotes) into buf[*len..limit); a character that
 * does not fit whole is left out with all after it. */
static void escape_into(char *buf, size_t *len, size_t limit, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0, used; i < n; i += used) {
    unsigned char c = (unsigned char)s[i];
    char tmp[6];
    size_t k;
    used = 1;
    if (c >= 0x80) {
      bool valid;
      used = utf8_next((const unsigned char *)s + i, n - i, &valid);
      if (valid)
        memcpy(tmp, s + i, used), k = used;
      else
        memcpy(tmp, "\\ufffd", 6), k = 6;
    } else if (c == '"' || c == '\\') {
      tmp[0] = '\\', tmp[1] = (char)c, k = 2;
    } else if (c == '\r' || c == '\n' || c == '\t') {
      tmp[0] = ' ', k = 1;
    } else if (c < 0x20 || c == 0x7f) {
      memcpy(tmp, "\\u00", 4), tmp[4] = hex[c >> 4], tmp[5] = hex[c & 15], k = 6;
    } else {
      tmp[0] = (char)c, k = 1;
    }
    if (*len + k > limit) return;
    memcpy(buf + *len, tmp, k);
    *len += k;
  }
}

size_t http__render_error(char *buf, size_t cap, http__error e, const char *message) {
  static const char tail[] = "\"\n}\n";
  int n = snprintf(buf, cap, "{\n  \"code\": %d,\n  \"type\": \"%s\",\n  \"message\": \"", errors[e].status,
                   errors[e].type);
  if (n < 0 || (size_t)n + sizeof tail > cap) return 0;
  size_t len = (size_t)n;
  escape_into(buf, &len, cap - sizeof tail, message, strlen(message));
  memcpy(buf + len, tail, sizeof tail); /* with its NUL */
  return len + sizeof tail - 1;
}

/* The Open Inference Protocol's error body: {"error": "..."}. */
static size_t render_v2_error(char *buf, size_t cap, const char *message) {
  static const char head[] = "{\"error\": \"", tail[] = "\"}\n";
  if (sizeof head + sizeof tail > cap) return 0;
  size_t len = sizeof head - 1;
  memcpy(buf, head, len);
  escape_into(buf, &len, cap - sizeof tail, message, strlen(message));
  memcpy(buf + len, tail, sizeof tail); /* with its NUL */
  return len + sizeof tail - 1;
}

static bool is_v2(const h2o_req_t *req) {
  h2o_iovec_t p = req->path_normalized;
  return p.len >= 3 && memcmp(p.base, "/v2", 3) == 0 && (p.len == 3 || p.base[3] == '/');
}

size_t http__reply_error(const h2o_req_t *req, char *buf, size_t cap, http__error e, const char *message) {
  return is_v2(req) ? render_v2_error(buf, cap, message) : http__render_error(buf, cap, e, message);
}

/* ---- canned replies ------------------------------------------------------------------ */

enum { CANNED_MAX = 256 };
static struct {
  http__error error;
  const char *message;
  char body[CANNED_MAX];
  size_t len;
} canned[HTTP__CANNED_COUNT] = {
    [HTTP__CANNED_NO_ROUTE] = {.error = HTTP__E_NO_ROUTE,
                               .message = "Requested resource is not found, please refer to API document."},
    [HTTP__CANNED_METHOD] = {.error = HTTP__E_METHOD,
                             .message = "Requested method is not allowed, please refer to API document."},
    [HTTP__CANNED_UNAUTHORIZED] = {.error = HTTP__E_UNAUTHORIZED,
                                   .message = "Token Authorization failed. Token either incorrect, expired, or not "
                                              "provided correctly: send 'Authorization: Bearer <key>' with the key "
                                              "from key_file.json"},
    [HTTP__CANNED_SHUTTING_DOWN] = {.error = HTTP__E_UNAVAILABLE,
                                    .message = "The server is shutting down and accepts no new requests."},
    [HTTP__CANNED_EMPTY_BODY] = {.error = HTTP__E_BAD_REQUEST,
                                 .message = "Request body is empty: send the image as the body or as form field "
                                            "'data'"},
};

static void render_canned(void) {
  for (int i = 0; i < HTTP__CANNED_COUNT; i++)
    canned[i].len = http__render_error(canned[i].body, sizeof canned[i].body, canned[i].error, canned[i].message);
}

void http__reply_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, render_canned);
}

/* ---- sending ------------------------------------------------------------------------------ */

static h2o_generator_t static_generator = {NULL, NULL};

static void send_body(h2o_req_t *req, int status, const char *reason, const char *content_type, const char *body,
                      size_t len) {
  metrics_response(http__loop_of(req)->server->metrics, status);
  req->res.status = status;
  req->res.reason = reason;
  req->res.content_length = len;
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, content_type, strlen(content_type));
  if (status == 503) h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, H2O_STRLIT("1"));
  if (status == 401)
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL, H2O_STRLIT("Bearer realm=\"inferd\""));
  h2o_iovec_t chunk = h2o_iovec_init(body, len);
  h2o_start_response(req, &static_generator);
  h2o_send(req, &chunk, 1, H2O_SEND_STATE_FINAL);
}

static const char *reason_of_status(int status) {
  switch (status) {
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  default:
    for (int i = 0; i < HTTP__ERROR_COUNT; i++)
      if (errors[i].status == status) return errors[i].reason;
    return "Error";
  }
}

void http__send_json(h2o_req_t *req, int status, const char *body, size_t len) {
  send_body(req, status, reason_of_status(status), "application/json", body, len);
}

void http__send_text(h2o_req_t *req, int status, const char *content_type, const char *body, size_t len) {
  send_body(req, status, reason_of_status(status), content_type, body, len);
}

static void send_error_message(h2o_req_t *req, http__error e, const char *message) {
  size_t cap = 160 + 6 * strlen(message);
  char *body = h2o_mem_alloc_pool(&req->pool, cap);
  size_t len = http__reply_error(req, body, cap, e, message);
  send_body(req, errors[e].status, errors[e].reason, "application/json", body, len);
}

void http__send_canned(h2o_req_t *req, http__canned which) {
  http__error e = canned[which].error;
  if (is_v2(req)) {
    send_error_message(req, e, canned[which].message);
    return;
  }
  send_body(req, errors[e].status, errors[e].reason, "application/json", canned[which].body, canned[which].len);
}

void http__send_error(h2o_req_t *req, http__error e, const char *fmt, ...) {
  char message[INFERD_STATUS_MESSAGE_MAX + 128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  send_error_message(req, e, message);
}

void http__send_status(h2o_req_t *req, const inferd_status *status) {
  send_error_message(req, http__error_from_code(status->code), status->message);
}

/* ---- JSON bodies in the request pool ---------------------------------------------------- */

void http__buf_init(http__buf *b, h2o_mem_pool_t *pool, size_t initial) {
  b->pool = pool;
  b->cap = initial < 64 ? 64 : initial;
  b->data = h2o_mem_alloc_pool(pool, b->cap);
  b->len = 0;
}

void http__buf_init_over(http__buf *b, h2o_mem_pool_t *pool, char *data, size_t cap) {
  b->pool = pool;
  b->data = data;
  b->cap = cap;
  b->len = 0;
}

static void buf_reserve(http__buf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap * 2;
  while (cap < b->len + extra + 1) cap *= 2;
  char *data = h2o_mem_alloc_pool(b->pool, cap); /* the old block stays in the pool */
  memcpy(data, b->data, b->len);
  b->data = data;
  b->cap = cap;
}

void http__buf_append(http__buf *b, const char *s, size_t len) {
  buf_reserve(b, len);
  memcpy(b->data + b->len, s, len);
  b->len += len;
  b->data[b->len] = '\0';
}

void http__buf_printf(http__buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= b->cap - b->len) {
    buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
  }
  b->len += (size_t)n;
}

void http__buf_json_string(http__buf *b, const char *s, size_t len) {
  buf_reserve(b, 6 * len + 2); /* \u00XX, or \ufffd for 1 byte or more */
  b->data[b->len++] = '"';
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0, used; i < len; i += used) {
    unsigned char c = (unsigned char)s[i];
    used = 1;
    if (c >= 0x80) {
      bool valid;
      used = utf8_next((const unsigned char *)s + i, len - i, &valid);
      if (valid) {
        memcpy(b->data + b->len, s + i, used);
        b->len += used;
      } else {
        memcpy(b->data + b->len, "\\ufffd", 6);
        b->len += 6;
      }
    } else if (c == '"' || c == '\\') {
      b->data[b->len++] = '\\';
      b->data[b->len++] = (char)c;
    } else if (c < 0x20 || c == 0x7f) {
      memcpy(b->data + b->len, "\\u00", 4);
      b->data[b->len + 4] = hex[c >> 4];
      b->data[b->len + 5] = hex[c & 15];
      b->len += 6;
    } else {
      b->data[b->len++] = (char)c;
    }
  }
  b->data[b->len++] = '"';
  b->data[b->len] = '\0';
}

/* ---- every response: h2o's own error bodies rewritten, CORS headers -------------------------- */

typedef struct error_filter {
  h2o_filter_t super;
  size_t max_request_size; /* bytes, for the 413 message */
  h2o_iovec_t cors[3];     /* Access-Control-Allow-Origin, -Methods, -Headers; base NULL: none */
} error_filter;

/* As TorchServe's NettyUtils.sendHttpResponse: the configured values on every response
 * that does not have the header yet. */
static void add_cors_headers(const error_filter *f, h2o_req_t *req) {
  static const char *const names[3] = {"access-control-allow-origin", "access-control-allow-methods",
                                       "access-control-allow-headers"};
  for (int i = 0; i < 3; i++)
    if (f->cors[i].base && h2o_find_header_by_str(&req->res.headers, names[i], strlen(names[i]), -1) < 0)
      h2o_add_header_by_str(&req->pool, &req->res.headers, names[i], strlen(names[i]), 0, NULL, f->cors[i].base,
                            f->cors[i].len);
}

typedef struct error_ostream {
  h2o_ostream_t super;
  h2o_iovec_t body;
  bool sent;
} error_ostream;

static void error_ostream_send(h2o_ostream_t *self_, h2o_req_t *req, h2o_iovec_t *bufs, size_t bufcnt,
                               h2o_send_state_t state) {
  error_ostream *self = (error_ostream *)self_;
  (void)bufs, (void)bufcnt;
  /* h2o's plain-text body is dropped; ours goes out once, with the first call. */
  if (!self->sent) {
    self->sent = true;
    h2o_ostream_send_next(&self->super, req, &self->body, 1, state);
  } else {
    h2o_ostream_send_next(&self->super, req, NULL, 0, state);
  }
}

static bool response_is_json(h2o_req_t *req) {
  ssize_t i = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
  return i >= 0 && h2o_memis(req->res.headers.entries[i].value.base, req->res.headers.entries[i].value.len,
                             H2O_STRLIT("application/json"));
}

static void error_filter_setup(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot) {
  add_cors_headers((error_filter *)self, req);
  if (req->res.status >= 400 && !response_is_json(req)) {
    http__error e;
    const char *message;
    char too_large[128];
    switch (req->res.status) {
    case 413:
      e = HTTP__E_TOO_LARGE;
      snprintf(too_large, sizeof too_large, "Request body is larger than max_request_size (%zu bytes)",
               ((error_filter *)self)->max_request_size);
      message = too_large;
      break;
    case 417: /* an Expect other than 100-continue; Netty (TorchServe) answers 417 too */
      e = HTTP__E_EXPECTATION, message = "Expectation Failed: only 'Expect: 100-continue' is supported";
      break;
    case 404: e = HTTP__E_NO_ROUTE, message = "Requested resource is not found, please refer to API document."; break;
    case 405: e = HTTP__E_METHOD, message = "Requested method is not allowed, please refer to API document."; break;
    case 503: e = HTTP__E_UNAVAILABLE, message = "Service unavailable"; break;
    case 500: e = HTTP__E_INTERNAL, message = "Internal server error"; break;
    default: e = HTTP__E_BAD_REQUEST, message = "Malformed HTTP request (bad Content-Length or Transfer-Encoding)"; break;
    }
    char *body = h2o_mem_alloc_pool(&req->pool, 256);
    size_t len = http__reply_error(req, body, 256, e, message);
    metrics_response(http__loop_of(req)->server->metrics, errors[e].status);
    req->res.status = errors[e].status;
    req->res.reason = errors[e].reason;
    req->res.content_length = len;
    ssize_t i = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (i >= 0)
      req->res.headers.entries[i].value = h2o_iovec_init(H2O_STRLIT("application/json"));
    else
      h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/json"));
    error_ostream *os = (error_ostream *)h2o_add_ostream(req, sizeof(*os), slot);
    os->super.do_send = error_ostream_send;
    os->body = h2o_iovec_init(body, len);
    os->sent = false;
    slot = &os->super.next;
  }
  h2o_setup_next_ostream(req, slot);
}

void http__register_error_filter(h2o_pathconf_t *pathconf, size_t max_request_size, const char *const cors[3]) {
  error_filter *f = (error_filter *)h2o_create_filter(pathconf, sizeof(*f));
  f->super.on_setup_ostream = error_filter_setup;
  f->max_request_size = max_request_size;
  for (int i = 0; i < 3; i++) f->cors[i] = cors[i] ? h2o_iovec_init(cors[i], strlen(cors[i])) : h2o_iovec_init(NULL, 0);
}
