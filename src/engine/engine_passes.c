/*
 * engine_passes.c - the load-time graph rewrites, in order:
 *
 *   0. pattern rewrite: the Div/Erf/Add/Mul/Mul chain of an exported GELU becomes
 *      one Gelu node (oneDNN's gelu_erf);
 *   1. op lookup: every live node maps to an engine op or the model is refused,
 *      naming the node, its op and the opset; a node's required inputs and first
 *      output must be there, its attributes must be ones the op takes, with their
 *      types (op_attrs), and no output the op does not compute may be read.
 *      A default-domain opset above ENGINE_MAX_OPSET is refused: the lowerings follow
 *      each op's definitions up to that opset (ReduceMean's and Pad's `axes` inputs of
 *      opset 18 included), and a later version of an op may mean something else;
 *   2. Identity and Dropout (inference) are removed by rewiring their consumers (a
 *      Dropout whose training_mode input is not a constant false is refused), and so
 *      is a Pad by constant zeros on every side (pads_nothing); then
 *      more pattern rewrites, on nodes whose attributes are checked: the ReduceMean/
 *      Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul(/Add) chain of an exported LayerNorm becomes
 *      one LayerNormalization node, x * Sigmoid(x) (SiLU) one Swish node and
 *      x * HardSigmoid(x) one HardSwish node, which a Conv can then absorb;
 *   3. BatchNormalization after a Conv whose output it alone reads is folded into the
 *      Conv's weights and bias (new constants; the originals are left untouched);
 *   4. post-op fusion: a Conv, Gemm or MatMul absorbs the chain of element-wise ops
 *      (Relu, Clip, LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Tanh) and a residual
 *      Add that follows it, so the whole chain is one oneDNN primitive; the residual
 *      Add becomes a "sum" post-op that accumulates into the other operand's buffer.
 *      A BatchNormalization left standing (no Conv before it to fold into: DenseNet's
 *      pre-activation) absorbs the Relu after it: oneDNN's fuse_norm_relu, one pass
 *      over the tensor instead of two.
 *
 * The readers of a value are found through an index built once before the passes
 * (value -> node inputs, "who reads each value" below), not by scanning every node,
 * which made long chains quadratic.
 *
 * The sum post-op writes into its residual's buffer in place, so it is fused only
 * when that is safe: the residual is computed before the Conv, every other reader of
 * it runs before the Conv and reads it directly (no view of it lives on), and it is
 * not a graph input, output or constant.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

/* ---- who reads each value -------------------------------------------------------------- */

/* Value -> the node inputs that read it, so that a pass finds a value's readers without
 * scanning every node (a scan for each node looked at made loading quadratic: 13.5 s
 * for an 80,000-node Identity chain). Built once before the passes and kept for all of
 * them: one entry (node, input slot) per input, in a linked list per value, held in
 * arrays.
 *
 * Invariant: every input slot of a live node that reads v has an entry in v's list.
 * Entries may be stale (the node died, or that slot is gone or reads another value):
 * each entry is checked against its node when a list is walked, and the stale ones are
 * dropped then. So a pass that kills a node or drops an input has nothing to update; a
 * pass that makes an input read a value must add the entry (uses_add); replace_uses
 * moves the entries of the inputs it rewires. */
typedef struct uses {
  int *first;  /* [cap_values] a value's first entry, -1 for none */
  int *next;   /* [cap_entries] the next entry of the same value, -1 at the end */
  int *reader; /* [cap_entries] node index */
  int *slot;   /* [cap_entries] which of the node's inputs */
  int cap_values, n_entries, cap_entries;
} uses;

static void uses_free(uses *u) {
  free(u->first);
  free(u->next);
  free(u->reader);
  free(u->slot);
}

/* Makes room for value v: passes add values (folded weights) after the index is built. */
static bool uses_fit(uses *u, int v) {
  if (v < u->cap_values) return true;
  int cap = u->cap_values * 2 > v ? u->cap_values * 2 : v + 1;
  int *first = realloc(u->first, (size_t)cap * sizeof *first);
  if (!first) return false;
  for (int i = u->cap_values; i < cap; i++) first[i] = -1;
  u->first = first;
  u->cap_values = cap;
  return true;
}

static bool grow(int **array, int cap) {
  int *a = realloc(*array, (size_t)cap * sizeof *a);
  if (a) *array = a;
  return a != NULL;
}

/* Records that input `slot` of node `reader` reads value v. */
static bool uses_add(uses *u, int v, int reader, int slot) {
  if (!uses_fit(u, v)) return false;
  if (u->n_entries == u->cap_entries) {
    int cap = u->cap_entries * 2;
    if (!grow(&u->next, cap) || !grow(&u->reader, cap) || !grow(&u->slot, cap)) return false;
    u->cap_entries = cap;
  }
  int e = u->n_entries++;
  u->reader[e] = reader;
  u->slot[e] = slot;
  u->next[e] = u->first[v];
  u->first[v] = e;
  return true;
}

static bool uses_build(const ir_graph *g, uses *u) {
  *u = (uses){0};
  int entries = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].dead) entries += g->nodes[i].n_inputs;
  u->cap_values = g->n_values > 0 ? g->n_values : 1;
  u->cap_entries = entries > 0 ? entries : 1;
  u->first = malloc((size_t)u->cap_values * sizeof *u->first);
  u->next = malloc((size_t)u->cap_entries * sizeof *u->next);
  u->reader = malloc((size_t)u->cap_entries * sizeof *u->reader);
  u->slot = malloc((size_t)u->cap_entries * sizeof *u->slot);
  if (!u->first || !u->next || !u->reader || !u->slot) {
    uses_free(u);
    return false;
  }
  for (int v = 0; v < u->cap_values; v++) u->first[v] = -1;
  for (int i = g->n_nodes - 1; i >= 0; i--) { /* last node first: lists come out in node order */
    const ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    for (int k = n->n_inputs - 1; k >= 0; k--)
      if (n->inputs[k] != IR_NONE) uses_add(u, n->inputs[k], i, k); /* cannot fail: sized above */
  }
  return true;
}

/* Drops v's stale entries and returns its first entry: from there on, every entry is an
 * input of a live node that reads v. */
static int uses_of(uses *u, const ir_graph *g, int v) {
  if (v == IR_NONE || v >= u->cap_values) return -1;
  int *link = &u->first[v];
  while (*link != -1) {
    const ir_node *n = &g->nodes[u->reader[*link]];
    int k = u->slot[*link];
    if (n->dead || k >= n->n_inputs || n->inputs[k] != v) *link = u->next[*link];
    else link = &u->next[*link];
  }
  return u->first[v];
}

/* The node that reads v, if one input alone reads it (by v's count of readers) and it
 * is not a graph output. Should live nodes read it in more inputs than counted, the
 * first of them in node order, as the scan of all nodes this replaces returned. */
static int sole_consumer(const ir_graph *g, uses *u, int v) {
  if (v == IR_NONE || g->values[v].consumers != 1 || g->values[v].is_output) return IR_NONE;
  int found = IR_NONE;
  for (int e = uses_of(u, g, v); e != -1; e = u->next[e])
    if (found == IR_NONE || u->reader[e] < found) found = u->reader[e];
  return found;
}

/* Every input of a live node that reads `from` reads `to` instead. */
static bool replace_uses(ir_graph *g, uses *u, int from, int to) {
  if (from == to) return true;
  if (!uses_fit(u, to)) return false;
  int last = -1;
  for (int e = uses_of(u, g, from); e != -1; last = e, e = u->next[e]) {
    g->nodes[u->reader[e]].inputs[u->slot[e]] = to;
    g->values[from].consumers--;
    g->values[to].consumers++;
  }
  if (last != -1) { /* the entries now belong to `to` */
    u->next[last] = u->first[to];
    u->first[to] = u->first[from];
    u->first[from] = -1;
  }
  return true;
}

static const float *const_float(const ir_graph *g, int v, int64_t count) {
  if (v == IR_NONE) return NULL;
  const ir_value *x = &g->values[v];
  if (!x->data || x->dtype != INFERD_DTYPE_FLOAT || x->producer != IR_NONE || x->is_input) return NULL;
  return ir_value_count(x) == count ? x->data : NULL;
}

/* The attributes each op takes, with their types, in opsets ENGINE_MIN_OPSET to
 * ENGINE_MAX_OPSET (an older form the lowerings refuse anyway, as Slice's `starts`
 * attribute before opset 10, is left out). Lowerings read attributes through
 * ir_attr_int and friends, which return the default for an attribute of another type:
 * Conv strides written as an INT, or Gemm's alpha as an INT, ran as if absent (stride 1,
 * alpha 1). So an attribute that is not listed, has another type, or appears twice is
 * refused at load, as onnx.checker and ONNX Runtime refuse it. So is one outside the
 * opsets that define it where a lowering would not read it there: Clip's min and max
 * became inputs in opset 11 and ReduceMean's axes one in opset 18, and an attribute
 * left in a newer model was ignored. Rows that no lowering reads (momentum, ratio,
 * seed, saturate, BatchNormalization's spatial) change nothing the engine computes. */
typedef struct op_attr {
  op_kind op;
  const char *name;
  ir_attr_type type;
  int64_t until; /* the last opset that has it; 0: every opset */
} op_attr;

#define ATTR(op, name, type, until) {OP_##op, name, IR_ATTR_##type, until}
static const op_attr op_attrs[] = {
    ATTR(CONV, "auto_pad", STRING, 0),
    ATTR(CONV, "dilations", INTS, 0),
    ATTR(CONV, "group", INT, 0),
    ATTR(CONV, "kernel_shape", INTS, 0),
    ATTR(CONV, "pads", INTS, 0),
    ATTR(CONV, "strides", INTS, 0),
    ATTR(BATCHNORM, "epsilon", FLOAT, 0),
    ATTR(BATCHNORM, "momentum", FLOAT, 0),
    ATTR(BATCHNORM, "spatial", INT, 0),
    ATTR(BATCHNORM, "training_mode", INT, 0),
    ATTR(LAYERNORM, "axis", INT, 0),
    ATTR(LAYERNORM, "epsilon", FLOAT, 0),
    ATTR(LAYERNORM, "stash_type", INT, 0),
    ATTR(LEAKYRELU, "alpha", FLOAT, 0),
    ATTR(ELU, "alpha", FLOAT, 0),
    ATTR(CLIP, "min", FLOAT, 10),
    ATTR(CLIP, "max", FLOAT, 10),
    ATTR(HARDSIGMOID, "alpha", FLOAT, 0),
    ATTR(SWISH, "alpha", FLOAT, 0),
    ATTR(HARDSIGMOID, "beta", FLOAT, 0),
    ATTR(GELU, "approximate", STRING, 0),
    ATTR(MAXPOOL, "auto_pad", STRING, 0),
    ATTR(MAXPOOL, "ceil_mode", INT, 0),
    ATTR(MAXPOOL, "dilations", INTS, 0),
    ATTR(MAXPOOL, "kernel_shape", INTS, 0),
    ATTR(MAXPOOL, "pads", INTS, 0),
    ATTR(MAXPOOL, "storage_order", INT, 0),
    ATTR(MAXPOOL, "strides", INTS, 0),
    ATTR(AVERAGEPOOL, "auto_pad", STRING, 0),
    ATTR(AVERAGEPOOL, "ceil_mode", INT, 0),
    ATTR(AVERAGEPOOL, "count_include_pad", INT, 0),
    ATTR(AVERAGEPOOL, "dilations", INTS, 0),
    ATTR(AVERAGEPOOL, "kernel_shape", INTS, 0),
    ATTR(AVERAGEPOOL, "pads", INTS, 0),
    ATTR(AVERAGEPOOL, "strides", INTS, 0),
    ATTR(REDUCEMEAN, "axes", INTS, 17),
    ATTR(REDUCEMEAN, "keepdims", INT, 0),
    ATTR(REDUCEMEAN, "noop_with_empty_axes", INT, 0),
    ATTR(GEMM, "alpha", FLOAT, 0),
    ATTR(GEMM, "beta", FLOAT, 0),
    ATTR(GEMM, "transA", INT, 0),
    ATTR(GEMM, "transB", INT, 0),
    ATTR(SOFTMAX, "axis", INT, 0),
    ATTR(LOGSOFTMAX, "axis", INT, 0),
    ATTR(CONCAT, "axis", INT, 0),
    ATTR(FLATTEN, "axis", INT, 0),
    ATTR(RESHAPE, "allowzero", INT, 0),
    ATTR(SQUEEZE, "axes", INTS, 0),
    ATTR(UNSQUEEZE, "axes", INTS, 0),
    ATTR(DROPOUT, "ratio", FLOAT, 0),
    ATTR(DROPOUT, "seed", INT, 0),
    ATTR(TRANSPOSE, "perm", INTS, 0),
    ATTR(SHAPE, "start", INT, 0),
    ATTR(SHAPE, "end", INT, 0),
    ATTR(GATHER, "axis", INT, 0),
    ATTR(CAST, "to", INT, 0),
    ATTR(CAST, "saturate", INT, 0),
    ATTR(SPLIT, "axis", INT, 0),
    ATTR(SPLIT, "split", INTS, 0),
    ATTR(SPLIT, "num_outputs", INT, 0),
    ATTR(PAD, "mode", STRING, 0),
    ATTR(CONSTANTOFSHAPE, "value", TENSOR, 0),
    ATTR(MOD, "fmod", INT, 0),
    ATTR(SCATTERND, "reduction", STRING, 0),
    ATTR(EINSUM, "equation", STRING, 0),
};
#undef ATTR

static const char *attr_type_name(ir_attr_type type) {
  static const char *const names[] = {"UNDEFINED", "FLOAT", "INT",    "STRING", "TENSOR",
                                      "GRAPH",     "FLOATS", "INTS", "STRINGS"};
  return (unsigned)type < CORE_ARRAY_LEN(names) ? names[type] : "an unknown type";
}

/* Checks node i's attributes against op_attrs. */
static inferd_code check_attrs(const ir_graph *g, int i, op_kind op, inferd_status *st) {
  const ir_node *n = &g->nodes[i];
  for (int k = 0; k < n->n_attrs; k++) {
    const ir_attr *a = &n->attrs[k];
    const op_attr *row = NULL;
    for (size_t r = 0; r < CORE_ARRAY_LEN(op_attrs) && !row; r++)
      if (op_attrs[r].op == op && strcmp(op_attrs[r].name, a->name) == 0) row = &op_attrs[r];
    if (!row || (row->until && g->opset > row->until))
      return core_fail(st, INFERD_UNSUPPORTED, "node '%s' (%s): attribute '%s' is not supported (model opset %lld)",
                       n->name, n->op_type, a->name, (long long)g->opset);
    if (a->type != row->type)
      return core_fail(st, INFERD_INVALID_ARG, "node '%s' (%s): attribute '%s' is %s, expected %s", n->name,
                       n->op_type, a->name, attr_type_name(a->type), attr_type_name(row->type));
    for (int j = 0; j < k; j++)
      if (strcmp(n->attrs[j].name, a->name) == 0)
        return core_fail(st, INFERD_INVALID_ARG, "node '%s' (%s): attribute '%s' is given twice", n->name,
                         n->op_type, a->name);
  }
  return INFERD_OK;
}

static inferd_code lookup_ops(inferd_model *m, inferd_status *st) {
  ir_graph *g = m->graph;
  if (g->opset > ENGINE_MAX_OPSET)
    return core_fail(st, INFERD_UNSUPPORTED, "model opset %lld is newer than the newest inferd runs (%d)",
                     (long long)g->opset, ENGINE_MAX_OPSET);
  /* Before opset 7, Add/Mul broadcast along an `axis` attribute, Concat's axis defaulted
   * to 1 and BatchNormalization had an is_test mode: the ops here follow opset 7 on. */
  if (g->opset < ENGINE_MIN_OPSET)
    return core_fail(st, INFERD_UNSUPPORTED, "model opset %lld is older than the oldest inferd runs (%d)",
                     (long long)g->opset, ENGINE_MIN_OPSET);
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    if (n->dead) continue;
    op_kind op = m->extra[i].op = engine_op_find(n->op_type, n->domain);
    /* Swish is the engine's own (fuse_x_times_act), not an op of the opsets it reads;
     * LayerNormalization came in opset 17 */
    if (op == OP_COUNT || op == OP_SWISH || (op == OP_LAYERNORM && g->opset < 17))
      return core_fail(st, INFERD_UNSUPPORTED, "node '%s' (%s%s%s): op not supported by inferd (model opset %lld)",
                       n->name, *n->domain ? n->domain : "", *n->domain ? "." : "", n->op_type, (long long)g->opset);
    /* Lowerings rely on this: the required inputs and the first output exist. */
    int need = engine_op_min_inputs(op);
    bool ok = n->n_inputs >= need && n->n_outputs >= 1 && n->outputs[0] != IR_NONE;
    for (int k = 0; k < need && ok; k++) ok = n->inputs[k] != IR_NONE;
    if (!ok)
      return core_fail(st, INFERD_INVALID_ARG, "node '%s' (%s): needs %d input%s and an output", n->name, n->op_type,
                       need, need == 1 ? "" : "s");
    inferd_code rc = check_attrs(g, i, op, st);
    if (rc != INFERD_OK) return rc;
    /* ... and only Split computes more than one output: any other that is read would
     * reach its consumers with no shape at all */
    for (int k = 1; k < n->n_outputs && op != OP_SPLIT; k++) {
      int v = n->outputs[k];
      if (v != IR_NONE && (g->values[v].consumers > 0 || g->values[v].is_output))
        return core_fail(st, INFERD_UNSUPPORTED, "node '%s' (%s): output %d ('%s') is not supported", n->name,
                         n->op_type, k, g->values[v].name);
    }
  }
  return INFERD_OK;
}

/* Removes node i from the graph: its inputs lose a reader. */
static void kill_node(ir_graph *g, int i) {
  ir_node *n = &g->nodes[i];
  for (int k = 0; k < n->n_inputs; k++)
    if (n->inputs[k] != IR_NONE) g->values[n->inputs[k]].consumers--;
  n->dead = true;
}

/* A Pad that adds nothing: torch.onnx writes one before every AveragePool with
 * count_include_pad=True (DenseNet's transitions). Lowered, it copied its input into
 * the plain layout, and the Concats that read the pooled result beside blocked tensors
 * ran on oneDNN's reference kernel: a third of densenet121's time. The pads must be a
 * 1-D constant of an even count, 2 x the input's rank where this pass knows it (a graph
 * input's; a computed value's rank is known only in the plan, so zeros of another even
 * count, which pad nothing either, are not refused there), and no `axes` input may select them;
 * its mode must be one the lowering knows, so a Pad it would refuse still is. */
static bool pads_nothing(const ir_graph *g, const ir_node *n) {
  if (n->n_inputs < 2 || n->n_inputs > 3 || n->inputs[0] == IR_NONE || n->inputs[1] == IR_NONE) return false;
  const char *mode = ir_attr_string(n, "mode", "constant");
  if (strcmp(mode, "constant") != 0 && strcmp(mode, "reflect") != 0 && strcmp(mode, "edge") != 0) return false;
  const ir_value *p = &g->values[n->inputs[1]], *x = &g->values[n->inputs[0]];
  if (!p->data || p->dtype != INFERD_DTYPE_INT64 || p->producer != IR_NONE || p->is_input) return false;
  int64_t count = ir_value_count(p);
  if (p->rank != 1 || count <= 0 || count % 2 || (x->rank >= 0 && count != 2 * (int64_t)x->rank)) return false;
  for (int64_t k = 0; k < count; k++) {
    int64_t v;
    memcpy(&v, (const char *)p->data + k * (int64_t)sizeof v, sizeof v);
    if (v != 0) return false;
  }
  return true;
}

static inferd_code remove_identities(inferd_model *m, uses *u, inferd_status *st) {
  ir_graph *g = m->graph;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    op_kind op = m->extra[i].op;
    if (n->dead || (op != OP_IDENTITY && op != OP_DROPOUT && !(op == OP_PAD && pads_nothing(g, n)))) continue;
    if (n->n_inputs < 1 || n->inputs[0] == IR_NONE || n->n_outputs < 1 || n->outputs[0] == IR_NONE)
      return core_fail(st, INFERD_INVALID_ARG, "node '%s' (%s): needs one input and one output", n->name, n->op_type);
    if (n->n_outputs > 1 && n->outputs[1] != IR_NONE && g->values[n->outputs[1]].consumers > 0)
      return core_fail(st, INFERD_UNSUPPORTED, "node '%s' (Dropout): the mask output is used", n->name);
    if (op == OP_DROPOUT && n->n_inputs > 2 && n->inputs[2] != IR_NONE) { /* training_mode (opset 12) */
      const ir_value *t = &g->values[n->inputs[2]];
      /* training with a ratio of 0 drops nothing and scales by 1: torchvision's Swin
       * calls F.dropout(attn, p=0.0) without training=False, so its export says true */
      const float *ratio = n->n_inputs > 1 ? const_float(g, n->inputs[1], 1) : NULL;
      bool ratio0 = ratio && *ratio == 0.0f;
      if (!t->data || t->producer != IR_NONE || t->is_input || t->dtype != INFERD_DTYPE_BOOL || ir_value_count(t) != 1 ||
          (*(const unsigned char *)t->data != 0 && !ratio0))
        return core_fail(st, INFERD_UNSUPPORTED,
                         "node '%s' (Dropout): training_mode must be a constant false (or the ratio a constant 0)",
                         n->name);
    }
    int in = n->inputs[0], out = n->outputs[0];
    if (g->values[out].is_output) continue; /* kept: lowered as a copy */
    if (!replace_uses(g, u, out, in)) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    kill_node(g, i); /* and a Pad's pads, a Dropout's ratio lose their reader */
  }
  return INFERD_OK;
}

/* Conv -> BatchNormalization becomes one Conv with scaled weights and a new bias. */
static inferd_code fold_batchnorm(inferd_model *m, uses *u, inferd_status *st) {
  ir_graph *g = m->graph;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *conv = &g->nodes[i];
    if (conv->dead || m->extra[i].op != OP_CONV || conv->n_outputs != 1) continue;
    int b = sole_consumer(g, u, conv->outputs[0]);
    if (b == IR_NONE || m->extra[b].op != OP_BATCHNORM) continue;
    ir_node *bn = &g->nodes[b];
    if (bn->n_inputs != 5 || bn->inputs[0] != conv->outputs[0]) continue;
    /* in training mode it normalizes by the batch's statistics: left for its own
     * lowering, which refuses it */
    if (ir_attr_int(bn, "training_mode", 0)) continue;
    /* a copy: adding values below may move g->values */
    const ir_value w_copy = g->values[conv->inputs[1]], *w = &w_copy;
    if (!w->data || w->dtype != INFERD_DTYPE_FLOAT || w->rank < 3 || w->producer != IR_NONE || w->dims[0] < 1) continue;
    int64_t oc = w->dims[0];
    const float *scale = const_float(g, bn->inputs[1], oc), *shift = const_float(g, bn->inputs[2], oc);
    const float *mean = const_float(g, bn->inputs[3], oc), *var = const_float(g, bn->inputs[4], oc);
    const float *bias = conv->n_inputs > 2 ? const_float(g, conv->inputs[2], oc) : NULL;
    if (!scale || !shift || !mean || !var || (conv->n_inputs > 2 && conv->inputs[2] != IR_NONE && !bias)) continue;
    float eps = ir_attr_float(bn, "epsilon", 1e-5f);
    int64_t per_oc = ir_value_count(w) / oc;
    /* new constants, so that a weight shared with another node stays as it was */
    int nw = ir_graph_add_value(g, "", w->dtype, w->rank, w->dims, w->data);
    int nb = ir_graph_add_value(g, "", INFERD_DTYPE_FLOAT, 1, &oc, shift);
    if (nw == IR_NONE || nb == IR_NONE) return core_fail(st, INFERD_NO_MEMORY, "out of memory folding BatchNormalization");
    float *wd = g->values[nw].data, *bd = g->values[nb].data;
    for (int64_t o = 0; o < oc; o++) {
      double s = scale[o] / sqrt((double)var[o] + eps);
      for (int64_t k = 0; k < per_oc; k++) wd[o * per_oc + k] = (float)(wd[o * per_oc + k] * s);
      bd[o] = (float)(shift[o] + ((bias ? bias[o] : 0.0) - mean[o]) * s);
    }
    char name[256];
    snprintf(name, sizeof name, "%s+bn/W", conv->name);
    g->values[nw].name = core_arena_strdup(g->arena, name);
    snprintf(name, sizeof name, "%s+bn/B", conv->name);
    g->values[nb].name = core_arena_strdup(g->arena, name);
    if (conv->n_inputs < 3) { /* room for the bias input */
      int *inputs = core_arena_calloc(g->arena, 3, sizeof *inputs);
      if (!inputs) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
      memcpy(inputs, conv->inputs, (size_t)conv->n_inputs * sizeof *inputs);
      conv->inputs = inputs;
      conv->n_inputs = 3;
    } else if (conv->inputs[2] != IR_NONE) {
      g->values[conv->inputs[2]].consumers--;
    }
    g->values[conv->inputs[1]].consumers--;
    conv->inputs[1] = nw;
    conv->inputs[2] = nb;
    g->values[nw].consumers++;
    g->values[nb].consumers++;
    if (!uses_add(u, nw, i, 1) || !uses_add(u, nb, i, 2)) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    for (int k = 1; k < bn->n_inputs; k++) g->values[bn->inputs[k]].consumers--;
    g->values[conv->outputs[0]].consumers--;
    g->values[conv->outputs[0]].producer = IR_NONE;
    conv->outputs[0] = bn->outputs[0];
    g->values[bn->outputs[0]].producer = i;
    bn->dead = true;
  }
  return INFERD_OK;
}

/* The oneDNN element-wise ops for an ONNX element-wise node; 0 when it has none
 * (e.g. Clip with bounds computed at run time). */
int engine_eltwise_of(const ir_graph *g, const ir_node *n, op_kind op, fused_op out[2]) {
  out[0] = (fused_op){.kind = FUSED_ELTWISE, .residual = IR_NONE};
  out[1] = out[0];
  switch (op) {
  case OP_RELU: out[0].alg = dnnl_eltwise_relu; return 1;
  case OP_LEAKYRELU: out[0].alg = dnnl_eltwise_relu, out[0].alpha = ir_attr_float(n, "alpha", 0.01f); return 1;
  case OP_SIGMOID: out[0].alg = dnnl_eltwise_logistic; return 1;
  case OP_TANH: out[0].alg = dnnl_eltwise_tanh; return 1;
  case OP_SQRT: out[0].alg = dnnl_eltwise_sqrt; return 1;
  case OP_EXP: out[0].alg = dnnl_eltwise_exp; return 1;
  case OP_HARDSWISH: out[0].alg = dnnl_eltwise_hardswish; return 1;
  case OP_SWISH: out[0].alg = dnnl_eltwise_swish, out[0].alpha = ir_attr_float(n, "alpha", 1.0f); return 1;
  case OP_ABS: out[0].alg = dnnl_eltwise_abs; return 1;
  case OP_NEG: /* -x + -0: Neg(+0) is -0, as 1 / Neg(0) must be -inf */
    out[0].alg = dnnl_eltwise_linear, out[0].alpha = -1.0f, out[0].beta = -0.0f;
    return 1;
  case OP_LOG: out[0].alg = dnnl_eltwise_log; return 1;
  case OP_ELU: out[0].alg = dnnl_eltwise_elu, out[0].alpha = ir_attr_float(n, "alpha", 1.0f); return 1;
  case OP_RECIPROCAL: out[0].alg = dnnl_eltwise_pow, out[0].alpha = 1.0f, out[0].beta = -1.0f; return 1;
  case OP_GELU: {
    const char *approximate = ir_attr_string(n, "approximate", "none");
    if (strcmp(approximate, "none") != 0 && strcmp(approximate, "tanh") != 0) return 0;
    out[0].alg = strcmp(approximate, "tanh") == 0 ? dnnl_eltwise_gelu_tanh : dnnl_eltwise_gelu_erf;
    return 1;
  }
  case OP_HARDSIGMOID:
    out[0].alg = dnnl_eltwise_linear;
    out[0].alpha = ir_attr_float(n, "alpha", 0.2f);
    out[0].beta = ir_attr_float(n, "beta", 0.5f);
    out[1].alg = dnnl_eltwise_clip, out[1].alpha = 0.0f, out[1].beta = 1.0f;
    return 2;
  case OP_CLIP: {
    float lo = -INFINITY, hi = INFINITY;
    if (g->opset < 11) {
      lo = ir_attr_float(n, "min", lo);
      hi = ir_attr_float(n, "max", hi);
    } else {
      for (int k = 1; k < n->n_inputs && k < 3; k++) {
        if (n->inputs[k] == IR_NONE) continue;
        const float *b = const_float(g, n->inputs[k], 1);
        if (!b) return 0;
        if (k == 1) lo = *b;
        else hi = *b;
      }
    }
    if (lo > hi) return 0;
    out[0].alg = dnnl_eltwise_clip, out[0].alpha = lo, out[0].beta = hi;
    return 1;
  }
  default: return 0;
  }
}

/* The constant scalar operand of a binary node whose other operand is `v`: rank 0 or
 * [1], which broadcasting never adds an axis for (a [1,1,1] would make a [2,3] input's
 * result [1,2,3]). */
static bool scalar_operand(const ir_graph *g, const ir_node *n, int v, float *k) {
  if (n->n_inputs != 2) return false;
  int other = n->inputs[0] == v ? n->inputs[1] : n->inputs[1] == v ? n->inputs[0] : IR_NONE;
  if (other == IR_NONE || g->values[other].rank > 1) return false;
  const float *p = const_float(g, other, 1);
  if (!p) return false;
  *k = *p;
  return true;
}

static bool near(float a, float b) { return fabsf(a - b) <= 1e-5f * fabsf(b); }

/* The ONNX op `op` (default domain: a custom-domain Mul is some other op). */
static bool is_onnx_op(const ir_node *n, const char *op) { return !*n->domain && strcmp(n->op_type, op) == 0; }

/* x * 0.5 * (1 + erf(x / sqrt(2))), as torch.onnx.export writes nn.GELU before
 * opset 20 (Div, Erf, Add, Mul, Mul), becomes one Gelu node. */
static void fuse_gelu(inferd_model *m, uses *u) {
  ir_graph *g = m->graph;
  for (int e = 0; e < g->n_nodes; e++) {
    ir_node *erf = &g->nodes[e];
    if (erf->dead || !is_onnx_op(erf, "Erf") || erf->n_inputs != 1 ||
        erf->inputs[0] == IR_NONE || erf->n_outputs != 1 || erf->outputs[0] == IR_NONE)
      continue;
    int d = g->values[erf->inputs[0]].producer;
    if (d == IR_NONE || g->values[erf->inputs[0]].consumers != 1 || g->values[erf->inputs[0]].is_output) continue;
    ir_node *div = &g->nodes[d];
    float k;
    if (!is_onnx_op(div, "Div") || div->n_inputs != 2 || div->inputs[0] == IR_NONE ||
        div->inputs[1] == IR_NONE || div->n_outputs != 1 || !scalar_operand(g, div, div->inputs[0], &k) ||
        !near(k, 1.41421356f))
      continue;
    int x = div->inputs[0];
    int a = sole_consumer(g, u, erf->outputs[0]);
    if (a == IR_NONE || !is_onnx_op(&g->nodes[a], "Add") || g->nodes[a].n_outputs != 1 ||
        !scalar_operand(g, &g->nodes[a], erf->outputs[0], &k) || !near(k, 1.0f))
      continue;
    int m1 = sole_consumer(g, u, g->nodes[a].outputs[0]);
    if (m1 == IR_NONE || !is_onnx_op(&g->nodes[m1], "Mul") || g->nodes[m1].n_inputs != 2 ||
        g->nodes[m1].n_outputs != 1)
      continue;
    ir_node *mul1 = &g->nodes[m1];
    int half_input = mul1->outputs[0];
    if (!((mul1->inputs[0] == x && mul1->inputs[1] == g->nodes[a].outputs[0]) ||
          (mul1->inputs[1] == x && mul1->inputs[0] == g->nodes[a].outputs[0])))
      continue;
    int m2 = sole_consumer(g, u, half_input);
    if (m2 == IR_NONE || !is_onnx_op(&g->nodes[m2], "Mul") || g->nodes[m2].n_outputs != 1 ||
        g->nodes[m2].outputs[0] == IR_NONE ||
        !scalar_operand(g, &g->nodes[m2], half_input, &k) || !near(k, 0.5f))
      continue;
    /* the Div node becomes Gelu(x) writing the last Mul's output */
    int out = g->nodes[m2].outputs[0];
    int nodes[4] = {e, a, m1, m2};
    for (int i = 0; i < 4; i++) kill_node(g, nodes[i]);
    g->values[div->inputs[1]].consumers--;
    g->values[div->outputs[0]].producer = IR_NONE;
    div->op_type = "Gelu";
    div->n_inputs = 1;
    div->outputs[0] = out;
    div->n_attrs = 0;
    g->values[out].producer = d;
    m->extra[d].op = OP_GELU;
  }
}

/* x * Sigmoid(x), as torch.onnx writes nn.SiLU (EfficientNet), becomes Swish(x), and
 * x * HardSigmoid(x) with HardSwish's constants (nn.Hardswish before opset 14,
 * MobileNetV3) HardSwish(x): one element-wise op instead of two passes over the tensor,
 * which the Conv before it absorbs, and whose f(0) = 0 lets oneDNN's optimized kernel
 * run on a blocked layout with padded channels (Sigmoid's f(0) = 0.5 put it on the
 * reference one). The activation must be read by the Mul alone. */
static void fuse_x_times_act(inferd_model *m, uses *u) {
  ir_graph *g = m->graph;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *mul = &g->nodes[i];
    if (mul->dead || !is_onnx_op(mul, "Mul") || mul->n_inputs != 2 || mul->n_outputs != 1 ||
        mul->inputs[0] == IR_NONE || mul->inputs[1] == IR_NONE || mul->n_attrs != 0)
      continue;
    for (int k = 0; k < 2; k++) {
      int a = mul->inputs[k], x = mul->inputs[1 - k], p = g->values[a].producer;
      if (p == IR_NONE || g->values[a].consumers != 1 || g->values[a].is_output || a == x) continue;
      ir_node *act = &g->nodes[p];
      if (act->dead || act->n_inputs != 1 || act->inputs[0] != x || act->n_outputs != 1) continue;
      op_kind to = OP_COUNT;
      if (is_onnx_op(act, "Sigmoid") && act->n_attrs == 0) to = OP_SWISH;
      else if (is_onnx_op(act, "HardSigmoid") && near(ir_attr_float(act, "alpha", 0.2f), 1.0f / 6.0f) &&
               near(ir_attr_float(act, "beta", 0.5f), 0.5f))
        to = OP_HARDSWISH;
      if (to == OP_COUNT || (k == 0 && !uses_add(u, x, i, 0))) continue; /* k == 1: x is in slot 0 already */
      kill_node(g, p); /* x keeps the Mul's read */
      g->values[a].consumers--;
      g->values[a].producer = IR_NONE;
      mul->op_type = engine_op_name(to);
      mul->inputs[0] = x;
      mul->n_inputs = 1;
      m->extra[i].op = to;
      break;
    }
  }
}

/* A ReduceMean over the last axis that keeps it (attribute axes [-1], before opset 18). */
static bool is_mean_last(const ir_node *n) {
  const ir_attr *axes = ir_node_attr(n, "axes");
  return is_onnx_op(n, "ReduceMean") && n->n_inputs == 1 && n->n_outputs == 1 && n->outputs[0] != IR_NONE &&
         axes && axes->type == IR_ATTR_INTS && axes->n == 1 && axes->ints[0] == -1 &&
         ir_attr_int(n, "keepdims", 1) == 1;
}

/* The node of op type `op` that alone reads value v, or IR_NONE. */
static int sole_reader(const ir_graph *g, uses *u, int v, const char *op) {
  int r = sole_consumer(g, u, v);
  return r != IR_NONE && is_onnx_op(&g->nodes[r], op) && g->nodes[r].n_outputs == 1 &&
                 g->nodes[r].outputs[0] != IR_NONE ? r : IR_NONE;
}

/* The constant float vector that binary node n combines with value v, or IR_NONE. */
static int const_vector_operand(const ir_graph *g, const ir_node *n, int v) {
  if (n->n_inputs != 2) return IR_NONE;
  int other = n->inputs[0] == v ? n->inputs[1] : n->inputs[1] == v ? n->inputs[0] : IR_NONE;
  if (other == IR_NONE || g->values[other].rank != 1) return IR_NONE;
  return const_float(g, other, g->values[other].dims[0]) ? other : IR_NONE;
}

/* torch.onnx's LayerNorm over the last axis before opset 17:
 *   m = ReduceMean(x); d = Sub(x, m); v = ReduceMean(Pow(d, 2)); s = Sqrt(Add(v, eps));
 *   y = Add(Mul(Div(d, s), gamma), beta)  (beta optional)
 * becomes LayerNormalization(x, gamma, beta) with that epsilon, in the first
 * ReduceMean's place; the two reductions and the Sub, Pow, Add, Sqrt, Div and Mul
 * must be read by nothing else. Its six element-wise broadcasts ran on oneDNN's
 * reference kernels. */
static void fuse_layernorm(inferd_model *m, uses *u) {
  ir_graph *g = m->graph;
  if (g->opset >= 18) return; /* ReduceMean's axes became an input (not exported so by torch 1.13) */
  for (int r0 = 0; r0 < g->n_nodes; r0++) {
    ir_node *mean = &g->nodes[r0];
    if (mean->dead || !is_mean_last(mean) || mean->inputs[0] == IR_NONE) continue;
    int x = mean->inputs[0];
    int s = sole_reader(g, u, mean->outputs[0], "Sub");
    if (s == IR_NONE || g->nodes[s].n_inputs != 2 || g->nodes[s].inputs[0] != x) continue;
    int d = g->nodes[s].outputs[0];
    if (g->values[d].consumers != 2 || g->values[d].is_output) continue;
    int p = IR_NONE, q = IR_NONE; /* Pow(d, 2) and Div(d, s) */
    for (int e = uses_of(u, g, d); e != -1; e = u->next[e]) {
      const ir_node *r = &g->nodes[u->reader[e]];
      if (is_onnx_op(r, "Pow") && r->n_inputs == 2 && r->inputs[0] == d && u->slot[e] == 0) p = u->reader[e];
      if (is_onnx_op(r, "Div") && r->n_inputs == 2 && r->inputs[0] == d && u->slot[e] == 0) q = u->reader[e];
    }
    float k, eps;
    if (p == IR_NONE || q == IR_NONE || g->nodes[p].n_outputs != 1 || g->nodes[q].n_outputs != 1 ||
        !scalar_operand(g, &g->nodes[p], d, &k) || k != 2.0f)
      continue;
    int r1 = sole_consumer(g, u, g->nodes[p].outputs[0]);
    if (r1 == IR_NONE || !is_mean_last(&g->nodes[r1])) continue;
    int a = sole_reader(g, u, g->nodes[r1].outputs[0], "Add");
    if (a == IR_NONE || !scalar_operand(g, &g->nodes[a], g->nodes[r1].outputs[0], &eps) || !(eps >= 0.0f)) continue;
    int sq = sole_reader(g, u, g->nodes[a].outputs[0], "Sqrt");
    if (sq == IR_NONE || g->nodes[sq].n_inputs != 1 || sole_consumer(g, u, g->nodes[sq].outputs[0]) != q ||
        g->nodes[q].inputs[1] != g->nodes[sq].outputs[0])
      continue;
    int mg = sole_reader(g, u, g->nodes[q].outputs[0], "Mul");
    int gamma = mg == IR_NONE ? IR_NONE : const_vector_operand(g, &g->nodes[mg], g->nodes[q].outputs[0]);
    if (gamma == IR_NONE) continue;
    int ab = sole_reader(g, u, g->nodes[mg].outputs[0], "Add");
    int beta = ab == IR_NONE ? IR_NONE : const_vector_operand(g, &g->nodes[ab], g->nodes[mg].outputs[0]);
    if (beta == IR_NONE || g->values[beta].dims[0] != g->values[gamma].dims[0]) ab = IR_NONE, beta = IR_NONE;
    int *inputs = core_arena_alloc(g->arena, 3 * sizeof *inputs, _Alignof(int));
    ir_attr *attr = core_arena_alloc(g->arena, sizeof *attr, _Alignof(ir_attr));
    if (!inputs || !attr || !uses_add(u, gamma, r0, 1) || (beta != IR_NONE && !uses_add(u, beta, r0, 2))) return;
    int out = g->nodes[ab != IR_NONE ? ab : mg].outputs[0];
    int dead[8] = {s, p, r1, a, sq, q, mg, ab};
    for (int i = 0; i < 8 && dead[i] != IR_NONE; i++) kill_node(g, dead[i]);
    g->values[mean->outputs[0]].producer = IR_NONE;
    inputs[0] = x, inputs[1] = gamma, inputs[2] = beta;
    g->values[gamma].consumers++;
    if (beta != IR_NONE) g->values[beta].consumers++;
    *attr = (ir_attr){.name = "epsilon", .type = IR_ATTR_FLOAT, .f = eps};
    mean->op_type = "LayerNormalization";
    mean->inputs = inputs;
    mean->n_inputs = beta != IR_NONE ? 3 : 2;
    mean->attrs = attr;
    mean->n_attrs = 1;
    mean->outputs[0] = out;
    g->values[out].producer = r0;
    m->extra[r0].op = OP_LAYERNORM;
  }
}

/* Ops whose output may be their input's buffer (a same-type Cast is lowered as a view). */
static bool is_view_op(op_kind op) {
  return op == OP_RESHAPE || op == OP_FLATTEN || op == OP_SQUEEZE || op == OP_UNSQUEEZE || op == OP_IDENTITY ||
         op == OP_DROPOUT || op == OP_CAST;
}

/* Can node `producer` (at index p) add residual r into its output in place? */
static bool residual_ok(const inferd_model *m, uses *u, int p, int r, int add) {
  const ir_graph *g = m->graph;
  const ir_value *v = &g->values[r];
  if (v->producer == IR_NONE || v->is_output || v->is_input || v->producer >= p) return false;
  if (is_view_op(m->extra[v->producer].op)) return false; /* its buffer is another value's */
  for (int e = uses_of(u, g, r); e != -1; e = u->next[e]) {
    int i = u->reader[e];
    if (i != add && (i >= p || is_view_op(m->extra[i].op))) return false;
  }
  return true;
}

/* The producer now writes the consumer's output; the consumer goes. `keep` is an
 * input of the consumer that the producer reads from now on (a residual). */
static void absorb(ir_graph *g, ir_node *producer, int pi, ir_node *consumer, int keep) {
  int out = producer->outputs[0];
  for (int k = 0; k < consumer->n_inputs; k++) {
    int v = consumer->inputs[k];
    if (v != IR_NONE && v != keep) g->values[v].consumers--;
  }
  g->values[out].producer = IR_NONE;
  producer->outputs[0] = consumer->outputs[0];
  g->values[consumer->outputs[0]].producer = pi;
  consumer->dead = true;
}

/* Would one of ops[k] be a second element-wise post-op of a kind x already has?
 * oneDNN 2.6's jit kernels keep one injector per kind (keyed by alg_kind), so the
 * second of two same-kind post-ops runs with the first one's alpha and beta:
 * LeakyRelu(0.5) then Relu ran as LeakyRelu twice, HardSigmoid (linear + clip) then
 * Clip(0.2, 0.6) clipped to [0, 1]. Such a chain stops there; the rest runs as
 * element-wise steps of its own. */
static bool repeats_eltwise(const node_extra *x, const fused_op *ops, int k) {
  for (int j = 0; j < k; j++)
    for (int i = 0; i < x->n_fused; i++)
      if (x->fused[i].kind == FUSED_ELTWISE && x->fused[i].alg == ops[j].alg) return true;
  return false;
}

/* oneDNN's batch normalization fuses only a ReLU of slope 0 (dnnl_fuse_norm_relu) */
static void fuse_norm_relu(inferd_model *m, uses *u, int i) {
  ir_graph *g = m->graph;
  ir_node *n = &g->nodes[i];
  int c = sole_consumer(g, u, n->outputs[0]);
  fused_op ops[2];
  if (c == IR_NONE || engine_eltwise_of(g, &g->nodes[c], m->extra[c].op, ops) != 1 ||
      ops[0].alg != dnnl_eltwise_relu || ops[0].alpha != 0.0f)
    return;
  m->extra[i].fused[m->extra[i].n_fused++] = ops[0];
  absorb(g, n, i, &g->nodes[c], IR_NONE);
}

static void fuse_post_ops(inferd_model *m, uses *u) {
  ir_graph *g = m->graph;
  for (int i = 0; i < g->n_nodes; i++) {
    ir_node *n = &g->nodes[i];
    node_extra *x = &m->extra[i];
    if (!n->dead && x->op == OP_BATCHNORM && n->n_outputs >= 1 && x->n_fused == 0) fuse_norm_relu(m, u, i);
    if (n->dead || (x->op != OP_CONV && x->op != OP_GEMM && x->op != OP_MATMUL) || n->n_outputs != 1) continue;
    for (;;) {
      int c = sole_consumer(g, u, n->outputs[0]);
      if (c == IR_NONE) break;
      ir_node *cn = &g->nodes[c];
      op_kind cop = m->extra[c].op;
      if (cop == OP_ADD && x->n_fused == 0 && x->op == OP_CONV && cn->n_inputs == 2) {
        int r = cn->inputs[0] == n->outputs[0] ? cn->inputs[1] : cn->inputs[0];
        if (cn->inputs[0] == cn->inputs[1] || !residual_ok(m, u, i, r, c)) break;
        x->fused[x->n_fused++] = (fused_op){.kind = FUSED_SUM, .alpha = 1.0f, .residual = r, .conv_out = n->outputs[0]};
        absorb(g, n, i, cn, r);
        continue;
      }
      fused_op ops[2];
      int k = engine_eltwise_of(g, cn, cop, ops);
      if (k == 0 || x->n_fused + k > FUSED_MAX || repeats_eltwise(x, ops, k)) break;
      for (int j = 0; j < k; j++) x->fused[x->n_fused++] = ops[j];
      absorb(g, n, i, cn, IR_NONE);
    }
  }
}

inferd_code engine_passes_run(inferd_model *m, inferd_status *st) {
  uses u;
  if (!uses_build(m->graph, &u)) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  fuse_gelu(m, &u);
  inferd_code rc = lookup_ops(m, st);
  if (rc == INFERD_OK) rc = remove_identities(m, &u, st);
  if (rc == INFERD_OK) { /* on nodes already checked, and seeing through Identity */
    fuse_layernorm(m, &u);
    fuse_x_times_act(m, &u);
  }
  if (rc == INFERD_OK) rc = fold_batchnorm(m, &u, st);
  if (rc == INFERD_OK) fuse_post_ops(m, &u);
  uses_free(&u);
  return rc;
}
