/*
 * handler_internal.h - what the image preprocessing files of src/handler/ share;
 * nothing outside src/handler/ includes it. Names carry the handler__ prefix.
 *
 * handler_image.c owns the context, the PNG decoder and Resize(256) + CenterCrop(224);
 * handler_jpeg.c decodes JPEGs with libjpeg and feeds their rows to the same crop.
 * A crop takes decoded rows in any number of strips, top to bottom (crop_plan says
 * which rows it reads), so neither decoder need hold a whole image.
 */
#ifndef INFERD_HANDLER_INTERNAL_H
#define INFERD_HANDLER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "handler/handler.h"

enum {
  HANDLER__ROW_BYTES = HANDLER_IMAGE_CROP * 3, /* one row of the crop, RGB */
  HANDLER__MAX_SIDE = 65535,                   /* JPEG's limit; PNG is held to it too */
  HANDLER__PIXEL_PADDING = 16,                 /* readable bytes after decoded rows: SIMD reads 4 pixels at a time */
};

typedef struct resample_axis resample_axis;

/* What Resize(256) + CenterCrop(224) need of a decoded image: both axes, and the
 * decoded rows [row0, row_end) that the vertical pass reads. */
typedef struct handler__crop_plan {
  const resample_axis *h, *v;
  int row0, row_end;
} handler__crop_plan;

/* The JPEG decoder of a context (handler_jpeg.c): room for libjpeg's decompressor, made
 * afresh for each image, and its error manager. */
typedef struct handler__jpeg handler__jpeg;

/* Makes *buf hold at least `need` bytes, contents not kept (see handler_image.c);
 * 0 when out of memory. */
int handler__grow(void **buf, size_t *cap, size_t need);

/* INVALID_ARG ("image: ...") for an image of no pixels, of more than `max_pixels`, or
 * with a side longer than HANDLER__MAX_SIDE. */
inferd_code handler__check_size(int width, int height, int64_t max_pixels, inferd_status *st);

/* Fills `plan` for the image `info` describes (sets its resized size) and makes the
 * context's row buffer hold the rows the horizontal pass writes. */
inferd_code handler__plan_crop(handler_image_ctx *ctx, handler_image_info *info, handler__crop_plan *plan,
                               inferd_status *st);

/* The horizontal pass of decoded rows y .. y+count-1 (RGB, `stride` bytes apart, `src`
 * at row y, HANDLER__PIXEL_PADDING readable bytes after the last), which must lie in
 * [plan->row0, plan->row_end), into their place in the context's row buffer. */
void handler__crop_rows(handler_image_ctx *ctx, const handler__crop_plan *plan, const uint8_t *src, size_t stride,
                        int y, int count);

/* The vertical pass into the 224x224 crop `rgb`, once every row of the plan went
 * through handler__crop_rows. */
void handler__crop_finish(handler_image_ctx *ctx, const handler__crop_plan *plan, uint8_t *rgb);

/* The JPEG decoder of a context: NULL when out of memory. */
handler__jpeg *handler__jpeg_new(void);
void handler__jpeg_free(handler__jpeg *jpeg);

/* JPEG bytes -> the crop in `rgb`, decoded a strip of rows at a time into `strip`
 * (a buffer of the context; DCT-scaled when `scaled` and the image is big, see
 * handler_image.c). Fills `info`. */
inferd_code handler__jpeg_crop(handler_image_ctx *ctx, handler__jpeg *jpeg, void **strip, size_t *strip_cap,
                               int scaled, const uint8_t *data, size_t size, handler_image_info *info, uint8_t *rgb,
                               inferd_status *st);

#endif /* INFERD_HANDLER_INTERNAL_H */
