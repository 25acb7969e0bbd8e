/*
 * ops_matmul.c - Gemm and MatMul as one oneDNN matmul each, with the node's fused
 * element-wise post-ops. Constant B operands are weights: reordered once into the
 * layout the kernel wants (transB is just another way to read the same bytes).
 * Gemm's C is the matmul bias when it is a constant row vector; alpha and beta other
 * than 1 are refused (exporters emit 1). Empty operands (a zero inner, batch or output
 * dimension) are refused too: oneDNN's kernel selection divides by those sizes.
 */
#include <string.h>

#include "engine/engine.h"

static inferd_code emit_matmul(plan_ctx *c, int node, const plan_ref *a, int b_value, const dnnl_memory_desc_t *b_src,
                               int bias_value, const dnnl_memory_desc_t *bias_md, int rank, const int64_t *odims,
                               double flops, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  plan_value *bv = plan_val(c, b_value), *ov = plan_val(c, n->outputs[0]);
  /* oneDNN's matmul divides by these sizes while it picks a kernel */
  int64_t inner = b_src->dims[b_src->ndims - 2], count = core_shape_count(rank, odims);
  if (count < 0) /* the operands' batch dims broadcast to more than int64 can count */
    return node_fail(c, node, INFERD_INVALID_ARG, st, "output shape too large");
  if (inner == 0 || count == 0)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "empty operands (inner dimension %lld, %lld output elements)",
                     (long long)inner, (long long)count);
  dnnl_memory_desc_t b_any, dst_md;
  if (bv->is_const) md_any(&b_any, b_src->ndims, b_src->dims);
  else b_any = *b_src;
  md_plain(&dst_md, rank, odims, INFERD_DTYPE_FLOAT);
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_attr_t attr = plan_attr_fused(c, node);
  /* one copy of the weights: the layout another plan already chose, if a kernel takes it */
  const dnnl_memory_desc_t *have = bv->is_const ? plan_weight_layout(c, b_value, b_src) : NULL;
  dnnl_status_t drc = dnnl_runtime_error;
  for (int attempt = have ? 0 : 1; attempt < 2 && drc != dnnl_success; attempt++) {
    dnnl_matmul_desc_t desc;
    drc = dnnl_matmul_desc_init(&desc, &a->md, attempt == 0 ? have : &b_any, bias_value != IR_NONE ? bias_md : NULL,
                                &dst_md);
    if (drc == dnnl_success) drc = dnnl_primitive_desc_create(&pd, &desc, attr, plan_engine(c), NULL);
  }
  dnnl_primitive_attr_destroy(attr);
  if (drc != dnnl_success) return node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN refuses this matrix product");
  const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  plan_ref args[4] = {*a};
  int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
  int na = 1;
  inferd_code rc;
  if (bv->is_const) {
    rc = plan_weight(c, b_value, b_src, w_md, &args[na++], st);
  } else {
    dnnl_memory_desc_t plain;
    md_plain(&plain, bv->rank, bv->dims, INFERD_DTYPE_FLOAT);
    rc = plan_src(c, b_value, &plain, &args[na], st);
    args[na++].md = *b_src;
  }
  if (rc == INFERD_OK && bias_value != IR_NONE) rc = plan_weight(c, bias_value, bias_md, bias_md, &args[na++], st);
  else kinds[2] = DNNL_ARG_DST;
  ov->dtype = INFERD_DTYPE_FLOAT;
  ov->rank = rank;
  memcpy(ov->dims, odims, (size_t)rank * sizeof *odims);
  if (rc == INFERD_OK) rc = plan_define(c, n->outputs[0], &dst_md, st);
  if (rc != INFERD_OK) {
    dnnl_primitive_desc_destroy(pd);
    return rc;
  }
  args[na++] = ov->ref;
  return plan_emit(c, node, plan_extra(c, node)->op, pd, na, kinds, args, flops, st);
}

static inferd_code gemm(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  if (n->n_inputs < 2 || n->n_outputs != 1) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs inputs A and B");
  plan_value *av = plan_val(c, n->inputs[0]), *bv = plan_val(c, n->inputs[1]);
  if (av->rank != 2 || bv->rank != 2) return node_fail(c, node, INFERD_INVALID_ARG, st, "A and B must be matrices");
  if (av->dtype != INFERD_DTYPE_FLOAT || bv->dtype != INFERD_DTYPE_FLOAT)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "only float32 is supported");
  if (ir_attr_float(n, "alpha", 1.0f) != 1.0f || ir_attr_float(n, "beta", 1.0f) != 1.0f)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "alpha and beta other than 1 are not supported");
  bool ta = ir_attr_int(n, "transA", 0) != 0, tb = ir_attr_int(n, "transB", 0) != 0;
  int64_t m = ta ? av->dims[1] : av->dims[0], k = ta ? av->dims[0] : av->dims[1];
  int64_t kb = tb ? bv->dims[1] : bv->dims[0], nn = tb ? bv->dims[0] : bv->dims[1];
  if (k != kb) return node_fail(c, node, INFERD_INVALID_ARG, st, "inner dimensions %lld and %lld differ", (long long)k, (long long)kb);
  if (av->is_const) return node_fail(c, node, INFERD_UNSUPPORTED, st, "a constant A is not supported");
  int bias = n->n_inputs > 2 ? n->inputs[2] : IR_NONE;
  dnnl_memory_desc_t bias_md;
  if (bias != IR_NONE) {
    plan_value *cv = plan_val(c, bias);
    int64_t cc = core_shape_count(cv->rank, cv->dims);
    if (!cv->is_const || cv->dtype != INFERD_DTYPE_FLOAT || cc != nn || (cv->rank == 2 && cv->dims[0] != 1))
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "C must be a constant row of %lld floats", (long long)nn);
    int64_t bd[2] = {1, nn};
    md_plain(&bias_md, 2, bd, INFERD_DTYPE_FLOAT);
  }
  /* A in plain layout, read transposed through strides when transA */
  dnnl_memory_desc_t a_plain, a_md, b_src;
  md_plain(&a_plain, 2, av->dims, INFERD_DTYPE_FLOAT);
  plan_ref a;
  inferd_code rc = plan_src(c, n->inputs[0], &a_plain, &a, st);
  if (rc != INFERD_OK) return rc;
  dnnl_dims_t ad = {m, k}, as = {ta ? 1 : k, ta ? m : 1}, bdims = {k, nn}, bs = {tb ? 1 : nn, tb ? k : 1};
  dnnl_memory_desc_init_by_strides(&a_md, 2, ad, dnnl_f32, as);
  dnnl_memory_desc_init_by_strides(&b_src, 2, bdims, dnnl_f32, bs);
  a.md = a_md;
  int64_t od[2] = {m, nn};
  return emit_matmul(c, node, &a, n->inputs[1], &b_src, bias, &bias_md, 2, od, 2.0 * (double)m * (double)nn * (double)k, st);
}

static inferd_code matmul(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  if (n->n_inputs != 2 || n->n_outputs != 1) return node_fail(c, node, INFERD_INVALID_ARG, st, "needs two inputs");
  plan_value *av = plan_val(c, n->inputs[0]), *bv = plan_val(c, n->inputs[1]);
  if (av->rank < 2 || bv->rank < 2) return node_fail(c, node, INFERD_UNSUPPORTED, st, "operands of rank 1 are not supported");
  if (av->dtype != INFERD_DTYPE_FLOAT || bv->dtype != INFERD_DTYPE_FLOAT || av->is_const)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "needs float32 operands, the first computed at run time");
  int rank = CORE_MAX(av->rank, bv->rank);
  int64_t ad[IR_MAX_RANK], bd[IR_MAX_RANK], od[IR_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    ad[i] = i < rank - av->rank ? 1 : av->dims[i - (rank - av->rank)];
    bd[i] = i < rank - bv->rank ? 1 : bv->dims[i - (rank - bv->rank)];
  }
  double batch = 1;
  for (int i = 0; i < rank - 2; i++) {
    if (ad[i] != bd[i] && ad[i] != 1 && bd[i] != 1)
      return node_fail(c, node, INFERD_INVALID_ARG, st, "batch dimensions do not broadcast");
    od[i] = ad[i] == 1 ? bd[i] : ad[i];
    batch *= (double)od[i];
  }
  if (ad[rank - 1] != bd[rank - 2])
    return node_fail(c, node, INFERD_INVALID_ARG, st, "inner dimensions %lld and %lld differ", (long long)ad[rank - 1],
                     (long long)bd[rank - 2]);
  od[rank - 2] = ad[rank - 2];
  od[rank - 1] = bd[rank - 1];
  dnnl_memory_desc_t a_plain, b_src;
  md_plain(&a_plain, av->rank, av->dims, INFERD_DTYPE_FLOAT);
  plan_ref a;
  inferd_code rc = plan_src(c, n->inputs[0], &a_plain, &a, st);
  if (rc != INFERD_OK) return rc;
  md_plain(&a.md, rank, ad, INFERD_DTYPE_FLOAT);
  md_plain(&b_src, rank, bd, INFERD_DTYPE_FLOAT);
  double flops = 2.0 * batch * (double)od[rank - 2] * (double)od[rank - 1] * (double)ad[rank - 1];
  return emit_matmul(c, node, &a, n->inputs[1], &b_src, IR_NONE, NULL, rank, od, flops, st);
}

inferd_code ops_matmul_lower(plan_ctx *c, int node, inferd_status *st) {
  return plan_extra(c, node)->op == OP_GEMM ? gemm(c, node, st) : matmul(c, node, st);
}
