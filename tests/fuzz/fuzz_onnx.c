/*
 * fuzz_onnx.c - libFuzzer target for the model loader and the engine behind it.
 *
 * Each input is taken as a serialized ONNX ModelProto and handed to
 * inferd_model_load_memory, which unpacks it (protobuf-c), validates the graph, runs
 * the load-time passes and compiles the batch-1 plan. When loading succeeds, the model
 * is described, a session is made and a batch of 1 and one of 4 (from 4 convolutions
 * write oneDNN's blocked layouts, and the plan places reorders between them and the
 * plain ones) are run on zeros, then everything is freed. A model whose first input
 * declares a fixed batch runs only that batch (up to 64), the only one it accepts. Any crash, sanitizer report,
 * leak or abort is a bug: the engine promises to answer every model file with a status
 * (STYLE.md, "Errors").
 *
 * Running a batch is skipped when the first input has more than 1<<20 elements or any
 * output more than 1<<24, so that a fuzzed shape cannot make one iteration allocate
 * gigabytes of activations for nothing; the load-time plan (which checks every node)
 * still runs.
 *
 * External data (initializers whose bytes lie in files beside the model) is read from a
 * directory the target makes at start and removes at exit, holding w.bin (256 floats)
 * and an empty directory d; the mutator moves tensors there.
 *
 * Mutation: byte-level mutations of a protobuf mostly break its length framing, so
 * most of them die in the parser. LLVMFuzzerCustomMutator therefore also mutates the
 * model as a model: it unpacks the input with protobuf-c, changes one to three things
 * an exporter could get wrong (an op type, a node input or output name, including ""
 * for an omitted optional one, an attribute value, type or name, an added attribute,
 * an initializer's dims, type or data length, its data moved out as external data, a
 * graph input's or output's dims, the opset, node order) and packs it again. A quarter
 * of the calls, and every input that does not unpack, get libFuzzer's own byte
 * mutations instead.
 *
 * Threads: one. The compute team is set to one thread in LLVMFuzzerInitialize so that
 * runs are reproducible and libFuzzer's -timeout measures real work.
 *
 * Build: cmake -DINFERD_FUZZ=ON with clang (tests/fuzz/CMakeLists.txt). Seed corpus:
 * tests/fuzz/make_corpus.py.
 */
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inferd/inferd.h"
#include "onnx.pb-c.h"

enum { MAX_INPUT_ELEMENTS = 1 << 20, MAX_OUTPUT_ELEMENTS = 1 << 24, MAX_IO = 8 };

/* Elements of a shape with the batch axis set to `batch`; -1 when unknown or too large. */
static int64_t batch_count(int rank, const int64_t *dims, int64_t batch, int64_t limit) {
  if (rank < 0) return -1;
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    int64_t d = i == 0 ? batch : dims[i];
    if (d < 0) return -1;
    if (d && n > limit / d) return -1;
    n *= d;
  }
  return n;
}

/* One batch of `batch` on zeros, in `session` (one session runs every batch size, as a
 * server worker's does) */
static void run_once(inferd_model *model, inferd_session *session, int64_t batch) {
  inferd_status st = {0};
  int n_in = inferd_model_num_inputs(model), n_out = inferd_model_num_outputs(model);
  if (n_in < 1 || n_in > MAX_IO || n_out < 1 || n_out > MAX_IO) return;
  inferd_tensor_info info;
  if (inferd_model_input(model, 0, &info) != INFERD_OK) return;
  int64_t first = batch_count(info.rank, info.dims, batch, MAX_INPUT_ELEMENTS);
  if (first < 0) return;

  float *inputs[MAX_IO] = {0}, *outputs[MAX_IO] = {0};
  bool ok = true;
  for (int k = 0; k < n_in && ok; k++) {
    ok = inferd_model_input(model, k, &info) == INFERD_OK;
    int64_t count = ok ? batch_count(info.rank, info.dims, batch, MAX_INPUT_ELEMENTS) : -1;
    ok = count >= 0 && (inputs[k] = calloc((size_t)count + 1, sizeof(float))) != NULL;
  }
  for (int k = 0; k < n_out && ok; k++) {
    int rank = 0;
    int64_t dims[INFERD_MAX_RANK];
    ok = inferd_session_output_shape(session, batch, k, &rank, dims, &st) == INFERD_OK;
    int64_t count = -1;
    if (ok) { /* the output shape at this batch is concrete: take it as it is */
      count = 1;
      for (int i = 0; i < rank && count >= 0; i++)
        count = dims[i] < 0 || (dims[i] && count > MAX_OUTPUT_ELEMENTS / dims[i]) ? -1 : count * dims[i];
    }
    ok = count >= 0 && (outputs[k] = calloc((size_t)count + 1, sizeof(float))) != NULL;
  }
  if (ok) {
    const float *const *in = (const float *const *)inputs;
    (void)inferd_session_run(session, batch, in, outputs, &st);
  }
  for (int k = 0; k < MAX_IO; k++) {
    free(inputs[k]);
    free(outputs[k]);
  }
}

/* ---- the structure-aware mutator ------------------------------------------------ */

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

/* Everything protobuf-c unpacks and everything the mutator adds is allocated here and
 * freed at once, so fields can point at static strings or at each other freely. */
typedef struct mut_arena {
  void **blocks;
  size_t n, cap;
} mut_arena;

static void *arena_alloc(void *data, size_t size) {
  mut_arena *a = data;
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 256;
    void **blocks = realloc(a->blocks, cap * sizeof *blocks);
    if (!blocks) return NULL;
    a->blocks = blocks, a->cap = cap;
  }
  void *p = calloc(1, size ? size : 1);
  if (p) a->blocks[a->n++] = p;
  return p;
}

static void arena_free_one(void *data, void *p) { (void)data, (void)p; }

static void arena_free_all(mut_arena *a) {
  for (size_t i = 0; i < a->n; i++) free(a->blocks[i]);
  free(a->blocks);
}

typedef struct mutator {
  uint64_t state;
  mut_arena arena;
  ProtobufCAllocator allocator;
  Onnx__ModelProto *model;
  const char *names[256]; /* value names seen in the graph, plus "" and an unknown one */
  size_t n_names;
} mutator;

static uint64_t rnd(mutator *mu) { /* xorshift64 */
  mu->state ^= mu->state << 13;
  mu->state ^= mu->state >> 7;
  mu->state ^= mu->state << 17;
  return mu->state;
}

static size_t pick(mutator *mu, size_t n) { return n ? (size_t)(rnd(mu) % n) : 0; }

static int64_t interesting_int(mutator *mu) {
  static const int64_t values[] = {0, 1, -1, 2, 3, -2, 4, 7, 8, 9, 16, 64, 255, 256, 1000, 1 << 20,
                                   INT32_MAX, (int64_t)1 << 32, (int64_t)1 << 40, (int64_t)1 << 62,
                                   INT64_MAX, INT64_MIN};
  if (rnd(mu) % 3 == 0) return (int64_t)pick(mu, 12) - 3;
  return values[pick(mu, sizeof values / sizeof *values)];
}

static float interesting_float(mutator *mu) {
  static const float values[] = {0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 6.0f, 1e-5f, 1e30f, -1e30f, 1.0f / 0.0f,
                                 -1.0f / 0.0f, 0.0f / 0.0f};
  return values[pick(mu, sizeof values / sizeof *values)];
}

static const char *const op_types[] = {
    "Conv", "BatchNormalization", "Relu", "LeakyRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish",
    "Tanh", "Sqrt", "Exp", "Add", "Sub", "Mul", "Div", "Pow", "MaxPool", "AveragePool",
    "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "Gemm", "MatMul", "Softmax", "Concat",
    "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Transpose", "Shape",
    "Gather", "Cast", "Constant", "NonMaxSuppression", "If"};

static const char *const attr_names[] = {
    "axis", "axes", "perm", "pads", "strides", "dilations", "kernel_shape", "group", "auto_pad",
    "ceil_mode", "count_include_pad", "storage_order", "transA", "transB", "alpha", "beta", "to",
    "keepdims", "epsilon", "allowzero", "start", "end", "min", "max", "value", "training_mode"};

static const char *const pad_modes[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "bogus"};

static const char *pick_name(mutator *mu) { return mu->names[pick(mu, mu->n_names)]; }

static void add_name(mutator *mu, const char *name) {
  if (name && mu->n_names < sizeof mu->names / sizeof *mu->names) mu->names[mu->n_names++] = name;
}

static size_t dtype_size(int32_t t) {
  switch (t) {
  case 1: case 6: return 4;
  case 7: case 11: return 8;
  case 2: case 3: case 9: return 1;
  case 10: return 2;
  default: return 0;
  }
}

static void mutate_attribute_value(mutator *mu, Onnx__AttributeProto *a) {
  switch (a->type) {
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: a->i = interesting_int(mu); break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: a->f = interesting_float(mu); break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
    if (a->n_ints && rnd(mu) % 4) a->ints[pick(mu, a->n_ints)] = interesting_int(mu);
    else if (a->n_ints) a->n_ints--;
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
    if (a->n_floats) a->floats[pick(mu, a->n_floats)] = interesting_float(mu);
    break;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: {
    const char *s = pad_modes[pick(mu, sizeof pad_modes / sizeof *pad_modes)];
    a->s.data = (uint8_t *)s, a->s.len = strlen(s), a->has_s = 1;
    break;
  }
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
    if (a->t && a->t->n_dims) a->t->dims[pick(mu, a->t->n_dims)] = interesting_int(mu);
    break;
  default: a->type = (Onnx__AttributeProto__AttributeType)(1 + pick(mu, 8)); break;
  }
}

/* A new attribute with a known name and a value of a plausible type. */
static void add_attribute(mutator *mu, Onnx__NodeProto *n) {
  Onnx__AttributeProto *a = arena_alloc(&mu->arena, sizeof *a);
  Onnx__AttributeProto **list = arena_alloc(&mu->arena, (n->n_attribute + 1) * sizeof *list);
  int64_t *ints = arena_alloc(&mu->arena, 4 * sizeof *ints);
  if (!a || !list || !ints) return;
  onnx__attribute_proto__init(a);
  a->name = (char *)attr_names[pick(mu, sizeof attr_names / sizeof *attr_names)];
  a->has_type = 1;
  switch (pick(mu, 4)) {
  case 0: a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, a->has_i = 1, a->i = interesting_int(mu); break;
  case 1: a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, a->has_f = 1, a->f = interesting_float(mu); break;
  case 2: a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, mutate_attribute_value(mu, a); break;
  default:
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    a->n_ints = 1 + pick(mu, 4);
    for (size_t i = 0; i < a->n_ints; i++) ints[i] = interesting_int(mu);
    a->ints = ints;
  }
  if (n->n_attribute) memcpy(list, n->attribute, n->n_attribute * sizeof *list);
  list[n->n_attribute++] = a;
  n->attribute = list;
}

static void mutate_node(mutator *mu, Onnx__NodeProto *n) {
  switch (pick(mu, 9)) {
  case 0: n->op_type = (char *)op_types[pick(mu, sizeof op_types / sizeof *op_types)]; break;
  case 1: if (n->n_input) n->input[pick(mu, n->n_input)] = (char *)pick_name(mu); break;
  case 2: if (n->n_output) n->output[pick(mu, n->n_output)] = (char *)pick_name(mu); break;
  case 3: if (n->n_input) n->n_input--; else if (n->n_output) n->n_output--; break;
  case 4: if (n->n_attribute) mutate_attribute_value(mu, n->attribute[pick(mu, n->n_attribute)]); break;
  case 5:
    if (n->n_attribute) n->attribute[pick(mu, n->n_attribute)]->name = (char *)attr_names[pick(mu, sizeof attr_names / sizeof *attr_names)];
    break;
  case 6: if (n->n_attribute) n->n_attribute--; break;
  case 7: n->domain = rnd(mu) % 2 ? "com.example" : "ai.onnx"; break;
  default: add_attribute(mu, n); break;
  }
}

/* The tensor's data moves to "a file beside the model" (ONNX external data), with a
 * key/value pair of the kind exporters write, or a wrong one. The model's directory is
 * ext_dir (LLVMFuzzerInitialize): w.bin (1 KB) and a subdirectory d, nothing else. */
static void make_external(mutator *mu, Onnx__TensorProto *t) {
  static const char *const keys[] = {"location", "offset", "length", "checksum", "bogus", ""};
  static const char *const values[] = {"w.bin", "../w.bin", "/etc/hostname", "", "0", "12", "-1", "1024", "d",
                                       "99999999999999999999", "1e3", "d/../../w", "./w.bin", "d/w.bin"};
  Onnx__StringStringEntryProto *e = arena_alloc(&mu->arena, sizeof *e);
  Onnx__StringStringEntryProto **list = arena_alloc(&mu->arena, (t->n_external_data + 1) * sizeof *list);
  if (!e || !list) return;
  onnx__string_string_entry_proto__init(e);
  e->key = (char *)keys[pick(mu, sizeof keys / sizeof *keys)];
  e->value = (char *)values[pick(mu, sizeof values / sizeof *values)];
  if (t->n_external_data) memcpy(list, t->external_data, t->n_external_data * sizeof *list);
  list[t->n_external_data++] = e;
  t->external_data = list;
  t->has_data_location = 1;
  t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  if (rnd(mu) % 2) t->has_raw_data = 0;
}

static void mutate_initializer(mutator *mu, Onnx__TensorProto *t) {
  switch (pick(mu, 5)) {
  case 0: { /* new dims, with raw data resized to match so that the loader accepts it */
    if (!t->n_dims) break;
    t->dims[pick(mu, t->n_dims)] = rnd(mu) % 4 ? (int64_t)pick(mu, 10) : interesting_int(mu);
    size_t es = dtype_size(t->data_type);
    int64_t count = 1;
    for (size_t i = 0; i < t->n_dims && count >= 0; i++)
      count = t->dims[i] < 0 || (t->dims[i] && count > (1 << 14) / t->dims[i]) ? -1 : count * t->dims[i];
    if (count < 0 || !es || !t->has_raw_data || rnd(mu) % 4 == 0) break;
    uint8_t *raw = arena_alloc(&mu->arena, (size_t)count * es);
    if (!raw) break;
    for (size_t i = 0; i < (size_t)count * es && t->raw_data.len; i++) raw[i] = t->raw_data.data[i % t->raw_data.len];
    t->raw_data.data = raw, t->raw_data.len = (size_t)count * es;
    break;
  }
  case 1: t->data_type = (int32_t)pick(mu, 17), t->has_data_type = 1; break;
  case 2: if (t->has_raw_data && t->raw_data.len) t->raw_data.len -= 1 + pick(mu, t->raw_data.len); break;
  case 3: make_external(mu, t); break;
  default: if (t->n_dims) t->n_dims--; break;
  }
}

static void mutate_value_info(mutator *mu, Onnx__ValueInfoProto *v) {
  if (!v->type || v->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !v->type->tensor_type) return;
  Onnx__TypeProto__Tensor *tt = v->type->tensor_type;
  Onnx__TensorShapeProto *shape = tt->shape;
  switch (pick(mu, 4)) {
  case 0: tt->elem_type = (int32_t)pick(mu, 17), tt->has_elem_type = 1; break;
  case 1: if (shape && shape->n_dim) shape->n_dim--; break;
  default:
    if (shape && shape->n_dim) {
      Onnx__TensorShapeProto__Dimension *d = shape->dim[pick(mu, shape->n_dim)];
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = rnd(mu) % 2 ? (int64_t)pick(mu, 10) : interesting_int(mu);
    }
  }
}

static void mutate_graph(mutator *mu, Onnx__ModelProto *m) {
  Onnx__GraphProto *g = m->graph;
  switch (pick(mu, 8)) {
  case 0: case 1: case 2: if (g->n_node) mutate_node(mu, g->node[pick(mu, g->n_node)]); break;
  case 3: if (g->n_initializer) mutate_initializer(mu, g->initializer[pick(mu, g->n_initializer)]); break;
  case 4:
    if (rnd(mu) % 2 && g->n_input) mutate_value_info(mu, g->input[pick(mu, g->n_input)]);
    else if (g->n_output) mutate_value_info(mu, g->output[pick(mu, g->n_output)]);
    break;
  case 5: {
    static const int64_t opsets[] = {1, 6, 7, 10, 11, 12, 13, 17, 99};
    if (m->n_opset_import) m->opset_import[0]->version = opsets[pick(mu, sizeof opsets / sizeof *opsets)];
    break;
  }
  case 6: /* node order and count */
    if (g->n_node > 1) {
      size_t i = pick(mu, g->n_node), j = pick(mu, g->n_node);
      Onnx__NodeProto *t = g->node[i];
      if (rnd(mu) % 2) g->node[i] = g->node[j], g->node[j] = t;
      else if (rnd(mu) % 2) g->node[i] = g->node[j];
      else g->n_node--;
    }
    break;
  default: /* graph outputs: another value, or one fewer */
    if (g->n_output && rnd(mu) % 2) g->output[pick(mu, g->n_output)]->name = (char *)pick_name(mu);
    else if (g->n_output > 1) g->n_output--;
  }
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
  mutator mu = {.state = seed * 0x9E3779B97F4A7C15ull | 1};
  if (rnd(&mu) % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);
  mu.allocator = (ProtobufCAllocator){.alloc = arena_alloc, .free = arena_free_one, .allocator_data = &mu.arena};
  mu.model = onnx__model_proto__unpack(&mu.allocator, size, data);
  if (!mu.model || !mu.model->graph) {
    arena_free_all(&mu.arena);
    return LLVMFuzzerMutate(data, size, max_size);
  }
  Onnx__GraphProto *g = mu.model->graph;
  for (size_t i = 0; i < g->n_input; i++) add_name(&mu, g->input[i]->name);
  for (size_t i = 0; i < g->n_initializer; i++) add_name(&mu, g->initializer[i]->name);
  for (size_t i = 0; i < g->n_node; i++)
    for (size_t o = 0; o < g->node[i]->n_output; o++) add_name(&mu, g->node[i]->output[o]);
  add_name(&mu, "");
  add_name(&mu, "no_such_value");
  for (int k = 1 + (int)pick(&mu, 3); k > 0; k--) mutate_graph(&mu, mu.model);
  size_t packed = onnx__model_proto__get_packed_size(mu.model);
  if (packed <= max_size) onnx__model_proto__pack(mu.model, data);
  arena_free_all(&mu.arena);
  return packed <= max_size ? packed : LLVMFuzzerMutate(data, size, max_size);
}

/* ---- the target ------------------------------------------------------------------ */

static char ext_dir[] = "/tmp/fuzz_onnx.XXXXXX";

static void remove_ext_dir(void) {
  char path[sizeof ext_dir + 16];
  snprintf(path, sizeof path, "%s/w.bin", ext_dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/d", ext_dir);
  rmdir(path);
  rmdir(ext_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  omp_set_num_threads(1);
  /* the directory external data is read from: one 1 KB file of floats and a directory */
  if (!mkdtemp(ext_dir)) abort();
  atexit(remove_ext_dir);
  char path[sizeof ext_dir + 16];
  snprintf(path, sizeof path, "%s/d", ext_dir);
  if (mkdir(path, 0700) != 0) abort();
  snprintf(path, sizeof path, "%s/w.bin", ext_dir);
  FILE *f = fopen(path, "wb");
  float w[256];
  for (int i = 0; i < 256; i++) w[i] = (float)(i % 17) / 16.0f - 0.5f;
  if (!f || fwrite(w, sizeof w, 1, f) != 1 || fclose(f) != 0) abort();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  inferd_status st = {0};
  inferd_model *model = NULL;
  /* a model whose intermediates need more than 1 GB is refused at load (TOO_LARGE):
   * one iteration must not allocate gigabytes */
  inferd_model_params params = {.max_scratch_bytes = (size_t)1 << 30,
                                .external_data_dir = ext_dir,
                                .max_external_bytes = (uint64_t)1 << 30};
  inferd_code rc = inferd_model_load_memory(data, size, &params, &model, &st);
  if (rc != INFERD_OK) {
    /* a refusal must say something, on one line */
    if (model != NULL || st.code != rc || !st.message[0] || strchr(st.message, '\n')) {
      fprintf(stderr, "fuzz_onnx: bad refusal: code %s, model %p, message '%s'\n", inferd_code_name(rc),
              (void *)model, st.message);
      abort();
    }
    return 0;
  }
  inferd_session *session = NULL;
  inferd_tensor_info info;
  if (inferd_model_num_inputs(model) >= 1 && inferd_model_input(model, 0, &info) == INFERD_OK &&
      inferd_session_new(model, &(inferd_session_params){.threads = 1}, &session, &st) == INFERD_OK) {
    if (info.rank >= 1 && info.dims[0] > 0) { /* a fixed batch is the only one the model runs */
      if (info.dims[0] <= 64) run_once(model, session, info.dims[0]);
    } else {
      run_once(model, session, 1);
      run_once(model, session, 4);
    }
    inferd_session_free(session);
  }
  inferd_model_free(model);
  return 0;
}
