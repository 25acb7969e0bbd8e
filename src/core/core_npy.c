/*
 * core_npy.c - NumPy .npy files (format versions 1.0, 2.0 and 3.0): the exchange format
 * of `inferd run`. Debian ships no C library for it; the format is a magic string, a
 * header length and a Python-literal dict with 'descr', 'fortran_order' and 'shape'.
 *
 * Only what inferd needs is accepted: little-endian (or byte-order-free) float32,
 * int64, int32, uint8, int8 and bool, C order. Every other header is refused with a
 * message that says what was found. The parser never reads past `size`.
 */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
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

/* The header is read as the Python literal it is, token by token, not searched for its
 * keys: a search finds 'fortran_order' or 'shape' inside another key's string as well
 * (a file with an extra key, which numpy.load refuses, then had its Fortran-order data
 * taken for C order). Exactly the keys 'descr', 'fortran_order' and 'shape', each once,
 * in any order, quoted with ' or " as Python allows; a trailing comma; after the '}'
 * only the padding (spaces, and the '\n' that ends it). */
typedef struct header_reader {
  const char *at;
} header_reader;

static void skip_space(header_reader *r) {
  while (*r->at == ' ' || *r->at == '\t' || *r->at == '\n' || *r->at == '\r') r->at++;
}

/* A quoted string into `out` (cut to out_size - 1); false if none or unterminated. */
static bool read_quoted(header_reader *r, char *out, size_t out_size) {
  char quote = *r->at;
  if (quote != '\'' && quote != '"') return false;
  const char *end = strchr(r->at + 1, quote);
  if (!end) return false;
  size_t n = (size_t)(end - (r->at + 1));
  if (n >= out_size) n = out_size - 1;
  memcpy(out, r->at + 1, n);
  out[n] = '\0';
  r->at = end + 1;
  return true;
}

static bool read_word(header_reader *r, const char *word) {
  size_t n = strlen(word);
  if (strncmp(r->at, word, n) != 0 || isalnum((unsigned char)r->at[n]) || r->at[n] == '_') return false;
  r->at += n;
  return true;
}

static inferd_code read_descr(header_reader *r, core_npy *out, inferd_status *st) {
  char got[32];
  if (!read_quoted(r, got, sizeof got)) return core_fail(st, INFERD_INVALID_ARG, "npy: 'descr' is not a dtype string");
  out->dtype = INFERD_DTYPE_UNDEFINED;
  for (size_t i = 0; i < CORE_ARRAY_LEN(descrs); i++)
    if (strcmp(got, descrs[i].descr) == 0) out->dtype = descrs[i].dtype;
  if (out->dtype == INFERD_DTYPE_UNDEFINED)
    return core_fail(st, INFERD_INVALID_ARG,
                     "npy: dtype '%s' not supported (want little-endian float32, int64, int32, uint8, int8 or bool)",
                     got);
  return INFERD_OK;
}

static inferd_code read_fortran_order(header_reader *r, inferd_status *st) {
  if (read_word(r, "False")) return INFERD_OK;
  if (read_word(r, "True")) return core_fail(st, INFERD_INVALID_ARG, "npy: Fortran-order arrays are not supported");
  return core_fail(st, INFERD_INVALID_ARG, "npy: 'fortran_order' is not True or False");
}

/* A tuple of non-negative integers: "()", "(3,)", "(1, 3, 8, 8)" (a trailing comma
 * allowed; one element needs it: "(3)" is no tuple in Python). */
static inferd_code read_shape(header_reader *r, core_npy *out, inferd_status *st) {
  if (*r->at != '(') return core_fail(st, INFERD_INVALID_ARG, "npy: 'shape' is not a tuple");
  r->at++;
  out->rank = 0;
  bool comma = false; /* the last element was followed by a comma */
  for (;;) {
    skip_space(r);
    if (*r->at == ')') break;
    if (out->rank > 0 && !comma) return core_fail(st, INFERD_INVALID_ARG, "npy: malformed shape");
    if (*r->at < '0' || *r->at > '9') return core_fail(st, INFERD_INVALID_ARG, "npy: malformed shape");
    if (out->rank == INFERD_MAX_RANK)
      return core_fail(st, INFERD_INVALID_ARG, "npy: rank above %d not supported", INFERD_MAX_RANK);
    errno = 0;
    char *end;
    long long d = strtoll(r->at, &end, 10);
    if (errno || d < 0 || d > (1LL << 40)) return core_fail(st, INFERD_INVALID_ARG, "npy: bad dimension");
    out->dims[out->rank++] = d;
    r->at = end;
    skip_space(r);
    comma = *r->at == ',';
    if (comma) r->at++;
  }
  if (out->rank == 1 && !comma) return core_fail(st, INFERD_INVALID_ARG, "npy: malformed shape");
  r->at++; /* the ')' */
  return INFERD_OK;
}

static inferd_code parse_header(const char *header, core_npy *out, inferd_status *st) {
  enum { DESCR, FORTRAN_ORDER, SHAPE, KEYS };
  static const char *const names[KEYS] = {"descr", "fortran_order", "shape"};
  bool seen[KEYS] = {false};
  header_reader r = {header};
  skip_space(&r);
  if (*r.at != '{') return core_fail(st, INFERD_INVALID_ARG, "npy: header is not a dict");
  r.at++;
  for (;;) {
    skip_space(&r);
    if (*r.at == '}') break;
    char key[32];
    if (!read_quoted(&r, key, sizeof key)) return core_fail(st, INFERD_INVALID_ARG, "npy: malformed header dict");
    int k = 0;
    while (k < KEYS && strcmp(key, names[k]) != 0) k++;
    if (k == KEYS) return core_fail(st, INFERD_INVALID_ARG, "npy: unexpected key '%s' in the header", key);
    if (seen[k]) return core_fail(st, INFERD_INVALID_ARG, "npy: key '%s' twice in the header", key);
    seen[k] = true;
    skip_space(&r);
    if (*r.at != ':') return core_fail(st, INFERD_INVALID_ARG, "npy: malformed header dict");
    r.at++;
    skip_space(&r);
    inferd_code rc = k == DESCR ? read_descr(&r, out, st)
                     : k == FORTRAN_ORDER ? read_fortran_order(&r, st)
                                          : read_shape(&r, out, st);
    if (rc != INFERD_OK) return rc;
    skip_space(&r);
    if (*r.at == ',') r.at++;
    else if (*r.at != '}') return core_fail(st, INFERD_INVALID_ARG, "npy: malformed header dict");
  }
  r.at++; /* the '}' */
  skip_space(&r);
  if (*r.at != '\0') return core_fail(st, INFERD_INVALID_ARG, "npy: text after the header dict");
  for (int k = 0; k < KEYS; k++)
    if (!seen[k]) return core_fail(st, INFERD_INVALID_ARG, "npy: header has no '%s'", names[k]);
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
  if (header_len > 65536)
    return core_fail(st, INFERD_INVALID_ARG, "npy: header of %zu bytes (at most 65536 read)", header_len);
  if (header_start + header_len > size) return core_fail(st, INFERD_INVALID_ARG, "npy: truncated header");
  if (memchr(b + header_start, '\0', header_len))
    return core_fail(st, INFERD_INVALID_ARG, "npy: NUL byte in the header");
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
