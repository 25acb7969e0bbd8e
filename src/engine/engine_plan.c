/*
 * engine_plan.c - compiling the graph for one batch size into a plan.
 *
 * DESIGN
 * Shapes are inferred with the batch size known, so the Shape -> Gather -> Unsqueeze
 * -> Concat -> Reshape chains that torch.onnx.export emits fold into constants here,
 * node by node, by the same lowering functions that emit primitives for tensors that
 * are not constant. Each value gets a place (plan_ref): a buffer of the plan, a
 * shared weight, or the caller's input/output array. Layouts are oneDNN's choice for
 * convolution chains; plan_src inserts a reorder only where a consumer wants another
 * layout than the producer wrote, and remembers it so that two consumers share one.
 *
 * Memory planning: every buffer has a lifetime [first step writing it, last step
 * reading it]; buffers are placed largest first at the lowest offset of one arena
 * that no lifetime-overlapping buffer occupies. Graph outputs are written straight
 * into the caller's arrays when their layout is plain, graph inputs are read from the
 * caller's arrays.
 *
 * Runs only under model->lock, on the thread that will run the plan (oneDNN picks
 * kernels for the thread count current at creation).
 */
#include <omp.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"

typedef struct variant {
  int value;
  plan_ref ref;
} variant;

struct plan_ctx {
  inferd_model *m;
  plan *p;
  plan_value *vals;
  int cap_steps, cap_buffers;
  variant *variants;
  int n_variants, cap_variants;
};

/* ---- memory descriptors ----------------------------------------------------------- */

dnnl_data_type_t md_dtype(inferd_dtype dtype) {
  switch (dtype) {
  case INFERD_DTYPE_FLOAT: return dnnl_f32;
  case INFERD_DTYPE_INT32: return dnnl_s32;
  case INFERD_DTYPE_INT8: return dnnl_s8;
  case INFERD_DTYPE_UINT8:
  case INFERD_DTYPE_BOOL: return dnnl_u8; /* one byte, 0 or 1 */
  default: return dnnl_data_type_undef;
  }
}

void md_plain(dnnl_memory_desc_t *md, int rank, const int64_t *dims, inferd_dtype dtype) {
  *md = (dnnl_memory_desc_t){0}; /* what a type oneDNN lacks (int64) leaves: no layout, size 0 */
  dnnl_dims_t d, strides;
  int n = rank > 0 ? rank : 1;
  for (int i = 0; i < n; i++) d[i] = rank > 0 ? dims[i] : 1;
  dnnl_dim_t s = 1;
  for (int i = n - 1; i >= 0; i--) {
    strides[i] = s;
    if (__builtin_mul_overflow(s, d[i] > 0 ? d[i] : 1, &s)) return; /* no layout: oneDNN refuses it */
  }
  dnnl_memory_desc_init_by_strides(md, n, d, md_dtype(dtype), strides);
}

void md_any(dnnl_memory_desc_t *md, int rank, const int64_t *dims) {
  dnnl_dims_t d;
  for (int i = 0; i < rank; i++) d[i] = dims[i];
  dnnl_memory_desc_init_by_tag(md, rank, d, dnnl_f32, dnnl_format_tag_any);
}

bool md_is_empty(const dnnl_memory_desc_t *md) {
  for (int i = 0; i < md->ndims; i++)
    if (md->dims[i] == 0) return true;
  return false;
}

bool md_is_plain(const dnnl_memory_desc_t *md) {
  if (md->format_kind != dnnl_blocked || md->format_desc.blocking.inner_nblks != 0) return false;
  dnnl_dim_t s = 1;
  for (int i = md->ndims - 1; i >= 0; i--) {
    if (md->dims[i] != 1 && md->format_desc.blocking.strides[i] != s) return false;
    s *= md->dims[i];
  }
  return md->offset0 == 0;
}

/* ---- accessors ---------------------------------------------------------------------- */

const ir_graph *plan_graph(const plan_ctx *c) { return c->m->graph; }
const ir_node *plan_node(const plan_ctx *c, int node) { return &c->m->graph->nodes[node]; }
const node_extra *plan_extra(const plan_ctx *c, int node) { return &c->m->extra[node]; }
plan_value *plan_val(plan_ctx *c, int value) { return &c->vals[value]; }
dnnl_engine_t plan_engine(const plan_ctx *c) { return c->m->engine; }
int plan_batch(const plan_ctx *c) { return c->p->batch; }
bool plan_winograd(const plan_ctx *c) { return !c->m->no_winograd; }
bool plan_winograd_transformed(const plan_ctx *c) { return c->m->winograd_transformed; }
bool plan_bf16(const plan_ctx *c) { return c->m->bf16; }

bool plan_pd_is_reference(const_dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
         strncmp(impl, "ref", 3) == 0;
}

inferd_code node_fail(const plan_ctx *c, int node, inferd_code code, inferd_status *st, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const ir_node *n = plan_node(c, node);
  return core_fail(st, code, "node '%s' (%s): %s", n->name, n->op_type, msg);
}

/* ---- values and buffers ------------------------------------------------------------- */

inferd_code plan_set_const(plan_ctx *c, int v, inferd_dtype dtype, int rank, const int64_t *dims,
                           const void *data, inferd_status *st) {
  plan_value *pv = &c->vals[v];
  int64_t count = core_shape_count(rank, dims);
  if (count < 0) return core_fail(st, INFERD_INVALID_ARG, "value '%s': bad shape", c->m->graph->values[v].name);
  size_t nbytes = (size_t)count * core_dtype_size(dtype);
  void *copy = core_arena_alloc(c->p->consts, nbytes ? nbytes : 1, 64);
  if (!copy) return core_fail(st, INFERD_NO_MEMORY, "out of memory folding '%s'", c->m->graph->values[v].name);
  if (nbytes) memcpy(copy, data, nbytes);
  pv->dtype = dtype;
  pv->rank = rank;
  memcpy(pv->dims, dims, (size_t)rank * sizeof *dims);
  pv->is_const = true;
  pv->data = copy;
  return INFERD_OK;
}

void *plan_const_alloc(plan_ctx *c, size_t size) { return core_arena_alloc(c->p->consts, size ? size : 1, 64); }

static int new_buffer(plan_ctx *c, size_t size) {
  plan *p = c->p;
  if (p->n_buffers == c->cap_buffers) {
    int cap = c->cap_buffers ? c->cap_buffers * 2 : 128;
    plan_buffer *b = realloc(p->buffers, (size_t)cap * sizeof *b);
    if (!b) return -1;
    p->buffers = b;
    c->cap_buffers = cap;
  }
  p->buffers[p->n_buffers] = (plan_buffer){.size = size, .first = p->n_steps, .last = p->n_steps, .bind = REF_BUFFER};
  return p->n_buffers++;
}

inferd_code plan_define(plan_ctx *c, int v, const dnnl_memory_desc_t *md, inferd_status *st) {
  int b = new_buffer(c, dnnl_memory_desc_get_size(md));
  if (b < 0) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  plan_value *pv = &c->vals[v];
  pv->defined = true;
  pv->ref = (plan_ref){.kind = REF_BUFFER, .index = b, .md = *md};
  return INFERD_OK;
}

void plan_define_alias(plan_ctx *c, int out, int in, const dnnl_memory_desc_t *md) {
  plan_value *po = &c->vals[out];
  po->defined = true;
  po->ref = c->vals[in].ref;
  po->ref.md = *md;
}

static void touch(plan_ctx *c, const plan_ref *r) {
  if (r->kind == REF_BUFFER) {
    plan_buffer *b = &c->p->buffers[r->index];
    if (c->p->n_steps > b->last) b->last = c->p->n_steps;
  }
}

/* ---- steps -------------------------------------------------------------------------- */

static plan_step *new_step(plan_ctx *c, int node, op_kind op, inferd_status *st) {
  plan *p = c->p;
  if (p->n_steps == c->cap_steps) {
    int cap = c->cap_steps ? c->cap_steps * 2 : 128;
    plan_step *s = realloc(p->steps, (size_t)cap * sizeof *s);
    if (!s) {
      core_fail(st, INFERD_NO_MEMORY, "out of memory");
      return NULL;
    }
    p->steps = s;
    c->cap_steps = cap;
  }
  plan_step *s = &p->steps[p->n_steps];
  memset(s, 0, sizeof *s);
  s->op = op;
  s->node = node >= 0 ? c->m->graph->nodes[node].name : "(output)";
  return s;
}

static inferd_code add_args(plan_ctx *c, plan_step *s, int n_args, const int *kinds, const plan_ref *args,
                            inferd_status *st) {
  s->n_args = n_args;
  s->slot = c->p->n_slots;
  s->args = core_arena_alloc(c->p->consts, (size_t)(n_args ? n_args : 1) * sizeof *s->args, 64);
  s->arg_kinds = core_arena_alloc(c->p->consts, (size_t)(n_args ? n_args : 1) * sizeof *s->arg_kinds, 16);
  if (!s->args || !s->arg_kinds) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  c->p->n_slots += n_args + 1;
  for (int i = 0; i < n_args; i++) {
    s->arg_kinds[i] = kinds ? kinds[i] : 0;
    s->args[i] = args[i];
    touch(c, &args[i]);
  }
  return INFERD_OK;
}

inferd_code plan_emit(plan_ctx *c, int node, op_kind op, dnnl_primitive_desc_t pd, int n_args,
                      const int *arg_kinds, const plan_ref *args, double flops, inferd_status *st) {
  plan_step *s = new_step(c, node, op, st);
  if (!s) {
    dnnl_primitive_desc_destroy(pd);
    return INFERD_NO_MEMORY;
  }
  const dnnl_memory_desc_t *scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  size_t scratch_bytes = scratch ? dnnl_memory_desc_get_size(scratch) : 0;
  s->pd = pd; /* the primitive itself is made when a session first uses the plan */
  if (scratch_bytes > c->p->scratchpad_bytes) c->p->scratchpad_bytes = scratch_bytes;
  if (add_args(c, s, n_args, arg_kinds, args, st) != INFERD_OK) { /* not counted: engine_plan_free misses it */
    dnnl_primitive_desc_destroy(pd);
    s->pd = NULL;
    return INFERD_NO_MEMORY;
  }
  s->flops = flops;
  c->p->flops += flops;
  c->p->n_steps++;
  return INFERD_OK;
}

inferd_code plan_emit_custom(plan_ctx *c, int node, op_kind op, step_fn fn, int n_args, const plan_ref *args,
                             const int64_t *params, int n_params, inferd_status *st) {
  plan_step *s = new_step(c, node, op, st);
  if (!s) return INFERD_NO_MEMORY;
  s->fn = fn;
  if (add_args(c, s, n_args, NULL, args, st) != INFERD_OK) return INFERD_NO_MEMORY;
  for (int i = 0; i < n_params && i < (int)CORE_ARRAY_LEN(s->params); i++) s->params[i] = params[i];
  c->p->n_steps++;
  return INFERD_OK;
}

inferd_code plan_emit_reorder(plan_ctx *c, int node, const plan_ref *src, const plan_ref *dst, inferd_status *st) {
  /* a reorder of nothing is no step: oneDNN's reorder divides by zero on some empty
   * shapes ([2^32, 0] transposed, found by fuzz_onnx) */
  if (md_is_empty(&dst->md)) return INFERD_OK;
  dnnl_primitive_desc_t pd;
  dnnl_primitive_attr_t attr = plan_attr_new();
  dnnl_status_t rc = dnnl_reorder_primitive_desc_create(&pd, &src->md, c->m->engine, &dst->md, c->m->engine, attr);
  dnnl_primitive_attr_destroy(attr);
  if (rc != dnnl_success) return core_fail(st, INFERD_INTERNAL, "no reorder between two layouts (status %d)", rc);
  plan_ref args[2] = {*src, *dst};
  int kinds[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
  return plan_emit(c, node, OP_REORDER, pd, 2, kinds, args, 0, st);
}

inferd_code plan_convert(plan_ctx *c, int node, const plan_ref *src, const dnnl_memory_desc_t *md, plan_ref *out,
                         inferd_status *st) {
  int b = new_buffer(c, dnnl_memory_desc_get_size(md));
  if (b < 0) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  *out = (plan_ref){.kind = REF_BUFFER, .index = b, .md = *md};
  return plan_emit_reorder(c, node, src, out, st);
}

/* Constants: graph initializers come from the weight cache (it outlives the IR's
 * plain copy); constants folded for this plan live in the plan's own arena. */
inferd_code plan_weight(plan_ctx *c, int v, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *want,
                        plan_ref *out, inferd_status *st) {
  plan_value *pv = &c->vals[v];
  const ir_value *gv = &c->m->graph->values[v];
  if (md_dtype(pv->dtype) == dnnl_data_type_undef) /* an op's own type checks come first; this is the last */
    return core_fail(st, INFERD_UNSUPPORTED, "constant '%s' has a type oneDNN cannot hold", gv->name);
  dnnl_memory_desc_t plain;
  md_plain(&plain, pv->rank, pv->dims, pv->dtype);
  if (!src) src = &plain;
  if (!want) want = src;
  const void *data;
  if (gv->producer == IR_NONE) {
    inferd_code rc = engine_weight_get(c->m, v, src, want, &data, st);
    if (rc != INFERD_OK) return rc;
  } else if (dnnl_memory_desc_equal(src, want)) {
    data = pv->data;
  } else {
    void *dst = core_arena_alloc(c->p->consts, dnnl_memory_desc_get_size(want), 64);
    if (!dst) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    inferd_code rc = engine_reorder_now(c->m, src, pv->data, want, dst, st);
    if (rc != INFERD_OK) return rc;
    data = dst;
  }
  *out = (plan_ref){.kind = REF_WEIGHT, .data = data, .md = *want};
  return INFERD_OK;
}

const dnnl_memory_desc_t *plan_weight_layout(plan_ctx *c, int v, const dnnl_memory_desc_t *src,
                                             dnnl_data_type_t type) {
  if (c->m->graph->values[v].producer != IR_NONE) return NULL;
  for (const weight_copy *w = c->m->weights[v]; w; w = w->next)
    if (dnnl_memory_desc_equal(&w->src, src) && !engine_md_is_wino(&w->md) && w->md.data_type == type) return &w->md;
  return NULL;
}

static inferd_code const_ref(plan_ctx *c, int v, const dnnl_memory_desc_t *want, plan_ref *out, inferd_status *st) {
  return plan_weight(c, v, NULL, want, out, st);
}

dnnl_primitive_attr_t plan_attr_new(void) {
  dnnl_primitive_attr_t attr = NULL;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
  dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  return attr;
}

dnnl_primitive_attr_t plan_attr_fused(const plan_ctx *c, int node) {
  dnnl_primitive_attr_t attr = plan_attr_new();
  const node_extra *x = &c->m->extra[node];
  if (!attr || x->n_fused == 0) return attr;
  dnnl_post_ops_t po;
  if (dnnl_post_ops_create(&po) != dnnl_success) return attr;
  for (int i = 0; i < x->n_fused; i++) {
    if (x->fused[i].kind == FUSED_SUM) dnnl_post_ops_append_sum(po, x->fused[i].alpha);
    else dnnl_post_ops_append_eltwise(po, 1.0f, x->fused[i].alg, x->fused[i].alpha, x->fused[i].beta);
  }
  dnnl_primitive_attr_set_post_ops(attr, po);
  dnnl_post_ops_destroy(po);
  return attr;
}

inferd_code plan_src_typed(plan_ctx *c, int v, plan_ref *out, inferd_status *st) {
  plan_value *pv = &c->vals[v];
  if (pv->is_const || !pv->defined) return plan_src(c, v, NULL, out, st);
  *out = pv->ref;
  return INFERD_OK;
}

inferd_code plan_src(plan_ctx *c, int v, const dnnl_memory_desc_t *want, plan_ref *out, inferd_status *st) {
  plan_value *pv = &c->vals[v];
  if (pv->is_const) return const_ref(c, v, want, out, st);
  if (!pv->defined)
    return core_fail(st, INFERD_INTERNAL, "value '%s' is used before it is computed", c->m->graph->values[v].name);
  dnnl_memory_desc_t own_type;
  if (!want && pv->ref.md.data_type == dnnl_bf16 && md_dtype(pv->dtype) == dnnl_f32) {
    /* a float32 value a convolution wrote in bfloat16, read by an op that computes in
     * its own type: float32 in the same layout (a blocked md's strides count elements) */
    own_type = pv->ref.md;
    own_type.data_type = dnnl_f32;
    want = &own_type;
  }
  if (!want || dnnl_memory_desc_equal(want, &pv->ref.md)) {
    *out = pv->ref;
    return INFERD_OK;
  }
  for (int i = 0; i < c->n_variants; i++)
    if (c->variants[i].value == v && dnnl_memory_desc_equal(&c->variants[i].ref.md, want)) {
      *out = c->variants[i].ref;
      return INFERD_OK;
    }
  plan_ref dst;
  int steps = c->p->n_steps;
  inferd_code rc = plan_convert(c, -1, &pv->ref, want, &dst, st);
  if (rc != INFERD_OK) return rc;
  if (c->p->n_steps > steps) { /* none for an empty tensor */
    /* the profile names the value this reorder copies, not a node */
    const char *name = c->m->graph->values[v].name ? c->m->graph->values[v].name : "?";
    size_t len = strlen(name) + sizeof "(reorder of )";
    char *label = core_arena_alloc(c->p->consts, len, 1);
    if (!label) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    snprintf(label, len, "(reorder of %s)", name);
    c->p->steps[c->p->n_steps - 1].node = label;
  }
  if (c->n_variants == c->cap_variants) {
    int cap = c->cap_variants ? c->cap_variants * 2 : 32;
    variant *nv = realloc(c->variants, (size_t)cap * sizeof *nv);
    if (!nv) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    c->variants = nv;
    c->cap_variants = cap;
  }
  c->variants[c->n_variants++] = (variant){v, dst};
  *out = dst;
  return INFERD_OK;
}

/* ---- graph outputs ------------------------------------------------------------------ */

static void copy_step(const plan_step *s, void *const *ptrs) {
  memcpy(ptrs[1], ptrs[0], (size_t)s->params[0]);
}

static inferd_code bind_outputs(plan_ctx *c, inferd_status *st) {
  const ir_graph *g = c->m->graph;
  plan *p = c->p;
  for (int k = 0; k < g->n_outputs; k++) {
    int v = g->outputs[k];
    plan_value *pv = &c->vals[v];
    if (pv->rank < 0) return core_fail(st, INFERD_INTERNAL, "output '%s' was never computed", g->values[v].name);
    if (pv->dtype != INFERD_DTYPE_FLOAT)
      return core_fail(st, INFERD_UNSUPPORTED, "output '%s' is %s; only float32 outputs are supported",
                       g->values[v].name, core_dtype_name(pv->dtype));
    p->out_rank[k] = pv->rank;
    memcpy(p->out_dims[k], pv->dims, sizeof pv->dims);
    dnnl_memory_desc_t plain;
    md_plain(&plain, pv->rank, pv->dims, pv->dtype);
    plan_ref dst = {.kind = REF_OUTPUT, .index = k, .md = plain};
    if (pv->is_const) {
      plan_ref src;
      inferd_code rc = const_ref(c, v, &plain, &src, st);
      if (rc != INFERD_OK) return rc;
      int64_t bytes = (int64_t)dnnl_memory_desc_get_size(&plain);
      plan_ref args[2] = {src, dst};
      if ((rc = plan_emit_custom(c, -1, OP_REORDER, copy_step, 2, args, &bytes, 1, st)) != INFERD_OK) return rc;
      continue;
    }
    /* write straight into the caller's array when this value alone owns a plain buffer */
    int b = pv->ref.index;
    bool shared = pv->ref.kind != REF_BUFFER || pv->ref.offset != 0;
    for (int u = 0; u < g->n_values && !shared; u++)
      if (u != v && c->vals[u].defined && !c->vals[u].is_const && c->vals[u].ref.kind == REF_BUFFER &&
          c->vals[u].ref.index == b)
        shared = true;
    if (!shared && md_is_plain(&pv->ref.md) && pv->ref.md.data_type == plain.data_type &&
        p->buffers[b].bind == REF_BUFFER) {
      p->buffers[b].bind = REF_OUTPUT;
      p->buffers[b].io_index = k;
      continue;
    }
    inferd_code rc = plan_emit_reorder(c, -1, &pv->ref, &dst, st);
    if (rc != INFERD_OK) return rc;
  }
  return INFERD_OK;
}

/* ---- memory planning ------------------------------------------------------------------ */

static int by_size_desc(const void *a, const void *b, void *ctx) {
  const plan_buffer *bufs = ctx;
  size_t sa = bufs[*(const int *)a].size, sb = bufs[*(const int *)b].size;
  return sa < sb ? 1 : sa > sb ? -1 : *(const int *)a - *(const int *)b;
}

static size_t align_up(size_t n) { return (n + 63) & ~(size_t)63; }

static inferd_code plan_memory(plan *p, inferd_status *st) {
  int n = p->n_buffers;
  int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
  int *placed = malloc((size_t)(n ? n : 1) * sizeof *placed);
  if (!order || !placed) {
    free(order);
    free(placed);
    return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  }
  for (int i = 0; i < n; i++) order[i] = i;
  qsort_r(order, (size_t)n, sizeof *order, by_size_desc, p->buffers);
  int n_placed = 0;
  size_t total = 0;
  for (int k = 0; k < n; k++) {
    plan_buffer *b = &p->buffers[order[k]];
    if (b->bind != REF_BUFFER) continue;
    /* lowest offset that fits among lifetime-overlapping buffers (first-fit on a
     * list kept sorted by offset) */
    size_t offset = 0;
    for (int j = 0; j < n_placed; j++) {
      const plan_buffer *o = &p->buffers[placed[j]];
      if (o->last < b->first || b->last < o->first) continue;
      if (offset + align_up(b->size) <= o->offset) break;
      if (o->offset + align_up(o->size) > offset) offset = o->offset + align_up(o->size);
    }
    b->offset = offset;
    if (offset + align_up(b->size) > total) total = offset + align_up(b->size);
    int j = n_placed++;
    while (j > 0 && p->buffers[placed[j - 1]].offset > offset) {
      placed[j] = placed[j - 1];
      j--;
    }
    placed[j] = order[k];
  }
  p->arena_bytes = total;
  free(order);
  free(placed);
  return INFERD_OK;
}

/* ---- compile ---------------------------------------------------------------------------- */

static inferd_code init_values(plan_ctx *c, inferd_status *st) {
  const ir_graph *g = c->m->graph;
  for (int v = 0; v < g->n_values; v++) {
    const ir_value *gv = &g->values[v];
    plan_value *pv = &c->vals[v];
    pv->rank = -1;
    pv->dtype = gv->dtype;
    if (gv->producer == IR_NONE && !gv->is_input && (gv->data || c->m->weights[v])) {
      pv->is_const = true;
      pv->data = gv->data;
      pv->rank = gv->rank;
      memcpy(pv->dims, gv->dims, sizeof pv->dims);
    }
  }
  for (int k = 0; k < g->n_inputs; k++) {
    int v = g->inputs[k];
    const ir_value *gv = &g->values[v];
    plan_value *pv = &c->vals[v];
    pv->rank = gv->rank;
    for (int i = 0; i < gv->rank; i++) pv->dims[i] = i == 0 ? c->p->batch : gv->dims[i];
    dnnl_memory_desc_t md;
    md_plain(&md, pv->rank, pv->dims, pv->dtype);
    pv->defined = true;
    pv->ref = (plan_ref){.kind = REF_INPUT, .index = k, .md = md};
  }
  return core_shape_count(0, NULL) == 1 ? INFERD_OK : core_fail(st, INFERD_INTERNAL, "unreachable");
}

static const op_lower_fn lowerings[OP_COUNT] = {
#define ENGINE__FN(id, name, fn, min_inputs) [OP_##id] = fn,
    ENGINE_OPS(ENGINE__FN)
#undef ENGINE__FN
};

inferd_code engine_plan_compile(inferd_model *m, int batch, int threads, plan **out, inferd_status *st) {
  *out = NULL;
  plan *p = calloc(1, sizeof *p);
  plan_ctx c = {.m = m, .p = p};
  if (!p || !(p->consts = core_arena_new(1 << 20)) ||
      !(c.vals = calloc((size_t)m->graph->n_values, sizeof *c.vals))) {
    free(c.vals);
    if (p) core_arena_free(p->consts);
    free(p);
    return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  }
  p->batch = batch;
  p->threads = threads;
  p->n_outputs = m->graph->n_outputs;
  omp_set_num_threads(threads);
  inferd_code rc = init_values(&c, st);
  const ir_graph *g = m->graph;
  for (int i = 0; i < g->n_nodes && rc == INFERD_OK; i++) {
    if (g->nodes[i].dead) continue;
    rc = lowerings[m->extra[i].op](&c, i, st);
    for (int k = 0; k < g->nodes[i].n_outputs && rc == INFERD_OK; k++) {
      int v = g->nodes[i].outputs[k];
      int64_t count = v == IR_NONE || c.vals[v].rank < 0 ? 0 : core_shape_count(c.vals[v].rank, c.vals[v].dims);
      if (count < 0 || count > ((int64_t)1 << 36))
        rc = node_fail(&c, i, INFERD_UNSUPPORTED, st, "output '%s' would have %s elements", g->values[v].name,
                       count < 0 ? "too many" : "over 2^36");
    }
  }
  if (rc == INFERD_OK) rc = bind_outputs(&c, st);
  /* graph outputs stay alive to the end */
  for (int b = 0; b < p->n_buffers && rc == INFERD_OK; b++)
    if (p->buffers[b].bind == REF_OUTPUT) p->buffers[b].last = p->n_steps;
  if (rc == INFERD_OK) rc = plan_memory(p, st);
  size_t need = p->arena_bytes + p->scratchpad_bytes, mb = (size_t)1 << 20;
  if (rc == INFERD_OK && need > m->max_scratch && m->max_scratch < mb)
    rc = core_fail(st, INFERD_TOO_LARGE, "batch %d needs %zu bytes of scratch memory, above the limit of %zu bytes",
                   batch, need, m->max_scratch);
  else if (rc == INFERD_OK && need > m->max_scratch) /* need rounded up, so that it never reads as the limit */
    rc = core_fail(st, INFERD_TOO_LARGE, "batch %d needs %zu MB of scratch memory, above the limit of %zu MB", batch,
                   (need + mb - 1) / mb, m->max_scratch / mb);
  free(c.vals);
  free(c.variants);
  if (rc != INFERD_OK) {
    engine_plan_free(p);
    return rc;
  }
  p->refs = 1;
  *out = p;
  return INFERD_OK;
}

/* Compiling a plan checks every node and lays out its weights, but generates no kernel
 * code: a plan made only for that (the batch-1 plan at load, when sessions run another
 * thread count) would hold a few MB of code nobody runs. The first session to use the
 * plan makes its primitives here. */
inferd_code engine_plan_instantiate(plan *p, inferd_status *st) {
  for (int i = 0; i < p->n_steps; i++) {
    plan_step *s = &p->steps[i];
    if (!s->pd) continue;
    dnnl_status_t rc = dnnl_primitive_create(&s->prim, s->pd);
    if (rc != dnnl_success) {
      s->prim = NULL;
      return core_fail(st, INFERD_INTERNAL, "node '%s' (%s): oneDNN could not create the primitive (status %d)",
                       s->node ? s->node : "(reorder)", engine_op_name(s->op), rc);
    }
    dnnl_primitive_desc_destroy(s->pd);
    s->pd = NULL;
  }
  p->instantiated = true;
  return INFERD_OK;
}

void engine_plan_free(plan *p) {
  if (!p) return;
  for (int i = 0; i < p->n_steps; i++) {
    if (p->steps[i].prim) dnnl_primitive_destroy(p->steps[i].prim);
    if (p->steps[i].pd) dnnl_primitive_desc_destroy(p->steps[i].pd);
  }
  free(p->steps);
  free(p->buffers);
  core_arena_free(p->consts);
  free(p);
}
