/*
 * ops_conv.c - Conv (1-D, 2-D, 3-D; grouped, dilated, any padding) as one oneDNN
 * convolution with the node's fused post-ops (element-wise chains and a residual sum),
 * and the sliding-window arithmetic that pooling shares.
 *
 * Layouts are oneDNN's choice (format_tag any) for source, weights and destination;
 * the weights are reordered once into the model's weight cache. A fused residual sum
 * accumulates into the residual's own buffer: the output value becomes a view of it.
 * The output width (last spatial dim) is bounded because oneDNN's kernel setup time
 * grows linearly with it.
 */
#include <string.h>

#include "engine/engine.h"

inferd_code ops_window(plan_ctx *c, int node, const int64_t *in_spatial, const int64_t *kernel, bool ceil_mode,
                       window *w, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  const int64_t *strides, *dil, *pads;
  int ns = ir_attr_ints(n, "strides", &strides), nd = ir_attr_ints(n, "dilations", &dil);
  int np = ir_attr_ints(n, "pads", &pads);
  int k = w->nsp;
  if ((ns && ns != k) || (nd && nd != k) || (np && np != 2 * k))
    return node_fail(c, node, INFERD_INVALID_ARG, st, "strides/dilations/pads do not match %d spatial dims", k);
  const char *auto_pad = ir_attr_string(n, "auto_pad", "NOTSET");
  for (int i = 0; i < k; i++) {
    int64_t s = ns ? strides[i] : 1, d = nd ? dil[i] : 1;
    enum { LIMIT = 1 << 24 }; /* keeps all window arithmetic far from overflow */
    if (s < 1 || d < 1 || kernel[i] < 1 || s > LIMIT || d > LIMIT || kernel[i] > LIMIT)
      return node_fail(c, node, INFERD_INVALID_ARG, st, "kernel, strides and dilations must be in 1..%d", LIMIT);
    /* no value holding data is larger (plans bound values at 2^36 elements); an empty
     * one can have any dim up to 2^63 - 1, and padding it would overflow */
    if (in_spatial[i] > ((int64_t)1 << 36))
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "spatial size %lld above 2^36", (long long)in_spatial[i]);
    int64_t span = (kernel[i] - 1) * d + 1;
    int64_t pl = np ? pads[i] : 0, pr = np ? pads[i + k] : 0;
    if (pl > LIMIT || pr > LIMIT) return node_fail(c, node, INFERD_INVALID_ARG, st, "pads above %d", LIMIT);
    if (strcmp(auto_pad, "SAME_UPPER") == 0 || strcmp(auto_pad, "SAME_LOWER") == 0) {
      int64_t out = (in_spatial[i] + s - 1) / s;
      int64_t total = (out - 1) * s + span - in_spatial[i];
      if (total < 0) total = 0;
      pl = strcmp(auto_pad, "SAME_UPPER") == 0 ? total / 2 : total - total / 2;
      pr = total - pl;
    } else if (strcmp(auto_pad, "VALID") == 0) {
      pl = pr = 0;
    } else if (strcmp(auto_pad, "NOTSET") != 0) {
      return node_fail(c, node, INFERD_INVALID_ARG, st, "auto_pad '%s' is not valid", auto_pad);
    }
    if (pl < 0 || pr < 0) return node_fail(c, node, INFERD_INVALID_ARG, st, "negative padding");
    int64_t extent = in_spatial[i] + pl + pr - span;
    /* with ceil_mode a window may overhang the padded input by less than a stride: one
     * output, as in PyTorch and ONNX (a 3x3 max-pool of stride 2 over 2x2) */
    if (extent < 0 && !(ceil_mode && extent > -s))
      return node_fail(c, node, INFERD_INVALID_ARG, st, "window %lld is larger than the padded input %lld",
                       (long long)span, (long long)(in_spatial[i] + pl + pr));
    int64_t out = (ceil_mode ? (extent + s - 1) / s : extent / s) + 1;
    /* with ceil_mode, a last window must start inside the input or left padding */
    if (ceil_mode && (out - 1) * s >= in_spatial[i] + pl) out--;
    /* oneDNN wants the right padding that makes its own floor formula give `out` */
    int64_t pr_dnnl = (out - 1) * s + span - in_spatial[i] - pl;
    w->kernel[i] = kernel[i];
    w->strides[i] = s;
    w->dilation[i] = d;
    w->pad_l[i] = pl;
    w->pad_r[i] = pr_dnnl;
    w->pad_r_node[i] = pr;
    w->out[i] = out;
  }
  return INFERD_OK;
}

/* Winograd F(4x4, 3x3) (oneDNN's jit_wino_4x3) does 2.25x fewer multiplications than
 * the direct 3x3 convolution, at an error of ~1e-6 of the output's magnitude. Asked as
 * forward_training, it transforms the weights on every call from a blocked layout
 * (OIhw16i16o) instead of keeping them transformed (4x larger, which forward_inference
 * would), so the model's one copy of its weights stays the size the direct kernels'
 * is. That transform costs a pass over the weights per call, so it pays only with
 * enough output pixels per channel: measured here (2 threads, the 3x3 layers of ResNet,
 * batch 1-8) 1.4-2.0x faster from 4 pixels per channel up, 1.1x at 3, 0.25-0.94x below 2.
 * With the weights kept transformed (plan_winograd_transformed: forward_inference)
 * nothing is paid per call, and every 3x3 stride-1 convolution with at least one
 * whole 4x4 output tile takes it (ResNet's 7x7 layer4: 1.1-1.25x per layer).
 * oneDNN itself refuses what its kernel cannot do (unequal pads, clip post-ops, ...). */
static bool winograd_pays(const plan_ctx *c, const window *w, int64_t group, int64_t batch, int64_t ic, int64_t oc) {
  if (!plan_winograd(c) || w->nsp != 2 || group != 1) return false;
  for (int i = 0; i < 2; i++)
    if (w->kernel[i] != 3 || w->strides[i] != 1 || w->dilation[i] != 1) return false;
  if (plan_winograd_transformed(c)) return w->out[0] >= 4 && w->out[1] >= 4;
  return (double)batch * (double)w->out[0] * (double)w->out[1] >= 4.0 * (double)(ic > oc ? ic : oc);
}

/* The activations' layout. oneDNN's own choice (format any) for fp32 is nhwc with its
 * brgemm kernels, the fastest at batch 1-2. From batch 4 up the blocked nChw16c layout
 * with its jit kernels runs a ResNet faster: brgemm's residual sum post-op on nhwc
 * runs a 1x1 convolution at half speed at batch 8 (64->256 at 56x56: 189 against 324
 * GFLOP/s blocked), and Winograd reads and writes nChw16c, so no reorders go around
 * it. Grouped and depthwise convolutions too (left in nhwc between blocked 1x1
 * convolutions, MobileNetV2 ran at 0.74x). Only 2-D, and only channel counts that need
 * no padding to 16; a layout oneDNN has only its reference kernel for is dropped again. */
enum { CONV_BLOCKED_MIN_BATCH = 4 };

/* Except a 3x3 stride-2 convolution over 16 channels or more (ResNet's downsampling
 * layers): oneDNN's blocked jit kernel runs those at 60-78% of peak, its nhwc brgemm
 * kernel 1.2-1.4x faster, which pays for the reorders around it (resnet50 at batch 8:
 * 1.016x, median of alternating pairs; resnet18 1.006x). A stem over 3 channels is not
 * one of them: MobileNetV2's stem in nhwc ran 0.94x, its output being the largest
 * tensor to reorder. */
static bool conv_wants_blocked(const window *w, int64_t group, int64_t batch, int64_t ic) {
  if (batch < CONV_BLOCKED_MIN_BATCH) return false;
  bool downsampling = w->nsp == 2 && group == 1 && ic >= 16;
  for (int i = 0; i < w->nsp; i++) downsampling = downsampling && w->kernel[i] == 3 && w->strides[i] == 2;
  return !downsampling;
}

static void md_blocked16(dnnl_memory_desc_t *md, const plan_value *v) {
  if (v->rank != 4 || v->dims[1] % 16) return;
  dnnl_dims_t d = {v->dims[0], v->dims[1], v->dims[2], v->dims[3]};
  dnnl_memory_desc_init_by_tag(md, 4, d, md->data_type, dnnl_nChw16c);
}

static bool conv_is_winograd(const_dnnl_primitive_desc_t pd) {
  const_dnnl_op_desc_t op;
  return dnnl_primitive_desc_query(pd, dnnl_query_op_d, 0, &op) == dnnl_success &&
         ((const dnnl_convolution_desc_t *)op)->alg_kind == dnnl_convolution_winograd;
}

/* Does `small` (right-aligned, size-1 axes broadcast) broadcast to `big`'s shape? Fills
 * `padded` with small's dims padded to big's rank with leading 1s. */
static bool broadcasts_to(const plan_value *small, const plan_value *big, int64_t *padded) {
  if (small->rank > big->rank) return false;
  int lead = big->rank - small->rank;
  for (int i = 0; i < big->rank; i++) {
    padded[i] = i < lead ? 1 : small->dims[i - lead];
    if (padded[i] != big->dims[i] && padded[i] != 1) return false;
  }
  return true;
}

/* The fused residual has another shape than the Conv's output (a broadcast Add the pass
 * could not see). The convolution has written its own buffer with no post-ops; then a
 * binary Add carries the post-ops after the sum. When the residual broadcasts to the
 * Conv's output, the Add is done in place in that buffer (the node's output); when the
 * Conv's output broadcasts to the residual's shape, the Conv wrote `conv_out` and the
 * Add writes the node's output, with the residual's shape. */
static inferd_code add_residual_unfused(plan_ctx *c, int node, int residual, int conv_out, inferd_status *st) {
  const node_extra *x = plan_extra(c, node);
  int out = plan_node(c, node)->outputs[0];
  plan_value *ov = plan_val(c, out), *rv = plan_val(c, residual);
  bool widen = conv_out != IR_NONE;
  plan_value *small = widen ? plan_val(c, conv_out) : rv, *big = widen ? rv : ov;
  int64_t padded[IR_MAX_RANK];
  if (!broadcasts_to(small, big, padded))
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "the residual Add of '%s' and the output does not broadcast",
                     plan_graph(c)->values[residual].name);
  dnnl_memory_desc_t plain;
  md_plain(&plain, small->rank, small->dims, INFERD_DTYPE_FLOAT);
  plan_ref args[3];
  inferd_code rc;
  if (widen) {
    if ((rc = plan_src(c, residual, NULL, &args[0], st)) != INFERD_OK) return rc;
    if ((rc = plan_src(c, conv_out, &plain, &args[1], st)) != INFERD_OK) return rc;
    ov->dtype = INFERD_DTYPE_FLOAT;
    ov->rank = rv->rank;
    memcpy(ov->dims, rv->dims, (size_t)rv->rank * sizeof *rv->dims);
    if ((rc = plan_define(c, out, &args[0].md, st)) != INFERD_OK) return rc;
  } else {
    args[0] = ov->ref;
    if ((rc = plan_src(c, residual, &plain, &args[1], st)) != INFERD_OK) return rc;
  }
  md_plain(&args[1].md, big->rank, padded, INFERD_DTYPE_FLOAT); /* same bytes, rank padded */
  args[2] = ov->ref;
  dnnl_primitive_attr_t attr = plan_attr_new();
  dnnl_post_ops_t po;
  if (dnnl_post_ops_create(&po) == dnnl_success) {
    for (int i = 0; i < x->n_fused; i++)
      if (x->fused[i].kind == FUSED_ELTWISE)
        dnnl_post_ops_append_eltwise(po, 1.0f, x->fused[i].alg, x->fused[i].alpha, x->fused[i].beta);
    dnnl_primitive_attr_set_post_ops(attr, po);
    dnnl_post_ops_destroy(po);
  }
  dnnl_primitive_desc_t pd = ops_binary_pd(c, dnnl_binary_add, &args[0].md, &args[1].md, attr);
  dnnl_primitive_attr_destroy(attr);
  if (!pd) return node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN refuses the residual Add");
  int kinds[3] = {DNNL_ARG_SRC_0, DNNL_ARG_SRC_1, DNNL_ARG_DST};
  return plan_emit(c, node, OP_ADD, pd, 3, kinds, args, 0, st);
}

/* An algorithm and a weights layout to offer oneDNN */
typedef struct {
  dnnl_alg_kind_t alg;
  const dnnl_memory_desc_t *w;
} conv_try;

inferd_code ops_conv_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  const node_extra *x = plan_extra(c, node);
  if (n->n_inputs < 2 || n->inputs[0] == IR_NONE || n->inputs[1] == IR_NONE || n->n_outputs != 1)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "needs inputs X and W and one output");
  plan_value *xv = plan_val(c, n->inputs[0]), *wv = plan_val(c, n->inputs[1]);
  int bias = n->n_inputs > 2 ? n->inputs[2] : IR_NONE;
  if (!wv->is_const) return node_fail(c, node, INFERD_UNSUPPORTED, st, "weights computed at run time are not supported");
  if (xv->dtype != INFERD_DTYPE_FLOAT || wv->dtype != INFERD_DTYPE_FLOAT)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "only float32 is supported");
  if (xv->rank < 3 || xv->rank > 5 || wv->rank != xv->rank)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "input rank %d and weight rank %d (want 3-5, equal)", xv->rank,
                     wv->rank);
  int64_t group = ir_attr_int(n, "group", 1);
  int64_t batch = xv->dims[0], ic = xv->dims[1], oc = wv->dims[0];
  if (group < 1 || ic % group || oc % group || ic / group != wv->dims[1])
    return node_fail(c, node, INFERD_INVALID_ARG, st, "group %lld, %lld input channels and weights %lld x %lld disagree",
                     (long long)group, (long long)ic, (long long)oc, (long long)wv->dims[1]);
  if (bias != IR_NONE) {
    plan_value *bv = plan_val(c, bias);
    /* the type too: an int64 bias has no oneDNN data type, and its plain layout was
     * left unset (stack garbage) for the weight cache to read its size from */
    if (!bv->is_const || bv->dtype != INFERD_DTYPE_FLOAT || bv->rank != 1 || bv->dims[0] != oc)
      return node_fail(c, node, INFERD_INVALID_ARG, st, "bias must be a float32 constant of %lld elements",
                       (long long)oc);
  }
  const int64_t *ks;
  int nk = ir_attr_ints(n, "kernel_shape", &ks);
  window w = {.nsp = xv->rank - 2};
  if (nk && (nk != w.nsp || memcmp(ks, wv->dims + 2, (size_t)nk * sizeof *ks) != 0))
    return node_fail(c, node, INFERD_INVALID_ARG, st, "kernel_shape does not match the weights");
  inferd_code rc = ops_window(c, node, xv->dims + 2, wv->dims + 2, false, &w, st);
  if (rc != INFERD_OK) return rc;
  /* oneDNN's convolution setup (brgconv) takes time linear in the output width:
   * about 2 s at this bound, 10 s at 2^20 */
  enum { CONV_MAX_WIDTH = 1 << 18 };
  if (w.out[w.nsp - 1] > CONV_MAX_WIDTH)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "output width %lld above %d", (long long)w.out[w.nsp - 1],
                     CONV_MAX_WIDTH);

  int residual = IR_NONE, conv_out = IR_NONE;
  for (int i = 0; i < x->n_fused; i++)
    if (x->fused[i].kind == FUSED_SUM) residual = x->fused[i].residual, conv_out = x->fused[i].conv_out;
  /* the Conv's output: the node's, unless the fused Add broadcasts it up to the
   * residual's shape (add_residual_unfused) */
  int64_t conv_dims[IR_MAX_RANK] = {batch, oc};
  for (int i = 0; i < w.nsp; i++) conv_dims[2 + i] = w.out[i];
  bool widen = false;
  if (residual != IR_NONE) {
    plan_value *rv = plan_val(c, residual);
    int lead = xv->rank - rv->rank; /* right-aligned */
    widen = lead < 0;
    for (int i = lead < 0 ? 0 : lead; i < xv->rank && !widen; i++) widen = rv->dims[i - lead] > conv_dims[i];
  }
  int out = widen ? conv_out : n->outputs[0];
  plan_value *ov = plan_val(c, out);
  ov->dtype = INFERD_DTYPE_FLOAT;
  ov->rank = xv->rank;
  memcpy(ov->dims, conv_dims, (size_t)xv->rank * sizeof *conv_dims);

  /* oneDNN descriptors: grouped weights get a leading group dim */
  dnnl_memory_desc_t src_any, w_any, b_md, dst_any, w_plain;
  md_any(&src_any, xv->rank, xv->dims);
  md_any(&dst_any, ov->rank, ov->dims);
  int64_t wdims[IR_MAX_RANK + 1];
  int wrank = wv->rank;
  if (group > 1) {
    wdims[0] = group;
    wdims[1] = oc / group;
    memcpy(wdims + 2, wv->dims + 1, (size_t)(wv->rank - 1) * sizeof *wdims);
    wrank++;
  } else {
    memcpy(wdims, wv->dims, (size_t)wv->rank * sizeof *wdims);
  }
  /* an empty weight [0, 0, k] divides by any group: with no output channel, the group
   * dim no longer cancels out, and [group, 0, 0, k] past int64 overflows the strides */
  if (core_shape_count(wrank, wdims) < 0)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "group %lld is too large for weights of %lld output channels",
                     (long long)group, (long long)oc);
  md_any(&w_any, wrank, wdims);
  md_plain(&w_plain, wrank, wdims, INFERD_DTYPE_FLOAT);
  md_plain(&b_md, 1, &oc, INFERD_DTYPE_FLOAT);
  dnnl_dims_t dil;
  for (int i = 0; i < w.nsp; i++) dil[i] = w.dilation[i] - 1;
  bool in_place = residual != IR_NONE && !plan_val(c, residual)->is_const &&
                  plan_val(c, residual)->rank == ov->rank &&
                  memcmp(plan_val(c, residual)->dims, ov->dims, (size_t)ov->rank * sizeof *ov->dims) == 0;
  /* bfloat16 source, weights and output (float32 bias and accumulation); a residual
   * added by a separate binary op (add_residual_unfused) keeps the Conv in float32 */
  bool bf16 = plan_bf16(c) && (residual == IR_NONE || in_place);
  if (bf16) src_any.data_type = w_any.data_type = dst_any.data_type = dnnl_bf16;
  dnnl_primitive_attr_t attr = residual == IR_NONE || in_place ? plan_attr_fused(c, node) : plan_attr_new();
  /* Weights already reordered for another plan: ask for that layout first (with either
   * algorithm), so the model keeps one copy; oneDNN's own choice (any) when no kernel
   * takes it. Winograd first where it pays, the direct convolution otherwise. A
   * transformed Winograd copy is never offered (engine_md_is_wino): a kernel that picks
   * Winograd with its weights transformed gets a copy of its own blocking, shared by
   * every plan whose kernel blocks them the same way. */
  const dnnl_memory_desc_t *have = plan_weight_layout(c, n->inputs[1], &w_plain, w_any.data_type);
  bool wino = !bf16 && winograd_pays(c, &w, group, batch, ic, oc); /* oneDNN's is float32 only */
  dnnl_memory_desc_t src_blocked = src_any, dst_blocked = dst_any;
  if (conv_wants_blocked(&w, group, batch, ic)) {
    md_blocked16(&src_blocked, xv);
    md_blocked16(&dst_blocked, ov);
  }
  bool blocked = !dnnl_memory_desc_equal(&src_blocked, &src_any) || !dnnl_memory_desc_equal(&dst_blocked, &dst_any);
  /* (algorithm, weights) in the order tried: Winograd, then direct, on the layout another
   * plan made, then on oneDNN's choice; transformed Winograd takes no given layout, so it
   * comes first, on its own choice */
  bool transformed = plan_winograd_transformed(c);
  conv_try tries[4];
  int n_tries = 0;
  if (wino && transformed) tries[n_tries++] = (conv_try){dnnl_convolution_winograd, &w_any};
  if (have && wino && !transformed) tries[n_tries++] = (conv_try){dnnl_convolution_winograd, have};
  if (have) tries[n_tries++] = (conv_try){dnnl_convolution_direct, have};
  if (wino && !transformed) tries[n_tries++] = (conv_try){dnnl_convolution_winograd, &w_any};
  tries[n_tries++] = (conv_try){dnnl_convolution_direct, &w_any};
  /* On oneDNN's own choice of layout, a reference kernel is taken only when nothing else
   * runs: the weights' layout another plan made is tried first, and oneDNN may have only
   * its reference kernel for it (brgemm's 1x1 weights chosen in a 1-thread plan are
   * refused by brgemm in a 2-thread one: regnet_y_400mf's 1x1 layer took 390 ms on the
   * reference kernel, 98% of the model). That plan then makes its own copy of those
   * weights. On the blocked layout the first kernel found decides, as before: a reference
   * one there sends the layer to oneDNN's choice, where the shared copy usually fits. */
  dnnl_primitive_desc_t pd = NULL, reference = NULL;
  for (int layout = blocked ? 0 : 1; layout < 2 && !pd; layout++) {
    for (int k = 0; k < n_tries && !pd; k++) {
      bool by_winograd = tries[k].alg == dnnl_convolution_winograd;
      dnnl_convolution_desc_t desc;
      if (dnnl_dilated_convolution_forward_desc_init(
              &desc, by_winograd && !transformed ? dnnl_forward_training : dnnl_forward_inference, tries[k].alg,
              layout == 0 ? &src_blocked : &src_any, tries[k].w, bias != IR_NONE ? &b_md : NULL,
              layout == 0 ? &dst_blocked : &dst_any, w.strides, dil, w.pad_l, w.pad_r) != dnnl_success ||
          dnnl_primitive_desc_create(&pd, &desc, attr, plan_engine(c), NULL) != dnnl_success)
        pd = NULL;
      if (pd && plan_pd_is_reference(pd)) {
        if (layout == 1 && !reference) reference = pd; /* the blocked layout's is dropped */
        else dnnl_primitive_desc_destroy(pd);
        pd = NULL;
        if (layout == 0) break;
      }
    }
  }
  if (pd && reference) dnnl_primitive_desc_destroy(reference);
  else if (!pd) pd = reference;
  dnnl_primitive_attr_destroy(attr);
  if (!pd) return node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN has no kernel for this convolution");
  const dnnl_memory_desc_t *src_md = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  const dnnl_memory_desc_t *dst_md = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);

  plan_ref args[4];
  int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
  int na = 0;
  if ((rc = plan_src(c, n->inputs[0], src_md, &args[na++], st)) != INFERD_OK) goto fail;
  if ((rc = plan_weight(c, n->inputs[1], &w_plain, w_md, &args[na++], st)) != INFERD_OK) goto fail;
  if (bias != IR_NONE) {
    if ((rc = plan_weight(c, bias, NULL, &b_md, &args[na++], st)) != INFERD_OK) goto fail;
  } else {
    kinds[2] = DNNL_ARG_DST;
  }
  if (in_place) {
    if ((rc = plan_src(c, residual, dst_md, &args[na], st)) != INFERD_OK) goto fail;
    ov->defined = true;
    ov->ref = args[na++];
  } else {
    if ((rc = plan_define(c, out, dst_md, st)) != INFERD_OK) goto fail;
    args[na++] = ov->ref;
  }
  double flops = 2.0 * (double)core_shape_count(ov->rank, ov->dims) * (double)(ic / group);
  for (int i = 0; i < w.nsp; i++) flops *= (double)w.kernel[i];
  rc = plan_emit(c, node, conv_is_winograd(pd) ? OP_CONV_WINOGRAD : OP_CONV, pd, na, kinds, args, flops, st);
  if (rc == INFERD_OK && residual != IR_NONE && !in_place)
    rc = add_residual_unfused(c, node, residual, widen ? conv_out : IR_NONE, st);
  return rc;
fail:
  dnnl_primitive_desc_destroy(pd);
  return rc;
}
