/*
 * fuzz_route.c - libFuzzer target for the HTTP layer's request-target parsing
 * (src/http/http_routes.c): http__parse_path, which cuts the path into segments for
 * the router, http__query_param and http__query_values, which find and percent-decode
 * query parameters (keys decoded too, '&' or ';' between items),
 * and http__query_int, which reads the management API's numbers (limit,
 * next_page_token, batch_size, ...), as every request runs them on bytes from a socket.
 *
 * Input: the request target (path and query), as h2o hands it over: req->path, with
 * req->query_at at its first '?' (SIZE_MAX when there is none). It is copied into a
 * heap block of exactly its size, so that ASan reports any read past it.
 *
 * The same bytes are also an Authorization header for http__auth_check (token auth,
 * http_auth.c), against keys made once in a temporary directory, and (up to a NUL) the
 * url of a registration for http__resolve_path (http_models.c).
 *
 * Checks: the segments joined by single '/'s are the path before the query without
 * its leading '/' and trailing '/'s, none holds a '/' and the last is not empty; the query is exactly what follows the '?'; every parameter the
 * management API reads decodes to a NUL-terminated value no longer than the query,
 * equal to the raw text when that has no '%' or '+', and is the first of the values
 * http__query_values finds for its key; a number read lies within its
 * bounds and is what strtol reads from the same digits, an empty one leaves the
 * default; a header is accepted only
 * when it holds the key; a url accepted over the API is model_store + "/" + url, with
 * no "://", not absolute and no ".." segment. Anything else aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "http/http_internal.h"

static void fail(const char *what) {
  fprintf(stderr, "fuzz_route: %s\n", what);
  abort();
}

static void check_segments(const char *target, size_t len, size_t query_at, const http__path *path) {
  size_t end = query_at != SIZE_MAX ? query_at : len;
  /* the segments joined by '/' are the path without its leading '/' and trailing '/'s */
  size_t first = end > 0 && target[0] == '/' ? 1 : 0, last = end;
  while (last > 0 && target[last - 1] == '/') last--;
  const char *at = target + first;
  for (int i = 0; i < path->count; i++) {
    h2o_iovec_t s = path->segments[i];
    if (i > 0 && (at >= target + last || *at++ != '/')) fail("segments not cut at single '/'s");
    if (s.base != at || s.base + s.len > target + last) fail("segment is not the next piece of the path");
    if (memchr(s.base, '/', s.len)) fail("segment holds a '/'");
    at = s.base + s.len;
  }
  if (path->count > 0 && path->segments[path->count - 1].len == 0) fail("trailing empty segment");
  if (at < target + last) fail("segments stop before the path ends");
  if (query_at == SIZE_MAX) {
    if (path->query.len != 0) fail("a query without a '?'");
  } else if (path->query.base != target + query_at + 1 || path->query.len != len - query_at - 1) {
    fail("query is not what follows the '?'");
  }
}

static void check_number(h2o_req_t *req, const http__path *path, const char *name, h2o_iovec_t v, int lo, int hi) {
  int x = 7, y = 8; /* two defaults: a value read overwrites both alike */
  bool ok = http__query_int(req, path, name, lo, hi, &x);
  if (http__query_int(req, path, name, lo, hi, &y) != ok) fail("the same parameter read two ways");
  if (v.len == 0) {
    if (!ok || x != 7 || y != 8) fail("an empty value is not the default");
    return;
  }
  if (!ok) return;
  if (x != y) fail("a number read kept a default");
  if (x < lo || x > hi) fail("number outside its bounds");
  char *end;
  long long want = strtoll(v.base, &end, 10);
  if (end != v.base + v.len || want != x) fail("number differs from strtoll's");
}

static void check_params(h2o_req_t *req, const http__path *path) {
  static const struct {
    const char *name;
    int lo, hi;
  } params[] = {
      {"limit", INT32_MIN, INT32_MAX}, {"next_page_token", INT32_MIN, INT32_MAX - 100},
      {"initial_workers", 0, 64},     {"batch_size", 1, 1024},
      {"max_batch_delay", 0, 600000}, {"response_timeout", 1, 86400},
      {"min_worker", 0, 64},          {"max_worker", 0, 64},
      {"url", 0, -1},                 {"model_name", 0, -1},
      {"synchronous", 0, -1},         {"type", 0, -1},
      {"model_version", 0, -1},
  };
  for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
    h2o_iovec_t v;
    if (!http__query_param(req, path, params[i].name, &v)) continue;
    if (!v.base || v.base[v.len] != '\0') fail("value not NUL-terminated");
    if (v.len > path->query.len) fail("value longer than the query");
    if (params[i].lo <= params[i].hi) check_number(req, path, params[i].name, v, params[i].lo, params[i].hi);
    /* the raw value: after "name=" in the first item of the query (items end at '&'
     * or ';') whose key is the name; unknown once a key before it has escapes, which
     * may decode to the name */
    size_t name_len = strlen(params[i].name);
    const char *p = path->query.base, *end = path->query.base + path->query.len;
    while (p < end) {
      const char *item_end = p;
      while (item_end < end && *item_end != '&' && *item_end != ';') item_end++;
      const char *eq = memchr(p, '=', (size_t)(item_end - p)), *key_end = eq ? eq : item_end;
      if (memchr(p, '%', (size_t)(key_end - p)) || memchr(p, '+', (size_t)(key_end - p))) break;
      if ((size_t)(key_end - p) == name_len && memcmp(p, params[i].name, name_len) == 0) {
        const char *raw = eq ? eq + 1 : item_end;
        size_t raw_len = (size_t)(item_end - raw);
        if (!memchr(raw, '%', raw_len) && !memchr(raw, '+', raw_len) &&
            (v.len != raw_len || memcmp(v.base, raw, raw_len) != 0))
          fail("a value without escapes is not its raw text");
        break;
      }
      p = item_end < end ? item_end + 1 : end;
    }
    /* every value of a repeated key: the first is http__query_param's */
    h2o_iovec_t all[4];
    size_t n = http__query_values(req, path, params[i].name, all, 4);
    if (n == 0 || n > 5) fail("http__query_values counts outside 1..max+1");
    if (all[0].len != v.len || memcmp(all[0].base, v.base, v.len) != 0) fail("the first value differs");
    for (size_t k = 0; k < (n < 4 ? n : 4); k++)
      if (all[k].base[all[k].len] != '\0' || all[k].len > path->query.len) fail("a value is not a decoded item");
  }
}

/* Token auth: keys made once; the key file goes with the directory at exit. */
static http__auth *auth;
static char auth_dir[] = "/tmp/fuzz_route.XXXXXX";
static char key_file[sizeof auth_dir + 16];

static void auth_free(void) {
  http__auth_free(auth); /* removes the key file */
  rmdir(auth_dir);
}

static char keys[HTTP__KEY_COUNT][64]; /* as key_file.json has them */

static void check_auth(h2o_req_t *req, const char *value, size_t len) {
  if (!auth) {
    inferd_status st;
    if (!mkdtemp(auth_dir)) fail("mkdtemp");
    snprintf(key_file, sizeof key_file, "%s/key_file.json", auth_dir);
    if (http__auth_new(true, key_file, NULL, &auth, &st) != INFERD_OK) fail(st.message);
    atexit(auth_free);
    json_t *file = json_load_file(key_file, 0, NULL);
    static const char *const sections[HTTP__KEY_COUNT] = {[HTTP__KEY_INFERENCE] = "inference",
                                                           [HTTP__KEY_MANAGEMENT] = "management",
                                                           [HTTP__KEY_API] = "API"};
    for (int kind = 0; kind < HTTP__KEY_COUNT; kind++) {
      const char *key = json_string_value(json_object_get(json_object_get(file, sections[kind]), "key"));
      if (!key || strlen(key) >= sizeof keys[kind]) fail("key_file.json");
      strcpy(keys[kind], key);
    }
    json_decref(file);
  }
  h2o_add_header(&req->pool, &req->headers, H2O_TOKEN_AUTHORIZATION, NULL, value, len);
  for (int kind = 0; kind < HTTP__KEY_COUNT; kind++)
    if (http__auth_check(auth, req, (http__key_kind)kind) && !memmem(value, len, keys[kind], strlen(keys[kind])))
      fail("a header without the key passed");
}

/* A registration's url over the management API must stay inside model_store. */
static void check_resolve(const char *target, size_t len) {
  char url[512];
  size_t n = strnlen(target, len < sizeof url - 1 ? len : sizeof url - 1);
  memcpy(url, target, n);
  url[n] = '\0';
  static char store[] = "/store";
  config_server cfg = {.model_store = store}; /* all resolve_path reads */
  char out[600];
  inferd_status st;
  if (http__resolve_path(&cfg, url, true, out, sizeof out, &st) != INFERD_OK) return;
  if (strncmp(out, "/store/", 7) != 0 || strcmp(out + 7, url) != 0) fail("resolved to another path than model_store/url");
  if (url[0] == '/' || strstr(url, "://")) fail("an absolute url or a URL was accepted");
  for (const char *seg = url; seg; seg = strchr(seg, '/') ? strchr(seg, '/') + 1 : NULL)
    if (strncmp(seg, "..", 2) == 0 && (seg[2] == '/' || seg[2] == '\0')) fail("a '..' segment was accepted");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *target = malloc(size ? size : 1);
  if (!target) abort();
  memcpy(target, data, size);
  const char *q = memchr(target, '?', size);

  h2o_req_t req;
  memset(&req, 0, sizeof req);
  h2o_mem_init_pool(&req.pool);
  req.path = h2o_iovec_init(target, size);
  req.query_at = q ? (size_t)(q - target) : SIZE_MAX;

  http__path path;
  if (http__parse_path(&req, &path)) {
    check_segments(target, size, req.query_at, &path);
    check_params(&req, &path);
  } else if (path.count != HTTP__MAX_SEGMENTS) {
    fail("refused a path that has room for its segments");
  }
  check_auth(&req, target, size);
  check_resolve(target, size);
  h2o_mem_clear_pool(&req.pool);
  free(target);
  return 0;
}
