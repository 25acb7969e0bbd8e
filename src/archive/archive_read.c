/*
 * archive_read.c - opening a model from the model store: a .mar (zip, read with
 * libzip), an unpacked directory of the same layout, or a bare .onnx file.
 *
 * DESIGN
 * archive_open tells the forms apart by what the path is, not by its name: a
 * directory; a file that starts with a zip signature (PK\3\4, or PK\5\6 for an empty
 * zip); else a file named *.onnx. Then, for the two archive forms:
 *   1. list the entries and check each name (archive__valid_entry_name, which
 *      archive_write.c applies too), their number, and the sum of their declared
 *      sizes against the caps (archive_params), before anything is inflated;
 *   2. read and parse MAR-INF/MANIFEST.json (archive_manifest_parse);
 *   3. read the serializedFile (.onnx) and every other regular file (the extras).
 * Reading an entry stops at its declared size and then checks that the stream ends
 * there (libzip checks the CRC at the end), so no entry inflates past what was
 * counted in step 1: a zip bomb costs at most max_total_bytes.
 *
 * Memory: a directory's or a bare file's .onnx is mapped (core_file_map), never
 * copied, and so is the .onnx of a .mar file when it is stored uncompressed, as
 * `inferd archive` writes it (map_stored_entry). A deflated one (or a .mar in memory)
 * is inflated into pages of its own (core_pages_alloc, huge-page advised: a 240 MB
 * model is faulted in fewer, larger pages). Either way archive_release_onnx drops it
 * once the engine has loaded it, and archive_onnx_mapped tells the engine whether it
 * may drop the file's pages as it goes (inferd_model_params.mapped_file).
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>
#include <zlib.h>

#include "archive/archive.h"
#include "archive/archive_internal.h"
#include "core/core.h"

#define MANIFEST_PATH "MAR-INF/MANIFEST.json"

enum { MAX_MANIFEST_BYTES = 1 << 20, MAX_NAME_BYTES = 4096 };

typedef struct extra_file {
  char *name;
  void *data;
  size_t size;
} extra_file;

struct archive_model {
  archive_kind kind;
  archive_manifest manifest;
  char *manifest_json;
  void *onnx;
  size_t onnx_size;
  char *onnx_dir;       /* the directory of the .onnx file (a bare one, or a directory's);
                           NULL for a .mar */
  const void *map_base; /* the file mapping holding onnx (the .onnx file, or the whole
                           .mar); NULL: onnx is core_pages_alloc'ed */
  size_t map_size;
  extra_file *files;
  int file_count;
};

typedef struct limits {
  uint64_t max_total_bytes, max_extra_bytes;
  uint32_t max_entries;
  const char *const *only_files; /* archive_params.only_files */
  int only_file_count;
  inferd_code (*before_copy)(void *ctx, uint64_t onnx_bytes, inferd_status *st);
  void *before_copy_ctx;
} limits;

static limits limits_of(const archive_params *p) {
  limits l = {4ull << 30, 256ull << 20, 10000, NULL, 0, NULL, NULL};
  if (p && p->max_total_bytes) l.max_total_bytes = p->max_total_bytes;
  if (p && p->max_extra_bytes) l.max_extra_bytes = p->max_extra_bytes;
  if (p && p->max_entries) l.max_entries = p->max_entries;
  if (p && p->only_files) {
    l.only_files = p->only_files;
    l.only_file_count = p->only_file_count;
  }
  if (p) l.before_copy = p->before_copy, l.before_copy_ctx = p->before_copy_ctx;
  return l;
}

/* Whether the extra file `name` of m is to be read (archive_params.only_files). */
static bool wanted(const limits *lim, const archive_model *m, const char *name) {
  if (!lim->only_files) return true;
  if (m->manifest.config_file && strcmp(name, m->manifest.config_file) == 0) return true;
  for (int i = 0; i < lim->only_file_count; i++)
    if (strcmp(name, lim->only_files[i]) == 0) return true;
  return false;
}

/* ==== names ================================================================================= */

bool archive_valid_model_name(const char *name) {
  if (!name || !isalnum((unsigned char)name[0])) return false;
  for (const char *p = name; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.') return false;
  return strlen(name) <= 255;
}

/* archive_internal.h says what it accepts; archive_write.c checks the names it
 * writes with it too. */
bool archive__valid_entry_name(const char *name, bool directory_ok) {
  size_t n = strlen(name);
  if (n == 0 || n > MAX_NAME_BYTES || name[0] == '/') return false;
  bool directory = directory_ok && name[n - 1] == '/';
  if (directory) n--;
  int directories = directory; /* the entry itself, when it is one, then those it sits in */
  const char *component = name;
  for (size_t i = 0; i <= n; i++) {
    unsigned char c = i < n ? (unsigned char)name[i] : '/';
    if (c == '\\' || c < 0x20 || c == 0x7f) return false;
    if (c == '/') {
      size_t len = (size_t)(name + i - component);
      if (len == 0 || (len == 1 && component[0] == '.') || (len == 2 && component[0] == '.' && component[1] == '.'))
        return false;
      component = name + i + 1;
      directories += i < n;
    }
  }
  return directories <= ARCHIVE__MAX_DIRECTORIES;
}

static bool ends_with_ci(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

/* ==== MANIFEST.json ======================================================================== */

void archive_manifest_free(archive_manifest *m) {
  free(m->created_on);
  free(m->runtime);
  free(m->archiver_version);
  free(m->model_name);
  free(m->model_version);
  free(m->serialized_file);
  free(m->handler);
  free(m->config_file);
  memset(m, 0, sizeof *m);
}

/* Copies object[key] into *out: a non-empty string without control characters.
 * A missing key is an error only when `required`. */
static inferd_code take_string(json_t *object, const char *where, const char *key, bool required, char **out,
                               inferd_status *st) {
  json_t *v = json_object_get(object, key);
  if (!v) return required ? core_fail(st, INFERD_INVALID_ARG, "no %s%s", where, key) : INFERD_OK;
  const char *s = json_string_value(v);
  if (!s || !*s) return core_fail(st, INFERD_INVALID_ARG, "%s%s must be a non-empty string", where, key);
  for (const char *p = s; *p; p++)
    if ((unsigned char)*p < 0x20) return core_fail(st, INFERD_INVALID_ARG, "%s%s holds a control character", where, key);
  if (!(*out = strdup(s))) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  return INFERD_OK;
}

inferd_code archive_manifest_parse(const void *json, size_t size, archive_manifest *out, inferd_status *st) {
  memset(out, 0, sizeof *out);
  json_error_t err;
  json_t *root = json_loadb(json, size, JSON_REJECT_DUPLICATES, &err);
  if (!root) return core_fail(st, INFERD_INVALID_ARG, "line %d, column %d: %s", err.line, err.column, err.text);
  inferd_code rc = INFERD_OK;
  json_t *model = json_object_get(root, "model");
  if (!json_is_object(root)) {
    rc = core_fail(st, INFERD_INVALID_ARG, "expected a JSON object");
  } else if (!json_is_object(model)) {
    rc = core_fail(st, INFERD_INVALID_ARG, "no \"model\" object");
  } else if ((rc = take_string(root, "", "createdOn", false, &out->created_on, st)) != INFERD_OK ||
             (rc = take_string(root, "", "runtime", false, &out->runtime, st)) != INFERD_OK ||
             (rc = take_string(root, "", "archiverVersion", false, &out->archiver_version, st)) != INFERD_OK ||
             (rc = take_string(model, "model.", "modelName", true, &out->model_name, st)) != INFERD_OK ||
             (rc = take_string(model, "model.", "modelVersion", true, &out->model_version, st)) != INFERD_OK ||
             (rc = take_string(model, "model.", "serializedFile", true, &out->serialized_file, st)) != INFERD_OK ||
             (rc = take_string(model, "model.", "handler", false, &out->handler, st)) != INFERD_OK ||
             (rc = take_string(model, "model.", "configFile", false, &out->config_file, st)) != INFERD_OK) {
    /* rc and the message are set */
  } else if (!archive_valid_model_name(out->model_name)) {
    rc = core_fail(st, INFERD_INVALID_ARG, "model.modelName '%s' is not a valid name ([A-Za-z0-9][A-Za-z0-9_.-]*)",
                   out->model_name);
  } else if (!archive_valid_model_name(out->model_version)) {
    rc = core_fail(st, INFERD_INVALID_ARG, "model.modelVersion '%s' is not a valid version ([A-Za-z0-9][A-Za-z0-9_.-]*)",
                   out->model_version);
  } else if (!archive__valid_entry_name(out->serialized_file, false)) {
    rc = core_fail(st, INFERD_INVALID_ARG,
                   "model.serializedFile '%s' is not a path inside the archive (relative, no empty, '.' or '..' "
                   "part, at most %d directories deep)",
                   out->serialized_file, ARCHIVE__MAX_DIRECTORIES);
  } else if (!ends_with_ci(out->serialized_file, ".onnx")) {
    rc = core_fail(st, INFERD_UNSUPPORTED, "model.serializedFile '%s' is not an .onnx file (inferd runs ONNX models)",
                   out->serialized_file);
  }
  json_decref(root);
  return rc;
}

/* ==== the result ============================================================================= */

static archive_model *model_new(archive_kind kind) {
  archive_model *m = calloc(1, sizeof *m);
  if (m) m->kind = kind;
  return m;
}

void archive_release_onnx(archive_model *m) {
  if (!m || !m->onnx) return;
  if (m->map_base)
    core_file_unmap(m->map_base, m->map_size);
  else
    core_pages_free(m->onnx, m->onnx_size);
  m->onnx = NULL;
  m->onnx_size = 0;
  m->map_base = NULL;
}

void archive_close(archive_model *m) {
  if (!m) return;
  archive_release_onnx(m);
  for (int i = 0; i < m->file_count; i++) {
    free(m->files[i].name);
    free(m->files[i].data);
  }
  free(m->files);
  free(m->manifest_json);
  free(m->onnx_dir);
  archive_manifest_free(&m->manifest);
  free(m);
}

static inferd_code add_file(archive_model *m, const char *name, void *data, size_t size, inferd_status *st) {
  extra_file *grown = realloc(m->files, (size_t)(m->file_count + 1) * sizeof *grown);
  char *copy = strdup(name);
  if (!grown || !copy) {
    free(copy);
    if (grown) m->files = grown;
    return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  }
  m->files = grown;
  m->files[m->file_count++] = (extra_file){copy, data, size};
  return INFERD_OK;
}

archive_kind archive_get_kind(const archive_model *m) { return m->kind; }
const char *archive_model_name(const archive_model *m) { return m->manifest.model_name; }
const char *archive_model_version(const archive_model *m) { return m->manifest.model_version; }
const char *archive_handler(const archive_model *m) { return m->manifest.handler; }
const char *archive_config_file(const archive_model *m) { return m->manifest.config_file; }
const char *archive_serialized_file(const archive_model *m) { return m->manifest.serialized_file; }
const char *archive_manifest_json(const archive_model *m) { return m->manifest_json; }

const void *archive_onnx(const archive_model *m, size_t *size) {
  if (size) *size = m->onnx_size;
  return m->onnx;
}

bool archive_onnx_mapped(const archive_model *m) { return m->onnx && m->map_base; }

const char *archive_onnx_dir(const archive_model *m) { return m->onnx_dir; }

int archive_file_count(const archive_model *m) { return m->file_count; }

const void *archive_file_at(const archive_model *m, int index, const char **name, size_t *size) {
  if (index < 0 || index >= m->file_count) return NULL;
  if (name) *name = m->files[index].name;
  if (size) *size = m->files[index].size;
  return m->files[index].data;
}

const void *archive_file(const archive_model *m, const char *name, size_t *size) {
  for (int i = 0; i < m->file_count; i++)
    if (strcmp(m->files[i].name, name) == 0) return archive_file_at(m, i, NULL, size);
  return NULL;
}

/* ==== .mar (zip) ================================================================================ */

typedef struct zip_entry {
  const char *name; /* owned by the zip_t */
  zip_uint64_t index, size;
} zip_entry;

static int entry_cmp(const void *a, const void *b) {
  return strcmp(((const zip_entry *)a)->name, ((const zip_entry *)b)->name);
}

/* Reads exactly entry->size bytes of an entry into `buf` and checks that the entry
 * ends there (which also makes libzip check its CRC). */
static inferd_code read_entry(zip_t *z, const zip_entry *e, void *buf, inferd_status *st) {
  zip_file_t *f = zip_fopen_index(z, e->index, 0);
  if (!f) return core_fail(st, INFERD_INVALID_ARG, "%s: %s", e->name, zip_strerror(z));
  inferd_code rc = INFERD_OK;
  zip_uint64_t done = 0;
  while (done < e->size) {
    zip_uint64_t chunk = e->size - done < (16u << 20) ? e->size - done : (16u << 20);
    zip_int64_t got = zip_fread(f, (char *)buf + done, chunk);
    if (got < 0) {
      rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", e->name, zip_file_strerror(f));
      break;
    }
    if (got == 0) {
      rc = core_fail(st, INFERD_INVALID_ARG, "%s: ends after %llu of its %llu bytes", e->name,
                     (unsigned long long)done, (unsigned long long)e->size);
      break;
    }
    done += (zip_uint64_t)got;
  }
  if (rc == INFERD_OK) {
    char extra;
    zip_int64_t got = zip_fread(f, &extra, 1);
    if (got < 0)
      rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", e->name, zip_file_strerror(f));
    else if (got > 0)
      rc = core_fail(st, INFERD_INVALID_ARG, "%s: holds more than the %llu bytes its header declares", e->name,
                     (unsigned long long)e->size);
  }
  zip_fclose(f);
  return rc;
}

/* malloc'ed copy of an entry, NUL-terminated (the bytes before the NUL are the entry). */
static inferd_code read_entry_malloc(zip_t *z, const zip_entry *e, void **out, inferd_status *st) {
  char *buf = malloc((size_t)e->size + 1);
  if (!buf) return core_fail(st, INFERD_NO_MEMORY, "%s: out of memory for %llu bytes", e->name, (unsigned long long)e->size);
  inferd_code rc = read_entry(z, e, buf, st);
  if (rc != INFERD_OK) {
    free(buf);
    return rc;
  }
  buf[e->size] = '\0';
  *out = buf;
  return INFERD_OK;
}

/* The search and CRC pass of map_stored_entry (below), as a reader for core_guard_run. */
typedef struct stored_search {
  const unsigned char *file;
  size_t size;
  const zip_entry *e;
  uint32_t crc;
  const unsigned char *found; /* the entry's data, its CRC checked */
} stored_search;

static void find_stored(void *arg) {
  stored_search *s = arg;
  const unsigned char *file = s->file;
  size_t size = s->size, name_len = strlen(s->e->name);
  const zip_entry *e = s->e;
  static const unsigned char SIGNATURE[4] = {'P', 'K', 3, 4};
  enum { HEADER = 30 };
  for (size_t at = 0; at + HEADER <= size;) {
    const unsigned char *h = memmem(file + at, size - at, SIGNATURE, sizeof SIGNATURE);
    if (!h) break;
    at = (size_t)(h - file) + 1;
    size_t left = size - (size_t)(h - file);
    if (left < HEADER) break;
    unsigned method = h[8] | (unsigned)h[9] << 8;
    size_t header_name = h[26] | (size_t)h[27] << 8, header_extra = h[28] | (size_t)h[29] << 8;
    size_t start = HEADER + header_name + header_extra;
    if (method != ZIP_CM_STORE || header_name != name_len || start > left || e->size > left - start ||
        memcmp(h + HEADER, e->name, name_len) != 0)
      continue;
#ifdef MADV_POPULATE_READ /* the CRC reads every page: map them in one call, not a fault per 64 KB */
    long page_size = sysconf(_SC_PAGESIZE);
    uintptr_t page = (uintptr_t)(h + start) / (uintptr_t)page_size * (uintptr_t)page_size;
    madvise((void *)page, (uintptr_t)(h + start + e->size) - page, MADV_POPULATE_READ); /* a hint */
#endif
    uLong crc = crc32_z(0, Z_NULL, 0);
    for (size_t done = 0; done < e->size;) { /* crc32_z takes z_size_t; chunks keep it portable */
      size_t chunk = e->size - done < ((size_t)1 << 30) ? e->size - done : ((size_t)1 << 30);
      crc = crc32_z(crc, h + start + done, chunk);
      done += chunk;
    }
    if ((uint32_t)crc == s->crc) s->found = h + start;
    return;
  }
}

/* A stored (uncompressed) entry of the zip file at `path`, mapped in place instead of
 * read: the engine then parses it straight from the file's pages and drops each page
 * once copied (inferd_model_params.mapped_file), so a .mar costs no copy of the model
 * and no memory beyond the engine's. libzip has checked the archive and tells the
 * entry's size, method and CRC, but not where its data starts; that is in the entry's
 * local header (APPNOTE 4.3.7: signature PK\3\4, method at byte 8, name and extra
 * field lengths at 26 and 28, the name at 30, the data after the extra field). The
 * header is found by its signature and name, and the data found there is accepted only
 * if its CRC-32 is the one libzip read from the central directory - the same check
 * libzip makes when it reads an entry. Only the first header that names the entry is
 * tried, so a crafted archive costs at most one CRC pass more than reading it. Returns
 * false (read the entry instead) when the entry is compressed or encrypted or that
 * header does not match, or when the file shrank while it was read (core_guard_run:
 * libzip's reads then fail cleanly); *data is then unset. */
static bool map_stored_entry(const char *path, zip_t *z, const zip_entry *e, const void **base, size_t *base_size,
                             const unsigned char **data) {
  zip_stat_t sb;
  if (zip_stat_index(z, e->index, 0, &sb) != 0 || !(sb.valid & ZIP_STAT_COMP_METHOD) || !(sb.valid & ZIP_STAT_CRC) ||
      sb.comp_method != ZIP_CM_STORE || ((sb.valid & ZIP_STAT_ENCRYPTION_METHOD) && sb.encryption_method != ZIP_EM_NONE))
    return false;
  inferd_status ignored;
  const void *file;
  size_t size;
  if (core_file_map(path, &file, &size, &ignored) != INFERD_OK) return false;
  stored_search s = {.file = file, .size = size, .e = e, .crc = sb.crc};
  if (core_guard_run(find_stored, &s) && s.found) {
    *base = file;
    *base_size = size;
    *data = s.found;
    return true;
  }
  core_file_unmap(file, size);
  return false;
}

static const zip_entry *find_entry(const zip_entry *entries, size_t count, const char *name) {
  zip_entry key = {.name = name};
  return bsearch(&key, entries, count, sizeof key, entry_cmp);
}

/* `path`: the zip's file, or NULL when it is read from memory. */
static inferd_code open_zip(zip_t *z, const char *path, const limits *lim, archive_model *m, inferd_status *st) {
  zip_int64_t n = zip_get_num_entries(z, 0);
  if (n < 0) return core_fail(st, INFERD_INVALID_ARG, "cannot list the zip's entries");
  if ((uint64_t)n > lim->max_entries)
    return core_fail(st, INFERD_TOO_LARGE, "%lld entries; at most %u are accepted", (long long)n, lim->max_entries);
  zip_entry *entries = calloc((size_t)n + 1, sizeof *entries);
  if (!entries) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  inferd_code rc = INFERD_OK;
  size_t count = 0;
  uint64_t total = 0;
  for (zip_int64_t i = 0; i < n && rc == INFERD_OK; i++) {
    zip_stat_t sb;
    if (zip_stat_index(z, (zip_uint64_t)i, 0, &sb) != 0 || !(sb.valid & ZIP_STAT_NAME) || !(sb.valid & ZIP_STAT_SIZE)) {
      rc = core_fail(st, INFERD_INVALID_ARG, "entry %lld: %s", (long long)i, zip_strerror(z));
      break;
    }
    if (!archive__valid_entry_name(sb.name, true)) {
      rc = core_fail(st, INFERD_INVALID_ARG,
                     "entry name '%s' is not a path inside the archive (relative, no empty, '.' or '..' part, at "
                     "most %d directories deep)",
                     sb.name, ARCHIVE__MAX_DIRECTORIES);
      break;
    }
    if ((sb.valid & ZIP_STAT_ENCRYPTION_METHOD) && sb.encryption_method != ZIP_EM_NONE) {
      rc = core_fail(st, INFERD_UNSUPPORTED, "%s: encrypted entries are not supported", sb.name);
      break;
    }
    if (sb.size > lim->max_total_bytes - total) {
      rc = core_fail(st, INFERD_TOO_LARGE, "entries unpack to more than %llu bytes",
                     (unsigned long long)lim->max_total_bytes);
      break;
    }
    total += sb.size;
    if (sb.name[strlen(sb.name) - 1] == '/') continue; /* a directory */
    entries[count++] = (zip_entry){sb.name, (zip_uint64_t)i, sb.size};
  }
  if (rc == INFERD_OK) {
    qsort(entries, count, sizeof *entries, entry_cmp);
    for (size_t i = 1; i < count && rc == INFERD_OK; i++)
      if (strcmp(entries[i - 1].name, entries[i].name) == 0)
        rc = core_fail(st, INFERD_INVALID_ARG, "two entries named '%s'", entries[i].name);
  }

  const zip_entry *manifest = rc == INFERD_OK ? find_entry(entries, count, MANIFEST_PATH) : NULL;
  if (rc == INFERD_OK && !manifest)
    rc = core_fail(st, INFERD_INVALID_ARG, "no %s (not a model archive)", MANIFEST_PATH);
  if (rc == INFERD_OK && manifest->size > MAX_MANIFEST_BYTES)
    rc = core_fail(st, INFERD_TOO_LARGE, "%s: %llu bytes; at most %d", MANIFEST_PATH,
                   (unsigned long long)manifest->size, MAX_MANIFEST_BYTES);
  if (rc == INFERD_OK) rc = read_entry_malloc(z, manifest, (void **)&m->manifest_json, st);
  if (rc == INFERD_OK && (rc = archive_manifest_parse(m->manifest_json, manifest->size, &m->manifest, st)) != INFERD_OK)
    core_status_prefix(st, "%s", MANIFEST_PATH);

  const zip_entry *onnx = rc == INFERD_OK ? find_entry(entries, count, m->manifest.serialized_file) : NULL;
  if (rc == INFERD_OK && !onnx)
    rc = core_fail(st, INFERD_INVALID_ARG, "serializedFile '%s' is not in the archive", m->manifest.serialized_file);
  if (rc == INFERD_OK && onnx->size == 0) rc = core_fail(st, INFERD_INVALID_ARG, "%s: empty file", onnx->name);
  if (rc == INFERD_OK) {
    m->onnx_size = (size_t)onnx->size;
    const unsigned char *in_file;
    if (path && map_stored_entry(path, z, onnx, &m->map_base, &m->map_size, &in_file))
      m->onnx = (void *)in_file;
    else if (lim->before_copy && (rc = lim->before_copy(lim->before_copy_ctx, onnx->size, st)) != INFERD_OK)
      m->onnx = NULL; /* refused before taking the memory: the status says why */
    else if (!(m->onnx = core_pages_alloc(m->onnx_size)))
      rc = core_fail(st, INFERD_NO_MEMORY, "%s: out of memory for %zu bytes", onnx->name, m->onnx_size);
    else
      rc = read_entry(z, onnx, m->onnx, st);
  }

  uint64_t extra_bytes = 0;
  for (size_t i = 0; i < count && rc == INFERD_OK; i++) {
    const zip_entry *e = &entries[i];
    if (e == manifest || e == onnx || !wanted(lim, m, e->name)) continue;
    if (e->size > lim->max_extra_bytes - extra_bytes) {
      rc = core_fail(st, INFERD_TOO_LARGE, "extra files hold more than %llu bytes (at '%s')",
                     (unsigned long long)lim->max_extra_bytes, e->name);
      break;
    }
    extra_bytes += e->size;
    void *data = NULL; /* gcc -O2 -Wmaybe-uninitialized cannot see read_entry_malloc set it */
    if ((rc = read_entry_malloc(z, e, &data, st)) != INFERD_OK) break;
    if ((rc = add_file(m, e->name, data, (size_t)e->size, st)) != INFERD_OK) free(data);
  }
  free(entries);
  return rc;
}

/* A zip source over the file at `path`, or over data/size when path is NULL; NULL
 * with the error in *st. */
static zip_source_t *new_source(const char *path, const void *data, size_t size, inferd_status *st) {
  zip_error_t zerr;
  zip_error_init(&zerr);
  zip_source_t *src = path ? zip_source_file_create(path, 0, 0, &zerr) : zip_source_buffer_create(data, size, 0, &zerr);
  if (!src)
    core_fail(st, path ? INFERD_NOT_FOUND : INFERD_NO_MEMORY, "zip source: %s", zip_error_strerror(&zerr));
  zip_error_fini(&zerr);
  return src;
}

/* Opens the zip, in read-only mode with `flags`; NULL with libzip's error in *zerr. */
static zip_t *open_from(const char *path, const void *data, size_t size, int flags, zip_error_t *zerr,
                        inferd_status *st) {
  zip_source_t *src = new_source(path, data, size, st);
  if (!src) return NULL;
  zip_t *z = zip_open_from_source(src, ZIP_RDONLY | flags, zerr);
  if (!z) {
    core_fail(st, INFERD_INVALID_ARG, "not a valid zip file: %s", zip_error_strerror(zerr));
    zip_source_free(src); /* else z owns it */
  }
  return z;
}

/* The zip at `path`, or data/size in memory when path is NULL.
 *
 * An archive whose local headers disagree with its central directory is read all the
 * same, as Java's and Python's readers do: Info-ZIP writing to a pipe
 * (`zip -r - . > m.mar`) puts Zip64 fields in its local headers only. libzip then
 * reads every entry by the central directory's size and checks its CRC; the mapping
 * of a stored .onnx (map_stored_entry, which finds the data by its local header) is
 * left to archives that pass libzip's consistency check, so that a file and the same
 * bytes in memory open alike. That check also refuses two entries of one name, with
 * only "File already exists" to say so: such an archive is opened without it too, and
 * open_zip's own check of the names refuses it naming the entry. */
static inferd_code open_zip_source(const char *path, const void *data, size_t size, const limits *lim,
                                   archive_model **out, inferd_status *st) {
  zip_error_t zerr;
  zip_error_init(&zerr);
  zip_t *z = open_from(path, data, size, ZIP_CHECKCONS, &zerr, st);
  const char *mapped_from = path;
  if (!z && (zip_error_code_zip(&zerr) == ZIP_ER_INCONS || zip_error_code_zip(&zerr) == ZIP_ER_EXISTS)) {
    zip_error_fini(&zerr);
    zip_error_init(&zerr);
    z = open_from(path, data, size, 0, &zerr, st);
    mapped_from = NULL;
  }
  zip_error_fini(&zerr);
  if (!z) return st->code;
  archive_model *m = model_new(ARCHIVE_MAR);
  inferd_code rc = m ? open_zip(z, mapped_from, lim, m, st) : core_fail(st, INFERD_NO_MEMORY, "out of memory");
  zip_discard(z); /* read-only: nothing to write back; frees the source too */
  if (rc != INFERD_OK) {
    archive_close(m);
    return rc;
  }
  *out = m;
  return INFERD_OK;
}

inferd_code archive_open_memory(const void *data, size_t size, const archive_params *params, archive_model **out,
                                inferd_status *st) {
  *out = NULL;
  const limits lim = limits_of(params);
  return open_zip_source(NULL, data, size, &lim, out, st);
}

static inferd_code open_mar_file(const char *path, const limits *lim, archive_model **out, inferd_status *st) {
  return open_zip_source(path, NULL, 0, lim, out, st);
}

/* ==== directory ================================================================================= */

typedef struct walk {
  archive_model *m;
  const limits *lim;
  uint64_t extra_bytes;
  uint32_t files;
} walk;

/* Adds every regular file below root/rel (rel "" is the root) except the manifest and
 * the serialized file. Directories that are symbolic links are not followed. */
static inferd_code walk_directory(walk *w, const char *root, const char *rel, int depth, inferd_status *st) {
  char dir_path[PATH_MAX];
  if (snprintf(dir_path, sizeof dir_path, "%s%s%s", root, *rel ? "/" : "", rel) >= (int)sizeof dir_path)
    return core_fail(st, INFERD_INVALID_ARG, "%s/%s: path too long", root, rel);
  DIR *d = opendir(dir_path);
  if (!d) return core_fail(st, INFERD_INVALID_ARG, "%s: %s", dir_path, strerror(errno));
  inferd_code rc = INFERD_OK;
  struct dirent *de;
  while (rc == INFERD_OK && (de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    char name[PATH_MAX], path[PATH_MAX];
    if (snprintf(name, sizeof name, "%s%s%s", rel, *rel ? "/" : "", de->d_name) >= (int)sizeof name ||
        snprintf(path, sizeof path, "%s/%s", root, name) >= (int)sizeof path) {
      rc = core_fail(st, INFERD_INVALID_ARG, "%s/%s: path too long", dir_path, de->d_name);
      break;
    }
    struct stat lsb, sb;
    if (lstat(path, &lsb) != 0 || stat(path, &sb) != 0) continue; /* vanished, or a dangling link */
    if (S_ISDIR(lsb.st_mode)) {
      if (depth + 1 > ARCHIVE__MAX_DIRECTORIES) {
        rc = core_fail(st, INFERD_INVALID_ARG, "%s: directories nest deeper than %d", path, ARCHIVE__MAX_DIRECTORIES);
        break;
      }
      rc = walk_directory(w, root, name, depth + 1, st);
      continue;
    }
    if (!S_ISREG(sb.st_mode)) continue;
    if (++w->files > w->lim->max_entries) {
      rc = core_fail(st, INFERD_TOO_LARGE, "more than %u files", w->lim->max_entries);
      break;
    }
    if (strcmp(name, MANIFEST_PATH) == 0 || strcmp(name, w->m->manifest.serialized_file) == 0) continue;
    if (!archive__valid_entry_name(name, false)) continue; /* a name no .mar could hold (control characters) */
    if (!wanted(w->lim, w->m, name)) continue;
    void *data;
    size_t size;
    if ((rc = core_file_read(path, w->lim->max_extra_bytes - w->extra_bytes, &data, &size, st)) != INFERD_OK) {
      if (rc == INFERD_TOO_LARGE)
        rc = core_fail(st, INFERD_TOO_LARGE, "extra files hold more than %llu bytes (at '%s')",
                       (unsigned long long)w->lim->max_extra_bytes, name);
      break;
    }
    w->extra_bytes += size;
    if ((rc = add_file(w->m, name, data, size, st)) != INFERD_OK) free(data);
  }
  closedir(d);
  return rc;
}

static inferd_code open_directory(const char *path, const limits *lim, archive_model **out, inferd_status *st) {
  archive_model *m = model_new(ARCHIVE_DIRECTORY);
  if (!m) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  char file[PATH_MAX];
  inferd_code rc = INFERD_OK;
  size_t manifest_size = 0;
  snprintf(file, sizeof file, "%s/%s", path, MANIFEST_PATH);
  rc = core_file_read(file, MAX_MANIFEST_BYTES, (void **)&m->manifest_json, &manifest_size, st);
  if (rc == INFERD_NOT_FOUND) rc = core_fail(st, INFERD_INVALID_ARG, "no %s (not a model directory)", MANIFEST_PATH);
  if (rc == INFERD_OK && (rc = archive_manifest_parse(m->manifest_json, manifest_size, &m->manifest, st)) != INFERD_OK)
    core_status_prefix(st, "%s", MANIFEST_PATH);
  if (rc == INFERD_OK) {
    if (snprintf(file, sizeof file, "%s/%s", path, m->manifest.serialized_file) >= (int)sizeof file) {
      rc = core_fail(st, INFERD_INVALID_ARG, "serializedFile: path too long");
    } else {
      const void *data;
      rc = core_file_map(file, &data, &m->onnx_size, st);
      if (rc == INFERD_OK) {
        m->onnx = (void *)data;
        m->map_base = data;
        m->map_size = m->onnx_size;
        if (!(m->onnx_dir = core_path_dir(file))) rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
      } else if (rc == INFERD_NOT_FOUND) {
        rc = core_fail(st, INFERD_INVALID_ARG, "serializedFile '%s' is not in the directory", m->manifest.serialized_file);
      }
    }
  }
  if (rc == INFERD_OK) {
    walk w = {.m = m, .lim = lim};
    rc = walk_directory(&w, path, "", 0, st);
  }
  if (rc != INFERD_OK) {
    archive_close(m);
    return rc;
  }
  *out = m;
  return INFERD_OK;
}

/* ==== bare .onnx ================================================================================= */

static inferd_code open_onnx(const char *path, archive_model **out, inferd_status *st) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t stem = strlen(base) - strlen(".onnx");
  archive_model *m = model_new(ARCHIVE_ONNX);
  if (!m) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  inferd_code rc = INFERD_OK;
  m->manifest.model_name = strndup(base, stem);
  m->manifest.model_version = strdup("1.0");
  m->manifest.serialized_file = strdup(base);
  if (!m->manifest.model_name || !m->manifest.model_version || !m->manifest.serialized_file)
    rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
  else if (!archive_valid_model_name(m->manifest.model_name))
    rc = core_fail(st, INFERD_INVALID_ARG, "'%s' is not a valid model name ([A-Za-z0-9][A-Za-z0-9_.-]*); rename the file",
                   m->manifest.model_name);
  if (rc == INFERD_OK) {
    const void *data;
    rc = core_file_map(path, &data, &m->onnx_size, st);
    if (rc == INFERD_OK) { /* (data is unset on failure) */
      m->onnx = (void *)data;
      m->map_base = data;
      m->map_size = m->onnx_size;
      if (!(m->onnx_dir = core_path_dir(path))) rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
    }
  }
  if (rc != INFERD_OK) {
    archive_close(m);
    return rc;
  }
  *out = m;
  return INFERD_OK;
}

/* ==== archive_open ================================================================================ */

inferd_code archive_open(const char *path, const archive_params *params, archive_model **out, inferd_status *st) {
  *out = NULL;
  const limits lim = limits_of(params);
  struct stat sb;
  if (stat(path, &sb) != 0) return core_fail(st, INFERD_NOT_FOUND, "%s: %s", path, strerror(errno));
  inferd_code rc;
  if (S_ISDIR(sb.st_mode)) {
    rc = open_directory(path, &lim, out, st);
  } else if (!S_ISREG(sb.st_mode)) {
    rc = core_fail(st, INFERD_INVALID_ARG, "not a file or directory");
  } else {
    unsigned char magic[4] = {0};
    /* O_NONBLOCK: should the file have become a FIFO since stat, the read returns
     * rather than wait, and core_file_map refuses it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    ssize_t got = fd >= 0 ? read(fd, magic, sizeof magic) : -1;
    if (fd >= 0) close(fd);
    if (got < 0) return core_fail(st, INFERD_NOT_FOUND, "%s: %s", path, strerror(errno));
    bool zip = got == 4 && magic[0] == 'P' && magic[1] == 'K' &&
               ((magic[2] == 3 && magic[3] == 4) || (magic[2] == 5 && magic[3] == 6));
    if (zip)
      rc = open_mar_file(path, &lim, out, st);
    else if (ends_with_ci(path, ".onnx"))
      rc = open_onnx(path, out, st);
    else if (ends_with_ci(path, ".tar.gz") || ends_with_ci(path, ".tgz"))
      rc = core_fail(st, INFERD_UNSUPPORTED, "tgz archives are not supported: unpack it into a directory");
    else
      rc = core_fail(st, INFERD_INVALID_ARG, "neither a .mar (zip), a model directory nor an .onnx file");
  }
  /* name the path once: messages from mapping and reading files already start with it */
  if (rc != INFERD_OK && st && strncmp(st->message, path, strlen(path)) != 0) core_status_prefix(st, "%s", path);
  return rc;
}
