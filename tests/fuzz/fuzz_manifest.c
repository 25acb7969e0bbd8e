/*
 * fuzz_manifest.c - libFuzzer target for the model store's readers (src/archive/):
 * MANIFEST.json (archive_manifest_parse) and, for inputs that start with "PK", whole
 * .mar archives in memory (archive_open_memory, through libzip).
 *
 * The promise: success, or a status with that code and a one-line message; never a
 * crash, a leak or an overread. On success the manifest's names must be what the
 * validation promises (a valid model name and version, a serializedFile that is a
 * relative .onnx path without "..", no control characters), and an opened archive's
 * bytes must all be readable (touched here so that ASan sees a short buffer).
 * The caps are lowered (64 MiB unpacked, 1000 entries) so that a bomb costs little.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "archive/archive.h"

static void fail(const char *what) {
  fprintf(stderr, "fuzz_manifest: %s\n", what);
  abort();
}

static void check_refusal(inferd_code rc, const inferd_status *st) {
  if (st->code != rc || !st->message[0] || strchr(st->message, '\n')) fail("refusal without a one-line message");
}

static void check_text(const char *s, bool required) {
  if (!s) {
    if (required) fail("a required field is NULL");
    return;
  }
  if (!*s) fail("an empty field");
  for (const char *p = s; *p; p++)
    if ((unsigned char)*p < 0x20) fail("a control character in a field");
}

static bool has_dotdot_component(const char *path) {
  for (const char *c = path; c; c = strchr(c, '/') ? strchr(c, '/') + 1 : NULL)
    if (strncmp(c, "..", 2) == 0 && (c[2] == '/' || c[2] == '\0')) return true;
  return false;
}

static void check_manifest(const archive_manifest *m) {
  check_text(m->model_name, true);
  check_text(m->model_version, true);
  check_text(m->serialized_file, true);
  check_text(m->handler, false);
  check_text(m->runtime, false);
  check_text(m->created_on, false);
  check_text(m->archiver_version, false);
  if (!archive_valid_model_name(m->model_name) || !archive_valid_model_name(m->model_version))
    fail("an invalid name or version accepted");
  const char *f = m->serialized_file;
  size_t n = strlen(f);
  if (f[0] == '/' || has_dotdot_component(f) || strchr(f, '\\'))
    fail("a serializedFile outside the archive accepted");
  if (n < 5 || strcasecmp(f + n - 5, ".onnx") != 0) fail("a serializedFile that is not .onnx accepted");
}

static volatile unsigned char sink;

static void touch(const void *data, size_t size) {
  unsigned char x = 0;
  for (size_t i = 0; i < size; i++) x ^= ((const unsigned char *)data)[i];
  sink = x;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  inferd_status st = {0};
  archive_manifest m;
  inferd_code rc = archive_manifest_parse(data, size, &m, &st);
  if (rc != INFERD_OK)
    check_refusal(rc, &st);
  else
    check_manifest(&m);
  archive_manifest_free(&m);

  if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
    const archive_params params = {.max_total_bytes = 64 << 20, .max_entries = 1000, .max_extra_bytes = 16 << 20};
    archive_model *a = NULL;
    rc = archive_open_memory(data, size, &params, &a, &st);
    if (rc != INFERD_OK) {
      check_refusal(rc, &st);
      if (a) fail("a refusal returned a model");
      return 0;
    }
    if (archive_get_kind(a) != ARCHIVE_MAR) fail("not a .mar");
    if (!archive_model_name(a) || !archive_model_version(a) || !archive_manifest_json(a)) fail("a field missing");
    size_t onnx_size;
    const void *onnx = archive_onnx(a, &onnx_size);
    if (!onnx || onnx_size == 0) fail("no ONNX bytes");
    touch(onnx, onnx_size);
    for (int i = 0; i < archive_file_count(a); i++) {
      const char *name;
      size_t file_size;
      const void *file = archive_file_at(a, i, &name, &file_size);
      if (!name || !name[0] || (!file && file_size)) fail("a bad extra file");
      if (archive_file(a, name, NULL) != file) fail("archive_file finds another file");
      touch(file, file_size);
    }
    archive_close(a);
  }
  return 0;
}
