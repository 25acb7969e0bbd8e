/*
 * engine_weights.c - the model's one shared copy of each weight.
 *
 * DESIGN
 * A primitive tells which layout it wants its weights in (oneDNN's format_tag any);
 * the first plan that asks for a constant in a layout reorders the IR's plain data
 * into the model's weight arena, and every later plan and session asks again and
 * gets the same pointer. Copies are keyed by (how the plain data is read, wanted
 * layout), so a constant used two ways never mixes them up. A constant that one node
 * reads, as its weights, loses its plain copy right after its first reorder, so that
 * loading never holds a model's weights twice; one that several nodes read only as
 * weights (perhaps each its own way) loses it once the load-time plan, which asks for
 * every one of those ways, exists. A layout asked for later is reordered from an
 * existing copy read the same way. A Winograd-transformed copy (engine_md_is_wino) is
 * never reordered from and never asked for by another kernel: it is made from the
 * plain data, which stays (counted in the weights' bytes) while a weight has no other
 * copy. A constant that other ops read too (a binary op's
 * operand, shape arithmetic folded per plan) keeps its plain copy. Constants no node
 * reads any more (the originals of weights the passes rewrote, as when a
 * BatchNormalization is folded into its Conv) go right after the passes.
 *
 * Called under model->lock (plans are compiled under it). Copies are never changed
 * or freed before the model is, so runs read them without a lock.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

inferd_code engine_reorder_now(inferd_model *m, const dnnl_memory_desc_t *src, const void *src_data,
                               const dnnl_memory_desc_t *dst, void *dst_data, inferd_status *st) {
  if (md_is_empty(dst)) return INFERD_OK; /* nothing to copy (oneDNN's reorder divides by zero) */
  if (dnnl_memory_desc_equal(src, dst)) { /* biases and other plain weights: a copy */
    memcpy(dst_data, src_data, dnnl_memory_desc_get_size(dst));
    return INFERD_OK;
  }
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t prim = NULL;
  dnnl_memory_t from = NULL, to = NULL;
  dnnl_stream_t stream = NULL;
  inferd_code rc = INFERD_OK;
  if (dnnl_reorder_primitive_desc_create(&pd, src, m->engine, dst, m->engine, NULL) != dnnl_success ||
      dnnl_primitive_create(&prim, pd) != dnnl_success ||
      dnnl_memory_create(&from, src, m->engine, (void *)src_data) != dnnl_success ||
      dnnl_memory_create(&to, dst, m->engine, dst_data) != dnnl_success ||
      dnnl_stream_create(&stream, m->engine, dnnl_stream_default_flags) != dnnl_success) {
    rc = core_fail(st, INFERD_INTERNAL, "oneDNN could not reorder a weight");
  } else {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    if (dnnl_primitive_execute(prim, stream, 2, args) != dnnl_success || dnnl_stream_wait(stream) != dnnl_success)
      rc = core_fail(st, INFERD_INTERNAL, "oneDNN failed reordering a weight");
  }
  if (stream) dnnl_stream_destroy(stream);
  if (from) dnnl_memory_destroy(from);
  if (to) dnnl_memory_destroy(to);
  if (prim) dnnl_primitive_destroy(prim);
  if (pd) dnnl_primitive_desc_destroy(pd);
  return rc;
}

static bool same_dims(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b) {
  if (a->ndims != b->ndims || a->data_type != b->data_type) return false;
  for (int i = 0; i < a->ndims; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* Drops the plain data of `value`, a constant read only as weights. From its first
 * copy on, the weights' bytes count the plain data too while it stays. */
static void plain_release(inferd_model *m, int value) {
  if (!m->graph->values[value].data) return;
  if (m->weights[value]) atomic_fetch_sub(&m->weights_bytes, m->graph->values[value].nbytes);
  ir_graph_release_data(m->graph, value);
}

/* Makes the copy of `value` read through `src` in layout `md`, reordered from `from`
 * (laid out as `from_md`), and adds it to the weight's copies. */
static inferd_code weight_store(inferd_model *m, int value, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *md,
                                const dnnl_memory_desc_t *from_md, const void *from, const void **out,
                                inferd_status *st) {
  const ir_value *v = &m->graph->values[value];
  size_t size = dnnl_memory_desc_get_size(md);
  weight_copy *w = core_arena_alloc(m->weight_arena, sizeof *w, 64);
  void *data = w ? core_arena_alloc(m->weight_arena, size ? size : 1, 64) : NULL;
  if (!data) return core_fail(st, INFERD_NO_MEMORY, "out of memory for weight '%s'", v->name);
  inferd_code rc = engine_reorder_now(m, from_md, from, md, data, st);
  if (rc != INFERD_OK) {
    core_status_prefix(st, "weight '%s'", v->name);
    return rc;
  }
  w->src = *src;
  w->md = *md;
  w->data = data;
  w->next = m->weights[value];
  if (m->weight_only[value] && v->data && !w->next) atomic_fetch_add(&m->weights_bytes, v->nbytes);
  m->weights[value] = w;
  atomic_fetch_add(&m->weights_bytes, size);
  if (m->weight_only[value] && v->consumers == 1 && !engine_md_is_wino(md)) plain_release(m, value);
  *out = data;
  return INFERD_OK;
}

/* The plain bytes are gone (released after the first reorder) and no copy was made from
 * this view of them: a plan of another batch size reads the weight in another shape
 * (a MatMul that is 2-D at batch 1 and 3-D at batch 3 reads [K,N] then [1,K,N]). Any
 * copy whose view covers all the bytes gives them back: reordered into its own view's
 * layout, it is the original bytes, which the new view then reads. Also how a later
 * plan's transformed Winograd copy is made once a direct copy let the plain data go.
 * Plan compilation only (its malloc is not on a run's path). */
static inferd_code weight_from_other_view(inferd_model *m, int value, const dnnl_memory_desc_t *src,
                                          const dnnl_memory_desc_t *md, const void **out, inferd_status *st) {
  const ir_value *v = &m->graph->values[value];
  const weight_copy *w = m->weights[value];
  while (w && (dnnl_memory_desc_get_size(&w->src) != v->nbytes || engine_md_is_wino(&w->md))) w = w->next;
  if (!w || dnnl_memory_desc_get_size(src) > v->nbytes)
    return core_fail(st, INFERD_INTERNAL, "weight '%s': no copy left to reorder from", v->name);
  void *plain = malloc(v->nbytes ? v->nbytes : 1);
  if (!plain) return core_fail(st, INFERD_NO_MEMORY, "out of memory for weight '%s'", v->name);
  inferd_code rc = engine_reorder_now(m, &w->md, w->data, &w->src, plain, st);
  if (rc == INFERD_OK) rc = weight_store(m, value, src, md, src, plain, out, st);
  else core_status_prefix(st, "weight '%s'", v->name);
  free(plain);
  return rc;
}

inferd_code engine_weight_get(inferd_model *m, int value, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *md,
                              const void **out, inferd_status *st) {
  const ir_value *v = &m->graph->values[value];
  weight_copy *from = NULL;
  for (weight_copy *w = m->weights[value]; w; w = w->next) {
    if (!dnnl_memory_desc_equal(&w->src, src)) continue;
    if (dnnl_memory_desc_equal(&w->md, md)) {
      *out = w->data;
      return INFERD_OK;
    }
    if (same_dims(&w->md, md) && !engine_md_is_wino(&w->md) && !engine_md_is_wino(md)) from = w;
  }
  if (!v->data && !from) return weight_from_other_view(m, value, src, md, out, st);
  if (dnnl_memory_desc_get_size(src) > v->nbytes && v->data)
    return core_fail(st, INFERD_INVALID_ARG, "weight '%s': %zu bytes, its use needs %zu", v->name, v->nbytes,
                     dnnl_memory_desc_get_size(src));
  return from ? weight_store(m, value, src, md, &from->md, from->data, out, st)
              : weight_store(m, value, src, md, src, v->data, out, st);
}

inferd_code engine_weights_mark(inferd_model *m, inferd_status *st) {
  const ir_graph *g = m->graph;
  int *weight_reads = calloc((size_t)g->n_values + 1, sizeof *weight_reads);
  m->weight_only = calloc((size_t)g->n_values + 1, sizeof *m->weight_only);
  if (!weight_reads || !m->weight_only) {
    free(weight_reads);
    return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ir_node *n = &g->nodes[i];
    op_kind op = m->extra[i].op;
    if (n->dead || (op != OP_CONV && op != OP_GEMM && op != OP_MATMUL && op != OP_BATCHNORM)) continue;
    for (int k = 1; k < n->n_inputs; k++)
      if (n->inputs[k] != IR_NONE) weight_reads[n->inputs[k]]++;
  }
  for (int v = 0; v < g->n_values; v++) {
    const ir_value *x = &g->values[v];
    /* an attribute's tensor has no consumers but is read by its node at every plan */
    bool constant = x->data && x->producer == IR_NONE && !x->is_input && !x->is_output && !x->is_attr;
    m->weight_only[v] = constant && weight_reads[v] == x->consumers;
    if (constant && x->consumers == 0) ir_graph_release_data(m->graph, v);
  }
  free(weight_reads);
  return INFERD_OK;
}

void engine_weights_release_plain(inferd_model *m) {
  for (int v = 0; v < m->graph->n_values; v++) {
    if (!m->weights[v] || !m->weight_only[v]) continue;
    bool other = false; /* a copy to reorder from besides Winograd's */
    for (const weight_copy *w = m->weights[v]; w && !other; w = w->next) other = !engine_md_is_wino(&w->md);
    if (other) plain_release(m, v);
  }
}
