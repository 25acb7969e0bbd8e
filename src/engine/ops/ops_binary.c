/*
 * ops_binary.c - Add, Sub, Mul, Div, Pow, Max and Min of two inputs, the comparisons
 * Greater, Less, GreaterOrEqual and LessOrEqual, with ONNX (numpy) broadcasting, and
 * Where on tensors computed at run time.
 *
 * Tensors computed at run time go to oneDNN's binary primitive: the operand with the
 * output's full shape is src0 (kept in its own layout, blocked or not), the other is
 * src1, broadcast along its size-1 dims. Sub and Div with the small operand first
 * swap them and undo the swap with a post-op: a - b = -(b - a), a / b = 1 / (b / a)
 * (or run as one element-wise linear op, for a scalar constant minus a tensor). Pow
 * needs a scalar constant exponent. A comparison writes bools (oneDNN u8, 0 or 1) in the
 * plain layout; with its operands swapped it becomes the mirrored comparison. Where
 * selects element by element (a step of its own: no oneDNN primitive selects) from
 * plain operands of the output's shape or of one element. Constant operands on both
 * sides (the shape arithmetic of exported graphs) are computed right here, in float32
 * or int64.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

bool ops_broadcast_shape(const plan_value *a, const plan_value *b, int *rank, int64_t *dims) {
  /* into locals first: the result may be written over a's own rank and dims */
  int r = CORE_MAX(a->rank, b->rank);
  int64_t d[IR_MAX_RANK];
  for (int i = 0; i < r; i++) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    d[i] = da == 1 ? db : da;
  }
  *rank = r;
  memcpy(dims, d, (size_t)r * sizeof *d);
  return true;
}

int64_t ops_broadcast_offset(const plan_value *v, int rank, const int64_t *idx) {
  int64_t off = 0;
  for (int i = 0; i < v->rank; i++) {
    int o = i + rank - v->rank;
    off = off * v->dims[i] + (v->dims[i] == 1 ? 0 : idx[o]);
  }
  return off;
}

static bool is_comparison(op_kind op) {
  return op == OP_GREATER || op == OP_LESS || op == OP_GREATEROREQUAL || op == OP_LESSOREQUAL;
}

static double apply(op_kind op, double x, double y) {
  switch (op) {
  case OP_GREATER: return x > y;
  case OP_LESS: return x < y;
  case OP_GREATEROREQUAL: return x >= y;
  case OP_LESSOREQUAL: return x <= y;
  case OP_ADD: return x + y;
  case OP_SUB: return x - y;
  case OP_MUL: return x * y;
  case OP_DIV: return x / y; /* IEEE 754, as at run time: x / 0 is inf or NaN */
  case OP_MAX: return x != x || x > y ? x : y; /* a NaN on either side wins */
  case OP_MIN: return x != x || x < y ? x : y;
  default: return pow(x, y);
  }
}

static inferd_code fold(plan_ctx *c, int node, op_kind op, const plan_value *a, const plan_value *b, int rank,
                        const int64_t *dims, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  int64_t count = core_shape_count(rank, dims);
  if (a->dtype != b->dtype || (a->dtype != INFERD_DTYPE_FLOAT && a->dtype != INFERD_DTYPE_INT64) || count < 0 ||
      count > (1 << 22))
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "constant operands of this type or size are not supported");
  if (!a->data || !b->data) return node_fail(c, node, INFERD_INTERNAL, st, "constant data was released");
  inferd_dtype to = is_comparison(op) ? INFERD_DTYPE_BOOL : a->dtype;
  void *out = malloc((size_t)(count ? count : 1) * core_dtype_size(to));
  if (!out) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  int64_t idx[IR_MAX_RANK] = {0};
  for (int64_t e = 0; e < count; e++) {
    int64_t oa = ops_broadcast_offset(a, rank, idx), ob = ops_broadcast_offset(b, rank, idx);
    if (a->dtype == INFERD_DTYPE_FLOAT) {
      double r = apply(op, ((const float *)a->data)[oa], ((const float *)b->data)[ob]);
      if (to == INFERD_DTYPE_BOOL) ((uint8_t *)out)[e] = r != 0;
      else ((float *)out)[e] = (float)r;
    } else if (to == INFERD_DTYPE_BOOL) { /* compared as integers: a double would round above 2^53 */
      int64_t x = ((const int64_t *)a->data)[oa], y = ((const int64_t *)b->data)[ob];
      ((uint8_t *)out)[e] = op == OP_GREATER ? x > y : op == OP_LESS ? x < y
                          : op == OP_GREATEROREQUAL ? x >= y : x <= y;
    } else {
      int64_t x = ((const int64_t *)a->data)[oa], y = ((const int64_t *)b->data)[ob];
      /* wrap like the two's-complement hardware does, never overflow (undefined) */
      uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
      int64_t r = op == OP_ADD ? (int64_t)(ux + uy) : op == OP_SUB ? (int64_t)(ux - uy)
                : op == OP_MUL ? (int64_t)(ux * uy)
                : op == OP_DIV ? (y == 0 || (x == INT64_MIN && y == -1) ? 0 : x / y)
                : op == OP_MAX ? CORE_MAX(x, y) : op == OP_MIN ? CORE_MIN(x, y)
                : engine_to_i64(pow((double)x, (double)y));
      ((int64_t *)out)[e] = r;
    }
    for (int i = rank - 1; i >= 0 && ++idx[i] == dims[i]; i--) idx[i] = 0;
  }
  inferd_code rc = plan_set_const(c, n->outputs[0], to, rank, dims, out, st);
  free(out);
  return rc;
}

static inferd_code eltwise(plan_ctx *c, int node, int input, dnnl_alg_kind_t alg, float alpha, float beta,
                           inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  plan_ref src;
  inferd_code rc = plan_src(c, input, NULL, &src, st);
  if (rc != INFERD_OK) return rc;
  dnnl_eltwise_desc_t desc;
  dnnl_primitive_desc_t pd;
  dnnl_primitive_attr_t attr = plan_attr_new();
  dnnl_status_t drc = dnnl_eltwise_forward_desc_init(&desc, dnnl_forward_inference, alg, &src.md, alpha, beta);
  if (drc == dnnl_success) drc = dnnl_primitive_desc_create(&pd, &desc, attr, plan_engine(c), NULL);
  dnnl_primitive_attr_destroy(attr);
  if (drc != dnnl_success) return node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN refuses this element-wise op");
  if ((rc = plan_define(c, n->outputs[0], &src.md, st)) != INFERD_OK) {
    dnnl_primitive_desc_destroy(pd);
    return rc;
  }
  plan_ref args[2] = {src, plan_val(c, n->outputs[0])->ref};
  int kinds[2] = {DNNL_ARG_SRC, DNNL_ARG_DST};
  return plan_emit(c, node, plan_extra(c, node)->op, pd, 2, kinds, args, 0, st);
}

/* Most elements a constant is copied out to (ops_broadcast_weight) for a kernel to read
 * it whole: 64 MB of floats. */
enum { EXPAND_MAX_ELEMENTS = 1 << 24 };

inferd_code ops_broadcast_weight(plan_ctx *c, int node, int v, int rank, const int64_t *to,
                                 const dnnl_memory_desc_t *want, plan_ref *out, inferd_status *st) {
  const plan_value *pv = plan_val(c, v);
  int64_t count = core_shape_count(rank, to);
  if (count <= 0 || count > EXPAND_MAX_ELEMENTS) /* oneDNN divides by zero reordering nothing */
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "a constant would be broadcast to %lld elements",
                     (long long)count);
  /* read with stride 0 along the axes it is broadcast over */
  dnnl_memory_desc_t own, wide, plain;
  md_plain(&own, pv->rank, pv->dims, pv->dtype);
  md_plain(&plain, rank, to, pv->dtype);
  wide = plain;
  dnnl_dims_t *strides = &wide.format_desc.blocking.strides;
  for (int i = 0, off = rank - pv->rank; i < rank; i++)
    (*strides)[i] = i < off || (pv->dims[i - off] == 1 && to[i] != 1) ? 0 : own.format_desc.blocking.strides[i - off];
  return plan_weight(c, v, &wide, want ? want : &plain, out, st);
}

static bool scalar_const(const plan_value *v, float *out) {
  if (!v->is_const || !v->data || v->dtype != INFERD_DTYPE_FLOAT || core_shape_count(v->rank, v->dims) != 1) return false;
  *out = *(const float *)v->data;
  return true;
}

/* The binary op writing `dst` (NULL: in src0's layout and type). */
static dnnl_primitive_desc_t binary_pd(plan_ctx *c, dnnl_alg_kind_t alg, const dnnl_memory_desc_t *a,
                                       const dnnl_memory_desc_t *b, const dnnl_memory_desc_t *dst,
                                       const_dnnl_primitive_attr_t attr) {
  dnnl_binary_desc_t desc;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_attr_t own = attr ? NULL : plan_attr_new();
  if (dnnl_binary_desc_init(&desc, alg, a, b, dst ? dst : a) != dnnl_success ||
      dnnl_primitive_desc_create(&pd, &desc, attr ? attr : own, plan_engine(c), NULL) != dnnl_success)
    pd = NULL;
  if (own) dnnl_primitive_attr_destroy(own);
  return pd;
}

dnnl_primitive_desc_t ops_binary_pd(plan_ctx *c, dnnl_alg_kind_t alg, const dnnl_memory_desc_t *a,
                                    const dnnl_memory_desc_t *b, const_dnnl_primitive_attr_t attr) {
  return binary_pd(c, alg, a, b, NULL, attr);
}

/* A broadcast operand in the blocked layout its producer wrote (the [N, C, 1, 1] scales
 * of a squeeze-excitation block) beside a blocked tensor `a`: oneDNN's jit kernel takes
 * the pair as they are, where a plain operand beside a blocked one gets only its
 * reference kernel. Returns the pair's primitive descriptor, or NULL. */
static dnnl_primitive_desc_t broadcast_as_is(plan_ctx *c, dnnl_alg_kind_t alg, const dnnl_memory_desc_t *a,
                                             const plan_value *v1, int rank, const_dnnl_primitive_attr_t attr) {
  if (v1->is_const || !v1->defined || v1->rank != rank || md_is_plain(a)) return NULL;
  dnnl_primitive_desc_t pd = ops_binary_pd(c, alg, a, &v1->ref.md, attr);
  if (pd && plan_pd_is_reference(pd)) {
    dnnl_primitive_desc_destroy(pd);
    pd = NULL;
  }
  return pd;
}

/* With plan_bf16: a binary op whose whole-shape operand src0 a convolution wrote in
 * bfloat16 (squeeze-excitation's product) computes in that layout and type and writes
 * bfloat16, instead of converting to float32 before and back after for the next
 * convolution (efficientnet_b0 spent 30% of its bf16 time in those reorders). Only
 * where oneDNN has an optimized kernel for the pair; *done false (nothing emitted)
 * leaves the op to the float32 path. */
static inferd_code binary_bf16(plan_ctx *c, int node, dnnl_alg_kind_t alg, int src0, int src1, int rank, bool *done,
                               inferd_status *st) {
  *done = false;
  const plan_value *v0 = plan_val(c, src0), *v1 = plan_val(c, src1);
  if (!plan_bf16(c) || v0->is_const || !v0->defined || v0->ref.md.data_type != dnnl_bf16) return INFERD_OK;
  plan_ref args[3];
  inferd_code rc = plan_src_typed(c, src0, &args[0], st);
  if (rc != INFERD_OK) return rc;
  bool same = !v1->is_const && v1->rank == v0->rank && memcmp(v1->dims, v0->dims, (size_t)rank * sizeof *v0->dims) == 0;
  dnnl_primitive_desc_t pd = same ? binary_pd(c, alg, &args[0].md, &args[0].md, NULL, NULL)
                                  : broadcast_as_is(c, alg, &args[0].md, v1, rank, NULL);
  if (pd && plan_pd_is_reference(pd)) {
    dnnl_primitive_desc_destroy(pd);
    pd = NULL;
  }
  if (!pd) return INFERD_OK;
  rc = same ? plan_src(c, src1, &args[0].md, &args[1], st) : plan_src_typed(c, src1, &args[1], st);
  if (rc == INFERD_OK) rc = plan_define(c, plan_node(c, node)->outputs[0], &args[0].md, st);
  if (rc != INFERD_OK) {
    dnnl_primitive_desc_destroy(pd);
    return rc;
  }
  *done = true;
  args[2] = plan_val(c, plan_node(c, node)->outputs[0])->ref;
  int kinds[3] = {DNNL_ARG_SRC_0, DNNL_ARG_SRC_1, DNNL_ARG_DST};
  return plan_emit(c, node, plan_extra(c, node)->op, pd, 3, kinds, args, 0, st);
}

inferd_code ops_binary_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  op_kind op = plan_extra(c, node)->op;
  if ((op == OP_MAX || op == OP_MIN) && n->n_inputs != 2)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "only two inputs are supported, not %d", n->n_inputs);
  if (n->n_inputs != 2 || n->inputs[0] == IR_NONE || n->inputs[1] == IR_NONE || n->n_outputs != 1)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "needs two inputs and one output");
  plan_value *a = plan_val(c, n->inputs[0]), *b = plan_val(c, n->inputs[1]), *ov = plan_val(c, n->outputs[0]);
  int rank;
  int64_t dims[IR_MAX_RANK];
  if (!ops_broadcast_shape(a, b, &rank, dims)) {
    char sa[96], sb[96];
    return node_fail(c, node, INFERD_INVALID_ARG, st, "shapes %s and %s do not broadcast",
                     core_shape_str(a->rank, a->dims, sa, sizeof sa), core_shape_str(b->rank, b->dims, sb, sizeof sb));
  }
  if (a->is_const && b->is_const) return fold(c, node, op, a, b, rank, dims, st);
  if (a->dtype != INFERD_DTYPE_FLOAT || b->dtype != INFERD_DTYPE_FLOAT)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "only float32 is supported for tensors computed at run time");
  const bool cmp = is_comparison(op);
  ov->dtype = cmp ? INFERD_DTYPE_BOOL : INFERD_DTYPE_FLOAT;
  ov->rank = rank;
  memcpy(ov->dims, dims, sizeof dims);
  dnnl_memory_desc_t plain, bools; /* a comparison's operands and output: the plain layout */
  md_plain(&plain, rank, dims, INFERD_DTYPE_FLOAT);
  md_plain(&bools, rank, dims, INFERD_DTYPE_BOOL);
  op_kind as = op; /* the op as run: mirrored when a comparison's operands are swapped */
  float k;
  if (op == OP_POW) {
    if (!scalar_const(b, &k) || a->rank != rank)
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "the exponent must be a scalar constant");
    return eltwise(c, node, n->inputs[0], dnnl_eltwise_pow, 1.0f, k, st);
  }
  bool a_full = a->rank == rank && memcmp(a->dims, dims, (size_t)rank * sizeof *dims) == 0;
  bool b_full = b->rank == rank && memcmp(b->dims, dims, (size_t)rank * sizeof *dims) == 0;
  int src0 = n->inputs[0], src1 = n->inputs[1];
  dnnl_primitive_attr_t attr = NULL; /* the post-op that undoes a swap of Sub's or Div's operands */
  if (!a_full) {
    if (!b_full) return node_fail(c, node, INFERD_UNSUPPORTED, st, "both operands are broadcast");
    if (op == OP_SUB && scalar_const(a, &k)) return eltwise(c, node, src1, dnnl_eltwise_linear, -1.0f, k, st);
    if (cmp) /* a > b is b < a */
      as = op == OP_GREATER ? OP_LESS : op == OP_LESS ? OP_GREATER : op == OP_GREATEROREQUAL ? OP_LESSOREQUAL
                                                                                                : OP_GREATEROREQUAL;
    if (op == OP_SUB || op == OP_DIV) {
      dnnl_post_ops_t po;
      if (dnnl_post_ops_create(&po) != dnnl_success) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
      /* -1 x + 0, or 1 x^-1; a - b = -(b - a) but for the sign of a zero difference
       * (+0 - +0 and -0 - +0 differ, b - a does not), and a / b = 1 / (b / a) to 1 ulp */
      bool sub = op == OP_SUB;
      dnnl_post_ops_append_eltwise(po, 1.0f, sub ? dnnl_eltwise_linear : dnnl_eltwise_pow, sub ? -1.0f : 1.0f,
                                   sub ? 0.0f : -1.0f);
      attr = plan_attr_new();
      dnnl_primitive_attr_set_post_ops(attr, po);
      dnnl_post_ops_destroy(po);
    }
    src0 = n->inputs[1], src1 = n->inputs[0];
  }
  plan_value *v1 = plan_val(c, src1);
  dnnl_alg_kind_t alg = as == OP_ADD ? dnnl_binary_add : as == OP_SUB ? dnnl_binary_sub
                      : as == OP_MUL ? dnnl_binary_mul : as == OP_DIV ? dnnl_binary_div
                      : as == OP_MAX ? dnnl_binary_max : as == OP_MIN ? dnnl_binary_min
                      : as == OP_GREATER ? dnnl_binary_gt : as == OP_LESS ? dnnl_binary_lt
                      : as == OP_GREATEROREQUAL ? dnnl_binary_ge : dnnl_binary_le;
  if (!cmp && !attr) {
    bool done;
    inferd_code rc16 = binary_bf16(c, node, alg, src0, src1, rank, &done, st);
    if (rc16 != INFERD_OK || done) return rc16;
  }
  plan_ref args[3];
  inferd_code rc = plan_src(c, src0, cmp ? &plain : NULL, &args[0], st);
  dnnl_primitive_desc_t pd = NULL;
  if (rc != INFERD_OK) {
    if (attr) dnnl_primitive_attr_destroy(attr);
    return rc;
  }
  if (v1->rank == rank && memcmp(v1->dims, dims, (size_t)rank * sizeof *dims) == 0 && !v1->is_const) {
    rc = plan_src(c, src1, &args[0].md, &args[1], st);
  } else if ((pd = broadcast_as_is(c, alg, &args[0].md, v1, rank, attr))) {
    rc = plan_src_typed(c, src1, &args[1], st); /* as the pair was made: in bfloat16 too */
  } else {
    int64_t d1[IR_MAX_RANK];
    for (int i = 0; i < rank; i++) d1[i] = i < rank - v1->rank ? 1 : v1->dims[i - (rank - v1->rank)];
    dnnl_memory_desc_t md1, src_as;
    md_plain(&md1, rank, d1, INFERD_DTYPE_FLOAT);
    md_plain(&src_as, v1->rank, v1->dims, INFERD_DTYPE_FLOAT);
    if (v1->is_const) {
      rc = plan_weight(c, src1, &md1, &md1, &args[1], st);
    } else {
      rc = plan_src(c, src1, &src_as, &args[1], st);
      args[1].md = md1; /* same bytes, rank padded with leading 1s */
    }
  }
  if (rc == INFERD_OK && !pd && !(pd = binary_pd(c, alg, &args[0].md, &args[1].md, cmp ? &bools : NULL, attr)))
    rc = node_fail(c, node, INFERD_UNSUPPORTED, st, "oneDNN refuses this binary op");
  if (rc == INFERD_OK && !v1->is_const && rank == 4 && v1->rank == 4 && plan_pd_is_reference(pd)) {
    /* a tensor broadcast beside another in a layout oneDNN's optimized binary kernels
     * do not take ran on the reference kernel: regnet_y's squeeze-excitation, [N, C, 1, 1]
     * times [N, C, H, W] in the nChw8c its grouped convolutions write, took most of the
     * model's time. Both operands in one of these layouts, at the cost of reorders, take
     * the optimized kernel. */
    static const dnnl_format_tag_t tags[] = {dnnl_nChw16c, dnnl_nhwc, dnnl_nchw};
    dnnl_dims_t d0, d1;
    for (int i = 0; i < 4; i++) d0[i] = dims[i], d1[i] = v1->dims[i];
    for (size_t t = 0; t < CORE_ARRAY_LEN(tags); t++) {
      dnnl_memory_desc_t m0, m1;
      dnnl_primitive_desc_t pd2 = NULL;
      if (dnnl_memory_desc_init_by_tag(&m0, 4, d0, dnnl_f32, tags[t]) != dnnl_success ||
          dnnl_memory_desc_init_by_tag(&m1, 4, d1, dnnl_f32, tags[t]) != dnnl_success ||
          !(pd2 = binary_pd(c, alg, &m0, &m1, cmp ? &bools : NULL, attr)))
        continue;
      if (plan_pd_is_reference(pd2)) {
        dnnl_primitive_desc_destroy(pd2);
        continue;
      }
      if ((rc = plan_src(c, src0, &m0, &args[0], st)) == INFERD_OK) rc = plan_src(c, src1, &m1, &args[1], st);
      dnnl_primitive_desc_destroy(rc == INFERD_OK ? pd : pd2);
      if (rc == INFERD_OK) pd = pd2;
      break;
    }
  }
  if (rc == INFERD_OK && v1->is_const && plan_pd_is_reference(pd)) {
    /* a constant broadcast in a way oneDNN's optimized kernels do not take (Swin's
     * attention mask, [1, W, 1, L, L] over [N, W, H, L, L]) ran on its reference kernel,
     * 50x slower: copied out to the full shape in src0's layout once per plan, it is a
     * plain elementwise op */
    plan_ref full;
    dnnl_primitive_desc_t pd2 = NULL;
    inferd_status ignored = {0}; /* without the copy, the reference kernel still runs */
    if (ops_broadcast_weight(c, node, src1, rank, dims, &args[0].md, &full, &ignored) == INFERD_OK &&
        (pd2 = binary_pd(c, alg, &args[0].md, &full.md, cmp ? &bools : NULL, attr))) {
      dnnl_primitive_desc_destroy(pd);
      pd = pd2;
      args[1] = full;
    }
  }
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (rc != INFERD_OK) {
    if (pd) dnnl_primitive_desc_destroy(pd);
    return rc;
  }
  if ((rc = plan_define(c, n->outputs[0], cmp ? &bools : &args[0].md, st)) != INFERD_OK) {
    dnnl_primitive_desc_destroy(pd);
    return rc;
  }
  args[2] = ov->ref;
  int kinds[3] = {DNNL_ARG_SRC_0, DNNL_ARG_SRC_1, DNNL_ARG_DST};
  return plan_emit(c, node, op, pd, 3, kinds, args, 0, st);
}

/* out[i] = cond[i] ? x[i] : y[i]; params: the count, and bit k set when operand k
 * (cond, x, y) has one element. Operands and output are distinct buffers. */
static void where_step(const plan_step *s, void *const *ptrs) {
  const uint8_t *cond = ptrs[0];
  const float *x = ptrs[1], *y = ptrs[2];
  float *out = ptrs[3];
  const int64_t count = s->params[0], one = s->params[1];
  for (int64_t i = 0; i < count; i++) out[i] = cond[one & 1 ? 0 : i] ? x[one & 2 ? 0 : i] : y[one & 4 ? 0 : i];
}

inferd_code ops_where_lower(plan_ctx *c, int node, inferd_status *st) {
  const ir_node *n = plan_node(c, node);
  if (n->n_inputs != 3 || n->n_outputs != 1)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "needs a condition, X and Y");
  plan_value *v[3];
  for (int k = 0; k < 3; k++) {
    if (n->inputs[k] == IR_NONE) return node_fail(c, node, INFERD_INVALID_ARG, st, "input %d is omitted", k);
    v[k] = plan_val(c, n->inputs[k]);
  }
  if (v[0]->dtype != INFERD_DTYPE_BOOL)
    return node_fail(c, node, INFERD_INVALID_ARG, st, "the condition must be bool, not %s",
                     core_dtype_name(v[0]->dtype));
  if (v[1]->dtype != INFERD_DTYPE_FLOAT || v[2]->dtype != INFERD_DTYPE_FLOAT)
    return node_fail(c, node, INFERD_UNSUPPORTED, st, "only float32 X and Y are supported at run time");
  plan_value acc = *v[0];
  if (!ops_broadcast_shape(&acc, v[1], &acc.rank, acc.dims) || !ops_broadcast_shape(&acc, v[2], &acc.rank, acc.dims))
    return node_fail(c, node, INFERD_INVALID_ARG, st, "shapes do not broadcast");
  int64_t count = core_shape_count(acc.rank, acc.dims), one = 0;
  plan_ref args[4];
  for (int k = 0; k < 3; k++) {
    bool full = v[k]->rank == acc.rank && memcmp(v[k]->dims, acc.dims, (size_t)acc.rank * sizeof *acc.dims) == 0;
    bool single = !full && core_shape_count(v[k]->rank, v[k]->dims) == 1;
    if (!full && !single && !v[k]->is_const)
      return node_fail(c, node, INFERD_UNSUPPORTED, st, "input %d is broadcast along some axes only", k);
    if (single) one |= (int64_t)1 << k;
    dnnl_memory_desc_t md;
    md_plain(&md, v[k]->rank, v[k]->dims, v[k]->dtype);
    inferd_code rc;
    if (!v[k]->is_const) rc = plan_src(c, n->inputs[k], &md, &args[k], st);
    else if (full || single) rc = plan_weight(c, n->inputs[k], &md, &md, &args[k], st);
    else /* a constant broadcast along some axes: copied out to the full shape once per plan */
      rc = ops_broadcast_weight(c, node, n->inputs[k], acc.rank, acc.dims, NULL, &args[k], st);
    if (rc != INFERD_OK) return rc;
  }
  plan_value *ov = plan_val(c, n->outputs[0]);
  ov->dtype = INFERD_DTYPE_FLOAT;
  ov->rank = acc.rank;
  memcpy(ov->dims, acc.dims, sizeof acc.dims);
  dnnl_memory_desc_t out_md;
  md_plain(&out_md, ov->rank, ov->dims, ov->dtype);
  inferd_code rc = plan_define(c, n->outputs[0], &out_md, st);
  if (rc != INFERD_OK) return rc;
  args[3] = ov->ref;
  int64_t params[2] = {count, one};
  return plan_emit_custom(c, node, OP_WHERE, where_step, 4, args, params, 2, st);
}
