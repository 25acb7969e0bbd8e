/*
 * fuzz_npy.c - libFuzzer target for core_npy_parse, the .npy reader behind
 * `inferd run --input` (src/core/core_npy.c).
 *
 * Each input is parsed as a whole .npy file. On success the result must be
 * self-consistent: a supported dtype, rank within INFERD_MAX_RANK, nbytes equal to the
 * element count times the element size, and every data byte readable (touched here so
 * that ASan sees an undersized buffer). On failure the status must carry the code and
 * a one-line message. Anything else, or any sanitizer report, aborts.
 *
 * The parser's promise is "never reads past `size`": libFuzzer hands over a heap copy
 * of exactly `size` bytes, so ASan catches any overread.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static void fail(const char *what) {
  fprintf(stderr, "fuzz_npy: %s\n", what);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  core_npy npy;
  inferd_status st = {0};
  inferd_code rc = core_npy_parse(data, size, &npy, &st);
  if (rc != INFERD_OK) {
    if (st.code != rc || !st.message[0] || strchr(st.message, '\n')) fail("refusal without a one-line message");
    if (npy.data) fail("refusal left data allocated");
    return 0;
  }
  size_t esize = core_dtype_size(npy.dtype);
  if (!esize) fail("accepted an unsupported dtype");
  if (npy.rank < 0 || npy.rank > INFERD_MAX_RANK) fail("rank out of range");
  int64_t count = core_shape_count(npy.rank, npy.dims);
  if (count < 0 || (uint64_t)count * esize != npy.nbytes) fail("nbytes does not match shape and dtype");
  if (npy.nbytes > size) fail("more data than input bytes");
  if (!npy.data) fail("success without data");
  /* the last npy.nbytes bytes of the input are the data, verbatim (reads all of it) */
  if (npy.nbytes && memcmp(npy.data, data + size - npy.nbytes, npy.nbytes) != 0) fail("data differs from the input");
  core_npy_free(&npy);
  return 0;
}
