/*
 * test_ops.c - every op and fusion the engine runs, checked against plain C
 * (in the spirit of ggml's test-backend-ops).
 *
 * DESIGN
 * A test describes a tiny ONNX graph with the builder below (inputs with a dynamic
 * batch axis 'N', float initializers from a seeded PRNG, nodes with attributes).
 * The builder keeps its own plain records of the graph; from them it
 *   - serializes a ModelProto (protobuf-c, opset 13) that inferd_model_load_memory
 *     reads, and
 *   - evaluates the same graph with the reference interpreter: naive loops in double
 *     precision, one obviously-correct function per ONNX op, written from the ONNX
 *     operator definitions and sharing nothing with the engine.
 * check_graph() then runs batch sizes 1, 3 and 1 again (plan reuse) with sessions of
 * 1 and 2 threads and compares every output with the reference: max|diff| <= 1e-4 *
 * max(1, max|ref|). Output arrays are pre-filled with NaN (an element the engine does
 * not write fails), and the caller's input arrays must come back unchanged.
 *
 * Sections: builder, reference ops and interpreter, harness, tests, the test table.
 *
 * Invariants: every test is deterministic (the PRNG is seeded from the test's name);
 * a builder owns all its records and is freed with b_free; assertions print the
 * value got and the value expected.
 *
 * Tests marked "Regression" guard bugs these tests found in the engine; each says
 * what went wrong.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inferd/inferd.h"
#include "onnx.pb-c.h"

/* ==== PRNG (splitmix64) ================================================================ */

static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s, float lo, float hi) {
  return lo + (hi - lo) * (float)((double)(rng_next(s) >> 40) / 16777216.0);
}

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* ==== builder ============================================================================ */

enum {
  B_NAME = 48,
  B_MAX_IO = 4,
  B_MAX_CONSTS = 64,
  B_MAX_NODES = 48,
  B_MAX_NODE_IN = 8,
  B_MAX_NODE_OUT = 4,
  B_MAX_ATTRS = 8,
  B_MAX_RANK = 8,
};

typedef enum { ATTR_END = 0, ATTR_INT, ATTR_FLOAT, ATTR_STRING, ATTR_INTS } attr_kind;

typedef struct attr {
  const char *name;
  attr_kind kind;
  int64_t i;
  float f;
  const char *s; /* must outlive the builder (string literals) */
  int n;
  int64_t ints[B_MAX_RANK];
} attr;

#define A_INT(nm, v) {.name = (nm), .kind = ATTR_INT, .i = (v)}
#define A_FLOAT(nm, v) {.name = (nm), .kind = ATTR_FLOAT, .f = (v)}
#define A_STR(nm, v) {.name = (nm), .kind = ATTR_STRING, .s = (v)}
#define A_INTS(nm, ...) \
  {.name = (nm), .kind = ATTR_INTS, .n = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), .ints = {__VA_ARGS__}}
/* Node inputs/outputs and attribute lists; "" is an omitted optional input. */
#define IN(...) ((const char *const[]){__VA_ARGS__, NULL})
#define OUT(...) ((const char *const[]){__VA_ARGS__, NULL})
#define ATTRS(...) ((const attr[]){__VA_ARGS__, {.kind = ATTR_END}})
/* A shape as two arguments: rank, dims. */
#define DIMS(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

typedef struct b_input_rec {
  char name[B_NAME];
  int rank;
  int64_t dims[B_MAX_RANK]; /* dims[0] is the batch axis, declared as 'N' when 0 */
} b_input_rec;

typedef struct b_const_rec {
  char name[B_NAME];
  int dtype; /* INFERD_DTYPE_FLOAT, INFERD_DTYPE_INT64 or INFERD_DTYPE_BOOL */
  int rank;
  int64_t dims[B_MAX_RANK];
  void *data;
  size_t nbytes;
  size_t raw_len; /* bytes written as raw_data; nbytes unless a test shortens it */
} b_const_rec;

typedef struct b_node_rec {
  char op[32];
  char name[B_NAME];
  int64_t opset; /* the model's, for ops whose meaning changed (Softmax, Clip) */
  int n_in, n_out, n_attrs;
  char in[B_MAX_NODE_IN][B_NAME];
  char out[B_MAX_NODE_OUT][B_NAME];
  attr attrs[B_MAX_ATTRS];
} b_node_rec;

typedef struct builder {
  char what[96]; /* the test's name, for messages */
  int64_t opset;  /* 13; a test that changes it does so before adding nodes */
  uint64_t rng;
  float in_lo, in_hi; /* range of the random inputs check_graph feeds */
  bool typed_data;    /* float and int64 constants as float_data / int64_data, not raw_data */
  bool reversed;      /* b_pack writes the nodes last first, so the loader must sort them */
  const char *external_dir; /* b_pack writes float constants there (NAME.bin), as ONNX
                               external data with "location" only, instead of raw_data */
  int n_inputs, n_outputs, n_consts, n_nodes;
  b_input_rec inputs[B_MAX_IO];
  char outputs[B_MAX_IO][B_NAME];
  b_const_rec consts[B_MAX_CONSTS];
  b_node_rec nodes[B_MAX_NODES];
} builder;

static void copy_name(char *dst, const char *src) {
  assert_true(strlen(src) < B_NAME);
  strcpy(dst, src);
}

/* A new, empty graph; free with b_free. */
static builder *b_new(const char *what) {
  builder *b = calloc(1, sizeof *b);
  assert_non_null(b);
  snprintf(b->what, sizeof b->what, "%s", what);
  b->opset = 13;
  b->rng = hash_name(what);
  b->in_lo = -1.0f;
  b->in_hi = 1.0f;
  return b;
}

static void b_free(builder *b) {
  if (!b) return;
  for (int i = 0; i < b->n_consts; i++) free(b->consts[i].data);
  free(b);
}

/* A float32 graph input; dims[0] is its batch axis: 0 declares it dynamic ('N'), a
 * number declares that fixed batch size. Another dim of -1 is declared dynamic ('D'). */
static void b_input(builder *b, const char *name, int rank, const int64_t *dims) {
  assert_true(b->n_inputs < B_MAX_IO && rank >= 1 && rank <= B_MAX_RANK && dims[0] >= 0);
  b_input_rec *r = &b->inputs[b->n_inputs++];
  copy_name(r->name, name);
  r->rank = rank;
  memcpy(r->dims, dims, (size_t)rank * sizeof *dims);
}

static void b_output(builder *b, const char *name) {
  assert_true(b->n_outputs < B_MAX_IO);
  copy_name(b->outputs[b->n_outputs++], name);
}

/* An initializer (data copied); returns its record. */
static b_const_rec *b_const(builder *b, const char *name, int dtype, int rank, const int64_t *dims, const void *data) {
  assert_true(b->n_consts < B_MAX_CONSTS && rank >= 0 && rank <= B_MAX_RANK);
  assert_true(dtype == INFERD_DTYPE_FLOAT || dtype == INFERD_DTYPE_INT64 || dtype == INFERD_DTYPE_BOOL);
  b_const_rec *c = &b->consts[b->n_consts++];
  copy_name(c->name, name);
  c->dtype = dtype;
  c->rank = rank;
  int64_t count = 1;
  for (int i = 0; i < rank; i++) count *= (c->dims[i] = dims[i]);
  c->nbytes = (size_t)count * (dtype == INFERD_DTYPE_FLOAT ? 4 : dtype == INFERD_DTYPE_BOOL ? 1 : 8);
  c->raw_len = c->nbytes;
  c->data = malloc(c->nbytes ? c->nbytes : 1);
  assert_non_null(c->data);
  if (c->nbytes) memcpy(c->data, data, c->nbytes);
  return c;
}

/* A float initializer with values uniform in [lo, hi). */
static void b_random(builder *b, const char *name, int rank, const int64_t *dims, float lo, float hi) {
  int64_t count = 1;
  for (int i = 0; i < rank; i++) count *= dims[i];
  float *v = malloc((size_t)(count ? count : 1) * sizeof *v);
  assert_non_null(v);
  for (int64_t i = 0; i < count; i++) v[i] = rng_uniform(&b->rng, lo, hi);
  b_const(b, name, INFERD_DTYPE_FLOAT, rank, dims, v);
  free(v);
}

/* A rank-0 float initializer. */
static void b_scalar(builder *b, const char *name, float v) { b_const(b, name, INFERD_DTYPE_FLOAT, 0, NULL, &v); }

/* A rank-1 int64 initializer (shapes). */
static void b_ints(builder *b, const char *name, int n, const int64_t *v) {
  int64_t d = n;
  b_const(b, name, INFERD_DTYPE_INT64, 1, &d, v);
}

/* Adds a node named "<op>_<index>" and returns that name (owned by the builder). */
static const char *b_node(builder *b, const char *op, const char *const *in, const char *const *out, const attr *attrs) {
  assert_true(b->n_nodes < B_MAX_NODES);
  b_node_rec *n = &b->nodes[b->n_nodes];
  snprintf(n->op, sizeof n->op, "%s", op);
  snprintf(n->name, sizeof n->name, "%s_%d", op, b->n_nodes);
  n->opset = b->opset;
  b->n_nodes++;
  for (; in && in[n->n_in]; n->n_in++) {
    assert_true(n->n_in < B_MAX_NODE_IN);
    copy_name(n->in[n->n_in], in[n->n_in]);
  }
  for (; out && out[n->n_out]; n->n_out++) {
    assert_true(n->n_out < B_MAX_NODE_OUT);
    copy_name(n->out[n->n_out], out[n->n_out]);
  }
  for (; attrs && attrs[n->n_attrs].kind != ATTR_END; n->n_attrs++) {
    assert_true(n->n_attrs < B_MAX_ATTRS);
    n->attrs[n->n_attrs] = attrs[n->n_attrs];
  }
  return n->name;
}

static b_const_rec *b_find_const(builder *b, const char *name) {
  for (int i = 0; i < b->n_consts; i++)
    if (strcmp(b->consts[i].name, name) == 0) return &b->consts[i];
  fail_msg("%s: no initializer '%s'", b->what, name);
  return NULL;
}

/* Protobuf messages for one serialization; they point into the builder's records. */
typedef struct pack_scratch {
  Onnx__NodeProto nodes[B_MAX_NODES];
  Onnx__NodeProto *node_ptrs[B_MAX_NODES];
  char *node_in[B_MAX_NODES][B_MAX_NODE_IN];
  char *node_out[B_MAX_NODES][B_MAX_NODE_OUT];
  Onnx__AttributeProto attrs[B_MAX_NODES][B_MAX_ATTRS];
  Onnx__AttributeProto *attr_ptrs[B_MAX_NODES][B_MAX_ATTRS];
  Onnx__TensorProto inits[B_MAX_CONSTS];
  Onnx__TensorProto *init_ptrs[B_MAX_CONSTS];
  Onnx__StringStringEntryProto locations[B_MAX_CONSTS];
  Onnx__StringStringEntryProto *location_ptrs[B_MAX_CONSTS];
  char location_names[B_MAX_CONSTS][B_NAME + 8];
  Onnx__ValueInfoProto io[2 * B_MAX_IO];
  Onnx__ValueInfoProto *in_ptrs[B_MAX_IO], *out_ptrs[B_MAX_IO];
  Onnx__TypeProto types[2 * B_MAX_IO];
  Onnx__TypeProto__Tensor tensor_types[2 * B_MAX_IO];
  Onnx__TensorShapeProto shapes[B_MAX_IO];
  Onnx__TensorShapeProto__Dimension dims[B_MAX_IO][B_MAX_RANK];
  Onnx__TensorShapeProto__Dimension *dim_ptrs[B_MAX_IO][B_MAX_RANK];
} pack_scratch;

static void pack_attr(const attr *a, Onnx__AttributeProto *p) {
  *p = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
  p->name = (char *)a->name;
  p->has_type = 1;
  switch (a->kind) {
  case ATTR_INT:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    p->has_i = 1;
    p->i = a->i;
    break;
  case ATTR_FLOAT:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    p->has_f = 1;
    p->f = a->f;
    break;
  case ATTR_STRING:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    p->has_s = 1;
    p->s.len = strlen(a->s);
    p->s.data = (uint8_t *)a->s;
    break;
  case ATTR_INTS:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    p->n_ints = (size_t)a->n;
    p->ints = (int64_t *)a->ints;
    break;
  default: fail_msg("attribute '%s': bad kind %d", a->name, (int)a->kind);
  }
}

static void pack_value_info(pack_scratch *s, int slot, const char *name, const b_input_rec *shape,
                            Onnx__ValueInfoProto **out) {
  Onnx__ValueInfoProto *vi = &s->io[slot];
  Onnx__TypeProto *tp = &s->types[slot];
  Onnx__TypeProto__Tensor *tt = &s->tensor_types[slot];
  *vi = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
  *tp = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  *tt = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
  vi->name = (char *)name;
  vi->type = tp;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  tt->has_elem_type = 1;
  tt->elem_type = INFERD_DTYPE_FLOAT;
  if (shape) {
    Onnx__TensorShapeProto *sp = &s->shapes[slot];
    *sp = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
    for (int i = 0; i < shape->rank; i++) {
      Onnx__TensorShapeProto__Dimension *d = &s->dims[slot][i];
      *d = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
      if ((i == 0 && shape->dims[0] == 0) || shape->dims[i] < 0) {
        d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        d->dim_param = i == 0 ? "N" : "D";
      } else {
        d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        d->dim_value = shape->dims[i];
      }
      s->dim_ptrs[slot][i] = d;
    }
    sp->n_dim = (size_t)shape->rank;
    sp->dim = s->dim_ptrs[slot];
    tt->shape = sp;
  }
  *out = vi;
}

/* Serializes the graph; returns a malloc'd ModelProto of *size bytes. */
static void *b_pack(builder *b, size_t *size) {
  pack_scratch *s = calloc(1, sizeof *s);
  assert_non_null(s);
  Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
  Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
  Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  Onnx__OperatorSetIdProto *opsets[1] = {&opset};
  opset.domain = "";
  opset.has_version = 1;
  opset.version = b->opset;
  model.has_ir_version = 1;
  model.ir_version = 8;
  model.producer_name = "test_ops";
  model.n_opset_import = 1;
  model.opset_import = opsets;
  model.graph = &graph;
  graph.name = b->what;

  for (int i = 0; i < b->n_nodes; i++) {
    const b_node_rec *r = &b->nodes[i];
    Onnx__NodeProto *n = &s->nodes[i];
    *n = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
    n->name = (char *)r->name;
    n->op_type = (char *)r->op;
    for (int k = 0; k < r->n_in; k++) s->node_in[i][k] = (char *)r->in[k];
    for (int k = 0; k < r->n_out; k++) s->node_out[i][k] = (char *)r->out[k];
    n->n_input = (size_t)r->n_in;
    n->input = s->node_in[i];
    n->n_output = (size_t)r->n_out;
    n->output = s->node_out[i];
    for (int k = 0; k < r->n_attrs; k++) {
      pack_attr(&r->attrs[k], &s->attrs[i][k]);
      s->attr_ptrs[i][k] = &s->attrs[i][k];
    }
    n->n_attribute = (size_t)r->n_attrs;
    n->attribute = s->attr_ptrs[i];
    s->node_ptrs[b->reversed ? b->n_nodes - 1 - i : i] = n;
  }
  for (int i = 0; i < b->n_consts; i++) {
    b_const_rec *c = &b->consts[i];
    Onnx__TensorProto *t = &s->inits[i];
    *t = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
    t->name = c->name;
    t->n_dims = (size_t)c->rank;
    t->dims = c->dims;
    t->has_data_type = 1;
    t->data_type = c->dtype;
    if (b->external_dir && c->dtype == INFERD_DTYPE_FLOAT) {
      char path[512];
      snprintf(s->location_names[i], sizeof s->location_names[i], "%s.bin", c->name);
      snprintf(path, sizeof path, "%s/%s", b->external_dir, s->location_names[i]);
      FILE *f = fopen(path, "wb");
      assert_non_null(f);
      assert_int_equal(fwrite(c->data, 1, c->raw_len, f), c->raw_len);
      assert_int_equal(fclose(f), 0);
      s->locations[i] = (Onnx__StringStringEntryProto)ONNX__STRING_STRING_ENTRY_PROTO__INIT;
      s->locations[i].key = "location";
      s->locations[i].value = s->location_names[i];
      s->location_ptrs[i] = &s->locations[i];
      t->has_data_location = 1;
      t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
      t->n_external_data = 1;
      t->external_data = &s->location_ptrs[i];
    } else if (b->typed_data && c->dtype == INFERD_DTYPE_FLOAT && c->raw_len == c->nbytes) {
      t->n_float_data = c->nbytes / sizeof(float);
      t->float_data = c->data;
    } else if (b->typed_data && c->dtype == INFERD_DTYPE_INT64 && c->raw_len == c->nbytes) {
      t->n_int64_data = c->nbytes / sizeof(int64_t);
      t->int64_data = c->data;
    } else {
      t->has_raw_data = 1;
      t->raw_data.len = c->raw_len;
      t->raw_data.data = c->data;
    }
    s->init_ptrs[i] = t;
  }
  for (int i = 0; i < b->n_inputs; i++) pack_value_info(s, i, b->inputs[i].name, &b->inputs[i], &s->in_ptrs[i]);
  for (int i = 0; i < b->n_outputs; i++) pack_value_info(s, B_MAX_IO + i, b->outputs[i], NULL, &s->out_ptrs[i]);
  graph.n_node = (size_t)b->n_nodes;
  graph.node = s->node_ptrs;
  graph.n_initializer = (size_t)b->n_consts;
  graph.initializer = s->init_ptrs;
  graph.n_input = (size_t)b->n_inputs;
  graph.input = s->in_ptrs;
  graph.n_output = (size_t)b->n_outputs;
  graph.output = s->out_ptrs;

  *size = onnx__model_proto__get_packed_size(&model);
  void *buf = malloc(*size ? *size : 1);
  assert_non_null(buf);
  size_t written = onnx__model_proto__pack(&model, buf);
  assert_int_equal(written, *size);
  free(s);
  return buf;
}

/* ==== reference: tensors ==================================================================== */

typedef struct tensor {
  int rank;
  int64_t dims[B_MAX_RANK];
  double *v; /* dense row-major */
} tensor;

static int64_t shape_count(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

static int64_t t_count(const tensor *t) { return shape_count(t->rank, t->dims); }

static tensor t_make(int rank, const int64_t *dims) {
  tensor t = {.rank = rank};
  assert_true(rank >= 0 && rank <= B_MAX_RANK);
  if (rank) memcpy(t.dims, dims, (size_t)rank * sizeof *dims);
  int64_t n = t_count(&t);
  t.v = calloc((size_t)(n ? n : 1), sizeof *t.v);
  assert_non_null(t.v);
  return t;
}

static void t_free(tensor *t) {
  free(t->v);
  t->v = NULL;
}

static char *shape_str(int rank, const int64_t *dims, char *buf, size_t size) {
  size_t off = (size_t)snprintf(buf, size, "[");
  for (int i = 0; i < rank && off < size; i++)
    off += (size_t)snprintf(buf + off, size - off, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (off < size) snprintf(buf + off, size - off, "]");
  return buf;
}

/* ==== reference: ops =========================================================================== */
/* Each takes the node and its inputs (NULL for an omitted optional one) and makes the
 * node's first output. ONNX semantics, opset 13; naive loops, double accumulation. */

typedef void (*ref_op_fn)(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out);

static const attr *node_attr(const b_node_rec *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}
static int64_t node_int(const b_node_rec *n, const char *name, int64_t def) {
  const attr *a = node_attr(n, name);
  return a && a->kind == ATTR_INT ? a->i : def;
}
static double node_float(const b_node_rec *n, const char *name, double def) {
  const attr *a = node_attr(n, name);
  return a && a->kind == ATTR_FLOAT ? a->f : def;
}
static const char *node_str(const b_node_rec *n, const char *name, const char *def) {
  const attr *a = node_attr(n, name);
  return a && a->kind == ATTR_STRING ? a->s : def;
}
/* Copies an ints attribute into out (up to B_MAX_RANK); returns its length, 0 if absent. */
static int node_ints(const b_node_rec *n, const char *name, int64_t *out) {
  const attr *a = node_attr(n, name);
  if (!a || a->kind != ATTR_INTS) return 0;
  memcpy(out, a->ints, (size_t)a->n * sizeof *out);
  return a->n;
}

static void ref_unary(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0];
  const char *op = n->op;
  *out = t_make(x->rank, x->dims);
  double lo = -INFINITY, hi = INFINITY;
  if (strcmp(op, "Clip") == 0 && n->opset < 11) {
    lo = node_float(n, "min", lo);
    hi = node_float(n, "max", hi);
  } else if (strcmp(op, "Clip") == 0) {
    if (n_in > 1 && in[1]) lo = in[1]->v[0];
    if (n_in > 2 && in[2]) hi = in[2]->v[0];
  }
  double alpha = node_float(n, "alpha", strcmp(op, "LeakyRelu") == 0 ? 0.01 : strcmp(op, "Elu") == 0 ? 1.0 : 0.2);
  double beta = node_float(n, "beta", 0.5);
  for (int64_t i = 0; i < t_count(x); i++) {
    double v = x->v[i], r = NAN;
    if (strcmp(op, "Relu") == 0) r = v > 0 ? v : 0;
    else if (strcmp(op, "LeakyRelu") == 0) r = v >= 0 ? v : alpha * v;
    else if (strcmp(op, "Sigmoid") == 0) r = 1.0 / (1.0 + exp(-v));
    else if (strcmp(op, "Tanh") == 0) r = tanh(v);
    else if (strcmp(op, "HardSigmoid") == 0) r = fmax(0.0, fmin(1.0, alpha * v + beta));
    else if (strcmp(op, "HardSwish") == 0) r = v * fmax(0.0, fmin(1.0, v / 6.0 + 0.5));
    else if (strcmp(op, "Clip") == 0) r = fmin(fmax(v, lo), hi);
    else if (strcmp(op, "Exp") == 0) r = exp(v);
    else if (strcmp(op, "Gelu") == 0 && strcmp(node_str(n, "approximate", "none"), "tanh") == 0)
      r = 0.5 * v * (1.0 + tanh(sqrt(2.0 / acos(-1.0)) * (v + 0.044715 * v * v * v)));
    else if (strcmp(op, "Gelu") == 0) r = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    else if (strcmp(op, "Sqrt") == 0) r = sqrt(v);
    else if (strcmp(op, "Abs") == 0) r = fabs(v);
    else if (strcmp(op, "Neg") == 0) r = -v;
    else if (strcmp(op, "Log") == 0) r = log(v);
    else if (strcmp(op, "Elu") == 0) r = v >= 0 ? v : alpha * (exp(v) - 1.0);
    else if (strcmp(op, "Reciprocal") == 0) r = 1.0 / v;
    else if (strcmp(op, "Identity") == 0 || strcmp(op, "Dropout") == 0 || strcmp(op, "Cast") == 0) r = v;
    else fail_msg("reference: no unary op %s", op);
    out->v[i] = r;
  }
}

/* Offset in t (right-aligned to `rank`, size-1 dims broadcast) of multi-index idx. */
static int64_t bcast_offset(const tensor *t, int rank, const int64_t *idx) {
  int64_t off = 0;
  for (int i = 0; i < t->rank; i++) off = off * t->dims[i] + (t->dims[i] == 1 ? 0 : idx[i + rank - t->rank]);
  return off;
}

static void next_index(int rank, const int64_t *dims, int64_t *idx) {
  for (int i = rank - 1; i >= 0 && ++idx[i] == dims[i]; i--) idx[i] = 0;
}

static void ref_binary(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *a = in[0], *b = in[1];
  int rank = a->rank > b->rank ? a->rank : b->rank;
  int64_t dims[B_MAX_RANK];
  for (int i = 0; i < rank; i++) {
    int ia = i - (rank - a->rank), ib = i - (rank - b->rank);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) fail_msg("reference: %s: shapes do not broadcast", n->name);
    dims[i] = da == 1 ? db : da;
  }
  *out = t_make(rank, dims);
  int64_t idx[B_MAX_RANK] = {0};
  for (int64_t e = 0; e < t_count(out); e++) {
    double x = a->v[bcast_offset(a, rank, idx)], y = b->v[bcast_offset(b, rank, idx)];
    if (strcmp(n->op, "Add") == 0) out->v[e] = x + y;
    else if (strcmp(n->op, "Sub") == 0) out->v[e] = x - y;
    else if (strcmp(n->op, "Mul") == 0) out->v[e] = x * y;
    else if (strcmp(n->op, "Div") == 0) out->v[e] = x / y;
    else if (strcmp(n->op, "Pow") == 0) out->v[e] = pow(x, y);
    else if (strcmp(n->op, "Greater") == 0) out->v[e] = x > y;
    else if (strcmp(n->op, "Less") == 0) out->v[e] = x < y;
    else if (strcmp(n->op, "GreaterOrEqual") == 0) out->v[e] = x >= y;
    else if (strcmp(n->op, "LessOrEqual") == 0) out->v[e] = x <= y;
    else if (strcmp(n->op, "Max") == 0) out->v[e] = fmax(x, y);
    else if (strcmp(n->op, "Min") == 0) out->v[e] = fmin(x, y);
    else fail_msg("reference: no binary op %s", n->op);
    next_index(rank, dims, idx);
  }
}

/* Conv, 2-D: x [N,C,H,W], w [M,C/group,KH,KW], optional b [M]; 1-D convolutions
 * ([N,C,L]) run as 2-D ones of height 1. */
static void ref_conv(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0], *w = in[1], *b = n_in > 2 ? in[2] : NULL;
  assert_true(x->rank == 3 || x->rank == 4);
  assert_int_equal(w->rank, x->rank);
  bool one_d = x->rank == 3;
  int64_t batch = x->dims[0], c_in = x->dims[1], m_out = w->dims[0], c_per_group = w->dims[1];
  int64_t group = node_int(n, "group", 1);
  assert_int_equal(c_per_group * group, c_in);
  int64_t a_strides[2] = {1, 1}, a_dil[2] = {1, 1}, a_pads[4] = {0, 0, 0, 0};
  node_ints(n, "strides", a_strides);
  node_ints(n, "dilations", a_dil);
  node_ints(n, "pads", a_pads);
  int64_t strides[2] = {one_d ? 1 : a_strides[0], one_d ? a_strides[0] : a_strides[1]};
  int64_t dil[2] = {one_d ? 1 : a_dil[0], one_d ? a_dil[0] : a_dil[1]};
  int64_t pads[4] = {one_d ? 0 : a_pads[0], one_d ? a_pads[0] : a_pads[1], one_d ? 0 : a_pads[2],
                     one_d ? a_pads[1] : a_pads[3]};
  const char *auto_pad = node_str(n, "auto_pad", "NOTSET");
  int64_t size_in[2] = {one_d ? 1 : x->dims[2], x->dims[x->rank - 1]};
  int64_t kernel[2] = {one_d ? 1 : w->dims[2], w->dims[w->rank - 1]}, begin[2], size_out[2];
  for (int i = 0; i < 2; i++) {
    int64_t span = (kernel[i] - 1) * dil[i] + 1;
    if (strncmp(auto_pad, "SAME_", 5) == 0) {
      size_out[i] = (size_in[i] + strides[i] - 1) / strides[i];
      int64_t total = (size_out[i] - 1) * strides[i] + span - size_in[i];
      if (total < 0) total = 0;
      begin[i] = strcmp(auto_pad, "SAME_UPPER") == 0 ? total / 2 : total - total / 2;
    } else if (strcmp(auto_pad, "VALID") == 0) {
      begin[i] = 0;
      size_out[i] = (size_in[i] - span) / strides[i] + 1;
    } else {
      begin[i] = pads[i];
      size_out[i] = (size_in[i] + pads[i] + pads[i + 2] - span) / strides[i] + 1;
    }
  }
  if (one_d) *out = t_make(3, (int64_t[]){batch, m_out, size_out[1]});
  else *out = t_make(4, (int64_t[]){batch, m_out, size_out[0], size_out[1]});
  int64_t m_per_group = m_out / group;
  double *y = out->v;
  for (int64_t nb = 0; nb < batch; nb++)
    for (int64_t m = 0; m < m_out; m++) {
      int64_t g = m / m_per_group;
      for (int64_t oh = 0; oh < size_out[0]; oh++)
        for (int64_t ow = 0; ow < size_out[1]; ow++) {
          double acc = b ? b->v[m] : 0.0;
          for (int64_t c = 0; c < c_per_group; c++)
            for (int64_t kh = 0; kh < kernel[0]; kh++) {
              int64_t ih = oh * strides[0] - begin[0] + kh * dil[0];
              if (ih < 0 || ih >= size_in[0]) continue;
              for (int64_t kw = 0; kw < kernel[1]; kw++) {
                int64_t iw = ow * strides[1] - begin[1] + kw * dil[1];
                if (iw < 0 || iw >= size_in[1]) continue;
                double xv = x->v[((nb * c_in + g * c_per_group + c) * size_in[0] + ih) * size_in[1] + iw];
                double wv = w->v[((m * c_per_group + c) * kernel[0] + kh) * kernel[1] + kw];
                acc += xv * wv;
              }
            }
          *y++ = acc;
        }
    }
}

static void ref_batchnorm(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0], *scale = in[1], *shift = in[2], *mean = in[3], *var = in[4];
  double eps = node_float(n, "epsilon", 1e-5);
  *out = t_make(x->rank, x->dims);
  int64_t channels = x->dims[1], inner = shape_count(x->rank - 2, x->dims + 2);
  for (int64_t e = 0; e < t_count(x); e++) {
    int64_t c = (e / inner) % channels;
    out->v[e] = scale->v[c] * (x->v[e] - mean->v[c]) / sqrt(var->v[c] + eps) + shift->v[c];
  }
}

/* MaxPool and AveragePool, 2-D. ceil_mode drops a last window that would start in
 * the right padding (as PyTorch and the ONNX reference do). */
static void ref_pool(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0];
  assert_int_equal(x->rank, 4);
  bool is_max = strcmp(n->op, "MaxPool") == 0;
  int64_t kernel[2], strides[2] = {1, 1}, pads[4] = {0, 0, 0, 0};
  assert_int_equal(node_ints(n, "kernel_shape", kernel), 2);
  node_ints(n, "strides", strides);
  node_ints(n, "pads", pads);
  const char *auto_pad = node_str(n, "auto_pad", "NOTSET");
  for (int i = 0; strncmp(auto_pad, "SAME_", 5) == 0 && i < 2; i++) { /* ONNX: output ceil(in / stride) */
    int64_t n_out = (x->dims[2 + i] + strides[i] - 1) / strides[i];
    int64_t total = (n_out - 1) * strides[i] + kernel[i] - x->dims[2 + i];
    if (total < 0) total = 0;
    pads[i] = strcmp(auto_pad, "SAME_UPPER") == 0 ? total / 2 : total - total / 2;
    pads[i + 2] = total - pads[i];
  }
  bool ceil_mode = node_int(n, "ceil_mode", 0) != 0, include_pad = node_int(n, "count_include_pad", 0) != 0;
  int64_t size_in[2] = {x->dims[2], x->dims[3]}, size_out[2];
  for (int i = 0; i < 2; i++) {
    int64_t extent = size_in[i] + pads[i] + pads[i + 2] - kernel[i];
    size_out[i] = (ceil_mode ? (extent + strides[i] - 1) / strides[i] : extent / strides[i]) + 1;
    if (ceil_mode && (size_out[i] - 1) * strides[i] >= size_in[i] + pads[i]) size_out[i]--;
  }
  *out = t_make(4, (int64_t[]){x->dims[0], x->dims[1], size_out[0], size_out[1]});
  double *y = out->v;
  for (int64_t plane = 0; plane < x->dims[0] * x->dims[1]; plane++) {
    const double *xp = x->v + plane * size_in[0] * size_in[1];
    for (int64_t oh = 0; oh < size_out[0]; oh++)
      for (int64_t ow = 0; ow < size_out[1]; ow++) {
        double sum = 0, mx = -INFINITY;
        int64_t valid = 0, padded = 0;
        for (int64_t kh = 0; kh < kernel[0]; kh++)
          for (int64_t kw = 0; kw < kernel[1]; kw++) {
            int64_t ih = oh * strides[0] - pads[0] + kh, iw = ow * strides[1] - pads[1] + kw;
            if (ih < size_in[0] + pads[2] && iw < size_in[1] + pads[3]) padded++; /* inside the padded input */
            if (ih < 0 || iw < 0 || ih >= size_in[0] || iw >= size_in[1]) continue;
            double v = xp[ih * size_in[1] + iw];
            sum += v;
            mx = fmax(mx, v);
            valid++;
          }
        *y++ = is_max ? mx : sum / (double)(include_pad ? padded : valid);
      }
  }
}

static void ref_global_average_pool(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0];
  int64_t dims[B_MAX_RANK];
  for (int i = 0; i < x->rank; i++) dims[i] = i < 2 ? x->dims[i] : 1;
  *out = t_make(x->rank, dims);
  int64_t inner = shape_count(x->rank - 2, x->dims + 2);
  for (int64_t p = 0; p < x->dims[0] * x->dims[1]; p++) {
    double sum = 0;
    for (int64_t i = 0; i < inner; i++) sum += x->v[p * inner + i];
    out->v[p] = sum / (double)inner;
  }
}

/* Gemm: Y = alpha * A' B' + beta * C, C broadcast to [M, N]. */
static void ref_gemm(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *a = in[0], *b = in[1], *c = n_in > 2 ? in[2] : NULL;
  assert_int_equal(a->rank, 2);
  assert_int_equal(b->rank, 2);
  bool ta = node_int(n, "transA", 0) != 0, tb = node_int(n, "transB", 0) != 0;
  double alpha = node_float(n, "alpha", 1.0), beta = node_float(n, "beta", 1.0);
  int64_t m = ta ? a->dims[1] : a->dims[0], k = ta ? a->dims[0] : a->dims[1];
  int64_t nn = tb ? b->dims[0] : b->dims[1];
  assert_int_equal(tb ? b->dims[1] : b->dims[0], k);
  *out = t_make(2, (int64_t[]){m, nn});
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < nn; j++) {
      double acc = 0;
      for (int64_t p = 0; p < k; p++)
        acc += a->v[ta ? p * m + i : i * k + p] * b->v[tb ? j * k + p : p * nn + j];
      acc *= alpha;
      if (c) acc += beta * c->v[bcast_offset(c, 2, (int64_t[]){i, j})];
      out->v[i * nn + j] = acc;
    }
}

/* MatMul with numpy batch broadcasting; both operands of rank >= 2. */
static void ref_matmul(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *a = in[0], *b = in[1];
  assert_true(a->rank >= 2 && b->rank >= 2);
  int rank = a->rank > b->rank ? a->rank : b->rank, nbatch = rank - 2;
  int64_t m = a->dims[a->rank - 2], k = a->dims[a->rank - 1], nn = b->dims[b->rank - 1];
  assert_int_equal(b->dims[b->rank - 2], k);
  /* the batch dims of each operand, as tensors of their own, for bcast_offset */
  tensor ab = {.rank = a->rank - 2}, bb = {.rank = b->rank - 2};
  memcpy(ab.dims, a->dims, (size_t)ab.rank * sizeof *ab.dims);
  memcpy(bb.dims, b->dims, (size_t)bb.rank * sizeof *bb.dims);
  int64_t dims[B_MAX_RANK];
  for (int i = 0; i < nbatch; i++) {
    int ia = i - (nbatch - ab.rank), ib = i - (nbatch - bb.rank);
    int64_t da = ia >= 0 ? ab.dims[ia] : 1, db = ib >= 0 ? bb.dims[ib] : 1;
    dims[i] = da == 1 ? db : da;
  }
  dims[rank - 2] = m;
  dims[rank - 1] = nn;
  *out = t_make(rank, dims);
  int64_t idx[B_MAX_RANK] = {0}, batches = shape_count(nbatch, dims);
  for (int64_t bi = 0; bi < batches; bi++) {
    const double *ap = a->v + bcast_offset(&ab, nbatch, idx) * m * k;
    const double *bp = b->v + bcast_offset(&bb, nbatch, idx) * k * nn;
    double *yp = out->v + bi * m * nn;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < nn; j++) {
        double acc = 0;
        for (int64_t p = 0; p < k; p++) acc += ap[i * k + p] * bp[p * nn + j];
        yp[i * nn + j] = acc;
      }
    next_index(nbatch, dims, idx);
  }
}

static void copy_reshaped(const tensor *x, int rank, const int64_t *dims, tensor *out) {
  assert_int_equal(shape_count(rank, dims), t_count(x));
  *out = t_make(rank, dims);
  memcpy(out->v, x->v, (size_t)t_count(x) * sizeof *x->v);
}

static void ref_flatten(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0];
  int64_t axis = node_int(n, "axis", 1);
  if (axis < 0) axis += x->rank;
  int64_t dims[2] = {shape_count((int)axis, x->dims), shape_count(x->rank - (int)axis, x->dims + axis)};
  copy_reshaped(x, 2, dims, out);
}

static void ref_reshape(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0], *shape = in[1];
  int rank = (int)t_count(shape), infer = -1;
  int64_t dims[B_MAX_RANK], known = 1;
  for (int i = 0; i < rank; i++) {
    dims[i] = (int64_t)shape->v[i];
    if (dims[i] == 0) dims[i] = x->dims[i]; /* allowzero = 0 */
    if (dims[i] == -1) infer = i;
    else known *= dims[i];
  }
  if (infer >= 0) dims[infer] = t_count(x) / known;
  copy_reshaped(x, rank, dims, out);
}

static void ref_transpose(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0];
  int64_t perm[B_MAX_RANK], dims[B_MAX_RANK], strides[B_MAX_RANK];
  if (node_ints(n, "perm", perm) == 0)
    for (int i = 0; i < x->rank; i++) perm[i] = x->rank - 1 - i;
  int64_t s = 1;
  for (int i = x->rank - 1; i >= 0; i--) strides[i] = s, s *= x->dims[i];
  for (int i = 0; i < x->rank; i++) dims[i] = x->dims[perm[i]];
  *out = t_make(x->rank, dims);
  int64_t idx[B_MAX_RANK] = {0};
  for (int64_t e = 0; e < t_count(out); e++) {
    int64_t off = 0;
    for (int i = 0; i < x->rank; i++) off += idx[i] * strides[perm[i]];
    out->v[e] = x->v[off];
    next_index(x->rank, dims, idx);
  }
}

static void ref_concat(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  int rank = in[0]->rank;
  int64_t axis = node_int(n, "axis", 0);
  if (axis < 0) axis += rank;
  int64_t dims[B_MAX_RANK];
  memcpy(dims, in[0]->dims, sizeof dims);
  dims[axis] = 0;
  for (int k = 0; k < n_in; k++) dims[axis] += in[k]->dims[axis];
  *out = t_make(rank, dims);
  int64_t outer = shape_count((int)axis, dims), inner_out = t_count(out) / outer, at = 0;
  for (int k = 0; k < n_in; k++) {
    int64_t inner = shape_count(rank - (int)axis, in[k]->dims + axis);
    for (int64_t o = 0; o < outer; o++)
      memcpy(out->v + o * inner_out + at, in[k]->v + o * inner, (size_t)inner * sizeof *out->v);
    at += inner;
  }
}

/* Softmax over one axis (opset 13); before opset 13, over the input flattened to 2-D
 * around `axis` (default 1). LogSoftmax: its log, as x - max - log(sum). */
static void ref_softmax(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0];
  bool old = n->opset < 13, log_of = !strcmp(n->op, "LogSoftmax");
  int64_t axis = node_int(n, "axis", old ? 1 : -1);
  if (axis < 0) axis += x->rank;
  *out = t_make(x->rank, x->dims);
  int64_t len = old ? shape_count(x->rank - (int)axis, x->dims + axis) : x->dims[axis];
  int64_t inner = old ? 1 : shape_count(x->rank - (int)axis - 1, x->dims + axis + 1);
  int64_t outer = shape_count((int)axis, x->dims);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const double *xp = x->v + o * len * inner + i;
      double *yp = out->v + o * len * inner + i, mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < len; j++) mx = fmax(mx, xp[j * inner]);
      for (int64_t j = 0; j < len; j++) sum += (yp[j * inner] = exp(xp[j * inner] - mx));
      for (int64_t j = 0; j < len; j++) yp[j * inner] = log_of ? xp[j * inner] - mx - log(sum) : yp[j * inner] / sum;
    }
}

static void ref_global_max_pool(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0];
  int64_t dims[B_MAX_RANK];
  for (int i = 0; i < x->rank; i++) dims[i] = i < 2 ? x->dims[i] : 1;
  *out = t_make(x->rank, dims);
  int64_t inner = shape_count(x->rank - 2, x->dims + 2);
  for (int64_t p = 0; p < x->dims[0] * x->dims[1]; p++) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < inner; i++) mx = fmax(mx, x->v[p * inner + i]);
    out->v[p] = mx;
  }
}

/* ReduceMean (opset 13: axes is an attribute; none means all). */
static void ref_reduce_mean(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0];
  int64_t axes[B_MAX_RANK];
  int na;
  if (n->opset >= 18) { /* axes is an optional input */
    na = n_in > 1 && in[1] ? (int)t_count(in[1]) : 0;
    for (int i = 0; i < na; i++) axes[i] = (int64_t)in[1]->v[i];
  } else {
    na = node_ints(n, "axes", axes);
  }
  bool reduce[B_MAX_RANK] = {false}, keep = node_int(n, "keepdims", 1) != 0;
  bool all = na == 0 && !node_int(n, "noop_with_empty_axes", 0);
  for (int i = 0; i < na; i++) reduce[axes[i] < 0 ? axes[i] + x->rank : axes[i]] = true;
  int64_t kept[B_MAX_RANK], dims[B_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < x->rank; i++) {
    if (all) reduce[i] = true;
    kept[i] = reduce[i] ? 1 : x->dims[i];
    if (keep || !reduce[i]) dims[rank++] = kept[i];
  }
  *out = t_make(rank, dims);
  tensor sums = t_make(x->rank, kept); /* same elements as out, with kept dims */
  int64_t idx[B_MAX_RANK] = {0}, per = t_count(x) / t_count(&sums);
  for (int64_t e = 0; e < t_count(x); e++) {
    sums.v[bcast_offset(&sums, x->rank, idx)] += x->v[e];
    next_index(x->rank, x->dims, idx);
  }
  for (int64_t e = 0; e < t_count(out); e++) out->v[e] = sums.v[e] / (double)per;
  t_free(&sums);
}

/* Squeeze and Unsqueeze (opset 13: axes as an input). */
static void ref_squeeze(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0], *axes = n_in > 1 ? in[1] : NULL;
  bool unsqueeze = strcmp(n->op, "Unsqueeze") == 0, mark[B_MAX_RANK] = {false};
  int na = axes ? (int)t_count(axes) : 0, out_rank = unsqueeze ? x->rank + na : x->rank, rank = 0;
  for (int i = 0; i < na; i++) {
    int64_t a = (int64_t)axes->v[i];
    mark[a < 0 ? a + out_rank : a] = true;
  }
  int64_t dims[B_MAX_RANK];
  if (unsqueeze) {
    for (int i = 0, j = 0; i < out_rank; i++) dims[rank++] = mark[i] ? 1 : x->dims[j++];
  } else {
    for (int i = 0; i < x->rank; i++)
      if (!(na ? mark[i] : x->dims[i] == 1)) dims[rank++] = x->dims[i];
  }
  copy_reshaped(x, rank, dims, out);
}

/* Shape: the input's dims as a 1-D tensor (of int64 in ONNX; exact in double). */
static void ref_shape(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  int64_t rank = in[0]->rank;
  *out = t_make(1, &rank);
  for (int i = 0; i < in[0]->rank; i++) out->v[i] = (double)in[0]->dims[i];
}

static void ref_gather(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0], *indices = in[1];
  int64_t axis = node_int(n, "axis", 0);
  if (axis < 0) axis += x->rank;
  int64_t dims[B_MAX_RANK];
  int rank = 0;
  for (int i = 0; i < axis; i++) dims[rank++] = x->dims[i];
  for (int i = 0; i < indices->rank; i++) dims[rank++] = indices->dims[i];
  for (int i = (int)axis + 1; i < x->rank; i++) dims[rank++] = x->dims[i];
  *out = t_make(rank, dims);
  int64_t outer = shape_count((int)axis, x->dims), inner = shape_count(x->rank - (int)axis - 1, x->dims + axis + 1);
  int64_t count = t_count(indices), size = x->dims[axis];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < count; j++) {
      int64_t k = (int64_t)indices->v[j];
      if (k < 0) k += size;
      memcpy(out->v + (o * count + j) * inner, x->v + (o * size + k) * inner, (size_t)inner * sizeof *out->v);
    }
}

/* Pad, modes "constant", "edge" and "reflect": pads (and from opset 18 axes) as inputs.
 * Each output element reads the input at its index less the leading pad, which outside
 * the input is the constant, the nearest edge, or the index mirrored about the edge. */
static void ref_pad(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0], *pads = in[1], *axes = n_in > 3 ? in[3] : NULL;
  double value = n_in > 2 && in[2] ? in[2]->v[0] : 0.0;
  const char *mode = node_str(n, "mode", "constant");
  int na = axes ? (int)t_count(axes) : x->rank;
  int64_t begin[B_MAX_RANK] = {0}, dims[B_MAX_RANK];
  for (int i = 0; i < x->rank; i++) dims[i] = x->dims[i];
  for (int j = 0; j < na; j++) {
    int64_t a = axes ? (int64_t)axes->v[j] : j;
    if (a < 0) a += x->rank;
    begin[a] = (int64_t)pads->v[j];
    dims[a] += (int64_t)pads->v[j] + (int64_t)pads->v[j + na];
  }
  *out = t_make(x->rank, dims);
  int64_t idx[B_MAX_RANK] = {0};
  for (int64_t e = 0; e < t_count(out); e++) {
    int64_t off = 0;
    bool outside = false;
    for (int i = 0; i < x->rank; i++) {
      int64_t k = idx[i] - begin[i], d = x->dims[i];
      if (strcmp(mode, "edge") == 0) k = k < 0 ? 0 : k >= d ? d - 1 : k;
      else if (strcmp(mode, "reflect") == 0) k = k < 0 ? -k : k >= d ? 2 * (d - 1) - k : k;
      outside |= k < 0 || k >= d;
      off = off * d + k;
    }
    out->v[e] = outside ? value : x->v[off];
    next_index(out->rank, out->dims, idx);
  }
}

/* LayerNormalization (opset 17): each row of the trailing axes from `axis` on, less its
 * mean, over the square root of its variance plus epsilon, times Scale, plus B. */
static void ref_layernorm(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0], *scale = in[1], *bias = n_in > 2 ? in[2] : NULL;
  int64_t axis = node_int(n, "axis", -1);
  if (axis < 0) axis += x->rank;
  double eps = node_float(n, "epsilon", 1e-5);
  int64_t inner = shape_count(x->rank - (int)axis, x->dims + axis), outer = t_count(x) / inner;
  *out = t_make(x->rank, x->dims);
  for (int64_t o = 0; o < outer; o++) {
    const double *row = x->v + o * inner;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < inner; i++) mean += row[i];
    mean /= (double)inner;
    for (int64_t i = 0; i < inner; i++) var += (row[i] - mean) * (row[i] - mean);
    var /= (double)inner;
    int64_t idx[B_MAX_RANK] = {0}; /* Scale and B broadcast over the normalized axes */
    for (int64_t i = 0; i < inner; i++) {
      double g = scale->v[bcast_offset(scale, x->rank - (int)axis, idx)];
      double sh = bias ? bias->v[bcast_offset(bias, x->rank - (int)axis, idx)] : 0.0;
      out->v[o * inner + i] = (row[i] - mean) / sqrt(var + eps) * g + sh;
      next_index(x->rank - (int)axis, x->dims + axis, idx);
    }
  }
}

/* Where: X where the condition is true, Y elsewhere, all three broadcast. */
static void ref_where(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  int rank = 0;
  int64_t dims[B_MAX_RANK];
  for (int k = 0; k < 3; k++) rank = in[k]->rank > rank ? in[k]->rank : rank;
  for (int i = 0; i < rank; i++) {
    dims[i] = 1;
    for (int k = 0; k < 3; k++) {
      int j = i - (rank - in[k]->rank);
      if (j >= 0 && in[k]->dims[j] != 1) dims[i] = in[k]->dims[j];
    }
  }
  *out = t_make(rank, dims);
  int64_t idx[B_MAX_RANK] = {0};
  for (int64_t e = 0; e < t_count(out); e++) {
    bool take_x = in[0]->v[bcast_offset(in[0], rank, idx)] != 0;
    out->v[e] = take_x ? in[1]->v[bcast_offset(in[1], rank, idx)] : in[2]->v[bcast_offset(in[2], rank, idx)];
    next_index(rank, dims, idx);
  }
}

/* ScatterND: data with the slices that indices name replaced by (or, with reduction
 * "add" or "mul", combined with) the updates. */
static void ref_scatter_nd(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *data = in[0], *indices = in[1], *updates = in[2];
  const char *reduction = node_str(n, "reduction", "none");
  *out = t_make(data->rank, data->dims);
  memcpy(out->v, data->v, (size_t)t_count(data) * sizeof *out->v);
  int64_t k = indices->dims[indices->rank - 1], slice = 1;
  for (int i = (int)k; i < data->rank; i++) slice *= data->dims[i];
  for (int64_t t = 0; t < t_count(indices) / k; t++) {
    int64_t at = 0;
    for (int j = 0; j < k; j++) {
      int64_t i = (int64_t)indices->v[t * k + j];
      at = at * data->dims[j] + (i < 0 ? i + data->dims[j] : i);
    }
    for (int64_t e = 0; e < slice; e++) {
      double *o = &out->v[at * slice + e], u = updates->v[t * slice + e];
      *o = strcmp(reduction, "add") == 0 ? *o + u : strcmp(reduction, "mul") == 0 ? *o * u : u;
    }
  }
}

/* Einsum of two operands, any equation without an ellipsis: every combination of the
 * letters' indices adds its product to the output element it names. */
static void ref_einsum(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const char *eq = node_str(n, "equation", "");
  char terms[3][16] = {{0}}, letters[32] = {0};
  int t = 0, len[3] = {0}, nl = 0;
  for (const char *p = eq; *p; p++) {
    if (*p == ',') t = 1;
    else if (*p == '>') t = 2;
    else if (isalpha((unsigned char)*p)) {
      terms[t][len[t]++] = *p;
      if (!strchr(letters, *p)) letters[nl++] = *p;
    }
  }
  int64_t size[32], dims[B_MAX_RANK], idx[32] = {0};
  for (int l = 0; l < nl; l++)
    for (int k = 0; k < 2; k++) {
      const char *at = strchr(terms[k], letters[l]);
      if (at) size[l] = in[k]->dims[at - terms[k]];
    }
  for (int i = 0; i < len[2]; i++) dims[i] = size[strchr(letters, terms[2][i]) - letters];
  *out = t_make(len[2], dims);
  for (int64_t e = 0; e < t_count(out); e++) out->v[e] = 0;
  int64_t combos = shape_count(nl, size);
  for (int64_t e = 0; e < combos; e++) {
    int64_t off[3] = {0};
    for (int k = 0; k < 3; k++)
      for (int i = 0; i < len[k]; i++) {
        int l = (int)(strchr(letters, terms[k][i]) - letters);
        off[k] = off[k] * size[l] + idx[l];
      }
    out->v[off[2]] += in[0]->v[off[0]] * in[1]->v[off[1]];
    next_index(nl, size, idx);
  }
}

/* Slice (opset 10+): starts, ends and optional axes and steps as inputs, clamped as
 * ONNX says for either sign of step. */
static void ref_slice(const b_node_rec *n, const tensor *const *in, int n_in, tensor *out) {
  const tensor *x = in[0], *starts = in[1], *ends = in[2];
  const tensor *axes = n_in > 3 ? in[3] : NULL, *steps = n_in > 4 ? in[4] : NULL;
  int64_t start[B_MAX_RANK] = {0}, step[B_MAX_RANK], dims[B_MAX_RANK];
  for (int i = 0; i < x->rank; i++) step[i] = 1, dims[i] = x->dims[i];
  for (int j = 0; j < t_count(starts); j++) {
    int64_t a = axes ? (int64_t)axes->v[j] : j, s = steps ? (int64_t)steps->v[j] : 1;
    if (a < 0) a += x->rank;
    int64_t d = x->dims[a], b = (int64_t)starts->v[j], e = (int64_t)ends->v[j];
    if (b < 0) b += d;
    if (e < 0) e += d;
    if (s > 0) {
      b = b < 0 ? 0 : b > d ? d : b;
      e = e < 0 ? 0 : e > d ? d : e;
      dims[a] = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = b < 0 ? 0 : b > d - 1 ? d - 1 : b;
      e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
      dims[a] = b > e ? (b - e - s - 1) / -s : 0;
    }
    start[a] = b, step[a] = s;
  }
  *out = t_make(x->rank, dims);
  int64_t idx[B_MAX_RANK] = {0};
  for (int64_t e = 0; e < t_count(out); e++) {
    int64_t off = 0;
    for (int i = 0; i < x->rank; i++) off = off * x->dims[i] + start[i] + idx[i] * step[i];
    out->v[e] = x->v[off];
    next_index(out->rank, out->dims, idx);
  }
}

static const struct {
  const char *op;
  ref_op_fn fn;
} ref_ops[] = {
    {"Pad", ref_pad},
    {"Slice", ref_slice},
    {"ScatterND", ref_scatter_nd},
    {"Einsum", ref_einsum},
    {"Where", ref_where},
    {"LayerNormalization", ref_layernorm},
    {"Greater", ref_binary},
    {"Less", ref_binary},
    {"GreaterOrEqual", ref_binary},
    {"LessOrEqual", ref_binary},
    {"Abs", ref_unary},
    {"Neg", ref_unary},
    {"Log", ref_unary},
    {"Elu", ref_unary},
    {"Reciprocal", ref_unary},
    {"Max", ref_binary},
    {"Min", ref_binary},
    {"Gelu", ref_unary},
    {"Conv", ref_conv},
    {"BatchNormalization", ref_batchnorm},
    {"Relu", ref_unary},
    {"LeakyRelu", ref_unary},
    {"Clip", ref_unary},
    {"Sigmoid", ref_unary},
    {"Tanh", ref_unary},
    {"HardSigmoid", ref_unary},
    {"HardSwish", ref_unary},
    {"Exp", ref_unary},
    {"Sqrt", ref_unary},
    {"Identity", ref_unary},
    {"Dropout", ref_unary},
    {"Cast", ref_unary}, /* float to float only */
    {"Pow", ref_binary},
    {"GlobalMaxPool", ref_global_max_pool},
    {"ReduceMean", ref_reduce_mean},
    {"Squeeze", ref_squeeze},
    {"Unsqueeze", ref_squeeze},
    {"Shape", ref_shape},
    {"Gather", ref_gather},
    {"Add", ref_binary},
    {"Sub", ref_binary},
    {"Mul", ref_binary},
    {"Div", ref_binary},
    {"MaxPool", ref_pool},
    {"AveragePool", ref_pool},
    {"GlobalAveragePool", ref_global_average_pool},
    {"Gemm", ref_gemm},
    {"MatMul", ref_matmul},
    {"Flatten", ref_flatten},
    {"Reshape", ref_reshape},
    {"Transpose", ref_transpose},
    {"Concat", ref_concat},
    {"Softmax", ref_softmax},
    {"LogSoftmax", ref_softmax},
};

/* ==== reference: interpreter ======================================================================= */

enum { ENV_MAX = B_MAX_IO + B_MAX_CONSTS + B_MAX_NODES * B_MAX_NODE_OUT };

typedef struct ref_env {
  int n;
  const char *names[ENV_MAX];
  tensor values[ENV_MAX];
} ref_env;

static tensor *env_find(ref_env *e, const char *name) {
  for (int i = 0; i < e->n; i++)
    if (strcmp(e->names[i], name) == 0) return &e->values[i];
  return NULL;
}

static tensor *env_add(ref_env *e, const char *name) {
  assert_true(e->n < ENV_MAX);
  e->names[e->n] = name;
  return &e->values[e->n++];
}

/* Split, the one op with several outputs: along `axis` by the sizes input, else into
 * n->n_out parts of ceil(dim / n) with the last one smaller (opset 18's num_outputs;
 * equal parts when n divides dim). */
static void ref_split(const b_node_rec *n, const tensor *const *in, int n_in, ref_env *e) {
  const tensor *x = in[0];
  int64_t axis = node_int(n, "axis", 0);
  if (axis < 0) axis += x->rank;
  int64_t dim = x->dims[axis], part = (dim + n->n_out - 1) / n->n_out, at = 0;
  int64_t outer = shape_count((int)axis, x->dims), inner = shape_count(x->rank - (int)axis - 1, x->dims + axis + 1);
  for (int k = 0; k < n->n_out; k++) {
    int64_t size = n_in > 1 && in[1] ? (int64_t)in[1]->v[k] : k < n->n_out - 1 ? part : dim - part * (n->n_out - 1);
    int64_t dims[B_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    dims[axis] = size;
    tensor *t = env_add(e, n->out[k]);
    *t = t_make(x->rank, dims);
    for (int64_t o = 0; o < outer; o++)
      memcpy(t->v + o * size * inner, x->v + (o * dim + at) * inner, (size_t)(size * inner) * sizeof *t->v);
    at += size;
  }
}

/* Evaluates the graph on `inputs` (one per graph input); fills outputs[] (caller frees). */
static void ref_run(const builder *b, const tensor *inputs, tensor *outputs) {
  ref_env *e = calloc(1, sizeof *e);
  assert_non_null(e);
  for (int i = 0; i < b->n_inputs; i++) {
    tensor *t = env_add(e, b->inputs[i].name);
    *t = t_make(inputs[i].rank, inputs[i].dims);
    memcpy(t->v, inputs[i].v, (size_t)t_count(t) * sizeof *t->v);
  }
  for (int i = 0; i < b->n_consts; i++) {
    const b_const_rec *c = &b->consts[i];
    tensor *t = env_add(e, c->name);
    *t = t_make(c->rank, c->dims);
    for (int64_t k = 0; k < t_count(t); k++)
      t->v[k] = c->dtype == INFERD_DTYPE_FLOAT  ? ((const float *)c->data)[k]
                : c->dtype == INFERD_DTYPE_BOOL ? ((const unsigned char *)c->data)[k]
                                                : (double)((const int64_t *)c->data)[k];
  }
  for (int i = 0; i < b->n_nodes; i++) {
    const b_node_rec *n = &b->nodes[i];
    ref_op_fn fn = NULL;
    for (size_t k = 0; k < sizeof ref_ops / sizeof ref_ops[0]; k++)
      if (strcmp(ref_ops[k].op, n->op) == 0) fn = ref_ops[k].fn;
    bool split = strcmp(n->op, "Split") == 0;
    if (!fn && !split) fail_msg("%s: the reference has no op %s", b->what, n->op);
    const tensor *in[B_MAX_NODE_IN] = {0};
    for (int k = 0; k < n->n_in; k++) {
      if (!*n->in[k]) continue;
      in[k] = env_find(e, n->in[k]);
      if (!in[k]) fail_msg("%s: node %s reads '%s' before it is computed", b->what, n->name, n->in[k]);
    }
    if (split)
      ref_split(n, in, n->n_in, e);
    else
      fn(n, in, n->n_in, env_add(e, n->out[0]));
  }
  for (int i = 0; i < b->n_outputs; i++) {
    const tensor *t = env_find(e, b->outputs[i]);
    if (!t) fail_msg("%s: output '%s' is never computed", b->what, b->outputs[i]);
    outputs[i] = t_make(t->rank, t->dims);
    memcpy(outputs[i].v, t->v, (size_t)t_count(t) * sizeof *t->v);
  }
  for (int i = 0; i < e->n; i++) t_free(&e->values[i]);
  free(e);
}

/* ==== harness ========================================================================================= */

static const int run_batches[] = {1, 3, 1}; /* the second 1 reuses the bound plan */
static const int run_threads[] = {1, 2};

static char *index_str(int rank, const int64_t *dims, int64_t flat, char *buf, size_t size) {
  int64_t idx[B_MAX_RANK];
  for (int i = rank - 1; i >= 0; i--) {
    idx[i] = flat % dims[i];
    flat /= dims[i];
  }
  return shape_str(rank, idx, buf, size);
}

/* Fails, printing the first bad element (index, got, expected) and the worst one. */
/* The bound on max|diff| / max(1, max|ref|): float32's (check_graph_bf16 widens it). */
static double close_rtol = 1e-4;

static void expect_close(const builder *b, const char *output, int batch, int threads, const float *got,
                         const tensor *ref) {
  int64_t count = t_count(ref), first_bad = -1, n_bad = 0, worst = 0;
  double max_ref = 0, worst_diff = 0;
  for (int64_t i = 0; i < count; i++) max_ref = fmax(max_ref, fabs(ref->v[i]));
  double tol = close_rtol * fmax(1.0, max_ref);
  for (int64_t i = 0; i < count; i++) {
    double d = fabs((double)got[i] - ref->v[i]);
    if (!(d <= tol)) { /* NaN too */
      if (first_bad < 0) first_bad = i;
      n_bad++;
    }
    if (isnan(d) ? !isnan(worst_diff) : d > worst_diff) worst_diff = d, worst = i;
  }
  if (first_bad < 0) return;
  char at[64], at_worst[64], shape[64];
  fail_msg("%s: output '%s' %s (batch %d, %d threads): %lld of %lld elements off; first at %s: got %.7g, "
           "expected %.7g; worst at %s: got %.7g, expected %.7g (tolerance %.3g)",
           b->what, output, shape_str(ref->rank, ref->dims, shape, sizeof shape), batch, threads, (long long)n_bad,
           (long long)count, index_str(ref->rank, ref->dims, first_bad, at, sizeof at), (double)got[first_bad],
           ref->v[first_bad], index_str(ref->rank, ref->dims, worst, at_worst, sizeof at_worst), (double)got[worst],
           ref->v[worst], tol);
}

static inferd_model *load_or_fail(builder *b, const inferd_model_params *params) {
  size_t size;
  void *buf = b_pack(b, &size);
  inferd_model *m = NULL;
  inferd_status st = {0};
  inferd_code rc = inferd_model_load_memory(buf, size, params, &m, &st);
  free(buf);
  if (rc != INFERD_OK)
    fail_msg("%s: load: got %s, expected OK: %s", b->what, inferd_code_name(rc), st.message);
  assert_non_null(m);
  return m;
}

/* One run of one batch size: random inputs (new ones for every `run`, so that state
 * left over from an earlier run cannot pass), engine vs reference, inputs untouched. */
static void run_and_compare(builder *b, inferd_session *s, int batch, int threads, int run) {
  tensor in_ref[B_MAX_IO], out_ref[B_MAX_IO];
  float *in[B_MAX_IO], *in_copy[B_MAX_IO], *out[B_MAX_IO];
  uint64_t seed = hash_name(b->what) ^ (uint64_t)(run + 1) * 0x9E3779B97F4A7C15ull;
  for (int k = 0; k < b->n_inputs; k++) {
    int64_t dims[B_MAX_RANK];
    memcpy(dims, b->inputs[k].dims, sizeof dims);
    dims[0] = batch;
    in_ref[k] = t_make(b->inputs[k].rank, dims);
    int64_t count = t_count(&in_ref[k]);
    in[k] = malloc((size_t)count * sizeof *in[k]);
    in_copy[k] = malloc((size_t)count * sizeof *in[k]);
    assert_true(in[k] && in_copy[k]);
    for (int64_t i = 0; i < count; i++) in_ref[k].v[i] = in[k][i] = rng_uniform(&seed, b->in_lo, b->in_hi);
    memcpy(in_copy[k], in[k], (size_t)count * sizeof *in[k]);
  }
  ref_run(b, in_ref, out_ref);

  inferd_status st = {0};
  for (int k = 0; k < b->n_outputs; k++) {
    int rank = 0;
    int64_t dims[INFERD_MAX_RANK] = {0};
    inferd_code rc = inferd_session_output_shape(s, batch, k, &rank, dims, &st);
    if (rc != INFERD_OK)
      fail_msg("%s: output_shape(batch %d, output %d): got %s, expected OK: %s", b->what, batch, k,
               inferd_code_name(rc), st.message);
    char got_s[96], want_s[96];
    if (rank != out_ref[k].rank || memcmp(dims, out_ref[k].dims, (size_t)rank * sizeof *dims) != 0)
      fail_msg("%s: output '%s' (batch %d): got shape %s, expected %s", b->what, b->outputs[k], batch,
               shape_str(rank, dims, got_s, sizeof got_s), shape_str(out_ref[k].rank, out_ref[k].dims, want_s, sizeof want_s));
    int64_t count = t_count(&out_ref[k]);
    out[k] = malloc((size_t)count * sizeof *out[k]);
    assert_non_null(out[k]);
    for (int64_t i = 0; i < count; i++) out[k][i] = NAN;
  }
  inferd_code rc = inferd_session_run(s, batch, (const float *const *)in, out, &st);
  if (rc != INFERD_OK)
    fail_msg("%s: run(batch %d, %d threads): got %s, expected OK: %s", b->what, batch, threads, inferd_code_name(rc),
             st.message);
  for (int k = 0; k < b->n_outputs; k++) expect_close(b, b->outputs[k], batch, threads, out[k], &out_ref[k]);
  for (int k = 0; k < b->n_inputs; k++) {
    int64_t count = t_count(&in_ref[k]);
    for (int64_t i = 0; i < count; i++)
      if (memcmp(&in[k][i], &in_copy[k][i], sizeof(float)) != 0)
        fail_msg("%s: run(batch %d, %d threads) wrote into input '%s': element %lld was %.7g, is now %.7g", b->what,
                 batch, threads, b->inputs[k].name, (long long)i, (double)in_copy[k][i], (double)in[k][i]);
  }
  for (int k = 0; k < b->n_inputs; k++) {
    t_free(&in_ref[k]);
    free(in[k]);
    free(in_copy[k]);
  }
  for (int k = 0; k < b->n_outputs; k++) {
    t_free(&out_ref[k]);
    free(out[k]);
  }
}

/* Loads b's model with `params` (NULL: defaults) and checks every output against the
 * reference at each of `batches` (run_batches when NULL), with 1 and 2 threads. With
 * `winograd`, each session must also have run a convolution by Winograd (its profile's
 * Conv/Winograd row), so a test of that path cannot pass on the direct one. Frees b. */
static void check_graph_with(builder *b, const inferd_model_params *params, const int *batches, int n_batches,
                             bool winograd) {
  if (!batches) batches = run_batches, n_batches = (int)(sizeof run_batches / sizeof *run_batches);
  inferd_model *m = load_or_fail(b, params);
  assert_int_equal(inferd_model_num_inputs(m), b->n_inputs);
  assert_int_equal(inferd_model_num_outputs(m), b->n_outputs);
  for (int k = 0; k < b->n_inputs; k++) {
    inferd_tensor_info info;
    assert_int_equal(inferd_model_input(m, k, &info), INFERD_OK);
    assert_string_equal(info.name, b->inputs[k].name);
    assert_int_equal(info.rank, b->inputs[k].rank);
    assert_int_equal(info.dims[0], b->inputs[k].dims[0] ? b->inputs[k].dims[0] : -1); /* the batch axis */
    for (int i = 1; i < info.rank; i++) assert_int_equal(info.dims[i], b->inputs[k].dims[i]);
  }
  int run = 0;
  for (size_t t = 0; t < sizeof run_threads / sizeof *run_threads; t++) {
    inferd_session *s = NULL;
    inferd_status st = {0};
    inferd_session_params sp = {.threads = run_threads[t], .profile = winograd};
    inferd_code rc = inferd_session_new(m, &sp, &s, &st);
    if (rc != INFERD_OK) fail_msg("%s: session_new: got %s: %s", b->what, inferd_code_name(rc), st.message);
    for (int k = 0; k < n_batches; k++) run_and_compare(b, s, batches[k], run_threads[t], run++);
    if (winograd) {
      char profile[4096];
      inferd_session_profile(s, profile, sizeof profile);
      if (!strstr(profile, "\nConv/Winograd "))
        fail_msg("%s: no convolution ran by Winograd (%d threads)", b->what, run_threads[t]);
    }
    inferd_session_free(s);
  }
  inferd_model_free(m);
  b_free(b);
}

static void check_graph(builder *b) { check_graph_with(b, NULL, NULL, 0, false); }

/* The model tuned for batch 4, where convolutions take blocked layouts (ops_conv.c) and
 * the weights' layout is fixed; then batches 1 and 8 run on that copy. Batch 8 grows
 * the session's arena, so the last batch 4 runs a blocked plan moved to the new arena
 * after batch 8 has written all over it. */
static const inferd_model_params tuned_params = {.opt_batch = 4};
static const int tuned_batches[] = {4, 1, 8, 4};
enum { N_TUNED = sizeof tuned_batches / sizeof *tuned_batches };

static void check_graph_tuned(builder *b) { check_graph_with(b, &tuned_params, tuned_batches, N_TUNED, false); }

/* check_graph_tuned, and Winograd must have run */
static void check_graph_winograd(builder *b) { check_graph_with(b, &tuned_params, tuned_batches, N_TUNED, true); }

/* check_graph_winograd with Winograd's weights kept transformed: batch 4's kernels make
 * the first transformed copies, batches 1 and 8 ask for their own (a copy of one
 * blocking given to another kernel crashed oneDNN 2.6) */
static const inferd_model_params transformed_params = {.opt_batch = 4, .winograd_transformed = true};
static void check_graph_transformed(builder *b) {
  check_graph_with(b, &transformed_params, tuned_batches, N_TUNED, true);
}

/* check_graph_tuned with the convolutions in bfloat16 (inferd_model_params.precision):
 * 8 significant bits, so every rounding of an activation or a weight moves it by up to
 * 2^-9 of itself; these small graphs stay within 2% of the double reference's magnitude
 * (measured worst 0.74%), a value read in the wrong type is off by far more (100% in the
 * regression test_bf16_se_block guards). The weights must be
 * held in bfloat16 too: less than 3/4 of the float32 model's bytes (biases stay float32). */
static const inferd_model_params bf16_params = {.opt_batch = 4, .precision = INFERD_PRECISION_BF16};
static void check_graph_bf16(builder *(*make)(const char *), const char *what) {
  builder *b = make(what);
  inferd_model *m32 = load_or_fail(b, &tuned_params), *m16 = load_or_fail(b, &bf16_params);
  size_t w32 = inferd_model_weights_bytes(m32), w16 = inferd_model_weights_bytes(m16);
  inferd_model_free(m32);
  inferd_model_free(m16);
  if (!(w16 * 4 < w32 * 3)) fail_msg("%s: bf16 weights take %zu bytes, float32 %zu", what, w16, w32);
  close_rtol = 2e-2;
  check_graph_with(b, &bf16_params, tuned_batches, N_TUNED, false);
  close_rtol = 1e-4;
}

/* Loads b's model expecting failure with `code` and every string of `needles` in the
 * message. Frees b. */
static void expect_load_fails(builder *b, inferd_code code, const char *const *needles) {
  size_t size;
  void *buf = b_pack(b, &size);
  inferd_model *m = NULL;
  inferd_status st = {0};
  inferd_code rc = inferd_model_load_memory(buf, size, NULL, &m, &st);
  free(buf);
  if (rc != code)
    fail_msg("%s: load: got %s, expected %s (message: %s)", b->what, inferd_code_name(rc), inferd_code_name(code),
             st.message);
  if (st.code != code)
    fail_msg("%s: status.code: got %s, expected %s", b->what, inferd_code_name(st.code), inferd_code_name(code));
  assert_null(m);
  for (; needles && *needles; needles++)
    if (!strstr(st.message, *needles))
      fail_msg("%s: message \"%s\" does not mention \"%s\"", b->what, st.message, *needles);
  b_free(b);
}

/* ==== tests: Conv and fused post-ops ======================================================================= */

typedef struct conv_case {
  int64_t cin, cout, h, w, kh, kw;
  int64_t group;     /* 0: attribute omitted */
  int64_t stride[2]; /* {0, 0}: attribute omitted */
  int64_t dil[2];    /* {0, 0}: attribute omitted */
  int64_t pads[4];   /* ONNX order: h_begin, w_begin, h_end, w_end; omitted when all 0 */
  const char *auto_pad;
  bool no_kernel_shape; /* leave the optional kernel_shape attribute out */
  bool no_bias;
  /* ops after the Conv, comma-separated: Relu, LeakyRelu, Sigmoid, Tanh, HardSigmoid,
   * HardSwish, Clip6 (bounds 0 and 6 as constant inputs), ClipMin0 (min only), BN */
  const char *post;
  float in_range; /* inputs uniform in [-in_range, in_range]; 0 means 1 */
  bool winograd;  /* check_graph_winograd: tuned for batch 4, Winograd must run */
  bool transformed; /* check_graph_transformed: the same with Winograd's weights transformed */
} conv_case;

/* Appends post-op `op` reading `in`, writing `out`; k numbers its constants. */
static void add_post_op(builder *b, const char *op, const char *in, const char *out, int64_t channels, int k) {
  char n1[B_NAME], n2[B_NAME], n3[B_NAME], n4[B_NAME];
  if (strcmp(op, "Clip6") == 0 || strcmp(op, "ClipMin0") == 0) {
    snprintf(n1, sizeof n1, "clip%d_min", k);
    snprintf(n2, sizeof n2, "clip%d_max", k);
    b_scalar(b, n1, 0.0f);
    if (strcmp(op, "Clip6") == 0) {
      b_scalar(b, n2, 6.0f);
      b_node(b, "Clip", IN(in, n1, n2), OUT(out), NULL);
    } else {
      b_node(b, "Clip", IN(in, n1), OUT(out), NULL);
    }
  } else if (strcmp(op, "BN") == 0) {
    snprintf(n1, sizeof n1, "bn%d_scale", k);
    snprintf(n2, sizeof n2, "bn%d_shift", k);
    snprintf(n3, sizeof n3, "bn%d_mean", k);
    snprintf(n4, sizeof n4, "bn%d_var", k);
    b_random(b, n1, DIMS(channels), 0.5f, 1.5f);
    b_random(b, n2, DIMS(channels), -1.0f, 1.0f);
    b_random(b, n3, DIMS(channels), -0.5f, 0.5f);
    b_random(b, n4, DIMS(channels), 0.2f, 2.0f);
    b_node(b, "BatchNormalization", IN(in, n1, n2, n3, n4), OUT(out), ATTRS(A_FLOAT("epsilon", 1e-3f)));
  } else if (strcmp(op, "HardSigmoid") == 0) {
    b_node(b, op, IN(in), OUT(out), ATTRS(A_FLOAT("alpha", 0.25f), A_FLOAT("beta", 0.4f)));
  } else if (strcmp(op, "LeakyRelu") == 0) {
    b_node(b, op, IN(in), OUT(out), ATTRS(A_FLOAT("alpha", 0.1f)));
  } else {
    b_node(b, op, IN(in), OUT(out), NULL);
  }
}

/* Appends a Conv node with the case's attributes reading x, weights w (and b). */
static void add_conv(builder *b, const conv_case *c, const char *x, const char *w, const char *bias, const char *out) {
  attr attrs[B_MAX_ATTRS + 1];
  int na = 0;
  if (!c->no_kernel_shape) attrs[na++] = (attr)A_INTS("kernel_shape", c->kh, c->kw);
  if (c->group) attrs[na++] = (attr)A_INT("group", c->group);
  if (c->stride[0]) attrs[na++] = (attr)A_INTS("strides", c->stride[0], c->stride[1]);
  if (c->dil[0]) attrs[na++] = (attr)A_INTS("dilations", c->dil[0], c->dil[1]);
  if (c->pads[0] || c->pads[1] || c->pads[2] || c->pads[3])
    attrs[na++] = (attr)A_INTS("pads", c->pads[0], c->pads[1], c->pads[2], c->pads[3]);
  if (c->auto_pad) attrs[na++] = (attr)A_STR("auto_pad", c->auto_pad);
  attrs[na] = (attr){.kind = ATTR_END};
  b_node(b, "Conv", bias ? IN(x, w, bias) : IN(x, w), OUT(out), attrs);
}

static void run_conv_case(const char *name, const conv_case *c) {
  builder *b = b_new(name);
  float r = c->in_range > 0 ? c->in_range : 1.0f;
  b->in_lo = -r, b->in_hi = r;
  int64_t group = c->group ? c->group : 1;
  b_input(b, "x", DIMS(0, c->cin, c->h, c->w));
  b_random(b, "w", DIMS(c->cout, c->cin / group, c->kh, c->kw), -1.0f, 1.0f);
  if (!c->no_bias) b_random(b, "b", DIMS(c->cout), -1.0f, 1.0f);
  /* the chain: x -> Conv -> post ops... -> y */
  char ops[8][24];
  int n_ops = 0;
  if (c->post) {
    char list[128];
    snprintf(list, sizeof list, "%s", c->post);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      assert_true(n_ops < 8);
      snprintf(ops[n_ops++], sizeof ops[0], "%s", tok);
    }
  }
  add_conv(b, c, "x", "w", c->no_bias ? NULL : "b", n_ops ? "t0" : "y");
  for (int k = 0; k < n_ops; k++) {
    char in[B_NAME], out[B_NAME];
    snprintf(in, sizeof in, "t%d", k);
    if (k + 1 < n_ops) snprintf(out, sizeof out, "t%d", k + 1);
    else snprintf(out, sizeof out, "y");
    add_post_op(b, ops[k], in, out, c->cout, k);
  }
  b_output(b, "y");
  if (c->transformed) check_graph_transformed(b);
  else if (c->winograd) check_graph_winograd(b);
  else check_graph(b);
}

#define CONV_TEST(fn, ...)                     \
  static void fn(void **state) {               \
    (void)state;                               \
    const conv_case c = {__VA_ARGS__};         \
    run_conv_case(#fn, &c);                    \
  }

/* shapes and attributes */
CONV_TEST(test_conv_3x3_pad1_c3_to_5, .cin = 3, .cout = 5, .h = 9, .w = 9, .kh = 3, .kw = 3, .pads = {1, 1, 1, 1})
CONV_TEST(test_conv_3x3_pad1_c24_to_32_no_bias, .cin = 24, .cout = 32, .h = 8, .w = 8, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .no_bias = true)
CONV_TEST(test_conv_3x3_pad1_c32_to_32_rect, .cin = 32, .cout = 32, .h = 6, .w = 7, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .stride = {1, 1})
CONV_TEST(test_conv_3x3_no_pad_c5_to_16, .cin = 5, .cout = 16, .h = 7, .w = 6, .kh = 3, .kw = 3)
CONV_TEST(test_conv_stride2_c5_to_24_odd, .cin = 5, .cout = 24, .h = 9, .w = 9, .kh = 3, .kw = 3, .stride = {2, 2},
          .pads = {1, 1, 1, 1})
CONV_TEST(test_conv_stride2_c32_to_32_even_no_bias, .cin = 32, .cout = 32, .h = 8, .w = 8, .kh = 3, .kw = 3,
          .stride = {2, 2}, .pads = {1, 1, 1, 1}, .no_bias = true)
CONV_TEST(test_conv_stride_2x1_c3_to_24, .cin = 3, .cout = 24, .h = 8, .w = 7, .kh = 3, .kw = 3, .stride = {2, 1},
          .pads = {1, 1, 1, 1})
CONV_TEST(test_conv_7x7_stride2_pad3_c3_to_32, .cin = 3, .cout = 32, .h = 12, .w = 12, .kh = 7, .kw = 7,
          .stride = {2, 2}, .pads = {3, 3, 3, 3})
CONV_TEST(test_conv_depthwise_c24, .cin = 24, .cout = 24, .h = 7, .w = 7, .kh = 3, .kw = 3, .group = 24,
          .pads = {1, 1, 1, 1})
CONV_TEST(test_conv_depthwise_c32_stride2, .cin = 32, .cout = 32, .h = 8, .w = 8, .kh = 3, .kw = 3, .group = 32,
          .stride = {2, 2}, .pads = {1, 1, 1, 1})
CONV_TEST(test_conv_depthwise_c5_no_bias, .cin = 5, .cout = 5, .h = 6, .w = 6, .kh = 3, .kw = 3, .group = 5,
          .pads = {1, 1, 1, 1}, .no_bias = true)
CONV_TEST(test_conv_depthwise_multiplier2_c5_to_10, .cin = 5, .cout = 10, .h = 6, .w = 6, .kh = 3, .kw = 3,
          .group = 5, .pads = {1, 1, 1, 1})
CONV_TEST(test_conv_group2_c6_to_10, .cin = 6, .cout = 10, .h = 7, .w = 7, .kh = 3, .kw = 3, .group = 2,
          .pads = {1, 1, 1, 1})
CONV_TEST(test_conv_group2_c32_to_32, .cin = 32, .cout = 32, .h = 6, .w = 6, .kh = 3, .kw = 3, .group = 2,
          .pads = {1, 1, 1, 1})
CONV_TEST(test_conv_group4_c24_to_24_stride2, .cin = 24, .cout = 24, .h = 7, .w = 7, .kh = 3, .kw = 3, .group = 4,
          .stride = {2, 2}, .pads = {1, 1, 1, 1})
CONV_TEST(test_conv_dilation2_c5_to_8, .cin = 5, .cout = 8, .h = 9, .w = 9, .kh = 3, .kw = 3, .dil = {2, 2},
          .pads = {2, 2, 2, 2})
CONV_TEST(test_conv_dilation2_c32_to_32_no_pad, .cin = 32, .cout = 32, .h = 9, .w = 8, .kh = 3, .kw = 3,
          .dil = {2, 2})
CONV_TEST(test_conv_dilation_2x3_depthwise_c24, .cin = 24, .cout = 24, .h = 9, .w = 9, .kh = 3, .kw = 3,
          .group = 24, .dil = {2, 3}, .pads = {2, 3, 2, 3})
CONV_TEST(test_conv_1x1_c24_to_5, .cin = 24, .cout = 5, .h = 6, .w = 5, .kh = 1, .kw = 1)
CONV_TEST(test_conv_1x1_c32_to_32, .cin = 32, .cout = 32, .h = 4, .w = 4, .kh = 1, .kw = 1)
CONV_TEST(test_conv_1x1_stride2_c32_to_24_even, .cin = 32, .cout = 24, .h = 8, .w = 8, .kh = 1, .kw = 1,
          .stride = {2, 2})
CONV_TEST(test_conv_1x1_stride2_c5_to_3_odd, .cin = 5, .cout = 3, .h = 7, .w = 7, .kh = 1, .kw = 1, .stride = {2, 2})
CONV_TEST(test_conv_asymmetric_pads_c5_to_24, .cin = 5, .cout = 24, .h = 8, .w = 7, .kh = 3, .kw = 3,
          .pads = {1, 0, 2, 1})
CONV_TEST(test_conv_asymmetric_pads_stride2_c32_to_32, .cin = 32, .cout = 32, .h = 8, .w = 8, .kh = 3, .kw = 3,
          .stride = {2, 2}, .pads = {0, 0, 1, 1})
CONV_TEST(test_conv_auto_pad_same_upper_stride2_c24_to_32, .cin = 24, .cout = 32, .h = 8, .w = 8, .kh = 3, .kw = 3,
          .stride = {2, 2}, .auto_pad = "SAME_UPPER")
CONV_TEST(test_conv_auto_pad_same_upper_k4_c3_to_5, .cin = 3, .cout = 5, .h = 7, .w = 6, .kh = 4, .kw = 4,
          .auto_pad = "SAME_UPPER")
CONV_TEST(test_conv_auto_pad_same_lower_k4_c5_to_16, .cin = 5, .cout = 16, .h = 7, .w = 6, .kh = 4, .kw = 4,
          .auto_pad = "SAME_LOWER")
CONV_TEST(test_conv_auto_pad_valid_c5_to_24, .cin = 5, .cout = 24, .h = 7, .w = 7, .kh = 3, .kw = 3,
          .auto_pad = "VALID")
CONV_TEST(test_conv_no_kernel_shape_attribute_c5_to_8, .cin = 5, .cout = 8, .h = 5, .w = 6, .kh = 3, .kw = 2,
          .pads = {1, 0, 1, 1}, .no_kernel_shape = true)
CONV_TEST(test_conv_5x3_kernel_c3_to_16, .cin = 3, .cout = 16, .h = 10, .w = 6, .kh = 5, .kw = 3,
          .pads = {2, 1, 2, 1})

/* fused post-ops (the engine folds BN into the weights and runs the rest as oneDNN post-ops) */

/* Regression (every test with "BN" below, and test_conv_shared_weights_one_with_bn): the
 * model's weight-cache table was sized before BatchNormalization folding added values,
 * so folded weights were looked up past its end. */
CONV_TEST(test_fuse_conv_relu_c3_to_16, .cin = 3, .cout = 16, .h = 8, .w = 8, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .post = "Relu")
CONV_TEST(test_fuse_conv_relu_c24_to_32_stride2, .cin = 24, .cout = 32, .h = 9, .w = 9, .kh = 3, .kw = 3,
          .stride = {2, 2}, .pads = {1, 1, 1, 1}, .post = "Relu")
CONV_TEST(test_fuse_conv_clip6_c3_to_5, .cin = 3, .cout = 5, .h = 8, .w = 8, .kh = 3, .kw = 3, .pads = {1, 1, 1, 1},
          .post = "Clip6", .in_range = 4)
CONV_TEST(test_fuse_conv_clip6_depthwise_c32, .cin = 32, .cout = 32, .h = 6, .w = 6, .kh = 3, .kw = 3, .group = 32,
          .pads = {1, 1, 1, 1}, .post = "Clip6", .in_range = 5)
CONV_TEST(test_fuse_conv_clip_min_only_c5_to_24, .cin = 5, .cout = 24, .h = 6, .w = 6, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .post = "ClipMin0")
CONV_TEST(test_fuse_conv_bn_c5_to_24, .cin = 5, .cout = 24, .h = 7, .w = 7, .kh = 3, .kw = 3, .pads = {1, 1, 1, 1},
          .post = "BN")
CONV_TEST(test_fuse_conv_bn_relu_c24_to_32, .cin = 24, .cout = 32, .h = 6, .w = 6, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .post = "BN,Relu")
CONV_TEST(test_fuse_conv_no_bias_bn_relu_c3_to_24, .cin = 3, .cout = 24, .h = 8, .w = 8, .kh = 3, .kw = 3,
          .stride = {2, 2}, .pads = {1, 1, 1, 1}, .no_bias = true, .post = "BN,Relu")
CONV_TEST(test_fuse_conv_depthwise_bn_clip6_c24, .cin = 24, .cout = 24, .h = 7, .w = 7, .kh = 3, .kw = 3,
          .group = 24, .pads = {1, 1, 1, 1}, .no_bias = true, .post = "BN,Clip6", .in_range = 3)
CONV_TEST(test_fuse_conv_bn_then_standalone_bn_c5_to_8, .cin = 5, .cout = 8, .h = 5, .w = 5, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .post = "BN,Relu,BN")
CONV_TEST(test_fuse_conv_hardswish_c5_to_16, .cin = 5, .cout = 16, .h = 6, .w = 6, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .post = "HardSwish", .in_range = 2)
CONV_TEST(test_fuse_conv_hardsigmoid_c24_to_5, .cin = 24, .cout = 5, .h = 5, .w = 5, .kh = 1, .kw = 1,
          .post = "HardSigmoid")
CONV_TEST(test_fuse_conv_sigmoid_c3_to_32, .cin = 3, .cout = 32, .h = 6, .w = 6, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .post = "Sigmoid")
CONV_TEST(test_fuse_conv_leakyrelu_tanh_c5_to_5, .cin = 5, .cout = 5, .h = 6, .w = 6, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .post = "LeakyRelu,Tanh")
CONV_TEST(test_fuse_conv_relu_clip6_c32_to_32, .cin = 32, .cout = 32, .h = 5, .w = 5, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .post = "Relu,Clip6", .in_range = 2)
/* five element-wise ops after one Conv: more than FUSED_MAX post-ops, the rest run standalone */
CONV_TEST(test_fuse_conv_long_chain_c5_to_24, .cin = 5, .cout = 24, .h = 6, .w = 6, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .post = "HardSigmoid,HardSigmoid,Relu,Sigmoid")

/* Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions with enough output pixels per
 * channel (ops_conv.c): the model is tuned for batch 4, so the batch-4 plan picks
 * Winograd and fixes the weights' layout; batches 1 and 3 then run on that one copy, by
 * Winograd or by the direct kernel that takes the layout. Output sizes that are not a
 * multiple of the 4x4 tile, with and without padding, with post-ops fused. */
CONV_TEST(test_winograd_c16_9x7_relu, .cin = 16, .cout = 16, .h = 9, .w = 7, .kh = 3, .kw = 3, .pads = {1, 1, 1, 1},
          .post = "Relu", .winograd = true)
CONV_TEST(test_winograd_c16_to_32_no_pad_bn_relu, .cin = 16, .cout = 32, .h = 10, .w = 11, .kh = 3, .kw = 3,
          .post = "BN,Relu", .winograd = true)
CONV_TEST(test_winograd_c24_to_40, .cin = 24, .cout = 40, .h = 10, .w = 10, .kh = 3, .kw = 3, .pads = {1, 1, 1, 1},
          .winograd = true)
CONV_TEST(test_winograd_c64_14x14_no_bias_relu, .cin = 64, .cout = 64, .h = 14, .w = 14, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .no_bias = true, .post = "Relu", .winograd = true)
CONV_TEST(test_winograd_c32_to_16_pad_height_only, .cin = 32, .cout = 16, .h = 12, .w = 9, .kh = 3, .kw = 3,
          .pads = {1, 0, 1, 0}, .winograd = true)
/* The same with the weights kept transformed, which also takes an output of one 4x4
 * tile with few pixels per channel (4x4, 64 channels) */
CONV_TEST(test_winograd_transformed_c16_9x7_relu, .cin = 16, .cout = 16, .h = 9, .w = 7, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .post = "Relu", .transformed = true)
CONV_TEST(test_winograd_transformed_c16_to_32_no_pad_bn_relu, .cin = 16, .cout = 32, .h = 10, .w = 11, .kh = 3,
          .kw = 3, .post = "BN,Relu", .transformed = true)
CONV_TEST(test_winograd_transformed_c64_4x4_no_bias, .cin = 64, .cout = 64, .h = 4, .w = 4, .kh = 3, .kw = 3,
          .pads = {1, 1, 1, 1}, .no_bias = true, .transformed = true)
/* Winograd refuses these (oneDNN 2.6: clip post-ops, unequal pads); the direct kernel runs */
CONV_TEST(test_winograd_refused_clip6, .cin = 16, .cout = 16, .h = 9, .w = 9, .kh = 3, .kw = 3, .pads = {1, 1, 1, 1},
          .post = "Clip6")
CONV_TEST(test_winograd_refused_asymmetric_pads, .cin = 32, .cout = 16, .h = 12, .w = 9, .kh = 3, .kw = 3,
          .pads = {0, 1, 2, 1})

/* ==== tests: residual blocks (Add fused as an in-place sum post-op) ========================================== */

/* x0 = Relu(Conv0(x)); s = Add(Conv2(Relu(Conv1(x0))), x0) (operands swapped when asked);
 * y = Relu(s). The residual x0 is computed by a node, so the engine may fuse the sum. */
static void add_residual_block(builder *b, const char *x0, const char *prefix, int64_t c, bool swap,
                               const char *out) {
  char w1[B_NAME], b1[B_NAME], w2[B_NAME], b2[B_NAME], c1[B_NAME], r1[B_NAME], c2[B_NAME], s[B_NAME];
  snprintf(w1, sizeof w1, "%s_w1", prefix);
  snprintf(b1, sizeof b1, "%s_b1", prefix);
  snprintf(w2, sizeof w2, "%s_w2", prefix);
  snprintf(b2, sizeof b2, "%s_b2", prefix);
  snprintf(c1, sizeof c1, "%s_c1", prefix);
  snprintf(r1, sizeof r1, "%s_r1", prefix);
  snprintf(c2, sizeof c2, "%s_c2", prefix);
  snprintf(s, sizeof s, "%s_sum", prefix);
  b_random(b, w1, DIMS(c, c, 3, 3), -0.3f, 0.3f);
  b_random(b, b1, DIMS(c), -0.5f, 0.5f);
  b_random(b, w2, DIMS(c, c, 3, 3), -0.3f, 0.3f);
  b_random(b, b2, DIMS(c), -0.5f, 0.5f);
  const attr *conv3x3 = ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1));
  b_node(b, "Conv", IN(x0, w1, b1), OUT(c1), conv3x3);
  b_node(b, "Relu", IN(c1), OUT(r1), NULL);
  b_node(b, "Conv", IN(r1, w2, b2), OUT(c2), conv3x3);
  b_node(b, "Add", swap ? IN(x0, c2) : IN(c2, x0), OUT(s), NULL);
  b_node(b, "Relu", IN(s), OUT(out), NULL);
}

/* The stem: x [N, cin, h, w] -> Conv 3x3 -> Relu -> "x0" [N, c, h, w]. */
static void add_stem(builder *b, int64_t cin, int64_t c, int64_t h, int64_t w) {
  b_input(b, "x", DIMS(0, cin, h, w));
  b_random(b, "stem_w", DIMS(c, cin, 3, 3), -0.5f, 0.5f);
  b_random(b, "stem_b", DIMS(c), -0.5f, 0.5f);
  b_node(b, "Conv", IN("x", "stem_w", "stem_b"), OUT("stem_c"),
         ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Relu", IN("stem_c"), OUT("x0"), NULL);
}

static void test_residual_add(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 5, 24, 6, 6);
  add_residual_block(b, "x0", "blk", 24, false, "y");
  b_output(b, "y");
  check_graph(b);
}

static void test_residual_add_swapped_operands(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 32, 5, 7);
  add_residual_block(b, "x0", "blk", 32, true, "y");
  b_output(b, "y");
  check_graph(b);
}

/* A stem of `stem_in` -> 16 channels at h x w, then two residual blocks of 16 channels,
 * the second with its Add's operands swapped. */
static builder *two_residual_blocks(const char *what, int64_t stem_in, int64_t h, int64_t w) {
  builder *b = b_new(what);
  add_stem(b, stem_in, 16, h, w);
  add_residual_block(b, "x0", "blk1", 16, false, "y1");
  add_residual_block(b, "y1", "blk2", 16, true, "y");
  b_output(b, "y");
  return b;
}

static void test_residual_two_blocks_chained(void **state) { check_graph(two_residual_blocks(__func__, 3, 6, 6)); }

/* The residual x0 is also read after the Add (by a node, not as a graph output):
 * the sum must not be done in x0's buffer. */
static void test_residual_read_after_add(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 5, 24, 6, 6);
  add_residual_block(b, "x0", "blk", 24, false, "y");
  b_node(b, "Sigmoid", IN("x0"), OUT("z"), NULL);
  b_output(b, "y");
  b_output(b, "z");
  check_graph(b);
}

static void test_residual_read_after_add_swapped_by_conv(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 32, 6, 6);
  add_residual_block(b, "x0", "blk", 32, true, "y");
  b_random(b, "late_w", DIMS(8, 32, 1, 1), -0.5f, 0.5f);
  b_node(b, "Conv", IN("x0", "late_w"), OUT("z"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_output(b, "y");
  b_output(b, "z");
  check_graph(b);
}

/* The residual is a graph output as well. */
static void test_residual_is_graph_output(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 5, 16, 6, 6);
  add_residual_block(b, "x0", "blk", 16, false, "y");
  b_output(b, "y");
  b_output(b, "x0");
  check_graph(b);
}

/* The residual is a graph input (never summed into in place: it is the caller's array). */
static void test_residual_is_graph_input(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x0", DIMS(0, 24, 6, 6));
  add_residual_block(b, "x0", "blk", 24, false, "y");
  b_output(b, "y");
  check_graph(b);
}

/* Regression: a float-to-float Cast is a view of its input, but the fusion did not know
 * it: the sum post-op added the Conv's output in place into the Cast's buffer, which is
 * y's (still read by the Mul), or the caller's input array. A dilated 3x3 Conv over
 * one channel writes the plain layout, so no reorder copy hid it. */
static void add_cast_residual(builder *b, const char *y) {
  b_random(b, "w", DIMS(1, 1, 3, 3), -0.5f, 0.5f);
  b_node(b, "Cast", IN(y), OUT("z"), ATTRS(A_INT("to", 1)));
  b_node(b, "Conv", IN(y, "w"), OUT("c"),
         ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 2, 2, 2, 2), A_INTS("dilations", 2, 2)));
  b_node(b, "Add", IN("c", "z"), OUT("s"), NULL);
  b_node(b, "Mul", IN("s", y), OUT("out"), NULL);
  b_output(b, "out");
}

static void test_residual_through_cast(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 1, 9, 9));
  b_node(b, "Relu", IN("x"), OUT("y"), NULL);
  add_cast_residual(b, "y");
  check_graph(b);
}

static void test_residual_cast_of_graph_input(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 1, 9, 9));
  add_cast_residual(b, "x");
  check_graph(b);
}

/* Regression: a BatchNormalization in training mode (one output) was folded into the
 * Conv with its running statistics, where it normalizes by the batch's own. */
static void test_error_batchnorm_training_mode(void **state) {
  builder *b = b_new(__func__);
  b->opset = 14;
  b_input(b, "x", DIMS(0, 4, 5, 5));
  b_random(b, "w", DIMS(4, 4, 1, 1), -0.5f, 0.5f);
  b_random(b, "scale", DIMS(4), 0.5f, 1.5f);
  b_random(b, "shift", DIMS(4), -0.5f, 0.5f);
  b_random(b, "mean", DIMS(4), -0.5f, 0.5f);
  b_random(b, "var", DIMS(4), 0.5f, 1.5f);
  b_node(b, "Conv", IN("x", "w"), OUT("c"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_node(b, "BatchNormalization", IN("c", "scale", "shift", "mean", "var"), OUT("y"), ATTRS(A_INT("training_mode", 1)));
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"training_mode", NULL});
}

/* Regression: opset 18 moved ReduceMean's axes to an input (and added
 * noop_with_empty_axes) and gave Pad an axes input; both were ignored, so the mean was
 * taken over every axis and the pads landed on the wrong axes. */
static void test_reduce_mean_opset18_axes_input(void **state) {
  builder *b = b_new(__func__);
  b->opset = 18;
  b_input(b, "x", DIMS(0, 4, 3, 5));
  b_ints(b, "axes", 2, (const int64_t[]){-1, 2});
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "ReduceMean", IN("r", "axes"), OUT("y"), ATTRS(A_INT("keepdims", 0)));
  b_output(b, "y");
  check_graph(b);
}

static void test_reduce_mean_opset18_noop_with_empty_axes(void **state) {
  builder *b = b_new(__func__);
  b->opset = 18;
  b_input(b, "x", DIMS(0, 4, 3, 5));
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "ReduceMean", IN("r"), OUT("y"), ATTRS(A_INT("noop_with_empty_axes", 1)));
  b_output(b, "y");
  check_graph(b);
}

/* Regression: a mean over axes that are already 1 long (a squeeze-excitation's
 * [N, C, 1, 1]) was refused: oneDNN's reduction wants an axis to reduce. */
static void test_reduce_mean_over_unit_axes(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 6, 1, 1));
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "ReduceMean", IN("r"), OUT("y"), ATTRS(A_INTS("axes", 2, 3), A_INT("keepdims", 0)));
  b_output(b, "y");
  check_graph(b);
}

static void test_pad_opset18_axes_input(void **state) {
  builder *b = b_new(__func__);
  b->opset = 18;
  b_input(b, "x", DIMS(0, 3, 4, 5));
  b_ints(b, "pads", 4, (const int64_t[]){1, 2, 0, 3}); /* axis 3: 1 before, 0 after; axis 1: 2 and 3 */
  b_ints(b, "axes", 2, (const int64_t[]){-1, 1});
  b_scalar(b, "value", 0.25f);
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Pad", IN("r", "pads", "value", "axes"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* Pad modes "edge" and "reflect" (torch's replicate and reflect padding): the border
 * is copied from the output itself, axis by axis, so a corner reads an axis already
 * padded. Three axes padded, one by nothing before and the most reflect allows after. */
static void pad_modes(const char *what, const char *mode) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 3, 5, 4));
  b_ints(b, "pads", 8, (const int64_t[]){0, 1, 2, 0, 0, 0, 4, 3});
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Pad", IN("r", "pads"), OUT("p"), ATTRS(A_STR("mode", mode)));
  b_node(b, "Sigmoid", IN("p"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_pad_edge(void **state) { pad_modes(__func__, "edge"); }
static void test_pad_reflect(void **state) { pad_modes(__func__, "reflect"); }

/* Reflect needs each pad below its axis's size (ONNX and torch alike). */
static void test_error_pad_reflect_too_wide(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 4, 4));
  b_ints(b, "pads", 8, (const int64_t[]){0, 0, 4, 0, 0, 0, 0, 0});
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Pad", IN("r", "pads"), OUT("y"), ATTRS(A_STR("mode", "reflect")));
  b_output(b, "y");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"axis 2 of size 4", "reflect", NULL});
}

/* Slice with steps above 1 on a tensor computed at run time: a window whose strides
 * are the input's times the steps. */
static void test_slice_steps(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4, 9, 7));
  b_ints(b, "starts", 3, (const int64_t[]){1, 0, -6});
  b_ints(b, "ends", 3, (const int64_t[]){1000, 9, 6});
  b_ints(b, "axes", 3, (const int64_t[]){1, 2, 3});
  b_ints(b, "steps", 3, (const int64_t[]){2, 3, 2});
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Slice", IN("r", "starts", "ends", "axes", "steps"), OUT("s"), NULL); /* [N, 2, 3, 3] */
  b_node(b, "Tanh", IN("s"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* torch.onnx writes F.pad's list reversed by a Slice with step -1 (from the last
 * element to INT64_MIN): folded at load, its result must be the Pad's pads. */
static void test_pad_pads_reversed_by_slice(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 5, 4));
  b_ints(b, "k", 8, (const int64_t[]){1, 2, 0, 0, 2, 1, 0, 0}); /* reversed: axis 2 gets 1, 2; axis 3 2, 1 */
  b_ints(b, "starts", 1, (const int64_t[]){-1});
  b_ints(b, "ends", 1, (const int64_t[]){INT64_MIN});
  b_ints(b, "axes", 1, (const int64_t[]){0});
  b_ints(b, "steps", 1, (const int64_t[]){-1});
  b_node(b, "Slice", IN("k", "starts", "ends", "axes", "steps"), OUT("pads"), NULL);
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Pad", IN("r", "pads"), OUT("y"), ATTRS(A_STR("mode", "reflect")));
  b_output(b, "y");
  check_graph(b);
}

/* A negative step on a tensor computed at run time is refused, naming why. */
static void test_error_slice_negative_step_at_run_time(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4, 9));
  b_ints(b, "starts", 1, (const int64_t[]){-1});
  b_ints(b, "ends", 1, (const int64_t[]){INT64_MIN});
  b_ints(b, "axes", 1, (const int64_t[]){2});
  b_ints(b, "steps", 1, (const int64_t[]){-1});
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Slice", IN("r", "starts", "ends", "axes", "steps"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"negative steps", "Slice", NULL});
}

/* The element-wise ops torch exports for abs, neg, log, elu, reciprocal and the binary
 * maximum and minimum, on a broadcast second operand and a broadcast first one. */
static void test_eltwise_and_minmax_ops(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4, 5));
  b_input(b, "v", DIMS(0, 1, 5));
  b_node(b, "Abs", IN("x"), OUT("a"), NULL);
  b_node(b, "Exp", IN("a"), OUT("ea"), NULL);
  b_node(b, "Log", IN("ea"), OUT("l"), NULL);
  b_node(b, "Reciprocal", IN("ea"), OUT("rc"), NULL);
  b_node(b, "Elu", IN("x"), OUT("el"), ATTRS(A_FLOAT("alpha", 0.7f)));
  b_node(b, "Neg", IN("el"), OUT("ne"), NULL);
  b_node(b, "Max", IN("ne", "v"), OUT("mx"), NULL);
  b_node(b, "Min", IN("v", "rc"), OUT("mn"), NULL);
  b_node(b, "Add", IN("mx", "mn"), OUT("s"), NULL);
  b_node(b, "Sub", IN("v", "l"), OUT("d"), NULL); /* a broadcast first operand: swapped, then negated */
  b_node(b, "Div", IN("v", "ea"), OUT("q"), NULL); /* swapped, then inverted */
  b_node(b, "Add", IN("s", "d"), OUT("t"), NULL);
  b_node(b, "Add", IN("t", "q"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* Gelu (opset 20) with both of its formulas. */
static void test_gelu_opset20(void **state) {
  builder *b = b_new(__func__);
  b->opset = 20;
  b->in_lo = -4.0f, b->in_hi = 4.0f;
  b_input(b, "x", DIMS(0, 3, 4, 5));
  b_node(b, "Gelu", IN("x"), OUT("y"), NULL);
  b_node(b, "Gelu", IN("x"), OUT("z"), ATTRS(A_STR("approximate", "tanh")));
  b_output(b, "y");
  b_output(b, "z");
  check_graph(b);
}

/* An optional input left out by an empty name is absent: Squeeze drops every axis of
 * length 1 (here the two trailing ones; the batch axis too at batch 1). */
static void test_squeeze_axes_left_out(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 6, 1, 1));
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Squeeze", IN("r", ""), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* A model newer than the op definitions the engine follows is refused. */
static void test_error_opset_too_new(void **state) {
  builder *b = b_new(__func__);
  b->opset = 23; /* the engine follows op definitions up to opset 22 (ENGINE_MAX_OPSET) */
  b_input(b, "x", DIMS(0, 3));
  b_node(b, "Relu", IN("x"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"opset 23", NULL});
}

/* An input whose height and width are dynamic (an export with dynamic_axes on them) is
 * refused with that reason; it was "too large (-1 elements per item)". */
static void test_error_dynamic_spatial_input(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, -1, -1));
  b_node(b, "GlobalAveragePool", IN("x"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"dimension 2 is dynamic", NULL});
}

/* Before opset 7, Add/Mul broadcast along an `axis` attribute and Concat's axis
 * defaulted to 1: such a model is refused, never read with opset 7's rules. */
static void test_error_opset_too_old(void **state) {
  builder *b = b_new(__func__);
  b->opset = 6;
  b_input(b, "x", DIMS(0, 3));
  b_node(b, "Relu", IN("x"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"opset 6", "oldest", NULL});
}

/* Dropout in training mode drops at random: refused, never run as an Identity. */
static void test_error_dropout_training_mode(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3));
  b_scalar(b, "ratio", 0.5f);
  b_const(b, "training", INFERD_DTYPE_BOOL, 0, NULL, &(unsigned char){1});
  b_node(b, "Dropout", IN("x", "ratio", "training"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"Dropout", "training_mode", NULL});
}

/* Training mode with a ratio of 0 keeps every element unscaled: an Identity. torchvision's
 * Swin exports that (F.dropout(attn, p=0.0) without training=False). */
static builder *dropout_graph(const char *what, float ratio, unsigned char training) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 3));
  b_scalar(b, "ratio", ratio);
  b_const(b, "training", INFERD_DTYPE_BOOL, 0, NULL, &training);
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Dropout", IN("r", "ratio", "training"), OUT("y"), NULL);
  b_output(b, "y");
  return b;
}

static void test_dropout_training_mode_ratio_zero(void **state) { check_graph(dropout_graph(__func__, 0.0f, 1)); }

/* ScatterND on constants (the slice assignments of Swin's attention mask) folds at load,
 * replacing whole rows; with opset 16's reduction "add" a repeated index adds twice. */
static void test_scatternd_folded(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 4));
  b_random(b, "data", DIMS(3, 4), -1.0f, 1.0f);
  b_const(b, "rows", INFERD_DTYPE_INT64, 2, (const int64_t[]){2, 1}, (const int64_t[]){2, -3});
  b_random(b, "new_rows", DIMS(2, 4), 2.0f, 3.0f);
  b_node(b, "ScatterND", IN("data", "rows", "new_rows"), OUT("s"), NULL);
  b_node(b, "Add", IN("x", "s"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);

  b = b_new(__func__);
  b->opset = 16;
  b_input(b, "x", DIMS(0, 3, 4));
  b_random(b, "data", DIMS(3, 4), -1.0f, 1.0f);
  b_const(b, "cells", INFERD_DTYPE_INT64, 2, (const int64_t[]){3, 2}, (const int64_t[]){1, 2, 1, 2, 0, -1});
  b_random(b, "values", DIMS(3), 2.0f, 3.0f);
  b_node(b, "ScatterND", IN("data", "cells", "values"), OUT("s"), ATTRS(A_STR("reduction", "add")));
  b_node(b, "Mul", IN("x", "s"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* An index outside its axis is refused (ONNX Runtime refuses it too), never written
 * past the data. */
static void test_error_scatternd_index_out_of_range(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 4));
  b_random(b, "data", DIMS(3, 4), -1.0f, 1.0f);
  b_const(b, "rows", INFERD_DTYPE_INT64, 2, (const int64_t[]){1, 1}, (const int64_t[]){3});
  b_random(b, "new_rows", DIMS(1, 4), 2.0f, 3.0f);
  b_node(b, "ScatterND", IN("data", "rows", "new_rows"), OUT("s"), NULL);
  b_node(b, "Add", IN("x", "s"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"ScatterND", "index 3 out of range", NULL});
}

/* Einsum as a matrix product: MaxViT's two (q times k transposed, then the weights
 * times v), an operand read in another axis order, a constant second operand broadcast
 * over the batch, and the output's rows from the second operand (the operands swapped). */
static void einsum_case(const char *what, const char *eq, int ra, const int64_t *da, int rb, const int64_t *db,
                        bool b_const) {
  builder *b = b_new(what);
  b_input(b, "a", ra, da);
  if (b_const) b_random(b, "b", rb, db, -1.0f, 1.0f);
  else b_input(b, "b", rb, db);
  b_node(b, "Einsum", IN("a", "b"), OUT("y"), ATTRS(A_STR("equation", eq)));
  b_output(b, "y");
  check_graph(b);
}

static void test_einsum_matrix_products(void **state) {
  einsum_case(__func__, "bghid,bghjd->bghij", DIMS(0, 2, 3, 5, 4), DIMS(0, 2, 3, 6, 4), false);
  einsum_case(__func__, "B G H I J, B G H J D -> B G H I D", DIMS(0, 2, 3, 5, 6), DIMS(0, 2, 3, 6, 4), false);
  einsum_case(__func__, "nbji,nbjk->nbik", DIMS(0, 2, 4, 5), DIMS(0, 2, 4, 7), false);
  einsum_case(__func__, "nibj,nbjk->nbik", DIMS(0, 5, 2, 4), DIMS(0, 2, 4, 7), false);
  einsum_case(__func__, "nbij,jk->nbik", DIMS(0, 2, 5, 4), DIMS(4, 7), true);
  einsum_case(__func__, "nij,kj->nik", DIMS(0, 5, 4), DIMS(7, 4), true);
  einsum_case(__func__, "nbij,nbjk->nbki", DIMS(0, 2, 5, 4), DIMS(0, 2, 4, 7), false);
}

/* What is not a matrix product is refused naming the equation and why. */
static void einsum_refused(const char *what, const char *eq, const char *needle) {
  builder *b = b_new(what);
  b_input(b, "a", DIMS(0, 4, 4));
  b_input(b, "b", DIMS(0, 4, 4));
  b_node(b, "Einsum", IN("a", "b"), OUT("y"), ATTRS(A_STR("equation", eq)));
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"Einsum", eq, needle, NULL});
}

static void test_error_einsum_not_a_matrix_product(void **state) {
  einsum_refused(__func__, "nij,njk->nk", "not a matrix product");
  einsum_refused(__func__, "nii,nik->nik", "diagonal");
  einsum_refused(__func__, "n...j,njk->nk", "ellipsis");
  einsum_refused(__func__, "nij,njk", "explicit output");
}

/* The four comparisons at run time (bools in the plain layout) feeding Where: with a
 * constant broadcast second, broadcast first (run mirrored: k < x as x > k), along some
 * axes only (Where copies such a constant out to the full shape at load), a scalar. */
static void test_comparisons_and_where(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 5));
  b_random(b, "row", DIMS(5), -0.5f, 0.5f);
  b_random(b, "col", DIMS(3, 1), -0.5f, 0.5f);
  b_scalar(b, "zero", 0.0f);
  b_node(b, "Greater", IN("x", "row"), OUT("c1"), NULL);
  b_node(b, "Where", IN("c1", "x", "zero"), OUT("w1"), NULL);
  b_node(b, "Less", IN("row", "x"), OUT("c2"), NULL);
  b_node(b, "Where", IN("c2", "w1", "row"), OUT("w2"), NULL);
  b_node(b, "LessOrEqual", IN("col", "x"), OUT("c3"), NULL);
  b_node(b, "Where", IN("c3", "col", "w2"), OUT("w3"), NULL);
  b_node(b, "Sigmoid", IN("x"), OUT("s"), NULL);
  b_node(b, "GreaterOrEqual", IN("s", "w3"), OUT("c4"), NULL);
  b_node(b, "Where", IN("c4", "s", "x"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* A constant condition (a mask) selecting between run-time X and a constant Y, and a
 * comparison of int64 constants folded at load. */
static void test_where_constant_condition(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 2, 3));
  b_const(b, "mask", INFERD_DTYPE_BOOL, 2, (const int64_t[]){2, 3}, (const unsigned char[]){1, 0, 0, 1, 1, 0});
  b_ints(b, "i", 3, (const int64_t[]){4, -1, 7});
  b_ints(b, "j", 3, (const int64_t[]){4, 2, 6});
  b_random(b, "other", DIMS(3), 5.0f, 6.0f);
  b_node(b, "Where", IN("mask", "x", "other"), OUT("w"), NULL);
  b_node(b, "GreaterOrEqual", IN("i", "j"), OUT("keep"), NULL); /* {1, 0, 1} */
  b_node(b, "Where", IN("keep", "w", "other"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* Where folded at load with a condition of lower rank than X and Y: the broadcast shape
 * was computed over the condition's own rank and dims while it overwrote them, and the
 * model was refused ("shapes do not broadcast"). */
static void test_where_folded_lower_rank_condition(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 2, 3));
  b_const(b, "pick", INFERD_DTYPE_BOOL, 1, (const int64_t[]){3}, (const unsigned char[]){0, 1, 1});
  b_random(b, "p", DIMS(2, 3), -1.0f, 1.0f);
  b_random(b, "q", DIMS(2, 3), 2.0f, 3.0f);
  b_node(b, "Where", IN("pick", "p", "q"), OUT("w"), NULL);
  b_node(b, "Add", IN("x", "w"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* A run-time operand broadcast along some axes only is refused (Where's own step reads
 * each operand whole or as one element). */
static void test_error_where_runtime_operand_broadcast(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 5));
  b_node(b, "ReduceMean", IN("x"), OUT("m"), ATTRS(A_INTS("axes", 2), A_INT("keepdims", 1)));
  b_node(b, "Greater", IN("x", "m"), OUT("c"), NULL);
  b_node(b, "Where", IN("c", "x", "m"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"Where", "input 2 is broadcast", NULL});
}

static void test_dropout_training_mode_false(void **state) { check_graph(dropout_graph(__func__, 0.5f, 0)); }

/* The exported GELU chain whose Div output is also a graph output is not fused (it
 * would never be computed); alone, Erf is an op the engine does not run. */
static void test_error_gelu_chain_div_is_output(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3));
  b_scalar(b, "sqrt2", 1.41421356f);
  b_scalar(b, "one", 1.0f);
  b_scalar(b, "half", 0.5f);
  b_node(b, "Div", IN("x", "sqrt2"), OUT("d"), NULL);
  b_node(b, "Erf", IN("d"), OUT("e"), NULL);
  b_node(b, "Add", IN("e", "one"), OUT("a"), NULL);
  b_node(b, "Mul", IN("x", "a"), OUT("m"), NULL);
  b_node(b, "Mul", IN("m", "half"), OUT("y"), NULL);
  b_output(b, "y");
  b_output(b, "d");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"Erf", NULL});
}

/* The GELU chain with a one-element constant of rank 3: broadcasting makes the [N,3]
 * input's result [1,N,3], which the fused Gelu (the input's shape) would not be. Not
 * fused; alone, Erf is an op the engine does not run. */
static void test_error_gelu_chain_rank3_constant(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3));
  b_const(b, "sqrt2", INFERD_DTYPE_FLOAT, DIMS(1, 1, 1), &(float){1.41421356f});
  b_scalar(b, "one", 1.0f);
  b_scalar(b, "half", 0.5f);
  b_node(b, "Div", IN("x", "sqrt2"), OUT("d"), NULL);
  b_node(b, "Erf", IN("d"), OUT("e"), NULL);
  b_node(b, "Add", IN("e", "one"), OUT("a"), NULL);
  b_node(b, "Mul", IN("x", "a"), OUT("m"), NULL);
  b_node(b, "Mul", IN("m", "half"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"Erf", NULL});
}

/* The GELU chain with a divisor that is near sqrt(2) but not it (1.41: 3e-3 off) is
 * another function: not fused; alone, Erf is an op the engine does not run. */
static void test_error_gelu_chain_not_sqrt2(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3));
  b_scalar(b, "sqrt2", 1.41f);
  b_scalar(b, "one", 1.0f);
  b_scalar(b, "half", 0.5f);
  b_node(b, "Div", IN("x", "sqrt2"), OUT("d"), NULL);
  b_node(b, "Erf", IN("d"), OUT("e"), NULL);
  b_node(b, "Add", IN("e", "one"), OUT("a"), NULL);
  b_node(b, "Mul", IN("x", "a"), OUT("m"), NULL);
  b_node(b, "Mul", IN("m", "half"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"Erf", NULL});
}

/* A Conv whose bias is not a constant when the passes run (a Reshape of one, folded only
 * when a plan is compiled) keeps its BatchNormalization: folding would take the bias
 * for 0. The BatchNormalization then runs as its own op. */
static void test_conv_bias_reshaped_then_batchnorm(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4, 5, 5));
  b_random(b, "w", DIMS(4, 4, 1, 1), -0.5f, 0.5f);
  b_random(b, "bias_2d", DIMS(1, 4), 1.0f, 2.0f);
  b_ints(b, "bias_shape", 1, (const int64_t[]){4});
  b_random(b, "scale", DIMS(4), 0.5f, 1.5f);
  b_random(b, "shift", DIMS(4), -0.5f, 0.5f);
  b_random(b, "mean", DIMS(4), -0.5f, 0.5f);
  b_random(b, "var", DIMS(4), 0.5f, 1.5f);
  b_node(b, "Reshape", IN("bias_2d", "bias_shape"), OUT("bias"), NULL);
  b_node(b, "Conv", IN("x", "w", "bias"), OUT("c"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_node(b, "BatchNormalization", IN("c", "scale", "shift", "mean", "var"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* Regression: after the load-time plan, a constant of 4 KB or more lost its plain data
 * once it had a copy in the weight cache, even when shape arithmetic also reads it:
 * every other batch size's plan failed with "constant data was released". */
static void test_constant_both_operand_and_folded(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 2048));
  b_random(b, "c", DIMS(2048), -1.0f, 1.0f);
  b_ints(b, "shape", 2, (const int64_t[]){1, 2048});
  b_node(b, "Add", IN("x", "c"), OUT("a"), NULL);
  b_node(b, "Reshape", IN("c", "shape"), OUT("c2"), NULL);
  b_node(b, "Mul", IN("a", "c2"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* Regression: a weight that two nodes read two ways (as B of a Gemm with transB=1 and
 * of one with transB=0) lost its plain data after its first reorder, so the second
 * node was refused with "no copy left to reorder from". */
static void test_weight_read_two_ways(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 256));
  b_random(b, "w", DIMS(256, 256), -0.1f, 0.1f);
  b_node(b, "Gemm", IN("x", "w"), OUT("a"), ATTRS(A_INT("transB", 1)));
  b_node(b, "Gemm", IN("a", "w"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static long rss_kb(void) {
  long size = 0, pages = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  assert_non_null(f);
  assert_int_equal(fscanf(f, "%ld %ld", &size, &pages), 2);
  fclose(f);
  return pages * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Eight 3x3 Conv(256 -> 256), each followed by a BatchNormalization when `bn`. */
static builder *conv_stack(const char *what, bool bn) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 256, 4, 4));
  const char *prev = "x";
  static char outs[8][B_NAME];
  for (int i = 0; i < 8; i++) {
    char w[B_NAME], c[B_NAME], p[4][B_NAME];
    snprintf(w, sizeof w, "w%d", i);
    snprintf(c, sizeof c, "c%d", i);
    snprintf(outs[i], sizeof outs[i], "y%d", i);
    b_random(b, w, DIMS(256, 256, 3, 3), -0.02f, 0.02f);
    const char *out = bn ? c : outs[i];
    b_node(b, "Conv", IN(prev, w), OUT(out), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
    if (bn) {
      for (int k = 0; k < 4; k++) {
        snprintf(p[k], sizeof p[k], "bn%d_%d", i, k);
        b_random(b, p[k], DIMS(256), k == 3 ? 0.5f : -0.5f, 1.5f);
      }
      b_node(b, "BatchNormalization", IN(c, p[0], p[1], p[2], p[3]), OUT(outs[i]), NULL);
    }
    prev = outs[i];
  }
  b_output(b, prev);
  return b;
}

/* How much loading b's model adds to the process's RSS, in KB. Frees b. */
static long load_growth_kb(builder *b, long *weights_kb) {
  size_t size;
  void *buf = b_pack(b, &size);
  inferd_model *m = NULL;
  inferd_status st = {0};
  long before = rss_kb();
  if (inferd_model_load_memory(buf, size, NULL, &m, &st) != INFERD_OK) fail_msg("%s: load: %s", b->what, st.message);
  long growth = rss_kb() - before;
  *weights_kb = (long)(inferd_model_weights_bytes(m) / 1024);
  inferd_model_free(m);
  free(buf);
  b_free(b);
  return growth;
}

/* Regression: the weights of the Convs that BatchNormalizations were folded into stayed
 * in memory beside their folded copies, so such a model held its weights twice. Its
 * load must add about what the same model without them adds (18 MB of weights). */
static void test_batchnorm_fold_releases_originals(void **state) {
  long weights_kb, unused;
  load_growth_kb(conv_stack(__func__, false), &unused); /* oneDNN's first kernels, libraries' pages */
  long plain = load_growth_kb(conv_stack(__func__, false), &weights_kb);
  long folded = load_growth_kb(conv_stack(__func__, true), &unused);
  if (folded > plain + weights_kb / 2)
    fail_msg("loading added %ld KB with BatchNormalizations folded, %ld KB without (weights: %ld KB)", folded, plain,
             weights_kb);
}

/* Weights written as float_data (typed repeated fields, as some exporters write them)
 * run as raw_data ones do, and are held once: loading adds about what the raw_data
 * model adds. Regression: they were copied out of the unpacked message, which kept its
 * own array, so the model held its weights twice. */
static void test_typed_data_weights_held_once(void **state) {
  long weights_kb, unused;
  load_growth_kb(conv_stack(__func__, false), &unused); /* oneDNN's first kernels, libraries' pages */
  long raw = load_growth_kb(conv_stack(__func__, false), &weights_kb);
  builder *b = conv_stack(__func__, false);
  b->typed_data = true;
  long typed = load_growth_kb(b, &unused);
  if (typed > raw + weights_kb / 2)
    fail_msg("loading added %ld KB with float_data weights, %ld KB with raw_data (weights: %ld KB)", typed, raw,
             weights_kb);
  b = b_new(__func__); /* and they compute the same: a Conv, a Reshape by an int64_data shape */
  b->typed_data = true;
  b_input(b, "x", DIMS(0, 3, 4, 4));
  b_random(b, "w", DIMS(5, 3, 3, 3), -1.0f, 1.0f);
  b_ints(b, "shape", 2, (const int64_t[]){0, -1});
  b_node(b, "Conv", IN("x", "w"), OUT("c"), ATTRS(A_INTS("kernel_shape", 3, 3)));
  b_node(b, "Reshape", IN("c", "shape"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* An export without dynamic axes: the input declares batch 1 (a number) and the
 * Reshape's target [1, 16] has it baked in. */
static builder *fixed_batch_graph(const char *what) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(1, 4, 2, 2));
  b_ints(b, "shape", 2, (const int64_t[]){1, 16});
  b_node(b, "Reshape", IN("x", "shape"), OUT("r"), NULL);
  b_node(b, "Softmax", IN("r"), OUT("y"), ATTRS(A_INT("axis", 1)));
  b_output(b, "y");
  return b;
}

/* Regression: the batch axis was made dynamic whatever the model declared, so batch 4
 * ran through the Reshape to [1, 16] and gave one softmax over the four items. The
 * declared batch is now the only one that runs, and inferd_model_input says which. */
static void test_fixed_batch_runs_only_that_batch(void **state) {
  static const int one[] = {1};
  check_graph_with(fixed_batch_graph(__func__), NULL, one, 1, false);
  builder *b = fixed_batch_graph(__func__);
  inferd_model *m = load_or_fail(b, &tuned_params); /* asked to tune for 4: it is tuned for 1 */
  inferd_session *s = NULL;
  inferd_status st = {0};
  assert_int_equal(inferd_session_new(m, NULL, &s, &st), INFERD_OK);
  float x[4 * 16] = {0}, y[4 * 16];
  const float *in[1] = {x};
  float *out[1] = {y};
  assert_int_equal(inferd_session_run(s, 4, in, out, &st), INFERD_INVALID_ARG);
  if (!strstr(st.message, "fixed batch size of 1")) fail_msg("message: %s", st.message);
  assert_int_equal(inferd_session_run(s, 1, in, out, &st), INFERD_OK);
  inferd_session_free(s);
  inferd_model_free(m);
  b_free(b);
}

/* Regression: Add(Conv output [N, C, 1, 1], f [N, C, H, W]) was fused as a residual sum
 * and then refused ("does not broadcast"): the Add's output has f's shape, larger than
 * the Conv's. The Conv now writes its own output and a broadcasting Add (with the Relu
 * after it) makes the node's. Plain and blocked (tuned for batch 4) layouts. */
static builder *conv_output_broadcast_graph(const char *what) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 16, 6, 5));
  b_random(b, "w", DIMS(16, 16, 1, 1), -0.5f, 0.5f);
  b_random(b, "bias", DIMS(16), -0.5f, 0.5f);
  b_node(b, "Relu", IN("x"), OUT("f"), NULL);
  b_node(b, "GlobalAveragePool", IN("f"), OUT("g"), NULL);
  b_node(b, "Conv", IN("g", "w", "bias"), OUT("c"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_node(b, "Add", IN("c", "f"), OUT("s"), NULL);
  b_node(b, "Relu", IN("s"), OUT("y"), NULL);
  b_output(b, "y");
  return b;
}

static void test_residual_add_broadcasts_conv_output(void **state) {
  check_graph(conv_output_broadcast_graph(__func__));
  check_graph_tuned(conv_output_broadcast_graph(__func__));
}

/* Regression: a residual of lower rank than the Conv's output ([C, H, W] added to
 * [N, C, H, W], right-aligned) was refused. */
static void test_residual_lower_rank(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 8, 6, 6));
  b_random(b, "w", DIMS(8, 8, 3, 3), -0.3f, 0.3f);
  b_node(b, "Relu", IN("x"), OUT("f"), NULL);
  b_node(b, "ReduceMean", IN("f"), OUT("r"), ATTRS(A_INTS("axes", 0), A_INT("keepdims", 0)));
  b_node(b, "Conv", IN("x", "w"), OUT("c"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Add", IN("c", "r"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* Regression: a float division by zero folded at plan time gave 0, where run time (and
 * IEEE 754) give inf: here x / (1 / 0) must be 0, not x / 0. */
static void test_fold_float_division_by_zero(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 5));
  b_scalar(b, "one", 1.0f);
  b_scalar(b, "zero", 0.0f);
  b_node(b, "Div", IN("one", "zero"), OUT("inf"), NULL);
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Div", IN("r", "inf"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* A squeeze-excitation block on blocked layouts (tuned for batch 4): the [N, 32, 1, 1]
 * scales stay in the blocked layout their Conv wrote, and the broadcast Mul takes both
 * operands as they are (ops_binary.c). */
static void test_blocked_squeeze_excitation(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 16, 6, 5));
  b_random(b, "w0", DIMS(32, 16, 1, 1), -0.5f, 0.5f);
  b_random(b, "w1", DIMS(32, 32, 1, 1), -0.3f, 0.3f);
  b_random(b, "b1", DIMS(32), -0.5f, 0.5f);
  b_node(b, "Conv", IN("x", "w0"), OUT("c0"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_node(b, "GlobalAveragePool", IN("c0"), OUT("pooled"), NULL);
  b_node(b, "Conv", IN("pooled", "w1", "b1"), OUT("c1"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_node(b, "Sigmoid", IN("c1"), OUT("scale"), NULL);
  b_node(b, "Mul", IN("c0", "scale"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph_tuned(b);
}

/* The line of a step profile that ends with node `name`, copied into line[]. */
static bool profile_line(const char *profile, const char *name, char *line, size_t size) {
  char tail[64];
  snprintf(tail, sizeof tail, " %s\n", name);
  const char *end = strstr(profile, tail);
  if (!end) return false;
  const char *start = end;
  while (start > profile && start[-1] != '\n') start--;
  snprintf(line, size, "%.*s", (int)(end + strlen(tail) - start), start);
  return true;
}

/* Elements of one batch item of a model input or output (its dims after the batch axis). */
static size_t item_elements(const inferd_tensor_info *info) {
  size_t n = 1;
  for (int i = 1; i < info->rank; i++) n *= (size_t)info->dims[i];
  return n;
}

/* Runs b's model (loaded with `params`) once at `batch` with one thread, on zeros, and
 * writes its profile: the steps of that plan (`steps`) or the per-op summary. With
 * `warm`, a 2-thread plan at that batch runs first, so that its weight layouts exist.
 * Frees b. */
static void run_profile(builder *b, const inferd_model_params *params, int batch, bool warm, bool steps,
                        char *profile, size_t size) {
  inferd_model *m = load_or_fail(b, params);
  int n_in = inferd_model_num_inputs(m), n_out = inferd_model_num_outputs(m);
  float *ins[B_MAX_IO], *outs[B_MAX_IO];
  for (int k = 0; k < n_in + n_out; k++) {
    inferd_tensor_info info;
    assert_int_equal(k < n_in ? inferd_model_input(m, k, &info) : inferd_model_output(m, k - n_in, &info), INFERD_OK);
    float *buf = calloc(item_elements(&info) * (size_t)batch, sizeof *buf);
    assert_non_null(buf);
    if (k < n_in) ins[k] = buf;
    else outs[k - n_in] = buf;
  }
  inferd_session *s = NULL;
  inferd_status st = {0};
  for (int pass = warm ? 0 : 1; pass < 2; pass++) {
    inferd_session_params sp = {.threads = pass == 0 ? 2 : 1, .profile = pass == 1};
    assert_int_equal(inferd_session_new(m, &sp, &s, &st), INFERD_OK);
    if (inferd_session_run(s, batch, (const float *const *)ins, outs, &st) != INFERD_OK)
      fail_msg("%s: run: %s", b->what, st.message);
    if (pass == 1 && steps) inferd_session_profile_steps(s, batch, 40, profile, size);
    else if (pass == 1) inferd_session_profile(s, profile, size);
    inferd_session_free(s);
  }
  for (int k = 0; k < n_in; k++) free(ins[k]);
  for (int k = 0; k < n_out; k++) free(outs[k]);
  inferd_model_free(m);
  b_free(b);
}

/* Fails when a named step of `profile` is missing or runs on a oneDNN reference kernel. */
static void expect_steps_off_reference(const char *profile, const char *const *nodes, int batch) {
  char line[256];
  for (; *nodes; nodes++) {
    if (!profile_line(profile, *nodes, line, sizeof line)) fail_msg("no step for %s:\n%s", *nodes, profile);
    if (strstr(line, "ref")) fail_msg("%s runs on oneDNN's reference kernel at batch %d: %s", *nodes, batch, line);
  }
}

/* A 3x3 stride-2 convolution between blocked ones (ResNet's downsampling): from batch 4
 * it alone runs nhwc (ops_conv.c, conv_wants_blocked), with reorders on both sides. */
static builder *downsampling_graph(const char *what) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 16, 9, 10));
  b_random(b, "w0", DIMS(16, 16, 1, 1), -0.4f, 0.4f);
  b_random(b, "w1", DIMS(32, 16, 3, 3), -0.2f, 0.2f);
  b_random(b, "w2", DIMS(32, 32, 1, 1), -0.3f, 0.3f);
  b_node(b, "Conv", IN("x", "w0"), OUT("c0"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_node(b, "Relu", IN("c0"), OUT("r0"), NULL);
  b_node(b, "Conv", IN("r0", "w1"), OUT("c1"),
         ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Relu", IN("c1"), OUT("r1"), NULL);
  b_node(b, "Conv", IN("r1", "w2"), OUT("y"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_output(b, "y");
  return b;
}

static void test_downsampling_conv_nhwc(void **state) {
  check_graph_tuned(downsampling_graph(__func__));
  /* the kernels: brgemm (nhwc) for the stride-2 convolution only */
  builder *b = downsampling_graph(__func__);
  inferd_model *m = load_or_fail(b, &tuned_params);
  inferd_session *s = NULL;
  inferd_status st = {0};
  assert_int_equal(inferd_session_new(m, &(inferd_session_params){.threads = 1, .profile = 1}, &s, &st), INFERD_OK);
  static float in[4 * 16 * 9 * 10], out[4 * 32 * 5 * 5];
  const float *ins[1] = {in};
  float *outs[1] = {out};
  assert_int_equal(inferd_session_run(s, 4, ins, outs, &st), INFERD_OK);
  char profile[4096], line[256];
  inferd_session_profile_steps(s, 4, 20, profile, sizeof profile);
  static const char *const nodes[] = {"Conv_0", "Conv_2", "Conv_4"};
  for (int k = 0; k < 3; k++) {
    if (!profile_line(profile, nodes[k], line, sizeof line)) fail_msg("no step for %s:\n%s", nodes[k], profile);
    bool brgemm = strstr(line, " brg") != NULL;
    if (brgemm != (k == 1)) fail_msg("%s should run %s:\n%s", nodes[k], k == 1 ? "brgemm (nhwc)" : "blocked", profile);
  }
  /* the reorders name the values they copy: r0 into nhwc, r1 back */
  static const char *const copied[] = {"(reorder of r0)", "(reorder of r1)"};
  for (int k = 0; k < 2; k++)
    if (!profile_line(profile, copied[k], line, sizeof line) || !strstr(line, " Reorder "))
      fail_msg("no step %s:\n%s", copied[k], profile);
  /* a reset forgets the runs so far; the next run is counted alone */
  inferd_session_profile_reset(s);
  inferd_session_profile_steps(s, 4, 20, profile, sizeof profile);
  assert_string_equal(profile, "");
  inferd_session_profile(s, profile, sizeof profile);
  assert_null(strstr(profile, "Conv"));
  assert_int_equal(inferd_session_run(s, 4, ins, outs, &st), INFERD_OK);
  assert_int_equal(inferd_session_run(s, 4, ins, outs, &st), INFERD_OK);
  inferd_session_profile_steps(s, 4, 20, profile, sizeof profile);
  if (!strstr(profile, "at batch 4 (2 runs)")) fail_msg("two runs since the reset:\n%s", profile);
  inferd_session_free(s);
  inferd_model_free(m);
  b_free(b);
}

/* Two residual blocks of 16 channels, each 3x3 convolution by Winograd, the second of
 * each carrying the residual sum in place. */
static void test_winograd_residual_blocks(void **state) {
  check_graph_winograd(two_residual_blocks(__func__, 16, 9, 10));
}

/* The same with Winograd's weights kept transformed */
static void test_winograd_transformed_residual_blocks(void **state) {
  check_graph_transformed(two_residual_blocks(__func__, 16, 9, 10));
}

/* The weights' bytes (inferd_model_weights_bytes) of one 3x3 convolution, 64 -> 64 at
 * 14x14, loaded for batch 4 with `params`. Frees b. */
static size_t conv_weights_bytes(const inferd_model_params *params) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 64, 14, 14));
  b_random(b, "w", DIMS(64, 64, 3, 3), -1.0f, 1.0f);
  b_node(b, "Conv", IN("x", "w"), OUT("y"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_output(b, "y");
  inferd_model *m = load_or_fail(b, params);
  size_t bytes = inferd_model_weights_bytes(m);
  inferd_model_free(m);
  b_free(b);
  return bytes;
}

/* Kept transformed, the weights take their plain copy (kept to make other blockings
 * from) and a transformed one, 16/9 or 4x their size: the weights' bytes say so, so
 * that a server's memory figures hold. By default they are held once. */
static void test_winograd_transformed_weights_counted(void **state) {
  (void)state;
  const size_t plain = 64 * 64 * 9 * sizeof(float);
  size_t direct = conv_weights_bytes(&tuned_params);
  size_t transformed = conv_weights_bytes(&transformed_params);
  if (direct < plain || direct > plain + plain / 8)
    fail_msg("by default: %zu bytes of weights for %zu plain", direct, plain);
  if (transformed < plain + plain * 16 / 9)
    fail_msg("transformed: %zu bytes of weights for %zu plain (default %zu)", transformed, plain, direct);
}

/* Whether `bytes` of weights are exactly one plain-sized copy of a 3x3 weight of `unit`
 * bytes per tap (the plain data, or one direct copy that replaced it) and a sum of
 * transformed copies, each 4x4 (F(2x2, 3x3)) or 6x6 (F(4x4, 3x3)) taps of it. A plain
 * copy counted twice or not at all leaves an odd number of taps: no such sum. */
static bool wino_bytes_exact(size_t bytes, size_t unit, int *n_copies) {
  if (bytes % unit || bytes / unit < 9) return false;
  size_t taps = bytes / unit - 9;
  for (size_t b6 = 0; b6 * 36 <= taps; b6++)
    if ((taps - b6 * 36) % 16 == 0) {
      *n_copies = (int)(b6 + (taps - b6 * 36) / 16);
      return true;
    }
  return false;
}

/* The weights' bytes are exact right after the load (the plain copy kept beside one
 * transformed copy: 9 + 36 or 9 + 16 taps, no more) and stay exact while plans of other
 * batch sizes and thread counts add copies of their own blockings: never a plain copy
 * counted twice or dropped from the count. */
static void test_winograd_transformed_weights_exact_across_plans(void **state) {
  (void)state;
  const size_t unit = 64 * 64 * sizeof(float);
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 64, 14, 14));
  b_random(b, "w", DIMS(64, 64, 3, 3), -1.0f, 1.0f);
  b_node(b, "Conv", IN("x", "w"), OUT("y"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_output(b, "y");
  inferd_model *m = load_or_fail(b, &transformed_params);
  size_t bytes = inferd_model_weights_bytes(m);
  int copies = 0;
  if (bytes != unit * (9 + 36) && bytes != unit * (9 + 16))
    fail_msg("after the load: %zu bytes of weights, expected the plain copy and one transformed copy (%zu or %zu)",
             bytes, unit * (9 + 36), unit * (9 + 16));
  static const int batches[] = {1, 8, 2, 4};
  for (size_t t = 0; t < sizeof run_threads / sizeof *run_threads; t++) {
    inferd_session *s = NULL;
    inferd_status st = {0};
    inferd_session_params sp = {.threads = run_threads[t]};
    if (inferd_session_new(m, &sp, &s, &st) != INFERD_OK) fail_msg("session_new: %s", st.message);
    for (size_t k = 0; k < sizeof batches / sizeof *batches; k++) {
      run_and_compare(b, s, batches[k], run_threads[t], (int)(t * 8 + k));
      size_t now = inferd_model_weights_bytes(m);
      if (now < bytes || !wino_bytes_exact(now, unit, &copies))
        fail_msg("after batch %d, %d threads: %zu bytes of weights (%zu before), not one plain copy and transformed "
                 "ones of %zu bytes per tap", batches[k], run_threads[t], now, bytes, unit);
      bytes = now;
    }
    inferd_session_free(s);
  }
  inferd_model_free(m);
  b_free(b);
}

/* One 16 -> 16 weight read by two 3x3 convolutions, x (12x12) -> padded, stride 1 -> y1
 * -> `second` -> y, checked with Winograd's weights transformed (check_graph_transformed). */
static void check_weight_shared(const char *what, const attr *second) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 16, 12, 12));
  b_random(b, "w", DIMS(16, 16, 3, 3), -0.5f, 0.5f);
  b_node(b, "Conv", IN("x", "w"), OUT("y1"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Conv", IN("y1", "w"), OUT("y"), second);
  b_output(b, "y");
  check_graph_transformed(b);
}

/* The second convolution has stride 2 (direct). The load keeps both copies and lets the
 * plain data go; later plans are offered the direct copy only, never the transformed
 * one, and the stride-1 convolution still runs by Winograd in every session (it ran
 * direct on the offered layout once a direct copy existed: oneDNN takes no given layout
 * for transformed Winograd). */
static void test_winograd_transformed_weight_shared_with_direct(void **state) {
  (void)state;
  check_weight_shared(__func__,
                      ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1), A_INTS("strides", 2, 2)));
}

/* The second convolution is unpadded (10x10 out), also by Winograd: the weight has only
 * transformed copies, so its plain data must stay for the later plans (batches 1 and 8,
 * 1 thread) that block it their own way. */
static void test_winograd_transformed_weight_shared_by_two(void **state) {
  (void)state;
  check_weight_shared(__func__, ATTRS(A_INTS("kernel_shape", 3, 3)));
}

/* Regression: y = Add(Conv(x0), x0), the Conv reading the residual itself. The sum
 * post-op must not be fused in place here: the Conv would write x0's buffer while it
 * still reads x0 from it. */
static void test_residual_conv_reads_residual(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 24, 6, 6);
  b_random(b, "w1", DIMS(24, 24, 3, 3), -0.3f, 0.3f);
  b_node(b, "Conv", IN("x0", "w1"), OUT("c1"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Add", IN("c1", "x0"), OUT("s"), NULL);
  b_node(b, "Relu", IN("s"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* The same unsafe in-place pattern with a 1x1 Conv. It passes today only because the
 * pointwise kernel happens to read each pixel before writing it; it checks the fix. */
static void test_residual_conv1x1_reads_residual(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 32, 5, 5);
  b_random(b, "w1", DIMS(32, 32, 1, 1), -0.3f, 0.3f);
  b_node(b, "Conv", IN("x0", "w1"), OUT("c1"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_node(b, "Add", IN("x0", "c1"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* Regression: Add(Conv(x0), t) where t = GlobalAveragePool(x0) is [N, C, 1, 1]: a
 * broadcast Add after a Conv. The pass fuses it before shapes are known; the lowering
 * must then run it as a broadcast Add instead of refusing the model. */
static void test_conv_add_broadcast_activation(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 24, 6, 6);
  b_node(b, "GlobalAveragePool", IN("x0"), OUT("g"), NULL);
  b_random(b, "w1", DIMS(24, 24, 3, 3), -0.3f, 0.3f);
  b_node(b, "Conv", IN("x0", "w1"), OUT("c1"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Add", IN("c1", "g"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* The residual reaches the Add through a Reshape (a view of x0's storage), and x0 is
 * still read after the Add: summing in place into the view would change x0. */
static void test_residual_through_reshape_still_read(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 16, 6, 6);
  b_ints(b, "same_shape", 4, (const int64_t[]){0, 16, 6, 6});
  b_node(b, "Reshape", IN("x0", "same_shape"), OUT("x0_view"), NULL);
  add_residual_block(b, "x0", "blk", 16, false, "y");
  /* rewire the block's Add to read the view (the block appended Add second to last) */
  b_node_rec *add = &b->nodes[b->n_nodes - 2];
  assert_string_equal(add->op, "Add");
  copy_name(add->in[1], "x0_view");
  b_node(b, "Sigmoid", IN("x0"), OUT("z"), NULL);
  b_output(b, "y");
  b_output(b, "z");
  check_graph(b);
}

/* The residual is a Reshape (view) of the graph input: an in-place sum would write into
 * the caller's input array. */
static void test_residual_is_view_of_graph_input(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 16, 5, 5));
  b_ints(b, "same_shape", 4, (const int64_t[]){0, 16, 5, 5});
  b_node(b, "Reshape", IN("x", "same_shape"), OUT("x_view"), NULL);
  b_random(b, "w1", DIMS(16, 16, 1, 1), -0.5f, 0.5f);
  b_node(b, "Conv", IN("x", "w1"), OUT("c1"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_node(b, "Add", IN("c1", "x_view"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* Two convolutions of one input added: the second sums into the first's buffer. */
static void test_add_of_two_convs(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 5, 7, 7));
  b_random(b, "wa", DIMS(24, 5, 3, 3), -0.5f, 0.5f);
  b_random(b, "wb", DIMS(24, 5, 1, 1), -0.5f, 0.5f);
  b_random(b, "bb", DIMS(24), -0.5f, 0.5f);
  b_node(b, "Conv", IN("x", "wa"), OUT("a"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Conv", IN("x", "wb", "bb"), OUT("c"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_node(b, "Add", IN("a", "c"), OUT("s"), NULL);
  b_node(b, "Relu", IN("s"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* Conv -> Identity -> Relu: the Identity is removed, and the Relu still fuses. */
static void test_identity_between_conv_and_relu(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 5, 6, 6));
  b_random(b, "w", DIMS(24, 5, 3, 3), -1.0f, 1.0f);
  b_node(b, "Conv", IN("x", "w"), OUT("c"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Identity", IN("c"), OUT("i"), NULL);
  b_node(b, "Relu", IN("i"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* Two fused element-wise ops of the same oneDNN kind (LeakyRelu and Relu are both
 * eltwise_relu; HardSigmoid ends with a clip): oneDNN 2.6 ran the second with the
 * first one's parameters, so these chains must stop fusing before it. */
static void test_fuse_conv_leakyrelu_relu(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 6, 6));
  b_random(b, "w", DIMS(16, 3, 3, 3), -1.0f, 1.0f);
  b_node(b, "Conv", IN("x", "w"), OUT("c"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "LeakyRelu", IN("c"), OUT("l"), ATTRS(A_FLOAT("alpha", 0.5f)));
  b_node(b, "Relu", IN("l"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_fuse_conv_hardsigmoid_clip(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 6, 6));
  b_random(b, "w", DIMS(16, 3, 3, 3), -1.0f, 1.0f);
  b_scalar(b, "lo", 0.2f);
  b_scalar(b, "hi", 0.6f);
  b_node(b, "Conv", IN("x", "w"), OUT("c"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "HardSigmoid", IN("c"), OUT("h"), ATTRS(A_FLOAT("alpha", 0.2f), A_FLOAT("beta", 0.5f)));
  b_node(b, "Clip", IN("h", "lo", "hi"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_fuse_gemm_leakyrelu_twice(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 8));
  b_random(b, "w", DIMS(8, 6), -1.0f, 1.0f);
  b_node(b, "Gemm", IN("x", "w"), OUT("g"), NULL);
  b_node(b, "LeakyRelu", IN("g"), OUT("l"), ATTRS(A_FLOAT("alpha", 0.5f)));
  b_node(b, "LeakyRelu", IN("l"), OUT("y"), ATTRS(A_FLOAT("alpha", 0.1f)));
  b_output(b, "y");
  check_graph(b);
}

/* Before opset 11, Clip's bounds are attributes. */
static void test_fuse_conv_clip6_opset10_attributes(void **state) {
  builder *b = b_new(__func__);
  b->opset = 10;
  b->in_lo = -4, b->in_hi = 4;
  b_input(b, "x", DIMS(0, 3, 6, 6));
  b_random(b, "w", DIMS(16, 3, 3, 3), -1.0f, 1.0f);
  b_node(b, "Conv", IN("x", "w"), OUT("c"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Clip", IN("c"), OUT("y"), ATTRS(A_FLOAT("min", 0.0f), A_FLOAT("max", 6.0f)));
  b_output(b, "y");
  check_graph(b);
}

/* From opset 11 on, Clip's bounds are inputs, and opset 11 is the first such: the
 * bounds are read from the inputs, not from (absent) attributes. */
static void test_fuse_conv_clip6_opset11_inputs(void **state) {
  builder *b = b_new(__func__);
  b->opset = 11;
  b->in_lo = -4, b->in_hi = 4;
  b_input(b, "x", DIMS(0, 3, 6, 6));
  b_random(b, "w", DIMS(16, 3, 3, 3), -1.0f, 1.0f);
  b_scalar(b, "lo", 0.0f);
  b_scalar(b, "hi", 6.0f);
  b_node(b, "Conv", IN("x", "w"), OUT("c"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Clip", IN("c", "lo", "hi"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_conv_1d(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 5, 11));
  b_random(b, "w", DIMS(24, 5, 3), -1.0f, 1.0f);
  b_random(b, "bias", DIMS(24), -1.0f, 1.0f);
  b_node(b, "Conv", IN("x", "w", "bias"), OUT("c"),
         ATTRS(A_INTS("kernel_shape", 3), A_INTS("strides", 2), A_INTS("pads", 1, 2)));
  b_node(b, "Relu", IN("c"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* One weight initializer used by two Convs, one of them followed by a BatchNormalization
 * that is folded into (a copy of) the weights: the other Conv must see the originals.
 * Also hit by the BatchNormalization folding bug (see the Conv+BN tests). */
static void test_conv_shared_weights_one_with_bn(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 5, 5, 5));
  b_random(b, "w", DIMS(16, 5, 3, 3), -1.0f, 1.0f);
  const attr *conv3x3 = ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1));
  b_node(b, "Conv", IN("x", "w"), OUT("c1"), conv3x3);
  add_post_op(b, "BN", "c1", "y1", 16, 0);
  b_node(b, "Conv", IN("x", "w"), OUT("y2"), conv3x3);
  b_output(b, "y1");
  b_output(b, "y2");
  check_graph(b);
}

/* ==== tests: pooling ================================================================================ */

static void run_pool(const char *name, const char *op, int64_t c, int64_t h, int64_t w, const attr *attrs) {
  builder *b = b_new(name);
  b_input(b, "x", DIMS(0, c, h, w));
  b_node(b, op, IN("x"), OUT("y"), attrs);
  b_output(b, "y");
  check_graph(b);
}

static void test_maxpool_k3_s2_p1_odd(void **state) {
  run_pool(__func__, "MaxPool", 5, 9, 9,
           ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1)));
}

static void test_maxpool_k3_s2_p1_even(void **state) {
  run_pool(__func__, "MaxPool", 32, 8, 8,
           ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1)));
}

static void test_maxpool_ceil_mode_k2_s2_odd(void **state) {
  run_pool(__func__, "MaxPool", 24, 7, 7, ATTRS(A_INTS("kernel_shape", 2, 2), A_INTS("strides", 2, 2), A_INT("ceil_mode", 1)));
}

static void test_maxpool_ceil_mode_k3_s2_odd(void **state) {
  run_pool(__func__, "MaxPool", 5, 9, 11,
           ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INT("ceil_mode", 1)));
}

static void test_maxpool_ceil_mode_k3_s2_p1_even(void **state) {
  run_pool(__func__, "MaxPool", 3, 8, 8,
           ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1), A_INT("ceil_mode", 1)));
}

/* ceil_mode, the window larger than the input by less than a stride: one output per
 * row that pools what there is (PyTorch's MaxPool2d(3, 2, ceil_mode=True) on 2x2) */
static void test_maxpool_ceil_mode_window_over_input(void **state) {
  run_pool(__func__, "MaxPool", 8, 2, 3, ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INT("ceil_mode", 1)));
}

static void test_avgpool_ceil_mode_window_over_input(void **state) {
  run_pool(__func__, "AveragePool", 8, 2, 2,
           ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INT("ceil_mode", 1)));
}

/* ... but by a whole stride or more there is no output at all (PyTorch: "output size
 * is too small"), and floor mode never overhangs */
static void test_error_pool_window_over_input(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4, 1, 5));
  b_node(b, "MaxPool", IN("x"), OUT("y"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INT("ceil_mode", 1)));
  b_output(b, "y");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"MaxPool", "larger than the padded input 1", NULL});
  b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4, 2, 5));
  b_node(b, "MaxPool", IN("x"), OUT("y"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2)));
  b_output(b, "y");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"MaxPool", "larger than the padded input 2", NULL});
}

/* floor mode with a window that does not reach the last row/column */
static void test_maxpool_k2_s2_odd_floor(void **state) {
  run_pool(__func__, "MaxPool", 16, 7, 7, ATTRS(A_INTS("kernel_shape", 2, 2), A_INTS("strides", 2, 2)));
}

static void test_avgpool_exclude_pad_k3_s2_p1(void **state) {
  run_pool(__func__, "AveragePool", 5, 9, 9,
           ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1),
                 A_INT("count_include_pad", 0)));
}

static void test_avgpool_include_pad_k3_s2_p1_odd(void **state) {
  run_pool(__func__, "AveragePool", 24, 9, 9,
           ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1),
                 A_INT("count_include_pad", 1)));
}

/* Regression: was refused at load ("count_include_pad with ceil_mode or auto_pad
 * padding") although there is neither: with 8 columns no window reaches the right pad,
 * so the padding handed to oneDNN is smaller than the declared one, which is fine. */
static void test_avgpool_include_pad_k3_s2_p1_even(void **state) {
  run_pool(__func__, "AveragePool", 16, 8, 8,
           ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1),
                 A_INT("count_include_pad", 1)));
}

/* auto_pad's padding is the node's own: count_include_pad counts it (was refused) */
static void test_avgpool_include_pad_same_upper(void **state) {
  run_pool(__func__, "AveragePool", 8, 8, 7,
           ATTRS(A_INTS("kernel_shape", 3, 2), A_INTS("strides", 2, 2), A_STR("auto_pad", "SAME_UPPER"),
                 A_INT("count_include_pad", 1)));
}

static void test_avgpool_include_pad_same_lower(void **state) {
  run_pool(__func__, "AveragePool", 8, 6, 9,
           ATTRS(A_INTS("kernel_shape", 2, 3), A_INTS("strides", 1, 2), A_STR("auto_pad", "SAME_LOWER"),
                 A_INT("count_include_pad", 1)));
}

/* ... but a ceil_mode window past it would be divided by its whole size by oneDNN, by
 * the part inside the padded input by PyTorch and ONNX: refused */
static void test_error_avgpool_include_pad_ceil_overhang(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4, 8, 8));
  b_node(b, "AveragePool", IN("x"), OUT("y"),
         ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INT("ceil_mode", 1), A_INT("count_include_pad", 1)));
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"AveragePool", "count_include_pad", NULL});
}

static void test_avgpool_include_pad_k3_s1_p1(void **state) {
  run_pool(__func__, "AveragePool", 32, 6, 5,
           ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1), A_INT("count_include_pad", 1)));
}

static void test_avgpool_asymmetric_pads(void **state) {
  run_pool(__func__, "AveragePool", 5, 7, 8,
           ATTRS(A_INTS("kernel_shape", 2, 3), A_INTS("strides", 2, 1), A_INTS("pads", 0, 1, 1, 1)));
}

static void test_avgpool_ceil_mode_exclude_pad(void **state) {
  run_pool(__func__, "AveragePool", 24, 8, 8,
           ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INT("ceil_mode", 1)));
}

/* Regression: pads as large as the kernel put whole windows in the padding, where
 * MaxPool wrote -FLT_MAX (oneDNN's starting value) for an output ONNX Runtime refuses.
 * Refused, on either side; pads one smaller than the kernel still run. */
static void test_error_pool_window_in_padding(void **state) {
  static const int64_t pads[][4] = {{2, 2, 2, 2}, {0, 0, 0, 2}};
  for (size_t k = 0; k < sizeof pads / sizeof *pads; k++) {
    builder *b = b_new(__func__);
    b_input(b, "x", DIMS(0, 3, 3, 3));
    b_node(b, "MaxPool", IN("x"), OUT("y"),
           ATTRS(A_INTS("kernel_shape", 2, 2), A_INTS("pads", pads[k][0], pads[k][1], pads[k][2], pads[k][3])));
    b_output(b, "y");
    expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"MaxPool", "wholly in the padding", NULL});
  }
  run_pool(__func__, "MaxPool", 3, 3, 3, ATTRS(A_INTS("kernel_shape", 2, 2), A_INTS("pads", 1, 1, 1, 1)));
  /* A dilation longer than the input steps over it from a window that starts in the
   * padding but does not end there: width 2, taps 4 apart, 2 pads before. The same on
   * a width of 6 reads an element in every window and loads. */
  for (int64_t width = 2; width <= 6; width += 4) {
    builder *b = b_new(__func__);
    b_input(b, "x", (int)4, (const int64_t[]){0, 3, 3, width});
    b_node(b, "MaxPool", IN("x"), OUT("y"),
           ATTRS(A_INTS("kernel_shape", 1, 2), A_INTS("dilations", 1, 4), A_INTS("pads", 0, 2, 0, 2)));
    b_output(b, "y");
    if (width == 2) {
      expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"MaxPool", "window 0 of spatial dimension 1", NULL});
    } else {
      inferd_model_free(load_or_fail(b, NULL));
      b_free(b);
    }
  }
}

static void test_global_average_pool_of_input(void **state) {
  run_pool(__func__, "GlobalAveragePool", 5, 7, 6, NULL);
}

static void test_global_max_pool(void **state) { run_pool(__func__, "GlobalMaxPool", 24, 5, 7, NULL); }

static void test_global_average_pool_after_conv(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 24, 7, 7);
  b_node(b, "GlobalAveragePool", IN("x0"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_maxpool_after_conv(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 32, 9, 9);
  b_node(b, "MaxPool", IN("x0"), OUT("y"),
         ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1)));
  b_output(b, "y");
  check_graph(b);
}

/* ==== tests: matrix products, shapes, softmax =========================================================== */

/* The classifier head: Conv features -> GlobalAveragePool -> Flatten -> Dropout ->
 * Gemm(transB) -> Softmax. */
static void test_classifier_head(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 24, 5, 5);
  b_random(b, "fc_w", DIMS(10, 24), -1.0f, 1.0f);
  b_random(b, "fc_b", DIMS(10), -1.0f, 1.0f);
  b_node(b, "GlobalAveragePool", IN("x0"), OUT("g"), NULL);
  b_node(b, "Flatten", IN("g"), OUT("f"), ATTRS(A_INT("axis", 1)));
  b_node(b, "Dropout", IN("f"), OUT("fd"), NULL); /* inference: the identity */
  b_node(b, "Gemm", IN("fd", "fc_w", "fc_b"), OUT("logits"), ATTRS(A_INT("transB", 1)));
  b_node(b, "Softmax", IN("logits"), OUT("y"), ATTRS(A_INT("axis", -1)));
  b_output(b, "logits");
  b_output(b, "y");
  check_graph(b);
}

static void test_gemm_transb_bias(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 40));
  b_random(b, "w", DIMS(13, 40), -1.0f, 1.0f);
  b_random(b, "bias", DIMS(13), -1.0f, 1.0f);
  b_node(b, "Gemm", IN("x", "w", "bias"), OUT("y"), ATTRS(A_INT("transB", 1)));
  b_output(b, "y");
  check_graph(b);
}

static void test_gemm_no_trans_row_bias(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 33));
  b_random(b, "w", DIMS(33, 17), -1.0f, 1.0f);
  b_random(b, "bias", DIMS(1, 17), -1.0f, 1.0f);
  b_node(b, "Gemm", IN("x", "w", "bias"), OUT("y"), ATTRS(A_INT("transB", 0)));
  b_output(b, "y");
  check_graph(b);
}

static void test_gemm_no_bias_relu(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 16));
  b_random(b, "w", DIMS(16, 32), -1.0f, 1.0f);
  b_node(b, "Gemm", IN("x", "w"), OUT("g"), NULL);
  b_node(b, "Relu", IN("g"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_matmul_2d(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 12));
  b_random(b, "w", DIMS(12, 9), -1.0f, 1.0f);
  b_node(b, "MatMul", IN("x", "w"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_matmul_3d_by_constant_2d(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4, 6));
  b_random(b, "w", DIMS(6, 5), -1.0f, 1.0f);
  b_node(b, "MatMul", IN("x", "w"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* A Transformer's linear layer on [N, H, W, C] (ConvNeXt): the weights, with leading
 * axes of 1, are shared by every row, so the engine runs one product of all N*H*W rows */
static builder *linear_nhwc(const char *what) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 3, 4, 64));
  b_random(b, "w", DIMS(1, 1, 64, 96), -0.2f, 0.2f);
  b_random(b, "bias", DIMS(96), -0.5f, 0.5f);
  b_node(b, "MatMul", IN("x", "w"), OUT("m"), NULL);
  b_node(b, "Add", IN("m", "bias"), OUT("a"), NULL);
  b_node(b, "Relu", IN("a"), OUT("y"), NULL);
  b_output(b, "y");
  return b;
}
static void test_matmul_4d_rows_folded(void **state) { check_graph(linear_nhwc(__func__)); }

/* Regression: a weight read in another shape at another batch size. Squeeze without
 * axes (torch's x.squeeze() exports so) makes the MatMul 2-D at batch 1 and 3-D at batch
 * 3, so the weight is read as [6,5], then as [1,6,5]; batch 3 failed with "no copy left
 * to reorder from" once batch 1 had released the plain copy. */
static void test_matmul_weight_read_in_two_shapes(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 1, 4, 6));
  b_random(b, "w", DIMS(6, 5), -1.0f, 1.0f);
  b_node(b, "Squeeze", IN("x", ""), OUT("s"), NULL);
  b_node(b, "MatMul", IN("s", "w"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* batched 3-D MatMul of two run-time tensors: x [N,4,6] times its transpose [N,6,4] */
static void test_matmul_3d_batched_runtime(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4, 6));
  b_node(b, "Transpose", IN("x"), OUT("xt"), ATTRS(A_INTS("perm", 0, 2, 1)));
  b_node(b, "MatMul", IN("x", "xt"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_matmul_3d_two_inputs(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "a", DIMS(0, 3, 7));
  b_input(b, "b", DIMS(0, 7, 5));
  b_node(b, "MatMul", IN("a", "b"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_flatten_after_conv(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 24, 4, 5);
  b_node(b, "Flatten", IN("x0"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_flatten_axis2(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 5, 4, 3));
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Flatten", IN("r"), OUT("y"), ATTRS(A_INT("axis", 2)));
  b_output(b, "y");
  check_graph(b);
}

static void test_reshape_zero_and_minus_one(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 8, 4, 4);
  b_ints(b, "shape2", 2, (const int64_t[]){0, -1});
  b_ints(b, "shape3", 3, (const int64_t[]){0, 8, -1});
  b_ints(b, "shape4", 4, (const int64_t[]){0, -1, 2, 4});
  b_node(b, "Reshape", IN("x0", "shape2"), OUT("y2"), NULL);
  b_node(b, "Reshape", IN("x0", "shape3"), OUT("y3"), NULL);
  b_node(b, "Reshape", IN("x0", "shape4"), OUT("y4"), NULL);
  b_output(b, "y2");
  b_output(b, "y3");
  b_output(b, "y4");
  check_graph(b);
}

static void test_transpose_nchw_to_nhwc(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 24, 5, 6);
  b_node(b, "Transpose", IN("x0"), OUT("y"), ATTRS(A_INTS("perm", 0, 2, 3, 1)));
  b_output(b, "y");
  check_graph(b);
}

static void test_transpose_of_input(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 4, 5));
  b_node(b, "Transpose", IN("x"), OUT("y"), ATTRS(A_INTS("perm", 0, 3, 1, 2)));
  b_output(b, "y");
  check_graph(b);
}

/* Concat along channels of two conv outputs: 5 + 24 (not block-aligned) and 16 + 16. */
static void run_concat_convs(const char *name, int64_t ca, int64_t cb) {
  builder *b = b_new(name);
  b_input(b, "x", DIMS(0, 3, 6, 6));
  b_random(b, "wa", DIMS(ca, 3, 3, 3), -1.0f, 1.0f);
  b_random(b, "wb", DIMS(cb, 3, 1, 1), -1.0f, 1.0f);
  b_random(b, "bb", DIMS(cb), -1.0f, 1.0f);
  b_node(b, "Conv", IN("x", "wa"), OUT("a"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Conv", IN("x", "wb", "bb"), OUT("c"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_node(b, "Relu", IN("c"), OUT("cr"), NULL);
  b_node(b, "Concat", IN("a", "cr"), OUT("y"), ATTRS(A_INT("axis", 1)));
  b_output(b, "y");
  check_graph(b);
}

static void test_concat_channels_c5_c24(void **state) { run_concat_convs(__func__, 5, 24); }
static void test_concat_channels_c16_c16(void **state) { run_concat_convs(__func__, 16, 16); }

static void test_concat_negative_axis_then_conv(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 5, 6, 6));
  b_node(b, "Sigmoid", IN("x"), OUT("s"), NULL);
  b_node(b, "Concat", IN("x", "s", "x"), OUT("cat"), ATTRS(A_INT("axis", -3)));
  b_random(b, "w", DIMS(8, 15, 3, 3), -0.5f, 0.5f);
  b_node(b, "Conv", IN("cat", "w"), OUT("y"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_output(b, "y");
  check_graph(b);
}

/* Concat(c, x) of a graph input x[N, ch, 5, 5] and c = Conv(x) with 32 channels; with
 * x_first, Concat(x, c) */
static builder *input_and_conv(const char *what, int64_t ch, bool x_first) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, ch, 5, 5));
  b_random(b, "w", DIMS(32, ch, 3, 3), -0.3f, 0.3f);
  b_node(b, "Conv", IN("x", "w"), OUT("c"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Concat", x_first ? IN("x", "c") : IN("c", "x"), OUT("y"), ATTRS(A_INT("axis", 1)));
  b_output(b, "y");
  return b;
}

/* From batch 4 the Conv writes the blocked layout and the input is plain: given both,
 * oneDNN's concat ran its reference kernel. The input, which has fewer bytes, is
 * reordered to the Conv's layout first (ops_concat.c, concat_form), not both to plain
 * (which a channel count that is not a multiple of 16 needs: test_concat_channels_*). */
static void test_concat_input_and_conv(void **state) {
  check_graph(input_and_conv(__func__, 16, false));
  check_graph_tuned(input_and_conv(__func__, 16, false));
  char profile[8192];
  run_profile(input_and_conv(__func__, 16, false), &tuned_params, 4, false, true, profile, sizeof profile);
  expect_steps_off_reference(profile, (const char *const[]){"Concat_1", NULL}, 4);
  if (strstr(profile, "(reorder of c)")) fail_msg("the Conv's output was reordered for the Concat:\n%s", profile);
}

/* The input first, 8 channels: the Conv's 32 would start inside a 16-channel block, so
 * oneDNN refuses the blocked layout and both are joined plain. The input must not have
 * been reordered for the refused layout first (a step whose result nothing reads). */
static void test_concat_refused_layout_leaves_no_reorder(void **state) {
  check_graph_tuned(input_and_conv(__func__, 8, true));
  char profile[8192];
  run_profile(input_and_conv(__func__, 8, true), &tuned_params, 4, false, true, profile, sizeof profile);
  if (strstr(profile, "(reorder of x)")) fail_msg("a reorder of x that nothing reads:\n%s", profile);
}

/* The exporter's Flatten: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, folded per
 * batch size at plan time. */
static void test_shape_chain_reshape(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 8, 4, 3);
  b_const(b, "zero", INFERD_DTYPE_INT64, 0, NULL, (const int64_t[]){0});
  b_ints(b, "axes0", 1, (const int64_t[]){0});
  b_ints(b, "minus1", 1, (const int64_t[]){-1});
  b_node(b, "Shape", IN("x0"), OUT("shape"), NULL);
  b_node(b, "Gather", IN("shape", "zero"), OUT("n"), ATTRS(A_INT("axis", 0)));
  b_node(b, "Unsqueeze", IN("n", "axes0"), OUT("n1"), NULL);
  b_node(b, "Concat", IN("n1", "minus1"), OUT("target"), ATTRS(A_INT("axis", 0)));
  b_node(b, "Reshape", IN("x0", "target"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* Gather of a tensor computed at run time (a custom step), negative index included. */
static void test_gather_runtime(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 8, 4, 5);
  b_ints(b, "rows", 3, (const int64_t[]){3, 0, -1});
  b_const(b, "col", INFERD_DTYPE_INT64, 0, NULL, (const int64_t[]){-2});
  b_node(b, "Gather", IN("x0", "rows"), OUT("y1"), ATTRS(A_INT("axis", 2)));
  b_node(b, "Gather", IN("x0", "col"), OUT("y2"), ATTRS(A_INT("axis", -1)));
  b_output(b, "y1");
  b_output(b, "y2");
  check_graph(b);
}

static void test_squeeze_unsqueeze(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 24, 4, 4);
  b_ints(b, "hw", 2, (const int64_t[]){2, 3});
  b_ints(b, "one", 1, (const int64_t[]){1});
  b_node(b, "GlobalAveragePool", IN("x0"), OUT("g"), NULL);
  b_node(b, "Squeeze", IN("g", "hw"), OUT("s"), NULL);
  b_node(b, "Unsqueeze", IN("s", "one"), OUT("y"), NULL);
  b_output(b, "s");
  b_output(b, "y");
  check_graph(b);
}

static void test_reduce_mean(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 5, 4, 3));
  b_node(b, "ReduceMean", IN("x"), OUT("y1"), ATTRS(A_INTS("axes", 2, 3), A_INT("keepdims", 1)));
  b_node(b, "ReduceMean", IN("x"), OUT("y2"), ATTRS(A_INTS("axes", -1), A_INT("keepdims", 0)));
  b_output(b, "y1");
  b_output(b, "y2");
  check_graph(b);
}

/* Several outputs sharing storage: a value, a view of it, and the graph input itself. */
static void test_outputs_sharing_storage(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 4, 4));
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Flatten", IN("r"), OUT("r_flat"), NULL);
  b_node(b, "Identity", IN("x"), OUT("x_copy"), NULL);
  b_output(b, "r");
  b_output(b, "r_flat");
  b_output(b, "x_copy");
  check_graph(b);
}

static void test_softmax_2d(void **state) {
  builder *b = b_new(__func__);
  b->in_lo = -4, b->in_hi = 4;
  b_input(b, "x", DIMS(0, 10));
  b_node(b, "Softmax", IN("x"), OUT("y"), ATTRS(A_INT("axis", -1)));
  b_output(b, "y");
  check_graph(b);
}

static void test_softmax_4d_last_axis_default(void **state) {
  builder *b = b_new(__func__);
  b->in_lo = -4, b->in_hi = 4;
  b_input(b, "x", DIMS(0, 3, 4, 5));
  b_node(b, "Softmax", IN("x"), OUT("y"), NULL);
  b_node(b, "Softmax", IN("x"), OUT("y_axis1"), ATTRS(A_INT("axis", 1)));
  b_output(b, "y");
  b_output(b, "y_axis1");
  check_graph(b);
}

/* Before opset 13, Softmax and LogSoftmax work on the input flattened to 2-D at `axis`
 * (default 1). */
static void check_opset11_flattens(const char *what, const char *op, float range) {
  builder *b = b_new(what);
  b->opset = 11;
  b->in_lo = -range, b->in_hi = range;
  b_input(b, "x", DIMS(0, 3, 4));
  b_node(b, op, IN("x"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_softmax_opset11_flattens(void **state) { check_opset11_flattens(__func__, "Softmax", 3); }

/* LogSoftmax (the last op of many small classifiers, F.log_softmax) over the last axis,
 * a middle axis, and at opset 11 over the input flattened at the default axis 1; wide
 * inputs, so that a softmax in place of the log one is far off. */
static void test_log_softmax(void **state) {
  builder *b = b_new(__func__);
  b->in_lo = -6, b->in_hi = 6;
  b_input(b, "x", DIMS(0, 3, 4, 10));
  b_node(b, "LogSoftmax", IN("x"), OUT("y"), ATTRS(A_INT("axis", -1)));
  b_node(b, "LogSoftmax", IN("x"), OUT("y_axis1"), ATTRS(A_INT("axis", 1)));
  b_output(b, "y");
  b_output(b, "y_axis1");
  check_graph(b);
  check_opset11_flattens("test_log_softmax opset 11", "LogSoftmax", 6);
}

static void test_softmax_after_conv(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 16, 3, 4);
  b_node(b, "Softmax", IN("x0"), OUT("y"), ATTRS(A_INT("axis", -1)));
  b_output(b, "y");
  check_graph(b);
}

/* ==== tests: broadcasting binary ops and activations ======================================================== */

static void test_add_mul_per_channel_constant(void **state) {
  builder *b = b_new(__func__);
  add_stem(b, 3, 24, 5, 5);
  b_random(b, "k_add", DIMS(1, 24, 1, 1), -1.0f, 1.0f);
  b_random(b, "k_mul", DIMS(24, 1, 1), 0.5f, 2.0f); /* rank 3: broadcast from the right */
  b_node(b, "Add", IN("x0", "k_add"), OUT("a"), NULL);
  b_node(b, "Mul", IN("k_mul", "a"), OUT("y"), NULL); /* constant first */
  b_output(b, "y");
  check_graph(b);
}

static void test_add_per_channel_constant_of_input(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 5, 4, 4));
  b_random(b, "k", DIMS(1, 5, 1, 1), -1.0f, 1.0f);
  b_random(b, "row", DIMS(4), -1.0f, 1.0f);
  b_node(b, "Add", IN("x", "k"), OUT("a"), NULL);
  b_node(b, "Mul", IN("a", "row"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* Scalar constants: Sub with the scalar first (a linear op), Pow, Div, then a product
 * of two run-time tensors of the same shape. */
static void test_scalar_sub_pow_div_mul(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 5, 3, 4));
  b_scalar(b, "half", 0.5f);
  b_scalar(b, "two", 2.0f);
  b_scalar(b, "four", 4.0f);
  b_node(b, "Sub", IN("half", "x"), OUT("a"), NULL);
  b_node(b, "Pow", IN("a", "two"), OUT("p"), NULL);
  b_node(b, "Div", IN("p", "four"), OUT("d"), NULL);
  b_node(b, "Mul", IN("d", "x"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_matmul_add_bias(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4, 6));
  b_random(b, "w", DIMS(6, 5), -1.0f, 1.0f);
  b_random(b, "bias", DIMS(5), -1.0f, 1.0f);
  b_node(b, "MatMul", IN("x", "w"), OUT("m"), NULL);
  b_node(b, "Add", IN("m", "bias"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_sub_div_by_constant(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 5, 5));
  b_random(b, "mean", DIMS(1, 3, 1, 1), -0.5f, 0.5f);
  b_random(b, "std", DIMS(1, 3, 1, 1), 0.5f, 2.0f);
  b_node(b, "Sub", IN("x", "mean"), OUT("c"), NULL);
  b_node(b, "Div", IN("c", "std"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

/* SE block: x * Sigmoid(GlobalAveragePool(x)), the per-channel scale broadcast over H, W. */
static builder *se_graph(const char *name, int64_t c, bool scale_first) {
  builder *b = b_new(name);
  add_stem(b, 3, c, 6, 6);
  b_node(b, "GlobalAveragePool", IN("x0"), OUT("g"), NULL);
  b_random(b, "fc_w", DIMS(c, c, 1, 1), -1.0f, 1.0f);
  b_node(b, "Conv", IN("g", "fc_w"), OUT("gc"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_node(b, "Sigmoid", IN("gc"), OUT("s"), NULL);
  b_node(b, "Mul", scale_first ? IN("s", "x0") : IN("x0", "s"), OUT("y"), NULL);
  b_output(b, "y");
  return b;
}

static void test_se_block_c24(void **state) { check_graph(se_graph(__func__, 24, false)); }
static void test_se_block_c32_scale_first(void **state) { check_graph(se_graph(__func__, 32, true)); }

static void test_se_block_plain(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 5, 4, 4));
  b_node(b, "GlobalAveragePool", IN("x"), OUT("g"), NULL);
  b_node(b, "Sigmoid", IN("g"), OUT("s"), NULL);
  b_node(b, "Mul", IN("x", "s"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void run_activation(const char *name, const char *op, const attr *attrs) {
  builder *b = b_new(name);
  b->in_lo = -5, b->in_hi = 5;
  b_input(b, "x", DIMS(0, 5, 6, 6));
  b_node(b, op, IN("x"), OUT("y"), attrs);
  b_output(b, "y");
  check_graph(b);
}

static void test_hardswish(void **state) { run_activation(__func__, "HardSwish", NULL); }
static void test_hardsigmoid_default(void **state) { run_activation(__func__, "HardSigmoid", NULL); }
static void test_hardsigmoid_alpha_beta(void **state) {
  run_activation(__func__, "HardSigmoid", ATTRS(A_FLOAT("alpha", 1.0f / 6.0f), A_FLOAT("beta", 0.5f)));
}
static void test_sigmoid(void **state) { run_activation(__func__, "Sigmoid", NULL); }
static void test_relu(void **state) { run_activation(__func__, "Relu", NULL); }
static void test_leakyrelu(void **state) { run_activation(__func__, "LeakyRelu", ATTRS(A_FLOAT("alpha", 0.3f))); }
static void test_tanh(void **state) { run_activation(__func__, "Tanh", NULL); }
static void test_exp(void **state) { run_activation(__func__, "Exp", NULL); }

static void test_sqrt(void **state) {
  builder *b = b_new(__func__);
  b->in_lo = 0.01f, b->in_hi = 4.0f;
  b_input(b, "x", DIMS(0, 5, 3, 3));
  b_node(b, "Sqrt", IN("x"), OUT("y"), NULL);
  b_output(b, "y");
  check_graph(b);
}

static void test_activations_after_conv_unfused(void **state) {
  /* the conv output feeds two activations, so neither can be fused */
  builder *b = b_new(__func__);
  add_stem(b, 3, 24, 5, 5);
  b_random(b, "w1", DIMS(5, 24, 1, 1), -1.0f, 1.0f);
  b_node(b, "Conv", IN("x0", "w1"), OUT("c1"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_node(b, "HardSwish", IN("c1"), OUT("y1"), NULL);
  b_node(b, "HardSigmoid", IN("c1"), OUT("y2"), NULL);
  b_output(b, "y1");
  b_output(b, "y2");
  check_graph(b);
}

/* ==== tests: node order in the file ===================================================================== */

/* ONNX does not require a file's nodes to be sorted: the loader sorts them (onnx_load.c).
 * These graphs are written last node first (builder.reversed), so every node comes
 * before its producers in the file. */

/* Sorted, the Sigmoid that also reads the residual runs before the block's second
 * Conv (in file order it runs last), so the sum may be done in the residual's buffer. */
static void test_reversed_residual_read_after_add(void **state) {
  builder *b = b_new(__func__);
  b->reversed = true;
  add_stem(b, 5, 24, 6, 6);
  add_residual_block(b, "x0", "blk", 24, false, "y");
  b_node(b, "Sigmoid", IN("x0"), OUT("z"), NULL);
  b_output(b, "y");
  b_output(b, "z");
  check_graph(b);
}

/* Gemm -> Identity -> Relu -> Dropout -> Identity -> Tanh, written last node first. */
static builder *reversed_identities_graph(const char *what) {
  builder *b = b_new(what);
  b->reversed = true;
  b_input(b, "x", DIMS(0, 8));
  b_random(b, "w", DIMS(8, 8), -0.5f, 0.5f);
  b_node(b, "Gemm", IN("x", "w"), OUT("g"), ATTRS(A_INT("transB", 1)));
  b_node(b, "Identity", IN("g"), OUT("i"), NULL);
  b_node(b, "Relu", IN("i"), OUT("r"), NULL);
  b_node(b, "Dropout", IN("r"), OUT("d"), NULL);
  b_node(b, "Identity", IN("d"), OUT("d2"), NULL);
  b_node(b, "Tanh", IN("d2"), OUT("y"), NULL);
  b_output(b, "y");
  return b;
}

/* torch.onnx's LayerNorm before opset 17 (ReduceMean, Sub, Pow, ReduceMean, Add eps,
 * Sqrt, Div, Mul gamma, Add beta), which must become one LayerNormalization step, or
 * stay as it is when a value inside the chain is read elsewhere too. */
static builder *layernorm_chain_c(const char *what, bool bias, bool extra_reader, int64_t c) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 5, 8));
  b_random(b, "gamma", 1, &c, 0.5f, 1.5f);
  if (bias) b_random(b, "beta", 1, &c, -0.5f, 0.5f);
  b_scalar(b, "two", 2.0f);
  b_scalar(b, "eps", 1e-5f);
  b_node(b, "Tanh", IN("x"), OUT("r"), NULL);
  b_node(b, "ReduceMean", IN("r"), OUT("m"), ATTRS(A_INTS("axes", -1)));
  b_node(b, "Sub", IN("r", "m"), OUT("d"), NULL);
  b_node(b, "Pow", IN("d", "two"), OUT("p"), NULL);
  b_node(b, "ReduceMean", IN("p"), OUT("v"), ATTRS(A_INTS("axes", -1)));
  b_node(b, "Add", IN("v", "eps"), OUT("ve"), NULL);
  b_node(b, "Sqrt", IN("ve"), OUT("s"), NULL);
  b_node(b, "Div", IN("d", "s"), OUT("q"), NULL);
  b_node(b, "Mul", IN("gamma", "q"), OUT(bias ? "g" : "y"), NULL);
  if (bias) b_node(b, "Add", IN("g", "beta"), OUT("y"), NULL);
  b_output(b, "y");
  if (extra_reader) {
    b_node(b, "Sigmoid", IN("d"), OUT("t"), NULL);
    b_output(b, "t");
  }
  return b;
}

static builder *layernorm_chain(const char *what, bool bias, bool extra_reader) {
  return layernorm_chain_c(what, bias, extra_reader, 8);
}

/* Whether the plan that ran at batch 1 has a LayerNormalization step. */
static bool runs_layernorm(builder *b) {
  char profile[8192];
  run_profile(b, NULL, 1, false, false, profile, sizeof profile);
  return strstr(profile, "\nLayerNormalization ") != NULL;
}

static void test_layernorm_chain_fused(void **state) {
  check_graph(layernorm_chain(__func__, true, false));
  check_graph(layernorm_chain(__func__, false, false));
  check_graph(layernorm_chain(__func__, false, true));
  assert_true(runs_layernorm(layernorm_chain(__func__, true, false)));
  assert_true(runs_layernorm(layernorm_chain(__func__, false, false)));
  assert_false(runs_layernorm(layernorm_chain(__func__, true, true))); /* d is read by the Sigmoid too */
  /* a gamma and beta of one element broadcast over the axis (they were refused once fused) */
  check_graph(layernorm_chain_c(__func__, true, false, 1));
  assert_true(runs_layernorm(layernorm_chain_c(__func__, true, false, 1)));
}

/* ONNX's own LayerNormalization (opset 17) over the last two axes, with and without B. */
static void test_layernorm_opset17(void **state) {
  for (int bias = 0; bias < 2; bias++) {
    builder *b = b_new(__func__);
    b->opset = 17;
    b_input(b, "x", DIMS(0, 3, 4, 5));
    b_random(b, "scale", DIMS(4, 5), 0.5f, 1.5f);
    b_random(b, "bias", DIMS(5), -0.5f, 0.5f); /* broadcast over the 4 */
    b_node(b, "Relu", IN("x"), OUT("r"), NULL);
    b_node(b, "LayerNormalization", bias ? IN("r", "scale", "bias") : IN("r", "scale"), OUT("y"),
           ATTRS(A_INT("axis", -2), A_FLOAT("epsilon", 1e-3f)));
    b_output(b, "y");
    check_graph(b);
  }
}

/* Swin's attention mask: a constant [1, W, 1, L, L] added to [N, W, H, L, L], which
 * oneDNN's optimized binary kernels do not broadcast. Copied out to the full shape at
 * load, the Add runs on an optimized kernel, not the reference one. */
static builder *mask_add(const char *what) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 4, 3, 5, 5));
  b_random(b, "mask", DIMS(1, 4, 1, 5, 5), -1.0f, 1.0f);
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Add", IN("r", "mask"), OUT("y"), NULL);
  b_output(b, "y");
  return b;
}

static void test_binary_constant_broadcast_not_reference(void **state) {
  check_graph(mask_add(__func__));
  char profile[4096];
  run_profile(mask_add(__func__), NULL, 2, false, true, profile, sizeof profile);
  expect_steps_off_reference(profile, (const char *const[]){"Add_1", NULL}, 2);
}

/* shufflenet_v2's and mnasnet's head: the mean over H and W of a convolution's blocked
 * output, into [N, C]. oneDNN reduces from a blocked layout on its reference kernel
 * (40-46% of those models' time); read in the plain layout, it is the optimized one. */
static builder *conv_mean(const char *what) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 16, 7, 7));
  b_random(b, "w", DIMS(32, 16, 3, 3), -0.2f, 0.2f);
  b_node(b, "Conv", IN("x", "w"), OUT("c"), ATTRS(A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "ReduceMean", IN("c"), OUT("y"), ATTRS(A_INTS("axes", 2, 3), A_INT("keepdims", 0)));
  b_output(b, "y");
  return b;
}

static void test_reduce_mean_of_blocked_not_reference(void **state) {
  check_graph_tuned(conv_mean(__func__));
  char profile[4096];
  run_profile(conv_mean(__func__), &tuned_params, 4, false, true, profile, sizeof profile);
  expect_steps_off_reference(profile, (const char *const[]){"ReduceMean_1", NULL}, 4);
  if (!strstr(profile, "Reorder")) fail_msg("the Conv's output was not blocked, so this tests nothing:\n%s", profile);
}

/* Conv -> act -> Mul(conv, act): SiLU (Sigmoid) and Hardswish (HardSigmoid 1/6, 0.5)
 * as torch.onnx writes them at opset 13. 24 channels: the blocked layout pads them. */
static builder *conv_times_act(const char *what, const char *act, float alpha, bool mul_first) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 8, 6, 6));
  b_random(b, "w", DIMS(24, 8, 3, 3), -0.3f, 0.3f);
  b_node(b, "Conv", IN("x", "w"), OUT("c0"), ATTRS(A_INTS("pads", 1, 1, 1, 1)));
  b_random(b, "bn_s", DIMS(24), 0.5f, 1.5f);
  b_random(b, "bn_b", DIMS(24), -0.5f, 0.5f);
  b_random(b, "bn_m", DIMS(24), -0.5f, 0.5f);
  b_random(b, "bn_v", DIMS(24), 0.5f, 1.5f);
  /* folded into the Conv after the rewrite, by rewiring the BN's readers: a reader
   * counted twice there kept the Swish from the Conv */
  b_node(b, "BatchNormalization", IN("c0", "bn_s", "bn_b", "bn_m", "bn_v"), OUT("c"), NULL);
  if (strcmp(act, "Sigmoid") == 0) b_node(b, act, IN("c"), OUT("a"), NULL);
  else b_node(b, act, IN("c"), OUT("a"), ATTRS(A_FLOAT("alpha", alpha), A_FLOAT("beta", 0.5f)));
  b_node(b, "Mul", mul_first ? IN("a", "c") : IN("c", "a"), OUT("y"), NULL);
  b_output(b, "y");
  return b;
}

static void test_conv_times_activation_fused(void **state) {
  char profile[4096], line[256], act_node[32];
  for (int v = 0; v < 4; v++) {
    const char *act = v < 2 ? "Sigmoid" : "HardSigmoid";
    snprintf(act_node, sizeof act_node, "%s_2", act);
    check_graph_tuned(conv_times_act(__func__, act, 1.0f / 6.0f, v % 2));
    run_profile(conv_times_act(__func__, act, 1.0f / 6.0f, v % 2), &tuned_params, 4, false, true, profile,
                sizeof profile);
    if (profile_line(profile, "Mul_3", line, sizeof line) || profile_line(profile, act_node, line, sizeof line) ||
        !profile_line(profile, "Conv_0", line, sizeof line))
      fail_msg("%s times the Conv's output is not one Conv step:\n%s", act, profile);
    if (strstr(profile, "ref:")) fail_msg("a step runs on oneDNN's reference kernel:\n%s", profile);
  }
  /* a HardSigmoid that is not HardSwish's stays as it is, and right */
  check_graph_tuned(conv_times_act(__func__, "HardSigmoid", 0.2f, false));
  run_profile(conv_times_act(__func__, "HardSigmoid", 0.2f, false), &tuned_params, 4, false, true, profile,
              sizeof profile);
  if (!profile_line(profile, "Mul_3", line, sizeof line)) fail_msg("HardSigmoid 0.2 was fused:\n%s", profile);
}

/* regnet_y's blocks: a grouped 3x3 convolution (8 channels a group: oneDNN writes
 * nChw8c), squeeze-excitation (mean, two 1x1 convolutions, Sigmoid) whose [N, C, 1, 1]
 * scale multiplies it, and a 1x1 convolution to a channel count that is no multiple of
 * 16. At batch 4 the Mul ran on the reference binary kernel (nChw8c with a broadcast);
 * at batch 1, after the batch-4 plan had laid out the weights, the last convolution ran
 * on the reference convolution (98% of regnet_y_400mf's time). */
static builder *se_block(const char *what) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 48, 8, 8));
  b_random(b, "wg", DIMS(48, 8, 3, 3), -0.3f, 0.3f);
  b_random(b, "w1", DIMS(12, 48, 1, 1), -0.3f, 0.3f);
  b_random(b, "w2", DIMS(48, 12, 1, 1), -0.3f, 0.3f);
  b_random(b, "wo", DIMS(40, 48, 1, 1), -0.3f, 0.3f);
  b_node(b, "Conv", IN("x", "wg"), OUT("g"), ATTRS(A_INTS("pads", 1, 1, 1, 1), A_INT("group", 6)));
  b_node(b, "Relu", IN("g"), OUT("r"), NULL);
  b_node(b, "GlobalAveragePool", IN("r"), OUT("p"), NULL);
  b_node(b, "Conv", IN("p", "w1"), OUT("f1"), NULL);
  b_node(b, "Relu", IN("f1"), OUT("a1"), NULL);
  b_node(b, "Conv", IN("a1", "w2"), OUT("f2"), NULL);
  b_node(b, "Sigmoid", IN("f2"), OUT("sc"), NULL);
  b_node(b, "Mul", IN("sc", "r"), OUT("m"), NULL);
  b_node(b, "Conv", IN("m", "wo"), OUT("y"), NULL);
  b_output(b, "y");
  return b;
}

/* regnet_y_400mf's layer that took 98% of its time at batch 1: a 1x1 convolution from
 * 208 channels to 440, whose weights' layout, chosen by oneDNN's brgemm kernel in a plan
 * for 2 threads, the same kernel refuses in the plan for 1 thread: only the reference
 * kernel took it, and it was taken because it was tried first. */
static builder *conv_208_440(const char *what) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 208, 14, 14));
  b_random(b, "w", DIMS(440, 208, 1, 1), -0.1f, 0.1f);
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  b_node(b, "Conv", IN("r", "w"), OUT("y"), NULL);
  b_output(b, "y");
  return b;
}

static void test_regnet_blocks_off_reference_kernels(void **state) {
  char profile[8192];
  check_graph(conv_208_440(__func__));
  run_profile(conv_208_440(__func__), NULL, 1, true, true, profile, sizeof profile);
  expect_steps_off_reference(profile, (const char *const[]){"Conv_1", NULL}, 1);
  check_graph_tuned(se_block(__func__));
  for (int batch = 4; batch >= 1; batch -= 3) {
    run_profile(se_block(__func__), &tuned_params, batch, true, true, profile, sizeof profile);
    expect_steps_off_reference(profile, (const char *const[]){"Mul_7", "Conv_8", NULL}, batch);
  }
}

/* ---- bfloat16 ---- */

/* residual sums accumulated in place into bfloat16 buffers, a max-pool between them */
static builder *bf16_residual_blocks(const char *what) { return two_residual_blocks(what, 16, 9, 10); }
static void test_bf16_residual_blocks(void **state) { check_graph_bf16(bf16_residual_blocks, __func__); }

/* Regression: the squeeze-excitation product read its [N, C, 1, 1] scales, which a
 * bfloat16 convolution wrote, as float32 (the pair's kernel was made for the bfloat16
 * layout, the operand handed over converted): efficientnet_b0 and mobilenet_v3 were
 * off by 99% of their output's magnitude. The graph ends in a Conv: its bfloat16 output
 * must reach the caller as float32. */
static builder *bf16_se_graph(const char *what) { return se_graph(what, 32, true); }
static void test_bf16_se_block(void **state) {
  check_graph_bf16(bf16_se_graph, __func__);
  check_graph_bf16(se_block, __func__);
}

/* the stride-2 convolutions in nhwc (ops_conv.c) between blocked ones */
static void test_bf16_downsampling(void **state) { check_graph_bf16(downsampling_graph, __func__); }

/* a gate: the product of two bfloat16 tensors of one shape stays bfloat16, read by the
 * next convolution as it is */
static builder *gated_convs(const char *what) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 16, 6, 7));
  b_random(b, "wa", DIMS(32, 16, 3, 3), -0.3f, 0.3f);
  b_random(b, "wb", DIMS(32, 16, 1, 1), -0.3f, 0.3f);
  b_random(b, "wo", DIMS(16, 32, 1, 1), -0.3f, 0.3f);
  b_node(b, "Conv", IN("x", "wa"), OUT("ca"), ATTRS(A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Relu", IN("ca"), OUT("a"), NULL);
  b_node(b, "Conv", IN("x", "wb"), OUT("cb"), NULL);
  b_node(b, "Sigmoid", IN("cb"), OUT("g"), NULL);
  b_node(b, "Mul", IN("a", "g"), OUT("m"), NULL);
  b_node(b, "Conv", IN("m", "wo"), OUT("y"), NULL);
  b_output(b, "y");
  return b;
}
static void test_bf16_gated(void **state) {
  check_graph_bf16(gated_convs, __func__);
  char profile[8192];
  run_profile(gated_convs(__func__), &bf16_params, 4, false, true, profile, sizeof profile);
  if (strstr(profile, "(reorder of a)") || strstr(profile, "(reorder of g)") || strstr(profile, "(reorder of m)"))
    fail_msg("the gate's operands or product went through float32:\n%s", profile);
}

/* DenseNet's pattern, as torch.onnx writes it. Two dense layers: each joins the
 * features before it (Concat), normalizes them with a BatchNormalization that no Conv
 * precedes (so it is not folded), Relu, a 1x1 and a 3x3 Conv whose 16 channels join the
 * next Concat. Then a transition: the same normalization, a 1x1 Conv, a Pad by zeros
 * and an AveragePool counting padding, joined with a Conv of the result. */
static builder *dense_block(const char *what) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 16, 8, 8));
  b_random(b, "w0", DIMS(32, 16, 3, 3), -0.3f, 0.3f);
  b_node(b, "Conv", IN("x", "w0"), OUT("f0"), ATTRS(A_INTS("pads", 1, 1, 1, 1))); /* 0 */
  const char *cat[] = {"f0", "c1", "c2"}, *relu[] = {"r1", "r2", "r3"}, *bn[] = {"n1", "n2", "n3"};
  char w1[8], w2[8], h[8], hr[8], g[8];
  for (int l = 0; l < 3; l++) { /* nodes 1-5, 7-11, 13-15 */
    int64_t in_ch = 32 + 16 * l;
    add_post_op(b, "BN", cat[l], bn[l], in_ch, l);
    b_node(b, "Relu", IN(bn[l]), OUT(relu[l]), NULL);
    snprintf(w1, sizeof w1, "w1_%d", l);
    snprintf(h, sizeof h, "h%d", l);
    b_random(b, w1, DIMS(32, in_ch, 1, 1), -0.3f, 0.3f);
    b_node(b, "Conv", IN(relu[l], w1), OUT(h), NULL);
    if (l == 2) break;
    snprintf(w2, sizeof w2, "w2_%d", l);
    snprintf(hr, sizeof hr, "hr%d", l);
    snprintf(g, sizeof g, "g%d", l);
    b_random(b, w2, DIMS(16, 32, 3, 3), -0.3f, 0.3f);
    b_node(b, "Relu", IN(h), OUT(hr), NULL);
    b_node(b, "Conv", IN(hr, w2), OUT(g), ATTRS(A_INTS("pads", 1, 1, 1, 1)));
    if (l == 0) b_node(b, "Concat", IN("f0", "g0"), OUT("c1"), ATTRS(A_INT("axis", 1))); /* 6 */
    else b_node(b, "Concat", IN("f0", "g0", "g1"), OUT("c2"), ATTRS(A_INT("axis", 1)));  /* 12 */
  }
  b_ints(b, "zeros", 8, (const int64_t[]){0, 0, 0, 0, 0, 0, 0, 0});
  b_node(b, "Pad", IN("h2", "zeros"), OUT("tp"), ATTRS(A_STR("mode", "constant"))); /* 16 */
  b_node(b, "AveragePool", IN("tp"), OUT("p"),
         ATTRS(A_INTS("kernel_shape", 2, 2), A_INTS("strides", 2, 2), A_INT("count_include_pad", 1)));
  b_random(b, "w3", DIMS(16, 32, 3, 3), -0.3f, 0.3f);
  b_node(b, "Conv", IN("p", "w3"), OUT("g3"), ATTRS(A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Concat", IN("p", "g3"), OUT("y"), ATTRS(A_INT("axis", 1))); /* 19 */
  b_output(b, "y");
  return b;
}

/* The BatchNormalizations absorb their Relus (one oneDNN step each), the Pad by zeros
 * is gone, and no Concat runs oneDNN's reference kernel: the Pad's plain output beside
 * the blocked Conv made the last one do so, and every later Concat of a DenseNet block. */
static void test_dense_block(void **state) {
  check_graph(dense_block(__func__));
  check_graph_tuned(dense_block(__func__));
  char profile[8192], line[256];
  run_profile(dense_block(__func__), &tuned_params, 4, false, true, profile, sizeof profile);
  for (const char *const *gone = (const char *const[]){"Relu_2", "Relu_8", "Relu_14", "Pad_16", NULL}; *gone; gone++)
    if (profile_line(profile, *gone, line, sizeof line)) fail_msg("%s is a step of its own:\n%s", *gone, profile);
  expect_steps_off_reference(profile, (const char *const[]){"BatchNormalization_1", "Concat_6", "Concat_12",
                                                            "AveragePool_17", "Concat_19", NULL}, 4);
}

/* A BatchNormalization absorbs only a Relu of slope 0 that alone reads it */
static builder *bn_then(const char *what, const char *act, bool shared) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 16, 5, 5));
  add_post_op(b, "BN", "x", "n", 16, 0);
  add_post_op(b, act, "n", shared ? "a" : "y", 16, 1);
  if (shared) b_node(b, "Add", IN("a", "n"), OUT("y"), NULL);
  b_output(b, "y");
  return b;
}
static void test_batchnorm_activation(void **state) {
  static const struct {
    const char *act, *step; /* the activation and its node's name */
    bool shared, absorbed;
  } cases[] = {{"Relu", "Relu_1", false, true},
               {"Relu", "Relu_1", true, false},
               {"LeakyRelu", "LeakyRelu_1", false, false},
               {"Clip6", "Clip_1", false, false}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    builder *b = bn_then(__func__, cases[k].act, cases[k].shared);
    b->in_lo = -8, b->in_hi = 8; /* normalized values beyond Clip's 6 */
    check_graph(b);
    char profile[4096], line[256];
    run_profile(bn_then(__func__, cases[k].act, cases[k].shared), NULL, 4, false, true, profile, sizeof profile);
    if (profile_line(profile, cases[k].step, line, sizeof line) == cases[k].absorbed)
      fail_msg("%s%s: expected %s:\n%s", cases[k].act, cases[k].shared ? " (shared)" : "",
               cases[k].absorbed ? "absorbed by the BatchNormalization" : "a step of its own", profile);
  }
}

/* A Pad by zeros goes, but for one whose output is the graph's (kept, a copy) and one
 * whose pads do not fit its input's rank (refused, as any Pad's would be) */
static builder *zero_pad(const char *what, int count, bool on_input) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 4, 3, 5));
  b_ints(b, "zeros", count, (const int64_t[8]){0});
  if (on_input) { /* the graph input's rank is known when the Pad would be removed */
    b_node(b, "Pad", IN("x", "zeros"), OUT("p"), ATTRS(A_STR("mode", "constant")));
    b_node(b, "Relu", IN("p"), OUT("y"), NULL);
  } else {
    b_node(b, "Relu", IN("x"), OUT("r"), NULL);
    b_node(b, "Pad", IN("r", "zeros"), OUT("y"), ATTRS(A_STR("mode", "constant")));
  }
  b_output(b, "y");
  return b;
}
static void test_pad_by_zeros_kept_or_refused(void **state) {
  check_graph(zero_pad(__func__, 8, false));
  char profile[4096], line[256];
  run_profile(zero_pad(__func__, 8, false), NULL, 2, false, true, profile, sizeof profile);
  if (!profile_line(profile, "Pad_1", line, sizeof line)) fail_msg("the graph's output has no step:\n%s", profile);
  builder *b = zero_pad(__func__, 6, true);
  size_t size;
  void *buf = b_pack(b, &size);
  inferd_model *m = NULL;
  inferd_session *s = NULL;
  inferd_status st = {0};
  static float in[4 * 3 * 5], out[4 * 3 * 5];
  inferd_code rc = inferd_model_load_memory(buf, size, NULL, &m, &st);
  if (rc == INFERD_OK) {
    assert_int_equal(inferd_session_new(m, &(inferd_session_params){.threads = 1}, &s, &st), INFERD_OK);
    rc = inferd_session_run(s, 1, (const float *const[]){in}, (float *[]){out}, &st);
  }
  if (rc == INFERD_OK || !strstr(st.message, "pads must be a constant of 8 values"))
    fail_msg("6 pads for a 4-D input: got %s (%s)", inferd_code_name(rc), st.message);
  inferd_session_free(s);
  inferd_model_free(m);
  free(buf);
  b_free(b);
}

/* DenseNet's Concat, BatchNormalization and Relu keep the bfloat16 that its Convs
 * write: no value but the graph's input and output passes through float32 */
static void test_bf16_dense_block(void **state) {
  check_graph_bf16(dense_block, __func__);
  char profile[8192];
  run_profile(dense_block(__func__), &bf16_params, 4, false, true, profile, sizeof profile);
  for (const char *at = profile; (at = strstr(at, "(reorder of ")) != NULL; at++) {
    const char *name = at + strlen("(reorder of ");
    if (strncmp(name, "x)", 2) != 0 && strncmp(name, "y)", 2) != 0)
      fail_msg("a value inside the block went through float32:\n%s", profile);
  }
}

/* a product by constant weights reads A (a converted copy) and the weights in bfloat16 */
static void test_bf16_linear(void **state) { check_graph_bf16(linear_nhwc, __func__); }

static void test_error_precision_unknown(void **state) {
  builder *b = se_block(__func__);
  size_t size;
  void *buf = b_pack(b, &size);
  inferd_model *m = NULL;
  inferd_status st = {0};
  inferd_model_params mp = {.precision = (inferd_precision)7};
  assert_int_equal(inferd_model_load_memory(buf, size, &mp, &m, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "unknown precision 7"));
  assert_null(m);
  free(buf);
  b_free(b);
}

/* Once the Identity and Dropout nodes are gone, the Relu reads the Gemm's output and
 * the Tanh the Relu's, so the Gemm absorbs both: they have no step of their own. */
static void test_reversed_identities_then_fusion(void **state) {
  check_graph(reversed_identities_graph(__func__));
  builder *b = reversed_identities_graph(__func__);
  inferd_model *m = load_or_fail(b, NULL);
  inferd_session *s = NULL;
  inferd_status st = {0};
  assert_int_equal(inferd_session_new(m, &(inferd_session_params){.threads = 1, .profile = 1}, &s, &st), INFERD_OK);
  static float in[8], out[8];
  const float *ins[1] = {in};
  float *outs[1] = {out};
  assert_int_equal(inferd_session_run(s, 1, ins, outs, &st), INFERD_OK);
  char profile[4096], line[256];
  inferd_session_profile_steps(s, 1, 20, profile, sizeof profile);
  if (!profile_line(profile, "Gemm_0", line, sizeof line)) fail_msg("no step for Gemm_0:\n%s", profile);
  static const char *const absorbed[] = {"Relu_2", "Tanh_5", "Identity_1", "Dropout_3", "Identity_4"};
  for (int k = 0; k < 5; k++)
    if (profile_line(profile, absorbed[k], line, sizeof line)) fail_msg("%s has a step:\n%s", absorbed[k], profile);
  inferd_session_free(s);
  inferd_model_free(m);
  b_free(b);
}

enum { CHAIN_ADDS = 10000 }; /* 20,003 nodes */

/* Regression: the loader sorted nodes by sweeping the file over and over, placing one
 * node per sweep of a chain written last node first (16 s to load 40,000 Relu nodes),
 * and the passes scanned every node for each Identity they removed and each fusion they
 * tried (13.5 s for 80,000 Identity nodes). This chain, written last node first, is
 * x [N, 4] -> MatMul(2 I) -> Identity -> Relu -> CHAIN_ADDS x (Identity -> Add 1): it must
 * load and give Relu(2 x) + CHAIN_ADDS, exactly for the small integers fed. The builder
 * holds 48 nodes, so the model is written here. No time is asserted: the commits that
 * made loading linear give their measurements. */
static void test_long_reversed_chain(void **state) {
  enum { N_NODES = 3 + 2 * CHAIN_ADDS, NAME = 16 };
  Onnx__NodeProto *nodes = calloc(N_NODES, sizeof *nodes);
  Onnx__NodeProto **node_ptrs = calloc(N_NODES, sizeof *node_ptrs);
  char (*names)[NAME] = calloc(N_NODES + 1, sizeof *names); /* names[k]: the value node k writes */
  char (*node_names)[NAME] = calloc(N_NODES, sizeof *node_names);
  char **ins = calloc(2 * N_NODES, sizeof *ins), **outs = calloc(N_NODES, sizeof *outs);
  pack_scratch *s = calloc(1, sizeof *s);
  assert_true(nodes && node_ptrs && names && node_names && ins && outs && s);
  for (int k = 0; k < N_NODES; k++) {
    const char *op = k == 0 ? "MatMul" : k == 2 ? "Relu" : k % 2 == 1 ? "Identity" : "Add";
    if (k == N_NODES - 1) strcpy(names[k], "y");
    else snprintf(names[k], NAME, "v%d", k);
    snprintf(node_names[k], NAME, "%s_%d", op, k);
    Onnx__NodeProto *n = &nodes[k];
    *n = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
    n->name = node_names[k];
    n->op_type = (char *)op;
    ins[2 * k] = k == 0 ? (char *)"x" : names[k - 1];
    ins[2 * k + 1] = k == 0 ? (char *)"two_i" : (char *)"one";
    n->n_input = k == 0 || strcmp(op, "Add") == 0 ? 2 : 1;
    n->input = &ins[2 * k];
    outs[k] = names[k];
    n->n_output = 1;
    n->output = &outs[k];
    node_ptrs[N_NODES - 1 - k] = n; /* last node first */
  }
  float two_i[16] = {0}, one = 1.0f;
  for (int i = 0; i < 4; i++) two_i[i * 5] = 2.0f;
  Onnx__TensorProto inits[2];
  Onnx__TensorProto *init_ptrs[2] = {&inits[0], &inits[1]};
  int64_t w_dims[2] = {4, 4};
  for (int i = 0; i < 2; i++) {
    inits[i] = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
    inits[i].name = i == 0 ? "two_i" : "one";
    inits[i].n_dims = i == 0 ? 2 : 0;
    inits[i].dims = w_dims;
    inits[i].has_data_type = 1;
    inits[i].data_type = INFERD_DTYPE_FLOAT;
    inits[i].has_raw_data = 1;
    inits[i].raw_data.len = i == 0 ? sizeof two_i : sizeof one;
    inits[i].raw_data.data = i == 0 ? (uint8_t *)two_i : (uint8_t *)&one;
  }
  b_input_rec x_shape = {.name = "x", .rank = 2, .dims = {0, 4}};
  pack_value_info(s, 0, "x", &x_shape, &s->in_ptrs[0]);
  pack_value_info(s, B_MAX_IO, "y", NULL, &s->out_ptrs[0]);
  Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
  graph.name = "long_reversed_chain";
  graph.n_node = N_NODES;
  graph.node = node_ptrs;
  graph.n_initializer = 2;
  graph.initializer = init_ptrs;
  graph.n_input = 1;
  graph.input = s->in_ptrs;
  graph.n_output = 1;
  graph.output = s->out_ptrs;
  Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  Onnx__OperatorSetIdProto *opsets[1] = {&opset};
  opset.domain = "";
  opset.has_version = 1;
  opset.version = 13;
  Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
  model.has_ir_version = 1;
  model.ir_version = 8;
  model.n_opset_import = 1;
  model.opset_import = opsets;
  model.graph = &graph;
  size_t size = onnx__model_proto__get_packed_size(&model);
  void *buf = malloc(size);
  assert_non_null(buf);
  assert_int_equal(onnx__model_proto__pack(&model, buf), size);

  inferd_model *m = NULL;
  inferd_status st = {0};
  inferd_code rc = inferd_model_load_memory(buf, size, NULL, &m, &st);
  if (rc != INFERD_OK) fail_msg("load: got %s, expected OK: %s", inferd_code_name(rc), st.message);
  inferd_session *session = NULL;
  assert_int_equal(inferd_session_new(m, NULL, &session, &st), INFERD_OK);
  float x[3 * 4], y[3 * 4];
  for (int i = 0; i < 12; i++) x[i] = (float)(i % 7 - 3), y[i] = NAN;
  const float *in[1] = {x};
  float *out[1] = {y};
  rc = inferd_session_run(session, 3, in, out, &st);
  if (rc != INFERD_OK) fail_msg("run: got %s, expected OK: %s", inferd_code_name(rc), st.message);
  for (int i = 0; i < 12; i++) {
    float want = (x[i] > 0 ? 2 * x[i] : 0) + CHAIN_ADDS;
    if (y[i] != want) fail_msg("element %d (x = %g): got %.9g, expected %.9g", i, (double)x[i], (double)y[i], (double)want);
  }
  inferd_session_free(session);
  inferd_model_free(m);
  free(buf);
  free(s);
  free(ins);
  free(outs);
  free(node_names);
  free(names);
  free(node_ptrs);
  free(nodes);
}

/* A cycle is refused, counting the nodes on it and after it, not the one beside it. */
static void test_error_cycle(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3));
  b_node(b, "Add", IN("x", "b"), OUT("a"), NULL);
  b_node(b, "Relu", IN("a"), OUT("b"), NULL);
  b_node(b, "Relu", IN("b"), OUT("y"), NULL);
  b_node(b, "Sigmoid", IN("x"), OUT("z"), NULL);
  b_output(b, "y");
  b_output(b, "z");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"graph has a cycle", "3 of 4 nodes", NULL});
  b = b_new(__func__); /* a node reading its own output */
  b_input(b, "x", DIMS(0, 3));
  b_node(b, "Add", IN("x", "a"), OUT("a"), NULL);
  b_output(b, "a");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"graph has a cycle", "1 of 1 nodes", NULL});
}

/* ==== tests: error paths ================================================================================ */

static void test_error_unknown_op(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4, 5, 5));
  b_node(b, "Relu", IN("x"), OUT("r"), NULL);
  const char *name = b_node(b, "FancyOp", IN("r"), OUT("y"), NULL);
  b_output(b, "y");
  char quoted[B_NAME + 2];
  snprintf(quoted, sizeof quoted, "'%s'", name);
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){quoted, "FancyOp", NULL});
}

/* Regression: lowerings read attributes through ir_attr_int and friends, which give the
 * default for an attribute of another type, so a Conv whose strides were an INT ran
 * with stride 1 and a Gemm whose alpha was an INT ran with alpha 1. An attribute of the
 * wrong type, one the op does not take, or one given twice is refused, naming it. */
static void test_error_attribute_type(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 8, 8));
  b_random(b, "w", DIMS(4, 3, 3, 3), -1.0f, 1.0f);
  b_node(b, "Conv", IN("x", "w"), OUT("y"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INT("strides", 2)));
  b_output(b, "y");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"Conv", "'strides' is INT, expected INTS", NULL});
  b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4));
  b_random(b, "w", DIMS(4, 5), -1.0f, 1.0f);
  b_node(b, "Gemm", IN("x", "w"), OUT("y"), ATTRS(A_INT("alpha", 2)));
  b_output(b, "y");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"Gemm", "'alpha' is INT, expected FLOAT", NULL});
  b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4));
  b_node(b, "Relu", IN("x"), OUT("y"), ATTRS(A_FLOAT("alpha", 0.5f)));
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"Relu", "'alpha' is not supported", NULL});
  b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4));
  b_node(b, "Concat", IN("x", "x"), OUT("y"), ATTRS(A_INT("axis", 1), A_INT("axis", 0)));
  b_output(b, "y");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"Concat", "'axis' is given twice", NULL});
  b = b_new(__func__); /* a Constant's attribute name says its type */
  b_input(b, "x", DIMS(0, 4));
  b_node(b, "Constant", NULL, OUT("k"), ATTRS(A_INT("value_float", 2)));
  b_node(b, "Add", IN("x", "k"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"Constant", "'value_float'", NULL});
}

/* Loads b, runs batch 1 on `x` and expects `want` exactly (n floats each). Frees b. */
static void run_exact(builder *b, const float *x, const float *want, int n) {
  inferd_model *m = load_or_fail(b, NULL);
  inferd_session *s = NULL;
  inferd_status st = {0};
  assert_int_equal(inferd_session_new(m, &(inferd_session_params){.threads = 1}, &s, &st), INFERD_OK);
  float got[16];
  assert_true(n <= 16);
  if (inferd_session_run(s, 1, (const float *const[]){x}, (float *const[]){got}, &st) != INFERD_OK)
    fail_msg("%s: run: %s", b->what, st.message);
  for (int i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("%s: y[%d] is %g, expected %g", b->what, i, (double)got[i], (double)want[i]);
  inferd_session_free(s);
  inferd_model_free(m);
  b_free(b);
}

/* Regression: constants were folded through double, whose 53-bit significand turns
 * 2^53 + 1 into 2^53: Equal(2^53 + 1, 2^53) said true and Range from 2^53 + 1 counted
 * 2^53, 2^53 + 2, 2^53 + 4. int64 constants fold exactly. */
static void test_fold_int64_exact(void **state) {
  const int64_t big = (int64_t)1 << 53;
  const float x[3] = {10.0f, 20.0f, 30.0f};
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3));
  b_ints(b, "p", 1, (const int64_t[]){big + 1});
  b_ints(b, "q", 1, (const int64_t[]){big});
  b_const(b, "ones", INFERD_DTYPE_FLOAT, 1, (const int64_t[]){3}, (const float[]){1.0f, 1.0f, 1.0f});
  b_const(b, "zeros", INFERD_DTYPE_FLOAT, 1, (const int64_t[]){3}, (const float[]){0.0f, 0.0f, 0.0f});
  b_node(b, "Equal", IN("p", "q"), OUT("eq"), NULL);
  b_node(b, "Where", IN("eq", "ones", "zeros"), OUT("w"), NULL);
  b_node(b, "Add", IN("x", "w"), OUT("y"), NULL);
  b_output(b, "y");
  run_exact(b, x, x, 3);

  b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3));
  b_const(b, "start", INFERD_DTYPE_INT64, 0, NULL, (const int64_t[]){big + 1});
  b_const(b, "limit", INFERD_DTYPE_INT64, 0, NULL, (const int64_t[]){big + 4});
  b_const(b, "delta", INFERD_DTYPE_INT64, 0, NULL, (const int64_t[]){1});
  b_ints(b, "q", 1, (const int64_t[]){big});
  b_node(b, "Range", IN("start", "limit", "delta"), OUT("r"), NULL);
  b_node(b, "Sub", IN("r", "q"), OUT("d"), NULL);
  b_node(b, "Cast", IN("d"), OUT("f"), ATTRS(A_INT("to", 1)));
  b_node(b, "Add", IN("x", "f"), OUT("y"), NULL);
  b_output(b, "y");
  run_exact(b, x, (const float[]){11.0f, 22.0f, 33.0f}, 3);
}

/* Regression: a name defined twice (two initializers, or a graph input listed twice)
 * loaded with the later initializer silently winning, or as a model of two inputs.
 * ONNX graphs are single assignment: refused, naming the value. */
static void test_error_name_defined_twice(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4));
  b_random(b, "w", DIMS(4), -1.0f, 1.0f);
  b_random(b, "w", DIMS(4), 2.0f, 3.0f);
  b_node(b, "Add", IN("x", "w"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"initializer 'w' is defined twice", NULL});
  b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4));
  b_input(b, "x", DIMS(0, 4));
  b_node(b, "Relu", IN("x"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"graph input 'x' is listed twice", NULL});
}

/* Regression: Clip's min and max became inputs in opset 11 and ReduceMean's axes an
 * input in opset 18. Left as attributes in a newer model they were ignored: Clip
 * passed everything through, ReduceMean averaged over every axis. */
static void test_error_attribute_of_older_opset(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 4));
  b_node(b, "Clip", IN("x"), OUT("y"), ATTRS(A_FLOAT("min", 0.0f), A_FLOAT("max", 0.5f)));
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"Clip", "'min'", "opset 13", NULL});
  b = b_new(__func__);
  b->opset = 18;
  b_input(b, "x", DIMS(0, 4, 5));
  b_node(b, "ReduceMean", IN("x"), OUT("y"), ATTRS(A_INTS("axes", 2)));
  b_output(b, "y");
  expect_load_fails(b, INFERD_UNSUPPORTED, (const char *const[]){"ReduceMean", "'axes'", "opset 18", NULL});
}

static void test_error_weight_raw_data_short(void **state) {
  static const size_t cut[] = {4, 12, 108 * 4 - 4};
  for (size_t k = 0; k < sizeof cut / sizeof *cut; k++) {
    builder *b = b_new(__func__);
    b_input(b, "x", DIMS(0, 3, 6, 6));
    b_random(b, "conv_w", DIMS(4, 3, 3, 3), -1.0f, 1.0f); /* 108 floats */
    b_node(b, "Conv", IN("x", "conv_w"), OUT("y"), ATTRS(A_INTS("kernel_shape", 3, 3)));
    b_output(b, "y");
    b_const_rec *w = b_find_const(b, "conv_w");
    w->raw_len = w->nbytes - cut[k];
    expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"conv_w", NULL});
  }
}

/* Conv 3x3 -> Relu -> GlobalAveragePool -> Flatten -> MatMul, weights "w" and "fc". */
static builder *small_cnn(const char *what) {
  builder *b = b_new(what);
  b_input(b, "x", DIMS(0, 3, 5, 5));
  b_random(b, "w", DIMS(4, 3, 3, 3), -1.0f, 1.0f);
  b_random(b, "fc", DIMS(4, 6), -1.0f, 1.0f);
  b_node(b, "Conv", IN("x", "w"), OUT("c"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1)));
  b_node(b, "Relu", IN("c"), OUT("r"), NULL);
  b_node(b, "GlobalAveragePool", IN("r"), OUT("g"), NULL);
  b_node(b, "Flatten", IN("g"), OUT("f"), NULL);
  b_node(b, "MatMul", IN("f", "fc"), OUT("y"), NULL);
  b_output(b, "y");
  return b;
}

/* Weights as ONNX external data (each in a file beside the model, as torch.onnx.export
 * writes models over 2 GB): a model from memory reads them from
 * inferd_model_params.external_data_dir and computes what the reference does; without
 * a directory it is refused, naming the tensor and its file. (Files, relative paths and
 * bad locations: tests/e2e/external_data_test.sh and malformed_test.sh.) */
static builder *external_model(const char *what, const char *dir) {
  builder *b = small_cnn(what);
  b->external_dir = dir;
  return b;
}

static void test_external_data_from_memory(void **state) {
  char dir[] = "/tmp/inferd-test-external.XXXXXX";
  assert_non_null(mkdtemp(dir));
  inferd_model_params params = {.external_data_dir = dir};
  check_graph_with(external_model(__func__, dir), &params, NULL, 0, false);
  /* 108 + 24 floats: refused below 528 bytes before any is read, loaded at 528 */
  params.max_external_bytes = 528;
  check_graph_with(external_model(__func__, dir), &params, NULL, 0, false);
  params.max_external_bytes = 527;
  builder *b = external_model(__func__, dir);
  size_t size;
  void *buf = b_pack(b, &size);
  b_free(b);
  inferd_model *m = NULL;
  inferd_status st = {0};
  assert_int_equal(inferd_model_load_memory(buf, size, &params, &m, &st), INFERD_NO_MEMORY);
  assert_null(m);
  if (!strstr(st.message, "(2 tensors) need 0.0 MB (528 bytes), more than"))
    fail_msg("max_external_bytes 527: %s", st.message);
  free(buf);
  expect_load_fails(external_model(__func__, dir), INFERD_UNSUPPORTED,
                    (const char *const[]){"initializer 'w'", "'w.bin'", "came without a directory", NULL});
  static const char *const files[] = {"w.bin", "fc.bin"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    assert_int_equal(unlink(path), 0); /* each weight was external data */
  }
  assert_int_equal(rmdir(dir), 0);
}

/* b's model with initializer `name` made a Constant node's value instead (where
 * onnx.external_data_helper's convert_attribute=True leaves external data too). */
static void *pack_as_constant(builder *b, const char *name, size_t *size) {
  size_t n;
  void *buf = b_pack(b, &n);
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, n, buf);
  free(buf);
  assert_non_null(m);
  Onnx__GraphProto *g = m->graph;
  size_t i = 0;
  while (i < g->n_initializer && strcmp(g->initializer[i]->name, name) != 0) i++;
  assert_true(i < g->n_initializer);
  Onnx__TensorProto *t = g->initializer[i];
  g->initializer[i] = g->initializer[--g->n_initializer];
  Onnx__AttributeProto value = ONNX__ATTRIBUTE_PROTO__INIT, *attrs[1] = {&value};
  value.name = "value";
  value.has_type = 1;
  value.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
  value.t = t;
  char *outputs[1] = {(char *)name};
  Onnx__NodeProto constant = ONNX__NODE_PROTO__INIT, **nodes = malloc((g->n_node + 1) * sizeof *nodes), **old = g->node;
  assert_non_null(nodes);
  constant.name = "constant";
  constant.op_type = "Constant";
  constant.n_output = 1;
  constant.output = outputs;
  constant.n_attribute = 1;
  constant.attribute = attrs;
  nodes[0] = &constant;
  memcpy(nodes + 1, g->node, g->n_node * sizeof *nodes);
  g->node = nodes, g->n_node++;
  *size = onnx__model_proto__get_packed_size(m);
  buf = malloc(*size);
  assert_non_null(buf);
  assert_int_equal(onnx__model_proto__pack(m, buf), *size);
  g->node = old, g->n_node--; /* as unpacked, for free_unpacked */
  g->initializer[g->n_initializer++] = t;
  free(nodes);
  onnx__model_proto__free_unpacked(m, NULL);
  return buf;
}

/* max_external_bytes counts a Constant's external value too: 432 bytes of "w" and 96 of
 * "fc" as a Constant's value are refused at 500, loaded at 528. */
static void test_external_data_in_constant(void **state) {
  char dir[] = "/tmp/inferd-test-external.XXXXXX";
  assert_non_null(mkdtemp(dir));
  builder *b = external_model(__func__, dir);
  size_t size;
  void *buf = pack_as_constant(b, "fc", &size);
  b_free(b);
  inferd_model_params params = {.external_data_dir = dir, .max_external_bytes = 500};
  inferd_model *m = NULL;
  inferd_status st = {0};
  assert_int_equal(inferd_model_load_memory(buf, size, &params, &m, &st), INFERD_NO_MEMORY);
  if (!strstr(st.message, "(2 tensors) need 0.0 MB (528 bytes)")) fail_msg("max_external_bytes 500: %s", st.message);
  params.max_external_bytes = 528;
  if (inferd_model_load_memory(buf, size, &params, &m, &st) != INFERD_OK) fail_msg("max_external_bytes 528: %s", st.message);
  inferd_model_free(m);
  free(buf);
  char path[512];
  snprintf(path, sizeof path, "%s/w.bin", dir);
  assert_int_equal(unlink(path), 0);
  snprintf(path, sizeof path, "%s/fc.bin", dir);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(rmdir(dir), 0);
}

/* Every prefix of a valid model is refused as INVALID_ARG, without a crash. */
static void test_error_truncated_model(void **state) {
  builder *b = small_cnn(__func__);
  size_t size;
  void *buf = b_pack(b, &size);
  for (size_t len = 0; len < size; len++) {
    void *part = malloc(len ? len : 1); /* exact size, so that an over-read is an over-read */
    assert_non_null(part);
    memcpy(part, buf, len);
    inferd_model *m = NULL;
    inferd_status st = {0};
    inferd_code rc = inferd_model_load_memory(part, len, NULL, &m, &st);
    free(part);
    if (rc != INFERD_INVALID_ARG)
      fail_msg("model cut to %zu of %zu bytes: got %s, expected INVALID_ARG (message: %s)", len, size,
               inferd_code_name(rc), st.message);
    if (m) fail_msg("model cut to %zu of %zu bytes: a model was returned with INVALID_ARG", len, size);
    if (!st.message[0]) fail_msg("model cut to %zu of %zu bytes: empty message", len, size);
    inferd_model_free(m);
  }
  /* the whole model still loads */
  inferd_model *m = NULL;
  inferd_status st = {0};
  inferd_code rc = inferd_model_load_memory(buf, size, NULL, &m, &st);
  if (rc != INFERD_OK) fail_msg("whole model: got %s, expected OK: %s", inferd_code_name(rc), st.message);
  inferd_model_free(m);
  free(buf);
  b_free(b);
}

static void test_error_batch_size(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 4, 4));
  b_random(b, "w", DIMS(5, 3, 1, 1), -1.0f, 1.0f);
  b_node(b, "Conv", IN("x", "w"), OUT("y"), ATTRS(A_INTS("kernel_shape", 1, 1)));
  b_output(b, "y");
  inferd_model_params mp = {.max_batch = 4};
  inferd_model *m = load_or_fail(b, &mp);
  inferd_session *s = NULL;
  inferd_status st = {0};
  assert_int_equal(inferd_session_new(m, &(inferd_session_params){.threads = 1}, &s, &st), INFERD_OK);
  float in[5 * 3 * 4 * 4] = {0}, out[5 * 5 * 4 * 4];
  const float *ins[1] = {in};
  float *outs[1] = {out};
  static const int bad[] = {0, -1, 5, -1000000};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    memset(&st, 0, sizeof st);
    inferd_code rc = inferd_session_run(s, bad[k], ins, outs, &st);
    if (rc != INFERD_INVALID_ARG)
      fail_msg("run with batch %d: got %s, expected INVALID_ARG (%s)", bad[k], inferd_code_name(rc), st.message);
    if (st.code != INFERD_INVALID_ARG || !st.message[0])
      fail_msg("run with batch %d: status %s \"%s\", expected INVALID_ARG with a message", bad[k],
               inferd_code_name(st.code), st.message);
    int rank;
    int64_t dims[INFERD_MAX_RANK];
    rc = inferd_session_output_shape(s, bad[k], 0, &rank, dims, &st);
    if (rc != INFERD_INVALID_ARG)
      fail_msg("output_shape with batch %d: got %s, expected INVALID_ARG", bad[k], inferd_code_name(rc));
  }
  /* the session still works */
  inferd_code rc = inferd_session_run(s, 4, ins, outs, &st);
  if (rc != INFERD_OK) fail_msg("run with batch 4 after errors: got %s: %s", inferd_code_name(rc), st.message);
  inferd_session_free(s);
  inferd_model_free(m);
  b_free(b);
}

/* inferd_session_profile_steps: the slowest steps of the plan that ran, slowest first,
 * each with its op, a oneDNN kernel, its output shape, GFLOP/s and its node; nothing for
 * a batch size that did not run or a session without profile. */
static void test_profile_steps(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 16, 12, 12));
  b_random(b, "w0", DIMS(32, 16, 3, 3), -0.3f, 0.3f);
  b_random(b, "w1", DIMS(8, 32, 1, 1), -0.3f, 0.3f);
  char big[B_NAME], small[B_NAME];
  snprintf(big, sizeof big, "%s",
           b_node(b, "Conv", IN("x", "w0"), OUT("c0"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1))));
  b_node(b, "Relu", IN("c0"), OUT("r0"), NULL);
  snprintf(small, sizeof small, "%s", b_node(b, "Conv", IN("r0", "w1"), OUT("y"), ATTRS(A_INTS("kernel_shape", 1, 1))));
  b_output(b, "y");
  inferd_model *m = load_or_fail(b, NULL);
  inferd_session *s = NULL, *quiet = NULL;
  inferd_status st = {0};
  assert_int_equal(inferd_session_new(m, &(inferd_session_params){.threads = 1, .profile = 1}, &s, &st), INFERD_OK);
  assert_int_equal(inferd_session_new(m, &(inferd_session_params){.threads = 1}, &quiet, &st), INFERD_OK);
  static float in[2 * 16 * 12 * 12], out[2 * 8 * 12 * 12];
  for (size_t i = 0; i < sizeof in / sizeof *in; i++) in[i] = (float)(i % 7) - 3.0f;
  const float *ins[1] = {in};
  float *outs[1] = {out};
  for (int r = 0; r < 3; r++) {
    assert_int_equal(inferd_session_run(s, 2, ins, outs, &st), INFERD_OK);
    assert_int_equal(inferd_session_run(quiet, 2, ins, outs, &st), INFERD_OK);
  }
  char profile[4096], line[256];
  inferd_session_profile_steps(s, 2, 10, profile, sizeof profile);
  if (!strstr(profile, "at batch 2 (3 runs)")) fail_msg("no header for batch 2, 3 runs:\n%s", profile);
  if (!profile_line(profile, big, line, sizeof line)) fail_msg("no line for node %s:\n%s", big, profile);
  double ms, share, gflops;
  char op[32], kernel[64], shape[32];
  if (sscanf(line, "%lf %lf%% %lf %31s %63s %31s", &ms, &share, &gflops, op, kernel, shape) != 6)
    fail_msg("line for %s does not parse: %s", big, line);
  if (strncmp(op, "Conv", 4) != 0 || strcmp(kernel, "inferd") == 0 || strcmp(shape, "2x32x12x12") != 0 ||
      !(ms > 0) || !(gflops > 0) || !(share > 0 && share <= 100))
    fail_msg("line for %s: %s", big, line);
  if (!profile_line(profile, small, line, sizeof line) || !strstr(line, " 2x8x12x12 "))
    fail_msg("no line with shape 2x8x12x12 for node %s:\n%s", small, profile);
  /* slowest first */
  double last = 1e30;
  for (const char *p = strchr(strchr(profile, '\n') + 1, '\n') + 1; *p; p = strchr(p, '\n') + 1) {
    double t = strtod(p, NULL);
    if (t > last) fail_msg("steps not slowest first:\n%s", profile);
    last = t;
  }
  inferd_session_profile_steps(s, 2, 1, profile, sizeof profile);
  int lines = 0;
  for (const char *p = profile; *p; p++) lines += *p == '\n';
  if (lines != 3) fail_msg("top 1: expected a header of 2 lines and one step:\n%s", profile);
  inferd_session_profile_steps(s, 3, 10, profile, sizeof profile);
  if (profile[0]) fail_msg("batch 3 never ran, yet:\n%s", profile);
  inferd_session_profile_steps(quiet, 2, 10, profile, sizeof profile);
  if (profile[0]) fail_msg("a session without profile, yet:\n%s", profile);
  inferd_session_free(quiet);
  inferd_session_free(s);
  inferd_model_free(m);
  b_free(b);
}

static void test_error_group_does_not_divide_channels(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 5, 4, 4));
  b_random(b, "w", DIMS(4, 2, 3, 3), -1.0f, 1.0f);
  const char *name = b_node(b, "Conv", IN("x", "w"), OUT("y"), ATTRS(A_INTS("kernel_shape", 3, 3), A_INT("group", 2)));
  b_output(b, "y");
  char quoted[B_NAME + 2];
  snprintf(quoted, sizeof quoted, "'%s'", name);
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){quoted, "group", NULL});
}

/* Regression: an empty weight [0, 0, 3] passes the group check for any group (0 % group,
 * 0 / group), and the grouped weights [group, 0, 0, 3] of a group of 2^63 - 1 overflowed
 * their strides (UBSan in md_plain; found by fuzz_onnx). */
static void test_error_conv_group_too_large(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 0, 8));
  b_random(b, "w", DIMS(0, 0, 3), -1.0f, 1.0f);
  const char *name = b_node(b, "Conv", IN("x", "w"), OUT("y"), ATTRS(A_INT("group", INT64_MAX)));
  b_output(b, "y");
  char quoted[B_NAME + 2];
  snprintf(quoted, sizeof quoted, "'%s'", name);
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){quoted, "group 9223372036854775807 is too", NULL});
}

/* Regression: a Conv bias of int64 was taken for float32. oneDNN has no int64 type, so
 * the bias's plain layout was never set and the weight cache read its size from stack
 * garbage: the load failed with a message about another weight's size, or went on to
 * reorder through an undefined descriptor. */
static void test_error_conv_int64_bias(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 3, 5, 5));
  b_random(b, "w", DIMS(4, 3, 3, 3), -1.0f, 1.0f);
  b_ints(b, "bias", 4, (const int64_t[]){1, 2, 3, 4});
  const char *name = b_node(b, "Conv", IN("x", "w", "bias"), OUT("y"), ATTRS(A_INTS("kernel_shape", 3, 3)));
  b_output(b, "y");
  char quoted[B_NAME + 2];
  snprintf(quoted, sizeof quoted, "'%s'", name);
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){quoted, "bias must be a float32", NULL});
}

/* Regression: Range's start, limit and delta (and Equal's, Mod's and Where's data
 * inputs) share one type; an int64 start and limit with a float delta of 0.5 was folded
 * anyway, into the int64 [0, 0, 1, 1, 2, 2] that the Add below then used. */
static void test_error_range_mixed_types(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 6));
  b_const(b, "start", INFERD_DTYPE_INT64, 0, NULL, &(int64_t){0});
  b_const(b, "limit", INFERD_DTYPE_INT64, 0, NULL, &(int64_t){3});
  b_scalar(b, "delta", 0.5f);
  const char *name = b_node(b, "Range", IN("start", "limit", "delta"), OUT("r"), NULL);
  b_node(b, "Cast", IN("r"), OUT("rf"), ATTRS(A_INT("to", INFERD_DTYPE_FLOAT)));
  b_node(b, "Add", IN("x", "rf"), OUT("y"), NULL);
  b_output(b, "y");
  char quoted[B_NAME + 2];
  snprintf(quoted, sizeof quoted, "'%s'", name);
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){quoted, "different types", NULL});
}

/* Split by sizes (opset 13), into equal parts, and by opset 18's num_outputs where the
 * last part is smaller (7 into 3, 3, 1: refused as "cannot split evenly" before) */
static void test_split_sizes_and_parts(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 7, 3));
  b_ints(b, "sizes", 3, (const int64_t[]){1, 4, 2});
  b_node(b, "Split", IN("x", "sizes"), OUT("a", "b", "c"), ATTRS(A_INT("axis", 1)));
  b_node(b, "Split", IN("x"), OUT("d", "e", "f"), ATTRS(A_INT("axis", -1)));
  b_output(b, "a");
  b_output(b, "b");
  b_output(b, "c");
  b_output(b, "f");
  check_graph(b);

  b = b_new(__func__);
  b->opset = 18;
  b_input(b, "x", DIMS(0, 7, 3));
  b_node(b, "Split", IN("x"), OUT("a", "b", "c"), ATTRS(A_INT("axis", 1), A_INT("num_outputs", 3)));
  b_output(b, "a");
  b_output(b, "b");
  b_output(b, "c");
  check_graph(b);
}

/* ... but 5 into 4 parts of 2 leaves nothing for the last; and without num_outputs
 * the parts must be equal */
static void test_error_split_parts(void **state) {
  builder *b = b_new(__func__);
  b->opset = 18;
  b_input(b, "x", DIMS(0, 5));
  b_node(b, "Split", IN("x"), OUT("a", "b", "c", "d"), ATTRS(A_INT("axis", 1), A_INT("num_outputs", 4)));
  b_output(b, "a");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"Split", "cannot split 5 into 4 parts", NULL});
  b = b_new(__func__);
  b_input(b, "x", DIMS(0, 7));
  b_node(b, "Split", IN("x"), OUT("a", "b", "c"), ATTRS(A_INT("axis", 1)));
  b_output(b, "a");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"Split", "cannot split 7 into 3 parts", NULL});
  b = b_new(__func__);
  b->opset = 18;
  b_input(b, "x", DIMS(0, 6));
  b_node(b, "Split", IN("x"), OUT("a", "b", "c"), ATTRS(A_INT("axis", 1), A_INT("num_outputs", 2)));
  b_output(b, "a");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"Split", "num_outputs 2 for 3 outputs", NULL});
}

/* Types ONNX fixes that folding read as numbers: a float condition for Where, a float
 * Mod without fmod=1 (Python's sign rule, which ONNX keeps for integers) */
static void test_error_fold_types(void **state) {
  builder *b = b_new(__func__);
  b_input(b, "x", DIMS(0, 2));
  b_const(b, "cond", INFERD_DTYPE_FLOAT, DIMS(2), (const float[]){1.0f, 0.0f});
  b_const(b, "one", INFERD_DTYPE_FLOAT, DIMS(2), (const float[]){1.0f, 1.0f});
  b_const(b, "two", INFERD_DTYPE_FLOAT, DIMS(2), (const float[]){2.0f, 2.0f});
  b_node(b, "Where", IN("cond", "one", "two"), OUT("w"), NULL);
  b_node(b, "Add", IN("x", "w"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"Where", "must be bool, not float", NULL});

  b = b_new(__func__);
  b_input(b, "x", DIMS(0, 2));
  b_const(b, "a", INFERD_DTYPE_FLOAT, DIMS(2), (const float[]){-3.0f, 3.0f});
  b_const(b, "d", INFERD_DTYPE_FLOAT, DIMS(2), (const float[]){2.0f, 2.0f});
  b_node(b, "Mod", IN("a", "d"), OUT("m"), NULL);
  b_node(b, "Add", IN("x", "m"), OUT("y"), NULL);
  b_output(b, "y");
  expect_load_fails(b, INFERD_INVALID_ARG, (const char *const[]){"Mod", "fmod=1", NULL});
}

/* ==== the table ================================================================================ */

int main(void) {
  const struct CMUnitTest tests[] = {
      /* Conv shapes and attributes */
      cmocka_unit_test(test_conv_3x3_pad1_c3_to_5),
      cmocka_unit_test(test_conv_3x3_pad1_c24_to_32_no_bias),
      cmocka_unit_test(test_conv_3x3_pad1_c32_to_32_rect),
      cmocka_unit_test(test_conv_3x3_no_pad_c5_to_16),
      cmocka_unit_test(test_conv_stride2_c5_to_24_odd),
      cmocka_unit_test(test_conv_stride2_c32_to_32_even_no_bias),
      cmocka_unit_test(test_conv_stride_2x1_c3_to_24),
      cmocka_unit_test(test_conv_7x7_stride2_pad3_c3_to_32),
      cmocka_unit_test(test_conv_depthwise_c24),
      cmocka_unit_test(test_conv_depthwise_c32_stride2),
      cmocka_unit_test(test_conv_depthwise_c5_no_bias),
      cmocka_unit_test(test_conv_depthwise_multiplier2_c5_to_10),
      cmocka_unit_test(test_conv_group2_c6_to_10),
      cmocka_unit_test(test_conv_group2_c32_to_32),
      cmocka_unit_test(test_conv_group4_c24_to_24_stride2),
      cmocka_unit_test(test_conv_dilation2_c5_to_8),
      cmocka_unit_test(test_conv_dilation2_c32_to_32_no_pad),
      cmocka_unit_test(test_conv_dilation_2x3_depthwise_c24),
      cmocka_unit_test(test_conv_1x1_c24_to_5),
      cmocka_unit_test(test_conv_1x1_c32_to_32),
      cmocka_unit_test(test_conv_1x1_stride2_c32_to_24_even),
      cmocka_unit_test(test_conv_1x1_stride2_c5_to_3_odd),
      cmocka_unit_test(test_conv_asymmetric_pads_c5_to_24),
      cmocka_unit_test(test_conv_asymmetric_pads_stride2_c32_to_32),
      cmocka_unit_test(test_conv_auto_pad_same_upper_stride2_c24_to_32),
      cmocka_unit_test(test_conv_auto_pad_same_upper_k4_c3_to_5),
      cmocka_unit_test(test_conv_auto_pad_same_lower_k4_c5_to_16),
      cmocka_unit_test(test_conv_auto_pad_valid_c5_to_24),
      cmocka_unit_test(test_conv_no_kernel_shape_attribute_c5_to_8),
      cmocka_unit_test(test_conv_5x3_kernel_c3_to_16),
      /* fused post-ops */
      cmocka_unit_test(test_fuse_conv_relu_c3_to_16),
      cmocka_unit_test(test_fuse_conv_relu_c24_to_32_stride2),
      cmocka_unit_test(test_fuse_conv_clip6_c3_to_5),
      cmocka_unit_test(test_fuse_conv_clip6_depthwise_c32),
      cmocka_unit_test(test_fuse_conv_clip_min_only_c5_to_24),
      cmocka_unit_test(test_fuse_conv_bn_c5_to_24),
      cmocka_unit_test(test_fuse_conv_bn_relu_c24_to_32),
      cmocka_unit_test(test_fuse_conv_no_bias_bn_relu_c3_to_24),
      cmocka_unit_test(test_fuse_conv_depthwise_bn_clip6_c24),
      cmocka_unit_test(test_fuse_conv_bn_then_standalone_bn_c5_to_8),
      cmocka_unit_test(test_fuse_conv_hardswish_c5_to_16),
      cmocka_unit_test(test_fuse_conv_hardsigmoid_c24_to_5),
      cmocka_unit_test(test_fuse_conv_sigmoid_c3_to_32),
      cmocka_unit_test(test_fuse_conv_leakyrelu_tanh_c5_to_5),
      cmocka_unit_test(test_fuse_conv_relu_clip6_c32_to_32),
      cmocka_unit_test(test_fuse_conv_long_chain_c5_to_24),
      /* residual blocks */
      cmocka_unit_test(test_winograd_c16_9x7_relu),
      cmocka_unit_test(test_winograd_c16_to_32_no_pad_bn_relu),
      cmocka_unit_test(test_winograd_c24_to_40),
      cmocka_unit_test(test_winograd_c64_14x14_no_bias_relu),
      cmocka_unit_test(test_winograd_c32_to_16_pad_height_only),
      cmocka_unit_test(test_winograd_refused_clip6),
      cmocka_unit_test(test_winograd_refused_asymmetric_pads),
      cmocka_unit_test(test_winograd_residual_blocks),
      cmocka_unit_test(test_winograd_transformed_c16_9x7_relu),
      cmocka_unit_test(test_winograd_transformed_c16_to_32_no_pad_bn_relu),
      cmocka_unit_test(test_winograd_transformed_c64_4x4_no_bias),
      cmocka_unit_test(test_winograd_transformed_residual_blocks),
      cmocka_unit_test(test_winograd_transformed_weights_counted),
      cmocka_unit_test(test_winograd_transformed_weights_exact_across_plans),
      cmocka_unit_test(test_winograd_transformed_weight_shared_with_direct),
      cmocka_unit_test(test_winograd_transformed_weight_shared_by_two),
      cmocka_unit_test(test_blocked_squeeze_excitation),
      cmocka_unit_test(test_downsampling_conv_nhwc),
      cmocka_unit_test(test_profile_steps),
      cmocka_unit_test(test_residual_add),
      cmocka_unit_test(test_residual_add_swapped_operands),
      cmocka_unit_test(test_residual_two_blocks_chained),
      cmocka_unit_test(test_residual_read_after_add),
      cmocka_unit_test(test_residual_read_after_add_swapped_by_conv),
      cmocka_unit_test(test_residual_is_graph_output),
      cmocka_unit_test(test_residual_is_graph_input),
      cmocka_unit_test(test_residual_conv_reads_residual),    
      cmocka_unit_test(test_residual_conv1x1_reads_residual),
      cmocka_unit_test(test_conv_add_broadcast_activation),  
      cmocka_unit_test(test_residual_through_reshape_still_read),
      cmocka_unit_test(test_residual_is_view_of_graph_input),
      cmocka_unit_test(test_add_of_two_convs),
      cmocka_unit_test(test_identity_between_conv_and_relu),
      cmocka_unit_test(test_fuse_conv_clip6_opset10_attributes),
      cmocka_unit_test(test_fuse_conv_clip6_opset11_inputs),
      cmocka_unit_test(test_conv_1d),
      cmocka_unit_test(test_conv_shared_weights_one_with_bn),
      /* pooling */
      cmocka_unit_test(test_maxpool_k3_s2_p1_odd),
      cmocka_unit_test(test_maxpool_k3_s2_p1_even),
      cmocka_unit_test(test_maxpool_ceil_mode_k2_s2_odd),
      cmocka_unit_test(test_maxpool_ceil_mode_k3_s2_odd),
      cmocka_unit_test(test_maxpool_ceil_mode_k3_s2_p1_even),
      cmocka_unit_test(test_maxpool_ceil_mode_window_over_input),
      cmocka_unit_test(test_avgpool_ceil_mode_window_over_input),
      cmocka_unit_test(test_error_pool_window_over_input),
      cmocka_unit_test(test_maxpool_k2_s2_odd_floor),
      cmocka_unit_test(test_avgpool_exclude_pad_k3_s2_p1),
      cmocka_unit_test(test_avgpool_include_pad_k3_s2_p1_odd),
      cmocka_unit_test(test_avgpool_include_pad_k3_s2_p1_even),
      cmocka_unit_test(test_avgpool_include_pad_same_upper),
      cmocka_unit_test(test_avgpool_include_pad_same_lower),
      cmocka_unit_test(test_error_avgpool_include_pad_ceil_overhang),
      cmocka_unit_test(test_avgpool_include_pad_k3_s1_p1),
      cmocka_unit_test(test_avgpool_asymmetric_pads),
      cmocka_unit_test(test_avgpool_ceil_mode_exclude_pad),
      cmocka_unit_test(test_error_pool_window_in_padding),
      cmocka_unit_test(test_global_average_pool_of_input),
      cmocka_unit_test(test_global_max_pool),
      cmocka_unit_test(test_global_average_pool_after_conv),
      cmocka_unit_test(test_maxpool_after_conv),
      /* matrix products, shapes, softmax */
      cmocka_unit_test(test_classifier_head),
      cmocka_unit_test(test_gemm_transb_bias),
      cmocka_unit_test(test_gemm_no_trans_row_bias),
      cmocka_unit_test(test_gemm_no_bias_relu),
      cmocka_unit_test(test_matmul_2d),
      cmocka_unit_test(test_matmul_3d_by_constant_2d),
      cmocka_unit_test(test_matmul_weight_read_in_two_shapes),
      cmocka_unit_test(test_matmul_3d_batched_runtime),
      cmocka_unit_test(test_matmul_3d_two_inputs),
      cmocka_unit_test(test_flatten_after_conv),
      cmocka_unit_test(test_flatten_axis2),
      cmocka_unit_test(test_reshape_zero_and_minus_one),
      cmocka_unit_test(test_transpose_nchw_to_nhwc),
      cmocka_unit_test(test_transpose_of_input),
      cmocka_unit_test(test_concat_channels_c5_c24),
      cmocka_unit_test(test_concat_channels_c16_c16),
      cmocka_unit_test(test_concat_negative_axis_then_conv),
      cmocka_unit_test(test_concat_input_and_conv),
      cmocka_unit_test(test_concat_refused_layout_leaves_no_reorder),
      cmocka_unit_test(test_shape_chain_reshape),
      cmocka_unit_test(test_gather_runtime),
      cmocka_unit_test(test_squeeze_unsqueeze),
      cmocka_unit_test(test_reduce_mean),
      cmocka_unit_test(test_outputs_sharing_storage),
      cmocka_unit_test(test_softmax_2d),
      cmocka_unit_test(test_softmax_4d_last_axis_default),
      cmocka_unit_test(test_softmax_opset11_flattens),
      cmocka_unit_test(test_softmax_after_conv),
      cmocka_unit_test(test_log_softmax),
      /* broadcasting and activations */
      cmocka_unit_test(test_add_mul_per_channel_constant),
      cmocka_unit_test(test_add_per_channel_constant_of_input),
      cmocka_unit_test(test_scalar_sub_pow_div_mul),
      cmocka_unit_test(test_matmul_add_bias),
      cmocka_unit_test(test_sub_div_by_constant),
      cmocka_unit_test(test_se_block_c24),
      cmocka_unit_test(test_se_block_c32_scale_first),
      cmocka_unit_test(test_se_block_plain),
      cmocka_unit_test(test_hardswish),
      cmocka_unit_test(test_hardsigmoid_default),
      cmocka_unit_test(test_hardsigmoid_alpha_beta),
      cmocka_unit_test(test_sigmoid),
      cmocka_unit_test(test_relu),
      cmocka_unit_test(test_leakyrelu),
      cmocka_unit_test(test_tanh),
      cmocka_unit_test(test_exp),
      cmocka_unit_test(test_sqrt),
      cmocka_unit_test(test_activations_after_conv_unfused),
      /* node order in the file */
      cmocka_unit_test(test_reversed_residual_read_after_add),
      cmocka_unit_test(test_reversed_identities_then_fusion),
      cmocka_unit_test(test_long_reversed_chain),
      cmocka_unit_test(test_error_cycle),
      /* error paths */
      cmocka_unit_test(test_residual_through_cast),
      cmocka_unit_test(test_residual_cast_of_graph_input),
      cmocka_unit_test(test_error_batchnorm_training_mode),
      cmocka_unit_test(test_reduce_mean_opset18_axes_input),
      cmocka_unit_test(test_reduce_mean_opset18_noop_with_empty_axes),
      cmocka_unit_test(test_reduce_mean_over_unit_axes),
      cmocka_unit_test(test_pad_opset18_axes_input),
      cmocka_unit_test(test_pad_edge),
      cmocka_unit_test(test_pad_reflect),
      cmocka_unit_test(test_error_pad_reflect_too_wide),
      cmocka_unit_test(test_slice_steps),
      cmocka_unit_test(test_pad_pads_reversed_by_slice),
      cmocka_unit_test(test_error_slice_negative_step_at_run_time),
      cmocka_unit_test(test_eltwise_and_minmax_ops),
      cmocka_unit_test(test_gelu_opset20),
      cmocka_unit_test(test_fuse_conv_leakyrelu_relu),
      cmocka_unit_test(test_fuse_conv_hardsigmoid_clip),
      cmocka_unit_test(test_fuse_gemm_leakyrelu_twice),
      cmocka_unit_test(test_error_opset_too_old),
      cmocka_unit_test(test_error_dynamic_spatial_input),
      cmocka_unit_test(test_error_gelu_chain_rank3_constant),
      cmocka_unit_test(test_error_gelu_chain_not_sqrt2),
      cmocka_unit_test(test_conv_bias_reshaped_then_batchnorm),
      cmocka_unit_test(test_squeeze_axes_left_out),
      cmocka_unit_test(test_error_opset_too_new),
      cmocka_unit_test(test_error_dropout_training_mode),
      cmocka_unit_test(test_dropout_training_mode_false),
      cmocka_unit_test(test_dropout_training_mode_ratio_zero),
      cmocka_unit_test(test_einsum_matrix_products),
      cmocka_unit_test(test_comparisons_and_where),
      cmocka_unit_test(test_layernorm_chain_fused),
      cmocka_unit_test(test_layernorm_opset17),
      cmocka_unit_test(test_binary_constant_broadcast_not_reference),
      cmocka_unit_test(test_reduce_mean_of_blocked_not_reference),
      cmocka_unit_test(test_conv_times_activation_fused),
      cmocka_unit_test(test_regnet_blocks_off_reference_kernels),
      cmocka_unit_test(test_where_constant_condition),
      cmocka_unit_test(test_where_folded_lower_rank_condition),
      cmocka_unit_test(test_error_where_runtime_operand_broadcast),
      cmocka_unit_test(test_error_einsum_not_a_matrix_product),
      cmocka_unit_test(test_scatternd_folded),
      cmocka_unit_test(test_error_scatternd_index_out_of_range),
      cmocka_unit_test(test_error_gelu_chain_div_is_output),
      cmocka_unit_test(test_constant_both_operand_and_folded),
      cmocka_unit_test(test_weight_read_two_ways),
      cmocka_unit_test(test_batchnorm_fold_releases_originals),
      cmocka_unit_test(test_typed_data_weights_held_once),
      cmocka_unit_test(test_fixed_batch_runs_only_that_batch),
      cmocka_unit_test(test_residual_add_broadcasts_conv_output),
      cmocka_unit_test(test_residual_lower_rank),
      cmocka_unit_test(test_fold_float_division_by_zero),
      cmocka_unit_test(test_error_unknown_op),
      cmocka_unit_test(test_error_attribute_type),
      cmocka_unit_test(test_error_attribute_of_older_opset),
      cmocka_unit_test(test_error_name_defined_twice),
      cmocka_unit_test(test_fold_int64_exact),
      cmocka_unit_test(test_error_weight_raw_data_short),
      cmocka_unit_test(test_external_data_from_memory),
      cmocka_unit_test(test_external_data_in_constant),
      cmocka_unit_test(test_error_truncated_model),
      cmocka_unit_test(test_error_batch_size),
      cmocka_unit_test(test_error_group_does_not_divide_channels),
      cmocka_unit_test(test_error_conv_int64_bias),
      cmocka_unit_test(test_error_conv_group_too_large),
      cmocka_unit_test(test_error_range_mixed_types),
      cmocka_unit_test(test_error_fold_types),
      cmocka_unit_test(test_split_sizes_and_parts),
      cmocka_unit_test(test_error_split_parts),
      cmocka_unit_test(test_bf16_residual_blocks),
      cmocka_unit_test(test_bf16_se_block),
      cmocka_unit_test(test_bf16_downsampling),
      cmocka_unit_test(test_bf16_linear),
      cmocka_unit_test(test_bf16_dense_block),
      cmocka_unit_test(test_dense_block),
      cmocka_unit_test(test_batchnorm_activation),
      cmocka_unit_test(test_pad_by_zeros_kept_or_refused),
      cmocka_unit_test(test_bf16_gated),
      cmocka_unit_test(test_matmul_4d_rows_folded),
      cmocka_unit_test(test_error_precision_unknown),
  };
  /* e.g. INFERD_TEST_FILTER='test_residual*' to run some; INFERD_TEST_SKIP to leave some out */
  if (getenv("INFERD_TEST_FILTER")) cmocka_set_test_filter(getenv("INFERD_TEST_FILTER"));
  if (getenv("INFERD_TEST_SKIP")) cmocka_set_skip_filter(getenv("INFERD_TEST_SKIP"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
