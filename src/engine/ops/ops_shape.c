/*
 * ops_shape.c - ops that move or describe data rather than compute on it:
 * Flatten, Reshape, Squeeze, Unsqueeze, Identity, Dropout (views), Transpose, Shape,
 * Gather, Cast (Concat and Softmax are in ops_concat.c).
 *
 * Views never copy: the output is the input's bytes with another shape, which needs
 * the input in plain layout (a reorder is inserted when a convolution chain left it
 * blocked). With the batch size fixed per plan, Shape is a constant, and so is all of
 * the shape arithmetic after it: Gather, Concat, Cast and friends on constants are
 * computed here, once per plan.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

static inferd_code set_shape(plan_ctx *c, int node, int v, inferd_dtype dtype, int rank, const int64_t *dims,
                             inferd_status *st) {
  if (rank > IR_MAX_RANK) return node_fail(c, node, INFERD_UNSUPPORTED, st, "rank %d above %d", rank, IR_MAX_RANK);
  plan_value *pv = plan_val(c, v);
  pv->dtype = dtype;
  pv->rank = rank;
  memcpy(pv->dims, dims, (size_t)rank * sizeof *dims);
  return INFERD_OK;
}

int ops_const_ints(plan_ctx *c, int v, int64_t *out, int max) {
  if (v == IR_NONE) return -1;
  plan_value *pv = plan_val(c, v);
  int64_t n = core_shape_count(pv->rank, pv->dims);
  if (!pv->is_const || !pv->data || n < 0 || n > max) return -2;
  for (int64_t i = 0; i < n; i++)
    if (pv->dtype == INFERD_DTYPE_INT64) out[i] = ((const int64_t *)pv->data)[i];
    else if (pv->dtype == INFERD_DTYPE_INT32) out[i] = ((const int32_t *)pv->data)[i];
    else return -2;
  return (int)n;
}

/* Output `out` = input `in` with a new shape (already set on out). */
static inferd_code view(plan_ctx *c, int node, int in, int out, inferd_status *st) {
  plan_value *iv = plan_val(c, in), *ov = plan_val(c, out);
  if (core_shape_count(iv->rank, iv->dims) != core_shape_count(ov->rank, ov->dims))
    return node_fail(c, node, INFERD_INVALID_ARG, st, "cannot reshape %lld elements into %lld",
                     (long long)core_shape_count(iv->rank, iv->dims), (long long)core_shape_count(ov->rank, ov->dims));
  if (iv->is_const) {
    if (!iv->data) return node_fail(c, node, INFERD_INTERNAL, st, "constant data was released");
    int64_t dims[IR_MAX_RANK];
    memcpy(dims, ov->dims, sizeof dims);
    return plan_set_const(c, out, iv->dtype, ov->rank, dims, iv->data, st);
  }
  dnnl_memory_desc_t plain, out_md;
  md_plain(&plain, iv->rank, iv->dims, iv->dtype);
  plan_ref r;
  inferd_code rc = plan_src(c, in, &plain, &r, st);
  if (rc != INFERD_OK) return rc;
  md_plain(&out_md, ov->rank, ov->dims, ov->dtype);
  ov->defined = true;
  ov->ref = r;
  ov->ref.md = out_md;
  return INFERD_OK;
}

/* A negative axis counts from the end; an axis outside [-rank, rank] becomes -1, out
 * of range for every caller, rather than an int64 truncated to some valid int. */
static int norm_axis(int64_t axis, int rank) {
  if (axis < -rank || axis > rank) return -1;
  return (int)(axis < 0 ? axis + rank : axis);
}

inferd_code ops_reshape_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  op_kind op = plan_extra(c, node)->op;
  if (n->n_inputs < 1 || n->inputs[0] == IR_NONE || n->n_outputs < 1)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "needs an input and an output");
  plan_value *iv = plan_val(c, n->inputs[0]);
  int64_t dims[IR_MAX_RANK + 1];
  int rank = 0;
  switch (op) {
  case OP_FLATTEN: {
    int axis = norm_axis(ir_attr_int(n, "axis", 1), iv->rank);
    if (axis < 0 || axis > iv->rank) return node_fail(c, node, INFERD_INVALID_ARG, st, "axis out of range");
    dims[0] = core_shape_count(axis, iv->dims);
    dims[1] = core_shape_count(iv->rank - axis, iv->dims + axis);
    rank = 2;
    break;
  }
  case OP_RESHAPE: {
    int64_t shape[IR_MAX_RANK];
    int ns = ops_const_ints(c, n->n_inputs > 1 ? n->inputs[1] : IR_NONE, shape, IR_MAX_RANK);
    if (ns < 0) return node_fail(c, node, INFERD_UNSUPPORTED, st, "the shape must be a constant (or computed from shapes)");
    bool allowzero = ir_attr_int(n, "allowzero", 0) != 0;
    int infer = -1;
    int64_t known = 1;
    for (int i = 0; i < ns; i++) {
      dims[i] = shape[i] == 0 && !allowzero ? (i < iv->rank ? iv->dims[i] : -2) : shape[i];
      if (dims[i] == -1) {
        if (infer >= 0) return node_fail(c, node, INFERD_INVALID_ARG, st, "more than one -1 in the shape");
        infer = i;
      } else if (dims[i] < 0) {
        return node_fail(c, node, INFERD_INVALID_ARG, st, "bad shape value %lld", (long long)shape[i]);
      } else {
        if (dims[i] > 0 && known > INT64_MAX / dims[i])
          return node_fail(c, node, INFERD_INVALID_ARG, st, "shape too large");
        known *= dims[i];
      }
    }
    if (infer >= 0) {
      int64_t total = core_shape_count(iv->rank, iv->dims);
      if (known == 0 || total % known) return node_fail(c, node, INFERD_INVALID_ARG, st, "cannot infer the -1 dimension");
      dims[infer] = total / known;
    }
    rank = ns;
    break;
  }
  case OP_SQUEEZE:
  case OP_UNSQUEEZE: {
    int64_t axes[IR_MAX_RANK];
    int na = n->n_inputs > 1 ? ops_const_ints(c, n->inputs[1], axes, IR_MAX_RANK) : -1;
    if (na == -2) return node_fail(c, node, INFERD_UNSUPPORTED, st, "axes must be a constant");
    if (na < 0) {
      const int64_t *a;
      na = ir_attr_ints(n, "axes", &a);
      if (na > IR_MAX_RANK) return node_fail(c, node, INFERD_INVALID_ARG, st, "too many axes");
      if (na) memcpy(axes, a, (size_t)na * sizeof *a);
    }
    bool mark[IR_MAX_RANK + 1] = {0};
    int out_rank = op == OP_UNSQUEEZE ? iv->rank + na : iv->rank;
    if (out_rank > IR_MAX_RANK) return node_fail(c, node, INFERD_UNSUPPORTED, st, "rank above %d", IR_MAX_RANK);
    for (int i = 0; i < na; i++) {
      int a = norm_axis(axes[i], out_rank);
      if (a < 0 || a >= out_rank || mark[a]) return node_fail(c, node, INFERD_INVALID_ARG, st, "bad axis %lld", (long long)axes[i]);
      mark[a] = true;
    }
    if (op == OP_UNSQUEEZE) {
      for (int i = 0, j = 0; i < out_rank; i++) dims[rank++] = mark[i] ? 1 : iv->dims[j++];
    } else {
      for (int i = 0; i < iv->rank; i++) {
        bool drop = na ? mark[i] : iv->dims[i] == 1;
        if (drop && iv->dims[i] != 1) return node_fail(c, node, INFERD_INVALID_ARG, st, "axis %d is not of size 1", i);
        if (!drop) dims[rank++] = iv->dims[i];
      }
    }
    break;
  }
  default: /* Identity, Dropout kept because they produce a graph output */
    rank = iv->rank;
    memcpy(dims, iv->dims, sizeof iv->dims);
  }
  inferd_code rc = set_shape(c, node, n->outputs[0], iv->dtype, rank, dims, st);
  return rc != INFERD_OK ? rc : view(c, node, n->inputs[0], n->outputs[0], st);
}

/* Generic permutation of a dense constant (small: shape arithmetic, folded weights). */
static void permute(const void *src, void *dst, size_t es, int rank, const int64_t *dims, const int64_t *perm) {
  int64_t strides[IR_MAX_RANK], idx[IR_MAX_RANK] = {0}, odims[IR_MAX_RANK];
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) strides[i] = s, s *= dims[i];
  for (int i = 0; i < rank; i++) odims[i] = dims[perm[i]];
  for (int64_t e = 0; e < s; e++) {
    int64_t off = 0;
    for (int i = 0; i < rank; i++) off += idx[i] * strides[perm[i]];
    memcpy((char *)dst + (size_t)e * es, (const char *)src + (size_t)off * es, es);
    for (int i = rank - 1; i >= 0 && ++idx[i] == odims[i]; i--) idx[i] = 0;
  }
}

inferd_code ops_transpose_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  if (n->n_inputs != 1 || n->n_outputs != 1) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs one input");
  plan_value *iv = plan_val(c, n->inputs[0]);
  int64_t perm[IR_MAX_RANK], dims[IR_MAX_RANK];
  const int64_t *p;
  int np = ir_attr_ints(n, "perm", &p);
  if (np && np != iv->rank) return node_fail(c, node, INFERD_INVALID_ARG, st, "perm has %d entries for rank %d", np, iv->rank);
  bool seen[IR_MAX_RANK] = {0};
  for (int i = 0; i < iv->rank; i++) {
    perm[i] = np ? p[i] : iv->rank - 1 - i;
    if (perm[i] < 0 || perm[i] >= iv->rank || seen[perm[i]]) return node_fail(c, node, INFERD_INVALID_ARG, st, "bad perm");
    seen[perm[i]] = true;
    dims[i] = iv->dims[perm[i]];
  }
  if (iv->is_const) {
    if (!iv->data) return node_fail(c, node, INFERD_INTERNAL, st, "constant data was released");
    size_t es = core_dtype_size(iv->dtype);
    void *tmp = malloc(iv->rank ? (size_t)core_shape_count(iv->rank, iv->dims) * es + 1 : es);
    if (!tmp) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    permute(iv->data, tmp, es, iv->rank, iv->dims, perm);
    inferd_code rc = plan_set_const(c, n->outputs[0], iv->dtype, iv->rank, dims, tmp, st);
    free(tmp);
    return rc;
  }
  inferd_code rc = set_shape(c, node, n->outputs[0], iv->dtype, iv->rank, dims, st);
  if (rc != INFERD_OK) return rc;
  dnnl_memory_desc_t plain, out_md;
  md_plain(&plain, iv->rank, iv->dims, iv->dtype);
  plan_ref src;
  if ((rc = plan_src(c, n->inputs[0], &plain, &src, st)) != INFERD_OK) return rc;
  /* the input bytes described with the output's dim order, then a reorder to plain */
  int dperm[IR_MAX_RANK];
  for (int i = 0; i < iv->rank; i++) dperm[perm[i]] = i;
  dnnl_memory_desc_t permuted;
  if (dnnl_memory_desc_permute_axes(&permuted, &plain, dperm) != dnnl_success)
    return node_fail(c, node, INFERD_INTERNAL, st, "oneDNN could not describe the permutation");
  src.md = permuted;
  md_plain(&out_md, iv->rank, dims, iv->dtype);
  if ((rc = plan_define(c, n->outputs[0], &out_md, st)) != INFERD_OK) return rc;
  return plan_emit_reorder(c, node, &src, &plan_val(c, n->outputs[0])->ref, st);
}

static void gather_step(const plan_step *s, void *const *ptrs) {
  /* params: outer, axis size, inner bytes, index count */
  const char *src = ptrs[0];
  const int64_t *idx = ptrs[1];
  char *dst = ptrs[2];
  int64_t outer = s->params[0], axis = s->params[1], inner = s->params[2], n = s->params[3];
  if (n == 0 || inner == 0) return; /* an empty result, however large outer is */
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < n; j++) {
      int64_t k = idx[j] < 0 ? idx[j] + axis : idx[j];
      memcpy(dst + (o * n + j) * inner, src + (o * axis + k) * inner, (size_t)inner);
    }
}

inferd_code ops_shape_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  op_kind op = plan_extra(c, node)->op;
  if (n->n_inputs < 1 || n->inputs[0] == IR_NONE || n->n_outputs != 1)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "needs an input and one output");
  plan_value *iv = plan_val(c, n->inputs[0]);
  if (op == OP_SHAPE) {
    /* out-of-range start and end are clamped, as the spec says */
    int64_t start = ir_attr_int(n, "start", 0), end = ir_node_attr(n, "end") ? ir_attr_int(n, "end", 0) : iv->rank;
    if (start < 0) start += iv->rank;
    if (end < 0) end += iv->rank;
    start = CORE_MAX(0, CORE_MIN(start, iv->rank));
    end = CORE_MAX(start, CORE_MIN(end, iv->rank));
    int64_t len = end - start;
    return plan_set_const(c, n->outputs[0], INFERD_DTYPE_INT64, 1, &len, iv->dims + start, st);
  }
  if (op == OP_CAST) {
    inferd_dtype to = (inferd_dtype)ir_attr_int(n, "to", 0);
    if (!core_dtype_size(to)) return node_fail(c, node, INFERD_UNSUPPORTED, st, "cast to type %d", (int)to);
    if (!iv->is_const) {
      if (to != iv->dtype) return node_fail(c, node, INFERD_UNSUPPORTED, st, "casts of tensors computed at run time");
      inferd_code rc = set_shape(c, node, n->outputs[0], to, iv->rank, iv->dims, st);
      return rc != INFERD_OK ? rc : view(c, node, n->inputs[0], n->outputs[0], st);
    }
    int64_t count = core_shape_count(iv->rank, iv->dims);
    if (!iv->data || count > (1 << 22)) return node_fail(c, node, INFERD_UNSUPPORTED, st, "constant too large to cast");
    void *out = malloc((size_t)(count ? count : 1) * 8);
    if (!out) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    for (int64_t i = 0; i < count; i++) engine_elem_put(to, out, i, engine_elem_get(iv->dtype, iv->data, i));
    inferd_code rc = plan_set_const(c, n->outputs[0], to, iv->rank, iv->dims, out, st);
    free(out);
    return rc;
  }
  /* Gather */
  if (n->n_inputs != 2) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs data and indices");
  plan_value *xv = plan_val(c, n->inputs[1]);
  if (!xv->is_const || !xv->data || (xv->dtype != INFERD_DTYPE_INT64 && xv->dtype != INFERD_DTYPE_INT32))
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "indices must be an int64 or int32 constant");
  int axis = norm_axis(ir_attr_int(n, "axis", 0), iv->rank);
  if (axis < 0 || axis >= iv->rank || iv->rank + xv->rank - 1 > IR_MAX_RANK)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "axis out of range");
  int64_t nidx = core_shape_count(xv->rank, xv->dims);
  int64_t *idx = malloc((size_t)(nidx ? nidx : 1) * sizeof *idx);
  if (!idx) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  inferd_code rc = INFERD_OK;
  for (int64_t j = 0; j < nidx && rc == INFERD_OK; j++) {
    idx[j] = xv->dtype == INFERD_DTYPE_INT64 ? ((const int64_t *)xv->data)[j] : ((const int32_t *)xv->data)[j];
    if (idx[j] < -iv->dims[axis] || idx[j] >= iv->dims[axis])
      rc = node_fail(c, node, INFERD_INVALID_ARG, st, "index %lld out of range for size %lld", (long long)idx[j],
                     (long long)iv->dims[axis]);
  }
  int64_t dims[IR_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < axis; i++) dims[rank++] = iv->dims[i];
  for (int i = 0; i < xv->rank; i++) dims[rank++] = xv->dims[i];
  for (int i = axis + 1; i < iv->rank; i++) dims[rank++] = iv->dims[i];
  /* data and indices shapes are each sound; their combination need not be */
  int64_t count = core_shape_count(rank, dims);
  if (rc == INFERD_OK && count < 0) rc = node_fail(c, node, INFERD_INVALID_ARG, st, "output shape too large");
  if (rc == INFERD_OK && iv->is_const && count > (1 << 24))
    rc = node_fail(c, node, INFERD_UNSUPPORTED, st, "constant output of %lld elements, too large to fold", (long long)count);
  size_t es = core_dtype_size(iv->dtype);
  int64_t params[4] = {core_shape_count(axis, iv->dims), iv->dims[axis],
                       core_shape_count(iv->rank - axis - 1, iv->dims + axis + 1) * (int64_t)es, nidx};
  if (rc == INFERD_OK && iv->is_const) {
    if (!iv->data) rc = node_fail(c, node, INFERD_INTERNAL, st, "constant data was released");
    void *out = rc == INFERD_OK ? malloc((size_t)(params[0] * nidx * params[2] + 1)) : NULL;
    if (rc == INFERD_OK && !out) rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
    if (rc == INFERD_OK) {
      plan_step s = {.params = {params[0], params[1], params[2], params[3]}};
      void *ptrs[3] = {iv->data ? (void *)iv->data : NULL, idx, out};
      gather_step(&s, ptrs);
      rc = plan_set_const(c, n->outputs[0], iv->dtype, rank, dims, out, st);
    }
    free(out);
  } else if (rc == INFERD_OK) {
    /* run time: a plain copy of the selected slices; indices live with the plan */
    int64_t *kept = plan_const_alloc(c, (size_t)(nidx ? nidx : 1) * sizeof *kept);
    dnnl_memory_desc_t plain, out_md;
    md_plain(&plain, iv->rank, iv->dims, iv->dtype);
    plan_ref args[3];
    if (!kept) rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
    if (rc == INFERD_OK) rc = plan_src(c, n->inputs[0], &plain, &args[0], st);
    if (rc == INFERD_OK) rc = set_shape(c, node, n->outputs[0], iv->dtype, rank, dims, st);
    if (rc == INFERD_OK) {
      memcpy(kept, idx, (size_t)nidx * sizeof *kept);
      args[1] = (plan_ref){.kind = REF_WEIGHT, .data = kept};
      md_plain(&args[1].md, 1, &nidx, INFERD_DTYPE_INT64);
      md_plain(&out_md, rank, dims, iv->dtype);
      rc = plan_define(c, n->outputs[0], &out_md, st);
    }
    if (rc == INFERD_OK) {
      args[2] = plan_val(c, n->outputs[0])->ref;
      rc = plan_emit_custom(c, node, OP_GATHER, gather_step, 3, args, params, 4, st);
    }
  }
  free(idx);
  return rc;
}
