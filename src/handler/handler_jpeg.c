/*
 * handler_jpeg.c - JPEG bytes -> the 224x224 crop, decoded a strip of rows at a time.
 *
 * DESIGN
 * libjpeg-turbo through its libjpeg API, the library and the API PIL decodes with
 * (TurboJPEG's own API decodes whole images only): the accurate integer IDCT and fancy
 * upsampling, PIL's defaults, straight to RGB; grayscale is replicated to three
 * channels by libjpeg; CMYK/YCCK comes out as CMYK and is converted with PIL's
 * cmyk2rgb (PIL reads every CMYK JPEG as Adobe-inverted). jpeg_read_scanlines hands
 * over up to STRIP_ROWS rows at a time, and the rows the crop reads go straight through
 * the horizontal resampling pass (handler__crop_rows), so memory is one strip of
 * decoded rows plus the crop's rows of 224 resampled pixels: ~9 MB for a 179-megapixel
 * photo, instead of its 537 MB of pixels. Every row is decoded, those the crop does
 * not read too, so that damage anywhere is seen.
 *
 * Warnings. libjpeg goes on after "Corrupt JPEG data" and PIL then classifies a
 * half-grey picture; inferd refuses instead, at the first warning that means lost
 * data, so a damaged upload gets a 400 rather than a confident wrong answer (and a
 * damaged one is refused early, not after decoding the rest). Warnings after which no
 * data is lost are let through, as PIL lets them: zero SOS parameter bytes in a
 * sequential JPEG ("there are some baseline files out there with all zeroes in these
 * bytes", says libjpeg), an unknown JFIF revision or Adobe transform code, a bad ICC
 * marker (ICC profiles are not used). So are a few zero bytes of padding right before
 * the end-of-image marker, which some encoders write ("N extraneous bytes before
 * marker 0xd9"): damaged entropy-coded data often shows only as that warning (the
 * decoder, out of step, finishes its MCUs early and skips the rest), so it is taken
 * for padding only when the skipped bytes are zeros, at most EOI_PADDING_MAX of them,
 * right before the EOI (bytes after it are not read, by PIL either). Every warning is
 * seen, not only the first. libjpeg running out of memory is NO_MEMORY, not a corrupt
 * image, and a valid JPEG of a kind libjpeg does not decode (12-bit or lossless, its
 * height in a DNL marker, 2 components) is UNSUPPORTED, saying so (400 all the same).
 *
 * Memory. A progressive JPEG (or one whose first scan lacks a component) makes libjpeg
 * keep the DCT coefficients of the whole image until the last scan: 64 coefficients of
 * 2 bytes per 8x8 block of every component, at full resolution even when the output is
 * DCT-scaled. Those buffers are capped at JPEG_COEFFICIENT_BUDGET before decoding, so
 * that a small upload cannot make a decode on the HTTP thread take hundreds of MB (the
 * review's 751 KB progressive 8000x8000 JPEG took 384 MB): 64 MiB is a 4:2:0
 * progressive colour JPEG of ~22 MP, a 4:4:4 one of ~11 MP, a grayscale one of ~33 MP;
 * photos beyond that are nearly always baseline, which is decoded a strip at a time.
 * A progressive JPEG with more than MAX_SCANS scans is refused (TurboJPEG's
 * TJFLAG_LIMITSCANS, against a known denial of service).
 *
 * A fresh libjpeg decompressor for every image, destroyed when the image is done
 * (which frees all of libjpeg's memory for it): a decompressor keeps the quantization
 * and Huffman tables it has read from one image to the next (for JPEG's abbreviated
 * datastreams, tables and images sent apart), so a reused one would decode a JPEG
 * lacking a table with the previous upload's: a Motion-JPEG frame (no DHT, libjpeg's
 * default tables) was refused as corrupt after a JPEG with optimized tables, and a JPEG
 * with no DQT, refused on its own as by PIL, was classified after any other. Making one
 * costs a few small mallocs. libjpeg reports errors through error_exit, which must not
 * return: it longjmps back to handler__jpeg_crop, which destroys the decompressor.
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
/* jpeglib.h first: jerror.h uses its types */
#include <jerror.h>

#include "core/core.h"
#include "handler/handler_internal.h"

enum {
  STRIP_ROWS = 16,      /* rows asked of jpeg_read_scanlines at once: an iMCU row of 4:2:0 */
  MAX_SCANS = 500,      /* as TurboJPEG's TJFLAG_LIMITSCANS */
  EOI_PADDING_MAX = 16, /* zero bytes allowed before the end-of-image marker */
};
#define JPEG_COEFFICIENT_BUDGET ((int64_t)64 << 20)
/* DCT scaling (see handler_image.c): only by M/8 <= 1/2, and only down to a shorter
 * side of 3 x 256, so that PIL's triangle filter still does most of the reduction. */
#define SCALE_MIN_SHORT_SIDE (3 * HANDLER_IMAGE_RESIZE)

typedef struct jpeg_guard {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  const uint8_t *data; /* the image being decoded (for the padding check) */
  int out_of_memory;    /* the decode stopped for libjpeg's lack of memory */
  int unsupported;      /* the decode stopped at a kind of JPEG libjpeg does not decode */
  char message[JMSG_LENGTH_MAX]; /* why the decode stopped */
} jpeg_guard;

struct handler__jpeg {
  struct jpeg_decompress_struct d;
  jpeg_guard guard;
  struct jpeg_progress_mgr progress;
};

/* ==== errors and warnings ================================================================ */

static _Noreturn void stop(j_common_ptr c) {
  jpeg_guard *g = (jpeg_guard *)c->err;
  longjmp(g->jump, 1);
}

/* Errors that mean a valid JPEG of a kind libjpeg (8-bit, as PIL's) does not decode, not
 * damaged data: 12-bit or lossless ones, a height given by a DNL marker, 2 components. */
static int unsupported(int code) {
  switch (code) {
  case JERR_BAD_PRECISION:
  case JERR_SOF_UNSUPPORTED:
  case JERR_NOT_COMPILED:
  case JERR_EMPTY_IMAGE:
  case JERR_CONVERSION_NOTIMPL:
  case JERR_NOTIMPL:
    return 1;
  default:
    return 0;
  }
}

static _Noreturn void error_exit(j_common_ptr c) {
  jpeg_guard *g = (jpeg_guard *)c->err;
  c->err->format_message(c, g->message);
  g->out_of_memory = c->err->msg_code == JERR_OUT_OF_MEMORY;
  g->unsupported = unsupported(c->err->msg_code);
  stop(c);
}

/* "N extraneous bytes before marker 0xd9" for N zero bytes of padding right before the
 * end-of-image marker (see DESIGN). libjpeg warns with its source at the marker's 0xFF,
 * the skipped bytes right before it; what follows the marker is never read, as PIL
 * does not read it either. */
static int eoi_padding(j_decompress_ptr d, const jpeg_guard *g) {
  const struct jpeg_error_mgr *e = &g->pub;
  long n = e->msg_parm.i[0];
  if (e->msg_parm.i[1] != 0xD9 || n <= 0 || n > EOI_PADDING_MAX) return 0;
  const uint8_t *marker = d->src->next_input_byte;
  if (marker < g->data + 2 + n || marker[0] != 0xFF) return 0;
  for (const uint8_t *p = marker - n; p < marker; p++)
    if (*p != 0) return 0;
  return 1;
}

/* Warnings after which no image data is lost (see DESIGN). */
static int harmless(j_decompress_ptr d, const jpeg_guard *g) {
  switch (g->pub.msg_code) {
  case JWRN_JFIF_MAJOR:
  case JWRN_NOT_SEQUENTIAL:
  case JWRN_ADOBE_XFORM:
  case JWRN_BOGUS_ICC:
    return 1;
  case JWRN_EXTRANEOUS_DATA:
    return eoi_padding(d, g);
  default:
    return 0;
  }
}

/* Every message but errors: level -1 is a warning, the others are traces. */
static void emit_message(j_common_ptr c, int level) {
  jpeg_guard *g = (jpeg_guard *)c->err;
  if (level >= 0 || harmless((j_decompress_ptr)c, g)) return; /* only decompressors here */
  c->err->format_message(c, g->message);
  stop(c);
}

static void limit_scans(j_common_ptr c) {
  j_decompress_ptr d = (j_decompress_ptr)c;
  if (d->input_scan_number <= MAX_SCANS) return;
  snprintf(((jpeg_guard *)c->err)->message, JMSG_LENGTH_MAX, "progressive JPEG image has more than %d scans",
           MAX_SCANS);
  stop(c);
}

/* ==== decoder ============================================================================ */

handler__jpeg *handler__jpeg_new(void) {
  handler__jpeg *j = calloc(1, sizeof *j); /* j->d stays unmade until an image comes */
  if (!j) return NULL;
  j->d.err = jpeg_std_error(&j->guard.pub);
  j->guard.pub.error_exit = error_exit;
  j->guard.pub.emit_message = emit_message;
  j->progress.progress_monitor = limit_scans;
  return j;
}

void handler__jpeg_free(handler__jpeg *j) {
  if (!j) return;
  jpeg_destroy_decompress(&j->d); /* a no-op: each decode destroys its own; kept for safety */
  free(j);
}

/* libjpeg's full-image coefficient buffers for this image (0 when it is decoded a strip
 * at a time): its width_in_blocks per component, padded to whole MCUs. */
static int64_t coefficient_bytes(j_decompress_ptr d) {
  if (!jpeg_has_multiple_scans(d)) return 0;
  int64_t bytes = 0;
  for (int c = 0; c < d->num_components; c++) {
    const jpeg_component_info *comp = &d->comp_info[c];
    int64_t across = (comp->width_in_blocks + comp->h_samp_factor - 1) / comp->h_samp_factor * comp->h_samp_factor;
    int64_t down = (comp->height_in_blocks + comp->v_samp_factor - 1) / comp->v_samp_factor * comp->v_samp_factor;
    bytes += across * down * DCTSIZE2 * (int64_t)sizeof(JCOEF);
  }
  return bytes;
}

/* The smallest DCT scaling factor M/8 <= 1/2 that keeps the shorter side at least
 * SCALE_MIN_SHORT_SIDE, as a reduced fraction; 1/1 when there is none. */
static void choose_scale(int scaled, int width, int height, int *num, int *denom) {
  *num = *denom = 1;
  int64_t shorter = CORE_MIN(width, height);
  if (!scaled) return;
  for (int m = 1; m <= 4; m++) {
    if (shorter * m < (int64_t)SCALE_MIN_SHORT_SIDE * 8) continue;
    int g = m == 4 ? 4 : m == 2 ? 2 : 1;
    *num = m / g;
    *denom = 8 / g;
    return;
  }
}

/* PIL's cmyk2rgb on the Adobe-inverted samples libjpeg returns, in place (4 -> 3 bytes
 * per pixel; each write lands at or before what is still to be read). */
static void cmyk_to_rgb(uint8_t *p, size_t pixels) {
  for (size_t i = 0; i < pixels; i++) {
    const uint8_t *in = p + 4 * i;
    int nk = in[3]; /* PIL: k = 255 - raw, nk = 255 - k */
    uint8_t rgb[3];
    for (int c = 0; c < 3; c++) {
      int ink = 255 - in[c];
      int t = ink * nk + 128;
      int v = nk - (((t >> 8) + t) >> 8); /* nk - ink * nk / 255, rounded */
      rgb[c] = (uint8_t)(v < 0 ? 0 : v);
    }
    memcpy(p + 3 * i, rgb, 3);
  }
}

/* The decode after the header, every libjpeg call in it under handler__jpeg_crop's
 * setjmp. A failure of inferd's own (too big, out of memory) returns its code. */
static inferd_code decode(handler_image_ctx *ctx, handler__jpeg *j, void **strip, size_t *strip_cap, int scaled,
                          handler_image_info *info, uint8_t *rgb, inferd_status *st) {
  j_decompress_ptr d = &j->d;
  info->width = (int)d->image_width;
  info->height = (int)d->image_height;
  inferd_code rc = handler__check_size(info->width, info->height, HANDLER_IMAGE_MAX_PIXELS, st);
  if (rc != INFERD_OK) return rc;
  int64_t coefficients = coefficient_bytes(d);
  if (coefficients > JPEG_COEFFICIENT_BUDGET)
    return core_fail(st, INFERD_INVALID_ARG,
                     "image: %s JPEG %dx%d would need %.0f MiB of coefficient buffers to decode, more than the "
                     "%lld MiB allowed (a baseline JPEG of this size is accepted)",
                     d->progressive_mode ? "progressive" : "multi-scan", info->width, info->height,
                     (double)coefficients / (1 << 20), (long long)(JPEG_COEFFICIENT_BUDGET >> 20));

  int cmyk = d->jpeg_color_space == JCS_CMYK || d->jpeg_color_space == JCS_YCCK;
  d->out_color_space = cmyk ? JCS_CMYK : JCS_EXT_RGB;
  d->dct_method = JDCT_ISLOW;
  d->do_fancy_upsampling = TRUE;
  choose_scale(scaled, info->width, info->height, &info->scale_num, &info->scale_denom);
  d->scale_num = (unsigned)info->scale_num;
  d->scale_denom = (unsigned)info->scale_denom;
  jpeg_start_decompress(d); /* a multi-scan image is read whole here */
  info->decoded_width = (int)d->output_width;
  info->decoded_height = (int)d->output_height;

  handler__crop_plan plan;
  if ((rc = handler__plan_crop(ctx, info, &plan, st)) != INFERD_OK) return rc;
  size_t in_row = (size_t)d->output_width * (size_t)d->output_components, row = (size_t)d->output_width * 3;
  if (!handler__grow(strip, strip_cap, STRIP_ROWS * in_row + HANDLER__PIXEL_PADDING))
    return core_fail(st, INFERD_NO_MEMORY, "image: out of memory for %d rows of %d pixels", STRIP_ROWS,
                     info->decoded_width);
  uint8_t *pixels = *strip;
  memset(pixels + STRIP_ROWS * in_row, 0, HANDLER__PIXEL_PADDING);
  JSAMPROW rows[STRIP_ROWS];
  for (int r = 0; r < STRIP_ROWS; r++) rows[r] = pixels + (size_t)r * in_row;
  while (d->output_scanline < d->output_height) {
    int y = (int)d->output_scanline;
    int n = (int)jpeg_read_scanlines(d, rows, STRIP_ROWS);
    if (n <= 0) return core_fail(st, INFERD_INVALID_ARG, "image: JPEG decoding stopped at row %d", y);
    if (cmyk) cmyk_to_rgb(pixels, (size_t)n * d->output_width); /* rows now `row` bytes apart */
    int lo = CORE_MAX(y, plan.row0), hi = CORE_MIN(y + n, plan.row_end);
    if (lo < hi) handler__crop_rows(ctx, &plan, pixels + (size_t)(lo - y) * row, row, lo, hi - lo);
  }
  jpeg_finish_decompress(d); /* reads up to the end marker: warnings about the end come here */
  handler__crop_finish(ctx, &plan, rgb);
  return INFERD_OK;
}

inferd_code handler__jpeg_crop(handler_image_ctx *ctx, handler__jpeg *j, void **strip, size_t *strip_cap, int scaled,
                               const uint8_t *data, size_t size, handler_image_info *info, uint8_t *rgb,
                               inferd_status *st) {
  if (!j) return core_fail(st, INFERD_NO_MEMORY, "image: out of memory for the JPEG decoder");
  j->guard.data = data;
  j->guard.out_of_memory = 0;
  j->guard.unsupported = 0;
  j->guard.message[0] = '\0';
  if (setjmp(j->guard.jump)) {
    jpeg_destroy_decompress(&j->d); /* safe whatever libjpeg was doing, even creating it */
    const char *message = j->guard.message;
    if (j->guard.out_of_memory)
      return core_fail(st, INFERD_NO_MEMORY, "image: out of memory decoding the JPEG (%s)", message);
    if (j->guard.unsupported)
      return core_fail(st, INFERD_UNSUPPORTED,
                       "image: a JPEG of a kind inferd does not decode: %s (inferd decodes, as PIL does, 8-bit "
                       "baseline, progressive and arithmetic-coded JPEGs of 1, 3 or 4 components)",
                       message);
    static const char corrupt[] = "Corrupt JPEG data: "; /* libjpeg's own prefix, once is enough */
    if (strncmp(message, corrupt, sizeof corrupt - 1) == 0) message += sizeof corrupt - 1;
    return core_fail(st, INFERD_INVALID_ARG, "image: corrupt JPEG data: %s", message);
  }
  jpeg_create_decompress(&j->d); /* no tables from an earlier image (see DESIGN) */
  jpeg_mem_src(&j->d, data, (unsigned long)size);
  j->d.progress = &j->progress;
  jpeg_read_header(&j->d, TRUE);
  inferd_code rc = decode(ctx, j, strip, strip_cap, scaled, info, rgb, st);
  jpeg_destroy_decompress(&j->d);
  return rc;
}
