/*
 * fuzz_v2.c - libFuzzer target for the KServe v2 infer request parser
 * (http_v2_parse in src/http/http_v2.c), as POST /v2/models/{m}/infer runs it on
 * bytes from a socket: the JSON (with jansson), the binary tensor data after it, and
 * the validation against the model.
 *
 * Input layout: byte 0 picks the model and whether the request has an
 * Inference-Header-Content-Length header: bit 0 set: the header's value is the text up
 * to the first '\n' (at most 32 bytes), the body follows the '\n'; bit 1 picks the
 * model: input "input" [n,2,3] (max 4 rows) or a scalar item "x" [n] (max 3 rows);
 * both have outputs "out", "aux". Then the body. The header and body are copied into
 * heap blocks of exactly their size so that ASan reports any read past them.
 *
 * On success the request must be self-consistent: 1 <= rows <= max_rows, row_elems
 * the model's, exactly one of data / binary, binary inside the body, the id inside
 * memory the parser allocated, the outputs to answer distinct indexes of the model's
 * outputs (in that memory too), and every row copyable into a buffer of exactly
 * row_elems floats. On failure the status must carry INVALID_ARG and a message.
 * Anything else, or any sanitizer report, aborts. jansson allocates from the per-thread
 * arena the server installs (http_json_arena.c), as in the server.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http.h"
#include "http/http_internal.h"

static void fail(const char *what) {
  fprintf(stderr, "fuzz_v2: %s\n", what);
  abort();
}

/* Every block the parser asks for, freed after each input. */
typedef struct allocations {
  void *blocks[8];
  size_t sizes[8];
  int count;
} allocations;

static void *fuzz_alloc(void *ctx, size_t bytes) {
  allocations *a = ctx;
  if (a->count == 8) fail("more than 8 allocations for one request");
  if (bytes > ((size_t)1 << 26)) fail("an allocation larger than any valid request");
  void *p = malloc(bytes ? bytes : 1);
  if (!p) fail("malloc");
  a->blocks[a->count] = p;
  a->sizes[a->count++] = bytes;
  return p;
}

static bool inside(const allocations *a, const void *p, size_t bytes) {
  for (int i = 0; i < a->count; i++) {
    const char *b = a->blocks[i];
    if ((const char *)p >= b && (const char *)p + bytes <= b + a->sizes[i]) return true;
  }
  return false;
}

static const int64_t image_dims[] = {2, 3};
static const char *const outputs[] = {"out", "aux"};
static const http_v2_spec specs[2] = {
    {.model_name = "m", .input_name = "input", .item_rank = 2, .item_dims = image_dims, .output_names = outputs,
     .output_count = 2, .max_rows = 4},
    {.model_name = "s", .input_name = "x", .item_rank = 0, .item_dims = NULL, .output_names = outputs,
     .output_count = 2, .max_rows = 3},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  http__json_arena_install(); /* once; later calls do nothing */
  if (size == 0) return 0;
  const char *in = (const char *)data + 1;
  size_t rest = size - 1;
  const http_v2_spec *spec = &specs[(data[0] >> 1) & 1];
  char *header = NULL;
  size_t header_len = 0;
  if (data[0] & 1) {
    const char *nl = memchr(in, '\n', rest < 33 ? rest : 33);
    if (!nl) return 0;
    header_len = (size_t)(nl - in);
    header = malloc(header_len ? header_len : 1);
    if (!header) fail("malloc");
    memcpy(header, in, header_len);
    rest -= header_len + 1;
    in = nl + 1;
  }
  char *body = malloc(rest ? rest : 1);
  if (!body) fail("malloc");
  memcpy(body, in, rest);

  allocations a = {0};
  http_v2_request r;
  inferd_status st = {0};
  inferd_code code = http_v2_parse(body, rest, header, header_len, spec, fuzz_alloc, &a, &r, &st);
  if (code == INFERD_OK) {
    size_t row_elems = 1;
    for (int d = 0; d < spec->item_rank; d++) row_elems *= (size_t)spec->item_dims[d];
    if (r.rows < 1 || r.rows > spec->max_rows) fail("rows out of range");
    if (r.row_elems != row_elems) fail("row_elems is not the model's");
    if (!r.data == !r.binary) fail("not exactly one of data and binary");
    size_t bytes = (size_t)r.rows * row_elems * sizeof(float);
    if (r.binary && ((const char *)r.binary < body || (const char *)r.binary + bytes > body + rest))
      fail("binary data outside the body");
    if (r.data && !inside(&a, r.data, bytes)) fail("data outside the parser's memory");
    if (r.id && !inside(&a, r.id, r.id_len + 1)) fail("id outside the parser's memory");
    if (r.output_count < 1 || r.output_count > spec->output_count) fail("output count out of range");
    if (!inside(&a, r.outputs, (size_t)r.output_count * sizeof *r.outputs) ||
        !inside(&a, r.output_binary, (size_t)r.output_count * sizeof *r.output_binary))
      fail("outputs outside the parser's memory");
    for (int i = 0; i < r.output_count; i++) {
      if (r.outputs[i] < 0 || r.outputs[i] >= spec->output_count) fail("an output index out of range");
      for (int j = 0; j < i; j++)
        if (r.outputs[j] == r.outputs[i]) fail("an output answered twice");
    }
    float *row = malloc(row_elems * sizeof(float));
    if (!row) fail("malloc");
    for (int i = 0; i < r.rows; i++) {
      http_v2_copy_row(&r, i, row);
      volatile float sink = row[row_elems - 1];
      (void)sink;
    }
    free(row);
  } else {
    if (code != INFERD_INVALID_ARG || st.code != code) fail("a failure that is not INVALID_ARG");
    if (!st.message[0] || strchr(st.message, '\n')) fail("a failure without a one-line message");
  }
  for (int i = 0; i < a.count; i++) free(a.blocks[i]);
  free(header);
  free(body);
  return 0;
}
