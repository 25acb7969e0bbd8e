/*
 * fuzz_image.c - libFuzzer target for the image_classifier preprocessing
 * (src/handler/handler_image.c): JPEG/PNG decoding, resizing, cropping, normalizing.
 *
 * Each input is an HTTP body as the server would hand it to handler_image_preprocess.
 * On success the result must be sane: a known format, dimensions within the limits,
 * the decoded size no larger than the stored one, Resize(256)'s shorter side 256, and
 * every one of the 3x224x224 floats one of the 256 values Normalize gives per channel
 * (so finite and in range). On failure the status must carry the code, INVALID_ARG
 * (UNSUPPORTED for a JPEG of a kind libjpeg does not decode, or NO_MEMORY) with a
 * one-line message starting "image: ". Anything else, or any
 * sanitizer report, aborts.
 *
 * PNG chunks carry CRCs, so nearly every mutation of a PNG would stop at the first
 * checksum. For half of the PNG inputs (bit 1 of the size) the harness therefore
 * rewrites every complete chunk's CRC before decoding, as libpng's fuzzers do, so that
 * mutated headers, palettes and compressed data reach the decoder; the other half
 * keeps the checksums as they are.
 *
 * Every input runs through two contexts, and both must give the same answer, bit for
 * bit: one with the defaults (SIMD resampling where the CPU has it, buffers kept), one
 * with plain C resampling that releases its buffers after every image (retain_bytes
 * 1). A third context DCT-scales big JPEGs (scaled_jpeg), whose bytes differ: it
 * gets the same sanity checks. Contexts are reused across inputs, as a server thread reuses its own across
 * requests: state left behind by a bad image must not change the next answer.
 *
 * Seeds: tests/fuzz/corpus/image/seed-*, small images (under 4 KB: libFuzzer's default
 * -max_len is the largest seed) made once from skimage's chelsea.png scaled to 24x16:
 * with PIL, baseline 4:2:0, 4:4:4, progressive, grayscale and CMYK JPEGs and RGB
 * (with its ICC profile), RGBA, LA, palette with tRNS, 1-bit and 16-bit grayscale
 * PNGs; with png_bytes() of tests/fixtures/make_preprocess_ref.py, an Adam7-interlaced
 * RGB PNG.
 *
 * Build: cmake -DINFERD_FUZZ=ON with clang (tests/fuzz/CMakeLists.txt).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler/handler.h"

static handler_image_ctx *contexts[3];
static float tensors[3][HANDLER_IMAGE_TENSOR_FLOATS];
static float values[3][256]; /* what Normalize can give, per channel */

static void fail(const char *what) {
  fprintf(stderr, "fuzz_image: %s\n", what);
  abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  handler_image_params plain = {.retain_bytes = 1, .plain_c = 1};
  contexts[0] = handler_image_ctx_new(NULL);
  contexts[1] = handler_image_ctx_new(&plain);
  handler_image_params scaled = {.scaled_jpeg = 1};
  contexts[2] = handler_image_ctx_new(&scaled);
  if (!contexts[0] || !contexts[1] || !contexts[2]) fail("no context");
  /* the normalized value of each byte, from a crop of one value */
  static uint8_t rgb[HANDLER_IMAGE_CROP_BYTES];
  static float tensor[HANDLER_IMAGE_TENSOR_FLOATS];
  for (int v = 0; v < 256; v++) {
    memset(rgb, v, sizeof rgb);
    handler_image_normalize(rgb, tensor);
    for (int c = 0; c < 3; c++) values[c][v] = tensor[c * HANDLER_IMAGE_CROP * HANDLER_IMAGE_CROP];
  }
  return 0;
}

static uint32_t crc32_png(const uint8_t *p, size_t n) {
  static uint32_t table[256];
  if (!table[1])
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
      table[i] = c;
    }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return ~c;
}

/* Rewrites the CRC of every chunk that lies wholly inside the PNG `p`. */
static void fix_png_crcs(uint8_t *p, size_t size) {
  size_t at = 8;
  while (at + 12 <= size) {
    uint32_t len = (uint32_t)p[at] << 24 | (uint32_t)p[at + 1] << 16 | (uint32_t)p[at + 2] << 8 | p[at + 3];
    if (len > size - at - 12) break;
    uint32_t crc = crc32_png(p + at + 4, 4 + (size_t)len);
    uint8_t *q = p + at + 8 + len;
    q[0] = (uint8_t)(crc >> 24), q[1] = (uint8_t)(crc >> 16), q[2] = (uint8_t)(crc >> 8), q[3] = (uint8_t)crc;
    at += 12 + (size_t)len;
  }
}

/* Whether x is Normalize's value of some byte: undo Normalize to find the byte, then
 * compare exactly (O(1): a search would cost more than the preprocessing under
 * libFuzzer's comparison hooks). */
static const float mean[3] = {0.485f, 0.456f, 0.406f}, stdev[3] = {0.229f, 0.224f, 0.225f};

static int all_normalized(const float *tensor) {
  int bad = 0;
  for (int c = 0; c < 3; c++)
    for (int p = 0; p < HANDLER_IMAGE_CROP * HANDLER_IMAGE_CROP; p++) {
      float x = tensor[c * HANDLER_IMAGE_CROP * HANDLER_IMAGE_CROP + p];
      float byte = (x * stdev[c] + mean[c]) * 255.0f + 0.5f; /* NaN stays NaN */
      int b = byte >= 0.0f && byte < 256.0f ? (int)byte : 0;
      bad |= values[c][b] != x;
    }
  return !bad;
}

/* Runs one context; returns its code after checking what it says. */
static inferd_code run(int which, const uint8_t *data, size_t size) {
  float *tensor = tensors[which];
  handler_image_info info;
  inferd_status st = {0};
  inferd_code rc = handler_image_preprocess(contexts[which], data, size, tensor, &info, &st);
  if (rc != INFERD_OK) {
    if (rc != INFERD_INVALID_ARG && rc != INFERD_UNSUPPORTED && rc != INFERD_NO_MEMORY)
      fail("refused with an unexpected code");
    if (st.code != rc || strncmp(st.message, "image: ", 7) != 0 || strchr(st.message, '\n'))
      fail("refusal without a one-line 'image: ' message");
    return rc;
  }
  if (info.format != HANDLER_IMAGE_JPEG && info.format != HANDLER_IMAGE_PNG) fail("accepted an unknown format");
  if (info.width <= 0 || info.height <= 0 || (int64_t)info.width * info.height > HANDLER_IMAGE_MAX_PIXELS)
    fail("accepted dimensions out of range");
  if (info.decoded_width <= 0 || info.decoded_width > info.width || info.decoded_height <= 0 ||
      info.decoded_height > info.height)
    fail("decoded size out of range");
  int64_t shorter = info.resized_width < info.resized_height ? info.resized_width : info.resized_height;
  if (shorter != HANDLER_IMAGE_RESIZE) fail("Resize(256) did not give a shorter side of 256");
  if (!all_normalized(tensor)) fail("a value Normalize cannot give");
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *copy = NULL;
  if ((size >> 1) & 1 && handler_image_detect(data, size) == HANDLER_IMAGE_PNG && (copy = malloc(size))) {
    memcpy(copy, data, size); /* an exact-size heap copy: ASan still sees overreads */
    fix_png_crcs(copy, size);
    data = copy;
  }
  inferd_code a = run(0, data, size), b = run(1, data, size);
  run(2, data, size); /* DCT-scaled big JPEGs: other bytes, the same checks */
  free(copy);
  if (a != b && a != INFERD_NO_MEMORY && b != INFERD_NO_MEMORY) fail("the two contexts disagree on the outcome");
  if (a == INFERD_OK && b == INFERD_OK && memcmp(tensors[0], tensors[1], sizeof tensors[0]) != 0)
    fail("SIMD and plain C preprocessing differ");
  return 0;
}
