/*
 * test_archive.c - src/archive: opening models in the three forms TorchServe's model
 * store holds (.mar, unpacked directory, bare .onnx), writing .mar archives as
 * torch-model-archiver does, and refusing malformed archives with a clear status.
 *
 * Fixtures are made here: small zips written with libzip (make_zip), byte patches of
 * them for what libzip will not write (duplicate names, lying sizes), and one .mar
 * made by Python's zipfile in torch-model-archiver's layout, embedded below
 * (python_mar). The real MobileNetV2 in models/ goes through a .mar into the engine
 * once, to show the bytes handed over are the model.
 *
 * Invariants: every test cleans up what it opens (ASan's leak check runs in CI); error
 * tests check the code and that the message names the culprit. A test that could hang
 * (a FIFO in the model store) runs under alarm(), so that a regression fails it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "archive/archive.h"
#include "archive/archive_internal.h"
#include "core/core.h"
#include "inferd/inferd.h"

/* Made by this script with Python 3.11's zipfile (what torch-model-archiver uses):
 *
 *   import io, json, zipfile
 *   manifest = {"createdOn": "01/02/2024 10:20:30", "runtime": "python",
 *               "model": {"modelName": "tiny", "serializedFile": "tiny.onnx",
 *                         "handler": "image_classifier", "modelVersion": "2.0"},
 *               "archiverVersion": "0.12.0"}
 *   buf = io.BytesIO()
 *   with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
 *       for name, data in [("tiny.onnx", b"\x08\x07\x12\x07pytorch" * 8),
 *                          ("index_to_name.json", b'{"0": ["n01", "cat"], "1": ["n02", "dog"]}')]:
 *           info = zipfile.ZipInfo(name, date_time=(2024, 2, 1, 10, 20, 30))
 *           info.compress_type = zipfile.ZIP_DEFLATED
 *           info.external_attr = 0o100644 << 16
 *           z.writestr(info, data)
 *       info = zipfile.ZipInfo("MAR-INF/MANIFEST.json", date_time=(2024, 2, 1, 10, 20, 30))
 *       info.compress_type = zipfile.ZIP_DEFLATED
 *       z.writestr(info, json.dumps(manifest, indent=2))
 */
static const unsigned char python_mar[] = {
    0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00, 0x00, 0x08, 0x00, 0x8f, 0x52, 0x41, 0x58, 0x29, 0x27,
    0xe3, 0x0d, 0x10, 0x00, 0x00, 0x00, 0x58, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x74, 0x69,
    0x6e, 0x79, 0x2e, 0x6f, 0x6e, 0x6e, 0x78, 0xe3, 0x60, 0x17, 0x62, 0x2f, 0xa8, 0x2c, 0xc9, 0x2f,
    0x4a, 0xce, 0xe0, 0xa0, 0x26, 0x13, 0x00, 0x50, 0x4b, 0x03, 0x04, 0x14, 0x00, 0x00, 0x00, 0x08,
    0x00, 0x8f, 0x52, 0x41, 0x58, 0x03, 0x0d, 0x46, 0x01, 0x23, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x00,
    0x00, 0x12, 0x00, 0x00, 0x00, 0x69, 0x6e, 0x64, 0x65, 0x78, 0x5f, 0x74, 0x6f, 0x5f, 0x6e, 0x61,
    0x6d, 0x65, 0x2e, 0x6a, 0x73, 0x6f, 0x6e, 0xab, 0x56, 0x32, 0x50, 0xb2, 0x52, 0x88, 0x56, 0xca,
    0x33, 0x30, 0x54, 0xd2, 0x51, 0x50, 0x4a, 0x4e, 0x2c, 0x51, 0x8a, 0x05, 0xd2, 0x86, 0x50, 0x41,
    0x23, 0x90, 0x60, 0x4a, 0x7e, 0xba, 0x52, 0x6c, 0x2d, 0x00, 0x50, 0x4b, 0x03, 0x04, 0x14, 0x00,
    0x00, 0x00, 0x08, 0x00, 0x8f, 0x52, 0x41, 0x58, 0x8b, 0x4b, 0xb9, 0x27, 0x99, 0x00, 0x00, 0x00,
    0xe9, 0x00, 0x00, 0x00, 0x15, 0x00, 0x00, 0x00, 0x4d, 0x41, 0x52, 0x2d, 0x49, 0x4e, 0x46, 0x2f,
    0x4d, 0x41, 0x4e, 0x49, 0x46, 0x45, 0x53, 0x54, 0x2e, 0x6a, 0x73, 0x6f, 0x6e, 0x4d, 0x8e, 0xc1,
    0x0e, 0x82, 0x30, 0x10, 0x44, 0xef, 0x7e, 0x45, 0xd3, 0x33, 0x81, 0xa5, 0x7a, 0xe2, 0x03, 0x3c,
    0xea, 0x8d, 0xab, 0xd9, 0xd0, 0x55, 0x36, 0x29, 0xad, 0x69, 0xab, 0x11, 0x09, 0xff, 0x6e, 0x29,
    0xc1, 0x70, 0x9c, 0x79, 0x2f, 0x93, 0x99, 0x0e, 0x42, 0xc8, 0xce, 0x13, 0x46, 0xd2, 0x57, 0x2b,
    0x1b, 0x21, 0xa1, 0xae, 0x40, 0x55, 0x0a, 0xd4, 0x49, 0xd4, 0xd0, 0x28, 0x68, 0x8e, 0x20, 0x8b,
    0xc5, 0xf2, 0x2f, 0x1b, 0x79, 0xa0, 0xc5, 0x79, 0x8e, 0xb1, 0x77, 0x76, 0xad, 0x07, 0xa7, 0xc9,
    0xa4, 0x72, 0x4a, 0x61, 0x8b, 0x17, 0x5c, 0xbd, 0xc8, 0x76, 0xcc, 0x56, 0x02, 0x81, 0x3c, 0xa3,
    0xe1, 0x2f, 0xe9, 0x33, 0x9b, 0x3f, 0x2d, 0x9d, 0xb5, 0x9f, 0x4d, 0xe9, 0xd1, 0x6a, 0x43, 0x7e,
    0x61, 0x3c, 0xe0, 0x83, 0x6e, 0x9d, 0xc1, 0x10, 0xf8, 0xce, 0xa9, 0x2b, 0x76, 0xf3, 0x2d, 0xf9,
    0xc0, 0x2e, 0xbf, 0x55, 0x25, 0xc8, 0x44, 0xe6, 0x7c, 0x05, 0x7d, 0xd7, 0xf3, 0x9b, 0xfc, 0x8e,
    0x43, 0x59, 0x67, 0x65, 0xfe, 0x01, 0x50, 0x4b, 0x01, 0x02, 0x14, 0x03, 0x14, 0x00, 0x00, 0x00,
    0x08, 0x00, 0x8f, 0x52, 0x41, 0x58, 0x29, 0x27, 0xe3, 0x0d, 0x10, 0x00, 0x00, 0x00, 0x58, 0x00,
    0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xa4, 0x81,
    0x00, 0x00, 0x00, 0x00, 0x74, 0x69, 0x6e, 0x79, 0x2e, 0x6f, 0x6e, 0x6e, 0x78, 0x50, 0x4b, 0x01,
    0x02, 0x14, 0x03, 0x14, 0x00, 0x00, 0x00, 0x08, 0x00, 0x8f, 0x52, 0x41, 0x58, 0x03, 0x0d, 0x46,
    0x01, 0x23, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0xa4, 0x81, 0x37, 0x00, 0x00, 0x00, 0x69, 0x6e, 0x64, 0x65, 0x78,
    0x5f, 0x74, 0x6f, 0x5f, 0x6e, 0x61, 0x6d, 0x65, 0x2e, 0x6a, 0x73, 0x6f, 0x6e, 0x50, 0x4b, 0x01,
    0x02, 0x14, 0x03, 0x14, 0x00, 0x00, 0x00, 0x08, 0x00, 0x8f, 0x52, 0x41, 0x58, 0x8b, 0x4b, 0xb9,
    0x27, 0x99, 0x00, 0x00, 0x00, 0xe9, 0x00, 0x00, 0x00, 0x15, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x01, 0x8a, 0x00, 0x00, 0x00, 0x4d, 0x41, 0x52, 0x2d, 0x49,
    0x4e, 0x46, 0x2f, 0x4d, 0x41, 0x4e, 0x49, 0x46, 0x45, 0x53, 0x54, 0x2e, 0x6a, 0x73, 0x6f, 0x6e,
    0x50, 0x4b, 0x05, 0x06, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x03, 0x00, 0xba, 0x00, 0x00, 0x00,
    0x56, 0x01, 0x00, 0x00, 0x00, 0x00,
};

/* ==== helpers ============================================================================ */

static char tmpdir[64];

/* Paths in the test's directory; a ring of 64, enough for one test's live paths. */
static const char *tmp_path(const char *name) {
  static char paths[64][256];
  static int next;
  char *p = paths[next++ % 64];
  snprintf(p, 256, "%s/%s", tmpdir, name);
  return p;
}

static void write_bytes(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, size, f), size);
  fclose(f);
}

static void *read_bytes(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *data = malloc((size_t)n + 1);
  assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *size = (size_t)n;
  return data;
}

typedef struct zip_item {
  const char *name;
  const char *data; /* NUL-terminated text */
} zip_item;

#define GOOD_MANIFEST                                                                             \
  "{\"createdOn\": \"01/02/2024 10:20:30\", \"runtime\": \"python\", \"model\": {\"modelName\": " \
  "\"m\", \"serializedFile\": \"m.onnx\", \"handler\": \"image_classifier\", \"modelVersion\": \"1.0\"}, " \
  "\"archiverVersion\": \"0.12.0\"}"

/* Writes a zip of `items` (deflated) at path. */
static void make_zip(const char *path, const zip_item *items, int count) {
  int err;
  zip_t *z = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &err);
  assert_non_null(z);
  for (int i = 0; i < count; i++) {
    zip_source_t *src = zip_source_buffer(z, items[i].data, strlen(items[i].data), 0);
    assert_non_null(src);
    assert_true(zip_file_add(z, items[i].name, src, ZIP_FL_ENC_UTF_8) >= 0);
  }
  assert_int_equal(zip_close(z), 0);
}

/* Opening must fail with `code` and a message holding `want`. */
static void open_fails(const char *path, const archive_params *params, inferd_code code, const char *want) {
  archive_model *m = (archive_model *)1;
  inferd_status st = {0};
  inferd_code rc = archive_open(path, params, &m, &st);
  if (rc == INFERD_OK) fail_msg("%s opened; expected '%s'", path, want);
  assert_null(m);
  assert_int_equal(rc, code);
  if (want && !strstr(st.message, want)) fail_msg("message '%s' lacks '%s'", st.message, want);
  assert_null(strchr(st.message, '\n'));
}

static void zip_fails(const zip_item *items, int count, inferd_code code, const char *want) {
  const char *path = tmp_path("bad.mar");
  make_zip(path, items, count);
  open_fails(path, NULL, code, want);
}

static archive_model *open_ok(const char *path) {
  archive_model *m = NULL;
  inferd_status st = {0};
  if (archive_open(path, NULL, &m, &st) != INFERD_OK) fail_msg("%s: %s", path, st.message);
  return m;
}

static void assert_file(const archive_model *m, const char *name, const char *text) {
  size_t size = 0;
  const char *data = archive_file(m, name, &size);
  if (!data) fail_msg("no extra file '%s'", name);
  assert_int_equal(size, strlen(text));
  assert_memory_equal(data, text, size);
}

/* A stand-in for an .onnx file: the archive code never parses the model. */
static const char fake_onnx[] = "\x08\x07\x12\x07pytorch fake model bytes";

static const char *make_inputs(void) {
  write_bytes(tmp_path("m.onnx"), fake_onnx, sizeof fake_onnx - 1);
  const char *labels = "{\"0\": [\"n0\", \"zero\"]}";
  write_bytes(tmp_path("index_to_name.json"), labels, strlen(labels));
  mkdir(tmp_path("extra_dir"), 0755);
  mkdir(tmp_path("extra_dir/sub"), 0755);
  write_bytes(tmp_path("extra_dir/a.txt"), "a", 1);
  write_bytes(tmp_path("extra_dir/sub/b.txt"), "bb", 2);
  write_bytes(tmp_path("extra_dir/.hidden"), "h", 1);
  write_bytes(tmp_path("my_handler.so"), "ELF?", 4);
  mkdir(tmp_path("out"), 0755);
  return tmp_path("out");
}

static int setup(void **state) {
  strcpy(tmpdir, "/tmp/inferd_test_archive.XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

/* ==== reading ================================================================================ */

/* A .mar that Info-ZIP's zip wrote to a pipe (`zip -r - . > m.mar`): sizes and CRCs in
 * data descriptors and Zip64 extra fields in the local headers, which the central
 * directory does not repeat. Java's and Python's readers take it; so must inferd,
 * deflated or stored (-0). */
static void streamed_zip(void **state) {
  (void)state;
  mkdir(tmp_path("streamed"), 0755);
  mkdir(tmp_path("streamed/MAR-INF"), 0755);
  write_bytes(tmp_path("streamed/m.onnx"), fake_onnx, sizeof fake_onnx - 1);
  const char *manifest = "{\"runtime\": \"python\", \"model\": {\"modelName\": \"zs\", \"serializedFile\": "
                         "\"m.onnx\", \"handler\": \"image_classifier\", \"modelVersion\": \"1.0\"}}";
  write_bytes(tmp_path("streamed/MAR-INF/MANIFEST.json"), manifest, strlen(manifest));
  for (int stored = 0; stored < 2; stored++) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cd '%s' && zip -q %s -r - m.onnx MAR-INF | cat > ../streamed.mar", tmp_path("streamed"),
             stored ? "-0" : "");
    assert_int_equal(system(cmd), 0);
    archive_model *m = open_ok(tmp_path("streamed.mar"));
    assert_string_equal(archive_model_name(m), "zs");
    assert_false(archive_onnx_mapped(m)); /* read through libzip: see open_zip_source */
    size_t size;
    const void *onnx = archive_onnx(m, &size);
    assert_int_equal(size, sizeof fake_onnx - 1);
    assert_memory_equal(onnx, fake_onnx, size);
    archive_close(m);
  }
}

/* The archive Python's zipfile made, as torch-model-archiver lays it out. */
static void opens_python_mar(void **state) {
  const char *path = tmp_path("tiny.mar");
  write_bytes(path, python_mar, sizeof python_mar);
  archive_model *m = open_ok(path);
  assert_false(archive_onnx_mapped(m)); /* deflated: inflated into memory of its own */
  assert_int_equal(archive_get_kind(m), ARCHIVE_MAR);
  assert_string_equal(archive_model_name(m), "tiny");
  assert_string_equal(archive_model_version(m), "2.0");
  assert_string_equal(archive_handler(m), "image_classifier");
  assert_string_equal(archive_serialized_file(m), "tiny.onnx");
  size_t size;
  const unsigned char *onnx = archive_onnx(m, &size);
  assert_int_equal(size, 8 * 11);
  for (int i = 0; i < 8; i++) assert_memory_equal(onnx + 11 * i, "\x08\x07\x12\x07pytorch", 11);
  assert_int_equal(archive_file_count(m), 1);
  assert_file(m, "index_to_name.json", "{\"0\": [\"n01\", \"cat\"], \"1\": [\"n02\", \"dog\"]}");
  assert_null(archive_file(m, "MAR-INF/MANIFEST.json", NULL)); /* not an extra file */
  assert_non_null(strstr(archive_manifest_json(m), "\"archiverVersion\": \"0.12.0\""));
  archive_release_onnx(m);
  assert_null(archive_onnx(m, &size));
  assert_int_equal(size, 0);
  archive_close(m);

  /* the same bytes from memory */
  inferd_status st;
  assert_int_equal(archive_open_memory(python_mar, sizeof python_mar, NULL, &m, &st), INFERD_OK);
  assert_string_equal(archive_model_name(m), "tiny");
  archive_close(m);
}

/* archive_params.before_copy: asked with the .onnx's size before a deflated one is
 * inflated (or a .mar in memory copied), never for one mapped from its file; its
 * refusal is archive_open's. */
typedef struct copy_check {
  int calls;
  uint64_t bytes;
  inferd_code answer;
} copy_check;

static inferd_code check_copy(void *ctx, uint64_t onnx_bytes, inferd_status *st) {
  copy_check *c = ctx;
  c->calls++;
  c->bytes = onnx_bytes;
  return c->answer == INFERD_OK ? INFERD_OK : core_fail(st, c->answer, "%llu bytes would not fit",
                                                         (unsigned long long)onnx_bytes);
}

static void before_copy_asked_first(void **state) {
  const char *path = tmp_path("tiny.mar");
  write_bytes(path, python_mar, sizeof python_mar);
  copy_check c = {.answer = INFERD_NO_MEMORY};
  archive_params p = {.before_copy = check_copy, .before_copy_ctx = &c};
  open_fails(path, &p, INFERD_NO_MEMORY, "88 bytes would not fit");
  assert_int_equal(c.calls, 1);
  assert_int_equal(c.bytes, 8 * 11); /* the inflated size, not the deflated one */

  c = (copy_check){.answer = INFERD_OK};
  archive_model *m = NULL;
  inferd_status st;
  if (archive_open(path, &p, &m, &st) != INFERD_OK) fail_msg("%s: %s", path, st.message);
  assert_int_equal(c.calls, 1);
  archive_close(m);

  c = (copy_check){.answer = INFERD_NO_MEMORY};
  m = (archive_model *)1;
  assert_int_equal(archive_open_memory(python_mar, sizeof python_mar, &p, &m, &st), INFERD_NO_MEMORY);
  assert_null(m);
  assert_int_equal(c.calls, 1);

  /* stored, as `inferd archive` writes it: mapped in place, nothing to ask */
  write_bytes(tmp_path("m.onnx"), fake_onnx, sizeof fake_onnx - 1);
  archive_write_params w = {.model_name = "stored", .serialized_file = tmp_path("m.onnx"), .handler = "h",
                            .export_path = tmpdir, .force = true};
  char written[512];
  if (archive_write(&w, written, sizeof written, &st) != INFERD_OK) fail_msg("%s", st.message);
  c = (copy_check){.answer = INFERD_NO_MEMORY};
  if (archive_open(written, &p, &m, &st) != INFERD_OK) fail_msg("%s: %s", written, st.message);
  assert_true(archive_onnx_mapped(m));
  assert_int_equal(c.calls, 0);
  archive_close(m);
}

static void manifest_fields(void **state) {
  archive_manifest mf;
  inferd_status st;
  const char *json = GOOD_MANIFEST;
  assert_int_equal(archive_manifest_parse(json, strlen(json), &mf, &st), INFERD_OK);
  assert_string_equal(mf.created_on, "01/02/2024 10:20:30");
  assert_string_equal(mf.runtime, "python");
  assert_string_equal(mf.archiver_version, "0.12.0");
  assert_string_equal(mf.model_name, "m");
  assert_string_equal(mf.model_version, "1.0");
  assert_string_equal(mf.serialized_file, "m.onnx");
  assert_string_equal(mf.handler, "image_classifier");
  archive_manifest_free(&mf);
  /* only what inferd needs is required; unknown fields are TorchServe's business */
  const char *lean = "{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"3\", \"serializedFile\": \"d/m.ONNX\", "
                     "\"requirementsFile\": \"r.txt\", \"extensions\": {}}}";
  assert_int_equal(archive_manifest_parse(lean, strlen(lean), &mf, &st), INFERD_OK);
  assert_null(mf.handler);
  assert_null(mf.created_on);
  assert_null(mf.config_file);
  assert_string_equal(mf.serialized_file, "d/m.ONNX");
  archive_manifest_free(&mf);
  /* torch-model-archiver --config-file: kept, so that registering can say it is not read */
  const char *with_config = "{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1.0\", "
                            "\"serializedFile\": \"m.onnx\", \"configFile\": \"model-config.yaml\"}}";
  assert_int_equal(archive_manifest_parse(with_config, strlen(with_config), &mf, &st), INFERD_OK);
  assert_string_equal(mf.config_file, "model-config.yaml");
  archive_manifest_free(&mf);

  static const struct {
    const char *json;
    inferd_code code;
    const char *want;
  } bad[] = {
      {"{\"model\": {\"modelName\": \"m\",\n  \"modelVersion\": \"1.0\" \"x\"}}", INFERD_INVALID_ARG, "line 2, column"},
      {"", INFERD_INVALID_ARG, "line 1"},
      {"[]", INFERD_INVALID_ARG, "JSON object"},
      {"{}", INFERD_INVALID_ARG, "no \"model\""},
      {"{\"model\": {\"modelVersion\": \"1\", \"serializedFile\": \"m.onnx\"}}", INFERD_INVALID_ARG, "no model.modelName"},
      {"{\"model\": {\"modelName\": \"m\", \"serializedFile\": \"m.onnx\"}}", INFERD_INVALID_ARG, "no model.modelVersion"},
      {"{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1\"}}", INFERD_INVALID_ARG, "no model.serializedFile"},
      {"{\"model\": {\"modelName\": \"m\", \"modelVersion\": 1, \"serializedFile\": \"m.onnx\"}}", INFERD_INVALID_ARG,
       "modelVersion must be a non-empty string"},
      {"{\"model\": {\"modelName\": \"a/b\", \"modelVersion\": \"1\", \"serializedFile\": \"m.onnx\"}}",
       INFERD_INVALID_ARG, "modelName 'a/b' is not a valid name"},
      {"{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1 0\", \"serializedFile\": \"m.onnx\"}}",
       INFERD_INVALID_ARG, "modelVersion '1 0'"},
      {"{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1\", \"serializedFile\": \"m.pt\"}}", INFERD_UNSUPPORTED,
       "'m.pt' is not an .onnx file"},
      {"{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1\", \"serializedFile\": \"../m.onnx\"}}",
       INFERD_INVALID_ARG, "'../m.onnx' is not a path inside"},
      {"{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1\", \"serializedFile\": \"/etc/m.onnx\"}}",
       INFERD_INVALID_ARG, "not a path inside"},
      {"{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1\", \"serializedFile\": \"a\\\\m.onnx\"}}",
       INFERD_INVALID_ARG, "not a path inside"},
      {"{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1\", \"serializedFile\": \"m.onnx\", \"handler\": \"\"}}",
       INFERD_INVALID_ARG, "model.handler must be a non-empty string"},
      {"{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1\", \"serializedFile\": \"m.onnx\", \"handler\": \"a\\nb\"}}",
       INFERD_INVALID_ARG, "control character"},
      {"{\"runtime\": 3, \"model\": {\"modelName\": \"m\", \"modelVersion\": \"1\", \"serializedFile\": \"m.onnx\"}}",
       INFERD_INVALID_ARG, "runtime must be"},
      {"{\"model\": {}, \"model\": {}}", INFERD_INVALID_ARG, "duplicate"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    inferd_code rc = archive_manifest_parse(bad[i].json, strlen(bad[i].json), &mf, &st);
    archive_manifest_free(&mf);
    if (rc != bad[i].code) fail_msg("case %zu: code %d, want %d (%s)", i, rc, bad[i].code, st.message);
    if (!strstr(st.message, bad[i].want)) fail_msg("case %zu: message '%s' lacks '%s'", i, st.message, bad[i].want);
  }
}

/* A .mar from archive_write reads back; so does the directory form. */
static void write_then_open(void **state) {
  const char *out = make_inputs();
  const char *extras[] = {tmp_path("index_to_name.json"), tmp_path("extra_dir")};
  archive_write_params w = {
      .model_name = "m",
      .serialized_file = tmp_path("m.onnx"),
      .handler = "image_classifier",
      .extra_files = extras,
      .extra_file_count = 2,
      .export_path = out,
  };
  char written[512];
  inferd_status st;
  if (archive_write(&w, written, sizeof written, &st) != INFERD_OK) fail_msg("%s", st.message);
  char want[512];
  snprintf(want, sizeof want, "%s/m.mar", out);
  assert_string_equal(written, want);

  for (int form = 0; form < 2; form++) {
    archive_model *m = open_ok(written);
    assert_int_equal(archive_get_kind(m), form == 0 ? ARCHIVE_MAR : ARCHIVE_DIRECTORY);
    assert_string_equal(archive_model_name(m), "m");
    assert_string_equal(archive_model_version(m), "1.0");
    assert_string_equal(archive_handler(m), "image_classifier");
    assert_string_equal(archive_serialized_file(m), "m.onnx");
    size_t size;
    const void *onnx = archive_onnx(m, &size);
    assert_int_equal(size, sizeof fake_onnx - 1);
    assert_memory_equal(onnx, fake_onnx, size);
    assert_true(archive_onnx_mapped(m)); /* the .mar's stored entry, or the directory's file */
    if (form == 0) assert_null(archive_onnx_dir(m)); /* external data: none from a .mar */
    else assert_string_equal(archive_onnx_dir(m), written);
    assert_int_equal(archive_file_count(m), 3); /* the hidden file stays out */
    assert_file(m, "index_to_name.json", "{\"0\": [\"n0\", \"zero\"]}");
    assert_file(m, "a.txt", "a");
    assert_file(m, "sub/b.txt", "bb");
    const char *json = archive_manifest_json(m);
    assert_non_null(strstr(json, "\"createdOn\": \""));
    assert_non_null(strstr(json, "\"runtime\": \"python\""));
    assert_non_null(strstr(json, "\"archiverVersion\": \""));
    /* torch-model-archiver's order: createdOn, runtime, model, archiverVersion */
    assert_true(strstr(json, "createdOn") < strstr(json, "runtime"));
    assert_true(strstr(json, "runtime") < strstr(json, "\"model\""));
    assert_true(strstr(json, "\"model\"") < strstr(json, "archiverVersion"));
    archive_close(m);
    if (form == 0) { /* now the same as a directory */
      w.format = ARCHIVE_FORMAT_NO_ARCHIVE;
      if (archive_write(&w, written, sizeof written, &st) != INFERD_OK) fail_msg("%s", st.message);
      snprintf(want, sizeof want, "%s/m", out);
      assert_string_equal(written, want);
    }
  }

  /* zip-store, a version, and a handler that is a file (copied in, named by its base) */
  w.format = ARCHIVE_FORMAT_ZIP_STORE;
  w.model_name = "stored";
  w.version = "2.5";
  w.handler = tmp_path("my_handler.so");
  w.extra_file_count = 0;
  assert_int_equal(archive_write(&w, written, sizeof written, &st), INFERD_OK);
  archive_model *m = open_ok(written);
  assert_string_equal(archive_model_version(m), "2.5");
  assert_string_equal(archive_handler(m), "my_handler.so");
  assert_file(m, "my_handler.so", "ELF?");
  archive_close(m);
}

/* A stored model entry is mapped in place only when its bytes have the CRC the zip's
 * directory lists; a changed byte falls back to libzip's read, which refuses it. */
static void stored_entry_checked(void **state) {
  const char *out = make_inputs();
  archive_write_params w = {.model_name = "crc", .serialized_file = tmp_path("m.onnx"), .handler = "h",
                            .export_path = out};
  char written[512];
  inferd_status st;
  if (archive_write(&w, written, sizeof written, &st) != INFERD_OK) fail_msg("%s", st.message);
  size_t size;
  unsigned char *bytes = read_bytes(written, &size);
  unsigned char *at = memmem(bytes, size, fake_onnx, sizeof fake_onnx - 1);
  assert_non_null(at); /* stored: the model's bytes are in the file as they are */
  assert_non_null(memmem(at + 1, size - (size_t)(at + 1 - bytes), "PK\1\2", 4)); /* directory after it */
  at[6] ^= 0x20; /* "pytorch" -> "pyTorch" */
  write_bytes(written, bytes, size);
  free(bytes);
  open_fails(written, NULL, INFERD_INVALID_ARG, "m.onnx");
}

static void write_errors(void **state) {
  make_inputs();
  const char *out = tmp_path("werr");
  mkdir(out, 0755);
  const char *dup[] = {tmp_path("index_to_name.json"), tmp_path("index_to_name.json")};
  const char *missing[] = {tmp_path("nope.json")};
  const char *manifest_clash[] = {tmp_path("marinf")};
  mkdir(tmp_path("marinf"), 0755);
  mkdir(tmp_path("marinf/MAR-INF"), 0755);
  write_bytes(tmp_path("marinf/MAR-INF/MANIFEST.json"), "{}", 2);
  write_bytes(tmp_path("model.pt"), "pt", 2);
  /* names the reader refuses (archive__valid_entry_name): refused before anything is written */
  write_bytes(tmp_path("back\\slash.json"), "{}", 2);
  const char *backslash[] = {tmp_path("back\\slash.json")};
  mkdir(tmp_path("odd_dir"), 0755);
  write_bytes(tmp_path("odd_dir/new\nline.txt"), "x", 1);
  const char *newline_in_dir[] = {tmp_path("odd_dir")};
  write_bytes(tmp_path("tab\there.onnx"), fake_onnx, sizeof fake_onnx - 1);
  struct {
    archive_write_params w;
    inferd_code code;
    const char *want;
  } cases[] = {
      {{.model_name = "m", .serialized_file = tmp_path("absent.onnx"), .handler = "h", .export_path = out},
       INFERD_NOT_FOUND, "absent.onnx"},
      {{.model_name = "m", .serialized_file = tmp_path("model.pt"), .handler = "h", .export_path = out},
       INFERD_INVALID_ARG, "not an .onnx file"},
      {{.model_name = "bad name", .serialized_file = tmp_path("m.onnx"), .handler = "h", .export_path = out},
       INFERD_INVALID_ARG, "model name 'bad name'"},
      {{.model_name = "m", .serialized_file = tmp_path("m.onnx"), .handler = "h", .version = "1/2", .export_path = out},
       INFERD_INVALID_ARG, "version '1/2'"},
      {{.model_name = "m", .serialized_file = tmp_path("m.onnx"), .handler = "", .export_path = out},
       INFERD_INVALID_ARG, "no handler"},
      {{.model_name = "m", .serialized_file = tmp_path("m.onnx"), .handler = "./nope.so", .export_path = out},
       INFERD_NOT_FOUND, "handler file './nope.so'"},
      {{.model_name = "m", .serialized_file = tmp_path("m.onnx"), .handler = "nope.so", .export_path = out},
       INFERD_NOT_FOUND, "handler file 'nope.so'"},
      {{.model_name = "m", .serialized_file = tmp_path("m.onnx"), .handler = "h", .export_path = tmp_path("nodir")},
       INFERD_NOT_FOUND, "export path"},
      {{.model_name = "m", .serialized_file = tmp_path("m.onnx"), .handler = "h", .export_path = out,
        .extra_files = dup, .extra_file_count = 2},
       INFERD_INVALID_ARG, "would both be 'index_to_name.json'"},
      {{.model_name = "m", .serialized_file = tmp_path("m.onnx"), .handler = "h", .export_path = out,
        .extra_files = missing, .extra_file_count = 1},
       INFERD_NOT_FOUND, "nope.json"},
      {{.model_name = "m", .serialized_file = tmp_path("m.onnx"), .handler = "h", .export_path = out,
        .extra_files = manifest_clash, .extra_file_count = 1},
       INFERD_INVALID_ARG, "manifest"},
      {{.model_name = "m", .serialized_file = tmp_path("m.onnx"), .handler = "h", .export_path = out,
        .extra_files = backslash, .extra_file_count = 1},
       INFERD_INVALID_ARG, "'back\\slash.json' cannot be an entry name"},
      {{.model_name = "m", .serialized_file = tmp_path("m.onnx"), .handler = "h", .export_path = out,
        .extra_files = newline_in_dir, .extra_file_count = 1, .format = ARCHIVE_FORMAT_NO_ARCHIVE},
       INFERD_INVALID_ARG, "'new\\x0aline.txt' cannot be an entry name"},
      {{.model_name = "m", .serialized_file = tmp_path("tab\there.onnx"), .handler = "h", .export_path = out},
       INFERD_INVALID_ARG, "'tab\\x09here.onnx' cannot be an entry name"},
  };
  inferd_status st;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    inferd_code rc = archive_write(&cases[i].w, NULL, 0, &st);
    if (rc != cases[i].code) fail_msg("case %zu: code %d, want %d (%s)", i, rc, cases[i].code, st.message);
    if (!strstr(st.message, cases[i].want)) fail_msg("case %zu: '%s' lacks '%s'", i, st.message, cases[i].want);
    assert_int_equal(access(tmp_path("werr/m.mar"), F_OK), -1); /* nothing half-written */
    assert_int_equal(access(tmp_path("werr/m"), F_OK), -1);
  }

  /* an existing archive: refused without force, replaced with it */
  archive_write_params w = {.model_name = "m", .serialized_file = tmp_path("m.onnx"), .handler = "h", .export_path = out};
  assert_int_equal(archive_write(&w, NULL, 0, &st), INFERD_OK);
  size_t before_size;
  void *before = read_bytes(tmp_path("werr/m.mar"), &before_size);
  w.handler = "other";
  assert_int_equal(archive_write(&w, NULL, 0, &st), INFERD_ALREADY_EXISTS);
  assert_non_null(strstr(st.message, "already exists"));
  size_t after_size;
  void *after = read_bytes(tmp_path("werr/m.mar"), &after_size);
  assert_int_equal(after_size, before_size);
  assert_memory_equal(after, before, before_size);
  free(after);
  w.force = true;
  assert_int_equal(archive_write(&w, NULL, 0, &st), INFERD_OK);
  archive_model *m = open_ok(tmp_path("werr/m.mar"));
  assert_string_equal(archive_handler(m), "other");
  archive_close(m);
  free(before);
  /* the directory form too */
  w.format = ARCHIVE_FORMAT_NO_ARCHIVE;
  w.force = false;
  assert_int_equal(archive_write(&w, NULL, 0, &st), INFERD_OK);
  assert_int_equal(archive_write(&w, NULL, 0, &st), INFERD_ALREADY_EXISTS);
  w.force = true;
  assert_int_equal(archive_write(&w, NULL, 0, &st), INFERD_OK);
}

/* --force on the directory form replaces it whole: an extra file of the old one does
 * not stay (it would be read as part of the new model), no temporary directory is left,
 * and a link to a model directory stays a link to the new one. */
static void directory_replaced(void **state) {
  make_inputs();
  char out[256], labels[256];
  snprintf(out, sizeof out, "%s", tmp_path("dforce"));
  snprintf(labels, sizeof labels, "%s", tmp_path("index_to_name.json"));
  mkdir(out, 0755);
  const char *extras[] = {labels};
  archive_write_params w = {.model_name = "m", .serialized_file = tmp_path("m.onnx"), .handler = "h",
                            .export_path = out, .format = ARCHIVE_FORMAT_NO_ARCHIVE, .force = true,
                            .extra_files = extras, .extra_file_count = 1};
  inferd_status st;
  if (archive_write(&w, NULL, 0, &st) != INFERD_OK) fail_msg("%s", st.message);
  assert_int_equal(access(tmp_path("dforce/m/index_to_name.json"), F_OK), 0);
  w.extra_file_count = 0;
  if (archive_write(&w, NULL, 0, &st) != INFERD_OK) fail_msg("%s", st.message);
  assert_int_equal(access(tmp_path("dforce/m/index_to_name.json"), F_OK), -1);
  archive_model *m = open_ok(tmp_path("dforce/m"));
  assert_int_equal(archive_file_count(m), 0);
  archive_close(m);
  DIR *d = opendir(out);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));)
    if (strstr(e->d_name, ".tmp")) fail_msg("a temporary directory was left: %s", e->d_name);
  closedir(d);
  assert_int_equal(rename(tmp_path("dforce/m"), tmp_path("dforce/real")), 0);
  assert_int_equal(symlink("real", tmp_path("dforce/m")), 0);
  w.extra_file_count = 1;
  if (archive_write(&w, NULL, 0, &st) != INFERD_OK) fail_msg("through a link: %s", st.message);
  struct stat sb;
  assert_int_equal(lstat(tmp_path("dforce/m"), &sb), 0);
  assert_true(S_ISLNK(sb.st_mode));
  assert_int_equal(access(tmp_path("dforce/real/index_to_name.json"), F_OK), 0);
}

/* only_files: the other extra files are neither read nor listed, and do not count
 * against max_extra_bytes; the manifest's configFile is read all the same. */
static void only_some_files(void **state) {
  make_inputs();
  char out[256], labels[256], big[256], yaml[256];
  snprintf(out, sizeof out, "%s", tmp_path("only"));
  snprintf(labels, sizeof labels, "%s", tmp_path("index_to_name.json"));
  snprintf(big, sizeof big, "%s", tmp_path("model.pt"));
  snprintf(yaml, sizeof yaml, "%s", tmp_path("model-config.yaml"));
  mkdir(out, 0755);
  size_t big_size = 2 << 20;
  char *bytes = malloc(big_size);
  assert_non_null(bytes);
  for (size_t i = 0; i < big_size; i++) bytes[i] = (char)(i * 2654435761u >> 24); /* hardly compresses */
  write_bytes(big, bytes, big_size);
  free(bytes);
  write_bytes(yaml, "batchSize: 4\n", 13);
  const char *extras[] = {labels, big};
  for (int form = 0; form < 2; form++) {
    archive_write_params w = {.model_name = "o", .serialized_file = tmp_path("m.onnx"), .handler = "h",
                              .export_path = out, .extra_files = extras, .extra_file_count = 2,
                              .config_file = yaml, .force = true,
                              .format = form ? ARCHIVE_FORMAT_NO_ARCHIVE : ARCHIVE_FORMAT_DEFAULT};
    char written[512];
    inferd_status st;
    if (archive_write(&w, written, sizeof written, &st) != INFERD_OK) fail_msg("%s", st.message);
    archive_params all = {.max_extra_bytes = 1 << 20};
    open_fails(written, &all, INFERD_TOO_LARGE, "extra files hold more than 1048576 bytes (at 'model.pt')");
    const char *used[] = {"index_to_name.json"};
    archive_params some = {.max_extra_bytes = 1 << 20, .only_files = used, .only_file_count = 1};
    archive_model *m = NULL;
    if (archive_open(written, &some, &m, &st) != INFERD_OK) fail_msg("%s: %s", written, st.message);
    assert_int_equal(archive_file_count(m), 2);
    assert_file(m, "index_to_name.json", "{\"0\": [\"n0\", \"zero\"]}");
    assert_file(m, "model-config.yaml", "batchSize: 4\n");
    assert_null(archive_file(m, "model.pt", NULL));
    archive_close(m);
  }
}

static void bare_onnx(void **state) {
  write_bytes(tmp_path("resnet-18.onnx"), fake_onnx, sizeof fake_onnx - 1);
  archive_model *m = open_ok(tmp_path("resnet-18.onnx"));
  assert_int_equal(archive_get_kind(m), ARCHIVE_ONNX);
  assert_string_equal(archive_model_name(m), "resnet-18");
  assert_string_equal(archive_model_version(m), "1.0");
  assert_null(archive_handler(m));
  assert_null(archive_manifest_json(m));
  assert_string_equal(archive_serialized_file(m), "resnet-18.onnx");
  size_t size;
  assert_memory_equal(archive_onnx(m, &size), fake_onnx, sizeof fake_onnx - 1);
  assert_true(archive_onnx_mapped(m));
  char *dir = strdup(tmp_path("resnet-18.onnx"));
  assert_non_null(dir);
  *strrchr(dir, '/') = '\0';
  assert_string_equal(archive_onnx_dir(m), dir); /* where its external data would lie */
  free(dir);
  assert_int_equal(archive_file_count(m), 0);
  archive_close(m);
  write_bytes(tmp_path("a b.onnx"), fake_onnx, 4);
  open_fails(tmp_path("a b.onnx"), NULL, INFERD_INVALID_ARG, "'a b' is not a valid model name");
  write_bytes(tmp_path("empty.onnx"), "", 0);
  open_fails(tmp_path("empty.onnx"), NULL, INFERD_INVALID_ARG, "empty");
}

/* The real model, through a .mar, into the engine. */
static void mobilenet_through_mar(void **state) {
  const char *onnx_path = INFERD_SOURCE_DIR "/models/mobilenet_v2_imagenet.onnx";
  const char *labels = INFERD_SOURCE_DIR "/models/index_to_name.json";
  mkdir(tmp_path("real"), 0755);
  archive_write_params w = {.model_name = "mobilenet", .serialized_file = onnx_path, .handler = "image_classifier",
                            .extra_files = &labels, .extra_file_count = 1, .export_path = tmp_path("real")};
  inferd_status st;
  char written[512];
  if (archive_write(&w, written, sizeof written, &st) != INFERD_OK) fail_msg("%s", st.message);
  archive_model *m = open_ok(written);
  size_t size, file_size, labels_size;
  const void *onnx = archive_onnx(m, &size);
  void *file = read_bytes(onnx_path, &file_size);
  assert_int_equal(size, file_size);
  assert_memory_equal(onnx, file, size);
  free(file);
  void *label_bytes = read_bytes(labels, &labels_size);
  const void *in_archive = archive_file(m, "index_to_name.json", &size);
  assert_int_equal(size, labels_size);
  assert_memory_equal(in_archive, label_bytes, size);
  free(label_bytes);
  /* Mapped in place: the engine drops the pages it has copied (mapped_file), which must
   * change neither what the mapping reads nor what the model computes. */
  assert_true(archive_onnx_mapped(m));
  inferd_model *model = NULL, *direct = NULL;
  inferd_model_params mp = {.mapped_file = archive_onnx_mapped(m)};
  if (inferd_model_load_memory(onnx, archive_onnx(m, &size) ? size : 0, &mp, &model, &st) != INFERD_OK)
    fail_msg("engine: %s", st.message);
  file = read_bytes(onnx_path, &file_size);
  assert_memory_equal(onnx, file, file_size);
  free(file);
  archive_release_onnx(m); /* the engine holds its own weights */
  if (inferd_model_load(onnx_path, NULL, &direct, &st) != INFERD_OK) fail_msg("engine: %s", st.message);
  assert_int_equal(inferd_model_num_inputs(model), 1);
  enum { ITEM = 3 * 224 * 224, CLASSES = 1000 };
  float *in = malloc(ITEM * sizeof *in), *got = malloc(CLASSES * sizeof *got), *want = malloc(CLASSES * sizeof *want);
  assert_true(in && got && want);
  for (int i = 0; i < ITEM; i++) in[i] = (float)((i * 7919) % 255) / 255.0f - 0.5f;
  inferd_session *a = NULL, *b = NULL;
  inferd_session_params sp = {.threads = 1};
  if (inferd_session_new(model, &sp, &a, &st) != INFERD_OK || inferd_session_new(direct, &sp, &b, &st) != INFERD_OK)
    fail_msg("session: %s", st.message);
  const float *ins[1] = {in};
  float *got_out[1] = {got}, *want_out[1] = {want};
  if (inferd_session_run(a, 1, ins, got_out, &st) != INFERD_OK || inferd_session_run(b, 1, ins, want_out, &st) != INFERD_OK)
    fail_msg("run: %s", st.message);
  assert_memory_equal(got, want, CLASSES * sizeof *got); /* same weights, same plan: bit for bit */
  inferd_session_free(a);
  inferd_session_free(b);
  free(in);
  free(got);
  free(want);
  inferd_model_free(model);
  inferd_model_free(direct);
  archive_close(m);
}

/* ==== malformed archives ========================================================================= */

static void malformed_archives(void **state) {
  open_fails(tmp_path("does-not-exist.mar"), NULL, INFERD_NOT_FOUND, "does-not-exist.mar");
  write_bytes(tmp_path("notes.txt"), "hello", 5);
  open_fails(tmp_path("notes.txt"), NULL, INFERD_INVALID_ARG, "neither a .mar");
  write_bytes(tmp_path("m.tar.gz"), "\x1f\x8b", 2);
  open_fails(tmp_path("m.tar.gz"), NULL, INFERD_UNSUPPORTED, "tgz");
  write_bytes(tmp_path("junk.mar"), "PK\x03\x04 this is no zip", 20);
  open_fails(tmp_path("junk.mar"), NULL, INFERD_INVALID_ARG, "not a valid zip file");
  /* a truncated archive */
  write_bytes(tmp_path("cut.mar"), python_mar, sizeof python_mar / 2);
  open_fails(tmp_path("cut.mar"), NULL, INFERD_INVALID_ARG, "cut.mar");

  const zip_item onnx = {"m.onnx", "model"};
  zip_item no_manifest[] = {onnx, {"index_to_name.json", "{}"}};
  zip_fails(no_manifest, 2, INFERD_INVALID_ARG, "no MAR-INF/MANIFEST.json");
  zip_item bad_json[] = {onnx, {"MAR-INF/MANIFEST.json", "{\n  \"model\": {\n    \"modelName\": \"m\",\n  ]\n}"}};
  zip_fails(bad_json, 2, INFERD_INVALID_ARG, "MAR-INF/MANIFEST.json: line 4, column 3");
  zip_item no_serialized[] = {onnx, {"MAR-INF/MANIFEST.json", "{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1\"}}"}};
  zip_fails(no_serialized, 2, INFERD_INVALID_ARG, "no model.serializedFile");
  zip_item pt[] = {{"m.pt", "x"},
                   {"MAR-INF/MANIFEST.json",
                    "{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1\", \"serializedFile\": \"m.pt\"}}"}};
  zip_fails(pt, 2, INFERD_UNSUPPORTED, "not an .onnx file");
  zip_item absent[] = {{"MAR-INF/MANIFEST.json", GOOD_MANIFEST}};
  zip_fails(absent, 1, INFERD_INVALID_ARG, "serializedFile 'm.onnx' is not in the archive");
  zip_item empty_onnx[] = {{"m.onnx", ""}, {"MAR-INF/MANIFEST.json", GOOD_MANIFEST}};
  zip_fails(empty_onnx, 2, INFERD_INVALID_ARG, "empty");
  static const char *const traversal[] = {"../evil.txt", "/abs.txt", "a/../../b", "a\\b", "./x", "a//b"};
  for (size_t i = 0; i < sizeof traversal / sizeof *traversal; i++) {
    zip_item items[] = {onnx, {traversal[i], "x"}, {"MAR-INF/MANIFEST.json", GOOD_MANIFEST}};
    zip_fails(items, 3, INFERD_INVALID_ARG, "is not a path inside the archive");
  }
  /* a control character in a name: libzip will not write it, so patch it in, and mark
   * the name UTF-8 (general purpose bit 11), else libzip reads it as CP437 and turns
   * \x01 into U+263A (harmless). libzip's consistency check may refuse it first. */
  zip_item ctl[] = {onnx, {"ctl#", "x"}, {"MAR-INF/MANIFEST.json", GOOD_MANIFEST}};
  make_zip(tmp_path("ctl.mar"), ctl, 3);
  size_t size;
  unsigned char *data = read_bytes(tmp_path("ctl.mar"), &size);
  for (size_t i = 0; i + 50 <= size; i++) {
    if (memcmp(data + i, "PK\x01\x02", 4) == 0 && memcmp(data + i + 46, "ctl#", 4) == 0) data[i + 9] |= 0x08;
    if (memcmp(data + i, "PK\x03\x04", 4) == 0 && memcmp(data + i + 30, "ctl#", 4) == 0) data[i + 7] |= 0x08;
  }
  for (size_t i = 0; i + 4 <= size; i++)
    if (memcmp(data + i, "ctl#", 4) == 0) data[i + 3] = 1;
  archive_model *m = NULL;
  inferd_status st;
  assert_int_equal(archive_open_memory(data, size, NULL, &m, &st), INFERD_INVALID_ARG);
  if (!strstr(st.message, "is not a path inside the archive") && !strstr(st.message, "inconsistent"))
    fail_msg("message: %s", st.message);
  free(data);
  /* a directory entry is fine */
  zip_item with_dir[] = {onnx, {"labels/", ""}, {"labels/x.txt", "x"}, {"MAR-INF/MANIFEST.json", GOOD_MANIFEST}};
  make_zip(tmp_path("dir.mar"), with_dir, 4);
  m = open_ok(tmp_path("dir.mar"));
  assert_int_equal(archive_file_count(m), 1);
  assert_file(m, "labels/x.txt", "x");
  archive_close(m);
}

/* Two entries with one name: libzip will not write that, so patch "b.txt" into "a.txt".
 * (libzip's consistency check refuses such an archive with only "File already exists";
 * the message must name the entry.) */
static void duplicate_entries(void **state) {
  zip_item items[] = {{"m.onnx", "model"}, {"a.txt", "1"}, {"b.txt", "2"}, {"MAR-INF/MANIFEST.json", GOOD_MANIFEST}};
  const char *path = tmp_path("dup.mar");
  make_zip(path, items, 4);
  size_t size;
  unsigned char *data = read_bytes(path, &size);
  int patched = 0;
  for (size_t i = 0; i + 5 <= size; i++)
    if (memcmp(data + i, "b.txt", 5) == 0) {
      data[i] = 'a';
      patched++;
    }
  assert_int_equal(patched, 2); /* the local header and the central directory */
  archive_model *m = NULL;
  inferd_status st;
  assert_int_not_equal(archive_open_memory(data, size, NULL, &m, &st), INFERD_OK);
  assert_null(m);
  if (!strstr(st.message, "two entries named 'a.txt'"))
    fail_msg("message '%s' does not name the duplicate 'a.txt'", st.message);
  /* the same from a file */
  write_bytes(path, data, size);
  assert_int_not_equal(archive_open(path, NULL, &m, &st), INFERD_OK);
  assert_null(m);
  if (!strstr(st.message, "two entries named 'a.txt'"))
    fail_msg("message '%s' does not name the duplicate 'a.txt'", st.message);
  free(data);
}

/* Zip bombs: too many entries, too many bytes, and an entry longer than it says. */
static void zip_bombs(void **state) {
  char *big = malloc(3 << 20);
  memset(big, 'z', 3 << 20);
  big[(3 << 20) - 1] = '\0';
  zip_item items[] = {{"m.onnx", "model"}, {"big.txt", big}, {"c.txt", "c"}, {"MAR-INF/MANIFEST.json", GOOD_MANIFEST}};
  const char *path = tmp_path("bomb.mar");
  make_zip(path, items, 4);
  free(big);
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_true(sb.st_size < 64 << 10); /* it compresses well: the point of a bomb */
  archive_params entries = {.max_entries = 3};
  open_fails(path, &entries, INFERD_TOO_LARGE, "4 entries; at most 3");
  archive_params total = {.max_total_bytes = 1 << 20};
  open_fails(path, &total, INFERD_TOO_LARGE, "more than 1048576 bytes");
  archive_params extra = {.max_extra_bytes = 1 << 20};
  open_fails(path, &extra, INFERD_TOO_LARGE, "big.txt");
  archive_model *m = open_ok(path); /* within the default caps */
  size_t size;
  assert_non_null(archive_file(m, "big.txt", &size));
  assert_int_equal(size, (3 << 20) - 1);
  archive_close(m);

  /* a header that understates c.txt's size: patch the 4-byte sizes of "c.txt" in the
   * central directory (offset 24 from its signature) and its local header (22) */
  zip_item small[] = {{"m.onnx", "model"}, {"c.txt", "cccccccccccccccccccc"}, {"MAR-INF/MANIFEST.json", GOOD_MANIFEST}};
  make_zip(path, small, 3);
  unsigned char *data = read_bytes(path, &size);
  int patched = 0;
  for (size_t i = 0; i + 46 + 5 <= size; i++) {
    if (memcmp(data + i, "PK\x01\x02", 4) == 0 && memcmp(data + i + 46, "c.txt", 5) == 0) {
      data[i + 24] = 4;
      patched++;
    }
    if (memcmp(data + i, "PK\x03\x04", 4) == 0 && memcmp(data + i + 30, "c.txt", 5) == 0) {
      data[i + 22] = 4;
      patched++;
    }
  }
  assert_int_equal(patched, 2);
  inferd_status st;
  m = NULL;
  assert_int_equal(archive_open_memory(data, size, NULL, &m, &st), INFERD_INVALID_ARG);
  assert_null(m);
  print_message("understated size: %s\n", st.message);
  if (!strstr(st.message, "c.txt")) fail_msg("message '%s' lacks 'c.txt'", st.message);
  free(data);
}

/* Names sit at most ARCHIVE__MAX_DIRECTORIES (15) directories deep in all three forms:
 * the directory walk stops there, and a manifest whose serializedFile lay 16 deep was
 * accepted, then its directory refused (fuzz_manifest). */
static void deep_names(void **state) {
  (void)state;
  char deep15[64] = "", deep16[80]; /* 30 and 32 characters */
  for (int i = 0; i < 15; i++) strcat(deep15, "d/");
  snprintf(deep16, sizeof deep16, "d/%s", deep15);
  char file15[300], file16[300], dir16[300];
  snprintf(file15, sizeof file15, "%sm.onnx", deep15);
  snprintf(file16, sizeof file16, "%sm.onnx", deep16);
  snprintf(dir16, sizeof dir16, "%s", deep16);
  assert_true(archive__valid_entry_name(file15, false));
  assert_false(archive__valid_entry_name(file16, false));
  assert_true(archive__valid_entry_name(deep15, true));
  assert_false(archive__valid_entry_name(dir16, true));

  char json[1024];
  archive_manifest mf;
  inferd_status st;
  snprintf(json, sizeof json, "{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1\", \"serializedFile\": \"%s\"}}",
           file16);
  assert_int_equal(archive_manifest_parse(json, strlen(json), &mf, &st), INFERD_INVALID_ARG);
  archive_manifest_free(&mf);
  snprintf(json, sizeof json, "{\"model\": {\"modelName\": \"m\", \"modelVersion\": \"1\", \"serializedFile\": \"%s\"}}",
           file15);
  assert_int_equal(archive_manifest_parse(json, strlen(json), &mf, &st), INFERD_OK);
  archive_manifest_free(&mf);

  /* the 15-deep one opens as a directory */
  char path[1024];
  snprintf(path, sizeof path, "%s", tmp_path("deep"));
  mkdir(path, 0755);
  strcat(path, "/MAR-INF");
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/MAR-INF/MANIFEST.json", tmp_path("deep"));
  write_bytes(path, json, strlen(json));
  snprintf(path, sizeof path, "%s", tmp_path("deep"));
  for (int i = 0; i < 15; i++) {
    strcat(path, "/d");
    mkdir(path, 0755);
  }
  strcat(path, "/m.onnx");
  write_bytes(path, "onnx", 4);
  archive_model *m = NULL;
  if (archive_open(tmp_path("deep"), NULL, &m, &st) != INFERD_OK) fail_msg("15 deep: %s", st.message);
  assert_string_equal(archive_serialized_file(m), file15);
  archive_close(m);
}

static void directory_errors(void **state) {
  mkdir(tmp_path("empty_dir"), 0755);
  open_fails(tmp_path("empty_dir"), NULL, INFERD_INVALID_ARG, "no MAR-INF/MANIFEST.json");
  mkdir(tmp_path("d2"), 0755);
  mkdir(tmp_path("d2/MAR-INF"), 0755);
  write_bytes(tmp_path("d2/MAR-INF/MANIFEST.json"), GOOD_MANIFEST, strlen(GOOD_MANIFEST));
  open_fails(tmp_path("d2"), NULL, INFERD_INVALID_ARG, "serializedFile 'm.onnx' is not in the directory");
  write_bytes(tmp_path("d2/MAR-INF/MANIFEST.json"), "{\"model\": 1}", 12);
  open_fails(tmp_path("d2"), NULL, INFERD_INVALID_ARG, "d2: MAR-INF/MANIFEST.json: no \"model\" object");
}

/* A FIFO in the model store is refused at once, naming it: opened without O_NONBLOCK,
 * each open below would wait for ever for a writer. alarm() turns such a regression
 * into a failed test (SIGALRM ends the process) instead of a hang. */
static void fifos_refused(void **state) {
  alarm(20);
  mkdir(tmp_path("fifo_manifest"), 0755);
  mkdir(tmp_path("fifo_manifest/MAR-INF"), 0755);
  assert_int_equal(mkfifo(tmp_path("fifo_manifest/MAR-INF/MANIFEST.json"), 0644), 0);
  open_fails(tmp_path("fifo_manifest"), NULL, INFERD_INVALID_ARG, "MANIFEST.json: not a regular file (a FIFO)");

  mkdir(tmp_path("fifo_onnx"), 0755);
  mkdir(tmp_path("fifo_onnx/MAR-INF"), 0755);
  write_bytes(tmp_path("fifo_onnx/MAR-INF/MANIFEST.json"), GOOD_MANIFEST, strlen(GOOD_MANIFEST));
  assert_int_equal(mkfifo(tmp_path("fifo_onnx/m.onnx"), 0644), 0);
  open_fails(tmp_path("fifo_onnx"), NULL, INFERD_INVALID_ARG, "fifo_onnx/m.onnx: not a regular file (a FIFO)");

  /* an extra file that is a FIFO is skipped, as any file that is not regular */
  assert_int_equal(unlink(tmp_path("fifo_onnx/m.onnx")), 0);
  write_bytes(tmp_path("fifo_onnx/m.onnx"), fake_onnx, sizeof fake_onnx - 1);
  assert_int_equal(mkfifo(tmp_path("fifo_onnx/labels.txt"), 0644), 0);
  archive_model *m = open_ok(tmp_path("fifo_onnx"));
  assert_null(archive_file(m, "labels.txt", NULL));
  archive_close(m);

  /* core_file_map (bare .onnx files, labels next to them, `inferd run`) */
  assert_int_equal(mkfifo(tmp_path("pipe.onnx"), 0644), 0);
  const void *data = NULL;
  size_t size = 0;
  inferd_status st = {0};
  assert_int_equal(core_file_map(tmp_path("pipe.onnx"), &data, &size, &st), INFERD_INVALID_ARG);
  if (!strstr(st.message, "pipe.onnx: not a regular file (a FIFO)")) fail_msg("message '%s'", st.message);
  open_fails(tmp_path("pipe.onnx"), NULL, INFERD_INVALID_ARG, "pipe.onnx");
  alarm(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(opens_python_mar),
      cmocka_unit_test(before_copy_asked_first),
      cmocka_unit_test(streamed_zip),
      cmocka_unit_test(manifest_fields),
      cmocka_unit_test(write_then_open),
      cmocka_unit_test(stored_entry_checked),
      cmocka_unit_test(write_errors),
      cmocka_unit_test(directory_replaced),
      cmocka_unit_test(only_some_files),
      cmocka_unit_test(bare_onnx),
      cmocka_unit_test(mobilenet_through_mar),
      cmocka_unit_test(malformed_archives),
      cmocka_unit_test(duplicate_entries),
      cmocka_unit_test(zip_bombs),
      cmocka_unit_test(directory_errors),
      cmocka_unit_test(deep_names),
      cmocka_unit_test(fifos_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
