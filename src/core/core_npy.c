/*
 * core_npy.c - NumPy .npy files (format versions 1.0, 2.0 and 3.0): the exchange format
 * of `inferd run`. Debian ships no C library for it; the format is a magic string, a
 * header length and a Python-literal dict with 'descr', 'fortran_order' and 'shape'.
 *
 * Only what inferd needs is accepted: little-endian (or byte-order-free) float32,
 * int64, int32, uint8, int8 and bool, C order. Every other header is refused with a
 * message that says what was found. The parser never reads past `size`.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static const char MAGIC[] = "\x93NUMPY";
enum { MAGIC_LEN = 6 };

static const struct {
  const char *descr;
  inferd_dtype dtype;
} descrs[] = {
    {"<f4", INFERD_DTYPE_FLOAT}, {"<i8", INFERD_DTYPE_INT64}, {"<i4", INFERD_DTYPE_INT32},
    {"|u1", INFERD_DTYPE_UINT8}, {"|i1", INFERD_DTYPE_INT8},  {"|b1", INFERD_DTYPE_BOOL},
};

/* Finds the value text after 'key': in the header dict; NULL if absent. */
static const char *dict_value(const char *header, const char *key) {
  char quoted[32];
  snprintf(quoted, sizeof quoted, "'%s'", key);
  const char *p = strstr(header, quoted);
  if (!p) return NULL;
  p += strlen(quoted);
  while (*p == ' ') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

static inferd_code parse_header(const char *header, core_npy *out, inferd_status *st) {
  const char *descr = dict_value(header, "descr");
  if (!descr || *descr != '\'') return core_fail(st, INFERD_INVALID_ARG, "npy: header has no 'descr'");
  out->dtype = INFERD_DTYPE_UNDEFINED;
  for (size_t i = 0; i < CORE_ARRAY_LEN(descrs); i++) {
    size_t n = strlen(descrs[i].descr);
    if (strncmp(descr + 1, descrs[i].descr, n) == 0 && descr[1 + n] == '\'') out->dtype = descrs[i].dtype;
  }
  if (out->dtype == INFERD_DTYPE_UNDEFINED) {
    char got[16] = {0};
    sscanf(descr, "'%15[^']'", got);
    return core_fail(st, INFERD_INVALID_ARG,
                     "npy: dtype '%s' not supported (want little-endian float32, int64, int32, uint8, int8 or bool)",
                     got);
  }
  const char *fortran = dict_value(header, "fortran_order");
  if (!fortran) return core_fail(st, INFERD_INVALID_ARG, "npy: header has no 'fortran_order'");
  if (strncmp(fortran, "False", 5) != 0)
    return core_fail(st, INFERD_INVALID_ARG, "npy: Fortran-order arrays are not supported");
  const char *shape = dict_value(header, "shape");
  if (!shape || *shape != '(') return core_fail(st, INFERD_INVALID_ARG, "npy: header has no 'shape' tuple");
  shape++;
  out->rank = 0;
  for (;;) {
    while (*shape == ' ' || *shape == ',') shape++;
    if (*shape == ')') break;
    if (*shape < '0' || *shape > '9') return core_fail(st, INFERD_INVALID_ARG, "npy: malformed shape");
    if (out->rank == INFERD_MAX_RANK)
      return core_fail(st, INFERD_INVALID_ARG, "npy: rank above %d not supported", INFERD_MAX_RANK);
    errno = 0;
    char *end;
    long long d = strtoll(shape, &end, 10);
    if (errno || d < 0 || d > (1LL << 40)) return core_fail(st, INFERD_INVALID_ARG, "npy: bad dimension");
    out->dims[out->rank++] = d;
    shape = end;
  }
  return INFERD_OK;
}

inferd_code core_npy_parse(const void *bytes, size_t size, core_npy *out, inferd_status *st) {
  const unsigned char *b = bytes;
  memset(out, 0, sizeof *out);
  if (size < MAGIC_LEN + 4 || memcmp(b, MAGIC, MAGIC_LEN) != 0)
    return core_fail(st, INFERD_INVALID_ARG, "npy: not a NumPy .npy file (bad magic)");
  unsigned major = b[6];
  size_t header_len, header_start;
  if (major == 1) {
    header_len = (size_t)b[8] | (size_t)b[9] << 8;
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return core_fail(st, INFERD_INVALID_ARG, "npy: truncated header");
    header_len = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    header_start = 12;
  } else {
    return core_fail(st, INFERD_INVALID_ARG, "npy: format version %u not supported", major);
  }
  if (header_len > 65536 || header_start + header_len > size)
    return core_fail(st, INFERD_INVALID_ARG, "npy: truncated header");
  char header[65537];
  memcpy(header, b + header_start, header_len);
  header[header_len] = '\0';
  inferd_code rc = parse_header(header, out, st);
  if (rc != INFERD_OK) return rc;
  int64_t count = core_shape_count(out->rank, out->dims);
  size_t esize = core_dtype_size(out->dtype);
  if (count < 0 || (uint64_t)count > SIZE_MAX / esize) return core_fail(st, INFERD_INVALID_ARG, "npy: shape too large");
  out->nbytes = (size_t)count * esize;
  size_t data_start = header_start + header_len;
  if (size - data_start != out->nbytes)
    return core_fail(st, INFERD_INVALID_ARG, "npy: data is %zu bytes, shape and dtype need %zu",
                     size - data_start, out->nbytes);
  out->data = malloc(out->nbytes ? out->nbytes : 1);
  if (!out->data) return core_fail(st, INFERD_NO_MEMORY, "npy: out of memory for %zu bytes", out->nbytes);
  memcpy(out->data, b + data_start, out->nbytes);
  return INFERD_OK;
}

inferd_code core_npy_read(const char *path, core_npy *out, inferd_status *st) {
  const void *data;
  size_t size;
  memset(out, 0, sizeof *out);
  inferd_code rc = core_file_map(path, &data, &size, st);
  if (rc != INFERD_OK) return rc;
  rc = core_npy_parse(data, size, out, st);
  core_file_unmap(data, size);
  if (rc != INFERD_OK) core_status_prefix(st, "%s", path);
  return rc;
}

inferd_code core_npy_write(const char *path, inferd_dtype dtype, int rank, const int64_t *dims,
                           const void *data, inferd_status *st) {
  const char *descr = NULL;
  for (size_t i = 0; i < CORE_ARRAY_LEN(descrs); i++)
    if (descrs[i].dtype == dtype) descr = descrs[i].descr;
  if (!descr) return core_fail(st, INFERD_UNSUPPORTED, "npy: cannot write dtype %s", core_dtype_name(dtype));
  char shape[256];
  size_t off = 0;
  for (int i = 0; i < rank; i++)
    off += (size_t)snprintf(shape + off, sizeof shape - off, "%lld,%s", (long long)dims[i],
                            i + 1 < rank ? " " : "");
  if (rank > 1) shape[off - 1] = '\0'; /* numpy writes "(1, 3)" but "(5,)" for rank 1 */
  if (rank == 0) shape[0] = '\0';
  char header[512];
  int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
  /* pad with spaces so that the data starts on a 64-byte boundary, ending in '\n' */
  size_t total = (size_t)MAGIC_LEN + 4 + (size_t)n + 1;
  size_t padded = (total + 63) / 64 * 64;
  memset(header + n, ' ', padded - total);
  header[n + (padded - total)] = '\n';
  size_t header_len = (size_t)n + (padded - total) + 1;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(header_len & 0xff),
                           (unsigned char)(header_len >> 8)};
  size_t nbytes = (size_t)core_shape_count(rank, dims) * core_dtype_size(dtype);
  FILE *f = fopen(path, "wb");
  if (!f) return core_fail(st, INFERD_INVALID_ARG, "%s: %s", path, strerror(errno));
  int ok = fwrite(pre, 1, sizeof pre, f) == sizeof pre && fwrite(header, 1, header_len, f) == header_len &&
           fwrite(data, 1, nbytes, f) == nbytes;
  if (fclose(f) != 0) ok = 0;
  if (!ok) return core_fail(st, INFERD_INTERNAL, "%s: write failed: %s", path, strerror(errno));
  return INFERD_OK;
}

void core_npy_free(core_npy *npy) {
  free(npy->data);
  npy->data = NULL;
}
