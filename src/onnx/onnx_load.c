/*
 * onnx_load.c - ModelProto (protobuf-c) to ir_graph.
 *
 * DESIGN
 * protobuf-c unpacks the whole message with an allocator of ours that draws from the
 * graph's arena, so the IR can point at the unpacked strings and tensor bytes instead
 * of copying them; large tensor payloads get mappings of their own (core_arena's "big"
 * allocations), which lets the engine unmap each weight once its reordered copy
 * exists.
 *
 * protobuf-c copies every bytes field out of the input buffer. With the file mapped,
 * that would hold the weights twice (file pages + copies) at the end of unpacking.
 * protobuf-c copies fields in file order and calls the allocator right before each
 * copy, so when the allocator is called again, the previous big payload has been
 * copied: the tracker finds where that payload sits in the file (searching forward
 * from a cursor for its first bytes) and drops the file pages up to its end with
 * MADV_DONTNEED. A wrong guess costs only a page fault: pages of a private read-only
 * file mapping come back from the page cache when touched again. Ahead of the
 * cursor, the tracker maps the next POPULATE_AHEAD bytes of the file in one call
 * (MADV_POPULATE_READ) rather than letting protobuf-c fault them in 64 KB at a time:
 * a third less time, for at most that much more of the file mapped at once.
 *
 * Validation happens here, once: every node input must name a graph input, an
 * initializer or an earlier node's output (the graph is sorted topologically if it
 * is not already, in time linear in its size, and a sorted file keeps its order),
 * every initializer's payload must match its declared shape and type, and Constant
 * nodes become constant values.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "onnx/onnx_internal.h"

/* ---- allocator for protobuf-c, with the file-page dropper --------------------- */

typedef struct unpack_ctx {
  core_arena *arena;
  const unsigned char *file; /* the serialized model, when it is a private mapping */
  size_t file_size;
  size_t cursor;                 /* file bytes before this are copied already */
  size_t populated;              /* file bytes before this are mapped (asked to be) */
  const unsigned char *pending;  /* last big allocation, filled by now */
  size_t pending_size;
} unpack_ctx;

enum { PAGE = 4096, NEEDLE = 64, POPULATE_AHEAD = 16 << 20 };

static void populate_ahead(unpack_ctx *u) {
#ifdef MADV_POPULATE_READ /* Linux 5.14, glibc 2.35 */
  if (u->populated < u->cursor) u->populated = u->cursor; /* never map back what was dropped */
  if (!u->file || u->populated >= u->file_size || u->populated >= u->cursor + POPULATE_AHEAD / 2) return;
  size_t to = CORE_MIN(u->cursor + POPULATE_AHEAD, u->file_size);
  uintptr_t from = (uintptr_t)(u->file + u->populated) / PAGE * PAGE;
  madvise((void *)from, (uintptr_t)(u->file + to) - from, MADV_POPULATE_READ); /* a hint: errors are harmless */
  u->populated = to;
#else
  (void)u;
#endif
}

static void drop_copied_pages(unpack_ctx *u) {
  if (!u->pending || !u->file || u->pending_size < NEEDLE || u->cursor >= u->file_size) return;
  const unsigned char *hay = u->file + u->cursor;
  const unsigned char *at = memmem(hay, u->file_size - u->cursor, u->pending, NEEDLE);
  u->pending = NULL;
  if (!at) return;
  /* The allocation need not be the file's bytes (a packed varint array is larger in
   * memory than in the file, and may not be filled yet): never past the file's end. */
  size_t end = CORE_MIN((size_t)(at - u->file) + u->pending_size, u->file_size);
  /* whole pages of the mapping (the model need not start on a page: a .mar entry) */
  uintptr_t from = (uintptr_t)(u->file + u->cursor) / PAGE * PAGE, to = (uintptr_t)(u->file + end) / PAGE * PAGE;
  if (to > from) madvise((void *)from, to - from, MADV_DONTNEED);
  u->cursor = end;
  populate_ahead(u);
}

static void *pb_alloc(void *data, size_t size) {
  unpack_ctx *u = data;
  drop_copied_pages(u);
  void *p = core_arena_alloc(u->arena, size, 16);
  if (p && size >= CORE_ARENA_BIG) {
    u->pending = p;
    u->pending_size = size;
  }
  return p;
}

static void pb_free(void *data, void *p) { (void)data, (void)p; /* the arena frees all at once */ }

/* The unpack, as a reader for core_guard_run: the file may be mapped and shrink. */
typedef struct unpack_call {
  ProtobufCAllocator *allocator;
  size_t size;
  const void *data;
  Onnx__ModelProto *model;
} unpack_call;

static void unpack(void *arg) {
  unpack_call *c = arg;
  c->model = onnx__model_proto__unpack(c->allocator, c->size, c->data);
}

/* ---- name table: value name -> index (open addressing, load phase only) -------- */

typedef struct name_table {
  int *slots; /* value index + 1; 0 = empty */
  size_t cap;
} name_table;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static int table_find(const name_table *t, const ir_graph *g, const char *name) {
  for (size_t i = hash_str(name) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
    if (!t->slots[i]) return IR_NONE;
    if (strcmp(g->values[t->slots[i] - 1].name, name) == 0) return t->slots[i] - 1;
  }
}

static void table_put(name_table *t, const ir_graph *g, int value) {
  for (size_t i = hash_str(g->values[value].name) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
    if (!t->slots[i] || strcmp(g->values[t->slots[i] - 1].name, g->values[value].name) == 0) {
      t->slots[i] = value + 1;
      return;
    }
  }
}

/* ---- graph building ------------------------------------------------------------ */

int ir_graph_add_value(ir_graph *g, const char *name, inferd_dtype dtype, int rank,
                       const int64_t *dims, const void *data) {
  if (g->n_values == g->cap_values) {
    int cap = g->cap_values ? g->cap_values * 2 : 256;
    ir_value *values = realloc(g->values, (size_t)cap * sizeof *values);
    if (!values) return IR_NONE;
    g->values = values;
    g->cap_values = cap;
  }
  ir_value *v = &g->values[g->n_values];
  memset(v, 0, sizeof *v);
  v->name = core_arena_strdup(g->arena, name ? name : "");
  v->dtype = dtype;
  v->rank = rank;
  for (int i = 0; i < rank && i < IR_MAX_RANK; i++) v->dims[i] = dims[i];
  v->producer = IR_NONE;
  if (data) {
    int64_t count = core_shape_count(rank, dims);
    v->nbytes = (size_t)count * core_dtype_size(dtype);
    v->data = core_arena_alloc(g->arena, v->nbytes ? v->nbytes : 1, 64);
    if (!v->data) return IR_NONE;
    memcpy(v->data, data, v->nbytes);
  }
  if (!v->name) return IR_NONE;
  return g->n_values++;
}

void ir_graph_release_data(ir_graph *g, int value) {
  ir_value *v = &g->values[value];
  if (v->data && v->nbytes >= CORE_ARENA_BIG) core_arena_release(g->arena, v->data);
  v->data = NULL;
}

void ir_graph_free(ir_graph *g) {
  if (!g) return;
  free(g->values);
  free(g->nodes);
  core_arena_free(g->arena);
  free(g);
}

/* Points v at the payload of tensor t (no copy when it is raw_data; read from its
 * file when it is external data), checking that the payload matches the declared type
 * and shape. */
static inferd_code tensor_to_value(ir_graph *g, const Onnx__TensorProto *t, const char *what, ir_value *v,
                                   onnx_external *ext, inferd_status *st) {
  if (t->n_dims > IR_MAX_RANK)
    return core_fail(st, INFERD_UNSUPPORTED, "%s: rank %zu above %d", what, t->n_dims, IR_MAX_RANK);
  if (t->segment) return core_fail(st, INFERD_UNSUPPORTED, "%s: segmented tensors are not supported", what);
  v->dtype = (inferd_dtype)t->data_type;
  size_t esize = core_dtype_size(v->dtype);
  if (!esize) return core_fail(st, INFERD_UNSUPPORTED, "%s: tensor data type %d is not supported", what, t->data_type);
  v->rank = (int)t->n_dims;
  for (size_t i = 0; i < t->n_dims; i++) {
    if (t->dims[i] < 0) return core_fail(st, INFERD_INVALID_ARG, "%s: negative dimension %lld", what, (long long)t->dims[i]);
    v->dims[i] = t->dims[i];
  }
  int64_t count = core_shape_count(v->rank, v->dims);
  if (count < 0 || (uint64_t)count > SIZE_MAX / 16)
    return core_fail(st, INFERD_INVALID_ARG, "%s: shape too large", what);
  v->nbytes = (size_t)count * esize;
  char shape[96];
  core_shape_str(v->rank, v->dims, shape, sizeof shape);
  if (onnx_tensor_is_external(t))
    return onnx_external_read(g->arena, t, what, v->nbytes, ext, &v->data, st);
  if (t->has_raw_data) {
    if (t->raw_data.len != v->nbytes)
      return core_fail(st, INFERD_INVALID_ARG, "%s: raw data is %zu bytes, shape %s of %s needs %zu", what,
                       t->raw_data.len, shape, core_dtype_name(v->dtype), v->nbytes);
    v->data = t->raw_data.data;
    if (!v->data) v->data = core_arena_alloc(g->arena, 1, 16);
    return v->data ? INFERD_OK : core_fail(st, INFERD_NO_MEMORY, "%s: out of memory", what);
  }
  /* typed repeated fields: float_data, int64_data, int32_data (also for 8-bit and bool).
   * The unpacked arrays are in the graph's arena already: the value points at them
   * when their element type is the tensor's (a copy would hold the weights twice). */
  size_t have;
  switch (v->dtype) {
  case INFERD_DTYPE_FLOAT:
    have = t->n_float_data;
    v->data = t->float_data;
    break;
  case INFERD_DTYPE_INT64:
    have = t->n_int64_data;
    v->data = t->int64_data;
    break;
  case INFERD_DTYPE_INT32:
    have = t->n_int32_data;
    v->data = t->int32_data;
    break;
  default: /* uint8, int8, bool: one element per int32, converted below */
    have = t->n_int32_data;
    v->data = NULL;
    break;
  }
  if (have != (size_t)count)
    return core_fail(st, INFERD_INVALID_ARG, "%s: has %zu elements, shape %s needs %lld", what, have, shape,
                     (long long)count);
  if (v->data && have) return INFERD_OK;
  v->data = core_arena_alloc(g->arena, v->nbytes ? v->nbytes : 1, 64); /* converted, or no elements */
  if (!v->data) return core_fail(st, INFERD_NO_MEMORY, "%s: out of memory", what);
  if (esize == 1)
    for (size_t i = 0; i < have; i++) ((uint8_t *)v->data)[i] = (uint8_t)t->int32_data[i];
  return INFERD_OK;
}

static inferd_code add_declared(ir_graph *g, name_table *names, const Onnx__ValueInfoProto *vi, bool input,
                                inferd_status *st) {
  if (!vi->name || !*vi->name) return core_fail(st, INFERD_INVALID_ARG, "graph %s without a name", input ? "input" : "output");
  if (!input) return INFERD_OK; /* outputs: the engine infers their type and shape */
  int idx = table_find(names, g, vi->name);
  if (idx == IR_NONE) {
    idx = ir_graph_add_value(g, vi->name, INFERD_DTYPE_UNDEFINED, -1, NULL, NULL);
    if (idx == IR_NONE) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    table_put(names, g, idx);
  } else if (g->values[idx].is_input) {
    return core_fail(st, INFERD_INVALID_ARG, "graph input '%s' is listed twice", vi->name);
  } else {
    return INFERD_OK; /* an initializer also listed as an input (older exporters): a constant */
  }
  ir_value *v = &g->values[idx];
  const Onnx__TypeProto *tp = vi->type;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return core_fail(st, INFERD_UNSUPPORTED, "graph %s '%s': only tensor types are supported", input ? "input" : "output", vi->name);
  v->dtype = (inferd_dtype)tp->tensor_type->elem_type;
  const Onnx__TensorShapeProto *shape = tp->tensor_type->shape;
  if (shape) {
    if (shape->n_dim > IR_MAX_RANK)
      return core_fail(st, INFERD_UNSUPPORTED, "graph input '%s': rank %zu above %d", vi->name, shape->n_dim, IR_MAX_RANK);
    v->rank = (int)shape->n_dim;
    for (size_t i = 0; i < shape->n_dim; i++) {
      const Onnx__TensorShapeProto__Dimension *d = shape->dim[i];
      v->dims[i] = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value >= 0 ? d->dim_value : -1;
      if (v->dims[i] > (1 << 24))
        return core_fail(st, INFERD_UNSUPPORTED, "graph input '%s': dimension %zu is %lld, too large", vi->name, i,
                         (long long)v->dims[i]);
    }
  }
  v->is_input = true;
  return INFERD_OK;
}

/* Copies a node's attributes; TENSOR attributes become constant values. */
static inferd_code convert_attrs(ir_graph *g, const Onnx__NodeProto *np, ir_node *n, onnx_external *ext,
                                 inferd_status *st) {
  n->n_attrs = (int)np->n_attribute;
  n->attrs = core_arena_calloc(g->arena, np->n_attribute ? np->n_attribute : 1, sizeof *n->attrs);
  if (!n->attrs) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  for (size_t i = 0; i < np->n_attribute; i++) {
    const Onnx__AttributeProto *ap = np->attribute[i];
    ir_attr *a = &n->attrs[i];
    a->name = ap->name ? ap->name : "";
    a->type = (ir_attr_type)ap->type;
    a->f = ap->f;
    a->i = ap->i;
    a->tensor = IR_NONE;
    if (ap->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING) {
      char *s = core_arena_alloc(g->arena, ap->s.len + 1, 1);
      if (!s) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
      if (ap->s.len) memcpy(s, ap->s.data, ap->s.len);
      s[ap->s.len] = '\0';
      a->s = s;
    }
    a->n = ap->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS ? (int)ap->n_ints
           : ap->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS ? (int)ap->n_floats : 0;
    a->ints = ap->ints;
    a->floats = ap->floats;
    if (ap->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR) {
      if (!ap->t) return core_fail(st, INFERD_INVALID_ARG, "node '%s': attribute '%s' has no tensor", n->name, a->name);
      int idx = ir_graph_add_value(g, "", INFERD_DTYPE_UNDEFINED, 0, NULL, NULL);
      if (idx == IR_NONE) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
      char what[160];
      snprintf(what, sizeof what, "node '%s' attribute '%s'", n->name, a->name);
      inferd_code rc = tensor_to_value(g, ap->t, what, &g->values[idx], ext, st);
      if (rc != INFERD_OK) return rc;
      g->values[idx].is_attr = true;
      a->tensor = idx;
    }
  }
  return INFERD_OK;
}

/* Constant nodes become constant values, so no pass or plan ever sees them. */
static inferd_code fold_constant_node(ir_graph *g, ir_node *n, inferd_status *st) {
  if (n->n_outputs != 1 || n->outputs[0] == IR_NONE || n->n_attrs != 1)
    return core_fail(st, INFERD_INVALID_ARG, "node '%s' (Constant): needs one output and one value attribute", n->name);
  ir_value *out = &g->values[n->outputs[0]];
  const ir_attr *a = &n->attrs[0];
  /* the name says the type (onnx.checker refuses a mismatch): a value_float written as
   * an INT would otherwise become an int64 constant */
  static const struct {
    const char *name;
    ir_attr_type type;
  } kinds[] = {{"value", IR_ATTR_TENSOR}, {"value_float", IR_ATTR_FLOAT}, {"value_int", IR_ATTR_INT},
               {"value_floats", IR_ATTR_FLOATS}, {"value_ints", IR_ATTR_INTS}};
  bool known = false;
  for (size_t k = 0; k < CORE_ARRAY_LEN(kinds) && !known; k++)
    known = strcmp(kinds[k].name, a->name) == 0 && kinds[k].type == a->type;
  if (!known)
    return core_fail(st, INFERD_UNSUPPORTED, "node '%s' (Constant): attribute '%s' of type %d is not supported",
                     n->name, a->name, (int)a->type);
  if (a->type == IR_ATTR_TENSOR) {
    /* The bytes move to the output, which owns them from now on (its release may drop
     * their pages); the dead node's attribute keeps no pointer to them. */
    ir_value *t = &g->values[a->tensor];
    out->dtype = t->dtype, out->rank = t->rank, out->data = t->data, out->nbytes = t->nbytes;
    memcpy(out->dims, t->dims, sizeof out->dims);
    t->data = NULL;
    t->nbytes = 0;
  } else if (a->type == IR_ATTR_FLOAT || a->type == IR_ATTR_INT) {
    size_t es = a->type == IR_ATTR_FLOAT ? 4 : 8;
    out->dtype = a->type == IR_ATTR_FLOAT ? INFERD_DTYPE_FLOAT : INFERD_DTYPE_INT64;
    out->rank = 0;
    out->nbytes = es;
    out->data = core_arena_alloc(g->arena, es, 16);
    if (!out->data) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    memcpy(out->data, a->type == IR_ATTR_FLOAT ? (const void *)&a->f : (const void *)&a->i, es);
  } else if (a->type == IR_ATTR_FLOATS || a->type == IR_ATTR_INTS) {
    size_t es = a->type == IR_ATTR_FLOATS ? 4 : 8;
    out->dtype = a->type == IR_ATTR_FLOATS ? INFERD_DTYPE_FLOAT : INFERD_DTYPE_INT64;
    out->rank = 1;
    out->dims[0] = a->n;
    out->nbytes = es * (size_t)a->n;
    out->data = core_arena_alloc(g->arena, out->nbytes ? out->nbytes : 1, 16);
    if (!out->data) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    if (a->n) memcpy(out->data, a->type == IR_ATTR_FLOATS ? (const void *)a->floats : (const void *)a->ints, out->nbytes);
  } else {
    return core_fail(st, INFERD_UNSUPPORTED, "node '%s' (Constant): attribute '%s' is not supported", n->name, a->name);
  }
  out->producer = IR_NONE;
  n->dead = true;
  return INFERD_OK;
}

/* Orders proto nodes so that each comes after the producers of its inputs, in the
 * order the loader has always produced: repeated sweeps over the file, each placing, in
 * file order, every node whose producers are placed by then. Node order reaches the
 * passes and the memory plan, so it must not change; an already sorted graph is all
 * placed by the first sweep and keeps its file order. The sweeps themselves took one
 * pass per node of a reversed chain (16 s for 40,000 nodes), so the same order is
 * computed in time linear in nodes + inputs instead: a node's sweep is the latest sweep
 * of its producers, one later for a producer that comes after it in the file (the sweep
 * had passed it by then), and 1 for a node with no producer. Kahn's algorithm (each
 * node's consumer list, a count of its producers not yet done, a queue of nodes whose
 * producers are all done) visits producers before consumers, so each node's sweep is
 * known when it is queued; a counting sort by (sweep, file position) gives the order.
 * Nodes Kahn never reaches are on or after a cycle: exactly the nodes the sweeps could
 * not place. `order` (caller-owned, n_node entries) receives proto node indices. */
static inferd_code sort_nodes(const Onnx__GraphProto *gp, const name_table *names, const ir_graph *g,
                              size_t *order, inferd_status *st) {
  size_t n = gp->n_node, n_inputs = 0;
  for (size_t i = 0; i < n; i++) n_inputs += gp->node[i]->n_input;
  int *producer = malloc(((size_t)g->n_values + 1) * sizeof *producer);     /* [value] node, -1 for none */
  size_t *input_producer = malloc((n_inputs + 1) * sizeof *input_producer); /* [input slot] node, or n */
  size_t *first_consumer = calloc(n + 2, sizeof *first_consumer);           /* [node] into consumer */
  size_t *consumer = malloc((n_inputs + 1) * sizeof *consumer);
  size_t *waiting = calloc(n + 1, sizeof *waiting); /* [node] inputs whose producer is not done */
  size_t *sweep = malloc((n + 1) * sizeof *sweep);  /* [node] 1-based */
  size_t *queue = malloc((n + 1) * sizeof *queue);
  size_t *sweep_start = calloc(n + 2, sizeof *sweep_start); /* [sweep] first position in order */
  inferd_code rc = INFERD_OK;
  if (!producer || !input_producer || !first_consumer || !consumer || !waiting || !sweep || !queue || !sweep_start) {
    rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
    goto out;
  }
  for (int v = 0; v < g->n_values; v++) producer[v] = -1;
  for (size_t i = 0; i < n; i++)
    for (size_t o = 0; o < gp->node[i]->n_output; o++) {
      int v = table_find(names, g, gp->node[i]->output[o]);
      if (v != IR_NONE && *gp->node[i]->output[o]) producer[v] = (int)i;
    }
  /* consumer lists, one entry per input slot read from a node's output (a node reading
   * its own output waits for itself: a cycle) */
  size_t slot = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < gp->node[i]->n_input; k++, slot++) {
      int v = *gp->node[i]->input[k] ? table_find(names, g, gp->node[i]->input[k]) : IR_NONE;
      input_producer[slot] = v != IR_NONE && producer[v] >= 0 ? (size_t)producer[v] : n;
      if (input_producer[slot] < n) {
        first_consumer[input_producer[slot] + 1]++;
        waiting[i]++;
      }
    }
  for (size_t p = 0; p < n; p++) first_consumer[p + 1] += first_consumer[p];
  slot = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < gp->node[i]->n_input; k++, slot++)
      if (input_producer[slot] < n) consumer[first_consumer[input_producer[slot]]++] = i;
  /* filling moved each start to its end, which is the next start: shift back */
  for (size_t p = n; p > 0; p--) first_consumer[p] = first_consumer[p - 1];
  first_consumer[0] = 0;

  size_t head = 0, tail = 0;
  for (size_t i = 0; i < n; i++) {
    sweep[i] = 1;
    if (waiting[i] == 0) queue[tail++] = i;
  }
  while (head < tail) {
    size_t p = queue[head++];
    for (size_t e = first_consumer[p]; e < first_consumer[p + 1]; e++) {
      size_t c = consumer[e], s = sweep[p] + (p > c ? 1 : 0);
      if (s > sweep[c]) sweep[c] = s;
      if (--waiting[c] == 0) queue[tail++] = c;
    }
  }
  if (tail < n) {
    rc = core_fail(st, INFERD_INVALID_ARG, "graph has a cycle (%zu of %zu nodes cannot be ordered)", n - tail, n);
    goto out;
  }
  /* counting sort by sweep (at most n), file order within a sweep */
  for (size_t i = 0; i < n; i++) sweep_start[sweep[i] + 1]++;
  for (size_t s = 1; s <= n; s++) sweep_start[s + 1] += sweep_start[s];
  for (size_t i = 0; i < n; i++) order[sweep_start[sweep[i]]++] = i;
out:
  free(producer);
  free(input_producer);
  free(first_consumer);
  free(consumer);
  free(waiting);
  free(sweep);
  free(queue);
  free(sweep_start);
  return rc;
}

static inferd_code build_graph(ir_graph *g, const Onnx__ModelProto *m, onnx_external *ext, uint64_t max_external,
                               inferd_status *st) {
  const Onnx__GraphProto *gp = m->graph;
  if (!gp) return core_fail(st, INFERD_INVALID_ARG, "model has no graph");
  g->opset = 0;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const char *d = m->opset_import[i]->domain;
    if (!d || !*d || strcmp(d, "ai.onnx") == 0) g->opset = m->opset_import[i]->version;
  }
  if (g->opset == 0) return core_fail(st, INFERD_INVALID_ARG, "model imports no default-domain opset");
  inferd_code rc = onnx_external_check_total(gp, max_external, st);
  if (rc != INFERD_OK) return rc;

  /* every name that can appear: initializers, inputs, node outputs */
  size_t expect = gp->n_initializer + gp->n_input + 16;
  for (size_t i = 0; i < gp->n_node; i++) expect += gp->node[i]->n_output;
  name_table names = {0};
  names.cap = 64;
  while (names.cap < expect * 2) names.cap *= 2;
  names.slots = calloc(names.cap, sizeof *names.slots);
  size_t *order = malloc((gp->n_node ? gp->n_node : 1) * sizeof *order);
  if (!names.slots || !order) {
    rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
    goto out;
  }

  for (size_t i = 0; i < gp->n_initializer; i++) {
    const Onnx__TensorProto *t = gp->initializer[i];
    if (!t->name || !*t->name) {
      rc = core_fail(st, INFERD_INVALID_ARG, "initializer %zu has no name", i);
      goto out;
    }
    if (table_find(&names, g, t->name) != IR_NONE) { /* which one is meant? (not SSA) */
      rc = core_fail(st, INFERD_INVALID_ARG, "initializer '%s' is defined twice", t->name);
      goto out;
    }
    int idx = ir_graph_add_value(g, t->name, INFERD_DTYPE_UNDEFINED, 0, NULL, NULL);
    if (idx == IR_NONE) {
      rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
      goto out;
    }
    char what[160];
    snprintf(what, sizeof what, "initializer '%s'", t->name);
    if ((rc = tensor_to_value(g, t, what, &g->values[idx], ext, st)) != INFERD_OK) goto out;
    table_put(&names, g, idx);
  }
  for (size_t i = 0; i < gp->n_input; i++)
    if ((rc = add_declared(g, &names, gp->input[i], true, st)) != INFERD_OK) goto out;
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    for (size_t o = 0; o < np->n_output; o++) {
      if (!*np->output[o]) continue;
      if (table_find(&names, g, np->output[o]) != IR_NONE) {
        rc = core_fail(st, INFERD_INVALID_ARG, "node '%s' (%s): output '%s' is already defined", np->name ? np->name : "",
                       np->op_type ? np->op_type : "", np->output[o]);
        goto out;
      }
      int idx = ir_graph_add_value(g, np->output[o], INFERD_DTYPE_UNDEFINED, -1, NULL, NULL);
      if (idx == IR_NONE) {
        rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
        goto out;
      }
      table_put(&names, g, idx);
    }
  }
  if ((rc = sort_nodes(gp, &names, g, order, st)) != INFERD_OK) goto out;

  g->nodes = calloc(gp->n_node ? gp->n_node : 1, sizeof *g->nodes);
  if (!g->nodes) {
    rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
    goto out;
  }
  for (size_t k = 0; k < gp->n_node; k++) {
    const Onnx__NodeProto *np = gp->node[order[k]];
    ir_node *n = &g->nodes[g->n_nodes++];
    n->name = np->name && *np->name ? np->name : np->n_output ? np->output[0] : "";
    n->op_type = np->op_type ? np->op_type : "";
    n->domain = np->domain && strcmp(np->domain, "ai.onnx") != 0 ? np->domain : "";
    n->n_inputs = (int)np->n_input;
    n->n_outputs = (int)np->n_output;
    n->inputs = core_arena_calloc(g->arena, np->n_input + 1, sizeof(int));
    n->outputs = core_arena_calloc(g->arena, np->n_output + 1, sizeof(int));
    if (!n->inputs || !n->outputs) {
      rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
      goto out;
    }
    for (size_t i = 0; i < np->n_input; i++) {
      if (!*np->input[i]) {
        n->inputs[i] = IR_NONE;
        continue;
      }
      int v = table_find(&names, g, np->input[i]);
      if (v == IR_NONE) {
        rc = core_fail(st, INFERD_INVALID_ARG, "node '%s' (%s): input '%s' is not defined", n->name, n->op_type, np->input[i]);
        goto out;
      }
      n->inputs[i] = v;
      g->values[v].consumers++;
    }
    for (size_t o = 0; o < np->n_output; o++) {
      n->outputs[o] = *np->output[o] ? table_find(&names, g, np->output[o]) : IR_NONE;
      if (n->outputs[o] != IR_NONE) g->values[n->outputs[o]].producer = g->n_nodes - 1;
    }
    if ((rc = convert_attrs(g, np, n, ext, st)) != INFERD_OK) goto out;
    if (strcmp(n->op_type, "Constant") == 0 && !*n->domain && (rc = fold_constant_node(g, n, st)) != INFERD_OK) goto out;
  }

  g->inputs = core_arena_calloc(g->arena, gp->n_input + 1, sizeof(int));
  g->outputs = core_arena_calloc(g->arena, gp->n_output + 1, sizeof(int));
  if (!g->inputs || !g->outputs) {
    rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < gp->n_input; i++) {
    int v = table_find(&names, g, gp->input[i]->name);
    if (g->values[v].is_input) g->inputs[g->n_inputs++] = v;
  }
  for (size_t i = 0; i < gp->n_output; i++) {
    if ((rc = add_declared(g, &names, gp->output[i], false, st)) != INFERD_OK) goto out;
    int v = gp->output[i]->name ? table_find(&names, g, gp->output[i]->name) : IR_NONE;
    if (v == IR_NONE) {
      rc = core_fail(st, INFERD_INVALID_ARG, "graph output '%s' is not produced by any node", gp->output[i]->name);
      goto out;
    }
    g->values[v].is_output = true;
    g->outputs[g->n_outputs++] = v;
  }
  if (g->n_outputs == 0) rc = core_fail(st, INFERD_INVALID_ARG, "graph has no outputs");
out:
  free(names.slots);
  free(order);
  return rc;
}

static inferd_code load(const void *data, size_t size, const onnx_load_params *p, ir_graph **out,
                        inferd_status *st) {
  *out = NULL;
  ir_graph *g = calloc(1, sizeof *g);
  if (!g || !(g->arena = core_arena_new(4 << 20))) {
    free(g);
    return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  }
  unpack_ctx u = {.arena = g->arena, .file = p->mapped_file ? data : NULL, .file_size = size};
  populate_ahead(&u);
  ProtobufCAllocator allocator = {.alloc = pb_alloc, .free = pb_free, .allocator_data = &u};
  unpack_call call = {.allocator = &allocator, .size = size, .data = data};
  if (!core_guard_run(unpack, &call)) { /* everything it allocated is in the graph's arena */
    ir_graph_free(g);
    return core_fail(st, INFERD_INVALID_ARG, "the model file shrank while it was read (truncated or rewritten in place)");
  }
  Onnx__ModelProto *m = call.model;
  if (!m) {
    ir_graph_free(g);
    return core_fail(st, INFERD_INVALID_ARG, "not a valid ONNX model: protobuf parse failed (truncated or corrupt file)");
  }
  onnx_external ext = {.dir = p->dir, .dir_fd = -1};
  inferd_code rc = build_graph(g, m, &ext, p->max_external_bytes, st);
  onnx_external_close(&ext);
  if (rc != INFERD_OK) {
    ir_graph_free(g);
    return rc;
  }
  *out = g;
  return INFERD_OK;
}

inferd_code onnx_load_memory(const void *data, size_t size, const onnx_load_params *params, ir_graph **out,
                             inferd_status *st) {
  const onnx_load_params none = {0};
  return load(data, size, params ? params : &none, out, st);
}

inferd_code onnx_load_file(const char *path, const onnx_load_params *params, ir_graph **out, inferd_status *st) {
  const void *data;
  size_t size;
  inferd_code rc = core_file_map(path, &data, &size, st);
  if (rc != INFERD_OK) return rc;
  char *dir = core_path_dir(path); /* external data is read beside the file */
  onnx_load_params p = {.mapped_file = true, .dir = dir, .max_external_bytes = params ? params->max_external_bytes : 0};
  rc = dir ? load(data, size, &p, out, st) : core_fail(st, INFERD_NO_MEMORY, "out of memory");
  free(dir);
  core_file_unmap(data, size);
  if (rc != INFERD_OK) core_status_prefix(st, "%s", path);
  return rc;
}

/* ---- attribute helpers ----------------------------------------------------------- */

const ir_attr *ir_node_attr(const ir_node *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

int64_t ir_attr_int(const ir_node *n, const char *name, int64_t def) {
  const ir_attr *a = ir_node_attr(n, name);
  return a && a->type == IR_ATTR_INT ? a->i : def;
}

float ir_attr_float(const ir_node *n, const char *name, float def) {
  const ir_attr *a = ir_node_attr(n, name);
  return a && a->type == IR_ATTR_FLOAT ? a->f : def;
}

const char *ir_attr_string(const ir_node *n, const char *name, const char *def) {
  const ir_attr *a = ir_node_attr(n, name);
  return a && a->type == IR_ATTR_STRING ? a->s : def;
}

int ir_attr_ints(const ir_node *n, const char *name, const int64_t **out) {
  const ir_attr *a = ir_node_attr(n, name);
  if (!a || a->type != IR_ATTR_INTS) {
    *out = NULL;
    return 0;
  }
  *out = a->ints;
  return a->n;
}

int64_t ir_value_count(const ir_value *v) { return v->rank < 0 ? -1 : core_shape_count(v->rank, v->dims); }
