/*
 * http_routes.c - which code answers which request, for the three APIs.
 *
 *   every port
 *     OPTIONS / or /api-description            none   OpenAPI 3.0.1 of the port's APIs (http_describe.c)
 *   inference port (8080)                      key
 *     GET|POST|HEAD /ping                      none   200 {"status": "Healthy"} / 503
 *     POST|PUT /predictions/{m}[/{v}]          inference   http_predict.c
 *     /v2/...                                  inference (health: none)   http_v2.c:
 *                                              KServe v2 health, metadata, readiness, infer
 *   management port (8081)
 *     /models..., GET /token                   management / API   http_management.c
 *   metrics port (8082)
 *     GET /metrics[?name[]=...]                none   Prometheus text (metrics_render)
 * A listener that serves several APIs (equal addresses) tries them in this order.
 * Anything else is 404 ResourceNotFoundException; a known path with another method is
 * 405. Paths are cut at '/' as TorchServe's String.split("/") cuts them: trailing
 * empty segments go ("/ping/" is "/ping"), inner ones stay ("/models//1.0" names the
 * model "" and version "1.0", not the model "1.0"); model names need no decoding
 * (config_valid_model_name allows no escapes).
 *
 * /ping is "Healthy" only when every model of load_models is loaded and has its
 * workers running, unless it was scaled to 0 (http__registry_ready), and the server is
 * not draining.
 *
 * Threading: everything here runs on the HTTP thread that owns the request.
 */
#include <string.h>

#include "http/http_internal.h"

bool http__segment_is(h2o_iovec_t segment, const char *text) {
  return h2o_memis(segment.base, segment.len, text, strlen(text));
}

bool http__method_is(h2o_req_t *req, const char *method) {
  return h2o_memis(req->method.base, req->method.len, method, strlen(method));
}

bool http__parse_path(h2o_req_t *req, http__path *path) {
  size_t end = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
  path->count = 0;
  path->query = req->query_at != SIZE_MAX ? h2o_iovec_init(req->path.base + req->query_at + 1,
                                                           req->path.len - req->query_at - 1)
                                          : h2o_iovec_init("", 0);
  const char *p = req->path.base, *stop = req->path.base + end;
  while (stop > p && stop[-1] == '/') stop--; /* trailing empty segments go, as in Java's split */
  if (p < stop && *p == '/') p++;
  while (p < stop) {
    const char *start = p;
    while (p < stop && *p != '/') p++;
    if (path->count == HTTP__MAX_SEGMENTS) return false;
    path->segments[path->count++] = h2o_iovec_init(start, (size_t)(p - start));
    if (p < stop) p++; /* the '/'; what follows it is a segment, empty or not */
  }
  return true;
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The byte that s[*i..n) starts with once decoded ('+' is a space, %XX its byte, a '%'
 * not followed by two hex digits itself); moves *i past it. */
static char decode_at(const char *s, size_t n, size_t *i) {
  char c = s[*i];
  if (c == '+') {
    c = ' ';
  } else if (c == '%' && *i + 2 < n && hex_value(s[*i + 1]) >= 0 && hex_value(s[*i + 2]) >= 0) {
    c = (char)(hex_value(s[*i + 1]) * 16 + hex_value(s[*i + 2]));
    *i += 2;
  }
  (*i)++;
  return c;
}

static bool key_is(const char *key, size_t len, const char *name) {
  size_t i = 0;
  while (i < len && *name)
    if (decode_at(key, len, &i) != *name++) return false;
  return i == len && !*name;
}

/* Items of the query are separated by '&' or ';' and decoded as Netty's
 * QueryStringDecoder does (TorchServe's reader): keys too, so name%5B%5D is name[].
 * Each value of `name` is decoded into req->pool, NUL-terminated; counting stops at
 * max + 1, so that the caller can tell "more than max". */
size_t http__query_values(h2o_req_t *req, const http__path *path, const char *name, h2o_iovec_t *values,
                          size_t max) {
  size_t count = 0;
  const char *p = path->query.base, *end = path->query.base + path->query.len;
  while (p < end && count <= max) {
    const char *item_end = p;
    while (item_end < end && *item_end != '&' && *item_end != ';') item_end++;
    const char *eq = memchr(p, '=', (size_t)(item_end - p));
    const char *key_end = eq ? eq : item_end;
    if (key_is(p, (size_t)(key_end - p), name)) {
      if (count < max) {
        const char *v = eq ? eq + 1 : item_end;
        size_t n = (size_t)(item_end - v), o = 0;
        char *out = h2o_mem_alloc_pool(&req->pool, n + 1);
        for (size_t i = 0; i < n;) out[o++] = decode_at(v, n, &i);
        out[o] = '\0';
        values[count] = h2o_iovec_init(out, o);
      }
      count++;
    }
    p = item_end < end ? item_end + 1 : end;
  }
  return count;
}

bool http__query_param(h2o_req_t *req, const http__path *path, const char *name, h2o_iovec_t *value) {
  return http__query_values(req, path, name, value, 1) > 0;
}

bool http__parse_int(h2o_iovec_t v, int lo, int hi, int *out) {
  size_t first = v.len > 0 && v.base[0] == '-' ? 1 : 0;
  if (v.len - first == 0 || v.len - first > 10) return false;
  long long x = 0;
  for (size_t i = first; i < v.len; i++) {
    if (v.base[i] < '0' || v.base[i] > '9') return false;
    x = x * 10 + (v.base[i] - '0');
  }
  if (first) x = -x;
  if (x < lo || x > hi) return false;
  *out = (int)x;
  return true;
}

bool http__query_int(h2o_req_t *req, const http__path *path, const char *name, int lo, int hi, int *out) {
  h2o_iovec_t v;
  return !http__query_param(req, path, name, &v) || v.len == 0 || http__parse_int(v, lo, hi, out);
}

/* ---- inference API: health -------------------------------------------------------------- */

bool http__server_ready(http_server *s) {
  return !atomic_load(&s->draining) && http__registry_ready(s->registry);
}

static void ping(http_server *s, h2o_req_t *req) {
  static const char healthy[] = "{\n  \"status\": \"Healthy\"\n}\n";
  static const char unhealthy[] = "{\n  \"status\": \"Unhealthy\"\n}\n";
  if (http__server_ready(s))
    http__send_json(req, 200, healthy, sizeof healthy - 1);
  else
    http__send_json(req, 503, unhealthy, sizeof unhealthy - 1);
}

/* ---- metrics API ----------------------------------------------------------------------- */

/* GET /metrics[?name[]=family&name[]=...]: the families named, or all (TorchServe's
 * filter). */
static void metrics(http_server *s, h2o_req_t *req, const http__path *path) {
  enum { NAMES_MAX = 64 };
  if (!http__method_is(req, "GET")) {
    http__send_canned(req, HTTP__CANNED_METHOD);
    return;
  }
  h2o_iovec_t values[NAMES_MAX];
  const char *names[NAMES_MAX];
  size_t count = http__query_values(req, path, "name[]", values, NAMES_MAX);
  if (count > NAMES_MAX) {
    http__send_error(req, HTTP__E_BAD_REQUEST, "at most %d name[] parameters", NAMES_MAX);
    return;
  }
  for (size_t i = 0; i < count; i++) names[i] = values[i].base;
  metrics_buffer out = {0};
  inferd_status st;
  if (metrics_render(s->metrics, names, count, &out, &st) != INFERD_OK) {
    metrics_buffer_free(&out);
    http__send_status(req, &st);
    return;
  }
  char *body = h2o_mem_alloc_pool(&req->pool, out.length + 1);
  memcpy(body, out.data ? out.data : "", out.length);
  size_t len = out.length;
  metrics_buffer_free(&out);
  http__send_text(req, 200, METRICS_CONTENT_TYPE, body, len);
}

/* ---- dispatch -------------------------------------------------------------------------- */

void http__route(http_server *s, h2o_req_t *req, unsigned apis) {
  /* A CORS preflight (a browser asks before a request with, say, an Authorization
   * header) gets 200 and, through the response filter, the configured CORS headers.
   * TorchServe routes it as any other request (405 for an OPTIONS it does not serve),
   * which browsers take as a refusal. */
  if (s->config->cors_allowed_origin && http__method_is(req, "OPTIONS") &&
      h2o_find_header_by_str(&req->headers, H2O_STRLIT("origin"), -1) >= 0 &&
      h2o_find_header_by_str(&req->headers, H2O_STRLIT("access-control-request-method"), -1) >= 0) {
    http__send_text(req, 200, "text/plain", "", 0);
    return;
  }
  http__path path;
  if (!http__parse_path(req, &path)) {
    http__send_canned(req, HTTP__CANNED_NO_ROUTE);
    return;
  }
  /* TorchServe's ApiDescriptionRequestHandler: OPTIONS / (another method on / is 405),
   * or /api-description with any method */
  if (path.count == 0) {
    if (http__method_is(req, "OPTIONS")) http__describe(req, apis, s->config->enable_model_api);
    else http__send_canned(req, HTTP__CANNED_METHOD);
    return;
  }
  h2o_iovec_t first = path.segments[0];
  if (path.count == 1 && http__segment_is(first, "api-description")) {
    http__describe(req, apis, s->config->enable_model_api);
    return;
  }
  if (apis & (1u << HTTP_API_INFERENCE)) {
    if (path.count == 1 && http__segment_is(first, "ping")) {
      if (http__method_is(req, "GET") || http__method_is(req, "POST") || http__method_is(req, "HEAD"))
        ping(s, req);
      else
        http__send_canned(req, HTTP__CANNED_METHOD);
      return;
    }
    if (http__segment_is(first, "predictions") && (path.count == 2 || path.count == 3)) {
      if (!http__method_is(req, "POST") && !http__method_is(req, "PUT")) {
        http__send_canned(req, HTTP__CANNED_METHOD);
      } else if (!http__auth_check(s->auth, req, HTTP__KEY_INFERENCE)) {
        http__send_canned(req, HTTP__CANNED_UNAUTHORIZED);
      } else {
        http__predict(s, req, &path);
      }
      return;
    }
    if (http__segment_is(first, "v2")) {
      http__v2(s, req, &path);
      return;
    }
  }
  if (apis & (1u << HTTP_API_MANAGEMENT)) {
    if (http__segment_is(first, "models") || http__segment_is(first, "token")) {
      http__management_route(s, req, &path);
      return;
    }
  }
  if (apis & (1u << HTTP_API_METRICS)) {
    if (path.count == 1 && http__segment_is(first, "metrics")) {
      metrics(s, req, &path);
      return;
    }
  }
  http__send_canned(req, HTTP__CANNED_NO_ROUTE);
}
