/*
 * ops_matmul.c - Gemm and MatMul as one oneDNN matmul each, with the node's fused
 * element-wise post-ops. Constant B operands are weights: reordered once into the
 * layout the kernel wants (transB is just another way to read the same bytes).
 * Gemm's C is the matmul bias when it is a constant row vector; alpha and beta other
 * than 1 are refused (exporters emit 1). Empty operands (a zero inner, batch or output
 * dimension) are refused too: oneDNN's kernel selection divides by those sizes.
 * Einsum runs when its equation is a (batched) matrix product of two operands, each
 * read in its own axis order through strides (MaxViT's attention: q times k
 * transposed, then the weights times v).
 * With plan_bf16 a product by constant weights reads A and B in bfloat16 (A converted
 * into a dense copy) and writes float32: the linear layers of ConvNeXt and Swin.
 */
#include <ctype.h>
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
  dnnl_memory_desc_t b_any, dst_md, a16;
  if (bv->is_const) md_any(&b_any, b_src->ndims, b_src->dims);
  else b_any = *b_src;
  /* the output's shape, or [rows, columns] when matmul() folded A's leading axes into its
   * rows: the same bytes */
  int64_t folded[2] = {a->md.dims[0], odims[rank - 1]};
  if (a->md.ndims == rank) md_plain(&dst_md, rank, odims, INFERD_DTYPE_FLOAT);
  else md_plain(&dst_md, 2, folded, INFERD_DTYPE_FLOAT);
  /* bfloat16: A's dense copy, weights in bfloat16; float32 when oneDNN has no kernel */
  md_plain(&a16, a->md.ndims, a->md.dims, INFERD_DTYPE_FLOAT);
  a16.data_type = dnnl_bf16;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_attr_t attr = plan_attr_fused(c, node);
  dnnl_status_t drc = dnnl_runtime_error;
  bool bf16 = false;
  for (int type = plan_bf16(c) && bv->is_const ? 0 : 1; type < 2 && drc != dnnl_success; type++) {
    bf16 = type == 0;
    b_any.data_type = bf16 ? dnnl_bf16 : dnnl_f32;
    /* one copy of the weights: the layout another plan already chose, if a kernel takes it */
    const dnnl_memory_desc_t *have = bv->is_const ? plan_weight_layout(c, b_value, b_src, b_any.data_type) : NULL;
    for (int attempt = have ? 0 : 1; attempt < 2 && drc != dnnl_success; attempt++) {
      dnnl_matmul_desc_t desc;
      drc = dnnl_matmul_desc_init(&desc, bf16 ? &a16 : &a->md, attempt == 0 ? have : &b_any,
                                  bias_value != IR_NONE ? bias_md : NULL, &dst_md);
      if (drc == dnnl_success) drc = dnnl_primitive_desc_create(&pd, &desc, attr, plan_engine(c), NULL);
      if (drc == dnnl_success && bf16 && plan_pd_is_reference(pd)) {
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
        drc = dnnl_unimplemented;
      }
    }
  }
  dnnl_primitive_attr_destroy(attr);
  if (drc != dnnl_success) return node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN refuses this matrix product");
  const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  plan_ref args[4] = {*a};
  int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
  int na = 1;
  inferd_code rc = bf16 ? plan_convert(c, node, a, &a16, &args[0], st) : INFERD_OK;
  if (rc != INFERD_OK) {
    dnnl_primitive_desc_destroy(pd);
    return rc;
  }
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
  dnnl_memory_desc_t out_md;
  md_plain(&out_md, rank, odims, INFERD_DTYPE_FLOAT);
  if (rc == INFERD_OK) rc = plan_define(c, n->outputs[0], &out_md, st);
  if (rc != INFERD_OK) {
    dnnl_primitive_desc_destroy(pd);
    return rc;
  }
  args[na] = ov->ref;
  args[na++].md = dst_md;
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
  double flops = 2.0 * batch * (double)od[rank - 2] * (double)od[rank - 1] * (double)ad[rank - 1];
  /* constant weights shared by every batch entry (a Transformer's linear layer on
   * [N, H, W, C]): one product of all A's rows, [N*H*W, C] x [C, C'], instead of a
   * batch of N*H small ones (ConvNeXt's: 28 products of 7 rows at 40% of the peak) */
  bool shared = bv->is_const;
  for (int i = 0; i < rank - 2; i++) shared = shared && bd[i] == 1;
  int64_t rows = 1;
  for (int i = 0; i < rank - 1 && shared; i++) shared = !__builtin_mul_overflow(rows, ad[i], &rows);
  if (shared && rank > 2) { /* (an A too large to count is refused by emit_matmul) */
    int64_t a2[2] = {rows, ad[rank - 1]}, b2[2] = {bd[rank - 2], bd[rank - 1]};
    md_plain(&a.md, 2, a2, INFERD_DTYPE_FLOAT);
    md_plain(&b_src, 2, b2, INFERD_DTYPE_FLOAT);
  } else {
    md_plain(&a.md, rank, ad, INFERD_DTYPE_FLOAT);
    md_plain(&b_src, rank, bd, INFERD_DTYPE_FLOAT);
  }
  return emit_matmul(c, node, &a, n->inputs[1], &b_src, IR_NONE, NULL, rank, od, flops, st);
}

/* Einsum's equation cut into its two input terms and its output term, spaces left out.
 * Returns false (with *why) for what is not two explicit terms of distinct letters. */
static bool einsum_terms(const char *eq, char terms[3][IR_MAX_RANK + 1], const char **why) {
  int t = 0, len[3] = {0};
  for (const char *p = eq; *p; p++) {
    if (*p == ' ') continue;
    if (*p == ',' && t == 0) t = 1;
    else if (p[0] == '-' && p[1] == '>' && t == 1) t = 2, p++;
    else if (!isalpha((unsigned char)*p))
      return *why = *p == '.' ? "an ellipsis" : "a character other than a letter", false;
    else if (len[t] == IR_MAX_RANK) return *why = "too many axes", false;
    else if (memchr(terms[t], *p, (size_t)len[t])) return *why = "a letter twice in one term (a diagonal)", false;
    else terms[t][len[t]++] = *p;
    terms[t][len[t]] = '\0';
  }
  if (t != 2) return *why = "not two operands and an explicit output", false;
  return true;
}

/* Einsum as a matrix product: each letter is a batch axis (both operands and the output,
 * in the output's order first), the row axis (the first operand's and the output's
 * next-to-last), the column axis (the second's and the output's last) or the summed axis
 * (both operands only). Each operand is read through strides in that order. */
static inferd_code einsum(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  if (n->n_inputs != 2 || n->n_outputs != 1)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "only two operands are supported, not %d", n->n_inputs);
  if (n->inputs[0] == IR_NONE || n->inputs[1] == IR_NONE)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "an operand is omitted");
  const char *eq = ir_attr_string(n, "equation", ""), *why = NULL;
  char terms[3][IR_MAX_RANK + 1] = {{0}};
  if (!einsum_terms(eq, terms, &why))
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "equation '%s' has %s", eq, why);
  const char *ta = terms[0], *tb = terms[1], *to = terms[2];
  int rank = (int)strlen(to), ia = 0, ib = 1;
  /* the output's rows from the second operand ("bij,bjk->bki"): its transpose is the
   * product of the operands swapped */
  if (rank >= 2 && strchr(tb, to[rank - 2]) && !strchr(ta, to[rank - 2])) ta = terms[1], tb = terms[0], ia = 1, ib = 0;
  plan_value *av = plan_val(c, n->inputs[ia]), *bv = plan_val(c, n->inputs[ib]);
  if (av->dtype != INFERD_DTYPE_FLOAT || bv->dtype != INFERD_DTYPE_FLOAT || av->is_const)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "needs float32 operands, %s computed at run time",
                     ia ? "the second" : "the first");
  if ((int)strlen(ta) != av->rank || (int)strlen(tb) != bv->rank)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "equation '%s' does not match the operands' ranks %d and %d", eq,
                     av->rank, bv->rank);
  /* the summed letter: in both operands, not in the output; every other letter of an
   * operand must be in the output (a batch letter may be in one operand only) */
  char k = 0;
  for (const char *p = ta; *p; p++)
    if (!strchr(to, *p)) {
      if (k || !strchr(tb, *p))
        return node_fail(c, node, INFERD_UNSUPPORTED, st, "equation '%s' is not a matrix product", eq);
      k = *p;
    }
  for (const char *p = tb; *p; p++)
    if (!strchr(to, *p) && *p != k)
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "equation '%s' is not a matrix product", eq);
  char m = rank >= 2 ? to[rank - 2] : 0, nn = rank >= 2 ? to[rank - 1] : 0;
  if (!k || !m || !strchr(ta, m) || strchr(tb, m) || !strchr(tb, nn) || strchr(ta, nn))
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "equation '%s' is not a matrix product", eq);
  dnnl_memory_desc_t a_plain, b_plain, b_src; /* the operands as they lie, read through their strides */
  md_plain(&a_plain, av->rank, av->dims, INFERD_DTYPE_FLOAT);
  md_plain(&b_plain, bv->rank, bv->dims, INFERD_DTYPE_FLOAT);
  const dnnl_dim_t *as = a_plain.format_desc.blocking.strides, *bs = b_plain.format_desc.blocking.strides;
  dnnl_dims_t ad, astr, bd, bstr;
  int64_t od[IR_MAX_RANK];
  double flops = 2.0;
  for (int i = 0; i < rank; i++) {
    char a_letter = i == rank - 1 ? k : to[i], b_letter = i == rank - 2 ? k : to[i];
    const char *pa = strchr(ta, a_letter), *pb = strchr(tb, b_letter);
    if (!pa && !pb)
      return node_fail(c, node, INFERD_INVALID_ARG, st, "equation '%s': '%c' is in no operand", eq, to[i]);
    /* a batch axis of one operand only: the other is broadcast along it */
    ad[i] = pa ? av->dims[pa - ta] : 1, astr[i] = pa ? as[pa - ta] : 1;
    bd[i] = pb ? bv->dims[pb - tb] : 1, bstr[i] = pb ? bs[pb - tb] : 1;
  }
  for (int i = 0; i < rank - 2; i++) {
    if (ad[i] != bd[i] && ad[i] != 1 && bd[i] != 1)
      return node_fail(c, node, INFERD_INVALID_ARG, st, "axis '%c' is %lld and %lld long", to[i], (long long)ad[i],
                       (long long)bd[i]);
    od[i] = ad[i] == 1 ? bd[i] : ad[i];
    flops *= (double)od[i];
  }
  if (ad[rank - 1] != bd[rank - 2])
    return node_fail(c, node, INFERD_INVALID_ARG, st, "summed axis '%c' is %lld and %lld long", k,
                     (long long)ad[rank - 1], (long long)bd[rank - 2]);
  od[rank - 2] = ad[rank - 2];
  od[rank - 1] = bd[rank - 1];
  flops *= (double)od[rank - 2] * (double)od[rank - 1] * (double)ad[rank - 1];
  plan_ref a;
  inferd_code rc = plan_src(c, n->inputs[ia], &a_plain, &a, st);
  if (rc != INFERD_OK) return rc;
  if (dnnl_memory_desc_init_by_strides(&a.md, rank, ad, dnnl_f32, astr) != dnnl_success ||
      dnnl_memory_desc_init_by_strides(&b_src, rank, bd, dnnl_f32, bstr) != dnnl_success)
    return node_fail(c, node, INFERD_INTERNAL, st, "oneDNN could not describe the operands");
  return emit_matmul(c, node, &a, n->inputs[ib], &b_src, IR_NONE, NULL, rank, od, flops, st);
}

inferd_code ops_matmul_lower(plan_ctx *c, int node, inferd_status *st) {
  op_kind op = plan_extra(c, node)->op;
  return op == OP_GEMM ? gemm(c, node, st) : op == OP_EINSUM ? einsum(c, node, st) : matmul(c, node, st);
}
