/*
 * ops_eltwise.c - element-wise activations that no producer absorbed (Relu, Clip,
 * Sigmoid, HardSigmoid, HardSwish, LeakyRelu, Elu, Tanh, Sqrt, Exp, Log, Abs, Neg,
 * Reciprocal, Gelu) and standalone BatchNormalization. Both work on whatever layout the
 * input has, so they never force a reorder; a two-op activation (HardSigmoid = linear
 * then clip) runs its second op in place. LayerNormalization too, on the plain layout.
 * With plan_bf16, both read a value held in bfloat16 as it is and write bfloat16 where
 * oneDNN has an optimized kernel for it (DenseNet's BatchNormalization + Relu between
 * its bfloat16 Concat and Conv), rather than converting it to float32 and back.
 */
#include <string.h>

#include "engine/engine.h"

static inferd_code same_shape_output(plan_ctx *c, const ir_node *n, plan_value **xv, plan_value **ov) {
  *xv = plan_val(c, n->inputs[0]);
  *ov = plan_val(c, n->outputs[0]);
  (*ov)->dtype = (*xv)->dtype;
  (*ov)->rank = (*xv)->rank;
  memcpy((*ov)->dims, (*xv)->dims, sizeof (*ov)->dims);
  return INFERD_OK;
}

static dnnl_status_t eltwise_pd(plan_ctx *c, const fused_op *op, const dnnl_memory_desc_t *md,
                                dnnl_primitive_desc_t *pd) {
  dnnl_eltwise_desc_t desc;
  dnnl_primitive_attr_t attr = plan_attr_new();
  dnnl_status_t drc = dnnl_eltwise_forward_desc_init(&desc, dnnl_forward_inference, op->alg, md, op->alpha, op->beta);
  if (drc == dnnl_success) drc = dnnl_primitive_desc_create(pd, &desc, attr, plan_engine(c), NULL);
  dnnl_primitive_attr_destroy(attr);
  return drc;
}

/* Whether a bfloat16 source may stay so: oneDNN made a pd (destroyed here) that is
 * not its reference kernel. Else the op reads it in float32. */
static bool pd_fits(dnnl_status_t drc, dnnl_primitive_desc_t pd) {
  bool ok = drc == dnnl_success && !plan_pd_is_reference(pd);
  if (drc == dnnl_success) dnnl_primitive_desc_destroy(pd);
  return ok;
}

inferd_code ops_eltwise_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  if (n->n_inputs < 1 || n->inputs[0] == IR_NONE || n->n_outputs != 1)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "needs an input and one output");
  plan_value *xv, *ov;
  same_shape_output(c, n, &xv, &ov);
  if (xv->dtype != INFERD_DTYPE_FLOAT) return node_fail(c, node, INFERD_UNSUPPORTED, st, "only float32 is supported");
  if (xv->is_const) return node_fail(c, node, INFERD_UNSUPPORTED, st, "constant input (fold it at export)");
  fused_op ops[2];
  int k = engine_eltwise_of(plan_graph(c), n, plan_extra(c, node)->op, ops);
  if (k == 0)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "%s",
                     plan_extra(c, node)->op == OP_GELU ? "approximate must be \"none\" or \"tanh\""
                                                         : "bounds must be constants with min <= max");
  plan_ref src;
  inferd_code rc = plan_bf16(c) ? plan_src_typed(c, n->inputs[0], &src, st) : plan_src(c, n->inputs[0], NULL, &src, st);
  if (rc != INFERD_OK) return rc;
  bool fits = true;
  for (int i = 0; i < k && fits && src.md.data_type == dnnl_bf16; i++) {
    dnnl_primitive_desc_t pd;
    dnnl_status_t drc = eltwise_pd(c, &ops[i], &src.md, &pd);
    fits = pd_fits(drc, pd);
  }
  if (!fits && (rc = plan_src(c, n->inputs[0], NULL, &src, st)) != INFERD_OK) return rc;
  if ((rc = plan_define(c, n->outputs[0], &src.md, st)) != INFERD_OK) return rc;
  for (int i = 0; i < k; i++) {
    dnnl_primitive_desc_t pd;
    if (eltwise_pd(c, &ops[i], &src.md, &pd) != dnnl_success)
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN refuses this element-wise op");
    plan_ref args[2] = {i == 0 ? src : ov->ref, ov->ref};
    int kinds[2] = {DNNL_ARG_SRC, DNNL_ARG_DST};
    if ((rc = plan_emit(c, node, plan_extra(c, node)->op, pd, 2, kinds, args, 0, st)) != INFERD_OK) return rc;
  }
  return INFERD_OK;
}

static dnnl_status_t bnorm_pd(plan_ctx *c, const dnnl_memory_desc_t *md, float eps, bool relu,
                              dnnl_primitive_desc_t *pd) {
  dnnl_batch_normalization_desc_t desc;
  unsigned flags = dnnl_use_global_stats | dnnl_use_scale | dnnl_use_shift | (relu ? dnnl_fuse_norm_relu : 0);
  dnnl_primitive_attr_t attr = plan_attr_new();
  dnnl_status_t drc = dnnl_batch_normalization_forward_desc_init(&desc, dnnl_forward_inference, md, eps, flags);
  if (drc == dnnl_success) drc = dnnl_primitive_desc_create(pd, &desc, attr, plan_engine(c), NULL);
  dnnl_primitive_attr_destroy(attr);
  return drc;
}

inferd_code ops_batchnorm_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  if (n->n_inputs != 5 || n->n_outputs < 1) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs 5 inputs");
  if (ir_attr_int(n, "training_mode", 0)) return node_fail(c, node, INFERD_UNSUPPORTED, st, "training_mode is not supported");
  for (int k = 1; k < n->n_outputs; k++)
    if (n->outputs[k] != IR_NONE && plan_graph(c)->values[n->outputs[k]].consumers > 0)
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "running statistics outputs are not supported");
  plan_value *xv, *ov;
  same_shape_output(c, n, &xv, &ov);
  if (xv->dtype != INFERD_DTYPE_FLOAT || xv->rank < 2 || xv->is_const)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "needs a float32 input of rank >= 2 computed at run time");
  int64_t ch = xv->dims[1];
  for (int k = 1; k < 5; k++) {
    plan_value *p = plan_val(c, n->inputs[k]);
    if (!p->is_const || p->dtype != INFERD_DTYPE_FLOAT || p->rank != 1 || p->dims[0] != ch)
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "scale, bias, mean and var must be constants of %lld floats",
                       (long long)ch);
  }
  plan_ref args[6];
  inferd_code rc = plan_bf16(c) ? plan_src_typed(c, n->inputs[0], &args[0], st)
                                : plan_src(c, n->inputs[0], NULL, &args[0], st);
  if (rc != INFERD_OK) return rc;
  dnnl_primitive_desc_t pd;
  float eps = ir_attr_float(n, "epsilon", 1e-5f);
  bool relu = plan_extra(c, node)->n_fused > 0; /* the Relu after it (engine_passes.c) */
  if (args[0].md.data_type == dnnl_bf16) {
    dnnl_status_t drc = bnorm_pd(c, &args[0].md, eps, relu, &pd);
    if (!pd_fits(drc, pd) && (rc = plan_src(c, n->inputs[0], NULL, &args[0], st)) != INFERD_OK) return rc;
  }
  if (bnorm_pd(c, &args[0].md, eps, relu, &pd) != dnnl_success)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN refuses this batch normalization");
  int kinds[6] = {DNNL_ARG_SRC, DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_DST};
  for (int k = 1; k < 5 && rc == INFERD_OK; k++) rc = plan_weight(c, n->inputs[k], NULL, NULL, &args[k], st);
  if (rc == INFERD_OK) rc = plan_define(c, n->outputs[0], &args[0].md, st);
  if (rc != INFERD_OK) {
    dnnl_primitive_desc_destroy(pd);
    return rc;
  }
  args[5] = ov->ref;
  return plan_emit(c, node, OP_BATCHNORM, pd, 6, kinds, args, 0, st);
}

/* LayerNormalization (opset 17, and the ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul
 * /Add chain that torch.onnx writes before it, fused at load: engine_passes.c): oneDNN's
 * layer normalization over the trailing axes from `axis` on, read as one axis of
 * their product, with Scale and the optional B as its scale and shift. */
inferd_code ops_layernorm_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  if (n->n_inputs < 2 || n->inputs[0] == IR_NONE || n->inputs[1] == IR_NONE || n->n_outputs < 1)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "needs X and Scale");
  for (int k = 1; k < n->n_outputs; k++)
    if (n->outputs[k] != IR_NONE && plan_graph(c)->values[n->outputs[k]].consumers > 0)
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "the Mean and InvStdDev outputs are not supported");
  plan_value *xv, *ov;
  same_shape_output(c, n, &xv, &ov);
  if (xv->dtype != INFERD_DTYPE_FLOAT || xv->is_const || xv->rank < 1)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "needs a float32 input computed at run time");
  int64_t axis = ir_attr_int(n, "axis", -1);
  if (axis < 0) axis += xv->rank;
  if (axis < 0 || axis >= xv->rank) return node_fail(c, node, INFERD_INVALID_ARG, st, "axis out of range");
  int64_t outer = core_shape_count((int)axis, xv->dims);
  int64_t inner = core_shape_count(xv->rank - (int)axis, xv->dims + axis);
  if (outer <= 0 || inner <= 0) return node_fail(c, node, INFERD_UNSUPPORTED, st, "empty input");
  bool shift = n->n_inputs > 2 && n->inputs[2] != IR_NONE;
  /* Scale and B broadcast to X's trailing axes from `axis` on (a [1] gamma in a fused
   * chain, a [C] Scale over [H, C]): read with stride 0 along the axes they lack */
  const int nt = xv->rank - (int)axis;
  const int64_t *tdims = xv->dims + axis;
  for (int k = 1; k < (shift ? 3 : 2); k++) {
    plan_value *p = plan_val(c, n->inputs[k]);
    bool fits = p->is_const && p->dtype == INFERD_DTYPE_FLOAT && p->rank <= nt;
    for (int i = 0; fits && i < p->rank; i++)
      fits = p->dims[i] == 1 || p->dims[i] == tdims[nt - p->rank + i];
    if (!fits)
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "%s must be a float constant that broadcasts to the %s",
                       k == 1 ? "Scale" : "B", "normalized axes");
  }
  dnnl_memory_desc_t plain, rows, vec;
  md_plain(&plain, xv->rank, xv->dims, INFERD_DTYPE_FLOAT);
  md_plain(&rows, 2, (const int64_t[]){outer, inner}, INFERD_DTYPE_FLOAT);
  md_plain(&vec, 1, &inner, INFERD_DTYPE_FLOAT);
  plan_ref args[4];
  inferd_code rc = plan_src(c, n->inputs[0], &plain, &args[0], st);
  if (rc != INFERD_OK) return rc;
  args[0].md = rows; /* the same bytes as [outer, inner] */
  dnnl_layer_normalization_desc_t desc;
  dnnl_primitive_desc_t pd;
  dnnl_primitive_attr_t attr = plan_attr_new();
  unsigned flags = dnnl_use_scale | (shift ? dnnl_use_shift : 0);
  dnnl_status_t drc = dnnl_layer_normalization_forward_desc_init(&desc, dnnl_forward_inference, &rows, NULL,
                                                                 ir_attr_float(n, "epsilon", 1e-5f), flags);
  if (drc == dnnl_success) drc = dnnl_primitive_desc_create(&pd, &desc, attr, plan_engine(c), NULL);
  dnnl_primitive_attr_destroy(attr);
  if (drc != dnnl_success) return node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN refuses this layer normalization");
  int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_DST}, na = 1;
  for (int k = 1; k < (shift ? 3 : 2) && rc == INFERD_OK; k++) {
    rc = ops_broadcast_weight(c, node, n->inputs[k], nt, tdims, NULL, &args[na], st);
    args[na++].md = vec; /* the same bytes as one axis */
  }
  if (rc == INFERD_OK) rc = plan_define(c, n->outputs[0], &plain, st);
  if (rc != INFERD_OK) {
    dnnl_primitive_desc_destroy(pd);
    return rc;
  }
  if (!shift) kinds[2] = DNNL_ARG_DST;
  args[na] = ov->ref;
  args[na++].md = rows;
  return plan_emit(c, node, OP_LAYERNORM, pd, na, kinds, args, 0, st);
}
