/*
 * onnx.h - ONNX model files to inferd's graph IR.
 *
 * The loader unpacks a ModelProto with the protobuf-c code generated at build time
 * from the system's onnx.proto, then copies what the engine needs into an IR of its
 * own: values (tensors, with their declared shapes and, for initializers, their data)
 * and nodes (op type, value indices, attributes), in topological order. Everything is
 * checked once here: dangling names, duplicate producers, cycles, initializers whose
 * data does not match their declared shape. Nothing downstream re-checks structure.
 *
 * Memory: the file is mapped, not read; the unpacked message lives in an arena of
 * huge-page-advised mappings, and each large initializer has a mapping of its own so
 * that the engine can release it (ir_graph_release_data) once the weight is reordered.
 * While unpacking, pages of the mapped file that have already been copied are
 * dropped, so loading never holds two full copies of the weights.
 *
 * Threading: an ir_graph is built and changed by one thread (the loader); the engine
 * reads it at plan compile time under the model's lock.
 */
#ifndef INFERD_ONNX_H
#define INFERD_ONNX_H

#include "core/core.h"

enum { IR_MAX_RANK = INFERD_MAX_RANK, IR_NONE = -1 };

typedef enum {
  IR_ATTR_UNDEFINED = 0,
  IR_ATTR_FLOAT = 1,
  IR_ATTR_INT = 2,
  IR_ATTR_STRING = 3,
  IR_ATTR_TENSOR = 4,
  IR_ATTR_GRAPH = 5,
  IR_ATTR_FLOATS = 6,
  IR_ATTR_INTS = 7,
  IR_ATTR_STRINGS = 8,
} ir_attr_type; /* ONNX AttributeType values */

typedef struct ir_attr {
  const char *name;
  ir_attr_type type;
  float f;
  int64_t i;
  const char *s; /* NUL-terminated copy */
  int n;         /* elements in ints/floats */
  const int64_t *ints;
  const float *floats;
  int tensor; /* IR_ATTR_TENSOR: value index holding the constant */
} ir_attr;

typedef struct ir_value {
  const char *name;
  inferd_dtype dtype; /* UNDEFINED until known */
  int rank;           /* -1 until known */
  int64_t dims[IR_MAX_RANK]; /* -1 for a dynamic dim */
  void *data;   /* constant (initializer or Constant) data, dense row-major; NULL otherwise */
  size_t nbytes;
  int producer; /* node index, or IR_NONE */
  int consumers; /* number of node inputs reading it (graph outputs not counted) */
  bool is_input, is_output;
  bool is_attr; /* a node attribute's tensor (Constant's value, ConstantOfShape's value):
                   read through its node's attribute, never a node input */
} ir_value;

typedef struct ir_node {
  const char *name;
  const char *op_type;
  const char *domain; /* "" for the default ONNX domain */
  int n_inputs, n_outputs, n_attrs;
  int *inputs;  /* value indices; IR_NONE for an omitted optional input */
  int *outputs; /* value indices; IR_NONE for an omitted optional output */
  ir_attr *attrs;
  bool dead; /* removed by a pass */
} ir_node;

typedef struct ir_graph {
  core_arena *arena; /* owns every string, array and constant of the graph */
  ir_value *values;
  int n_values, cap_values;
  ir_node *nodes; /* topological order */
  int n_nodes;
  int *inputs; /* graph inputs that are not initializers */
  int n_inputs;
  int *outputs;
  int n_outputs;
  int64_t opset; /* default-domain opset version */
} ir_graph;

typedef struct onnx_load_params {
  bool mapped_file; /* the data lies in a read-only private file mapping whose pages may
                       be dropped once copied (see inferd_model_params.mapped_file) */
  const char *dir;  /* where tensors stored outside the model (ONNX external data,
                       onnx_external.c) are read from; NULL refuses them */
  uint64_t max_external_bytes; /* external data adding up to more is refused
                                  (INFERD_NO_MEMORY) before any of it is read; 0: no limit */
} onnx_load_params;

/* Loads an ONNX model from memory (borrowed for the duration of the call) or from a
 * file. On success *out owns the graph; free with ir_graph_free. `params` may be NULL;
 * onnx_load_file takes only its max_external_bytes (the file is mapped, and its
 * external data lies in its own directory). */
inferd_code onnx_load_memory(const void *data, size_t size, const onnx_load_params *params, ir_graph **out,
                             inferd_status *st);
inferd_code onnx_load_file(const char *path, const onnx_load_params *params, ir_graph **out, inferd_status *st);
void ir_graph_free(ir_graph *g);

/* How many tensors (initializers and node attributes) of the ONNX model at `path` keep
 * their data in files outside it, and the location of the first (copied into `first`).
 * A file that is no ONNX model has none: 0, INFERD_OK. Only a file that cannot be
 * mapped is an error. */
inferd_code onnx_file_external_count(const char *path, size_t *count, char *first, size_t first_size,
                                     inferd_status *st);

/* Adds a value (a constant when data != NULL, copied into the graph's arena). Returns
 * its index, or IR_NONE when out of memory. May move g->values. */
int ir_graph_add_value(ir_graph *g, const char *name, inferd_dtype dtype, int rank,
                       const int64_t *dims, const void *data);
/* Drops the data of a constant that is no longer needed (big ones are unmapped). */
void ir_graph_release_data(ir_graph *g, int value);

/* Attribute lookups with defaults. ints: returns the count (0 when absent) and
 * points *out at the array. */
const ir_attr *ir_node_attr(const ir_node *n, const char *name);
int64_t ir_attr_int(const ir_node *n, const char *name, int64_t def);
float ir_attr_float(const ir_node *n, const char *name, float def);
const char *ir_attr_string(const ir_node *n, const char *name, const char *def);
int ir_attr_ints(const ir_node *n, const char *name, const int64_t **out);

/* Number of elements of value v's shape, -1 when unknown. */
int64_t ir_value_count(const ir_value *v);

#endif /* INFERD_ONNX_H */
