/*
 * ops_fold.c - ops that exported graphs use only for shape and mask arithmetic:
 * ConstantOfShape, Expand, Equal, Where, Mod, Range, Not, and ScatterND (which a slice
 * assignment exports to: Swin's shifted-window attention mask). With the batch size
 * fixed per plan their inputs are constants, and they are computed here at plan time.
 * A tensor computed at run time reaching one of them is refused with the node named,
 * but for Where, which runs then (ops_where_lower in ops_binary.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

enum { FOLD_MAX_ELEMENTS = 1 << 24 };

static long double get(const plan_value *v, int64_t i) { return engine_elem_get(v->dtype, v->data, i); }

/* Broadcasts up to three operands to one shape. */
static bool broadcast3(plan_value *const *in, int n, int *rank, int64_t *dims) {
  plan_value acc = *in[0];
  for (int k = 1; k < n; k++) {
    if (!ops_broadcast_shape(&acc, in[k], &acc.rank, acc.dims)) return false;
  }
  *rank = acc.rank;
  memcpy(dims, acc.dims, sizeof acc.dims);
  return true;
}

static inferd_code emit(plan_ctx *c, int node, inferd_dtype dtype, int rank, const int64_t *dims,
                        long double (*fn)(plan_value *const *in, const int64_t *offs, const void *ctx), plan_value *const *in,
                        int n, const void *ctx, inferd_status *st) {
  int64_t count = core_shape_count(rank, dims);
  if (count < 0 || count > FOLD_MAX_ELEMENTS) return node_fail(c, node, INFERD_UNSUPPORTED, st, "result too large to fold");
  void *out = malloc((size_t)(count ? count : 1) * 8);
  if (!out) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  int64_t idx[IR_MAX_RANK] = {0}, offs[3];
  for (int64_t e = 0; e < count; e++) {
    for (int k = 0; k < n; k++) offs[k] = ops_broadcast_offset(in[k], rank, idx);
    engine_elem_put(dtype, out, e, fn(in, offs, ctx));
    for (int i = rank - 1; i >= 0 && ++idx[i] == dims[i]; i--) idx[i] = 0;
  }
  inferd_code rc = plan_set_const(c, plan_node(c, node)->outputs[0], dtype, rank, dims, out, st);
  free(out);
  return rc;
}

static long double f_first(plan_value *const *in, const int64_t *o, const void *ctx) { return get(in[0], o[0]); }
static long double f_equal(plan_value *const *in, const int64_t *o, const void *ctx) { return get(in[0], o[0]) == get(in[1], o[1]); }
static long double f_not(plan_value *const *in, const int64_t *o, const void *ctx) { return get(in[0], o[0]) == 0; }
static long double f_where(plan_value *const *in, const int64_t *o, const void *ctx) {
  return get(in[0], o[0]) != 0 ? get(in[1], o[1]) : get(in[2], o[2]);
}
static long double f_mod(plan_value *const *in, const int64_t *o, const void *ctx) {
  long double a = get(in[0], o[0]), b = get(in[1], o[1]);
  if (b == 0) return 0;
  if (*(const int *)ctx) return fmodl(a, b); /* fmod=1: sign of the dividend */
  long double r = fmodl(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r; /* integer Mod: sign of the divisor */
}

/* ScatterND: the data with the slices that the index tuples (the last axis of indices)
 * name replaced by the updates, or combined with them by `reduction` (opset 16+). */
static inferd_code scatter_nd(plan_ctx *c, int node, plan_value *const *in, inferd_status *st) {
  const plan_value *data = in[0], *indices = in[1], *updates = in[2];
  const char *reduction = ir_attr_string(plan_node(c, node), "reduction", "none");
  static const char *const reductions[] = {"none", "add", "mul", "max", "min"};
  int red = -1;
  for (int i = 0; i < (int)CORE_ARRAY_LEN(reductions); i++)
    if (strcmp(reduction, reductions[i]) == 0) red = i;
  if (red < 0) return node_fail(c, node, INFERD_INVALID_ARG, st, "reduction '%s' is not one of ONNX's", reduction);
  if (indices->dtype != INFERD_DTYPE_INT64 || indices->rank < 1)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "indices must be int64 of rank 1 or more");
  if (updates->dtype != data->dtype)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "updates are %s, data %s", core_dtype_name(updates->dtype),
                     core_dtype_name(data->dtype));
  const int q = indices->rank, r = data->rank;
  const int64_t k = indices->dims[q - 1];
  if (k < 0 || k > r) return node_fail(c, node, INFERD_INVALID_ARG, st, "index tuples of %lld for data of rank %d",
                                       (long long)k, r);
  /* updates' shape: indices' without its last axis, then data's from axis k on */
  bool shape_ok = updates->rank == q - 1 + r - (int)k;
  for (int i = 0; shape_ok && i < updates->rank; i++)
    shape_ok = updates->dims[i] == (i < q - 1 ? indices->dims[i] : data->dims[(int)k + i - (q - 1)]);
  if (!shape_ok)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "updates do not have the shape that indices and data give");
  int64_t count = core_shape_count(r, data->dims), tuples = core_shape_count(q - 1, indices->dims);
  int64_t slice = core_shape_count(r - (int)k, data->dims + k);
  if (count < 0 || count > FOLD_MAX_ELEMENTS || tuples > FOLD_MAX_ELEMENTS)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "result too large to fold");
  size_t es = core_dtype_size(data->dtype);
  char *out = malloc((size_t)(count ? count : 1) * es);
  if (!out) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  memcpy(out, data->data, (size_t)count * es);
  const int64_t *idx = indices->data;
  for (int64_t t = 0; t < tuples && slice > 0; t++) {
    int64_t at = 0;
    for (int j = 0; j < k; j++) {
      int64_t i = idx[t * k + j], d = data->dims[j];
      if (i < -d || i >= d) {
        free(out);
        return node_fail(c, node, INFERD_INVALID_ARG, st, "index %lld out of range for axis %d of size %lld",
                         (long long)i, j, (long long)d);
      }
      at = at * d + (i < 0 ? i + d : i);
    }
    at *= slice;
    if (red == 0) {
      memcpy(out + (size_t)at * es, (const char *)updates->data + (size_t)(t * slice) * es, (size_t)slice * es);
      continue;
    }
    for (int64_t e = 0; e < slice; e++) {
      long double x = engine_elem_get(data->dtype, out, at + e), u = get(updates, t * slice + e);
      engine_elem_put(data->dtype, out, at + e,
                      red == 1 ? x + u : red == 2 ? x * u : red == 3 ? fmaxl(x, u) : fminl(x, u));
    }
  }
  inferd_code rc = plan_set_const(c, plan_node(c, node)->outputs[0], data->dtype, r, data->dims, out, st);
  free(out);
  return rc;
}

inferd_code ops_fold_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  op_kind op = plan_extra(c, node)->op;
  if (n->n_outputs != 1 || n->n_inputs < 1 || n->n_inputs > 3)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "wrong number of inputs or outputs");
  plan_value *in[3];
  for (int k = 0; op == OP_WHERE && k < n->n_inputs; k++) /* a mask computed at run time */
    if (n->inputs[k] != IR_NONE && !plan_val(c, n->inputs[k])->is_const) return ops_where_lower(c, node, st);
  for (int k = 0; k < n->n_inputs; k++) {
    if (n->inputs[k] == IR_NONE) return node_fail(c, node, INFERD_UNSUPPORTED, st, "omitted inputs are not supported");
    in[k] = plan_val(c, n->inputs[k]);
    if (!in[k]->is_const || !in[k]->data)
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "supported only on constants and shapes, not on tensors computed at run time");
    if (!core_dtype_size(in[k]->dtype)) return node_fail(c, node, INFERD_UNSUPPORTED, st, "data type not supported");
  }
  /* Equal's and Mod's operands, Where's X and Y and Range's three inputs share one type
   * T: a mixed pair was computed anyway (Range(int64 0, int64 3, float 0.5) became the
   * int64 [0, 0, 1, 1, 2, 2]) */
  int first_t = op == OP_WHERE ? 1 : 0, last_t = op == OP_WHERE ? 2 : op == OP_RANGE ? 2 : 1;
  if (op == OP_EQUAL || op == OP_MOD || op == OP_WHERE || op == OP_RANGE)
    for (int k = first_t + 1; k <= last_t && k < n->n_inputs; k++)
      if (in[k]->dtype != in[first_t]->dtype)
        return node_fail(c, node, INFERD_INVALID_ARG, st, "inputs %d and %d have different types (%s, %s)", first_t, k,
                         core_dtype_name(in[first_t]->dtype), core_dtype_name(in[k]->dtype));
  int rank = 0;
  int64_t dims[IR_MAX_RANK];
  switch (op) {
  case OP_SCATTERND:
    if (n->n_inputs != 3) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs data, indices and updates");
    return scatter_nd(c, node, in, st);
  case OP_CONSTANTOFSHAPE: {
    int64_t count = core_shape_count(in[0]->rank, in[0]->dims);
    if (in[0]->dtype != INFERD_DTYPE_INT64 || count > IR_MAX_RANK)
      return node_fail(c, node, INFERD_INVALID_ARG, st, "shape must be an int64 vector");
    rank = (int)count;
    for (int i = 0; i < rank; i++)
      if ((dims[i] = ((const int64_t *)in[0]->data)[i]) < 0) return node_fail(c, node, INFERD_INVALID_ARG, st, "negative dim");
    const ir_attr *a = ir_node_attr(n, "value");
    plan_value fill = {.dtype = INFERD_DTYPE_FLOAT, .rank = 0, .data = &(float){0.0f}, .is_const = true};
    if (a && a->type == IR_ATTR_TENSOR) {
      const ir_value *t = &plan_graph(c)->values[a->tensor];
      if (ir_value_count(t) != 1 || !t->data) return node_fail(c, node, INFERD_INVALID_ARG, st, "value must have one element");
      fill = (plan_value){.dtype = t->dtype, .rank = 0, .data = t->data, .is_const = true};
    }
    plan_value *src[1] = {&fill};
    return emit(c, node, fill.dtype, rank, dims, f_first, src, 1, NULL, st);
  }
  case OP_EXPAND: {
    if (n->n_inputs != 2 || in[1]->dtype != INFERD_DTYPE_INT64)
      return node_fail(c, node, INFERD_INVALID_ARG, st, "needs data and an int64 shape");
    plan_value shape = {.rank = (int)core_shape_count(in[1]->rank, in[1]->dims)};
    if (shape.rank > IR_MAX_RANK) return node_fail(c, node, INFERD_UNSUPPORTED, st, "rank too large");
    for (int i = 0; i < shape.rank; i++) shape.dims[i] = ((const int64_t *)in[1]->data)[i];
    if (!ops_broadcast_shape(in[0], &shape, &rank, dims))
      return node_fail(c, node, INFERD_INVALID_ARG, st, "shape does not broadcast with the input");
    return emit(c, node, in[0]->dtype, rank, dims, f_first, in, 1, NULL, st);
  }
  case OP_EQUAL:
  case OP_MOD:
  case OP_WHERE:
  case OP_NOT: {
    int want = op == OP_WHERE ? 3 : op == OP_NOT ? 1 : 2;
    if (n->n_inputs != want) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs %d inputs", want);
    if (!broadcast3(in, want, &rank, dims)) return node_fail(c, node, INFERD_INVALID_ARG, st, "shapes do not broadcast");
    int fmod_attr = ir_attr_int(n, "fmod", 0) != 0;
    /* ONNX: Where's condition and Not's input are bool, and a float Mod must say
     * fmod=1 (ONNX Runtime refuses the rest too); read as numbers they were computed */
    if ((op == OP_WHERE || op == OP_NOT) && in[0]->dtype != INFERD_DTYPE_BOOL)
      return node_fail(c, node, INFERD_INVALID_ARG, st, "input 0 must be bool, not %s", core_dtype_name(in[0]->dtype));
    if (op == OP_MOD && !fmod_attr && in[0]->dtype == INFERD_DTYPE_FLOAT)
      return node_fail(c, node, INFERD_INVALID_ARG, st, "a %s Mod needs fmod=1", core_dtype_name(in[0]->dtype));
    if (op == OP_EQUAL) return emit(c, node, INFERD_DTYPE_BOOL, rank, dims, f_equal, in, 2, NULL, st);
    if (op == OP_NOT) return emit(c, node, INFERD_DTYPE_BOOL, rank, dims, f_not, in, 1, NULL, st);
    if (op == OP_MOD) return emit(c, node, in[0]->dtype, rank, dims, f_mod, in, 2, &fmod_attr, st);
    return emit(c, node, in[1]->dtype, rank, dims, f_where, in, 3, NULL, st);
  }
  default: { /* Range */
    if (n->n_inputs != 3) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs start, limit and delta");
    for (int k = 0; k < 3; k++)
      if (core_shape_count(in[k]->rank, in[k]->dims) != 1)
        return node_fail(c, node, INFERD_INVALID_ARG, st, "start, limit and delta must be scalars");
    long double start = get(in[0], 0), limit = get(in[1], 0), delta = get(in[2], 0);
    if (delta == 0) return node_fail(c, node, INFERD_INVALID_ARG, st, "delta is zero");
    long double size = fmaxl(ceill((limit - start) / delta), 0); /* bounded before the cast: 1e30 has no int64 */
    if (size > FOLD_MAX_ELEMENTS) return node_fail(c, node, INFERD_UNSUPPORTED, st, "range too large");
    int64_t count = (int64_t)size;
    void *out = malloc((size_t)(count ? count : 1) * 8);
    if (!out) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    for (int64_t i = 0; i < count; i++) engine_elem_put(in[0]->dtype, out, i, start + (long double)i * delta);
    inferd_code rc = plan_set_const(c, n->outputs[0], in[0]->dtype, 1, &count, out, st);
    free(out);
    return rc;
  }
  }
}
