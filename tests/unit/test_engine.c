/*
 * test_engine.c - the engine's sharing contract on the real MobileNetV2 in models/:
 * one copy of the weights whatever the batch sizes and sessions, plans cached per batch
 * size, one scratch arena per session, sessions that give the same answers, and errors
 * that name what is wrong.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <math.h>
#include <omp.h>

#include "inferd/inferd.h"
#include "onnx.pb-c.h"

static const char *model_path(void) { return INFERD_SOURCE_DIR "/models/mobilenet_v2_imagenet.onnx"; }

static float *random_batch(int batch, unsigned seed) {
  size_t n = (size_t)batch * 3 * 224 * 224;
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)(seed >> 9) / (float)(1u << 23) * 2.0f - 1.0f;
  }
  return x;
}

/* Whether a and b differ by more than tol; NaN in either one differs (a plain `a - b > tol`
 * is false for NaN, so two sessions that both answered NaN would pass as equal). */
static int differ(float a, float b, float tol) { return !(fabsf(a - b) <= tol); }

static void run(inferd_session *s, int batch, const float *x, float *y) {
  inferd_status st = {0};
  const float *in[1] = {x};
  float *out[1] = {y};
  int rc = inferd_session_run(s, batch, in, out, &st);
  if (rc != INFERD_OK) fail_msg("run batch %d: %s", batch, st.message);
}

/* inferd_model_scratch_bytes is what a session running the batch compiled at load holds
 * (the server checks that each worker's fits in memory before starting it). */
static void test_model_scratch_bytes(void **state) {
  (void)state;
  inferd_model *m;
  inferd_status st = {0};
  inferd_model_params mp = {.opt_batch = 4};
  assert_int_equal(inferd_model_load(model_path(), &mp, &m, &st), INFERD_OK);
  size_t need = inferd_model_scratch_bytes(m);
  /* MobileNetV2 at batch 4: its largest activations alone are 4 x 96 x 112 x 112 floats */
  assert_true(need > (size_t)4 * 96 * 112 * 112 * 4);
  inferd_session *s;
  assert_int_equal(inferd_session_new(m, NULL, &s, &st), INFERD_OK); /* the load's threads */
  float *x = random_batch(4, 3), *y = malloc(4 * 1000 * sizeof *y);
  run(s, 4, x, y);
  assert_int_equal(inferd_session_scratch_bytes(s, 4), need);
  assert_int_equal(inferd_session_arena_bytes(s), need);
  free(x);
  free(y);
  inferd_session_free(s);
  inferd_model_free(m);
}

static void test_one_copy_of_weights(void **state) {
  (void)state;
  inferd_model *m;
  inferd_status st = {0};
  assert_int_equal(inferd_model_load(model_path(), NULL, &m, &st), INFERD_OK);
  size_t loaded = inferd_model_weights_bytes(m);
  /* MobileNetV2 has 3.5 M parameters: 14 MB of float32 weights */
  assert_in_range(loaded, 13u << 20, 16u << 20);
  inferd_session *a, *b;
  inferd_session_params one = {.threads = 1}, two = {.threads = 2};
  assert_int_equal(inferd_session_new(m, &one, &a, &st), INFERD_OK);
  assert_int_equal(inferd_session_new(m, &two, &b, &st), INFERD_OK);
  float *x = random_batch(8, 7), *ya = malloc(8 * 1000 * sizeof *ya), *yb = malloc(8 * 1000 * sizeof *yb);
  float y4[4 * 1000];
  for (int batch = 1; batch <= 8; batch++) {
    run(a, batch, x, ya);
    if (batch == 4) memcpy(y4, ya, sizeof y4);
    run(b, batch, x, yb);
    if (inferd_model_weights_bytes(m) != loaded)
      fail_msg("batch %d: weights grew from %zu to %zu bytes", batch, loaded, inferd_model_weights_bytes(m));
    for (int i = 0; i < batch * 1000; i++)
      if (differ(ya[i], yb[i], 1e-4f))
        fail_msg("batch %d element %d: 1 thread %g, 2 threads %g", batch, i, ya[i], yb[i]);
  }
  /* each row of a batch is the answer for that image alone */
  float y1[1000];
  run(a, 1, x + 5 * 3 * 224 * 224, y1);
  run(a, 8, x, ya);
  for (int i = 0; i < 1000; i++)
    if (differ(y1[i], ya[5 * 1000 + i], 1e-4f))
      fail_msg("row 5 element %d: alone %g, in a batch %g", i, y1[i], ya[5 * 1000 + i]);
  assert_true(inferd_session_scratch_bytes(a, 8) > inferd_session_scratch_bytes(a, 1));
  /* one arena per session, the largest plan's, not one per batch size: it grew at each
   * larger batch above, and the batch-1 run after batch 8 read its new place */
  size_t largest = 0, sum = 0;
  for (int batch = 1; batch <= 8; batch++) {
    size_t need = inferd_session_scratch_bytes(a, batch);
    if (need == 0) fail_msg("batch %d: no scratch", batch);
    largest = need > largest ? need : largest;
    sum += need;
  }
  assert_int_equal(inferd_session_arena_bytes(a), largest);
  assert_int_equal(inferd_session_arena_bytes(b), inferd_session_scratch_bytes(b, 8));
  assert_true(largest < sum);
  /* batch 4's blocked plan, moved to the grown arena, after batch 8 wrote all over it */
  run(a, 4, x, ya);
  for (int i = 0; i < 4 * 1000; i++)
    if (differ(ya[i], y4[i], 1e-5f))
      fail_msg("batch 4 after batch 8, element %d: %g, before %g", i, ya[i], y4[i]);
  free(x);
  free(ya);
  free(yb);
  inferd_session_free(a);
  inferd_session_free(b);
  inferd_model_free(m);
}

static void test_describe_and_errors(void **state) {
  (void)state;
  inferd_model *m;
  inferd_status st = {0};
  assert_int_equal(inferd_model_load(model_path(), NULL, &m, &st), INFERD_OK);
  inferd_tensor_info in, out;
  assert_int_equal(inferd_model_input(m, 0, &in), INFERD_OK);
  assert_string_equal(in.name, "input");
  assert_int_equal(in.rank, 4);
  assert_int_equal(in.dims[0], -1);
  assert_int_equal(in.dims[1], 3);
  assert_int_equal(inferd_model_output(m, 0, &out), INFERD_OK);
  assert_int_equal(out.rank, 2);
  assert_int_equal(out.dims[1], 1000);
  assert_int_equal(inferd_model_input(m, 1, &in), INFERD_INVALID_ARG);
  assert_int_equal(inferd_model_input(m, -1, &in), INFERD_INVALID_ARG);
  assert_int_equal(inferd_model_input(NULL, 0, &in), INFERD_INVALID_ARG);
  assert_int_equal(inferd_model_input(m, 0, NULL), INFERD_INVALID_ARG);
  assert_int_equal(inferd_model_output(NULL, 0, &out), INFERD_INVALID_ARG);
  assert_int_equal(inferd_model_output(m, 0, NULL), INFERD_INVALID_ARG);
  inferd_session *s;
  assert_int_equal(inferd_session_new(m, NULL, &s, &st), INFERD_OK);
  assert_int_equal(inferd_session_run(s, 0, NULL, NULL, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "batch size 0"));
  /* NULL arguments are refused by name, not dereferenced */
  float *x = random_batch(1, 3), y[1000];
  const float *no_input[1] = {NULL};
  float *outs[1] = {y};
  assert_int_equal(inferd_session_run(s, 1, no_input, outs, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "input 0 ('input') is NULL"));
  assert_int_equal(inferd_session_run(s, 1, NULL, outs, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "inputs is NULL"));
  const float *ins[1] = {x};
  float *no_output[1] = {NULL};
  assert_int_equal(inferd_session_run(s, 1, ins, no_output, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "output 0"));
  assert_int_equal(inferd_session_run(s, 1, ins, outs, &st), INFERD_OK);
  assert_int_equal(inferd_session_run(NULL, 1, ins, outs, &st), INFERD_INVALID_ARG);
  int rank;
  int64_t dims[INFERD_MAX_RANK];
  assert_int_equal(inferd_session_output_shape(s, 1, 0, NULL, dims, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "rank is NULL"));
  assert_int_equal(inferd_session_output_shape(NULL, 1, 0, &rank, dims, &st), INFERD_INVALID_ARG);
  free(x);
  inferd_session *none = (inferd_session *)1;
  assert_int_equal(inferd_session_new(NULL, NULL, &none, &st), INFERD_INVALID_ARG);
  assert_null(none);
  assert_non_null(strstr(st.message, "model is NULL"));
  assert_int_equal(inferd_session_new(m, NULL, NULL, &st), INFERD_INVALID_ARG);
  /* A thread count libgomp cannot make exits the process from inside a run: refused here. */
  int bad_threads[] = {-1, INFERD_SESSION_THREADS_MAX + 1, 1 << 30};
  for (size_t i = 0; i < sizeof bad_threads / sizeof *bad_threads; i++) {
    inferd_session_params bad = {.threads = bad_threads[i]};
    none = (inferd_session *)1;
    assert_int_equal(inferd_session_new(m, &bad, &none, &st), INFERD_INVALID_ARG);
    assert_null(none);
    assert_non_null(strstr(st.message, "threads"));
  }
  inferd_session_params most = {.threads = INFERD_SESSION_THREADS_MAX};
  assert_int_equal(inferd_session_new(m, &most, &none, &st), INFERD_OK);
  inferd_session_free(none);
  inferd_session_free(s);
  inferd_model_free(m);

  assert_int_equal(inferd_model_load(NULL, NULL, &m, &st), INFERD_INVALID_ARG);
  assert_null(m);
  assert_non_null(strstr(st.message, "path is NULL"));
  assert_int_equal(inferd_model_load(model_path(), NULL, NULL, &st), INFERD_INVALID_ARG);
  assert_int_equal(inferd_model_load_memory(NULL, 10, NULL, &m, &st), INFERD_INVALID_ARG);
  assert_null(m);
  assert_int_equal(inferd_model_load_memory(NULL, 10, NULL, NULL, &st), INFERD_INVALID_ARG);
  assert_int_equal(inferd_model_load("/nonexistent/model.onnx", NULL, &m, &st), INFERD_NOT_FOUND);
  assert_null(m);
  assert_non_null(strstr(st.message, "/nonexistent/model.onnx"));
  static const char junk[] = "definitely not a protobuf";
  assert_int_equal(inferd_model_load_memory(junk, sizeof junk, NULL, &m, &st), INFERD_INVALID_ARG);
  assert_null(m);
  assert_null(strchr(st.message, '\n'));
  /* a limit under 1 MB is said in bytes (it read "needs 5 MB ..., above the limit of 0 MB") */
  inferd_model_params tiny = {.max_scratch_bytes = 1000};
  assert_int_equal(inferd_model_load(model_path(), &tiny, &m, &st), INFERD_TOO_LARGE);
  if (!strstr(st.message, "above the limit of 1000 bytes")) fail_msg("message: %s", st.message);
}

/* A model file truncated while it is mapped and read (as `cp` over a file a server is
 * loading does): the loader meets pages past the new end (SIGBUS) and must refuse the
 * model, not die. Then a whole model loads on the same thread again. */
static void test_model_file_shrinks_while_read(void **state) {
  (void)state;
  char path[] = "/tmp/inferd-test-shrink-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *src = fopen(model_path(), "rb");
  assert_non_null(src);
  char chunk[1 << 16];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, src)) > 0) assert_int_equal(write(fd, chunk, n), (ssize_t)n);
  fclose(src);
  struct stat sb;
  assert_int_equal(fstat(fd, &sb), 0);
  void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  assert_true(map != MAP_FAILED);
  assert_int_equal(ftruncate(fd, 4096), 0);
  inferd_model *m = NULL;
  inferd_status st = {0};
  inferd_model_params p = {.mapped_file = true};
  assert_int_equal(inferd_model_load_memory(map, (size_t)sb.st_size, &p, &m, &st), INFERD_INVALID_ARG);
  assert_null(m);
  if (!strstr(st.message, "shrank while it was read")) fail_msg("message: %s", st.message);
  munmap(map, (size_t)sb.st_size);
  close(fd);
  unlink(path);
  assert_int_equal(inferd_model_load(model_path(), NULL, &m, &st), INFERD_OK);
  inferd_model_free(m);
}

/* A one-node model, x [N, 4] -> `op` named `node` -> y, serialized; free the result. With
 * `anchors`, a second output is a constant of shape [3, 2] (as a detector's anchor boxes). */
static void *one_node_model(const char *op, const char *node, bool anchors, size_t *size) {
  Onnx__TensorShapeProto__Dimension d0 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT,
                                    d1 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
  d0.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
  d0.dim_param = "N";
  d1.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
  d1.dim_value = 4;
  Onnx__TensorShapeProto__Dimension *dims[2] = {&d0, &d1};
  Onnx__TensorShapeProto shape = ONNX__TENSOR_SHAPE_PROTO__INIT;
  shape.n_dim = 2;
  shape.dim = dims;
  Onnx__TypeProto__Tensor tensor = ONNX__TYPE_PROTO__TENSOR__INIT;
  tensor.has_elem_type = 1;
  tensor.elem_type = INFERD_DTYPE_FLOAT;
  tensor.shape = &shape;
  Onnx__TypeProto type = ONNX__TYPE_PROTO__INIT;
  type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  type.tensor_type = &tensor;
  Onnx__ValueInfoProto x = ONNX__VALUE_INFO_PROTO__INIT, y = ONNX__VALUE_INFO_PROTO__INIT;
  x.name = "x", x.type = &type;
  y.name = "y", y.type = &type;
  Onnx__ValueInfoProto anchor_info = ONNX__VALUE_INFO_PROTO__INIT;
  anchor_info.name = "anchors";
  Onnx__ValueInfoProto *inputs[1] = {&x}, *outputs[2] = {&y, &anchor_info};
  int64_t anchor_dims[2] = {3, 2};
  float anchor_values[6] = {0, 0, 1, 1, 2, 2};
  Onnx__TensorProto anchor = ONNX__TENSOR_PROTO__INIT;
  anchor.name = "anchors";
  anchor.n_dims = 2, anchor.dims = anchor_dims;
  anchor.has_data_type = 1, anchor.data_type = INFERD_DTYPE_FLOAT;
  anchor.n_float_data = 6, anchor.float_data = anchor_values;
  Onnx__TensorProto *initializers[1] = {&anchor};
  char *node_in[1] = {"x"}, *node_out[1] = {"y"};
  Onnx__NodeProto n = ONNX__NODE_PROTO__INIT;
  n.name = (char *)node, n.op_type = (char *)op;
  n.n_input = 1, n.input = node_in;
  n.n_output = 1, n.output = node_out;
  Onnx__NodeProto *nodes[1] = {&n};
  Onnx__GraphProto graph = ONNX__GRAPH_PROTO__INIT;
  graph.name = "g";
  graph.n_node = 1, graph.node = nodes;
  graph.n_input = 1, graph.input = inputs;
  graph.n_output = anchors ? 2 : 1, graph.output = outputs;
  graph.n_initializer = anchors ? 1 : 0, graph.initializer = initializers;
  Onnx__OperatorSetIdProto opset = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  opset.domain = "";
  opset.has_version = 1, opset.version = 13;
  Onnx__OperatorSetIdProto *opsets[1] = {&opset};
  Onnx__ModelProto model = ONNX__MODEL_PROTO__INIT;
  model.has_ir_version = 1, model.ir_version = 8;
  model.n_opset_import = 1, model.opset_import = opsets;
  model.graph = &graph;
  *size = onnx__model_proto__get_packed_size(&model);
  void *buf = malloc(*size);
  assert_non_null(buf);
  assert_int_equal(onnx__model_proto__pack(&model, buf), *size);
  return buf;
}

/* Regression: a message longer than the status buffer was cut at its end, and what is
 * wrong comes last: a node with a 2000-character name gave "node 'NNN...N" and no word of
 * the op, a model under a long path gave the path and ": ". The middle goes instead. */
static void test_long_names_keep_the_reason(void **state) {
  (void)state;
  char name[2001];
  memset(name, 'N', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  size_t size;
  void *onnx = one_node_model("FancyOp", name, false, &size);
  inferd_model *m = NULL;
  inferd_status st = {0};
  assert_int_equal(inferd_model_load_memory(onnx, size, NULL, &m, &st), INFERD_UNSUPPORTED);
  free(onnx);
  assert_null(m);
  if (strncmp(st.message, "node 'NNN", 9) != 0 || !strstr(st.message, "(FancyOp): op not supported"))
    fail_msg("message: %s", st.message);

  char dir[] = "/tmp/inferd-test-long-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[1024], part[201];
  memset(part, 'd', sizeof part - 1);
  part[sizeof part - 1] = '\0';
  snprintf(path, sizeof path, "%s/%s", dir, part);
  assert_int_equal(mkdir(path, 0700), 0);
  size_t dir_len = strlen(path);
  snprintf(path + dir_len, sizeof path - dir_len, "/%s.onnx", part);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite("\x08\x08\x3a", 1, 3, f), 3); /* a GraphProto field cut short */
  fclose(f);
  assert_int_equal(inferd_model_load(path, NULL, &m, &st), INFERD_INVALID_ARG);
  assert_null(m);
  if (strncmp(st.message, dir, strlen(dir)) != 0 || !strstr(st.message, "protobuf parse failed"))
    fail_msg("message: %s", st.message);
  unlink(path);
  path[dir_len] = '\0';
  rmdir(path);
  rmdir(dir);
}

/* Regression: a run and inferd_session_output_shape set the calling thread's OpenMP thread
 * count to the session's (omp_set_num_threads) and left it so. A session made later on
 * that thread with threads = 0 got the last session's count, not the caller's default,
 * and so did the plan a later inferd_model_load on it compiled. */
static void test_run_leaves_caller_threads(void **state) {
  (void)state;
  int before = omp_get_max_threads();
  omp_set_num_threads(3);
  inferd_model *m;
  inferd_status st = {0};
  assert_int_equal(inferd_model_load(model_path(), NULL, &m, &st), INFERD_OK);
  inferd_session *one, *deflt;
  inferd_session_params sp = {.threads = 1};
  assert_int_equal(inferd_session_new(m, &sp, &one, &st), INFERD_OK);
  float *x = random_batch(1, 5), y[1000];
  run(one, 1, x, y);
  assert_int_equal(omp_get_max_threads(), 3);
  int rank;
  int64_t dims[INFERD_MAX_RANK];
  assert_int_equal(inferd_session_output_shape(one, 2, 0, &rank, dims, &st), INFERD_OK);
  assert_int_equal(omp_get_max_threads(), 3);
  assert_int_equal(inferd_session_new(m, NULL, &deflt, &st), INFERD_OK);
  assert_int_equal(inferd_session_threads(deflt), 3);
  free(x);
  inferd_session_free(one);
  inferd_session_free(deflt);
  inferd_model_free(m);
  omp_set_num_threads(before);
}

typedef struct relu_worker {
  inferd_model *model;
  int first_batch;
  atomic_int *done;
  int bad_runs;
  char message[INFERD_STATUS_MESSAGE_MAX + 32];
} relu_worker;

/* Runs batch sizes 1..30 (more than a session and the plan cache keep) in its own session. */
static void *relu_worker_main(void *arg) {
  relu_worker *w = arg;
  inferd_status st = {0};
  inferd_session *s;
  inferd_session_params sp = {.threads = 1};
  if (inferd_session_new(w->model, &sp, &s, &st) != INFERD_OK) {
    snprintf(w->message, sizeof w->message, "%s", st.message);
    w->bad_runs++;
    atomic_fetch_add(w->done, 1);
    return NULL;
  }
  float x[30 * 4], y[30 * 4];
  for (int i = 0; i < 30 * 4; i++) x[i] = (float)(i % 7) - 3.0f;
  for (int k = 0; k < 60; k++) {
    int batch = 1 + (w->first_batch + k * 7) % 30;
    const float *in[1] = {x};
    float *out[1] = {y};
    bool good = inferd_session_run(s, batch, in, out, &st) == INFERD_OK;
    for (int i = 0; good && i < batch * 4; i++) good = y[i] == (x[i] > 0 ? x[i] : 0.0f);
    if (!good) {
      snprintf(w->message, sizeof w->message, "batch %d: %s", batch, st.message);
      w->bad_runs++;
    }
  }
  inferd_session_free(s);
  atomic_fetch_add(w->done, 1);
  return NULL;
}

/* Sessions of one model on two threads, each running more batch sizes than a session
 * binds and the model caches (2 plans), while a third thread reads the model's figures.
 * For the ThreadSanitizer build. Regression: every plan compiled wrote
 * inferd_model_flops_per_item's figure, under the model's lock, when it was 0 (a model
 * without convolutions or matrix products), while readers read it without the lock. */
static void test_sessions_on_threads(void **state) {
  (void)state;
  size_t size;
  void *onnx = one_node_model("Relu", "relu", false, &size);
  inferd_model *m;
  inferd_status st = {0};
  inferd_model_params mp = {.max_cached_plans = 2};
  assert_int_equal(inferd_model_load_memory(onnx, size, &mp, &m, &st), INFERD_OK);
  free(onnx);
  atomic_int done = 0;
  relu_worker w[2] = {{.model = m, .first_batch = 0, .done = &done}, {.model = m, .first_batch = 3, .done = &done}};
  pthread_t threads[2];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&threads[i], NULL, relu_worker_main, &w[i]), 0);
  double flops = 0;
  size_t weights = 0;
  for (long i = 0; i < 100000000 && atomic_load(&done) < 2; i++) {
    flops += inferd_model_flops_per_item(m);
    weights += inferd_model_weights_bytes(m);
  }
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(threads[i], NULL), 0);
  for (int i = 0; i < 2; i++)
    if (w[i].bad_runs) fail_msg("thread %d: %d bad runs, last %s", i, w[i].bad_runs, w[i].message);
  assert_true(flops == 0 && weights == 0);
  inferd_model_free(m);
}

/* Regression: inferd_model_output gave -1 (the batch axis) as dims[0] of every output of a
 * model with a dynamic batch axis, also of one that does not follow the batch: a constant
 * [3, 2] read as [-1, 2], so that a caller sizing it from the description at batch 1 gave
 * 2 floats of room to a run that writes 6. */
static void test_output_without_batch_axis(void **state) {
  (void)state;
  size_t size;
  void *onnx = one_node_model("Relu", "relu", true, &size);
  inferd_model *m;
  inferd_status st = {0};
  assert_int_equal(inferd_model_load_memory(onnx, size, NULL, &m, &st), INFERD_OK);
  free(onnx);
  inferd_tensor_info y, anchors;
  assert_int_equal(inferd_model_output(m, 0, &y), INFERD_OK);
  assert_int_equal(inferd_model_output(m, 1, &anchors), INFERD_OK);
  assert_int_equal(y.rank, 2);
  assert_int_equal(y.dims[0], -1);
  assert_int_equal(y.dims[1], 4);
  assert_int_equal(anchors.rank, 2);
  assert_int_equal(anchors.dims[0], 3);
  assert_int_equal(anchors.dims[1], 2);
  inferd_session *s;
  assert_int_equal(inferd_session_new(m, NULL, &s, &st), INFERD_OK);
  int rank;
  int64_t dims[INFERD_MAX_RANK];
  assert_int_equal(inferd_session_output_shape(s, 5, 1, &rank, dims, &st), INFERD_OK);
  assert_int_equal(dims[0], 3);
  inferd_session_free(s);
  inferd_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_copy_of_weights),
      cmocka_unit_test(test_model_scratch_bytes),
      cmocka_unit_test(test_describe_and_errors),
      cmocka_unit_test(test_model_file_shrinks_while_read),
      cmocka_unit_test(test_long_names_keep_the_reason),
      cmocka_unit_test(test_run_leaves_caller_threads),
      cmocka_unit_test(test_sessions_on_threads),
      cmocka_unit_test(test_output_without_batch_axis),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
