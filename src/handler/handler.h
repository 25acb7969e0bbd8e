/*
 * handler.h - the built-in image_classifier handler: the bytes of a JPEG or PNG become
 * one [3,224,224] slot of the model's input batch, and a row of logits becomes
 * TorchServe's answer {"label": probability, ...}.
 *
 * Preprocessing reproduces what TorchServe's image_classifier feeds its model:
 *   PIL Image.open(...).convert("RGB") -> torchvision Resize(256) (bilinear with PIL's
 *   antialiasing) -> CenterCrop(224) -> ToTensor() -> Normalize(ImageNet mean/std).
 * (TorchServe's handler has no convert("RGB"): it answers RGB images only, and fails
 * on grayscale, palette, CMYK or alpha ones, whose tensors have 1, 2 or 4 channels;
 * inferd converts them as PIL's convert("RGB") does, and answers.)
 * PNGs and JPEGs decoded at full size give the same bytes as PIL before ToTensor (the
 * same libjpeg-turbo decoder, PIL's resampling arithmetic), so the tensor is bit-equal
 * to torchvision's. Photos much larger than needed may be decoded with libjpeg's DCT
 * scaling (params.scaled_jpeg), which changes pixels by a few 1/255 (see handler_image.c).
 *
 * Threading: a handler_image_ctx belongs to one thread at a time (make one per HTTP or
 * preprocessing thread); different contexts run concurrently. handler_labels is
 * read-only once loaded and may be shared by any number of threads. The other
 * functions keep no state.
 *
 * Memory: a context owns every buffer preprocessing needs (the decoders, a strip of
 * decoded rows - the whole image for an interlaced PNG -, the resampler's coefficients
 * and rows). They grow to fit the largest image seen and are then reused; buffers above
 * params.retain_bytes are released after the image that needed them. (libjpeg still
 * allocates its own working memory for each image, through its memory manager.)
 *
 * Errors: a bad image is INVALID_ARG with a one-line message starting "image: "
 * (UNSUPPORTED for a valid JPEG of a kind libjpeg does not decode: 12-bit, lossless);
 * nothing an image contains can crash or abort.
 */
#ifndef INFERD_HANDLER_H
#define INFERD_HANDLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "inferd/inferd.h"

/* ---- the handlers inferd serves ------------------------------------------------ */

/* What a .mar's manifest may name for inferd to serve it: this module's image classifier,
 * or "tensor" (KServe v2 infer only, no pre- or postprocessing). TorchServe's other
 * built-in handlers and custom handler files are not served. */
#define HANDLER_IMAGE_CLASSIFIER "image_classifier"
#define HANDLER_TENSOR "tensor"
#define HANDLER_SERVED HANDLER_IMAGE_CLASSIFIER ", " HANDLER_TENSOR /* for messages */
static inline bool handler_served(const char *name) {
  return strcmp(name, HANDLER_IMAGE_CLASSIFIER) == 0 || strcmp(name, HANDLER_TENSOR) == 0;
}

/* ---- image_classifier preprocessing ------------------------------------------- */

enum {
  HANDLER_IMAGE_RESIZE = 256,  /* Resize(256): the shorter side becomes this */
  HANDLER_IMAGE_CROP = 224,    /* CenterCrop(224) */
  HANDLER_IMAGE_CHANNELS = 3,  /* RGB */
  /* bytes of a crop as handler_image_crop writes it: [224][224][3] uint8 (HWC) */
  HANDLER_IMAGE_CROP_BYTES = HANDLER_IMAGE_CROP * HANDLER_IMAGE_CROP * HANDLER_IMAGE_CHANNELS,
  /* floats of one batch slot as handler_image_preprocess writes it: [3][224][224] (CHW) */
  HANDLER_IMAGE_TENSOR_FLOATS = HANDLER_IMAGE_CHANNELS * HANDLER_IMAGE_CROP * HANDLER_IMAGE_CROP,
};

/* Images with more pixels (width x height as stored in the file) are refused: PIL's
 * limit, above which it raises DecompressionBombError (so TorchServe refuses them too).
 * An interlaced PNG, the one image decoded whole, may have at most 64 megapixels. */
#define HANDLER_IMAGE_MAX_PIXELS 178956970ll /* PIL's limit: 2 x Image.MAX_IMAGE_PIXELS */

typedef enum handler_image_format {
  HANDLER_IMAGE_UNKNOWN = 0,
  HANDLER_IMAGE_JPEG,
  HANDLER_IMAGE_PNG,
} handler_image_format;

typedef struct handler_image_params {
  /* Buffers larger than this are released after the image that needed them, so that
   * one huge image does not pin its memory in every context. 0 = default 48 MiB
   * (the pixels of a 16-megapixel interlaced PNG fit). */
  size_t retain_bytes;
  /* Nonzero: decode a JPEG whose shorter side is at least 1536 with libjpeg's DCT
   * scaling (a 12-megapixel photo in about half the time), no longer bit-equal to PIL:
   * up to a few 1/255 per element, enough to reorder close classes. Default 0: every
   * JPEG gives the bytes PIL gives. */
  int scaled_jpeg;
  /* Nonzero: resample in plain C even where SSE4.1/AVX2 are there (the same bytes,
   * slower; for tests and comparisons). Default 0. */
  int plain_c;
} handler_image_params;

/* What preprocessing found and did; filled on success (and as far as known on failure). */
typedef struct handler_image_info {
  handler_image_format format;
  int width, height;                 /* as stored in the file */
  int decoded_width, decoded_height; /* as decoded: smaller when DCT-scaled */
  int scale_num, scale_denom;        /* the DCT scaling factor; 1/1 when not scaled */
  int64_t resized_width, resized_height; /* Resize(256)'s output size, torchvision's rule */
} handler_image_info;

typedef struct handler_image_ctx handler_image_ctx;

/* A context for one thread; `params` may be NULL for defaults. Returns NULL when out of
 * memory. Free with handler_image_ctx_free. */
handler_image_ctx *handler_image_ctx_new(const handler_image_params *params);
void handler_image_ctx_free(handler_image_ctx *ctx);

/* The whole preprocessing of TorchServe's image_classifier: decodes `data` (a JPEG or
 * PNG, told apart by its first bytes; borrowed for the call), resizes, crops and
 * normalizes it into `tensor` (caller-owned, HANDLER_IMAGE_TENSOR_FLOATS floats, [3][224]
 * [224]; typically one slot of a batch, so the batch is assembled without copies).
 * `info` may be NULL. INVALID_ARG for an empty, truncated, corrupt, unknown-format or
 * too large (> HANDLER_IMAGE_MAX_PIXELS) image; UNSUPPORTED for a 12-bit, lossless or
 * otherwise undecodable kind of JPEG; NO_MEMORY when a buffer cannot grow. */
inferd_code handler_image_preprocess(handler_image_ctx *ctx, const void *data, size_t size,
                                     float *tensor, handler_image_info *info,
                                     inferd_status *status);

/* The same up to CenterCrop: writes the 224x224 RGB crop as bytes into `rgb`
 * (caller-owned, HANDLER_IMAGE_CROP_BYTES, [224][224][3]); rgb / 255 is torchvision's
 * tensor before Normalize. */
inferd_code handler_image_crop(handler_image_ctx *ctx, const void *data, size_t size,
                               uint8_t *rgb, handler_image_info *info, inferd_status *status);

/* ToTensor + Normalize(mean=[0.485,0.456,0.406], std=[0.229,0.224,0.225]) of a crop
 * from handler_image_crop into `tensor` ([3][224][224]), in float32 arithmetic exactly
 * as torchvision does it. */
void handler_image_normalize(const uint8_t *rgb, float *tensor);

/* The format `data` starts like, by its magic bytes (UNKNOWN when neither). */
handler_image_format handler_image_detect(const void *data, size_t size);

/* ---- image_classifier postprocessing ------------------------------------------- */

enum {
  HANDLER_TOPK = 5,       /* TorchServe's image_classifier answers the top 5 */
  HANDLER_TOPK_MAX = 100, /* handler_classify_json answers at most this many */
};

/* Class index -> name, from TorchServe's index_to_name.json: {"0": "tench", ...} with
 * values that are a name or a list whose last element is the name (["n01440764",
 * "tench"]), or the older {"object_type_names": ["tench", ...]}. Keys that are not a
 * class index written in decimal are never looked up (as in TorchServe) and ignored. */
typedef struct handler_labels handler_labels;

/* Loads `path`. NOT_FOUND when there is no such file (the caller then passes NULL
 * labels: classes are named by their index, as TorchServe does without the file);
 * INVALID_ARG, naming the file and the key, when it is not such a mapping. On success
 * *out is owned by the caller: free with handler_labels_free. */
inferd_code handler_labels_load(const char *path, handler_labels **out, inferd_status *status);
/* The same from memory (e.g. a file inside a .mar); `json` is borrowed for the call,
 * `name` is what messages call it. */
inferd_code handler_labels_parse(const void *json, size_t size, const char *name,
                                 handler_labels **out, inferd_status *status);
void handler_labels_free(handler_labels *labels);
/* The name of class `index` (borrowed from `labels`), or NULL when it has none. */
const char *handler_labels_name(const handler_labels *labels, int64_t index);

/* One entry of a top-k list. */
typedef struct handler_class {
  int index;         /* class index into the logits */
  float probability; /* softmax probability: computed in double, rounded to float32 */
} handler_class;

/* Softmax over `logits` [n] and the `k` most probable classes into `top` (caller-owned,
 * k entries), most probable first (ties: lower index first). Returns how many were
 * written (min(k, n)), or -1 when a logit is NaN or +inf or every one is -inf (a -inf
 * logit alone has probability 0, as in torch). No allocation. */
int handler_classify_topk(const float *logits, int n, int k, handler_class *top);

/* Upper bound of the bytes handler_classify_json writes for `k` classes with these
 * labels (NULL: index names), the terminating NUL included. Size buffers with it once. */
size_t handler_classify_json_size(const handler_labels *labels, int k);

/* TorchServe's image_classifier answer for one row of logits, as TorchServe renders it
 * (Python's json.dumps(result, indent=2)): {"label": probability, ...} with the top `k`
 * (at most HANDLER_TOPK_MAX) in descending order, labels from `labels` (NULL or a class without a name: its index,
 * "281"), probabilities printed as the shortest text that reads back as the same
 * float32. Two classes with the same name are one key, as in TorchServe's Python dict:
 * in the first one's place with the later one's probability. Writes a NUL-terminated
 * string into `buf` (caller-owned, `size` bytes) and its length into *length (may be
 * NULL). INTERNAL when a logit is NaN or +inf or all are -inf; TOO_LARGE when `size` is too small. */
inferd_code handler_classify_json(const float *logits, int n, int k,
                                  const handler_labels *labels, char *buf, size_t size,
                                  size_t *length, inferd_status *status);

#endif /* INFERD_HANDLER_H */
