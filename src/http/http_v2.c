/*
 * http_v2.c - the KServe v2 / Open Inference Protocol part of the inference API.
 *
 *   GET  /v2/health/live|ready                          no key
 *   GET  /v2                                            server metadata (extensions:
 *                                                       binary_tensor_data)
 *   GET  /v2/models/{m}[/versions/{v}]                  model metadata
 *   GET  /v2/models/{m}[/versions/{v}]/ready            model readiness
 *   POST /v2/models/{m}[/versions/{v}]/infer            inference
 * Everything but health needs the inference key (checked here, as for /predictions).
 * Not ready (health or a model) is 503, as KServe's own model server answers it (the
 * protocol's text says a 4xx and Triton answers 400): balancers and Kubernetes probes
 * read a 503 as "not now, try another", where a 400 reads as a bad request.
 *
 * Infer, as Triton and KServe clients send it:
 *   {"id": "...", "parameters": {"binary_data_output": false},
 *    "inputs": [{"name": "input", "shape": [n, 3, 224, 224], "datatype": "FP32",
 *                "data": [...]  or  "parameters": {"binary_data_size": S}}],
 *    "outputs": [{"name": "output", "parameters": {"binary_data": true}}]}
 * With the binary tensor data extension the header Inference-Header-Content-Length: L
 * says that the body's first L bytes are that JSON and the rest is raw tensor data
 * (little-endian FP32, S bytes for the input that names binary_data_size). As in Triton,
 * L = 0 means the whole body is JSON; the header given twice with different values is a
 * 400. Binary input must be finite, as JSON numbers are: a NaN or an infinity is a 400
 * naming the element (Triton passes them on, but oneDNN's kernels do not carry them
 * through as PyTorch does, and the answer would look valid). The answer
 * is {"model_name", "model_version", "id", "outputs": [{"name", "datatype": "FP32",
 * "shape": [n, ...], "data": [...]}, ...]}: the outputs "outputs" names, in its order,
 * else all of the model's, in the model's order. Each is inline as JSON numbers, or as
 * binary tensor data after the JSON (a named output's own "binary_data"; all outputs,
 * when none is named, with the request's "binary_data_output", as Triton reads them),
 * the binary ones back to back in the order of the JSON; then the
 * answer has Inference-Header-Content-Length and is application/octet-stream. An answer
 * larger than max_response_size is not sent: 500 naming its size and the limit.
 *
 * The parser (http_v2_parse, declared in http.h) is pure: it needs no h2o, so the
 * fuzzer runs it as it is. It validates everything against the model (input name,
 * datatype FP32 only, as Triton refuses any other for an FP32 input, shape [n, item],
 * element count, nested "data" arrays as long as the shape's dimensions, binary sizes,
 * output names, each asked for once); every mismatch is a 400 naming it.
 *
 * Execution: each of the n rows becomes one job of http_predict.c (its own scheduler
 * request, batched with /predictions and other v2 requests), linked in row order from
 * the first, and all are queued in one call (http__rows_submit, sched_submit_many), so
 * that an idle worker takes them as one batch rather than the first alone and the
 * others, found queued, held open for maxBatchDelay as if the model were busy. A row
 * that comes back waits on the loop; when the last one is back the
 * first answers for all (the first failing row's error: 504 TIMEOUT, 503, 500) and all
 * are recycled. n is bounded by the model's job_queue_size (400 beyond it), so a
 * request holds at most that many jobs. Queue full part-way: 503 + Retry-After at once,
 * the rows already queued are cancelled and recycled when they come back.
 * A client that goes away, or whose response_timeout passes: http__job_wait (on the
 * first row; see http_predict.c for how a client leaving is seen) cancels every row; they still come back and are recycled without an
 * answer.
 *
 * Memory: the parsed input and the answer live in the request's h2o pool; jobs are
 * recycled per loop. jansson's tree of the request JSON (one block per value: ~150,000
 * for a [1,3,224,224] tensor) comes from the HTTP thread's JSON arena
 * (http_json_arena.c), which is reset, not freed, once the tree has been read, before
 * the rows are submitted. What it holds is bounded by what the tree of a
 * max_request_size body needs. The input's numbers go to the loop's scratch buffer
 * (http__loop_scratch), grown to the largest request and kept: infer() copies them into
 * the jobs before it returns. The answer, which must outlive the jobs (recycled as soon
 * as it is written), goes to an answer block of the loop (http__answer_memory), given
 * back when h2o disposes the request: not to the request's pool, which h2o 2.2 fills
 * from malloc at 1 KB and more (a 1000-class output is about 12 KB).
 *
 * Threading: the handlers run on the HTTP thread that owns the request; the rows come
 * back to that same thread through http_predict.c's done queue.
 */
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_internal.h"

/* ---- the request parser (pure) -------------------------------------------------------- */

typedef struct v2_parse {
  const http_v2_spec *spec;
  http_v2_alloc_fn alloc;
  void *alloc_ctx;
  inferd_status *st;
  const char *input; /* the input's name, for messages */
  int64_t rows;      /* the request's shape[0]; shape[1..] is spec->item_dims */
} v2_parse;

static inferd_code bad(inferd_status *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inferd_code bad(inferd_status *st, const char *fmt, ...) {
  char message[INFERD_STATUS_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  return core_fail(st, INFERD_INVALID_ARG, "%s", message);
}

/* "[n, 3, 224, 224]": the shape the model takes. */
static const char *expected_shape(const http_v2_spec *spec, char *out, size_t cap) {
  size_t len = (size_t)snprintf(out, cap, "[n");
  for (int d = 0; d < spec->item_rank && len < cap; d++)
    len += (size_t)snprintf(out + len, cap - len, ", %lld", (long long)spec->item_dims[d]);
  if (len < cap) snprintf(out + len, cap - len, "]");
  return out;
}

/* Numbers below this magnitude round to a finite float: FLT_MAX and half an ulp (2^103)
 * more, excluded (that tie rounds to even: infinity). "3.40282347e+38", FLT_MAX as %.9g
 * writes it (this server's own answers, and float32 printers), is a double above FLT_MAX
 * that is FLT_MAX as FP32. */
#define FP32_ROUNDS_FINITE 0x1.ffffffp+127

/* The request's shape: dimension d, and how many numbers dimensions d.. hold. */
static int64_t shape_dim(const v2_parse *p, int d) { return d == 0 ? p->rows : p->spec->item_dims[d - 1]; }

static size_t shape_block(const v2_parse *p, int d) {
  size_t block = 1;
  for (int k = d; k <= p->spec->item_rank; k++) block *= (size_t)shape_dim(p, k);
  return block;
}

/* Counts the numbers of a flat or nested "data" array (at most `limit` + 1 counted), or
 * fails naming the first element that is not a number or does not fit FP32, or the
 * first array that does not follow the shape. An array at nesting `level` ("data" is
 * level 0) holds either numbers, the whole block of the shape from dimension `level` on
 * (all the numbers for a flat "data": its count is checked by the caller), or arrays,
 * one per index of dimension `level` (their count checked here): so a nested number
 * lands in the row (and position) its nesting puts it in, never silently in another.
 * `path` names the array in messages ("data[1][0]"). With dest, also writes the numbers
 * in row-major order. */
static inferd_code walk_data(v2_parse *p, const json_t *array, int level, const char *path, size_t limit,
                             size_t *count, float *dest) {
  int rank = p->spec->item_rank + 1;
  size_t n = json_array_size(array);
  const json_t *first = json_array_get(array, 0);
  if (level > 0 && (first == NULL || !json_is_array(first)) && n != shape_block(p, level))
    return bad(p->st, "input '%s': %s has %zu values, shape needs %zu there", p->input, path, n,
               shape_block(p, level));
  if (json_is_array(first)) {
    if (level + 1 >= rank) return bad(p->st, "input '%s': \"data\" is nested deeper than its shape", p->input);
    if ((int64_t)n != shape_dim(p, level))
      return bad(p->st, "input '%s': %s has %zu elements, shape needs %lld arrays there (dimension %d)", p->input,
                 path, n, (long long)shape_dim(p, level), level);
  }
  size_t i;
  const json_t *v;
  json_array_foreach(array, i, v) {
    if (json_is_array(first) != json_is_array(v))
      return bad(p->st, "input '%s': %s[%zu] is %s, but %s[0] is %s", p->input, path, i,
                 json_is_array(v) ? "an array" : "not an array", path, json_is_array(first) ? "one" : "not");
    if (json_is_array(v)) {
      char inner[96];
      snprintf(inner, sizeof inner, "%s[%zu]", path, i);
      inferd_code code = walk_data(p, v, level + 1, inner, limit, count, dest);
      if (code != INFERD_OK || *count > limit) return code;
      continue;
    }
    if (!json_is_number(v))
      return bad(p->st, "input '%s': data element %zu is not a number (FP32 data must be JSON numbers)", p->input,
                 *count);
    double x = json_number_value(v);
    if (!(fabs(x) < FP32_ROUNDS_FINITE))
      return bad(p->st, "input '%s': data element %zu (%.9g) is outside the FP32 range", p->input, *count, x);
    if (fabs(x) > FLT_MAX) x = copysign(FLT_MAX, x); /* what rounding to float gives */
    if (*count >= limit) { /* one past: enough to say the count is wrong */
      *count = limit + 1;
      return INFERD_OK;
    }
    if (dest) dest[*count] = (float)x;
    (*count)++;
  }
  return INFERD_OK;
}

/* What a field belongs to, in an error message: "input 'x'", "output 'y'", "request
 * parameters". Written out only when there is an error: a request that parses formats
 * nothing. */
typedef struct v2_where {
  const char *what;
  const char *name; /* quoted after `what`; NULL: none */
} v2_where;

static const char *where_text(v2_where w, char *buf, size_t size) {
  if (!w.name) return w.what;
  snprintf(buf, size, "%s '%.60s'", w.what, w.name);
  return buf;
}

/* A non-negative JSON integer field of an object, or absent (*present false). */
static inferd_code get_size(v2_parse *p, const json_t *object, const char *key, v2_where where, bool *present,
                            long long *value) {
  const json_t *v = json_object_get(object, key);
  *present = v != NULL;
  if (!v) return INFERD_OK;
  char buf[96];
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return bad(p->st, "%s: \"%s\" must be a non-negative integer", where_text(where, buf, sizeof buf), key);
  *value = json_integer_value(v);
  return INFERD_OK;
}

static inferd_code get_bool(v2_parse *p, const json_t *object, const char *key, v2_where where, bool *value) {
  const json_t *v = object ? json_object_get(object, key) : NULL;
  if (!v) return INFERD_OK;
  char buf[96];
  if (!json_is_boolean(v))
    return bad(p->st, "%s: \"%s\" must be true or false", where_text(where, buf, sizeof buf), key);
  *value = json_is_true(v);
  return INFERD_OK;
}

/* An optional "parameters" member: NULL when absent, else it must be an object. */
static inferd_code get_parameters(v2_parse *p, const json_t *object, v2_where where, const json_t **out) {
  *out = json_object_get(object, "parameters");
  char buf[96];
  if (*out && !json_is_object(*out))
    return bad(p->st, "%s: \"parameters\" must be an object", where_text(where, buf, sizeof buf));
  return INFERD_OK;
}

static inferd_code parse_input(v2_parse *p, const json_t *input, const char *binary, size_t binary_size,
                               http_v2_request *out) {
  const http_v2_spec *spec = p->spec;
  if (!json_is_object(input)) return bad(p->st, "inputs[0] must be an object");
  const json_t *name = json_object_get(input, "name");
  if (!json_is_string(name)) return bad(p->st, "inputs[0]: \"name\" must be a string");
  p->input = json_string_value(name);
  if (strcmp(p->input, spec->input_name) != 0 || json_string_length(name) != strlen(spec->input_name))
    return bad(p->st, "unknown input '%s': model %s has input '%s'", p->input, spec->model_name, spec->input_name);

  const json_t *datatype = json_object_get(input, "datatype");
  if (!json_is_string(datatype)) return bad(p->st, "input '%s': \"datatype\" must be a string", p->input);
  if (strcmp(json_string_value(datatype), "FP32") != 0)
    return bad(p->st, "input '%s': datatype '%s' does not match the model's FP32", p->input,
               json_string_value(datatype));

  char expected[160]; /* written only for an error */
  const json_t *shape = json_object_get(input, "shape");
  if (!json_is_array(shape)) return bad(p->st, "input '%s': \"shape\" must be an array of integers", p->input);
  size_t rank = json_array_size(shape);
  if (rank != (size_t)spec->item_rank + 1)
    return bad(p->st, "input '%s': shape has rank %zu, model %s takes %s", p->input, rank, spec->model_name,
               expected_shape(spec, expected, sizeof expected));
  for (size_t d = 0; d < rank; d++) {
    const json_t *v = json_array_get(shape, d);
    if (!json_is_integer(v)) return bad(p->st, "input '%s': shape[%zu] is not an integer", p->input, d);
    long long dim = json_integer_value(v);
    if (d == 0 && (dim < 1 || dim > spec->max_rows))
      return bad(p->st, "input '%s': batch %lld out of range: model %s takes 1 to %d rows per request (its "
                        "job_queue_size)", p->input, dim, spec->model_name, spec->max_rows);
    if (d > 0 && (dim < 0 || dim != spec->item_dims[d - 1]))
      return bad(p->st, "input '%s': shape[%zu] is %lld, model %s takes %s", p->input, d, dim, spec->model_name,
                 expected_shape(spec, expected, sizeof expected));
  }
  out->rows = (int)json_integer_value(json_array_get(shape, 0));
  p->rows = out->rows;
  out->row_elems = 1;
  for (int d = 0; d < spec->item_rank; d++) out->row_elems *= (size_t)spec->item_dims[d];
  size_t elems = (size_t)out->rows * out->row_elems;

  const json_t *parameters;
  v2_where where = {"input", p->input};
  if (get_parameters(p, input, where, &parameters) != INFERD_OK) return INFERD_INVALID_ARG;
  bool is_binary = false;
  long long binary_bytes = 0;
  if (parameters && get_size(p, parameters, "binary_data_size", where, &is_binary, &binary_bytes) != INFERD_OK)
    return INFERD_INVALID_ARG;
  const json_t *data = json_object_get(input, "data");
  if (is_binary) {
    if (data) return bad(p->st, "input '%s': both \"data\" and binary_data_size given", p->input);
    if (!binary)
      return bad(p->st, "input '%s': binary_data_size without an Inference-Header-Content-Length header giving the "
                        "JSON's length", p->input);
    if ((unsigned long long)binary_bytes != elems * sizeof(float))
      return bad(p->st, "input '%s': binary_data_size %lld does not match shape (%zu FP32 values = %zu bytes)",
                 p->input, binary_bytes, elems, elems * sizeof(float));
    if ((unsigned long long)binary_bytes > binary_size)
      return bad(p->st, "input '%s': binary_data_size %lld is more than the %zu bytes after the JSON", p->input,
                 binary_bytes, binary_size);
    if ((unsigned long long)binary_bytes < binary_size)
      return bad(p->st, "%zu bytes of binary data after the JSON, but input '%s' takes %lld", binary_size, p->input,
                 binary_bytes);
    /* NaN and infinities, which JSON "data" cannot carry, are refused here too: oneDNN's
     * kernels do not carry them through as PyTorch does (Relu gave 0 for NaN), so the
     * answer would look valid and be wrong. (Triton passes them to its backend.) */
    for (size_t i = 0; i < elems; i++) {
      const unsigned char *b = (const unsigned char *)binary + i * 4;
      uint32_t bits = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
      if ((bits & 0x7f800000u) == 0x7f800000u)
        return bad(p->st, "input '%s': binary element %zu is %s: FP32 input must be finite", p->input, i,
                   bits & 0x007fffffu ? "NaN" : bits >> 31 ? "-infinity" : "infinity");
    }
    out->binary = (const unsigned char *)binary;
    return INFERD_OK;
  }
  if (!data) return bad(p->st, "input '%s': no \"data\" (nor binary_data_size)", p->input);
  if (!json_is_array(data)) return bad(p->st, "input '%s': \"data\" must be an array", p->input);
  if (binary && binary_size)
    return bad(p->st, "%zu bytes of binary data after the JSON, but no input has binary_data_size", binary_size);
  /* Count first: memory is only taken for a request that holds all its numbers. */
  size_t count = 0;
  inferd_code code = walk_data(p, data, 0, "\"data\"", elems, &count, NULL);
  if (code != INFERD_OK) return code;
  if (count != elems)
    return bad(p->st, "input '%s': \"data\" has %s%zu values, shape needs %zu", p->input,
               count > elems ? "more than " : "", count > elems ? elems : count, elems);
  float *dest = spec->data_alloc ? spec->data_alloc(spec->data_alloc_ctx, elems * sizeof(float))
                                 : p->alloc(p->alloc_ctx, elems * sizeof(float));
  if (!dest) return core_fail(p->st, INFERD_NO_MEMORY, "out of memory for %zu input values", elems);
  count = 0;
  code = walk_data(p, data, 0, "\"data\"", elems, &count, dest);
  if (code != INFERD_OK) return code;
  out->data = dest;
  return INFERD_OK;
}

/* "'a', 'b'": the model's output names, for messages. */
static void output_list(const http_v2_spec *spec, char *out, size_t cap) {
  size_t len = 0;
  out[0] = 0;
  for (int k = 0; k < spec->output_count && len < cap; k++)
    len += (size_t)snprintf(out + len, cap - len, "%s'%.60s'", k ? ", " : "", spec->output_names[k]);
}

/* The outputs to answer: those "outputs" names, in its order, each as binary tensor data
 * when its own "binary_data" is true; else (absent or empty) all of the model's, as
 * binary tensor data when the request's "binary_data_output" is true. As Triton reads
 * them (its CheckBinaryOutputData): the request-wide flag is only for outputs not named. */
static inferd_code parse_outputs(v2_parse *p, const json_t *outputs, bool binary_default, http_v2_request *out) {
  const http_v2_spec *spec = p->spec;
  if (outputs && !json_is_array(outputs)) return bad(p->st, "\"outputs\" must be an array");
  size_t n = outputs ? json_array_size(outputs) : 0;
  bool all = n == 0;
  if (all) n = (size_t)spec->output_count;
  char names[200];
  if (n > (size_t)spec->output_count) {
    output_list(spec, names, sizeof names);
    return bad(p->st, "\"outputs\" names %zu outputs; model %s has %d: %s", n, spec->model_name, spec->output_count,
               names);
  }
  int *index = p->alloc(p->alloc_ctx, n * sizeof *index);
  bool *binary = p->alloc(p->alloc_ctx, n * sizeof *binary);
  if (!index || !binary) return core_fail(p->st, INFERD_NO_MEMORY, "out of memory");
  for (size_t i = 0; i < n; i++) {
    index[i] = (int)i;
    binary[i] = all && binary_default;
    if (all) continue;
    const json_t *o = json_array_get(outputs, i);
    if (!json_is_object(o)) return bad(p->st, "outputs[%zu] must be an object", i);
    const json_t *name = json_object_get(o, "name");
    if (!json_is_string(name)) return bad(p->st, "outputs[%zu]: \"name\" must be a string", i);
    const char *s = json_string_value(name);
    int found = -1;
    for (int k = 0; k < spec->output_count && found < 0; k++)
      if (strcmp(s, spec->output_names[k]) == 0 && json_string_length(name) == strlen(s)) found = k;
    if (found < 0) {
      output_list(spec, names, sizeof names);
      return bad(p->st, "unknown output '%s': model %s has %s", s, spec->model_name, names);
    }
    for (size_t j = 0; j < i; j++)
      if (index[j] == found) return bad(p->st, "output '%s' is asked for twice", s);
    index[i] = found;
    const json_t *parameters;
    v2_where where = {"output", s};
    if (get_parameters(p, o, where, &parameters) != INFERD_OK) return INFERD_INVALID_ARG;
    if (parameters && json_object_get(parameters, "classification"))
      return core_fail(p->st, INFERD_INVALID_ARG, "output '%s': the classification extension is not supported", s);
    if (get_bool(p, parameters, "binary_data", where, &binary[i]) != INFERD_OK) return INFERD_INVALID_ARG;
  }
  out->output_count = (int)n;
  out->outputs = index;
  out->output_binary = binary;
  return INFERD_OK;
}

static inferd_code parse_root(v2_parse *p, const json_t *root, const char *binary, size_t binary_size,
                              http_v2_request *out) {
  if (!json_is_object(root)) return bad(p->st, "the request must be a JSON object");
  const json_t *id = json_object_get(root, "id");
  if (id) {
    if (!json_is_string(id)) return bad(p->st, "\"id\" must be a string");
    size_t len = json_string_length(id);
    char *copy = p->alloc(p->alloc_ctx, len + 1);
    if (!copy) return core_fail(p->st, INFERD_NO_MEMORY, "out of memory");
    memcpy(copy, json_string_value(id), len + 1);
    out->id = copy;
    out->id_len = len;
  }
  const json_t *parameters;
  if (get_parameters(p, root, (v2_where){"request", NULL}, &parameters) != INFERD_OK) return INFERD_INVALID_ARG;
  bool binary_output = false;
  const v2_where where = {"request parameters", NULL};
  if (get_bool(p, parameters, "binary_data_output", where, &binary_output) != INFERD_OK)
    return INFERD_INVALID_ARG;
  const json_t *inputs = json_object_get(root, "inputs");
  if (!json_is_array(inputs)) return bad(p->st, "\"inputs\" must be an array");
  if (json_array_size(inputs) != 1)
    return bad(p->st, "model %s has 1 input ('%s'), the request gives %zu", p->spec->model_name,
               p->spec->input_name, json_array_size(inputs));
  inferd_code code = parse_input(p, json_array_get(inputs, 0), binary, binary_size, out);
  if (code != INFERD_OK) return code;
  return parse_outputs(p, json_object_get(root, "outputs"), binary_output, out);
}

/* A header field's value ends before its trailing blanks (RFC 9110's OWS), which h2o keeps. */
static size_t without_trailing_blanks(const char *value, size_t len) {
  while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t')) len--;
  return len;
}

inferd_code http_v2_parse(const char *body, size_t size, const char *header, size_t header_len,
                          const http_v2_spec *spec, http_v2_alloc_fn alloc, void *alloc_ctx, http_v2_request *out,
                          inferd_status *st) {
  memset(out, 0, sizeof *out);
  v2_parse p = {spec, alloc, alloc_ctx, st, "", 0};
  size_t json_len = size;
  const char *binary = NULL;
  size_t binary_size = 0;
  if (header) {
    header_len = without_trailing_blanks(header, header_len);
    unsigned long long value = 0;
    bool ok = header_len > 0 && header_len <= 18;
    for (size_t i = 0; ok && i < header_len; i++) {
      ok = header[i] >= '0' && header[i] <= '9';
      value = value * 10 + (unsigned long long)(header[i] - '0');
    }
    if (!ok)
      return bad(st, "Inference-Header-Content-Length '%.*s' is not a byte count", (int)(header_len > 40 ? 40 : header_len),
                 header);
    if (value > size)
      return bad(st, "Inference-Header-Content-Length %llu is more than the body's %zu bytes", value, size);
    if (value > 0) { /* 0: the whole body is JSON, as without the header (Triton reads it so) */
      json_len = (size_t)value;
      binary = body + json_len;
      binary_size = size - json_len;
    }
  }
  if (json_len == 0) return bad(st, "the request has no JSON (empty body)");
  /* The tree comes from this thread's JSON arena and is gone at http__json_arena_end:
   * whatever the answer needs of it is copied into alloc's memory (parse_root). */
  json_error_t error;
  http__json_arena_begin();
  json_t *root = json_loadb(body, json_len, JSON_REJECT_DUPLICATES, &error);
  inferd_code code;
  if (!root)
    code = bad(st, "malformed JSON at line %d, column %d: %s%s", error.line, error.column, error.text,
               !binary && json_error_code(&error) == json_error_end_of_input_expected
                   ? " (binary tensor data after the JSON needs an Inference-Header-Content-Length header giving the "
                     "JSON's length)"
                   : "");
  else
    code = parse_root(&p, root, binary, binary_size, out);
  json_decref(root);
  http__json_arena_end();
  if (code != INFERD_OK) memset(out, 0, sizeof *out);
  return code;
}

void http_v2_copy_row(const http_v2_request *r, int row, float *dest) {
  size_t offset = (size_t)row * r->row_elems;
  if (r->data) {
    memcpy(dest, r->data + offset, r->row_elems * sizeof(float));
    return;
  }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  memcpy(dest, r->binary + offset * sizeof(float), r->row_elems * sizeof(float));
#else
  for (size_t i = 0; i < r->row_elems; i++) {
    const unsigned char *b = r->binary + (offset + i) * 4;
    uint32_t bits = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    memcpy(&dest[i], &bits, sizeof bits);
  }
#endif
}

/* ---- metadata and readiness ------------------------------------------------------------ */

static void json_shape(http__buf *b, const inferd_tensor_info *t) {
  http__buf_append(b, "[", 1);
  for (int d = 0; d < t->rank; d++) http__buf_printf(b, "%s%lld", d ? ", " : "", (long long)t->dims[d]);
  http__buf_append(b, "]", 1);
}

static const char *v2_datatype(inferd_dtype dtype) {
  switch (dtype) {
  case INFERD_DTYPE_FLOAT: return "FP32";
  case INFERD_DTYPE_UINT8: return "UINT8";
  case INFERD_DTYPE_INT8: return "INT8";
  case INFERD_DTYPE_INT32: return "INT32";
  case INFERD_DTYPE_INT64: return "INT64";
  case INFERD_DTYPE_BOOL: return "BOOL";
  default: return "BYTES";
  }
}

/* The model's inputs, or its outputs. */
static void v2_tensors(http__buf *b, const inferd_model *engine, bool inputs) {
  int count = inputs ? inferd_model_num_inputs(engine) : inferd_model_num_outputs(engine);
  http__buf_append(b, "[", 1);
  for (int i = 0; i < count; i++) {
    inferd_tensor_info t;
    if ((inputs ? inferd_model_input(engine, i, &t) : inferd_model_output(engine, i, &t)) != INFERD_OK) continue;
    http__buf_printf(b, "%s{\"name\": ", i ? ", " : "");
    http__buf_json_string(b, t.name, strlen(t.name));
    http__buf_printf(b, ", \"datatype\": \"%s\", \"shape\": ", v2_datatype(t.dtype));
    json_shape(b, &t);
    http__buf_append(b, "}", 1);
  }
  http__buf_append(b, "]", 1);
}

static void model_metadata(http_server *s, h2o_req_t *req, http__model *m, bool ready_call) {
  http__buf b;
  http__buf_init(&b, &req->pool, 512);
  if (ready_call) {
    bool ready = !atomic_load(&s->draining) && sched_model_ready(m->sched);
    http__buf_append(&b, "{\"name\": ", 9);
    http__buf_json_string(&b, m->name, strlen(m->name));
    http__buf_printf(&b, ", \"ready\": %s}\n", ready ? "true" : "false");
    http__send_json(req, ready ? 200 : 503, b.data, b.len);
  } else {
    http__buf_append(&b, "{\"name\": ", 9);
    http__buf_json_string(&b, m->name, strlen(m->name));
    /* every version of the name that a client may ask for, as Triton lists them (the
     * one asked for alone if it was unregistered meanwhile) */
    http__buf_append(&b, ", \"versions\": [", 15);
    http__model **all = NULL;
    int n = http__registry_list(s->registry, m->name, true, &all);
    for (int i = 0; i < n; i++) {
      if (i) http__buf_append(&b, ", ", 2);
      http__buf_json_string(&b, all[i]->version, strlen(all[i]->version));
      http__model_release(all[i]);
    }
    free(all);
    if (n <= 0) http__buf_json_string(&b, m->version, strlen(m->version));
    http__buf_append(&b, "], \"platform\": \"onnx\", \"inputs\": ", 33);
    v2_tensors(&b, m->engine, true);
    http__buf_append(&b, ", \"outputs\": ", 13);
    v2_tensors(&b, m->engine, false);
    http__buf_append(&b, "}\n", 2);
    http__send_json(req, 200, b.data, b.len);
  }
}

/* ---- infer ---------------------------------------------------------------------------------- */

/* One infer call's state, in req->pool: valid only while the request is (job->req). */
typedef struct v2_call {
  http_v2_request parsed;
  size_t upper, binary_bytes; /* answer_bounds of the parsed request, for answer() */
} v2_call;

static void *pool_alloc(void *ctx, size_t bytes) {
  return h2o_mem_alloc_pool((h2o_mem_pool_t *)ctx, bytes ? bytes : 1); /* aligned for any type */
}

/* The input's numbers: infer() copies them into the jobs before the loop parses again. */
static void *scratch_alloc(void *ctx, size_t bytes) { return http__loop_scratch(ctx, bytes ? bytes : 1); }

static void json_number(http__buf *b, float x) {
  char text[HTTP__FLOAT_CHARS];
  http__buf_append(b, text, http__float_json(x, text)); /* null for NaN, infinity */
}

/* Output i's shape at `rows` rows: the model's dims after the batch axis when they are
 * known and match its item size, else [rows, elems]. */
static void output_shape(http__buf *b, const http__model *m, int i, int rows) {
  size_t elems = sched_model_output_item(m->sched, i);
  inferd_tensor_info t;
  bool known = inferd_model_output(m->engine, i, &t) == INFERD_OK && t.rank >= 1;
  size_t product = 1;
  for (int d = 1; known && d < t.rank; d++) {
    known = t.dims[d] >= 0;
    product *= known ? (size_t)t.dims[d] : 1;
  }
  http__buf_printf(b, "[%d", rows);
  if (known && product == elems)
    for (int d = 1; d < t.rank; d++) http__buf_printf(b, ", %lld", (long long)t.dims[d]);
  else
    http__buf_printf(b, ", %zu", elems);
  http__buf_append(b, "]", 1);
}

/* Every row's item of output i, as little-endian FP32. */
static void append_binary(http__buf *b, const http__job *first, size_t offset, size_t elems) {
  for (const http__job *row = first; row; row = row->next_row) {
    const float *x = row->output + offset;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    http__buf_append(b, (const char *)x, elems * sizeof(float));
#else
    for (size_t k = 0; k < elems; k++) {
      uint32_t bits;
      memcpy(&bits, &x[k], sizeof bits);
      char le[4] = {(char)bits, (char)(bits >> 8), (char)(bits >> 16), (char)(bits >> 24)};
      http__buf_append(b, le, 4);
    }
#endif
  }
}

/* The answer's size: at least `lower` (a float takes 3 bytes or more inline: "0, "), at
 * most `upper` (17: "-1.23456789e-38, "; a name 6 per byte escaped); `binary` of it
 * binary tensor data. Known from the parsed request alone, before anything runs. */
static void answer_bounds(const http__model *m, const http_v2_request *parsed, size_t *lower, size_t *upper,
                          size_t *binary) {
  *lower = *binary = 0;
  *upper = 256 + 6 * strlen(m->name) + 6 * strlen(m->version) + 6 * parsed->id_len;
  for (int j = 0; j < parsed->output_count; j++) {
    inferd_tensor_info t;
    size_t floats = (size_t)parsed->rows * sched_model_output_item(m->sched, parsed->outputs[j]);
    bool described = inferd_model_output(m->engine, parsed->outputs[j], &t) == INFERD_OK && t.name;
    *upper += 128 + (described ? 6 * strlen(t.name) + 24 * (size_t)t.rank : 0);
    if (parsed->output_binary[j]) {
      *binary += floats * sizeof(float);
      *lower += floats * sizeof(float);
      *upper += floats * sizeof(float);
    } else {
      *lower += 3 * floats;
      *upper += 17 * floats;
    }
  }
}

/* All rows are back and the client is still there (loop thread). The outputs asked for,
 * in the request's order: inline as JSON numbers, or as binary tensor data after the
 * JSON in that same order (then with Inference-Header-Content-Length). */
static void answer(http__job *first) {
  h2o_req_t *req = first->req;
  http__model *m = first->model;
  const v2_call *call = first->call;
  const http_v2_request *parsed = &call->parsed;
  first->hook->job = NULL; /* answered: the dispose hook must not touch the job */
  for (http__job *row = first; row; row = row->next_row) {
    if (row->code != INFERD_OK) {
      metrics_model_response(m->metrics, http__send_job_error(req, m, row->code, &row->request.status));
      return;
    }
  }
  int rows = parsed->rows;
  size_t upper = call->upper, binary_bytes = call->binary_bytes;
  /* infer() refused what cannot fit before it ran anything; an answer that grows past
   * the limit stops being formatted there and is refused below. */
  size_t limit = (size_t)http__loop_of(req)->server->config->max_response_size;
  http__buf b;
  size_t cap = upper < limit ? upper : limit + 1;
  char *memory = http__answer_memory(first, cap);
  if (memory)
    http__buf_init_over(&b, &req->pool, memory, cap);
  else
    http__buf_init(&b, &req->pool, cap);
  http__buf_append(&b, "{\"model_name\": ", 15);
  http__buf_json_string(&b, m->name, strlen(m->name));
  http__buf_append(&b, ", \"model_version\": ", 19);
  http__buf_json_string(&b, m->version, strlen(m->version));
  if (parsed->id) {
    http__buf_append(&b, ", \"id\": ", 8);
    http__buf_json_string(&b, parsed->id, parsed->id_len);
  }
  http__buf_append(&b, ", \"outputs\": [", 14);
  for (int j = 0; j < parsed->output_count; j++) {
    int i = parsed->outputs[j];
    inferd_tensor_info t;
    const char *name = inferd_model_output(m->engine, i, &t) == INFERD_OK && t.name ? t.name : "output";
    size_t offset = sched_model_output_offset(m->sched, i), elems = sched_model_output_item(m->sched, i);
    http__buf_append(&b, j ? ", {\"name\": " : "{\"name\": ", j ? 11 : 9);
    http__buf_json_string(&b, name, strlen(name));
    http__buf_append(&b, ", \"datatype\": \"FP32\", \"shape\": ", 31);
    output_shape(&b, m, i, rows);
    if (parsed->output_binary[j]) {
      http__buf_printf(&b, ", \"parameters\": {\"binary_data_size\": %zu}}", (size_t)rows * elems * sizeof(float));
      continue;
    }
    http__buf_append(&b, ", \"data\": [", 11);
    bool comma = false;
    for (const http__job *row = first; row && b.len <= limit; row = row->next_row)
      for (size_t k = 0; k < elems; k++) {
        if (comma) http__buf_append(&b, ", ", 2);
        json_number(&b, row->output[offset + k]);
        comma = true;
      }
    http__buf_append(&b, "]}", 2);
    if (b.len > limit) break;
  }
  if (binary_bytes == 0) {
    http__buf_append(&b, "]}\n", 3);
    if (!http__response_fits(req, m, b.len)) {
      metrics_model_response(m->metrics, 500);
      return;
    }
    http__send_json(req, 200, b.data, b.len);
  } else {
    http__buf_append(&b, "]}", 2);
    size_t json_len = b.len;
    if (!http__response_fits(req, m, json_len + binary_bytes)) {
      metrics_model_response(m->metrics, 500);
      return;
    }
    for (int j = 0; j < parsed->output_count; j++)
      if (parsed->output_binary[j])
        append_binary(&b, first, sched_model_output_offset(m->sched, parsed->outputs[j]),
                      sched_model_output_item(m->sched, parsed->outputs[j]));
    char *length = h2o_mem_alloc_pool(&req->pool, 24);
    int length_len = snprintf(length, 24, "%zu", json_len);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("inference-header-content-length"), 0,
                          "Inference-Header-Content-Length", length, (size_t)length_len);
    http__send_text(req, 200, "application/octet-stream", b.data, b.len);
  }
  metrics_model_response(m->metrics, 200);
  http__ts_answered(m, first);
}

/* A row's job is back from the scheduler (loop thread); the last one answers for all. */
static void finish_row(http__job *job) {
  http__job *first = job->first_row;
  if (--first->rows_pending > 0) return;
  http__loop *loop = first->loop;
  http__model *m = first->model;
  http__job_unwait(first);
  if (first->req) answer(first);
  for (http__job *row = first, *next; row; row = next) {
    next = row->next_row;
    http__job_put(loop, row);
  }
  http__model_release(m);
  atomic_fetch_sub(&loop->server->in_flight, 1);
}

/* The model's description for the parser, in req->pool. */
static bool model_spec(h2o_req_t *req, const http__model *m, http_v2_spec *spec) {
  inferd_tensor_info in;
  if (inferd_model_num_inputs(m->engine) != 1 || inferd_model_input(m->engine, 0, &in) != INFERD_OK || in.rank < 1)
    return false;
  int64_t *item = h2o_mem_alloc_pool(&req->pool, sizeof *item * (size_t)(in.rank > 1 ? in.rank - 1 : 1));
  size_t elems = 1;
  for (int d = 1; d < in.rank; d++) {
    if (in.dims[d] < 0) return false; /* the scheduler batches fixed items only */
    item[d - 1] = in.dims[d];
    elems *= (size_t)in.dims[d];
  }
  if (elems != m->input_elems) return false;
  int outputs = inferd_model_num_outputs(m->engine);
  const char **names = h2o_mem_alloc_pool(&req->pool, sizeof *names * (size_t)(outputs > 0 ? outputs : 1));
  int count = 0;
  for (int i = 0; i < outputs; i++) {
    inferd_tensor_info t;
    if (inferd_model_output(m->engine, i, &t) != INFERD_OK) return false; /* indexes must stay the model's */
    names[count++] = t.name;
  }
  *spec = (http_v2_spec){.model_name = m->name,
                         .input_name = in.name,
                         .item_rank = in.rank - 1,
                         .item_dims = item,
                         .output_names = names,
                         .output_count = count,
                         .max_rows = m->job_queue_size > 0 ? m->job_queue_size : 1,
                         .data_alloc = scratch_alloc,
                         .data_alloc_ctx = http__loop_of(req)};
  return true;
}

/* Queues every row. Returns how many were queued before the scheduler refused one (all
 * of them: n), with *st saying why. Rows not queued are recycled here. */
static int submit_rows(http__loop *loop, http__job *first, int n, inferd_status *st) {
  int queued = http__rows_submit(first, n, st);
  if (queued == n) return queued;
  http__job *prev = NULL, *row = first;
  for (int i = 0; i < queued; i++) prev = row, row = row->next_row;
  if (prev) prev->next_row = NULL;
  for (http__job *next; row; row = next) {
    next = row->next_row;
    http__job_put(loop, row);
  }
  return queued;
}

/* Whether every Inference-Header-Content-Length after the one at index `first` says what
 * it says (trailing blanks aside): two lengths are two ways to split the body, and a
 * proxy may have read the other one, so a second value is refused rather than ignored. */
static bool header_given_once(const h2o_req_t *req, ssize_t first) {
  h2o_iovec_t a = req->headers.entries[first].value;
  a.len = without_trailing_blanks(a.base, a.len);
  for (ssize_t at = first; (at = h2o_find_header_by_str(&req->headers, H2O_STRLIT("inference-header-content-length"),
                                                        at)) >= 0;) {
    h2o_iovec_t b = req->headers.entries[at].value;
    b.len = without_trailing_blanks(b.base, b.len);
    if (b.len != a.len || (a.len && memcmp(a.base, b.base, a.len) != 0)) return false;
  }
  return true;
}

static void infer(http_server *s, h2o_req_t *req, h2o_iovec_t name, h2o_iovec_t version) {
  http__loop *loop = http__loop_of(req);
  if (!http__method_is(req, "POST")) {
    http__send_canned(req, HTTP__CANNED_METHOD);
    return;
  }
  if (atomic_load(&s->draining)) {
    http__send_canned(req, HTTP__CANNED_SHUTTING_DOWN);
    return;
  }
  inferd_status st;
  http__model *m = http__model_acquire_or_reply(s, req, name.base, name.len, version.base, version.len);
  if (!m) return;
  http_v2_spec spec;
  if (!model_spec(req, m, &spec)) {
    http__send_error(req, HTTP__E_INTERNAL, "model %s: cannot describe its input", m->name);
    metrics_model_response(m->metrics, 500);
    http__model_release(m);
    return;
  }
  ssize_t h = h2o_find_header_by_str(&req->headers, H2O_STRLIT("inference-header-content-length"), -1);
  h2o_iovec_t header = h >= 0 ? req->headers.entries[h].value : h2o_iovec_init(NULL, 0);
  if (h >= 0 && !header_given_once(req, h)) {
    http__send_error(req, HTTP__E_BAD_REQUEST, "Inference-Header-Content-Length is given twice, with different values");
    metrics_model_response(m->metrics, 400);
    http__model_release(m);
    return;
  }
  v2_call *call = h2o_mem_alloc_pool(&req->pool, sizeof *call);
  const char *body = req->entity.base ? req->entity.base : "";
  inferd_code code = http_v2_parse(body, req->entity.len, h >= 0 ? (header.base ? header.base : "") : NULL,
                                   header.len, &spec, pool_alloc, &req->pool, &call->parsed, &st);
  if (code != INFERD_OK) {
    http__send_status(req, &st);
    metrics_model_response(m->metrics, http__error_status(http__error_from_code(code)));
    http__model_release(m);
    return;
  }
  /* An answer whose smallest possible size is above max_response_size is refused before
   * any row runs. */
  size_t lower;
  answer_bounds(m, &call->parsed, &lower, &call->upper, &call->binary_bytes);
  int64_t limit = s->config->max_response_size;
  if ((uint64_t)lower > (uint64_t)limit) {
    http__send_error(req, HTTP__E_INTERNAL,
                     "Model \"%s\": the response is at least %zu bytes, more than max_response_size (%lld bytes)",
                     m->name, lower, (long long)limit);
    metrics_model_response(m->metrics, 500);
    http__model_release(m);
    return;
  }
  /* One job per row, linked in row order; the first holds the model reference. */
  int n = call->parsed.rows;
  double now = core_now_seconds();
  http__job *first = NULL, *last = NULL;
  for (int r = 0; r < n; r++) {
    http__job *job = http__job_get(loop, m);
    if (!job) {
      for (http__job *next; first; first = next) {
        next = first->next_row;
        http__job_put(loop, first);
      }
      http__send_error(req, HTTP__E_UNAVAILABLE, "out of memory for %d rows of model %s", n, m->name);
      metrics_model_response(m->metrics, 503);
      http__model_release(m);
      return;
    }
    http_v2_copy_row(&call->parsed, r, job->input); /* out of the loop's scratch buffer */
    job->received = now;
    job->model = m;
    job->finish = finish_row;
    if (last)
      last->next_row = job;
    else
      first = job;
    last = job;
  }
  call->parsed.data = NULL; /* the loop's scratch: the next request's once infer() returns */
  for (http__job *row = first; row; row = row->next_row) row->first_row = first;
  metrics_model_ts_request(m->metrics);
  int queued = submit_rows(loop, first, n, &st);
  if (queued == 0) {
    http__send_status(req, &st);
    metrics_model_response(m->metrics, http__error_status(http__error_from_code(st.code)));
    http__model_release(m);
    return;
  }
  /* The rows queued come back through the done queue to finish_row, which releases the
   * model reference and recycles them. */
  first->rows_pending = queued;
  first->call = call;
  atomic_fetch_add(&s->in_flight, 1);
  if (queued < n) { /* refused part-way: answer now, the queued rows are not wanted */
    http__send_status(req, &st);
    metrics_model_response(m->metrics, http__error_status(http__error_from_code(st.code)));
    http__job_cancel(first);
    return; /* first->req stays NULL: nothing more to answer */
  }
  if (!http__job_wait(first, req)) { /* as a refusal part-way */
    http__send_error(req, HTTP__E_UNAVAILABLE, "out of memory for a request of model %s", m->name);
    metrics_model_response(m->metrics, 503);
    http__job_cancel(first);
  }
}

/* ---- routing under /v2 ----------------------------------------------------------------- */

/* /v2/models/{m}[/versions/{v}][/ready|/infer] */
static void v2_model(http_server *s, h2o_req_t *req, const http__path *path) {
  h2o_iovec_t name = path->segments[2], version = h2o_iovec_init("", 0);
  int next = 3;
  if (path->count >= 5 && http__segment_is(path->segments[3], "versions")) {
    version = path->segments[4];
    next = 5;
  }
  bool ready_call = path->count == next + 1 && http__segment_is(path->segments[next], "ready");
  if (path->count == next + 1 && http__segment_is(path->segments[next], "infer")) {
    infer(s, req, name, version);
    return;
  }
  if (path->count != next && !ready_call) {
    http__send_canned(req, HTTP__CANNED_NO_ROUTE);
    return;
  }
  if (!http__method_is(req, "GET")) {
    http__send_canned(req, HTTP__CANNED_METHOD);
    return;
  }
  http__model *m = http__model_acquire_or_reply(s, req, name.base, name.len, version.base, version.len);
  if (!m) return;
  model_metadata(s, req, m, ready_call);
  http__model_release(m);
}

void http__v2(http_server *s, h2o_req_t *req, const http__path *path) {
  if (path->count == 3 && http__segment_is(path->segments[1], "health")) {
    if (!http__method_is(req, "GET") && !http__method_is(req, "HEAD")) {
      http__send_canned(req, HTTP__CANNED_METHOD);
    } else if (http__segment_is(path->segments[2], "live")) {
      static const char live[] = "{\"live\": true}\n";
      http__send_json(req, 200, live, sizeof live - 1);
    } else if (http__segment_is(path->segments[2], "ready")) {
      static const char yes[] = "{\"ready\": true}\n", no[] = "{\"ready\": false}\n";
      if (http__server_ready(s))
        http__send_json(req, 200, yes, sizeof yes - 1);
      else
        http__send_json(req, 503, no, sizeof no - 1);
    } else {
      http__send_canned(req, HTTP__CANNED_NO_ROUTE);
    }
    return;
  }
  if (!http__auth_check(s->auth, req, HTTP__KEY_INFERENCE)) {
    http__send_canned(req, HTTP__CANNED_UNAUTHORIZED);
    return;
  }
  if (path->count == 1) {
    static const char meta[] =
        "{\"name\": \"inferd\", \"version\": \"" INFERD_VERSION_TEXT "\", \"extensions\": [\"binary_tensor_data\"]}\n";
    if (http__method_is(req, "GET"))
      http__send_json(req, 200, meta, sizeof meta - 1);
    else
      http__send_canned(req, HTTP__CANNED_METHOD);
    return;
  }
  if (path->count >= 3 && http__segment_is(path->segments[1], "models")) {
    v2_model(s, req, path);
    return;
  }
  http__send_canned(req, HTTP__CANNED_NO_ROUTE);
}
