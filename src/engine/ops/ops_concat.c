/*
 * ops_concat.c - Concat (oneDNN concat over one layout and one data type for all its
 * inputs, concat_form; plain float32 when the kernel refuses them; constants are
 * joined at plan time)
 * and Softmax and LogSoftmax (oneDNN softmax, its log algorithm for LogSoftmax, on the
 * plain layout; before opset 13 the input is viewed as 2-D around `axis`, as the older
 * definition says).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

enum { CONCAT_MAX = 1024 };

static inferd_code concat_consts(plan_ctx *c, int node, int axis, const int64_t *dims, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  plan_value *first = plan_val(c, n->inputs[0]);
  size_t es = core_dtype_size(first->dtype);
  int64_t outer = core_shape_count(axis, dims), total = core_shape_count(first->rank, dims);
  char *out = malloc((size_t)(total ? total : 1) * es);
  if (!out) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  int64_t inner_out = total / (outer ? outer : 1), at = 0;
  /* an empty result copies nothing (outer may still be 2^62: [2^62, 0] along axis 1) */
  for (int k = 0; k < n->n_inputs && total > 0; k++) {
    plan_value *v = plan_val(c, n->inputs[k]);
    int64_t inner = core_shape_count(v->rank - axis, v->dims + axis);
    if (!v->data) {
      free(out);
      return node_fail(c, node, INFERD_INTERNAL, st, "constant data was released");
    }
    for (int64_t o = 0; o < outer; o++)
      memcpy(out + (size_t)(o * inner_out + at) * es, (const char *)v->data + (size_t)(o * inner) * es, (size_t)inner * es);
    at += inner;
  }
  inferd_code rc = plan_set_const(c, n->outputs[0], first->dtype, first->rank, dims, out, st);
  free(out);
  return rc;
}

/* How a run-time Concat reads its inputs. oneDNN's optimized kernel copies blocks of
 * one layout; given a mix it runs its reference kernel, element by element (a plain or
 * nhwc tensor beside blocked ones: shufflenet_v2's, inception_v3's and, before their
 * empty Pads were dropped, densenet121's Concats, a third of its time). So a mix of
 * 4-D layouts becomes the one that holds most of the bytes, the others reordered to it.
 * With plan_bf16, inputs that are all held in bfloat16 are joined in bfloat16. */
typedef struct concat_form {
  dnnl_format_tag_t tag; /* every input in this layout; dnnl_format_tag_undef: as they are */
  dnnl_data_type_t type;
} concat_form;

/* md for a 4-D shape in one of oneDNN's named layouts */
static void md_by_tag(dnnl_memory_desc_t *md, const int64_t *dims, dnnl_data_type_t type, dnnl_format_tag_t tag) {
  dnnl_dims_t d = {dims[0], dims[1], dims[2], dims[3]};
  if (dnnl_memory_desc_init_by_tag(md, 4, d, type, tag) != dnnl_success) memset(md, 0, sizeof *md);
}

/* The concat of mds into dst; NULL where oneDNN refuses it, or offers only its reference
 * kernel and reference_ok is false. */
static dnnl_primitive_desc_t concat_pd(plan_ctx *c, const dnnl_memory_desc_t *dst, int n, int axis,
                                       const dnnl_memory_desc_t *mds, bool reference_ok) {
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_attr_t attr = plan_attr_new();
  if (dnnl_concat_primitive_desc_create(&pd, dst, n, axis, mds, attr, plan_engine(c)) != dnnl_success) pd = NULL;
  dnnl_primitive_attr_destroy(attr);
  if (pd && !reference_ok && plan_pd_is_reference(pd)) {
    dnnl_primitive_desc_destroy(pd);
    pd = NULL;
  }
  return pd;
}

static concat_form concat_plan(plan_ctx *c, const ir_node *n) {
  static const dnnl_format_tag_t tags[] = {dnnl_nChw16c, dnnl_nhwc, dnnl_nchw};
  enum { N_TAGS = sizeof tags / sizeof *tags };
  concat_form f = {dnnl_format_tag_undef, plan_bf16(c) ? dnnl_bf16 : dnnl_f32};
  size_t bytes[N_TAGS] = {0};
  int seen = 0;
  bool other = false;
  for (int k = 0; k < n->n_inputs; k++) {
    plan_value *v = plan_val(c, n->inputs[k]);
    if (v->is_const || !v->defined || v->ref.md.data_type != dnnl_bf16) f.type = dnnl_f32;
    if (v->is_const || !v->defined) continue;
    int t = 0;
    for (dnnl_memory_desc_t md; t < N_TAGS && v->rank == 4; t++) {
      md_by_tag(&md, v->dims, v->ref.md.data_type, tags[t]);
      if (dnnl_memory_desc_equal(&md, &v->ref.md)) break;
    }
    if (v->rank != 4 || t == N_TAGS) {
      other = true;
      continue;
    }
    seen |= 1 << t;
    bytes[t] += dnnl_memory_desc_get_size(&v->ref.md);
  }
  if (seen & (seen - 1) || (seen && other)) { /* two layouts, or one and another */
    int best = 0;
    for (int t = 1; t < N_TAGS; t++)
      if (bytes[t] > bytes[best]) best = t;
    f.tag = tags[best];
  }
  return f;
}

inferd_code ops_concat_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  if (n->n_inputs < 1 || n->n_outputs != 1) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs inputs");
  plan_value *first = plan_val(c, n->inputs[0]);
  int64_t axis_attr = ir_attr_int(n, "axis", 0);
  if (axis_attr < 0) axis_attr += first->rank;
  if (axis_attr < 0 || axis_attr >= first->rank) return node_fail(c, node, INFERD_INVALID_ARG, st, "axis out of range");
  int axis = (int)axis_attr;
  int64_t dims[IR_MAX_RANK];
  memcpy(dims, first->dims, sizeof dims);
  dims[axis] = 0;
  bool all_const = true;
  for (int k = 0; k < n->n_inputs; k++) {
    if (n->inputs[k] == IR_NONE) return node_fail(c, node, INFERD_INVALID_ARG, st, "input %d is omitted", k);
    plan_value *v = plan_val(c, n->inputs[k]);
    if (v->rank != first->rank || v->dtype != first->dtype)
      return node_fail(c, node, INFERD_INVALID_ARG, st, "input %d has another rank or type", k);
    for (int i = 0; i < v->rank; i++)
      if (i != axis && v->dims[i] != first->dims[i])
        return node_fail(c, node, INFERD_INVALID_ARG, st, "input %d differs in dimension %d", k, i);
    if (v->dims[axis] > INT64_MAX - dims[axis]) return node_fail(c, node, INFERD_INVALID_ARG, st, "output shape too large");
    dims[axis] += v->dims[axis];
    all_const &= v->is_const;
  }
  if (core_shape_count(first->rank, dims) < 0) return node_fail(c, node, INFERD_INVALID_ARG, st, "output shape too large");
  if (all_const) return concat_consts(c, node, axis, dims, st);
  if (n->n_inputs > CONCAT_MAX)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "more than %d inputs to a run-time Concat", CONCAT_MAX);
  if (first->dtype != INFERD_DTYPE_FLOAT) return node_fail(c, node, INFERD_UNSUPPORTED, st, "only float32 is supported");
  plan_value *ov = plan_val(c, n->outputs[0]);
  ov->dtype = first->dtype;
  ov->rank = first->rank;
  memcpy(ov->dims, dims, sizeof dims);
  plan_ref *args = malloc((size_t)(n->n_inputs + 1) * sizeof *args);
  int *kinds = malloc((size_t)(n->n_inputs + 1) * sizeof *kinds);
  dnnl_memory_desc_t *mds = malloc((size_t)n->n_inputs * sizeof *mds);
  dnnl_primitive_desc_t pd = NULL;
  inferd_code rc = args && kinds && mds ? INFERD_OK : core_fail(st, INFERD_NO_MEMORY, "out of memory");
  concat_form form = concat_plan(c, n);
  for (int attempt = 0; attempt < 2 && !pd && rc == INFERD_OK; attempt++) {
    /* first concat_form; then everything plain float32 */
    dnnl_memory_desc_t dst;
    if (attempt == 0 && form.tag != dnnl_format_tag_undef) {
      /* decided before any input is reordered: a form oneDNN refuses (an input that
       * starts inside a channel block) must leave no reorder behind in the plan */
      for (int k = 0; k < n->n_inputs; k++) md_by_tag(&mds[k], plan_val(c, n->inputs[k])->dims, form.type, form.tag);
      md_by_tag(&dst, ov->dims, form.type, form.tag);
      pd = concat_pd(c, &dst, n->n_inputs, axis, mds, false);
      for (int k = 0; k < n->n_inputs && pd && rc == INFERD_OK; k++) {
        rc = plan_src(c, n->inputs[k], &mds[k], &args[k], st);
        kinds[k] = DNNL_ARG_MULTIPLE_SRC + k;
      }
      continue;
    }
    for (int k = 0; k < n->n_inputs && rc == INFERD_OK; k++) {
      plan_value *v = plan_val(c, n->inputs[k]);
      dnnl_memory_desc_t want;
      md_plain(&want, v->rank, v->dims, v->dtype);
      if (attempt > 0 || v->is_const) rc = plan_src(c, n->inputs[k], &want, &args[k], st);
      else if (form.type == dnnl_bf16) rc = plan_src_typed(c, n->inputs[k], &args[k], st);
      else rc = plan_src(c, n->inputs[k], NULL, &args[k], st);
      mds[k] = args[k].md;
      kinds[k] = DNNL_ARG_MULTIPLE_SRC + k;
    }
    if (rc != INFERD_OK) break;
    if (attempt > 0) md_plain(&dst, ov->rank, ov->dims, ov->dtype);
    else md_any(&dst, ov->rank, ov->dims), dst.data_type = form.type;
    pd = concat_pd(c, &dst, n->n_inputs, axis, mds, attempt > 0);
  }
  if (rc != INFERD_OK && pd) dnnl_primitive_desc_destroy(pd);
  if (rc == INFERD_OK && !pd) rc = node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN refuses this concatenation");
  if (rc == INFERD_OK) {
    rc = plan_define(c, n->outputs[0], dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), st);
    if (rc != INFERD_OK) dnnl_primitive_desc_destroy(pd);
  }
  if (rc == INFERD_OK) {
    args[n->n_inputs] = ov->ref;
    kinds[n->n_inputs] = DNNL_ARG_DST;
    rc = plan_emit(c, node, OP_CONCAT, pd, n->n_inputs + 1, kinds, args, 0, st);
  }
  free(args);
  free(kinds);
  free(mds);
  return rc;
}

inferd_code ops_softmax_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  op_kind op = plan_extra(c, node)->op;
  dnnl_alg_kind_t alg = op == OP_LOGSOFTMAX ? dnnl_softmax_log : dnnl_softmax_accurate;
  if (n->n_inputs != 1 || n->n_outputs != 1) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs one input");
  plan_value *xv = plan_val(c, n->inputs[0]), *ov = plan_val(c, n->outputs[0]);
  if (xv->dtype != INFERD_DTYPE_FLOAT || xv->is_const || xv->rank < 1)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "needs a float32 input computed at run time");
  bool old = plan_graph(c)->opset < 13;
  int64_t axis_attr = ir_attr_int(n, "axis", old ? 1 : -1);
  if (axis_attr < 0) axis_attr += xv->rank;
  if (axis_attr < 0 || axis_attr >= xv->rank) return node_fail(c, node, INFERD_INVALID_ARG, st, "axis out of range");
  int axis = (int)axis_attr;
  ov->dtype = xv->dtype;
  ov->rank = xv->rank;
  memcpy(ov->dims, xv->dims, sizeof ov->dims);
  dnnl_memory_desc_t plain, md;
  md_plain(&plain, xv->rank, xv->dims, xv->dtype);
  plan_ref args[2];
  inferd_code rc = plan_src(c, n->inputs[0], &plain, &args[0], st);
  if (rc != INFERD_OK) return rc;
  int dnnl_axis = axis;
  md = plain;
  if (old) { /* softmax over the flattened [axis, rank) */
    int64_t d2[2] = {core_shape_count(axis, xv->dims), core_shape_count(xv->rank - axis, xv->dims + axis)};
    md_plain(&md, 2, d2, INFERD_DTYPE_FLOAT);
    dnnl_axis = 1;
  }
  args[0].md = md;
  dnnl_softmax_v2_desc_t desc;
  dnnl_primitive_desc_t pd;
  dnnl_primitive_attr_t attr = plan_attr_new();
  dnnl_status_t drc = dnnl_softmax_v2_forward_desc_init(&desc, dnnl_forward_inference, alg, &md, &md, dnnl_axis);
  if (drc == dnnl_success) drc = dnnl_primitive_desc_create(&pd, &desc, attr, plan_engine(c), NULL);
  dnnl_primitive_attr_destroy(attr);
  if (drc != dnnl_success) return node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN refuses this softmax");
  if ((rc = plan_define(c, n->outputs[0], &plain, st)) != INFERD_OK) {
    dnnl_primitive_desc_destroy(pd);
    return rc;
  }
  args[1] = ov->ref;
  args[1].md = md;
  int kinds[2] = {DNNL_ARG_SRC, DNNL_ARG_DST};
  return plan_emit(c, node, op, pd, 2, kinds, args, 0, st);
}
