/*
 * fuzz_multipart.c - libFuzzer target for the HTTP layer's multipart/form-data reader
 * (src/http/http_multipart.c): http_multipart_boundary on a Content-Type value and
 * http_multipart_find on a body, as POST /predictions runs them on bytes from a socket.
 *
 * Input layout: the Content-Type value up to the first '\n' (at most 256 bytes), then
 * the body. The body is also searched with the fixed boundary "XyZ", so that mutations
 * of the body alone reach the part parser even when the first line is broken. Each
 * body is copied into a heap block of exactly its size, so that ASan reports any read
 * past it. A part found must lie inside the body and carry one of the asked names.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/http.h"

static void check_part(const char *body, size_t size, const http_multipart_part *part) {
  if (part->data < body || part->data + part->size > body + size) abort();
  if (part->name < body || part->name + part->name_len > body + size) abort();
  if (!((part->name_len == 4 && (memcmp(part->name, "data", 4) == 0 || memcmp(part->name, "file", 4) == 0))))
    abort();
}

static void find(const char *body, size_t size, const char *boundary, size_t boundary_len) {
  static const char *const names[] = {"data", "file"};
  http_multipart_part part;
  inferd_status st;
  if (http_multipart_find(body, size, boundary, boundary_len, names, 2, &part, &st) == INFERD_OK)
    check_part(body, size, &part);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *in = (const char *)data;
  const char *nl = memchr(in, '\n', size < 256 ? size : 256);
  size_t type_len = nl ? (size_t)(nl - in) : 0;
  const char *body_in = nl ? nl + 1 : in;
  size_t body_size = size - (size_t)(body_in - in);

  char *type = malloc(type_len ? type_len : 1);
  char *body = malloc(body_size ? body_size : 1);
  if (!type || !body) abort();
  memcpy(type, in, type_len);
  memcpy(body, body_in, body_size);

  const char *boundary = NULL;
  size_t boundary_len = http_multipart_boundary(type, type_len, &boundary);
  if (boundary_len) {
    if (boundary < type || boundary + boundary_len > type + type_len || boundary_len > 70) abort();
    find(body, body_size, boundary, boundary_len);
  }
  find(body, body_size, "XyZ", 3);
  free(type);
  free(body);
  return 0;
}
