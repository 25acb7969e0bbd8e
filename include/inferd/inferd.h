/*
 * inferd.h - the embedding API of inferd's engine.
 *
 * A model is loaded once (inferd_model_load) and is then read-only: its weights live
 * in one copy, already reordered into the layouts the kernels want, and any number of
 * sessions may share it. A session (inferd_session_new) is what one worker thread owns:
 * its scratch arena, its thread count and its per-batch-size execution state. A session
 * is never used by two threads at once; different sessions of one model may run
 * concurrently on different threads.
 *
 * Plans are compiled per batch size and thread count on first use and cached in the
 * model (bounded); the first run of a batch size in a session binds that plan to the
 * session's arena.
 * After that, inferd_session_run does not allocate and takes no lock.
 *
 * Errors: every call that can fail returns an inferd_code and, when `status` is not
 * NULL, fills it with the code and a one-line message that names what went wrong
 * and where (e.g. "node 'Conv_12' (Conv): group 3 does not divide 64 input channels").
 * A NULL model, session, path, out pointer or input/output array is refused with
 * INFERD_INVALID_ARG naming the argument (a session used after its model or itself
 * was freed cannot be told apart from a live one: that stays the caller's bug). The
 * calls that return no inferd_code (counts, bytes, threads, profiles) take a live model
 * or session and are not checked; the *_free calls take NULL.
 */
#ifndef INFERD_INFERD_H
#define INFERD_INFERD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One list of status codes for the whole project (X-macro: name, description). */
#define INFERD_STATUS_MAP(X)                                   \
  X(OK, "success")                                             \
  X(INVALID_ARG, "invalid argument")                           \
  X(NOT_FOUND, "not found")                                    \
  X(UNAVAILABLE, "unavailable")                                \
  X(UNSUPPORTED, "unsupported")                                \
  X(ALREADY_EXISTS, "already exists")                          \
  X(INTERNAL, "internal error")                                \
  X(TIMEOUT, "timed out")                                      \
  X(TOO_LARGE, "too large")                                    \
  X(NO_MEMORY, "out of memory")

typedef enum inferd_code {
#define INFERD__CODE(name, text) INFERD_##name,
  INFERD_STATUS_MAP(INFERD__CODE)
#undef INFERD__CODE
  INFERD_CODE_COUNT
} inferd_code;

enum { INFERD_STATUS_MESSAGE_MAX = 320 };

/* Caller-owned; filled by any call that fails. */
typedef struct inferd_status {
  inferd_code code;
  char message[INFERD_STATUS_MESSAGE_MAX];
} inferd_status;

const char *inferd_code_name(inferd_code code); /* "INVALID_ARG" */
const char *inferd_code_str(inferd_code code);  /* "invalid argument" */

/* Element types: the values of ONNX's TensorProto.DataType. */
typedef enum inferd_dtype {
  INFERD_DTYPE_UNDEFINED = 0,
  INFERD_DTYPE_FLOAT = 1,
  INFERD_DTYPE_UINT8 = 2,
  INFERD_DTYPE_INT8 = 3,
  INFERD_DTYPE_INT32 = 6,
  INFERD_DTYPE_INT64 = 7,
  INFERD_DTYPE_BOOL = 9,
} inferd_dtype;

enum { INFERD_MAX_RANK = 8 };

/* A model input or output as the model declares it; dims[i] == -1 is a dynamic axis.
 * dims[0] is the batch axis: -1 when the model declares it dynamic (a name); a number
 * when it declares a number, which is then the only batch size the model runs (runs of
 * any other fail with INFERD_INVALID_ARG). An output's dims are those of the plan compiled
 * at load (opt_batch), with dims[0] -1 where it was that batch size: an output whose first
 * dimension is another number (a constant) keeps it; one that is opt_batch by chance reads
 * as the batch axis (inferd_session_output_shape gives any batch's exact shape). */
typedef struct inferd_tensor_info {
  const char *name; /* borrowed from the model; valid until inferd_model_free */
  inferd_dtype dtype;
  int rank;
  int64_t dims[INFERD_MAX_RANK];
} inferd_tensor_info;

typedef struct inferd_model inferd_model;
typedef struct inferd_session inferd_session;

/* The arithmetic a model runs in. */
typedef enum inferd_precision {
  INFERD_PRECISION_FP32 = 0, /* float32 everywhere (the default) */
  INFERD_PRECISION_BF16 = 1, /* convolutions and the pooling between them read, write and
                                keep their weights in bfloat16 (8 significant bits, float32's
                                range), accumulating in float32; products by constant weights
                                (MatMul, Gemm) read bfloat16 and write float32; an Add or Mul
                                of a bfloat16 tensor, a BatchNormalization, an element-wise op
                                (Relu, Sigmoid, Exp, ...) and a Concat of bfloat16 inputs stay
                                bfloat16 where oneDNN has an optimized kernel for them; every
                                other op, the inputs and the outputs stay float32. Needs AVX-512; native
                                (avx512_bf16) on CPUs that have it. About 1.7-1.9x float32's
                                speed on a ResNet, half its weight and activation memory, at
                                an error of ~1% of the output's magnitude. */
} inferd_precision;

typedef struct inferd_model_params {
  int max_cached_plans; /* plans (batch size and thread count) kept compiled per model;
                           0 = default 8; at most 32 */
  int max_batch;        /* largest batch a run may ask for; 0 = default 1024 */
  size_t max_scratch_bytes; /* largest scratch (activations + kernel scratchpad) one plan
                               may need; 0 = default 8 GiB. A model whose intermediates
                               are larger is refused with INFERD_TOO_LARGE. */
  bool mapped_file;     /* inferd_model_load_memory only: `data` lies in a read-only private
                           file mapping (mmap PROT_READ, MAP_PRIVATE). The loader then drops
                           each page of it once copied (madvise MADV_DONTNEED; reading the
                           mapping again brings the file's bytes back), so that loading
                           never holds the weights twice. Never set it for other memory:
                           dropped anonymous pages read back as zeros. */
  int opt_batch;        /* the batch size the model is tuned for; 0 = 1. Its plan is compiled
                           at load, and the kernels it picks fix the layout of the one shared
                           copy of the weights; other batch sizes run on that copy, with the
                           kernels that take its layout. Set it to the batch that runs most
                           (the server's batchSize). Clamped to max_batch; a model whose
                           plan cannot be made at this batch is refused at load. */
  bool no_winograd;     /* only direct convolutions. By default a 3x3 stride-1 convolution
                           with enough output pixels per channel uses Winograd F(4x4, 3x3):
                           up to 2x faster, within ~1e-6 of the output's magnitude of the
                           direct result, with the same weight memory. */
  bool winograd_transformed; /* keep the weights of Winograd convolutions transformed
                           instead of transforming them on every call, and run every
                           3x3 stride-1 convolution oneDNN takes by Winograd: faster (a few
                           percent on a ResNet), but each such weight is held 4x its size
                           (16/9 where oneDNN picks F(2x2, 3x3)) beside its plain copy, and
                           once more for each plan (batch size and thread count) whose
                           kernel blocks it another way: a weight run at batches 1, 2, 4
                           and 8 with 1 and 2 threads was held 10x its size. Ignored with
                           no_winograd. */
  inferd_precision precision; /* INFERD_PRECISION_FP32 unless set; Winograd is float32 only */
  const char *external_data_dir; /* inferd_model_load_memory only: the directory that tensors
                           stored outside the model (ONNX external data: torch.onnx.export
                           writes them beside any model over 2 GB) are read from, as the
                           model file's directory would be; NULL refuses such a model.
                           inferd_model_load reads them beside the model's file. A tensor's
                           location must be a relative path without ".." (a symbolic link
                           in the directory is followed, as ONNX Runtime follows it). */
  uint64_t max_external_bytes; /* external data adding up to more than this (by the tensors'
                           declared types and shapes, initializers and node attributes) is
                           refused with INFERD_NO_MEMORY before any of it is read: a server
                           passes the memory it has left, since the model file's size says
                           nothing of these weights. 0 = no limit. */
} inferd_model_params;

/* Loads an ONNX model. `params` may be NULL for defaults. On success *out owns the
 * model: free with inferd_model_free once every session on it is freed. The whole
 * graph is checked here: an op or attribute the engine cannot run is refused now,
 * with its node named, never at run time. */
inferd_code inferd_model_load(const char *path, const inferd_model_params *params,
                              inferd_model **out, inferd_status *status);
/* Same from memory; `data` is borrowed for the duration of the call only
 * (params->external_data_dir says where external data lies). */
inferd_code inferd_model_load_memory(const void *data, size_t size,
                                     const inferd_model_params *params,
                                     inferd_model **out, inferd_status *status);
void inferd_model_free(inferd_model *model);

int inferd_model_num_inputs(const inferd_model *model);
int inferd_model_num_outputs(const inferd_model *model);
/* Fills *info for input/output `index`; returns INVALID_ARG when out of range or when
 * model or info is NULL. */
inferd_code inferd_model_input(const inferd_model *model, int index, inferd_tensor_info *info);
inferd_code inferd_model_output(const inferd_model *model, int index, inferd_tensor_info *info);
/* Bytes of weights the model holds (after reordering), shared by all sessions. */
size_t inferd_model_weights_bytes(const inferd_model *model);
/* Floating-point operations of one image (batch 1), counted over convolutions and
 * matrix products (of the plan compiled at load); 0 for a model that has none. */
double inferd_model_flops_per_item(const inferd_model *model);
/* Bytes of scratch (activations, then oneDNN's scratchpad) the plan of opt_batch, compiled
 * at load, needs: what each session that runs that batch holds besides the shared weights. */
size_t inferd_model_scratch_bytes(const inferd_model *model);

/* The most compute threads a session takes (inferd_session_params.threads). */
enum { INFERD_SESSION_THREADS_MAX = 1024 };

typedef struct inferd_session_params {
  int threads; /* compute threads for each run, 0 to INFERD_SESSION_THREADS_MAX; 0 = the
                  creating thread's OpenMP default (omp_get_max_threads(): OMP_NUM_THREADS,
                  else every CPU the process may use). A run's OpenMP team is the calling
                  thread's, sized to this for the run; the caller's own setting is left as
                  it was. */
  int profile; /* nonzero: time every step (see inferd_session_profile) */
} inferd_session_params;

/* The batch sizes a session keeps bound at once. Running one more evicts one, and
 * binding it again on its next run allocates and takes the model's lock: a caller that
 * runs batches of many sizes should run them in chunks of fewer sizes than this. */
enum { INFERD_SESSION_BATCH_SIZES = 24 };

/* Creates a session on `model` (borrowed; must outlive the session). */
inferd_code inferd_session_new(inferd_model *model, const inferd_session_params *params,
                               inferd_session **out, inferd_status *status);
void inferd_session_free(inferd_session *session);

/* Runs one batch. `inputs[i]` is the i-th model input, dense row-major float32 with
 * dimension 0 equal to `batch` and the other dims as the model declares; `outputs[i]`
 * receives the i-th output the same way (size from inferd_session_output_shape).
 * Buffers are borrowed for the duration of the call. An output must not overlap an input
 * or another output (not checked): outputs are written while inputs are still being read,
 * so a run "in place" gives wrong numbers, with no error. */
inferd_code inferd_session_run(inferd_session *session, int batch, const float *const *inputs,
                               float *const *outputs, inferd_status *status);

/* Shape of output `index` at batch size `batch`, compiling the plan if needed and binding
 * it to the session as its first run of that batch would: the session's arena grows to
 * that batch's scratch (asking about batch 64 of MobileNetV2 maps 367 MB).
 * Returns the rank in *rank and the dims in dims[]. */
inferd_code inferd_session_output_shape(inferd_session *session, int batch, int index,
                                        int *rank, int64_t dims[INFERD_MAX_RANK],
                                        inferd_status *status);

/* Bytes of scratch batch size `batch`'s plan needs (activations by its memory plan, then
 * oneDNN's scratchpad), or 0 when the session has not run it. */
size_t inferd_session_scratch_bytes(const inferd_session *session, int batch);
/* The compute threads each run of the session uses (its params' threads, or the
 * default those meant). */
int inferd_session_threads(const inferd_session *session);
/* Bytes of scratch the session holds: one arena that all its batch sizes share (a session
 * runs one batch at a time), the largest of their inferd_session_scratch_bytes. */
size_t inferd_session_arena_bytes(const inferd_session *session);

/* Per-op-kind time breakdown of the runs since the session was made with profile=1 (or
 * since inferd_session_profile_reset), written as text lines "op  calls  total_ms
 * share%" into buf. */
void inferd_session_profile(const inferd_session *session, char *buf, size_t size);

/* Forgets the times profiled so far, e.g. after warm-up runs, whose first touch of the
 * scratch and first calls of each kernel would otherwise be counted in. */
void inferd_session_profile_reset(inferd_session *session);

/* The `top` steps of batch size `batch`'s plan that took the most time in this session's
 * runs of that batch (profile=1), slowest first, as text lines: milliseconds per run,
 * share of all the steps' time, GFLOP/s (convolutions and matrix products), op kind,
 * the oneDNN kernel, the output's shape and the ONNX node. Empty when that batch has
 * not run. */
void inferd_session_profile_steps(const inferd_session *session, int batch, int top, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* INFERD_INFERD_H */
