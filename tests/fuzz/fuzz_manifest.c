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
 *
 * A zip is opened a second time as a file (a memfd, by its /proc/self/fd path), the
 * way the server opens its model store: there a stored .onnx entry is not read through
 * libzip but mapped in place, found by its local header (map_stored_entry). The two
 * opens must agree: both refuse, or both give the same manifest, the same .onnx bytes
 * and the same extra files.
 *
 * The third form of the model store, a directory (an unpacked .mar, open_directory), is
 * checked against the other two: an archive that opened is unpacked into a fresh
 * directory under /dev/shm (when its names fit a file system: no name component over
 * 255 bytes, no file where another needs a directory), which must open to the same
 * manifest, .onnx bytes and extra files. A manifest that parsed is written as the
 * MANIFEST.json of a directory holding its serializedFile, which must open with the
 * same model name, version and handler.
 *
 * An archive that opened is opened once more reading only its labels, as the server
 * does (archive_params.only_files): it must open, with exactly the labels and the
 * configFile of the full read, byte for byte.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* The bytes as a file, opened by path; NULL when it is refused (status in *st). The
 * memfd is closed once opened: the mapping and libzip's own descriptor keep it. */
static archive_model *open_as_file(const uint8_t *data, size_t size, const archive_params *params, inferd_code *rc,
                                   inferd_status *st) {
  int fd = memfd_create("fuzz_manifest.mar", MFD_CLOEXEC);
  if (fd < 0) fail("memfd_create");
  for (size_t done = 0; done < size;) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) fail("write to the memfd");
    done += (size_t)n;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  archive_model *a = NULL;
  *rc = archive_open(path, params, &a, st);
  close(fd);
  return a;
}

static bool same_text(const char *x, const char *y) { return x && y && strcmp(x, y) == 0; }

/* What the memfd open gave against what the in-memory open gave. */
static void check_same(const archive_model *mem, const archive_model *file) {
  if (!same_text(archive_model_name(mem), archive_model_name(file)) ||
      !same_text(archive_model_version(mem), archive_model_version(file)) ||
      !same_text(archive_manifest_json(mem), archive_manifest_json(file)))
    fail("the file's manifest differs from the memory's");
  size_t mem_size, file_size;
  const void *mem_onnx = archive_onnx(mem, &mem_size), *file_onnx = archive_onnx(file, &file_size);
  if (!file_onnx || file_size != mem_size || memcmp(mem_onnx, file_onnx, mem_size) != 0)
    fail("the file's .onnx bytes differ from the memory's");
  if (archive_file_count(mem) != archive_file_count(file)) fail("the file has another number of extra files");
  for (int i = 0; i < archive_file_count(mem); i++) {
    const char *name;
    size_t n, m = SIZE_MAX; /* archive_file leaves it when it has no such file */
    const void *x = archive_file_at(mem, i, &name, &n);
    const void *y = archive_file(file, name, &m);
    if (m != n || (n && memcmp(x, y, n) != 0)) fail("an extra file differs between file and memory");
  }
}

/* ---- the directory form ---------------------------------------------------------------- */

static char dir_base[64]; /* made once; each input's directory is removed after it */

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb, (void)type, (void)ftw;
  return remove(path);
}

static void remove_base(void) { nftw(dir_base, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* A fresh empty directory for this input. */
static const char *fresh_directory(void) {
  static char dir[128];
  if (!dir_base[0]) {
    snprintf(dir_base, sizeof dir_base, "%s/fuzz_manifest.XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir_base)) fail("mkdtemp");
    atexit(remove_base);
  }
  snprintf(dir, sizeof dir, "%s/m", dir_base);
  nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (mkdir(dir, 0755) != 0) fail("mkdir");
  return dir;
}

/* Writes root/name (making its directories); false when the file system refuses the
 * name (a component over 255 bytes, a file in the way of a directory). */
static bool put(const char *root, const char *name, const void *data, size_t size) {
  char path[8192];
  if (snprintf(path, sizeof path, "%s/%s", root, name) >= (int)sizeof path) return false;
  for (char *slash = strchr(path + strlen(root) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
    *slash = '\0';
    bool made = mkdir(path, 0755) == 0 || errno == EEXIST;
    *slash = '/';
    if (!made) return false;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  for (size_t done = 0; done < size;) {
    ssize_t n = write(fd, (const char *)data + done, size - done);
    if (n <= 0) fail("write");
    done += (size_t)n;
  }
  close(fd);
  return true;
}

/* The opened archive, unpacked into a directory, opens to the same model. */
static void check_directory_of(const archive_model *a, const archive_params *params) {
  const char *dir = fresh_directory();
  size_t onnx_size;
  const void *onnx = archive_onnx(a, &onnx_size);
  const char *manifest = archive_manifest_json(a);
  if (!put(dir, "MAR-INF/MANIFEST.json", manifest, strlen(manifest)) ||
      !put(dir, archive_serialized_file(a), onnx, onnx_size))
    return;
  for (int i = 0; i < archive_file_count(a); i++) {
    const char *name;
    size_t n;
    const void *bytes = archive_file_at(a, i, &name, &n);
    if (!put(dir, name, bytes, n)) return;
  }
  archive_model *d = NULL;
  inferd_status st = {0};
  inferd_code rc = archive_open(dir, params, &d, &st);
  if (rc != INFERD_OK) {
    fprintf(stderr, "fuzz_manifest: %s\n", st.message);
    fail("the archive unpacked into a directory is refused");
  }
  if (archive_get_kind(d) != ARCHIVE_DIRECTORY) fail("a directory that is not ARCHIVE_DIRECTORY");
  check_same(a, d);
  archive_close(d);
}

/* A manifest that parsed, as the MANIFEST.json of a directory with its serializedFile. */
static void check_directory_manifest(const uint8_t *data, size_t size, const archive_manifest *m) {
  const char *dir = fresh_directory();
  if (!put(dir, "MAR-INF/MANIFEST.json", data, size) || !put(dir, m->serialized_file, "onnx", 4)) return;
  archive_model *d = NULL;
  inferd_status st = {0};
  if (archive_open(dir, NULL, &d, &st) != INFERD_OK) {
    fprintf(stderr, "fuzz_manifest: %s\n", st.message);
    fail("a directory with a valid manifest is refused");
  }
  if (!same_text(archive_model_name(d), m->model_name) || !same_text(archive_model_version(d), m->model_version) ||
      !same_text(archive_serialized_file(d), m->serialized_file) ||
      (m->handler ? !same_text(archive_handler(d), m->handler) : archive_handler(d) != NULL))
    fail("the directory's manifest differs from the parsed one");
  size_t n;
  const void *onnx = archive_onnx(d, &n);
  if (n != 4 || memcmp(onnx, "onnx", 4) != 0) fail("the directory's .onnx bytes");
  archive_close(d);
}

/* The same bytes opened reading only the labels (as the server opens a model): they
 * open too, and hold the labels and the configFile of `all`, the same bytes, and no
 * other file. */
static void check_only_files(const uint8_t *data, size_t size, const archive_params *params, const archive_model *all) {
  static const char *const labels[] = {"index_to_name.json"};
  archive_params only = *params;
  only.only_files = labels;
  only.only_file_count = 1;
  archive_model *some = NULL;
  inferd_status st = {0};
  if (archive_open_memory(data, size, &only, &some, &st) != INFERD_OK) fail("refused reading only the labels");
  const char *config = archive_config_file(all);
  int want = 0;
  for (int i = 0; i < archive_file_count(all); i++) {
    const char *name;
    size_t n;
    const void *bytes = archive_file_at(all, i, &name, &n);
    bool kept = strcmp(name, labels[0]) == 0 || (config && strcmp(name, config) == 0);
    size_t got_size = 0;
    const void *got = archive_file(some, name, &got_size);
    if (kept != (got != NULL)) fail("only_files kept another set of files");
    if (got && (got_size != n || memcmp(got, bytes, n) != 0)) fail("only_files read other bytes");
    want += kept;
  }
  if (archive_file_count(some) != want) fail("only_files holds a file the full read does not");
  archive_close(some);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  inferd_status st = {0};
  archive_manifest m;
  inferd_code rc = archive_manifest_parse(data, size, &m, &st);
  if (rc != INFERD_OK) {
    check_refusal(rc, &st);
  } else {
    check_manifest(&m);
    check_directory_manifest(data, size, &m);
  }
  archive_manifest_free(&m);

  if (size >= 2 && data[0] == 'P' && data[1] == 'K') {
    const archive_params params = {.max_total_bytes = 64 << 20, .max_entries = 1000, .max_extra_bytes = 16 << 20};
    archive_model *a = NULL;
    rc = archive_open_memory(data, size, &params, &a, &st);
    /* archive_open takes a file for a zip by its first four bytes (else it wants .onnx) */
    bool zip = size >= 4 && ((data[2] == 3 && data[3] == 4) || (data[2] == 5 && data[3] == 6));
    inferd_status file_st = {0};
    inferd_code file_rc = INFERD_OK;
    archive_model *f = zip ? open_as_file(data, size, &params, &file_rc, &file_st) : NULL;
    if (zip && file_rc != INFERD_OK) {
      check_refusal(file_rc, &file_st);
      if (f) fail("a refusal returned a model");
    }
    if (rc != INFERD_OK) {
      check_refusal(rc, &st);
      if (a) fail("a refusal returned a model");
      if (f) fail("the file opened where the memory was refused");
      return 0;
    }
    if (zip && !f) fail("the file was refused where the memory opened");
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
    if (f) check_same(a, f);
    check_directory_of(a, &params);
    check_only_files(data, size, &params, a);
    archive_close(f);
    archive_close(a);
  }
  return 0;
}
