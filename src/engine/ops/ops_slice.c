/*
 * ops_slice.c - Slice, Split and Pad: windows into a tensor and frames around one.
 *
 * At run time all three are oneDNN reorders between a plain tensor and a window of
 * another (dnnl_memory_desc_init_submemory): Slice and Split read a window of the
 * input (with steps above 1, a window whose strides are the input's times the
 * steps), Pad fills its output with the constant and writes the input into the
 * window. Constant inputs (shape arithmetic) are sliced here at plan time, negative
 * steps included (torch.onnx reverses F.pad's list with one); a tensor computed at
 * run time is sliced with positive steps only. Pad supports modes "constant", "edge"
 * and "reflect" without negative pads: after the input is written into its window,
 * each padded axis in turn gets its border filled one slice at a time, each slice a
 * reorder from the one it mirrors (reflect) or from the outermost input slice (edge),
 * spanning the axes already padded in full.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

/* Copies the window (start, step per axis; out dims) of a dense constant. */
static void copy_window(const char *src, char *dst, size_t es, int rank, const int64_t *dims, const int64_t *start,
                        const int64_t *step, const int64_t *odims) {
  int64_t strides[IR_MAX_RANK], idx[IR_MAX_RANK] = {0}, s = 1;
  for (int i = rank - 1; i >= 0; i--) strides[i] = s, s *= dims[i];
  int64_t count = core_shape_count(rank, odims);
  for (int64_t e = 0; e < count; e++) {
    int64_t off = 0;
    for (int i = 0; i < rank; i++) off += (start[i] + idx[i] * step[i]) * strides[i];
    memcpy(dst + (size_t)e * es, src + (size_t)off * es, es);
    for (int i = rank - 1; i >= 0 && ++idx[i] == odims[i]; i--) idx[i] = 0;
  }
}

/* out = window of input `in` at `start` (steps 1) with dims `odims`. */
static inferd_code emit_window(plan_ctx *c, int node, int in, int out, const int64_t *start, const int64_t *step,
                               const int64_t *odims, inferd_status *st) {
  plan_value *iv = plan_val(c, in), *ov = plan_val(c, out);
  ov->dtype = iv->dtype;
  ov->rank = iv->rank;
  memcpy(ov->dims, odims, (size_t)iv->rank * sizeof *odims);
  if (iv->is_const) {
    if (!iv->data) return node_fail(c, node, INFERD_INTERNAL, st, "constant data was released");
    size_t es = core_dtype_size(iv->dtype);
    int64_t count = core_shape_count(iv->rank, odims);
    char *tmp = malloc((size_t)(count ? count : 1) * es);
    if (!tmp) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    copy_window(iv->data, tmp, es, iv->rank, iv->dims, start, step, odims);
    inferd_code rc = plan_set_const(c, out, iv->dtype, iv->rank, odims, tmp, st);
    free(tmp);
    return rc;
  }
  bool strided = false;
  for (int i = 0; i < iv->rank; i++) {
    if (step[i] < 0 && odims[i] > 1)
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "negative steps on tensors computed at run time");
    strided |= step[i] != 1 && odims[i] > 1;
  }
  dnnl_memory_desc_t plain, win_md, out_md;
  md_plain(&plain, iv->rank, iv->dims, iv->dtype);
  plan_ref src;
  inferd_code rc = plan_src(c, in, &plain, &src, st);
  if (rc != INFERD_OK) return rc;
  dnnl_dims_t wd, wo, ws;
  dnnl_dim_t offset = 0;
  for (int i = 0; i < iv->rank; i++) {
    const dnnl_dim_t stride = plain.format_desc.blocking.strides[i];
    wd[i] = odims[i], wo[i] = start[i], ws[i] = stride * (odims[i] > 1 ? step[i] : 1);
    offset += stride * start[i];
  }
  if (strided) {
    /* every step-th element: the input's strides times the steps, from the window's start.
     * dnnl_memory_desc_init_by_strides refuses such strides (it takes each axis to span
     * dims x stride, so a stepped axis seems to overlap the next), hence a dense window
     * whose strides are then set here: the reorder reads each element at its strides. */
    if (dnnl_memory_desc_init_by_strides(&win_md, iv->rank, wd, plain.data_type, NULL) != dnnl_success)
      return node_fail(c, node, INFERD_INTERNAL, st, "oneDNN could not describe the strided window");
    for (int i = 0; i < iv->rank; i++) win_md.format_desc.blocking.strides[i] = ws[i];
    win_md.offset0 = offset;
  } else if (dnnl_memory_desc_init_submemory(&win_md, &plain, wd, wo) != dnnl_success) {
    return node_fail(c, node, INFERD_INTERNAL, st, "oneDNN could not describe the window");
  }
  src.md = win_md;
  md_plain(&out_md, iv->rank, odims, iv->dtype);
  if ((rc = plan_define(c, out, &out_md, st)) != INFERD_OK) return rc;
  return plan_emit_reorder(c, node, &src, &ov->ref, st);
}

inferd_code ops_slice_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  if (n->n_inputs < 1 || n->inputs[0] == IR_NONE) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs an input");
  plan_value *iv = plan_val(c, n->inputs[0]);
  int rank = iv->rank;
  int64_t start[IR_MAX_RANK] = {0}, step[IR_MAX_RANK], odims[IR_MAX_RANK];
  for (int i = 0; i < rank; i++) step[i] = 1, odims[i] = iv->dims[i];

  if (plan_extra(c, node)->op == OP_SPLIT) {
    int64_t axis_attr = ir_attr_int(n, "axis", 0);
    if (axis_attr < 0) axis_attr += rank;
    if (axis_attr < 0 || axis_attr >= rank) return node_fail(c, node, INFERD_INVALID_ARG, st, "axis out of range");
    int axis = (int)axis_attr;
    int64_t sizes[64];
    int ns = n->n_inputs > 1 ? ops_const_ints(c, n->inputs[1], sizes, 64) : -1;
    if (ns == -2) return node_fail(c, node, INFERD_UNSUPPORTED, st, "split sizes must be a constant");
    if (ns < 0) {
      const int64_t *a;
      ns = ir_attr_ints(n, "split", &a);
      if (ns > 64) return node_fail(c, node, INFERD_UNSUPPORTED, st, "too many parts");
      if (ns) memcpy(sizes, a, (size_t)ns * sizeof *a); /* a is NULL when there are none */
    }
    if (ns == 0) {
      /* opset 18's num_outputs: parts of ceil(dim / n), the last one smaller when it
       * does not divide (before it, and without it, n outputs must divide evenly) */
      int64_t parts = ir_attr_int(n, "num_outputs", 0);
      if (parts && parts != n->n_outputs)
        return node_fail(c, node, INFERD_INVALID_ARG, st, "num_outputs %lld for %d outputs", (long long)parts,
                         n->n_outputs);
      ns = n->n_outputs;
      int64_t dim = iv->dims[axis], part = ns > 0 ? (dim + ns - 1) / ns : 0;
      if (ns < 1 || ns > 64 || (dim % ns && (!parts || dim - part * (ns - 1) <= 0)))
        return node_fail(c, node, INFERD_INVALID_ARG, st, "cannot split %lld into %d parts", (long long)dim, ns);
      for (int k = 0; k < ns; k++) sizes[k] = dim % ns ? (k < ns - 1 ? part : dim - part * (ns - 1)) : dim / ns;
    }
    if (ns != n->n_outputs) return node_fail(c, node, INFERD_INVALID_ARG, st, "%d sizes for %d outputs", ns, n->n_outputs);
    int64_t at = 0;
    for (int k = 0; k < ns; k++) {
      if (sizes[k] < 0 || sizes[k] > iv->dims[axis] - at)
        return node_fail(c, node, INFERD_INVALID_ARG, st, "split sizes exceed dimension %d", axis);
      start[axis] = at;
      odims[axis] = sizes[k];
      at += sizes[k];
      if (n->outputs[k] == IR_NONE) continue;
      inferd_code rc = emit_window(c, node, n->inputs[0], n->outputs[k], start, step, odims, st);
      if (rc != INFERD_OK) return rc;
    }
    if (at != iv->dims[axis]) return node_fail(c, node, INFERD_INVALID_ARG, st, "split sizes do not add up");
    return INFERD_OK;
  }

  /* Slice (opset 10+): starts, ends, axes, steps as constant inputs */
  int64_t starts[IR_MAX_RANK], ends[IR_MAX_RANK], axes[IR_MAX_RANK], steps[IR_MAX_RANK];
  if (n->n_inputs < 3 || n->n_outputs != 1) return node_fail(c, node, INFERD_UNSUPPORTED, st, "needs starts and ends inputs (opset 10+)");
  int k = ops_const_ints(c, n->inputs[1], starts, IR_MAX_RANK);
  if (k < 0 || ops_const_ints(c, n->inputs[2], ends, IR_MAX_RANK) != k)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "starts and ends must be constants of equal length");
  int ka = n->n_inputs > 3 ? ops_const_ints(c, n->inputs[3], axes, IR_MAX_RANK) : -1;
  int ks = n->n_inputs > 4 ? ops_const_ints(c, n->inputs[4], steps, IR_MAX_RANK) : -1;
  if (ka == -2 || ks == -2 || (ka >= 0 && ka != k) || (ks >= 0 && ks != k))
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "axes and steps must be constants matching starts");
  for (int j = 0; j < k; j++) {
    int64_t axis = ka >= 0 ? (axes[j] < 0 ? axes[j] + rank : axes[j]) : j;
    if (axis < 0 || axis >= rank) return node_fail(c, node, INFERD_INVALID_ARG, st, "axis out of range");
    int a = (int)axis;
    int64_t s = ks >= 0 ? steps[j] : 1, d = iv->dims[a];
    if (s == 0) return node_fail(c, node, INFERD_INVALID_ARG, st, "a step of 0");
    int64_t b = starts[j] < 0 ? starts[j] + d : starts[j], e = ends[j] < 0 ? ends[j] + d : ends[j];
    if (s > 0) {
      b = CORE_MAX(0, CORE_MIN(b, d));
      e = CORE_MAX(0, CORE_MIN(e, d));
      odims[a] = e > b ? (e - b - 1) / s + 1 : 0; /* ceil((e - b) / s), with no room to overflow */
    } else { /* backwards from b down to e (exclusive): b in [0, d - 1], e in [-1, d - 1] */
      b = CORE_MAX(0, CORE_MIN(b, d - 1));
      e = CORE_MAX(-1, CORE_MIN(e, d - 1));
      s = CORE_MAX(s, -d - 1); /* a step past the whole axis takes one element; -s cannot overflow */
      odims[a] = d > 0 && b > e ? (b - e - 1) / -s + 1 : 0;
    }
    start[a] = b;
    step[a] = s;
  }
  return emit_window(c, node, n->inputs[0], n->outputs[0], start, step, odims, st);
}

/* Most slice copies a non-constant Pad may emit: a few per image axis in practice. */
enum { PAD_MAX_SLICES = 256 };

/* Fills the border of the output `dst` (dims `od`) around the input window (dims `id`
 * at `pads`) by copying slices of the output onto it, axis by axis (see the top). */
static inferd_code pad_border(plan_ctx *c, int node, const plan_ref *dst, int rank, const int64_t *od,
                              const int64_t *id, const int64_t *pads, bool reflect, inferd_status *st) {
  int slices = 0;
  for (int i = 0; i < rank; i++) {
    if ((pads[i] || pads[i + rank]) && (reflect ? CORE_MAX(pads[i], pads[i + rank]) >= id[i] : id[i] == 0))
      return node_fail(c, node, INFERD_INVALID_ARG, st, "axis %d of size %lld cannot take pads %lld, %lld in %s mode",
                       i, (long long)id[i], (long long)pads[i], (long long)pads[i + rank],
                       reflect ? "reflect" : "edge");
    slices += (int)CORE_MIN(pads[i] + pads[i + rank], PAD_MAX_SLICES + 1);
    if (slices > PAD_MAX_SLICES)
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "more than %d padded slices in mode '%s'", PAD_MAX_SLICES,
                       reflect ? "reflect" : "edge");
  }
  for (int i = 0; i < rank; i++) {
    dnnl_dims_t wd, from, to;
    for (int j = 0; j < rank; j++) {
      wd[j] = j < i ? od[j] : id[j]; /* axes before i are padded already */
      from[j] = to[j] = j < i ? 0 : pads[j];
    }
    wd[i] = 1;
    const int64_t b = pads[i], e = pads[i + rank], d = id[i];
    for (int64_t k = 0; k < b + e; k++) {
      if (k < b) to[i] = b - 1 - k, from[i] = reflect ? b + 1 + k : b;
      else to[i] = b + d + (k - b), from[i] = reflect ? b + d - 2 - (k - b) : b + d - 1;
      plan_ref src = *dst, out = *dst;
      if (dnnl_memory_desc_init_submemory(&src.md, &dst->md, wd, from) != dnnl_success ||
          dnnl_memory_desc_init_submemory(&out.md, &dst->md, wd, to) != dnnl_success)
        return node_fail(c, node, INFERD_INTERNAL, st, "oneDNN could not describe the border");
      inferd_code rc = plan_emit_reorder(c, node, &src, &out, st);
      if (rc != INFERD_OK) return rc;
    }
  }
  return INFERD_OK;
}

static void fill_step(const plan_step *s, void *const *ptrs) {
  float value;
  memcpy(&value, &s->params[1], sizeof value);
  float *dst = ptrs[0];
  if (value == 0.0f) memset(dst, 0, (size_t)s->params[0] * sizeof *dst);
  else
    for (int64_t i = 0; i < s->params[0]; i++) dst[i] = value;
}

inferd_code ops_pad_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  if (n->n_inputs < 2 || n->n_outputs != 1) return node_fail(c, node, INFERD_UNSUPPORTED, st, "needs pads as an input (opset 11+)");
  const char *mode = ir_attr_string(n, "mode", "constant");
  bool reflect = strcmp(mode, "reflect") == 0, edge = strcmp(mode, "edge") == 0;
  if (!reflect && !edge && strcmp(mode, "constant") != 0)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "mode '%s' is not supported", mode);
  plan_value *iv = plan_val(c, n->inputs[0]), *ov = plan_val(c, n->outputs[0]);
  if (iv->dtype != INFERD_DTYPE_FLOAT || iv->is_const)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "needs a float32 input computed at run time");
  /* opset 18 added `axes`: pads then hold a begin and an end for each of those axes */
  int64_t axes[IR_MAX_RANK], given[2 * IR_MAX_RANK], pads[2 * IR_MAX_RANK] = {0};
  int na = n->n_inputs > 3 ? ops_const_ints(c, n->inputs[3], axes, IR_MAX_RANK) : -1;
  if (na == -2) return node_fail(c, node, INFERD_UNSUPPORTED, st, "axes must be a constant of at most %d values", IR_MAX_RANK);
  if (na < 0) {
    na = iv->rank;
    for (int i = 0; i < na; i++) axes[i] = i;
  }
  if (ops_const_ints(c, n->inputs[1], given, 2 * IR_MAX_RANK) != 2 * na)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "pads must be a constant of %d values", 2 * na);
  bool seen[IR_MAX_RANK] = {0};
  for (int j = 0; j < na; j++) {
    int64_t a = axes[j] < 0 ? axes[j] + iv->rank : axes[j];
    if (a < 0 || a >= iv->rank || seen[a])
      return node_fail(c, node, INFERD_INVALID_ARG, st, "axis %lld out of range or repeated", (long long)axes[j]);
    seen[a] = true;
    pads[a] = given[j];
    pads[a + iv->rank] = given[j + na];
  }
  float value = 0.0f;
  if (n->n_inputs > 2 && n->inputs[2] != IR_NONE) {
    plan_value *cv = plan_val(c, n->inputs[2]);
    if (!cv->is_const || !cv->data || cv->dtype != INFERD_DTYPE_FLOAT || core_shape_count(cv->rank, cv->dims) != 1)
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "constant_value must be a float constant of one element");
    value = *(const float *)cv->data;
  }
  ov->dtype = iv->dtype;
  ov->rank = iv->rank;
  dnnl_dims_t wd, wo;
  for (int i = 0; i < iv->rank; i++) {
    if (pads[i] < 0 || pads[i + iv->rank] < 0) return node_fail(c, node, INFERD_UNSUPPORTED, st, "negative pads");
    if (pads[i] > INT64_MAX - iv->dims[i] || pads[i + iv->rank] > INT64_MAX - iv->dims[i] - pads[i])
      return node_fail(c, node, INFERD_INVALID_ARG, st, "output shape too large");
    ov->dims[i] = iv->dims[i] + pads[i] + pads[i + iv->rank];
    wd[i] = iv->dims[i];
    wo[i] = pads[i];
  }
  if (core_shape_count(ov->rank, ov->dims) < 0) return node_fail(c, node, INFERD_INVALID_ARG, st, "output shape too large");
  dnnl_memory_desc_t out_md, win_md;
  md_plain(&out_md, ov->rank, ov->dims, ov->dtype);
  plan_ref src;
  inferd_code rc = plan_src(c, n->inputs[0], NULL, &src, st);
  if (rc != INFERD_OK) return rc;
  if ((rc = plan_define(c, n->outputs[0], &out_md, st)) != INFERD_OK) return rc;
  int64_t params[2] = {core_shape_count(ov->rank, ov->dims), 0};
  memcpy(&params[1], &value, sizeof value);
  if (!reflect && !edge && (rc = plan_emit_custom(c, node, OP_PAD, fill_step, 1, &ov->ref, params, 2, st)))
    return rc;
  if (dnnl_memory_desc_init_submemory(&win_md, &out_md, wd, wo) != dnnl_success)
    return node_fail(c, node, INFERD_INTERNAL, st, "oneDNN could not describe the window");
  plan_ref dst = ov->ref;
  dst.md = win_md;
  if ((rc = plan_emit_reorder(c, node, &src, &dst, st)) != INFERD_OK || !(reflect || edge)) return rc;
  return pad_border(c, node, &ov->ref, ov->rank, ov->dims, iv->dims, pads, reflect, st);
}
