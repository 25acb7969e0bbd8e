/*
 * ops_pool.c - MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool (oneDNN
 * pooling, any layout, ceil_mode and dilations included) and ReduceMean (oneDNN
 * reduction).
 *
 * ceil_mode is expressed to oneDNN as extra right padding; for averages that exclude
 * padding this changes nothing, and AveragePool with count_include_pad=1 is refused
 * when a window reaches past the node's own padding (explicit or auto_pad), because
 * oneDNN would count what PyTorch and ONNX do not. Pooling or reducing over an
 * empty dimension is refused: its output would come from no element at all, and
 * could still be large ([1, 2^32, 0] pools to 2^32 values).
 */
#include <string.h>

#include "engine/engine.h"

/* The first output position along spatial dim i whose window reads no element of an
 * input of length len, or -1. Windows slide forward, so when the dilation is at most
 * len only the first and the last can miss the input, and only when a whole span lies
 * in the padding; a larger dilation can step over the input from inside any window. */
static int64_t empty_window(const window *w, int i, int64_t len) {
  int64_t k = w->kernel[i], d = w->dilation[i], span = (k - 1) * d + 1, n = w->out[i];
  if (w->pad_l[i] >= span) return 0;
  if (w->pad_r[i] >= span) return n - 1;
  if (d <= len) return -1;
  for (int64_t o = 0; o < n; o++) {
    int64_t s = o * w->strides[i] - w->pad_l[i];   /* the window reads s, s + d, ... */
    int64_t first = s >= 0 ? 0 : (-s + d - 1) / d; /* its first tap at 0 or after */
    if (first >= k || s + first * d >= len) return o;
  }
  return -1;
}

inferd_code ops_pool_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  op_kind op = plan_extra(c, node)->op;
  if (n->n_inputs != 1 || n->n_outputs < 1) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs one input");
  if (n->n_outputs > 1 && n->outputs[1] != IR_NONE && plan_graph(c)->values[n->outputs[1]].consumers > 0)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "the Indices output is not supported");
  plan_value *xv = plan_val(c, n->inputs[0]), *ov = plan_val(c, n->outputs[0]);
  if (xv->dtype != INFERD_DTYPE_FLOAT || xv->rank < 3 || xv->rank > 5 || xv->is_const)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "needs a float32 input of rank 3-5 computed at run time");
  window w = {.nsp = xv->rank - 2};
  for (int i = 0; i < w.nsp; i++) /* no element to pool: the output would come from nothing */
    if (xv->dims[2 + i] == 0) return node_fail(c, node, INFERD_INVALID_ARG, st, "spatial dimension %d is empty", i);
  bool global = op == OP_GLOBALAVERAGEPOOL || op == OP_GLOBALMAXPOOL;
  dnnl_alg_kind_t alg = op == OP_MAXPOOL || op == OP_GLOBALMAXPOOL ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
  inferd_code rc;
  if (global) {
    for (int i = 0; i < w.nsp; i++) {
      w.kernel[i] = xv->dims[2 + i], w.strides[i] = 1, w.dilation[i] = 1, w.pad_l[i] = w.pad_r[i] = 0;
      w.out[i] = 1;
    }
  } else {
    const int64_t *ks;
    if (ir_attr_ints(n, "kernel_shape", &ks) != w.nsp)
      return node_fail(c, node, INFERD_INVALID_ARG, st, "kernel_shape must have %d values", w.nsp);
    bool ceil_mode = ir_attr_int(n, "ceil_mode", 0) != 0;
    if ((rc = ops_window(c, node, xv->dims + 2, ks, ceil_mode, &w, st)) != INFERD_OK) return rc;
    /* A window that pools no element: oneDNN's max pooling wrote -FLT_MAX there (pads
     * 2 around a kernel of 2). ONNX Runtime refuses pads not smaller than the kernel;
     * this refuses by the windows the pads make (empty_window). */
    for (int i = 0; i < w.nsp; i++) {
      int64_t o = empty_window(&w, i, xv->dims[2 + i]);
      if (o >= 0)
        return node_fail(c, node, INFERD_INVALID_ARG, st,
                         "window %lld of spatial dimension %d would lie wholly in the padding (kernel %lld, dilation "
                         "%lld, %lld before, %lld after)",
                         (long long)o, i, (long long)w.kernel[i], (long long)w.dilation[i], (long long)w.pad_l[i],
                         (long long)w.pad_r[i]);
    }
    if (op == OP_AVERAGEPOOL && ir_attr_int(n, "count_include_pad", 0)) {
      alg = dnnl_pooling_avg_include_padding;
      for (int i = 0; i < w.nsp; i++)
        if (w.pad_r[i] > w.pad_r_node[i]) /* smaller: no window reaches the rest */
          return node_fail(c, node, INFERD_UNSUPPORTED, st, "count_include_pad with a window past the padding");
    }
    if (op == OP_MAXPOOL && ir_attr_int(n, "storage_order", 0))
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "storage_order=1 is not supported");
  }
  ov->dtype = INFERD_DTYPE_FLOAT;
  ov->rank = xv->rank;
  ov->dims[0] = xv->dims[0];
  ov->dims[1] = xv->dims[1];
  for (int i = 0; i < w.nsp; i++) ov->dims[2 + i] = w.out[i];
  plan_ref args[2];
  /* pooling between bfloat16 convolutions stays in bfloat16 (plan_bf16) */
  rc = plan_bf16(c) ? plan_src_typed(c, n->inputs[0], &args[0], st) : plan_src(c, n->inputs[0], NULL, &args[0], st);
  if (rc != INFERD_OK) return rc;
  dnnl_memory_desc_t dst_any;
  md_any(&dst_any, ov->rank, ov->dims);
  dst_any.data_type = args[0].md.data_type;
  dnnl_dims_t dil;
  for (int i = 0; i < w.nsp; i++) dil[i] = w.dilation[i] - 1;
  dnnl_pooling_v2_desc_t desc;
  dnnl_primitive_desc_t pd;
  dnnl_primitive_attr_t attr = plan_attr_new();
  dnnl_status_t drc = dnnl_pooling_v2_forward_desc_init(&desc, dnnl_forward_inference, alg, &args[0].md, &dst_any,
                                                        w.strides, w.kernel, dil, w.pad_l, w.pad_r);
  if (drc == dnnl_success) drc = dnnl_primitive_desc_create(&pd, &desc, attr, plan_engine(c), NULL);
  dnnl_primitive_attr_destroy(attr);
  if (drc != dnnl_success) return node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN refuses this pooling");
  const dnnl_memory_desc_t *dst_md = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  if ((rc = plan_define(c, n->outputs[0], dst_md, st)) != INFERD_OK) {
    dnnl_primitive_desc_destroy(pd);
    return rc;
  }
  args[1] = ov->ref;
  int kinds[2] = {DNNL_ARG_SRC, DNNL_ARG_DST};
  return plan_emit(c, node, op, pd, 2, kinds, args, 0, st);
}

inferd_code ops_reduce_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  if (n->n_inputs < 1 || n->n_outputs != 1) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs one input");
  plan_value *xv = plan_val(c, n->inputs[0]), *ov = plan_val(c, n->outputs[0]);
  if (xv->dtype != INFERD_DTYPE_FLOAT || xv->is_const || xv->rank < 1)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "needs a float32 input computed at run time");
  /* axes: an attribute up to opset 17, an optional input from 18 (which also added
   * noop_with_empty_axes); none means all */
  int64_t axes[IR_MAX_RANK];
  int na;
  if (plan_graph(c)->opset >= 18) {
    na = n->n_inputs > 1 ? ops_const_ints(c, n->inputs[1], axes, IR_MAX_RANK) : -1;
    if (na == -2) return node_fail(c, node, INFERD_UNSUPPORTED, st, "axes must be a constant of at most %d values", IR_MAX_RANK);
  } else {
    const int64_t *a;
    na = ir_attr_ints(n, "axes", &a);
    if (na > IR_MAX_RANK) return node_fail(c, node, INFERD_INVALID_ARG, st, "too many axes");
    if (na > 0) memcpy(axes, a, (size_t)na * sizeof *a);
  }
  bool reduce[IR_MAX_RANK] = {0};
  for (int i = 0; i < na; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + xv->rank : axes[i];
    if (a < 0 || a >= xv->rank) return node_fail(c, node, INFERD_INVALID_ARG, st, "axis %lld out of range", (long long)axes[i]);
    reduce[a] = true;
  }
  if (na <= 0 && !ir_attr_int(n, "noop_with_empty_axes", 0))
    for (int i = 0; i < xv->rank; i++) reduce[i] = true;
  bool reduces = false; /* over an axis longer than 1 */
  for (int i = 0; i < xv->rank; i++) {
    if (reduce[i] && xv->dims[i] == 0) /* the mean of nothing, as for pooling */
      return node_fail(c, node, INFERD_INVALID_ARG, st, "reduced axis %d is empty", i);
    reduces |= reduce[i] && xv->dims[i] > 1;
  }
  bool keep = ir_attr_int(n, "keepdims", 1) != 0;
  int64_t kd[IR_MAX_RANK];
  ov->dtype = INFERD_DTYPE_FLOAT;
  ov->rank = 0;
  for (int i = 0; i < xv->rank; i++) {
    kd[i] = reduce[i] ? 1 : xv->dims[i];
    if (keep || !reduce[i]) ov->dims[ov->rank++] = kd[i];
  }
  plan_ref args[2];
  inferd_code rc = plan_src(c, n->inputs[0], NULL, &args[0], st);
  if (rc != INFERD_OK) return rc;
  dnnl_memory_desc_t dst_md;
  md_plain(&dst_md, xv->rank, kd, INFERD_DTYPE_FLOAT);
  if (!reduces) { /* a copy (oneDNN's reduction wants at least one axis reduced) */
    if ((rc = plan_define(c, n->outputs[0], &dst_md, st)) != INFERD_OK) return rc;
    plan_ref dst = ov->ref;
    md_plain(&ov->ref.md, ov->rank, ov->dims, INFERD_DTYPE_FLOAT);
    return plan_emit_reorder(c, node, &args[0], &dst, st);
  }
  dnnl_reduction_desc_t desc;
  dnnl_primitive_desc_t pd;
  dnnl_primitive_attr_t attr = plan_attr_new();
  dnnl_status_t drc = dnnl_reduction_desc_init(&desc, dnnl_reduction_mean, &args[0].md, &dst_md, 0.0f, 0.0f);
  if (drc == dnnl_success) drc = dnnl_primitive_desc_create(&pd, &desc, attr, plan_engine(c), NULL);
  if (drc == dnnl_success && plan_pd_is_reference(pd) && !md_is_plain(&args[0].md)) {
    /* from a blocked layout into the plain result, oneDNN 2.6 reduces on its reference
     * kernel: 40-46% of shufflenet_v2's and mnasnet's time, in their final mean over
     * H and W. Read in the plain layout (one reorder), the optimized kernel runs. */
    dnnl_memory_desc_t plain;
    md_plain(&plain, xv->rank, xv->dims, INFERD_DTYPE_FLOAT);
    dnnl_primitive_desc_t pd2 = NULL;
    if (dnnl_reduction_desc_init(&desc, dnnl_reduction_mean, &plain, &dst_md, 0.0f, 0.0f) == dnnl_success &&
        dnnl_primitive_desc_create(&pd2, &desc, attr, plan_engine(c), NULL) == dnnl_success) {
      if (!plan_pd_is_reference(pd2) && (rc = plan_src(c, n->inputs[0], &plain, &args[0], st)) == INFERD_OK) {
        dnnl_primitive_desc_destroy(pd);
        pd = pd2;
      } else {
        dnnl_primitive_desc_destroy(pd2);
      }
    }
    if (rc != INFERD_OK) {
      dnnl_primitive_attr_destroy(attr);
      dnnl_primitive_desc_destroy(pd);
      return rc;
    }
  }
  dnnl_primitive_attr_destroy(attr);
  if (drc != dnnl_success) return node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN refuses this reduction");
  if ((rc = plan_define(c, n->outputs[0], &dst_md, st)) != INFERD_OK) {
    dnnl_primitive_desc_destroy(pd);
    return rc;
  }
  args[1] = ov->ref;
  md_plain(&ov->ref.md, ov->rank, ov->dims, INFERD_DTYPE_FLOAT); /* same bytes, reduced dims dropped */
  int kinds[2] = {DNNL_ARG_SRC, DNNL_ARG_DST};
  return plan_emit(c, node, OP_REDUCEMEAN, pd, 2, kinds, args, 0, st);
}
