/*
 * handler_image.c - image_classifier preprocessing: JPEG/PNG bytes -> RGB -> Resize(256)
 * -> CenterCrop(224) -> ToTensor -> Normalize, into one [3,224,224] slot of a batch.
 *
 * DESIGN
 * The answer must be the one TorchServe gives, so every step copies what PIL and
 * torchvision do, down to the integer arithmetic:
 *
 *  1. Decode. The format is told by its magic bytes. JPEG: libjpeg-turbo, the library
 *     PIL links too, with PIL's settings (handler_jpeg.c). PNG: libspng to RGB8, any colour type and bit
 *     depth: alpha and tRNS are dropped as convert("RGB") drops them, 16-bit samples keep
 *     their high byte as PIL's unpackers do. (PIL opens 16-bit grayscale as mode "I" and
 *     clips it to 255 in convert("RGB"), a nearly white picture; inferd keeps the high
 *     byte there too.) No gamma or ICC handling, as in PIL.
 *  2. Resize(256) with PIL's BILINEAR filter (ImagingResample in Pillow's Resample.c):
 *     a triangle whose support grows with the downscale factor (antialiasing),
 *     coefficients computed in double, normalized, rounded to 22-bit fixed point;
 *     two separable passes on 8-bit pixels, horizontal first, each rounding to 8 bits.
 *     The output size is torchvision's: shorter side 256, longer side
 *     int(256 * long / short).
 *  3. CenterCrop(224) at torchvision's offsets int(round((size - 224) / 2.0)), Python
 *     rounding half to even. Only the 224 kept columns of the rows the kept rows need
 *     are computed, and only the 224 kept rows: the same numbers as resizing the whole
 *     image and cropping, at a fraction of the work.
 *  4. ToTensor + Normalize in float32 as torch does ((p / 255 - mean) / std), through a
 *     table of the 256 values per channel, written channel-major into the caller's slot.
 *
 * Scaled JPEG decoding, when params.scaled_jpeg asks for it (the server's
 * jpeg_dct_scaling key; off by default). A JPEG whose shorter side is at least 1536 is decoded with
 * libjpeg's DCT scaling, at the smallest factor M/8 <= 1/2 that keeps the shorter
 * side >= 768 (3 x 256), then resized as above with the filter mapped onto the scaled
 * pixels (the image keeps its true extent w * M/8, and torchvision's output size from
 * the true w x h, so the geometry is PIL's). Measured here (best of runs;
 * tests/unit/handler_test.c prints the figures): entropy decoding dominates, so a
 * 4000x3000 JPEG decodes in 20 ms at 1/8, 26 ms at 3/8 and 39 ms at full size, and
 * resampling adds ~8 ms at full size, ~3 ms at 3/8. Scaling further buys little time
 * and costs parity: libjpeg's reduction is sharper than PIL's triangle filter, and
 * "the smallest factor still >= 256" gave up to 14/255 per element on a smooth
 * upscaled photo and 62/255 on a real 512x512 one (at 1/2). With the 768 floor the
 * difference is <= 1/255 on smooth photos and reaches 4/255 only at hard edges (a
 * mosaic of real photos: 0.08% of the elements above 2/255); top-5 classes are
 * unchanged on the photos, and on the mosaic only a near tie at rank 5 swaps. But a
 * 2048x2048 tiling of skimage's astronaut, decoded at 3/8, differed by up to 6/255 and
 * swapped MobileNetV2's ranks 2 and 4 (probabilities moved by 0.04): a wrong answer
 * TorchServe would not give, which is why exact decoding is the default.
 *
 * Refused (INVALID_ARG, one line starting "image: "): empty input, an unknown format,
 * more than HANDLER_IMAGE_MAX_PIXELS pixels (PIL's limit) or a side longer than 65535
 * (JPEG's own limit, applied to PNG too so that one row stays small), and any data
 * libjpeg or libspng reports as corrupt or truncated. libjpeg goes on after "Corrupt
 * JPEG data" warnings and PIL then classifies a half-grey picture; inferd refuses it
 * instead (handler_jpeg.c says which warnings lose nothing and are let through). A
 * valid JPEG libjpeg does not decode (12-bit, lossless) is UNSUPPORTED, not corrupt.
 *
 * Row-by-row decoding. No image is held whole but an interlaced PNG: libjpeg hands
 * over a strip of rows at a time, libspng one row (SPNG_DECODE_PROGRESSIVE), and each
 * row the crop needs goes straight through the horizontal pass, so memory is the
 * decoded strip plus the rows of 224 resampled pixels the vertical pass reads (~9 MB
 * at most, for a 179 MP image) instead of width x height x 3 bytes: a 186 KB all-zero
 * 7999x8000 PNG took 192 MB (VmHWM +190 MB), now +5 MB, and 0.6 s instead of 1.5 s;
 * a 96 MP JPEG takes +5 MB. Same passes on the same rows, so the same bytes.
 * Adam7-interlaced PNGs are decoded whole (each pass touches rows all over the image),
 * so they may have at most WHOLE_MAX_PIXELS.
 *
 * Memory and threads. A context belongs to one thread at a time. Its buffers (decoded
 * pixels, resampled rows, coefficients, libspng's working memory) grow to the largest
 * image seen and are reused; those above retain_bytes are released after the image.
 * libspng allocates through a bump arena in the context, reached through a
 * thread-local pointer because libspng's allocator hooks carry no user pointer; a
 * decode that outgrows the arena falls back to malloc and the arena is enlarged for
 * the next image. Coefficients are cached per (input size, extent, output size, crop
 * offset), four axes LRU: a stream of same-sized photos computes them once.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <spng.h>

#include "core/core.h"
#include "handler/handler_internal.h"

enum {
  CROP = HANDLER_IMAGE_CROP,
  ROW_BYTES = HANDLER__ROW_BYTES,
  AXIS_CACHE = 4,                     /* cached coefficient sets (axes) */
  PRECISION_BITS = 32 - 8 - 2,        /* Pillow's fixed point for 8-bit resampling */
  PNG_ARENA_MIN = 256 << 10,          /* libspng needs ~60 KB plus two rows */
  PIXEL_PADDING = HANDLER__PIXEL_PADDING,
};
#define DEFAULT_RETAIN_BYTES ((size_t)48 << 20)
/* An interlaced PNG is decoded whole: 192 MB of pixels at most. */
#define WHOLE_MAX_PIXELS 64000000ll

/* One axis of the resampling: which inputs and weights make each of the 224 outputs
 * CenterCrop keeps. */
typedef struct resample_axis {
  int in_size;          /* decoded pixels along the axis */
  double in_extent;     /* the image's extent in decoded pixels (< in_size when a
                           DCT-scaled image ends in a partial block) */
  int64_t out_size;     /* Resize(256)'s output size along the axis */
  int64_t first;        /* first output CenterCrop keeps */
  int identity;         /* output i is input first + i: no resampling on this axis */
  int ksize;            /* weights stored per output */
  int start[CROP];      /* first input of output i */
  int taps[CROP];       /* inputs of output i */
  int32_t *weights;     /* [CROP][ksize], fixed point, PRECISION_BITS */
  size_t weights_cap;   /* bytes allocated for weights */
  uint64_t last_use;    /* LRU clock */
  int valid;
} resample_axis;

/* The resampling passes (see "Resize(256)" below). */
typedef void horizontal_fn(const uint8_t *src, size_t stride, int count, const resample_axis *a, uint8_t *dst);
typedef void vertical_fn(const uint8_t *src, size_t stride, int row0, const resample_axis *a, uint8_t *dst);
static horizontal_fn resample_horizontal;
static vertical_fn resample_vertical;
#if defined(__x86_64__) || defined(__i386__)
#define HAVE_X86_SIMD 1
static horizontal_fn resample_horizontal_sse41;
static vertical_fn resample_vertical_avx2;
#endif

struct handler_image_ctx {
  handler_image_params params;
  handler__jpeg *jpeg;
  uint8_t *pixels; /* decoded image, RGB (CMYK while converting), row-major */
  size_t pixels_cap;
  uint8_t *rows;   /* horizontally resampled rows, [n][224][3] */
  size_t rows_cap;
  double *kernel;  /* one output's weights in double while they are computed */
  size_t kernel_cap;
  uint8_t *png_arena; /* libspng's working memory for one decode */
  size_t png_cap, png_used, png_peak;
  resample_axis axes[AXIS_CACHE];
  uint64_t clock;
  horizontal_fn *horizontal; /* the two resampling passes, plain C or SIMD */
  vertical_fn *vertical;
  uint8_t crop[HANDLER_IMAGE_CROP_BYTES];
  float table[3][256]; /* ToTensor + Normalize of each byte value, per channel */
};

/* ==== buffers ============================================================================ */

/* Makes *buf hold at least `need` bytes; contents are not kept. The size is `need`
 * rounded up to 64 KiB, not doubled: nothing is copied on growth, and doubling would
 * push a buffer over retain_bytes (then freed and faulted in again on every image:
 * 12-megapixel pixels of 36 MB doubled to 64 MB cost 250 ms of page faults here). */
int handler__grow(void **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 1;
  size_t n = need > SIZE_MAX - 0xFFFF ? need : (need + 0xFFFF) & ~(size_t)0xFFFF;
  void *p = malloc(n);
  if (!p) return 0;
  free(*buf);
  *buf = p;
  *cap = n;
  return 1;
}

static void release_if_big(void **buf, size_t *cap, size_t retain) {
  if (*cap > retain) {
    free(*buf);
    *buf = NULL;
    *cap = 0;
  }
}

/* ==== libspng's allocator: a bump arena in the context ====================================
 * Blocks carry their size in a 16-byte header (realloc needs it). free only pops the
 * last block; everything goes at once when the decode ends. A block that does not fit
 * is malloc'd (with the same header) and counted, so the arena is enlarged for the
 * next image. */

typedef struct png_block {
  size_t size;
  size_t pad;
} png_block;

static _Thread_local handler_image_ctx *png_owner; /* the context decoding a PNG on this thread */

static int in_arena(const handler_image_ctx *ctx, const void *p) {
  return ctx && (const uint8_t *)p >= ctx->png_arena && (const uint8_t *)p < ctx->png_arena + ctx->png_cap;
}

static void *SPNG_CDECL png_malloc(size_t size) {
  handler_image_ctx *ctx = png_owner;
  if (size > SIZE_MAX / 2) return NULL;
  size_t need = sizeof(png_block) + ((size + 15) & ~(size_t)15);
  png_block *b;
  if (ctx && ctx->png_used + need <= ctx->png_cap) {
    b = (png_block *)(ctx->png_arena + ctx->png_used);
    ctx->png_used += need;
    ctx->png_peak = CORE_MAX(ctx->png_peak, ctx->png_used);
  } else {
    b = malloc(need);
    if (!b) return NULL;
    if (ctx) ctx->png_peak += need; /* past the arena: grow it for next time */
  }
  b->size = size;
  return b + 1;
}

static void SPNG_CDECL png_free(void *p) {
  if (!p) return;
  handler_image_ctx *ctx = png_owner;
  png_block *b = (png_block *)p - 1;
  if (!in_arena(ctx, b)) {
    free(b);
    return;
  }
  size_t end = (size_t)((uint8_t *)p - ctx->png_arena) + ((b->size + 15) & ~(size_t)15);
  if (end == ctx->png_used) ctx->png_used = (size_t)((uint8_t *)b - ctx->png_arena);
}

static void *SPNG_CDECL png_realloc(void *p, size_t size) {
  if (!p) return png_malloc(size);
  handler_image_ctx *ctx = png_owner;
  png_block *b = (png_block *)p - 1;
  if (in_arena(ctx, b) && size <= SIZE_MAX / 2) {
    size_t offset = (size_t)((uint8_t *)p - ctx->png_arena);
    size_t old_end = offset + ((b->size + 15) & ~(size_t)15);
    size_t new_end = offset + ((size + 15) & ~(size_t)15);
    if (old_end == ctx->png_used && new_end <= ctx->png_cap) { /* the last block: in place */
      b->size = size;
      ctx->png_used = new_end;
      ctx->png_peak = CORE_MAX(ctx->png_peak, ctx->png_used);
      return p;
    }
  }
  void *q = png_malloc(size);
  if (!q) return NULL;
  memcpy(q, p, CORE_MIN(size, b->size));
  png_free(p);
  return q;
}

static void *SPNG_CDECL png_calloc(size_t count, size_t size) {
  if (size && count > SIZE_MAX / 2 / size) return NULL;
  void *p = png_malloc(count * size);
  if (p) memset(p, 0, count * size);
  return p;
}

static struct spng_alloc png_alloc = {png_malloc, png_realloc, png_calloc, png_free};

/* ==== context ============================================================================== */

static const float norm_mean[3] = {0.485f, 0.456f, 0.406f};
static const float norm_std[3] = {0.229f, 0.224f, 0.225f};
static void fill_table(float table[3][256]);

handler_image_ctx *handler_image_ctx_new(const handler_image_params *params) {
  handler_image_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return NULL;
  if (params) ctx->params = *params;
  if (!ctx->params.retain_bytes) ctx->params.retain_bytes = DEFAULT_RETAIN_BYTES;
  ctx->jpeg = handler__jpeg_new();
  ctx->png_cap = PNG_ARENA_MIN;
  ctx->png_arena = malloc(ctx->png_cap);
  if (!ctx->jpeg || !ctx->png_arena) {
    handler_image_ctx_free(ctx);
    return NULL;
  }
  fill_table(ctx->table);
  ctx->horizontal = resample_horizontal;
  ctx->vertical = resample_vertical;
#ifdef HAVE_X86_SIMD
  if (!ctx->params.plain_c && __builtin_cpu_supports("sse4.1")) ctx->horizontal = resample_horizontal_sse41;
  if (!ctx->params.plain_c && __builtin_cpu_supports("avx2")) ctx->vertical = resample_vertical_avx2;
#endif
  return ctx;
}

void handler_image_ctx_free(handler_image_ctx *ctx) {
  if (!ctx) return;
  handler__jpeg_free(ctx->jpeg);
  free(ctx->pixels);
  free(ctx->rows);
  free(ctx->kernel);
  free(ctx->png_arena);
  for (int i = 0; i < AXIS_CACHE; i++) free(ctx->axes[i].weights);
  free(ctx);
}

/* Resize(256) + CenterCrop(224), below (handler_internal.h says how decoders feed them). */
typedef handler__crop_plan crop_plan;
static inferd_code plan_crop(handler_image_ctx *ctx, handler_image_info *info, int need_rows, crop_plan *plan,
                             inferd_status *st);
static void crop_vertical(handler_image_ctx *ctx, const crop_plan *plan, const uint8_t *rows, size_t stride,
                          uint8_t *rgb);
static inferd_code resize_crop(handler_image_ctx *ctx, handler_image_info *info, uint8_t *rgb, inferd_status *st);

/* ==== decoding ============================================================================= */

handler_image_format handler_image_detect(const void *data, size_t size) {
  static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const uint8_t *b = data;
  if (size >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return HANDLER_IMAGE_JPEG;
  if (size >= 8 && memcmp(b, png_magic, 8) == 0) return HANDLER_IMAGE_PNG;
  return HANDLER_IMAGE_UNKNOWN;
}

inferd_code handler__check_size(int width, int height, int64_t max_pixels, inferd_status *st) {
  if (width <= 0 || height <= 0)
    return core_fail(st, INFERD_INVALID_ARG, "image: %dx%d has no pixels", width, height);
  if ((int64_t)width * height > max_pixels)
    return core_fail(st, INFERD_INVALID_ARG, "image: %dx%d is %lld pixels (%.1f megapixels), more than the %lld allowed",
                     width, height, (long long)width * height, (double)width * height / 1e6, (long long)max_pixels);
  if (width > HANDLER__MAX_SIDE || height > HANDLER__MAX_SIDE)
    return core_fail(st, INFERD_INVALID_ARG, "image: %dx%d has a side longer than %d pixels", width, height,
                     HANDLER__MAX_SIDE);
  return INFERD_OK;
}

static inferd_code png_error(int err, inferd_status *st) {
  if (err == SPNG_EOF) return core_fail(st, INFERD_INVALID_ARG, "image: truncated PNG data");
  return core_fail(st, INFERD_INVALID_ARG, "image: corrupt PNG data: %s", spng_strerror(err));
}

/* An interlaced (Adam7) PNG comes in seven passes, each touching rows all over the
 * image, so it is decoded whole into ctx->pixels (at most HANDLER_IMAGE_MAX_PIXELS x 3
 * bytes), then resized and cropped. */
static inferd_code png_whole_image(handler_image_ctx *ctx, spng_ctx *png, handler_image_info *info, uint8_t *rgb,
                                   inferd_status *st) {
  if ((int64_t)info->width * info->height > WHOLE_MAX_PIXELS)
    return core_fail(st, INFERD_INVALID_ARG,
                     "image: %dx%d is an interlaced PNG of %.1f megapixels, more than the %.1f allowed for an "
                     "image decoded whole",
                     info->width, info->height, (double)info->width * info->height / 1e6, WHOLE_MAX_PIXELS / 1e6);
  size_t bytes = 0;
  int err;
  if ((err = spng_decoded_image_size(png, SPNG_FMT_RGB8, &bytes)) != 0) return png_error(err, st);
  if (!handler__grow((void **)&ctx->pixels, &ctx->pixels_cap, bytes + PIXEL_PADDING))
    return core_fail(st, INFERD_NO_MEMORY, "image: out of memory for %dx%d pixels", info->width, info->height);
  if ((err = spng_decode_image(png, ctx->pixels, bytes, SPNG_FMT_RGB8, 0)) != 0) return png_error(err, st);
  memset(ctx->pixels + bytes, 0, PIXEL_PADDING);
  return resize_crop(ctx, info, rgb, st);
}

/* A non-interlaced PNG is decoded one row at a time into ctx->pixels (one row long),
 * and each row the crop needs goes straight through the horizontal pass into
 * ctx->rows: memory is one decoded row plus the crop's resampled rows (224 pixels
 * wide), whatever the image's height. The same passes on the same rows as
 * png_whole_image, so the same bytes. Every row is decoded, those the crop does not
 * need too, so that a truncated or corrupt image is refused as before. */
static inferd_code png_row_by_row(handler_image_ctx *ctx, spng_ctx *png, handler_image_info *info, uint8_t *rgb,
                                  inferd_status *st) {
  crop_plan plan;
  inferd_code rc = handler__plan_crop(ctx, info, &plan, st);
  if (rc != INFERD_OK) return rc;
  size_t row_bytes = (size_t)info->width * 3;
  if (!handler__grow((void **)&ctx->pixels, &ctx->pixels_cap, row_bytes + PIXEL_PADDING))
    return core_fail(st, INFERD_NO_MEMORY, "image: out of memory for a row of %d pixels", info->width);
  memset(ctx->pixels + row_bytes, 0, PIXEL_PADDING);
  int err = spng_decode_image(png, NULL, 0, SPNG_FMT_RGB8, SPNG_DECODE_PROGRESSIVE);
  for (int y = 0; err == 0; y++) {
    err = spng_decode_row(png, ctx->pixels, row_bytes);
    if ((err == 0 || err == SPNG_EOI) && y >= plan.row0 && y < plan.row_end)
      handler__crop_rows(ctx, &plan, ctx->pixels, row_bytes, y, 1);
  }
  if (err != SPNG_EOI) return png_error(err, st);
  handler__crop_finish(ctx, &plan, rgb);
  return INFERD_OK;
}

/* A palette image may hold indices past its PLTE's last entry (the PNG spec calls that an
 * error, but encoders write such files and PIL opens them): PIL's palette starts as the
 * grey ramp (i, i, i) under the PLTE's colours, so such an index is that grey; libspng 0.7
 * would make it black. The PLTE is padded with the ramp to all 2^depth entries. */
static inferd_code pad_palette(spng_ctx *png, const struct spng_ihdr *ihdr, inferd_status *st) {
  struct spng_plte plte;
  int err = spng_get_plte(png, &plte);
  if (err) return png_error(err, st);
  uint32_t entries = 1u << ihdr->bit_depth;
  if (plte.n_entries >= entries) return INFERD_OK;
  for (uint32_t i = plte.n_entries; i < entries; i++)
    plte.entries[i] = (struct spng_plte_entry){.red = (uint8_t)i, .green = (uint8_t)i, .blue = (uint8_t)i};
  plte.n_entries = entries;
  if ((err = spng_set_plte(png, &plte)) != 0) return png_error(err, st);
  return INFERD_OK;
}

/* PNG bytes -> the 224x224 crop in `rgb`. */
static inferd_code preprocess_png(handler_image_ctx *ctx, const uint8_t *data, size_t size, handler_image_info *info,
                                  uint8_t *rgb, inferd_status *st) {
  png_owner = ctx;
  ctx->png_used = ctx->png_peak = 0;
  inferd_code rc = INFERD_OK;
  struct spng_ihdr ihdr;
  int err;
  spng_ctx *png = spng_ctx_new2(&png_alloc, 0);
  if (!png) {
    rc = core_fail(st, INFERD_NO_MEMORY, "image: out of memory for the PNG decoder");
    goto done;
  }
  /* Ancillary chunks (text, ICC profiles) are parsed but never used: bound them. */
  spng_set_chunk_limits(png, 16u << 20, 16u << 20);
  if ((err = spng_set_png_buffer(png, data, size)) != 0 || (err = spng_get_ihdr(png, &ihdr)) != 0) {
    rc = png_error(err, st);
    goto done;
  }
  info->width = (int)CORE_MIN(ihdr.width, (uint32_t)INT32_MAX);
  info->height = (int)CORE_MIN(ihdr.height, (uint32_t)INT32_MAX);
  if ((rc = handler__check_size(info->width, info->height, HANDLER_IMAGE_MAX_PIXELS, st)) != INFERD_OK) goto done;
  if (ihdr.color_type == SPNG_COLOR_TYPE_INDEXED && (rc = pad_palette(png, &ihdr, st)) != INFERD_OK) goto done;
  info->decoded_width = info->width;
  info->decoded_height = info->height;
  info->scale_num = info->scale_denom = 1;
  rc = ihdr.interlace_method ? png_whole_image(ctx, png, info, rgb, st) : png_row_by_row(ctx, png, info, rgb, st);
done:
  spng_ctx_free(png);
  png_owner = NULL;
  /* Outgrown: enlarge the arena for the next PNG (when it is worth keeping). */
  if (ctx->png_peak > ctx->png_cap && ctx->png_peak <= ctx->params.retain_bytes) {
    uint8_t *bigger = malloc(ctx->png_peak);
    if (bigger) {
      free(ctx->png_arena);
      ctx->png_arena = bigger;
      ctx->png_cap = ctx->png_peak;
    }
  }
  return rc;
}

/* ==== Resize(256) + CenterCrop(224) ======================================================= */

/* torchvision's CenterCrop offset: int(round((size - 224) / 2.0)), rounding half to even. */
static int64_t crop_offset(int64_t size) {
  int64_t d = size - CROP;
  int64_t half = d / 2;
  if (d % 2 && half % 2) half++; /* x.5 rounds to the even neighbour */
  return half;
}

/* PIL's bilinear_filter. */
static double triangle(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

/* PIL's precompute_coeffs + normalize_coeffs_8bpc for the kept outputs
 * first .. first+223, with zero weights at either end trimmed (they add nothing). */
static int axis_compute(handler_image_ctx *ctx, resample_axis *a) {
  double scale = a->in_extent / (double)a->out_size;
  double filterscale = scale < 1.0 ? 1.0 : scale;
  double support = 1.0 * filterscale; /* BILINEAR's support is 1 */
  int ksize = (int)ceil(support) * 2 + 1;
  if (!handler__grow((void **)&ctx->kernel, &ctx->kernel_cap, (size_t)ksize * sizeof(double))) return 0;
  size_t need = (size_t)CROP * ksize * sizeof(int32_t);
  if (need > a->weights_cap) {
    int32_t *w = realloc(a->weights, need);
    if (!w) return 0;
    a->weights = w;
    a->weights_cap = need;
  }
  a->ksize = ksize;
  double ss = 1.0 / filterscale;
  for (int i = 0; i < CROP; i++) {
    double center = ((double)(a->first + i) + 0.5) * scale;
    double lo = center - support + 0.5, hi = center + support + 0.5;
    int xmin = lo < 0.0 ? 0 : (int)lo;
    int xmax = hi > (double)a->in_size ? a->in_size : (int)hi;
    xmax -= xmin;
    if (xmax > ksize) xmax = ksize; /* cannot happen: 2 * support + 1 <= ksize */
    double *k = ctx->kernel, ww = 0.0;
    for (int x = 0; x < xmax; x++) {
      k[x] = triangle((x + xmin - center + 0.5) * ss);
      ww += k[x];
    }
    int32_t *out = a->weights + (size_t)i * ksize;
    int first = 0, count = 0;
    for (int x = 0; x < xmax; x++) {
      double w = ww != 0.0 ? k[x] / ww : k[x];
      int32_t fixed = w < 0 ? (int32_t)(-0.5 + w * (1 << PRECISION_BITS)) : (int32_t)(0.5 + w * (1 << PRECISION_BITS));
      if (fixed == 0 && count == 0) {
        first = x + 1;
        continue;
      }
      out[count++] = fixed;
    }
    while (count > 0 && out[count - 1] == 0) count--;
    if (count == 0) { /* all weights zero (cannot happen for a triangle): read one pixel with weight 0 */
      first = 0;
      out[count++] = 0;
    }
    a->start[i] = xmin + first;
    a->taps[i] = count;
  }
  return 1;
}

/* The cached axis for this geometry, computed on a miss (NULL when out of memory). */
static const resample_axis *axis_get(handler_image_ctx *ctx, int in_size, double in_extent, int64_t out_size) {
  int64_t first = crop_offset(out_size);
  resample_axis *victim = &ctx->axes[0];
  ctx->clock++;
  for (int i = 0; i < AXIS_CACHE; i++) {
    resample_axis *a = &ctx->axes[i];
    if (a->valid && a->in_size == in_size && a->in_extent == in_extent && a->out_size == out_size && a->first == first) {
      a->last_use = ctx->clock;
      return a;
    }
    if (!a->valid || (victim->valid && a->last_use < victim->last_use)) victim = a;
  }
  resample_axis *a = victim;
  a->valid = 0;
  a->in_size = in_size;
  a->in_extent = in_extent;
  a->out_size = out_size;
  a->first = first;
  a->identity = out_size == in_size && in_extent == (double)in_size;
  if (!a->identity && !axis_compute(ctx, a)) return NULL;
  a->valid = 1;
  a->last_use = ctx->clock;
  return a;
}

static inline uint8_t clip8(int32_t v) {
  v >>= PRECISION_BITS;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The two passes in plain C, and with SIMD where the CPU has it (chosen once per
 * context). Both compute exactly Pillow's integer arithmetic, so they give the same
 * bytes (tests compare them); SIMD makes the resampling of a 512x512 photo ~2.5x
 * faster (0.8 -> 0.33 ms here). */
/* Horizontal pass over `count` rows of `src` (RGB, `stride` bytes apart) into `dst`
 * (rows of 224 RGB pixels): PIL's ImagingResampleHorizontal_8bpc for the kept columns. */
static void resample_horizontal(const uint8_t *src, size_t stride, int count, const resample_axis *a, uint8_t *dst) {
  for (int r = 0; r < count; r++) {
    const uint8_t *in = src + (size_t)r * stride;
    uint8_t *out = dst + (size_t)r * ROW_BYTES;
    for (int x = 0; x < CROP; x++) {
      const uint8_t *p = in + (size_t)a->start[x] * 3;
      const int32_t *k = a->weights + (size_t)x * a->ksize;
      int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
      for (int t = 0; t < a->taps[x]; t++, p += 3) {
        s0 += p[0] * k[t];
        s1 += p[1] * k[t];
        s2 += p[2] * k[t];
      }
      out[3 * x + 0] = clip8(s0);
      out[3 * x + 1] = clip8(s1);
      out[3 * x + 2] = clip8(s2);
    }
  }
}

/* Vertical pass into the 224x224 crop; row r of `src` is input row `row0 + r`:
 * PIL's ImagingResampleVertical_8bpc for the kept rows (and the kept columns only).
 * Inlined into a plain and an AVX2 copy: the loops over a row vectorize. */
static inline __attribute__((always_inline)) void vertical_body(const uint8_t *src, size_t stride, int row0,
                                                                const resample_axis *a, uint8_t *dst) {
  int32_t acc[ROW_BYTES];
  for (int y = 0; y < CROP; y++) {
    const uint8_t *in = src + (size_t)(a->start[y] - row0) * stride;
    const int32_t *k = a->weights + (size_t)y * a->ksize;
    for (int i = 0; i < ROW_BYTES; i++) acc[i] = 1 << (PRECISION_BITS - 1);
    for (int t = 0; t < a->taps[y]; t++, in += stride)
      for (int i = 0; i < ROW_BYTES; i++) acc[i] += in[i] * k[t];
    uint8_t *out = dst + (size_t)y * ROW_BYTES;
    for (int i = 0; i < ROW_BYTES; i++) out[i] = clip8(acc[i]);
  }
}

static void resample_vertical(const uint8_t *src, size_t stride, int row0, const resample_axis *a, uint8_t *dst) {
  vertical_body(src, stride, row0, a, dst);
}

#ifdef HAVE_X86_SIMD
/* One output pixel per 128-bit register: the 3 channels (and a 4th byte that is read
 * and ignored: the pixel buffer has PIXEL_PADDING bytes after the image) widened to
 * int32 and multiplied by the weight, as the scalar code does channel by channel. */
__attribute__((target("sse4.1"))) static void resample_horizontal_sse41(const uint8_t *src, size_t stride, int count,
                                                                       const resample_axis *a, uint8_t *dst) {
  for (int r = 0; r < count; r++) {
    const uint8_t *in = src + (size_t)r * stride;
    uint8_t *out = dst + (size_t)r * ROW_BYTES;
    for (int x = 0; x < CROP; x++) {
      const uint8_t *p = in + (size_t)a->start[x] * 3;
      const int32_t *k = a->weights + (size_t)x * a->ksize;
      __m128i sum = _mm_set1_epi32(1 << (PRECISION_BITS - 1));
      for (int t = 0; t < a->taps[x]; t++, p += 3) {
        int32_t four;
        memcpy(&four, p, 4);
        __m128i pixel = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(four));
        sum = _mm_add_epi32(sum, _mm_mullo_epi32(pixel, _mm_set1_epi32(k[t])));
      }
      /* clip8: shift, then saturate to 0..255 (packs then packus) */
      sum = _mm_srai_epi32(sum, PRECISION_BITS);
      sum = _mm_packus_epi16(_mm_packs_epi32(sum, sum), sum);
      int32_t rgbx = _mm_cvtsi128_si32(sum);
      memcpy(out + 3 * x, &rgbx, 3);
    }
  }
}

__attribute__((target("avx2"))) static void resample_vertical_avx2(const uint8_t *src, size_t stride, int row0,
                                                                  const resample_axis *a, uint8_t *dst) {
  vertical_body(src, stride, row0, a, dst);
}
#endif

/* torchvision's Resize(256) output size: [width, height]. */
static void resize_size(int width, int height, int64_t *out_w, int64_t *out_h) {
  /* int(256 * long / short): exact integers, one correctly rounded division, truncated:
   * the same double Python computes. */
  if (width <= height) {
    *out_w = HANDLER_IMAGE_RESIZE;
    *out_h = (int64_t)((double)HANDLER_IMAGE_RESIZE * height / width);
  } else {
    *out_h = HANDLER_IMAGE_RESIZE;
    *out_w = (int64_t)((double)HANDLER_IMAGE_RESIZE * width / height);
  }
}

/* Fills `plan` for the image `info` describes (sets its resized size). ctx->rows is made
 * to hold the horizontal pass's rows when `need_rows` (the pass is not the identity,
 * or the decoded rows do not stay in memory). */
static inferd_code plan_crop(handler_image_ctx *ctx, handler_image_info *info, int need_rows, crop_plan *plan,
                             inferd_status *st) {
  resize_size(info->width, info->height, &info->resized_width, &info->resized_height);
  /* the image's extent in decoded pixels (DCT scaling maps w to w * M/8) */
  double extent_w = (double)info->width * info->scale_num / info->scale_denom;
  double extent_h = (double)info->height * info->scale_num / info->scale_denom;
  const resample_axis *h = axis_get(ctx, info->decoded_width, extent_w, info->resized_width);
  const resample_axis *v = h ? axis_get(ctx, info->decoded_height, extent_h, info->resized_height) : NULL;
  if (!h || !v) return core_fail(st, INFERD_NO_MEMORY, "image: out of memory for resampling coefficients");
  plan->h = h;
  plan->v = v;
  if (v->identity) {
    plan->row0 = (int)v->first;
    plan->row_end = plan->row0 + CROP;
  } else { /* the rows the vertical pass reads (starts rise with y; min/max to be sure) */
    plan->row0 = v->start[0];
    plan->row_end = v->start[0] + v->taps[0];
    for (int y = 1; y < CROP; y++) {
      plan->row0 = CORE_MIN(plan->row0, v->start[y]);
      plan->row_end = CORE_MAX(plan->row_end, v->start[y] + v->taps[y]);
    }
  }
  int count = plan->row_end - plan->row0;
  if ((need_rows || !h->identity) && !handler__grow((void **)&ctx->rows, &ctx->rows_cap, (size_t)count * ROW_BYTES))
    return core_fail(st, INFERD_NO_MEMORY, "image: out of memory for %d resampled rows", count);
  return INFERD_OK;
}

inferd_code handler__plan_crop(handler_image_ctx *ctx, handler_image_info *info, crop_plan *plan, inferd_status *st) {
  return plan_crop(ctx, info, 1, plan, st);
}

/* The horizontal pass of decoded rows y .. y+count-1 (RGB, `stride` bytes apart, `src`
 * at row y, PIXEL_PADDING readable bytes after the last) into their place in ctx->rows. */
void handler__crop_rows(handler_image_ctx *ctx, const crop_plan *plan, const uint8_t *src, size_t stride, int y,
                        int count) {
  uint8_t *dst = ctx->rows + (size_t)(y - plan->row0) * ROW_BYTES;
  if (!plan->h->identity) {
    ctx->horizontal(src, stride, count, plan->h, dst);
    return;
  }
  for (int r = 0; r < count; r++)
    memcpy(dst + (size_t)r * ROW_BYTES, src + (size_t)r * stride + (size_t)plan->h->first * 3, ROW_BYTES);
}

/* The vertical pass into the 224x224 crop; `rows` holds decoded rows row0 .. row_end-1
 * after the horizontal pass, `stride` bytes apart. */
static void crop_vertical(handler_image_ctx *ctx, const crop_plan *plan, const uint8_t *rows, size_t stride,
                          uint8_t *rgb) {
  const resample_axis *v = plan->v;
  if (!v->identity) {
    ctx->vertical(rows, stride, plan->row0, v, rgb);
    return;
  }
  for (int y = 0; y < CROP; y++)
    memcpy(rgb + (size_t)y * ROW_BYTES, rows + (size_t)(v->first + y - plan->row0) * stride, ROW_BYTES);
}

void handler__crop_finish(handler_image_ctx *ctx, const crop_plan *plan, uint8_t *rgb) {
  crop_vertical(ctx, plan, ctx->rows, ROW_BYTES, rgb);
}

/* Resize + crop of a whole decoded image in ctx->pixels (an interlaced PNG). */
static inferd_code resize_crop(handler_image_ctx *ctx, handler_image_info *info, uint8_t *rgb, inferd_status *st) {
  crop_plan plan;
  inferd_code rc = plan_crop(ctx, info, 0, &plan, st);
  if (rc != INFERD_OK) return rc;
  size_t stride = (size_t)info->decoded_width * 3;
  const uint8_t *first_row = ctx->pixels + (size_t)plan.row0 * stride;
  if (plan.h->identity) { /* the kept columns are read in place */
    crop_vertical(ctx, &plan, first_row + (size_t)plan.h->first * 3, stride, rgb);
    return INFERD_OK;
  }
  handler__crop_rows(ctx, &plan, first_row, stride, plan.row0, plan.row_end - plan.row0);
  handler__crop_finish(ctx, &plan, rgb);
  return INFERD_OK;
}

/* ==== API ================================================================================== */

inferd_code handler_image_crop(handler_image_ctx *ctx, const void *data, size_t size, uint8_t *rgb,
                               handler_image_info *info, inferd_status *status) {
  handler_image_info local;
  if (!info) info = &local;
  memset(info, 0, sizeof *info);
  if (!data || size == 0) return core_fail(status, INFERD_INVALID_ARG, "image: empty (0 bytes)");
  info->format = handler_image_detect(data, size);
  inferd_code rc;
  switch (info->format) {
  case HANDLER_IMAGE_JPEG:
    rc = handler__jpeg_crop(ctx, ctx->jpeg, (void **)&ctx->pixels, &ctx->pixels_cap, ctx->params.scaled_jpeg, data,
                            size, info, rgb, status);
    break;
  case HANDLER_IMAGE_PNG:
    rc = preprocess_png(ctx, data, size, info, rgb, status);
    break;
  default: {
    const uint8_t *b = data;
    char head[3 * 8 + 1] = "";
    for (size_t i = 0, at = 0; i < CORE_MIN(size, (size_t)8); i++)
      at += (size_t)snprintf(head + at, sizeof head - at, "%s%02x", i ? " " : "", b[i]);
    return core_fail(status, INFERD_INVALID_ARG, "image: not a JPEG or PNG (%zu bytes starting %s)", size, head);
  }
  }
  release_if_big((void **)&ctx->pixels, &ctx->pixels_cap, ctx->params.retain_bytes);
  release_if_big((void **)&ctx->rows, &ctx->rows_cap, ctx->params.retain_bytes);
  if (rc == INFERD_OK) core_status_ok(status);
  return rc;
}

/* ToTensor + Normalize of each byte value, per channel. torchvision divides by 255 in
 * float32 and Normalize subtracts and divides in float32: the same operations on the
 * same floats give the same bits. */
static void fill_table(float table[3][256]) {
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) table[c][v] = ((float)v / 255.0f - norm_mean[c]) / norm_std[c];
}

/* HWC bytes -> CHW floats through the table. */
static void fill_tensor(const float table[3][256], const uint8_t *rgb, float *tensor) {
  enum { PLANE = CROP * CROP };
  for (int p = 0; p < PLANE; p++) {
    tensor[p] = table[0][rgb[3 * p + 0]];
    tensor[PLANE + p] = table[1][rgb[3 * p + 1]];
    tensor[2 * PLANE + p] = table[2][rgb[3 * p + 2]];
  }
}

void handler_image_normalize(const uint8_t *rgb, float *tensor) {
  float table[3][256]; /* 768 divisions: nothing next to 150k lookups, and no state */
  fill_table(table);
  fill_tensor(table, rgb, tensor);
}

inferd_code handler_image_preprocess(handler_image_ctx *ctx, const void *data, size_t size, float *tensor,
                                     handler_image_info *info, inferd_status *status) {
  inferd_code rc = handler_image_crop(ctx, data, size, ctx->crop, info, status);
  if (rc == INFERD_OK) fill_tensor(ctx->table, ctx->crop, tensor);
  return rc;
}
