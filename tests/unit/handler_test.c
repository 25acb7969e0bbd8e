/*
 * handler_test.c - the image_classifier handler (src/handler/) against torchvision and
 * TorchServe.
 *
 * DESIGN
 * tests/fixtures/make_preprocess_ref.py writes the images and, for each, torchvision's
 * tensor before Normalize (PIL + Resize(256) + CenterCrop(224) + ToTensor) and, for
 * postprocessing, logits with TorchServe's answers under several index_to_name.json
 * shapes. This test finds them in the directory named by INFERD_HANDLER_FIXTURES (set
 * by the ctest registration in tests/fixtures/CMakeLists.txt, whose fixture-setup test
 * runs the script first), and checks:
 *   - parity: for every image, max |inferd - torchvision| <= 2/255 per element before
 *     Normalize, reported separately for PNG, JPEG at full size and DCT-scaled JPEG;
 *     where the crop is bit-equal the normalized tensor must be too; the SIMD
 *     resampling gives the plain C one's bytes;
 *   - the real model (INFERD_HANDLER_MODEL, default models/mobilenet_v2_imagenet.onnx)
 *     through the engine API: the top-5 classes of inferd's tensor are torchvision's
 *     (for the mosaic, the one image allowed 4/255, a class may swap places with
 *     torchvision's 5th when their logits are within 0.05: a near tie);
 *   - error paths: empty, truncated, random, corrupt or oversized images, and a
 *     progressive JPEG whose coefficient buffers would exceed 64 MiB, are refused
 *     with INVALID_ARG and a one-line "image: ..." message, and the context keeps
 *     working afterwards; a JPEG lacking its Huffman or quantization tables gets no
 *     tables from the context's earlier images;
 *   - postprocessing: the JSON answer equals TorchServe's (keys, order and layout
 *     exactly; each probability within 1e-6 relative, and printed with the same
 *     digits wherever it is the same float32), labels as strings, lists,
 *     object_type_names, duplicates, missing entries and no file;
 *   - memory: a 7999x8000 PNG (encoded here with libspng) is decoded row by row: the
 *     process's peak RSS (VmHWM, reset through /proc/self/clear_refs) rises by less than
 *     a quarter of its 192 MB of pixels, and its crop equals that of the same picture
 *     interlaced, which is decoded whole;
 *   - the time per image, printed: best and median of repeated runs (a 512x512 photo
 *     as JPEG and PNG, a 451x300 JPEG, 3000x2000 and 4000x3000 JPEGs).
 *
 * Every assertion prints the value got and the value expected.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <spng.h>

#include "core/core.h"
#include "handler/handler.h"

#ifndef INFERD_SOURCE_DIR
#define INFERD_SOURCE_DIR "."
#endif

enum { PLANE = HANDLER_IMAGE_CROP * HANDLER_IMAGE_CROP, MAX_CASES = 64 };

static const char *fixtures;
static const char *model_path;

/* ==== helpers ============================================================================== */

typedef struct blob {
  uint8_t *data;
  size_t size;
} blob;

static blob read_file(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", fixtures, name);
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s (did the fixtures_preprocess test run?)", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  blob b = {malloc((size_t)n + 1), (size_t)n};
  assert_non_null(b.data);
  assert_int_equal(fread(b.data, 1, (size_t)n, f), (size_t)n);
  b.data[n] = 0;
  fclose(f);
  return b;
}

static void read_npy(const char *name, core_npy *npy, int64_t count) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", fixtures, name);
  inferd_status st = {0};
  if (core_npy_read(path, npy, &st) != INFERD_OK) fail_msg("%s", st.message);
  assert_int_equal(npy->dtype, INFERD_DTYPE_FLOAT);
  assert_int_equal(core_shape_count(npy->rank, npy->dims), count);
}

/* torchvision's tensor for image `file`, [3,224,224]: before Normalize (suffix
 * "ref") or after it ("norm") */
static void read_ref(const char *file, const char *suffix, core_npy *npy) {
  char name[300];
  snprintf(name, sizeof name, "%.200s.%s.npy", file, suffix);
  read_npy(name, npy, HANDLER_IMAGE_TENSOR_FLOATS);
}

typedef struct image_case {
  char file[128];
  char kind[32]; /* png, jpeg, jpeg_scaled */
  int bound;     /* max |inferd - torchvision| allowed per element, in 1/255 */
} image_case;

static int read_cases(image_case *cases) {
  blob b = read_file("cases.txt");
  int n = 0;
  char *save = NULL;
  for (char *line = strtok_r((char *)b.data, "\n", &save); line && n < MAX_CASES; line = strtok_r(NULL, "\n", &save))
    if (sscanf(line, "%127s %31s %d", cases[n].file, cases[n].kind, &cases[n].bound) == 3) n++;
  free(b.data);
  assert_true(n > 0);
  return n;
}

/* ==== parity with torchvision ============================================================= */

static void test_parity(void **state) {
  (void)state;
  image_case cases[MAX_CASES];
  int n = read_cases(cases);
  handler_image_params dct = {.scaled_jpeg = 1}; /* the jpeg_scaled cases say how far it may go */
  handler_image_ctx *ctx = handler_image_ctx_new(&dct);
  handler_image_params plain = {.plain_c = 1, .scaled_jpeg = 1};
  handler_image_ctx *plain_ctx = handler_image_ctx_new(&plain);
  assert_non_null(ctx);
  assert_non_null(plain_ctx);
  uint8_t *rgb = malloc(HANDLER_IMAGE_CROP_BYTES), *plain_rgb = malloc(HANDLER_IMAGE_CROP_BYTES);
  float *tensor = malloc(sizeof(float) * HANDLER_IMAGE_TENSOR_FLOATS);
  float *expected = malloc(sizeof(float) * HANDLER_IMAGE_TENSOR_FLOATS);
  const char *kinds[] = {"png", "jpeg", "jpeg_scaled"};
  double kind_max[3] = {0, 0, 0};
  for (int i = 0; i < n; i++) {
    blob b = read_file(cases[i].file);
    core_npy ref, norm;
    read_ref(cases[i].file, "ref", &ref);
    read_ref(cases[i].file, "norm", &norm);
    const float *x = ref.data; /* [3,224,224] */

    handler_image_info info;
    inferd_status st = {0};
    if (handler_image_crop(ctx, b.data, b.size, rgb, &info, &st) != INFERD_OK)
      fail_msg("%s: %s", cases[i].file, st.message);
    double max_diff = 0;
    int differ = 0, above2 = 0;
    for (int c = 0; c < 3; c++)
      for (int p = 0; p < PLANE; p++) {
        double d = fabs(rgb[3 * p + c] / 255.0 - x[c * PLANE + p]);
        differ += d > 1e-7;
        above2 += d > 2.0 / 255 + 1e-6;
        if (d > max_diff) max_diff = d;
      }
    int k = strcmp(cases[i].kind, "png") == 0 ? 0 : strcmp(cases[i].kind, "jpeg") == 0 ? 1 : 2;
    kind_max[k] = fmax(kind_max[k], max_diff);
    print_message("parity %-13s %-11s %4dx%-4d decoded %4dx%-4d (%d/%d) -> %lldx%lld: max |diff| %.0f/255, "
                  "%d of %d differ, %d by more than 2/255\n",
                  cases[i].file, cases[i].kind, info.width, info.height, info.decoded_width, info.decoded_height,
                  info.scale_num, info.scale_denom, (long long)info.resized_width, (long long)info.resized_height,
                  max_diff * 255, differ, HANDLER_IMAGE_TENSOR_FLOATS, above2);
    if (max_diff > cases[i].bound / 255.0 + 1e-6)
      fail_msg("%s: max |diff| %.2f/255 > %d/255", cases[i].file, max_diff * 255, cases[i].bound);
    /* the kind says how it must have been decoded */
    int scaled = info.scale_num != info.scale_denom;
    if (scaled != (k == 2)) fail_msg("%s: decoded at %d/%d, expected kind %s", cases[i].file, info.scale_num, info.scale_denom, cases[i].kind);
    assert_int_equal(info.format, k == 0 ? HANDLER_IMAGE_PNG : HANDLER_IMAGE_JPEG);
    /* the SIMD passes give the plain C passes' bytes */
    if (handler_image_crop(plain_ctx, b.data, b.size, plain_rgb, NULL, &st) != INFERD_OK) fail_msg("%s", st.message);
    if (memcmp(rgb, plain_rgb, HANDLER_IMAGE_CROP_BYTES) != 0) fail_msg("%s: SIMD and plain C resampling differ", cases[i].file);

    /* the whole preprocess equals crop + normalize, and where the crop is bit-equal
     * to torchvision's, so is the normalized tensor */
    if (handler_image_preprocess(ctx, b.data, b.size, tensor, NULL, &st) != INFERD_OK) fail_msg("%s", st.message);
    float *again = expected;
    handler_image_normalize(rgb, again);
    assert_memory_equal(tensor, again, sizeof(float) * HANDLER_IMAGE_TENSOR_FLOATS);
    if (differ == 0) {
      const float *want = norm.data; /* torchvision's Normalize (tests/fixtures/make_preprocess_ref.py) */
      for (int j = 0; j < HANDLER_IMAGE_TENSOR_FLOATS; j++)
        if (tensor[j] != want[j]) fail_msg("%s: normalized [%d] = %.9g, torchvision %.9g", cases[i].file, j, tensor[j], want[j]);
    }
    core_npy_free(&ref);
    core_npy_free(&norm);
    free(b.data);
  }
  for (int k = 0; k < 3; k++) print_message("parity max |diff| %-11s = %.0f/255\n", kinds[k], kind_max[k] * 255);
  free(rgb);
  free(plain_rgb);
  free(tensor);
  free(expected);
  handler_image_ctx_free(ctx);
  handler_image_ctx_free(plain_ctx);
}

/* The default: the big JPEGs decoded at full size, bit-equal to PIL (giant.jpg, 96
 * megapixels, a strip of rows at a time) */
static void test_exact_jpeg(void **state) {
  (void)state;
  handler_image_ctx *ctx = handler_image_ctx_new(NULL);
  assert_non_null(ctx);
  uint8_t *rgb = malloc(HANDLER_IMAGE_CROP_BYTES);
  const char *files[] = {"large.jpg", "huge.jpg", "mosaic.jpg", "giant.jpg"};
  for (size_t i = 0; i < CORE_ARRAY_LEN(files); i++) {
    blob b = read_file(files[i]);
    core_npy ref;
    read_ref(files[i], "ref", &ref);
    handler_image_info info;
    inferd_status st = {0};
    if (handler_image_crop(ctx, b.data, b.size, rgb, &info, &st) != INFERD_OK) fail_msg("%s", st.message);
    assert_int_equal(info.scale_num, info.scale_denom);
    const float *x = ref.data;
    for (int c = 0; c < 3; c++)
      for (int p = 0; p < PLANE; p++)
        if (fabs(rgb[3 * p + c] / 255.0 - x[c * PLANE + p]) > 1e-7)
          fail_msg("%s exact: [%d,%d] = %d/255, torchvision %.1f/255", files[i], c, p, rgb[3 * p + c], x[c * PLANE + p] * 255);
    core_npy_free(&ref);
    free(b.data);
  }
  free(rgb);
  handler_image_ctx_free(ctx);
}

/* Padding between the last scan and the end-of-image marker (some encoders write it;
 * PIL decodes it): the same pixels as without it. With lost data before it, refused. */
static void test_jpeg_eoi_padding(void **state) {
  (void)state;
  handler_image_ctx *ctx = handler_image_ctx_new(NULL);
  assert_non_null(ctx);
  blob b = read_file("chelsea.jpg");
  assert_true(b.size > 1000 && b.data[b.size - 2] == 0xFF && b.data[b.size - 1] == 0xD9);
  uint8_t *want = malloc(HANDLER_IMAGE_CROP_BYTES), *got = malloc(HANDLER_IMAGE_CROP_BYTES);
  uint8_t *padded = malloc(b.size + 64);
  inferd_status st = {0};
  if (handler_image_crop(ctx, b.data, b.size, want, NULL, &st) != INFERD_OK) fail_msg("%s", st.message);
  for (size_t pad = 1; pad <= 16; pad *= 4) {
    memcpy(padded, b.data, b.size - 2);
    memset(padded + b.size - 2, 0, pad);
    padded[b.size - 2 + pad] = 0xFF;
    padded[b.size - 1 + pad] = 0xD9;
    if (handler_image_crop(ctx, padded, b.size + pad, got, NULL, &st) != INFERD_OK)
      fail_msg("%zu bytes of padding: %s", pad, st.message);
    assert_memory_equal(got, want, HANDLER_IMAGE_CROP_BYTES);
  }
  /* padding, the end marker, then bytes after it (never read, by PIL either) */
  memcpy(padded, b.data, b.size - 2);
  memset(padded + b.size - 2, 0, 8);
  memcpy(padded + b.size + 6, "\xff\xd9trailing", 10);
  if (handler_image_crop(ctx, padded, b.size + 16, got, NULL, &st) != INFERD_OK)
    fail_msg("padding, end marker, trailing bytes: %s", st.message);
  assert_memory_equal(got, want, HANDLER_IMAGE_CROP_BYTES);
  /* more padding than that, or padding that is not zeros, looks like what damaged
   * data ends in (see the damaged JPEG of test_errors): refused */
  for (int k = 0; k < 2; k++) {
    size_t pad = k ? 4 : 64;
    memcpy(padded, b.data, b.size - 2);
    memset(padded + b.size - 2, k ? 0x5a : 0, pad);
    padded[b.size - 2 + pad] = 0xFF;
    padded[b.size - 1 + pad] = 0xD9;
    assert_int_equal(handler_image_crop(ctx, padded, b.size + pad, got, NULL, &st), INFERD_INVALID_ARG);
    assert_non_null(strstr(st.message, "extraneous bytes"));
  }
  /* the scan cut short, then padding: the decoder's first warning is about lost data */
  size_t cut = b.size / 2;
  memcpy(padded, b.data, cut);
  memset(padded + cut, 0, 4);
  padded[cut + 4] = 0xFF;
  padded[cut + 5] = 0xD9;
  assert_int_equal(handler_image_crop(ctx, padded, cut + 6, got, NULL, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "image: "));
  /* and the context decodes the next good image as before */
  if (handler_image_crop(ctx, b.data, b.size, got, NULL, &st) != INFERD_OK) fail_msg("%s", st.message);
  assert_memory_equal(got, want, HANDLER_IMAGE_CROP_BYTES);
  free(padded);
  free(want);
  free(got);
  free(b.data);
  handler_image_ctx_free(ctx);
}

/* ==== top-5 of the real model ============================================================== */

static void top5(const float *logits, int n, int *out) {
  handler_class top[5];
  assert_int_equal(handler_classify_topk(logits, n, 5, top), 5);
  for (int i = 0; i < 5; i++) out[i] = top[i].index;
}

static void test_model_top5(void **state) {
  (void)state;
  image_case cases[MAX_CASES];
  int n = read_cases(cases);
  inferd_status st = {0};
  inferd_model *model = NULL;
  if (inferd_model_load(model_path, NULL, &model, &st) != INFERD_OK) fail_msg("%s", st.message);
  inferd_session_params sp = {.threads = 2};
  inferd_session *session = NULL;
  if (inferd_session_new(model, &sp, &session, &st) != INFERD_OK) fail_msg("%s", st.message);
  handler_labels *labels = NULL;
  char labels_path[1024];
  snprintf(labels_path, sizeof labels_path, "%s/index_to_name.json", INFERD_SOURCE_DIR "/models");
  handler_labels_load(labels_path, &labels, NULL); /* names only make the log readable */

  /* one batch: [inferd's tensor, torchvision's tensor] per image, preprocessed straight
   * into its slot (big JPEGs DCT-scaled: the default, exact decoding, is bit-equal) */
  handler_image_params scaled = {.scaled_jpeg = 1};
  handler_image_ctx *ctx = handler_image_ctx_new(&scaled);
  float *batch = malloc(sizeof(float) * HANDLER_IMAGE_TENSOR_FLOATS * 2 * n);
  float *ref = malloc(sizeof(float) * HANDLER_IMAGE_TENSOR_FLOATS);
  for (int i = 0; i < n; i++) {
    blob b = read_file(cases[i].file);
    if (handler_image_preprocess(ctx, b.data, b.size, batch + (size_t)(2 * i) * HANDLER_IMAGE_TENSOR_FLOATS, NULL, &st) != INFERD_OK)
      fail_msg("%s: %s", cases[i].file, st.message);
    core_npy npy;
    read_ref(cases[i].file, "norm", &npy);
    memcpy(batch + (size_t)(2 * i + 1) * HANDLER_IMAGE_TENSOR_FLOATS, npy.data, sizeof(float) * HANDLER_IMAGE_TENSOR_FLOATS);
    core_npy_free(&npy);
    free(b.data);
  }
  int rank;
  int64_t dims[INFERD_MAX_RANK];
  if (inferd_session_output_shape(session, 2 * n, 0, &rank, dims, &st) != INFERD_OK) fail_msg("%s", st.message);
  assert_int_equal(rank, 2);
  int classes = (int)dims[1];
  float *logits = malloc(sizeof(float) * 2 * n * classes);
  const float *inputs[1] = {batch};
  float *outputs[1] = {logits};
  if (inferd_session_run(session, 2 * n, inputs, outputs, &st) != INFERD_OK) fail_msg("%s", st.message);

  int order_differs = 0, near_ties = 0;
  for (int i = 0; i < n; i++) {
    const float *ours_logits = logits + (size_t)(2 * i) * classes, *ref_logits = ours_logits + classes;
    int ours[5], theirs[5];
    top5(ours_logits, classes, ours);
    top5(ref_logits, classes, theirs);
    const char *name = handler_labels_name(labels, ours[0]);
    print_message("top-5 %-13s %d %d %d %d %d (torchvision %d %d %d %d %d) top-1 %s\n", cases[i].file, ours[0], ours[1],
                  ours[2], ours[3], ours[4], theirs[0], theirs[1], theirs[2], theirs[3], theirs[4], name ? name : "?");
    if (ours[0] != theirs[0]) fail_msg("%s: top-1 %d, torchvision's %d", cases[i].file, ours[0], theirs[0]);
    for (int a = 0; a < 5; a++) {
      int found = 0;
      for (int b = 0; b < 5; b++) found |= ours[a] == theirs[b];
      order_differs |= ours[a] != theirs[a];
      if (found) continue;
      /* Only the mosaic, whose pixels may differ by up to 4/255 at its tile edges, may
       * swap a class across the rank-5 boundary, and only for a near tie. */
      float gap = ref_logits[theirs[4]] - ref_logits[ours[a]];
      if (cases[i].bound <= 2 || gap > 0.05f)
        fail_msg("%s: class %d is in inferd's top 5, not in torchvision's (its logit %.4f, torchvision's 5th %.4f)",
                 cases[i].file, ours[a], ref_logits[ours[a]], ref_logits[theirs[4]]);
      print_message("top-5 %-13s class %d in place of %d: a near tie at rank 5 (logits %.4f and %.4f)\n",
                    cases[i].file, ours[a], theirs[4], ref_logits[ours[a]], ref_logits[theirs[4]]);
      near_ties++;
    }
  }
  print_message("top-5: the same classes for all %d images%s%s\n", n, near_ties ? " but a near tie in the mosaic" : "",
                order_differs ? " (order differs somewhere)" : ", in the same order");
  free(logits);
  free(batch);
  free(ref);
  handler_image_ctx_free(ctx);
  handler_labels_free(labels);
  inferd_session_free(session);
  inferd_model_free(model);
}

/* ==== error paths ========================================================================= */

/* Refused with `code`: INVALID_ARG for a bad image, UNSUPPORTED for a valid one of a kind
 * inferd does not decode (both answer 400). */
static void expect_refused_with(handler_image_ctx *ctx, const void *data, size_t size, inferd_code code,
                                const char *what, const char *needle) {
  uint8_t rgb[HANDLER_IMAGE_CROP_BYTES];
  inferd_status st = {0};
  inferd_code rc = handler_image_crop(ctx, data, size, rgb, NULL, &st);
  print_message("refused %-26s -> %s: %s\n", what, inferd_code_name(rc), st.message);
  if (rc != code)
    fail_msg("%s: got %s (%s), expected %s", what, inferd_code_name(rc), st.message, inferd_code_name(code));
  if (st.code != rc || strncmp(st.message, "image: ", 7) != 0 || strchr(st.message, '\n'))
    fail_msg("%s: message '%s' is not one line starting 'image: '", what, st.message);
  if (needle && !strstr(st.message, needle)) fail_msg("%s: message '%s' does not mention '%s'", what, st.message, needle);
}

static void expect_refused(handler_image_ctx *ctx, const void *data, size_t size, const char *what,
                           const char *needle) {
  expect_refused_with(ctx, data, size, INFERD_INVALID_ARG, what, needle);
}

static uint32_t crc32_png(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

static void put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* offset of the first chunk of type `type` in a PNG (its length field) */
static size_t png_chunk(const blob *b, const char *type) {
  size_t at = 8;
  while (at + 12 <= b->size) {
    uint32_t len = (uint32_t)b->data[at] << 24 | (uint32_t)b->data[at + 1] << 16 | (uint32_t)b->data[at + 2] << 8 | b->data[at + 3];
    if (memcmp(b->data + at + 4, type, 4) == 0) return at;
    at += 12 + len;
  }
  fail_msg("no %s chunk", type);
  return 0;
}

static void test_errors(void **state) {
  (void)state;
  handler_image_ctx *ctx = handler_image_ctx_new(NULL);
  assert_non_null(ctx);
  blob jpg = read_file("chelsea.jpg"), png = read_file("chelsea.png");

  expect_refused(ctx, NULL, 0, "empty body", "empty");
  expect_refused(ctx, jpg.data, 0, "zero bytes", "empty");
  expect_refused(ctx, jpg.data, 2, "two bytes of a JPEG", "not a JPEG or PNG");
  expect_refused(ctx, jpg.data, jpg.size / 2, "truncated JPEG", "JPEG");
  expect_refused(ctx, jpg.data, 400, "JPEG cut in its header", "JPEG");
  expect_refused(ctx, png.data, png.size / 2, "truncated PNG", "PNG");
  expect_refused(ctx, png.data, 30, "PNG cut in IHDR", "PNG");

  uint8_t noise[4096];
  uint64_t s = 42;
  for (size_t i = 0; i < sizeof noise; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    noise[i] = (uint8_t)(s >> 56);
  }
  expect_refused(ctx, noise, sizeof noise, "random bytes", "not a JPEG or PNG");
  const char html[] = "<html><body>not an image</body></html>";
  expect_refused(ctx, html, sizeof html - 1, "HTML", "3c 68 74 6d");
  noise[0] = 0xFF, noise[1] = 0xD8, noise[2] = 0xFF;
  expect_refused(ctx, noise, sizeof noise, "JPEG magic + random bytes", "JPEG");
  static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  memcpy(noise, png_magic, 8);
  expect_refused(ctx, noise, sizeof noise, "PNG magic + random bytes", "PNG");

  /* PNG CRCs: a wrong IHDR CRC, and a flipped byte inside IDAT */
  blob bad = {malloc(png.size), png.size};
  memcpy(bad.data, png.data, png.size);
  size_t ihdr = png_chunk(&bad, "IHDR");
  bad.data[ihdr + 8 + 13] ^= 0x55;
  expect_refused(ctx, bad.data, bad.size, "PNG with a bad IHDR CRC", "PNG");
  memcpy(bad.data, png.data, png.size);
  size_t idat = png_chunk(&bad, "IDAT");
  bad.data[idat + 8 + 100] ^= 0x01;
  expect_refused(ctx, bad.data, bad.size, "PNG with a bad IDAT CRC", "PNG");
  /* a 14000x14000 PNG header (valid CRC): refused before anything is decoded; so is
   * a 9000x9000 interlaced one (decoded whole, it would take 243 MB) */
  memcpy(bad.data, png.data, png.size);
  put_be32(bad.data + ihdr + 8, 14000);
  put_be32(bad.data + ihdr + 12, 14000);
  put_be32(bad.data + ihdr + 8 + 13, crc32_png(bad.data + ihdr + 4, 17));
  expect_refused(ctx, bad.data, bad.size, "196-megapixel PNG header", "196.0 megapixels), more than the 178956970");
  put_be32(bad.data + ihdr + 8, 9000);
  put_be32(bad.data + ihdr + 12, 9000);
  bad.data[ihdr + 8 + 12] = 1; /* Adam7 */
  put_be32(bad.data + ihdr + 8 + 13, crc32_png(bad.data + ihdr + 4, 17));
  expect_refused(ctx, bad.data, bad.size, "81-megapixel interlaced PNG header", "interlaced PNG of 81.0 megapixels");
  memcpy(bad.data, png.data, png.size);
  put_be32(bad.data + ihdr + 8, 70000);
  put_be32(bad.data + ihdr + 12, 10);
  put_be32(bad.data + ihdr + 8 + 13, crc32_png(bad.data + ihdr + 4, 17));
  expect_refused(ctx, bad.data, bad.size, "70000-pixel-wide PNG", "side longer");
  free(bad.data);

  /* JPEG: damaged entropy-coded data (libjpeg only warns; inferd refuses), and a frame
   * header claiming 14000x14000 */
  bad = (blob){malloc(jpg.size), jpg.size};
  memcpy(bad.data, jpg.data, jpg.size);
  for (size_t i = jpg.size / 2; i < jpg.size / 2 + 64; i++) bad.data[i] = (uint8_t)(bad.data[i] * 7 + 13);
  expect_refused(ctx, bad.data, bad.size, "JPEG with damaged data", "corrupt JPEG data");
  memcpy(bad.data, jpg.data, jpg.size);
  size_t sof = 2;
  while (sof + 4 < bad.size && !(bad.data[sof] == 0xFF && (bad.data[sof + 1] == 0xC0 || bad.data[sof + 1] == 0xC2)))
    sof += 2 + ((size_t)bad.data[sof + 2] << 8 | bad.data[sof + 3]);
  assert_true(sof + 9 < bad.size);
  bad.data[sof + 5] = 14000 >> 8, bad.data[sof + 6] = 14000 & 0xFF; /* height */
  bad.data[sof + 7] = 14000 >> 8, bad.data[sof + 8] = 14000 & 0xFF; /* width */
  expect_refused(ctx, bad.data, bad.size, "196-megapixel JPEG header", "196.0 megapixels");
  /* valid JPEGs that libjpeg (8-bit, as PIL's) does not decode: UNSUPPORTED, saying so,
   * not "corrupt" (a 12-bit frame, a lossless SOF3 one, a height left to a DNL marker) */
  memcpy(bad.data, jpg.data, jpg.size);
  bad.data[sof + 4] = 12;
  expect_refused_with(ctx, bad.data, bad.size, INFERD_UNSUPPORTED, "12-bit JPEG", "precision 12");
  expect_refused_with(ctx, bad.data, bad.size, INFERD_UNSUPPORTED, "12-bit JPEG", "of a kind inferd does not decode");
  memcpy(bad.data, jpg.data, jpg.size);
  bad.data[sof + 1] = 0xC3;
  expect_refused_with(ctx, bad.data, bad.size, INFERD_UNSUPPORTED, "lossless JPEG", "of a kind inferd does not decode");
  memcpy(bad.data, jpg.data, jpg.size);
  bad.data[sof + 5] = bad.data[sof + 6] = 0;
  expect_refused_with(ctx, bad.data, bad.size, INFERD_UNSUPPORTED, "JPEG of height 0 (DNL)", "DNL");
  free(bad.data);

  /* damage after a harmless warning: sos_zero.jpg warns at its first scan header, and
   * that warning must not hide the damaged data after it */
  blob sos = read_file("sos_zero.jpg");
  for (size_t i = sos.size / 2; i < sos.size / 2 + 64; i++) sos.data[i] = (uint8_t)(sos.data[i] * 7 + 13);
  expect_refused(ctx, sos.data, sos.size, "sos_zero.jpg with damaged data", "corrupt JPEG data");
  free(sos.data);

  /* a progressive JPEG whose coefficient buffers would pass the budget is refused
   * before decoding (a small progressive one is a parity case and classifies) */
  blob big = read_file("progressive_big.jpg");
  expect_refused(ctx, big.data, big.size, "4000x3000 progressive JPEG", "progressive JPEG 4000x3000 would need 69 MiB");
  free(big.data);

  /* a good JPEG right after a damaged one (libjpeg-turbo keeps warnings in its handle) */
  bad = (blob){malloc(jpg.size), jpg.size};
  memcpy(bad.data, jpg.data, jpg.size);
  for (size_t i = jpg.size / 2; i < jpg.size / 2 + 64; i++) bad.data[i] = (uint8_t)(bad.data[i] * 7 + 13);
  expect_refused(ctx, bad.data, bad.size, "JPEG with damaged data", "corrupt JPEG data");
  uint8_t rgb[HANDLER_IMAGE_CROP_BYTES];
  inferd_status st = {0};
  if (handler_image_crop(ctx, jpg.data, jpg.size, rgb, NULL, &st) != INFERD_OK)
    fail_msg("a good JPEG after a damaged one: %s", st.message);
  free(bad.data);

  /* the context still gives torchvision's answer after all that */
  core_npy ref;
  read_ref("chelsea.png", "ref", &ref);
  assert_int_equal(handler_image_crop(ctx, png.data, png.size, rgb, NULL, &st), INFERD_OK);
  const float *x = ref.data;
  for (int c = 0; c < 3; c++)
    for (int p = 0; p < PLANE; p++)
      if (fabs(rgb[3 * p + c] / 255.0 - x[c * PLANE + p]) > 1e-7) fail_msg("chelsea.png after errors differs at [%d,%d]", c, p);
  core_npy_free(&ref);
  free(jpg.data);
  free(png.data);
  handler_image_ctx_free(ctx);
}

/* `jpeg` without its marker segments of type `marker` (0xC4 DHT, 0xDB DQT) before the
 * first scan: the whole file after the SOS is kept. */
static blob jpeg_without(const blob *jpeg, uint8_t marker) {
  blob out = {malloc(jpeg->size), 2};
  assert_non_null(out.data);
  memcpy(out.data, jpeg->data, 2);
  size_t at = 2;
  while (at + 4 <= jpeg->size && jpeg->data[at] == 0xFF && jpeg->data[at + 1] != 0xDA) {
    size_t len = 2 + ((size_t)jpeg->data[at + 2] << 8 | jpeg->data[at + 3]);
    assert_true(at + len <= jpeg->size);
    if (jpeg->data[at + 1] != marker) memcpy(out.data + out.size, jpeg->data + at, len), out.size += len;
    at += len;
  }
  assert_true(at + 4 <= jpeg->size && jpeg->data[at + 1] == 0xDA);
  memcpy(out.data + out.size, jpeg->data + at, jpeg->size - at);
  out.size += jpeg->size - at;
  assert_true(out.size < jpeg->size);
  return out;
}

/* libjpeg keeps a decompressor's Huffman and quantization tables from one image to the
 * next, so a context must not let one upload's tables decode the next: a JPEG with no
 * DHT (a Motion-JPEG frame: libjpeg's default tables, which chelsea.jpg uses) decodes
 * as chelsea.jpg even after progressive.jpg (optimized tables), and a JPEG with no DQT
 * is refused (as by PIL) even after a JPEG that had them. */
static void test_jpeg_tables_not_kept(void **state) {
  (void)state;
  handler_image_ctx *ctx = handler_image_ctx_new(NULL);
  assert_non_null(ctx);
  blob jpg = read_file("chelsea.jpg"), progressive = read_file("progressive.jpg");
  blob no_dht = jpeg_without(&jpg, 0xC4), no_dqt = jpeg_without(&jpg, 0xDB);
  uint8_t *want = malloc(HANDLER_IMAGE_CROP_BYTES), *got = malloc(HANDLER_IMAGE_CROP_BYTES);
  inferd_status st = {0};
  if (handler_image_crop(ctx, jpg.data, jpg.size, want, NULL, &st) != INFERD_OK) fail_msg("%s", st.message);
  if (handler_image_crop(ctx, progressive.data, progressive.size, got, NULL, &st) != INFERD_OK)
    fail_msg("%s", st.message);
  inferd_code rc = handler_image_crop(ctx, no_dht.data, no_dht.size, got, NULL, &st);
  if (rc != INFERD_OK) fail_msg("chelsea.jpg without DHT after progressive.jpg: %s", st.message);
  assert_memory_equal(got, want, HANDLER_IMAGE_CROP_BYTES);
  for (int after_good = 0; after_good < 2; after_good++) {
    if (after_good && handler_image_crop(ctx, jpg.data, jpg.size, got, NULL, &st) != INFERD_OK)
      fail_msg("%s", st.message);
    expect_refused(ctx, no_dqt.data, no_dqt.size, after_good ? "no DQT, after chelsea.jpg" : "no DQT",
                   "Quantization table 0x00 was not defined");
  }
  free(want);
  free(got);
  free(no_dht.data);
  free(no_dqt.data);
  free(progressive.data);
  free(jpg.data);
  handler_image_ctx_free(ctx);
}

/* ==== postprocessing ======================================================================= */

/* `json` with every number outside strings replaced by '#' (to compare layouts). */
static void mask_numbers(const char *json, char *out) {
  int in_string = 0;
  for (const char *p = json; *p;) {
    if (in_string) {
      if (*p == '\\' && p[1]) *out++ = *p++;
      else if (*p == '"') in_string = 0;
      *out++ = *p++;
    } else if (*p == '"') {
      in_string = 1;
      *out++ = *p++;
    } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
      *out++ = '#';
      while (*p && strchr("+-.0123456789eE", *p)) p++;
    } else {
      *out++ = *p++;
    }
  }
  *out = 0;
}

/* The number text after the key at position `i` of a flat {"k": number, ...} object. */
static void number_text(const char *json, int i, char *out, size_t size) {
  const char *p = json;
  for (int k = 0; k <= i; k++) {
    p = strstr(p, "\": ");
    assert_non_null(p);
    p += 3;
  }
  size_t n = strcspn(p, ",\n}");
  assert_true(n < size);
  memcpy(out, p, n);
  out[n] = 0;
}

static void compare_answer(const char *case_name, const char *got, const char *expected) {
  char mg[4096], me[4096];
  assert_true(strlen(got) < sizeof mg && strlen(expected) < sizeof me);
  mask_numbers(got, mg);
  mask_numbers(expected, me);
  if (strcmp(mg, me) != 0) fail_msg("%s: layout or keys differ:\n--- inferd\n%s\n--- TorchServe\n%s", case_name, got, expected);
  json_error_t error;
  json_t *g = json_loads(got, 0, &error), *e = json_loads(expected, 0, &error);
  if (!g) fail_msg("%s: inferd's answer is not JSON (%s):\n%s", case_name, error.text, got);
  assert_non_null(e);
  assert_int_equal(json_object_size(g), json_object_size(e));
  int i = 0;
  const char *key;
  json_t *value;
  json_object_foreach(e, key, value) {
    double want = json_real_value(value), have = json_real_value(json_object_get(g, key));
    if (fabs(have - want) > 1e-6 * want + 1e-12) fail_msg("%s: '%s' = %.17g, TorchServe %.17g", case_name, key, have, want);
    char th[64], te[64];
    number_text(got, i, th, sizeof th);
    number_text(expected, i, te, sizeof te);
    if ((float)have == (float)want && strcmp(th, te) != 0)
      fail_msg("%s: '%s' is the same float32, printed %s, TorchServe prints %s", case_name, key, th, te);
    i++;
  }
  json_decref(g);
  json_decref(e);
}

static void test_classify_torchserve(void **state) {
  (void)state;
  core_npy logits;
  read_npy("classify.logits.npy", &logits, 1000);
  blob list = read_file("classify.txt");
  char *save = NULL;
  int cases = 0;
  for (char *line = strtok_r((char *)list.data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char labels_file[256], expected_file[256];
    assert_int_equal(sscanf(line, "%255s %255s", labels_file, expected_file), 2);
    handler_labels *labels = NULL;
    inferd_status st = {0};
    if (strcmp(labels_file, "-") != 0) {
      char path[1024];
      snprintf(path, sizeof path, "%s/%s", fixtures, labels_file);
      if (handler_labels_load(path, &labels, &st) != INFERD_OK) fail_msg("%s", st.message);
    }
    blob expected = read_file(expected_file);
    size_t size = handler_classify_json_size(labels, HANDLER_TOPK);
    char *buf = malloc(size);
    size_t length = 0;
    if (handler_classify_json(logits.data, 1000, HANDLER_TOPK, labels, buf, size, &length, &st) != INFERD_OK)
      fail_msg("%s: %s", labels_file, st.message);
    assert_int_equal(length, strlen(buf));
    print_message("classify %-34s ok (%zu bytes)\n", labels_file, length);
    compare_answer(labels_file, buf, (const char *)expected.data);
    /* one byte short: TOO_LARGE, never a cut answer */
    assert_int_equal(handler_classify_json(logits.data, 1000, HANDLER_TOPK, labels, buf, length, NULL, &st), INFERD_TOO_LARGE);
    assert_string_equal(buf, "");
    free(buf);
    free(expected.data);
    handler_labels_free(labels);
    cases++;
  }
  assert_true(cases >= 6);
  free(list.data);
  core_npy_free(&logits);
}

static void test_classify_edges(void **state) {
  (void)state;
  char buf[512];
  inferd_status st = {0};
  /* fewer classes than k; equal logits keep index order; index names */
  const float three[3] = {0.0f, 1.0f, 0.0f};
  assert_int_equal(handler_classify_json(three, 3, 5, NULL, buf, sizeof buf, NULL, &st), INFERD_OK);
  char expected[256];
  double e = exp(1.0), sum = e + 2.0;
  json_t *j = json_loads(buf, 0, NULL);
  assert_non_null(j);
  assert_int_equal(json_object_size(j), 3);
  assert_true(fabs(json_real_value(json_object_get(j, "1")) - e / sum) < 1e-7);
  assert_true(fabs(json_real_value(json_object_get(j, "0")) - 1.0 / sum) < 1e-7);
  json_decref(j);
  snprintf(expected, sizeof expected, "{\n  \"1\": ");
  assert_memory_equal(buf, expected, strlen(expected));
  const char *second = strstr(buf, ",\n  \"0\": ");
  const char *third = strstr(buf, ",\n  \"2\": ");
  assert_non_null(second);
  assert_non_null(third);
  assert_true(second < third);
  /* one class: probability exactly 1, printed as Python prints 1.0 */
  const float one[1] = {3.0f};
  assert_int_equal(handler_classify_json(one, 1, 5, NULL, buf, sizeof buf, NULL, &st), INFERD_OK);
  assert_string_equal(buf, "{\n  \"0\": 1.0\n}");
  /* no classes: {} */
  assert_int_equal(handler_classify_json(one, 0, 5, NULL, buf, sizeof buf, NULL, &st), INFERD_OK);
  assert_string_equal(buf, "{}");
  /* a tiny probability in Python's exponent form */
  const float tiny[2] = {0.0f, -20.0f};
  assert_int_equal(handler_classify_json(tiny, 2, 5, NULL, buf, sizeof buf, NULL, &st), INFERD_OK);
  assert_string_equal(buf, "{\n  \"0\": 1.0,\n  \"1\": 2.06115369216775e-09\n}"); /* repr of the float32 as a double */
  /* a tie at rank k: the lower index is kept, as among the top k */
  const float tie[4] = {0.0f, 2.0f, 1.0f, 1.0f};
  handler_class top[2];
  assert_int_equal(handler_classify_topk(tie, 4, 2, top), 2);
  assert_int_equal(top[0].index, 1);
  assert_int_equal(top[1].index, 2);
  /* NaN from the model: INTERNAL, not invalid JSON */
  const float bad[3] = {0.0f, NAN, 1.0f};
  assert_int_equal(handler_classify_json(bad, 3, 5, NULL, buf, sizeof buf, NULL, &st), INFERD_INTERNAL);
  print_message("NaN logit -> %s: %s\n", inferd_code_name(st.code), st.message);
  const float inf[2] = {INFINITY, 1.0f};
  assert_int_equal(handler_classify_json(inf, 2, 5, NULL, buf, sizeof buf, NULL, &st), INFERD_INTERNAL);
  /* -inf is a masked class: probability 0 (torch.softmax([-inf, 1, 2]) = [0, 0.2689, 0.7311]),
   * unless every logit is -inf (torch: NaN) */
  const float masked[3] = {-INFINITY, 1.0f, 2.0f};
  assert_int_equal(handler_classify_json(masked, 3, 5, NULL, buf, sizeof buf, NULL, &st), INFERD_OK);
  assert_string_equal(buf, "{\n  \"2\": 0.7310585975646973,\n  \"1\": 0.2689414322376251,\n  \"0\": 0.0\n}");
  const float all_masked[2] = {-INFINITY, -INFINITY};
  assert_int_equal(handler_classify_json(all_masked, 2, 5, NULL, buf, sizeof buf, NULL, &st), INFERD_INTERNAL);
  /* the size bound holds for the longest label */
  handler_labels *labels = NULL;
  const char *json = "{\"0\": \"\\u0001\\u0001\\u0001\\u0001\\u0001\\u0001\\u0001\\u0001\", \"1\": [\"x\", \"\\ud834\\udd1e\\ud834\\udd1e\"]}";
  assert_int_equal(handler_labels_parse(json, strlen(json), NULL, &labels, &st), INFERD_OK);
  const float two[2] = {1.0f, 2.0f};
  size_t size = handler_classify_json_size(labels, 5);
  assert_true(size <= sizeof buf);
  assert_int_equal(handler_classify_json(two, 2, 5, labels, buf, size, NULL, &st), INFERD_OK);
  assert_string_equal(strstr(buf, "\"\\ud834"), "\"\\ud834\\udd1e\\ud834\\udd1e\": 0.7310585975646973,\n"
                                                 "  \"\\u0001\\u0001\\u0001\\u0001\\u0001\\u0001\\u0001\\u0001\": 0.2689414322376251\n}");
  handler_labels_free(labels);
}

static void expect_labels_refused(const char *json, inferd_code code, const char *needle) {
  handler_labels *labels = (handler_labels *)1;
  inferd_status st = {0};
  inferd_code rc = handler_labels_parse(json, strlen(json), "test.json", &labels, &st);
  print_message("labels %-40s -> %s: %s\n", json, inferd_code_name(rc), st.message);
  if (rc != code) fail_msg("%s: got %s, expected %s", json, inferd_code_name(rc), inferd_code_name(code));
  assert_null(labels);
  if (!strstr(st.message, needle)) fail_msg("'%s' does not mention '%s'", st.message, needle);
}

static void test_labels(void **state) {
  (void)state;
  expect_labels_refused("{\"0\": \"a\",}", INFERD_INVALID_ARG, "test.json: line 1");
  expect_labels_refused("[\"a\", \"b\"]", INFERD_INVALID_ARG, "expected an object");
  expect_labels_refused("{\"0\": 5}", INFERD_INVALID_ARG, "key '0'");
  expect_labels_refused("{\"0\": []}", INFERD_INVALID_ARG, "key '0'");
  expect_labels_refused("{\"0\": [\"n1\", 3]}", INFERD_INVALID_ARG, "key '0'");
  expect_labels_refused("{\"object_type_names\": [\"a\", 1]}", INFERD_INVALID_ARG, "object_type_names[1]");
  expect_labels_refused("", INFERD_INVALID_ARG, "test.json");

  handler_labels *labels = NULL;
  inferd_status st = {0};
  char path[1024];
  snprintf(path, sizeof path, "%s/no-such-index_to_name.json", fixtures);
  assert_int_equal(handler_labels_load(path, &labels, &st), INFERD_NOT_FOUND);
  assert_null(labels);
  print_message("labels missing file -> %s: %s\n", inferd_code_name(st.code), st.message);

  /* keys TorchServe never looks up are ignored; a repeated key keeps its last value */
  const char *json = "{\"007\": \"no\", \"-1\": \"no\", \"x\": \"no\", \"12\": \"twelve\", \"3\": [\"n3\", \"three\"],"
                     " \"99999999999\": \"no\", \"12\": \"twelve again\"}";
  assert_int_equal(handler_labels_parse(json, strlen(json), NULL, &labels, &st), INFERD_OK);
  assert_string_equal(handler_labels_name(labels, 12), "twelve again");
  assert_string_equal(handler_labels_name(labels, 3), "three");
  assert_null(handler_labels_name(labels, 7));
  assert_null(handler_labels_name(labels, -1));
  assert_null(handler_labels_name(labels, 0));
  assert_null(handler_labels_name(NULL, 3));
  handler_labels_free(labels);

  /* the largest class index a key may name is INT32_MAX */
  json = "{\"2147483647\": \"last\", \"2147483648\": \"no\"}";
  assert_int_equal(handler_labels_parse(json, strlen(json), NULL, &labels, &st), INFERD_OK);
  assert_string_equal(handler_labels_name(labels, INT32_MAX), "last");
  assert_null(handler_labels_name(labels, (int64_t)INT32_MAX + 1));
  handler_labels_free(labels);

  snprintf(path, sizeof path, "%s/models/index_to_name.json", INFERD_SOURCE_DIR);
  assert_int_equal(handler_labels_load(path, &labels, &st), INFERD_OK);
  assert_string_equal(handler_labels_name(labels, 285), "Egyptian cat");
  assert_null(handler_labels_name(labels, 1000));
  handler_labels_free(labels);
}

/* ==== memory: big PNGs are decoded row by row ============================================= */

enum { BIG_W = 7999, BIG_H = 8000 }; /* 192 MB as RGB; the review's all-zero bomb size */

/* Row y of the big test image: bands of 89 rows and 97 columns, blank (zero) in the
 * left third. Rows repeat within a band, so deflate packs the image into a few MB. */
static void big_row(uint8_t *row, int y) {
  for (int x = 0; x < BIG_W; x++) {
    int v = x < BIG_W / 3 ? 0 : ((x / 97) * 37 + (y / 89) * 53) & 0xFF;
    row[3 * x + 0] = (uint8_t)v;
    row[3 * x + 1] = (uint8_t)(255 - v);
    row[3 * x + 2] = (uint8_t)(v * 3);
  }
}

/* The big image as a PNG (fast deflate, no filtering): non-interlaced is encoded row
 * by row; interlaced needs the whole image in memory (libspng cannot encode Adam7
 * progressively), freed before returning. The PNG is malloc'd into *out. */
static void encode_big_png(int interlaced, blob *out) {
  spng_ctx *enc = spng_ctx_new(SPNG_CTX_ENCODER);
  assert_non_null(enc);
  spng_set_option(enc, SPNG_ENCODE_TO_BUFFER, 1);
  spng_set_option(enc, SPNG_FILTER_CHOICE, SPNG_DISABLE_FILTERING);
  spng_set_option(enc, SPNG_IMG_COMPRESSION_LEVEL, 1);
  struct spng_ihdr ihdr = {BIG_W, BIG_H, 8, SPNG_COLOR_TYPE_TRUECOLOR, 0, 0, (uint8_t)interlaced};
  assert_int_equal(spng_set_ihdr(enc, &ihdr), 0);
  size_t row_bytes = (size_t)BIG_W * 3;
  int err;
  if (interlaced) {
    uint8_t *image = malloc(row_bytes * BIG_H);
    assert_non_null(image);
    for (int y = 0; y < BIG_H; y++) big_row(image + row_bytes * y, y);
    err = spng_encode_image(enc, image, row_bytes * BIG_H, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    free(image);
  } else {
    uint8_t *row = malloc(row_bytes);
    assert_non_null(row);
    err = spng_encode_image(enc, NULL, 0, SPNG_FMT_PNG, SPNG_ENCODE_PROGRESSIVE | SPNG_ENCODE_FINALIZE);
    for (int y = 0; y < BIG_H && err == 0; y++) {
      big_row(row, y);
      err = spng_encode_row(enc, row, row_bytes);
    }
    if (err == SPNG_EOI) err = 0; /* the last row ends the image */
    free(row);
  }
  if (err) fail_msg("encoding the %dx%d PNG: %s", BIG_W, BIG_H, spng_strerror(err));
  int buffer_err = 0;
  out->data = spng_get_png_buffer(enc, &out->size, &buffer_err);
  assert_int_equal(buffer_err, 0);
  assert_non_null(out->data);
  spng_ctx_free(enc);
}

/* A field of /proc/self/status in kB ("VmRSS", "VmHWM"). */
static long status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0 && line[n] == ':') kb = atol(line + n + 1);
  fclose(f);
  return kb;
}

/* The crop of `image` in a fresh context, and how far the process's peak RSS rose above
 * its RSS before the call (kB): the peak is reset first (clear_refs 5, Linux 4.0+); when
 * that is not allowed, the old peak is the base, which can only understate the rise. */
static long crop_peak_growth(const blob *image, uint8_t *rgb, handler_image_info *info) {
  handler_image_ctx *ctx = handler_image_ctx_new(NULL);
  assert_non_null(ctx);
  long base = status_kb("VmRSS");
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f || fputs("5", f) < 0 || fclose(f) != 0) {
    if (f) fclose(f);
    print_message("cannot reset VmHWM; measuring from the old peak\n");
    base = status_kb("VmHWM");
  }
  inferd_status st = {0};
  if (handler_image_crop(ctx, image->data, image->size, rgb, info, &st) != INFERD_OK) fail_msg("%s", st.message);
  long growth = status_kb("VmHWM") - base;
  handler_image_ctx_free(ctx);
  return growth;
}

static void test_png_row_by_row(void **state) {
  (void)state;
  blob png, interlaced;
  encode_big_png(0, &png);
  uint8_t *rows_rgb = malloc(HANDLER_IMAGE_CROP_BYTES), *whole_rgb = malloc(HANDLER_IMAGE_CROP_BYTES);
  handler_image_info info;
  long growth = crop_peak_growth(&png, rows_rgb, &info);
  long pixels_kb = (long)BIG_W * BIG_H * 3 / 1024;
  print_message("%dx%d PNG (%zu bytes), row by row: peak RSS +%ld kB (the whole image is %ld kB)\n", BIG_W, BIG_H,
                png.size, growth, pixels_kb);
  assert_int_equal(info.width, BIG_W);
  if (growth < 0 || growth > pixels_kb / 4)
    fail_msg("peak RSS grew by %ld kB decoding the PNG; expected under %ld kB (a quarter of the image)", growth,
             pixels_kb / 4);

  /* the same picture interlaced is decoded whole: the crop must be the same bytes */
  encode_big_png(1, &interlaced);
  long whole_growth = crop_peak_growth(&interlaced, whole_rgb, NULL);
  print_message("the same PNG interlaced, decoded whole: peak RSS +%ld kB\n", whole_growth);
  for (int i = 0; i < HANDLER_IMAGE_CROP_BYTES; i++)
    if (rows_rgb[i] != whole_rgb[i])
      fail_msg("crop byte %d (row %d, column %d, channel %d): row by row %d, whole image %d", i,
               i / (HANDLER_IMAGE_CROP * 3), i / 3 % HANDLER_IMAGE_CROP, i % 3, rows_rgb[i], whole_rgb[i]);
  int distinct = 0; /* the crop is not blank: the comparison means something */
  for (int i = 1; i < HANDLER_IMAGE_CROP_BYTES; i++) distinct += rows_rgb[i] != rows_rgb[0];
  assert_true(distinct > HANDLER_IMAGE_CROP_BYTES / 2);
  free(rows_rgb);
  free(whole_rgb);
  free(png.data);
  free(interlaced.data);
}

/* giant.jpg (96 megapixels, 288 MB as RGB) is decoded a strip of rows at a time: the
 * peak RSS rises by less than a twentieth of its pixels (its bytes are test_exact_jpeg's) */
static void test_jpeg_row_by_row(void **state) {
  (void)state;
  blob jpg = read_file("giant.jpg");
  uint8_t *rgb = malloc(HANDLER_IMAGE_CROP_BYTES);
  handler_image_info info;
  long growth = crop_peak_growth(&jpg, rgb, &info);
  long pixels_kb = (long)info.width * info.height * 3 / 1024;
  print_message("%dx%d JPEG (%zu bytes), a strip at a time: peak RSS +%ld kB (the whole image is %ld kB)\n",
                info.width, info.height, jpg.size, growth, pixels_kb);
  assert_int_equal(info.width, 12000);
  assert_int_equal(info.decoded_width, 12000);
  if (growth < 0 || growth > pixels_kb / 20)
    fail_msg("peak RSS grew by %ld kB decoding the JPEG; expected under %ld kB (a twentieth of the image)", growth,
             pixels_kb / 20);
  free(rgb);
  free(jpg.data);
}

/* ==== time per image ======================================================================= */

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Milliseconds per image: the best and the median of the runs made in about a second
 * (at least 5). The best is what the code costs; the median shows the machine's load. */
static void ms_per_image(handler_image_ctx *ctx, const blob *b, float *tensor, double *best, double *median) {
  enum { MAX_RUNS = 200 };
  double times[MAX_RUNS];
  inferd_status st = {0};
  assert_int_equal(handler_image_preprocess(ctx, b->data, b->size, tensor, NULL, &st), INFERD_OK); /* warm */
  int runs = 0;
  double start = core_now_seconds();
  while (runs < MAX_RUNS && (runs < 5 || core_now_seconds() - start < 1.0)) {
    double t = core_now_seconds();
    assert_int_equal(handler_image_preprocess(ctx, b->data, b->size, tensor, NULL, &st), INFERD_OK);
    times[runs++] = (core_now_seconds() - t) * 1e3;
  }
  qsort(times, (size_t)runs, sizeof(double), by_value);
  *best = times[0];
  *median = times[runs / 2];
}

static void test_timing(void **state) {
  (void)state;
  handler_image_params scaled = {.scaled_jpeg = 1};
  handler_image_ctx *ctx = handler_image_ctx_new(&scaled);
  handler_image_ctx *exact_ctx = handler_image_ctx_new(NULL);
  float *tensor = malloc(sizeof(float) * HANDLER_IMAGE_TENSOR_FLOATS);
  const char *files[] = {"astronaut.jpg", "astronaut.png", "chelsea.jpg", "large.jpg", "huge.jpg"};
  for (size_t i = 0; i < CORE_ARRAY_LEN(files); i++) {
    blob b = read_file(files[i]);
    handler_image_info info;
    inferd_status st = {0};
    assert_int_equal(handler_image_preprocess(ctx, b.data, b.size, tensor, &info, &st), INFERD_OK);
    double best, median;
    ms_per_image(ctx, &b, tensor, &best, &median);
    print_message("time %-13s %4dx%-4d: %6.2f ms/image (median %6.2f)", files[i], info.width, info.height, best, median);
    if (info.scale_num != info.scale_denom) {
      double exact_best, exact_median;
      ms_per_image(exact_ctx, &b, tensor, &exact_best, &exact_median);
      print_message(" DCT-scaled %d/%d; decoded at full size %.2f ms (median %.2f)", info.scale_num, info.scale_denom,
                    exact_best, exact_median);
    }
    print_message("\n");
    free(b.data);
  }
  free(tensor);
  handler_image_ctx_free(ctx);
  handler_image_ctx_free(exact_ctx);
}

int main(void) {
  fixtures = getenv("INFERD_HANDLER_FIXTURES");
  if (!fixtures) fixtures = "fixtures/preprocess";
  model_path = getenv("INFERD_HANDLER_MODEL");
  if (!model_path) model_path = INFERD_SOURCE_DIR "/models/mobilenet_v2_imagenet.onnx";
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parity),
      cmocka_unit_test(test_exact_jpeg),
      cmocka_unit_test(test_jpeg_eoi_padding),
      cmocka_unit_test(test_model_top5),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_jpeg_tables_not_kept),
      cmocka_unit_test(test_classify_torchserve),
      cmocka_unit_test(test_classify_edges),
      cmocka_unit_test(test_labels),
      cmocka_unit_test(test_png_row_by_row),
      cmocka_unit_test(test_jpeg_row_by_row),
      cmocka_unit_test(test_timing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
