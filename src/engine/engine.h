/*
 * engine.h - inside the engine: the model, graph passes, plans and sessions.
 *
 * A model (inferd_model) owns the IR after the load-time passes, the oneDNN engine,
 * the weight cache (weights reordered into the layouts the primitives chose, shared
 * read-only by every plan and session) and a bounded cache of plans.
 *
 * A plan is the graph compiled for one (batch size, thread count): shapes inferred,
 * the shape chains of the exporter folded into constants, each node lowered to oneDNN
 * primitives (the steps), and a memory plan that places every activation buffer at
 * an offset of one scratch arena, reusing space between buffers whose lifetimes do not
 * overlap. Plans are immutable once compiled and shared by sessions (refcounted).
 *
 * A session binds plans to its own scratch arena (a plan_instance: oneDNN memory
 * objects pointing into the arena) the first time it runs a batch size; after that a
 * run is a loop over steps with no allocation of ours and no lock (oneDNN's execute
 * allocates its argument map per call).
 *
 * Locking: model->lock guards the plan cache and the weight cache, taken only while
 * compiling or looking up a plan, never during a run.
 */
#ifndef INFERD_ENGINE_H
#define INFERD_ENGINE_H

#include <float.h>
#include <pthread.h>
#include <stdatomic.h>

#include <oneapi/dnnl/dnnl.h>

#include "onnx/onnx.h"

/* ---- ops registry ----------------------------------------------------------------- */

/* id, ONNX name, lowering function, inputs that must be present (the rest are
 * optional and may be omitted). One row per ONNX op the engine runs. */
/* The default-domain opsets whose op definitions the lowerings follow (ONNX Runtime's
 * oldest is 7 too). */
#define ENGINE_MIN_OPSET 7
#define ENGINE_MAX_OPSET 22

#define ENGINE_OPS(X)                                                   \
  X(CONV, "Conv", ops_conv_lower, 2)                                    \
  X(BATCHNORM, "BatchNormalization", ops_batchnorm_lower, 5)            \
  X(LAYERNORM, "LayerNormalization", ops_layernorm_lower, 2)            \
  X(RELU, "Relu", ops_eltwise_lower, 1)                                 \
  X(LEAKYRELU, "LeakyRelu", ops_eltwise_lower, 1)                       \
  X(CLIP, "Clip", ops_eltwise_lower, 1)                                 \
  X(SIGMOID, "Sigmoid", ops_eltwise_lower, 1)                           \
  X(HARDSIGMOID, "HardSigmoid", ops_eltwise_lower, 1)                   \
  X(HARDSWISH, "HardSwish", ops_eltwise_lower, 1)                       \
  X(SWISH, "Swish", ops_eltwise_lower, 1)                               \
  X(TANH, "Tanh", ops_eltwise_lower, 1)                                 \
  X(SQRT, "Sqrt", ops_eltwise_lower, 1)                                 \
  X(EXP, "Exp", ops_eltwise_lower, 1)                                   \
  X(GELU, "Gelu", ops_eltwise_lower, 1)                                 \
  X(ABS, "Abs", ops_eltwise_lower, 1)                                   \
  X(NEG, "Neg", ops_eltwise_lower, 1)                                   \
  X(LOG, "Log", ops_eltwise_lower, 1)                                   \
  X(ELU, "Elu", ops_eltwise_lower, 1)                                   \
  X(RECIPROCAL, "Reciprocal", ops_eltwise_lower, 1)                     \
  X(ADD, "Add", ops_binary_lower, 2)                                    \
  X(SUB, "Sub", ops_binary_lower, 2)                                    \
  X(MUL, "Mul", ops_binary_lower, 2)                                    \
  X(DIV, "Div", ops_binary_lower, 2)                                    \
  X(POW, "Pow", ops_binary_lower, 2)                                    \
  X(MAX, "Max", ops_binary_lower, 1)                                    \
  X(MIN, "Min", ops_binary_lower, 1)                                    \
  X(GREATER, "Greater", ops_binary_lower, 2)                            \
  X(LESS, "Less", ops_binary_lower, 2)                                  \
  X(GREATEROREQUAL, "GreaterOrEqual", ops_binary_lower, 2)              \
  X(LESSOREQUAL, "LessOrEqual", ops_binary_lower, 2)                    \
  X(MAXPOOL, "MaxPool", ops_pool_lower, 1)                              \
  X(AVERAGEPOOL, "AveragePool", ops_pool_lower, 1)                      \
  X(GLOBALAVERAGEPOOL, "GlobalAveragePool", ops_pool_lower, 1)          \
  X(GLOBALMAXPOOL, "GlobalMaxPool", ops_pool_lower, 1)                  \
  X(REDUCEMEAN, "ReduceMean", ops_reduce_lower, 1)                      \
  X(GEMM, "Gemm", ops_matmul_lower, 2)                                  \
  X(MATMUL, "MatMul", ops_matmul_lower, 2)                              \
  X(SOFTMAX, "Softmax", ops_softmax_lower, 1)                           \
  X(LOGSOFTMAX, "LogSoftmax", ops_softmax_lower, 1)                     \
  X(CONCAT, "Concat", ops_concat_lower, 1)                              \
  X(FLATTEN, "Flatten", ops_reshape_lower, 1)                           \
  X(RESHAPE, "Reshape", ops_reshape_lower, 2)                           \
  X(SQUEEZE, "Squeeze", ops_reshape_lower, 1)                           \
  X(UNSQUEEZE, "Unsqueeze", ops_reshape_lower, 1)                       \
  X(IDENTITY, "Identity", ops_reshape_lower, 1)                         \
  X(DROPOUT, "Dropout", ops_reshape_lower, 1)                           \
  X(TRANSPOSE, "Transpose", ops_transpose_lower, 1)                     \
  X(SHAPE, "Shape", ops_shape_lower, 1)                                 \
  X(GATHER, "Gather", ops_shape_lower, 2)                               \
  X(CAST, "Cast", ops_shape_lower, 1)                                   \
  X(SLICE, "Slice", ops_slice_lower, 3)                                 \
  X(SPLIT, "Split", ops_slice_lower, 1)                                 \
  X(PAD, "Pad", ops_pad_lower, 2)                                       \
  X(CONSTANTOFSHAPE, "ConstantOfShape", ops_fold_lower, 1)              \
  X(EXPAND, "Expand", ops_fold_lower, 2)                                \
  X(EQUAL, "Equal", ops_fold_lower, 2)                                  \
  X(WHERE, "Where", ops_fold_lower, 3)                                  \
  X(MOD, "Mod", ops_fold_lower, 2)                                      \
  X(RANGE, "Range", ops_fold_lower, 3)                                  \
  X(NOT, "Not", ops_fold_lower, 1)                                      \
  X(SCATTERND, "ScatterND", ops_fold_lower, 3)                          \
  X(EINSUM, "Einsum", ops_matmul_lower, 1)

typedef enum op_kind {
#define ENGINE__ENUM(id, name, fn, min_inputs) OP_##id,
  ENGINE_OPS(ENGINE__ENUM)
#undef ENGINE__ENUM
  OP_COUNT,
  OP_REORDER = OP_COUNT, /* steps the planner inserts (layout changes, copies) */
  OP_CONV_WINOGRAD,      /* a Conv run by Winograd (its own row in profiles) */
  OP_KIND_COUNT
} op_kind;

const char *engine_op_name(op_kind op); /* "Conv"; "Reorder" for OP_REORDER, "Conv/Winograd" */
int engine_op_min_inputs(op_kind op);
/* Looks an ONNX op type up; returns OP_COUNT when the engine does not run it. */
op_kind engine_op_find(const char *op_type, const char *domain);

/* ---- fused post-ops, recorded on nodes by the passes -------------------------------- */

enum { FUSED_MAX = 4 };
typedef struct fused_op {
  enum { FUSED_ELTWISE, FUSED_SUM } kind;
  dnnl_alg_kind_t alg; /* FUSED_ELTWISE */
  float alpha, beta;
  int residual; /* FUSED_SUM: value added into the output, its buffer reused in place */
  int conv_out; /* FUSED_SUM: the Conv's own output before the Add was absorbed: where it
                   writes when the Add broadcasts that output up to the residual's shape */
} fused_op;

typedef struct node_extra {
  op_kind op;
  int n_fused;
  fused_op fused[FUSED_MAX];
} node_extra;

/* ---- weights ----------------------------------------------------------------------- */

typedef struct weight_copy {
  struct weight_copy *next;
  dnnl_memory_desc_t src; /* how the plain data was read */
  dnnl_memory_desc_t md;  /* the layout of this copy */
  void *data; /* in model->weight_arena; read-only once written */
} weight_copy;

/* A copy in Winograd's transformed layout (inferd_model_params.winograd_transformed).
 * Only the kernel that asked for it may read it: its blocking is that kernel's own
 * choice for one problem, oneDNN cannot reorder out of it, and oneDNN 2.6 given such
 * a layout made for another batch size's kernel crashes. */
static inline bool engine_md_is_wino(const dnnl_memory_desc_t *md) { return md->format_kind == dnnl_format_kind_wino; }

/* ---- plans ------------------------------------------------------------------------- */

typedef enum { REF_NONE, REF_BUFFER, REF_WEIGHT, REF_INPUT, REF_OUTPUT } ref_kind;

/* Where a tensor lives during a run. */
typedef struct plan_ref {
  ref_kind kind;
  int index;     /* buffer id (REF_BUFFER) or model input/output index */
  size_t offset; /* bytes from the start of the buffer */
  const void *data; /* REF_WEIGHT: the shared weight */
  dnnl_memory_desc_t md;
} plan_ref;

typedef struct plan_step plan_step;
/* A step that is not a oneDNN primitive (a copy of constant data, a gather). */
typedef void (*step_fn)(const plan_step *step, void *const *ptrs);

struct plan_step {
  op_kind op;
  const char *node; /* borrowed from the model's IR */
  dnnl_primitive_t prim; /* NULL for a custom step, and until the plan is instantiated */
  dnnl_primitive_desc_t pd; /* a primitive step's, until the plan is instantiated */
  step_fn fn;
  int n_args;
  int slot; /* index of this step's first argument in a session's per-argument arrays;
               each step has n_args + 1 slots (the last for oneDNN's scratchpad) */
  int *arg_kinds; /* [n_args] DNNL_ARG_*; in the plan's arena */
  plan_ref *args; /* [n_args] */
  int64_t params[8]; /* custom steps' parameters */
  double flops;
};

typedef struct plan_buffer {
  size_t size;
  size_t offset; /* in the arena, after memory planning */
  int first, last; /* steps that write it first and read it last */
  ref_kind bind;   /* REF_BUFFER, or REF_INPUT/REF_OUTPUT when it is the user's buffer */
  int io_index;
} plan_buffer;

typedef struct plan {
  int batch, threads;
  int refs; /* owners: the cache and each session instance; under model->lock */
  plan_step *steps;
  int n_steps;
  int n_slots; /* sum over steps of n_args + 1 */
  plan_buffer *buffers;
  int n_buffers;
  size_t arena_bytes;      /* activations, after memory planning */
  size_t scratchpad_bytes; /* oneDNN's scratch, shared by all steps */
  int n_outputs;
  int out_rank[8];
  int64_t out_dims[8][IR_MAX_RANK];
  double flops;
  core_arena *consts; /* constants folded for this batch size */
  bool instantiated;  /* primitives created (engine_plan_instantiate); under model->lock */
} plan;

/* ---- the model --------------------------------------------------------------------- */

enum { PLAN_CACHE_MAX = 32 };

struct inferd_model {
  ir_graph *graph;
  node_extra *extra; /* [graph->n_nodes] */
  dnnl_engine_t engine;
  pthread_mutex_t lock;
  struct {
    plan *plan;
    uint64_t used;
  } cache[PLAN_CACHE_MAX];
  int max_plans, max_batch;
  size_t max_scratch; /* bytes of activations + scratchpad a plan may need */
  bool no_winograd;
  bool winograd_transformed; /* Winograd weights kept transformed (inferd_model_params) */
  bool bf16; /* INFERD_PRECISION_BF16 (inferd_model_params.precision; inferd.h says which ops) */
  int opt_batch; /* compiled at load: its kernel choices fix the weights' layouts */
  size_t opt_scratch; /* that plan's activations + scratchpad: what a session running it holds */
  int fixed_batch; /* > 0: the inputs declare this batch size as a number; no other runs */
  uint64_t clock;
  weight_copy **weights; /* [graph->n_values]: reordered copies of each constant */
  bool *weight_only;     /* [graph->n_values]: read only as a primitive's weights */
  core_arena *weight_arena;
  atomic_size_t weights_bytes; /* added to under lock; read by anyone (inferd_model_weights_bytes) */
  double flops_per_item;
  inferd_tensor_info *inputs, *outputs;
  int n_inputs, n_outputs;
};

/* engine_passes.c: the load-time graph rewrites. */
inferd_code engine_passes_run(inferd_model *m, inferd_status *st);

/* engine_plan.c: compile (caller holds model->lock). */
inferd_code engine_plan_compile(inferd_model *m, int batch, int threads, plan **out, inferd_status *st);
/* Creates the plan's oneDNN primitives (kernel code) on its first use; idempotent.
 * Under model->lock. */
inferd_code engine_plan_instantiate(plan *p, inferd_status *st);
void engine_plan_free(plan *p);

/* engine_weights.c: the shared copy of constant `value` in layout `md`, reordering
 * (once) when no copy in that layout exists yet. Caller holds model->lock. */
inferd_code engine_weight_get(inferd_model *m, int value, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *md,
                              const void **out, inferd_status *st);
/* Reorders src_data (layout src) into dst_data (layout dst) right now. */
inferd_code engine_reorder_now(inferd_model *m, const dnnl_memory_desc_t *src, const void *src_data,
                               const dnnl_memory_desc_t *dst, void *dst_data, inferd_status *st);
/* After the passes: finds the constants that are read only as weights (Conv, Gemm,
 * MatMul, BatchNormalization parameters), whose plain copy can go once reordered, and
 * drops the plain copies of constants that nothing reads any more. */
inferd_code engine_weights_mark(inferd_model *m, inferd_status *st);
/* After the load-time plan: drops the IR's plain copies of the constants read only as
 * weights (each of their uses has its copy in the weight cache by then). */
void engine_weights_release_plain(inferd_model *m);

/* ---- what op lowerings use (engine_plan.c) ------------------------------------------- */

typedef struct plan_ctx plan_ctx;

/* The per-plan view of a value: concrete shape, and either constant data or a place. */
typedef struct plan_value {
  inferd_dtype dtype;
  int rank; /* -1: not computed yet */
  int64_t dims[IR_MAX_RANK];
  bool is_const;     /* an initializer or a value folded at plan time */
  const void *data; /* the constant's data, dense row-major; NULL once a weight is
                       released (then only the weight cache has it) */
  bool defined;     /* has a place (ref) */
  plan_ref ref;     /* where it lives when not constant */
} plan_value;

const ir_graph *plan_graph(const plan_ctx *c);
const ir_node *plan_node(const plan_ctx *c, int node);
const node_extra *plan_extra(const plan_ctx *c, int node);
plan_value *plan_val(plan_ctx *c, int value);
dnnl_engine_t plan_engine(const plan_ctx *c);
int plan_batch(const plan_ctx *c);
bool plan_winograd(const plan_ctx *c); /* may 3x3 convolutions use Winograd */
bool plan_winograd_transformed(const plan_ctx *c); /* ... with their weights kept transformed */
bool plan_bf16(const plan_ctx *c); /* the model runs in bfloat16 where an op can (inferd_precision) */
/* oneDNN gave only its reference (plain C++ loop) kernel for this descriptor */
bool plan_pd_is_reference(const_dnnl_primitive_desc_t pd);

/* Records value v as a constant computed at plan time (data copied). */
inferd_code plan_set_const(plan_ctx *c, int v, inferd_dtype dtype, int rank, const int64_t *dims,
                           const void *data, inferd_status *st);
/* Memory that lives as long as the plan (constants the steps read). */
void *plan_const_alloc(plan_ctx *c, size_t size);
/* Gives value v a new buffer in layout md (its shape must already be set). */
inferd_code plan_define(plan_ctx *c, int v, const dnnl_memory_desc_t *md, inferd_status *st);
/* Makes value `out` share the storage of value `in` with layout md (a view). */
void plan_define_alias(plan_ctx *c, int out, int in, const dnnl_memory_desc_t *md);
/* A reference to value v in layout `want` (NULL: as it is). Inserts a reorder into a
 * new buffer when v lives in another layout, or takes the weight cache's copy when v
 * is a constant. */
inferd_code plan_src(plan_ctx *c, int v, const dnnl_memory_desc_t *want, plan_ref *out, inferd_status *st);
/* A value's physical data type may differ from its own (plan_value.dtype): with
 * plan_bf16, float32 values that convolutions write are held in bfloat16. plan_src
 * with want NULL gives them in float32 (a reorder); plan_src_typed gives any value as
 * it is, for the ops that compute in bfloat16 too (they check ref.md.data_type). */
inferd_code plan_src_typed(plan_ctx *c, int v, plan_ref *out, inferd_status *st);
/* Constant v as a weight in layout `want`; `src` says how its plain data is laid
 * out (NULL: dense row-major in its own shape; a reshape or strides otherwise). */
inferd_code plan_weight(plan_ctx *c, int v, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *want,
                        plan_ref *out, inferd_status *st);
/* The layout of the model's existing copy of constant v read as `src`, held in `type`,
 * or NULL: lowerings ask for it first so that every plan shares one copy of a weight.
 * Never a Winograd-transformed copy (engine_md_is_wino). */
const dnnl_memory_desc_t *plan_weight_layout(plan_ctx *c, int v, const dnnl_memory_desc_t *src,
                                             dnnl_data_type_t type);
/* A new attribute with the user scratchpad mode every primitive of a plan uses. */
dnnl_primitive_attr_t plan_attr_new(void);
/* Creates the primitive for `pd` (taking ownership of pd) and appends it as a step. */
inferd_code plan_emit(plan_ctx *c, int node, op_kind op, dnnl_primitive_desc_t pd, int n_args,
                      const int *arg_kinds, const plan_ref *args, double flops, inferd_status *st);
inferd_code plan_emit_custom(plan_ctx *c, int node, op_kind op, step_fn fn, int n_args, const plan_ref *args,
                             const int64_t *params, int n_params, inferd_status *st);
/* A new buffer in layout `md` (src's dims, another type or layout) and the reorder that
 * fills it from `src` now; *out is where it lives. */
inferd_code plan_convert(plan_ctx *c, int node, const plan_ref *src, const dnnl_memory_desc_t *md, plan_ref *out,
                         inferd_status *st);
/* Inserts a reorder from `src` into `dst` (both refs). */
inferd_code plan_emit_reorder(plan_ctx *c, int node, const plan_ref *src, const plan_ref *dst, inferd_status *st);

/* Dense row-major md for a shape (rank 0 becomes [1]). */
void md_plain(dnnl_memory_desc_t *md, int rank, const int64_t *dims, inferd_dtype dtype);
/* md with format_kind any. */
void md_any(dnnl_memory_desc_t *md, int rank, const int64_t *dims);
bool md_is_plain(const dnnl_memory_desc_t *md);
/* Whether md describes no element at all (some dim is 0). */
bool md_is_empty(const dnnl_memory_desc_t *md);
dnnl_data_type_t md_dtype(inferd_dtype dtype);

/* Fails with "node 'name' (Op): message". */
inferd_code node_fail(const plan_ctx *c, int node, inferd_code code, inferd_status *st, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The oneDNN element-wise ops (1 or 2) for an ONNX element-wise node; 0 when none. */
int engine_eltwise_of(const ir_graph *g, const ir_node *n, op_kind op, fused_op out[2]);

/* A primitive attribute (user scratchpad) carrying the node's fused post-ops. */
dnnl_primitive_attr_t plan_attr_fused(const plan_ctx *c, int node);

/* Sliding windows (Conv, pooling): reads kernel/strides/dilations/pads/auto_pad of
 * the node and computes padding and output sizes of the `nsp` spatial dims. */
typedef struct window {
  int nsp;
  dnnl_dims_t kernel, strides, dilation, pad_l, pad_r; /* dilation as ONNX (1 = none) */
  dnnl_dims_t pad_r_node; /* the node's own right padding (pads or auto_pad); pad_r is oneDNN's */
  int64_t out[IR_MAX_RANK];
} window;
inferd_code ops_window(plan_ctx *c, int node, const int64_t *in_spatial, const int64_t *kernel, bool ceil_mode,
                       window *w, inferd_status *st);

/* Plan-time arithmetic on constants goes through long double, whose 64-bit significand
 * holds every int64 exactly (through double, 2^53 + 1 became 2^53: Equal said true).
 * The conversion back saturates (an out-of-range cast to an integer is undefined). */
_Static_assert(LDBL_MANT_DIG >= 64, "int64 constants need a long double that holds them exactly");
static inline int64_t engine_to_i64(long double x) {
  if (x != x) return 0;
  if (x >= 0x1p63L) return INT64_MAX;
  if (x <= -0x1p63L) return INT64_MIN;
  return (int64_t)x;
}
static inline int64_t engine_clamp(long double x, int64_t lo, int64_t hi) {
  int64_t v = engine_to_i64(x);
  return v < lo ? lo : v > hi ? hi : v;
}

/* Element i of a constant of `dtype` (float, int64, int32, int8, uint8 or bool), and
 * its store with saturation to the integer types. */
static inline long double engine_elem_get(inferd_dtype dtype, const void *data, int64_t i) {
  switch (dtype) {
  case INFERD_DTYPE_FLOAT: return ((const float *)data)[i];
  case INFERD_DTYPE_INT64: return ((const int64_t *)data)[i];
  case INFERD_DTYPE_INT32: return ((const int32_t *)data)[i];
  case INFERD_DTYPE_INT8: return ((const int8_t *)data)[i];
  default: return ((const uint8_t *)data)[i];
  }
}
static inline void engine_elem_put(inferd_dtype dtype, void *data, int64_t i, long double x) {
  switch (dtype) {
  case INFERD_DTYPE_FLOAT: ((float *)data)[i] = (float)x; break;
  case INFERD_DTYPE_INT64: ((int64_t *)data)[i] = engine_to_i64(x); break;
  case INFERD_DTYPE_INT32: ((int32_t *)data)[i] = (int32_t)engine_clamp(x, INT32_MIN, INT32_MAX); break;
  case INFERD_DTYPE_INT8: ((int8_t *)data)[i] = (int8_t)engine_clamp(x, INT8_MIN, INT8_MAX); break;
  case INFERD_DTYPE_BOOL: ((uint8_t *)data)[i] = x != 0; break;
  default: ((uint8_t *)data)[i] = (uint8_t)engine_clamp(x, 0, UINT8_MAX);
  }
}

/* Reads a constant int64 (or int32) list input of at most `max` values (ops_shape.c):
 * its length; -1 when the input is absent (IR_NONE), -2 when it is not such a constant. */
int ops_const_ints(plan_ctx *c, int v, int64_t *out, int max);

/* Numpy broadcasting of two shapes (ops_binary.c); false when they do not broadcast. */
bool ops_broadcast_shape(const plan_value *a, const plan_value *b, int *rank, int64_t *dims);
/* oneDNN's binary `alg` of a and b into a tensor laid out as a (ops_binary.c), with `attr`
 * (post-ops; NULL: the plain scratchpad attribute); NULL when oneDNN refuses it. */
dnnl_primitive_desc_t ops_binary_pd(plan_ctx *c, dnnl_alg_kind_t alg, const dnnl_memory_desc_t *a,
                                    const dnnl_memory_desc_t *b, const_dnnl_primitive_attr_t attr);
/* Element offset in `v` (right-aligned to `rank`) of the broadcast output index `idx`. */
int64_t ops_broadcast_offset(const plan_value *v, int rank, const int64_t *idx);
/* Constant value v copied out, once per plan, to shape `to` (rank `rank`, v's dims
 * right-aligned in it and broadcast where they are 1) in layout `want` (NULL: plain).
 * The caller checks that v broadcasts to `to`; an empty or huge result is refused. */
inferd_code ops_broadcast_weight(plan_ctx *c, int node, int v, int rank, const int64_t *to,
                                 const dnnl_memory_desc_t *want, plan_ref *out, inferd_status *st);
/* Where on tensors computed at run time (ops_binary.c); ops_fold_lower folds the rest. */
inferd_code ops_where_lower(plan_ctx *c, int node, inferd_status *st);

/* ---- op lowerings (ops/) -------------------------------------------------------------- */

typedef inferd_code (*op_lower_fn)(plan_ctx *c, int node, inferd_status *st);
#define ENGINE__DECL(id, name, fn, min_inputs) inferd_code fn(plan_ctx *c, int node, inferd_status *st);
ENGINE_OPS(ENGINE__DECL)
#undef ENGINE__DECL

#endif /* INFERD_ENGINE_H */
