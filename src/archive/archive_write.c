/*
 * archive_write.c - writing a model archive as torch-model-archiver does:
 * EXPORT/NAME.mar, a zip holding the serialized file, the extra files and a handler
 * file (when the handler is a file) at its root, and MAR-INF/MANIFEST.json last; or,
 * with ARCHIVE_FORMAT_NO_ARCHIVE, the same tree as the directory EXPORT/NAME.
 *
 * DESIGN
 * First every input is checked and given its name inside the archive (plan_entries):
 * the serialized file and the handler file by their base name, an extra file by its
 * base name, an extra directory's files by their path below it (torch-model-archiver
 * copies a directory's contents to the root). Two inputs with one name are an error
 * (torch-model-archiver silently keeps the last), and so is a name the reader would
 * refuse (archive__valid_entry_name, the reader's own rule: no backslash, no control
 * character, ...), so that no archive is written that the server cannot open. Only
 * then is anything written.
 *
 * The manifest has torch-model-archiver's fields and order: createdOn (day/month/year
 * local time), runtime "python" (the value TorchServe's frontend requires), model
 * {modelName, serializedFile, handler, modelVersion[, configFile]}, archiverVersion;
 * indented by 2. A config file goes to the root by its base name, as the serialized file.
 *
 * One difference from torch-model-archiver, on purpose: the .onnx file is stored, not
 * deflated (the other files are deflated as it does). Float weights hardly compress
 * (resnet152: 7%), and inflating them at every start is what would cost: opening
 * resnet152's deflated .mar took 4.6 s here against 0.34 s stored, where the server
 * must be ready in 2 s. Any zip reader, TorchServe's included, reads stored entries.
 *
 * A .mar is written by libzip, which writes a temporary file beside the target and
 * renames it over the target on zip_close: a reader never sees half an archive, and
 * without `force` an existing file is refused before anything is written. File
 * contents are streamed from disk at zip_close; nothing is held in memory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zip.h>

#include "archive/archive.h"
#include "archive/archive_internal.h"
#include "core/core.h"

/* What MANIFEST.json says wrote the archive; keep in step with project(VERSION). */
#define ARCHIVER_VERSION "inferd " INFERD_VERSION_TEXT
#define MANIFEST_PATH "MAR-INF/MANIFEST.json"

enum { MAX_WRITE_ENTRIES = 10000, MAX_WRITE_DEPTH = 16 };

typedef struct entry {
  char *name;   /* inside the archive */
  char *source; /* path on disk */
} entry;

typedef struct plan {
  entry *entries;
  int count;
  const char *handler_name; /* what the manifest says: a base name or the built-in name */
} plan;

static void plan_free(plan *p) {
  for (int i = 0; i < p->count; i++) {
    free(p->entries[i].name);
    free(p->entries[i].source);
  }
  free(p->entries);
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* name with its control characters as \xNN, for a one-line message. */
static const char *printable(const char *name, char *out, size_t size) {
  size_t n = 0;
  for (const unsigned char *c = (const unsigned char *)name; *c && n + 5 < size; c++) {
    if (*c < 0x20 || *c == 0x7f)
      n += (size_t)snprintf(out + n, size - n, "\\x%02x", *c);
    else
      out[n++] = (char)*c;
  }
  out[n] = '\0';
  return out;
}

static inferd_code add_entry(plan *p, const char *name, const char *source, inferd_status *st) {
  if (!archive__valid_entry_name(name, false)) {
    char shown[256];
    return core_fail(st, INFERD_INVALID_ARG,
                     "'%s' cannot be an entry name: the archive reader refuses names with a backslash, a control "
                     "character or an empty, '.' or '..' component, or more than %d directories deep (rename the file)",
                     printable(name, shown, sizeof shown), ARCHIVE__MAX_DIRECTORIES);
  }
  if (strcmp(name, MANIFEST_PATH) == 0 || strncmp(name, "MAR-INF/", 8) == 0)
    return core_fail(st, INFERD_INVALID_ARG, "'%s' would replace the archive's manifest", source);
  for (int i = 0; i < p->count; i++)
    if (strcmp(p->entries[i].name, name) == 0)
      return core_fail(st, INFERD_INVALID_ARG, "'%s' and '%s' would both be '%s' in the archive", p->entries[i].source,
                       source, name);
  if (p->count >= MAX_WRITE_ENTRIES) return core_fail(st, INFERD_TOO_LARGE, "more than %d files", MAX_WRITE_ENTRIES);
  entry *grown = realloc(p->entries, (size_t)(p->count + 1) * sizeof *grown);
  if (!grown) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  p->entries = grown;
  entry *e = &p->entries[p->count];
  e->name = strdup(name);
  e->source = strdup(source);
  if (!e->name || !e->source) {
    free(e->name);
    free(e->source);
    return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  }
  p->count++;
  return INFERD_OK;
}

/* Adds the regular files below dir/rel, named by their path below dir. */
static inferd_code add_directory(plan *p, const char *dir, const char *rel, int depth, inferd_status *st) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s%s%s", dir, *rel ? "/" : "", rel) >= (int)sizeof path)
    return core_fail(st, INFERD_INVALID_ARG, "%s/%s: path too long", dir, rel);
  struct dirent **names;
  int n = scandir(path, &names, NULL, alphasort); /* sorted: the same archive every time */
  if (n < 0) return core_fail(st, INFERD_NOT_FOUND, "%s: %s", path, strerror(errno));
  inferd_code rc = INFERD_OK;
  for (int i = 0; i < n; i++) {
    const char *leaf = names[i]->d_name;
    /* what torch-model-archiver leaves out too: hidden files and Python caches */
    bool skip = leaf[0] == '.' || strcmp(leaf, "__pycache__") == 0 || strcmp(leaf, "__MACOSX") == 0;
    char name[PATH_MAX], file[PATH_MAX];
    if (!skip && rc == INFERD_OK) {
      if (snprintf(name, sizeof name, "%s%s%s", rel, *rel ? "/" : "", leaf) >= (int)sizeof name ||
          snprintf(file, sizeof file, "%s/%s", dir, name) >= (int)sizeof file) {
        rc = core_fail(st, INFERD_INVALID_ARG, "%s/%s: path too long", path, leaf);
      } else {
        struct stat sb;
        if (stat(file, &sb) != 0)
          rc = core_fail(st, INFERD_NOT_FOUND, "%s: %s", file, strerror(errno));
        else if (S_ISDIR(sb.st_mode))
          rc = depth + 1 < MAX_WRITE_DEPTH ? add_directory(p, dir, name, depth + 1, st)
                                            : core_fail(st, INFERD_INVALID_ARG, "%s: nests too deep", file);
        else if (S_ISREG(sb.st_mode))
          rc = add_entry(p, name, file, st);
      }
    }
    free(names[i]);
  }
  free(names);
  return rc;
}

static inferd_code plan_entries(const archive_write_params *w, plan *p, inferd_status *st) {
  struct stat sb;
  if (stat(w->serialized_file, &sb) != 0)
    return core_fail(st, INFERD_NOT_FOUND, "serialized file '%s': %s", w->serialized_file, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return core_fail(st, INFERD_INVALID_ARG, "serialized file '%s' is not a regular file", w->serialized_file);
  const char *onnx = base_name(w->serialized_file);
  size_t n = strlen(onnx);
  if (n < 6 || strcasecmp(onnx + n - 5, ".onnx") != 0)
    return core_fail(st, INFERD_INVALID_ARG, "serialized file '%s' is not an .onnx file", w->serialized_file);
  inferd_code rc = add_entry(p, onnx, w->serialized_file, st);

  /* a handler with a '/' or a '.' in it is a file ("./my_handler.so"), which travels
   * in the archive as torch-model-archiver's custom handlers do; a plain word is a
   * built-in handler's name ("image_classifier"), whatever files lie around */
  p->handler_name = w->handler;
  if (rc == INFERD_OK && (strchr(w->handler, '/') || strchr(w->handler, '.'))) {
    if (stat(w->handler, &sb) != 0 || !S_ISREG(sb.st_mode))
      return core_fail(st, INFERD_NOT_FOUND, "handler file '%s' does not exist", w->handler);
    p->handler_name = base_name(w->handler);
    rc = add_entry(p, p->handler_name, w->handler, st);
  }

  if (rc == INFERD_OK && w->config_file) {
    if (stat(w->config_file, &sb) != 0 || !S_ISREG(sb.st_mode))
      return core_fail(st, INFERD_NOT_FOUND, "config file '%s' is not a file", w->config_file);
    rc = add_entry(p, base_name(w->config_file), w->config_file, st);
  }

  for (int i = 0; i < w->extra_file_count && rc == INFERD_OK; i++) {
    const char *path = w->extra_files[i];
    if (stat(path, &sb) != 0)
      rc = core_fail(st, INFERD_NOT_FOUND, "extra file '%s': %s", path, strerror(errno));
    else if (S_ISDIR(sb.st_mode))
      rc = add_directory(p, path, "", 0, st);
    else if (S_ISREG(sb.st_mode))
      rc = add_entry(p, base_name(path), path, st);
    else
      rc = core_fail(st, INFERD_INVALID_ARG, "extra file '%s' is not a regular file or directory", path);
  }
  return rc;
}

/* MANIFEST.json as torch-model-archiver writes it. Free with free(). */
static char *manifest_text(const archive_write_params *w, const plan *p) {
  char created[32];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(created, sizeof created, "%d/%m/%Y %H:%M:%S", &tm);
  json_t *model = json_pack("{s:s, s:s, s:s, s:s}", "modelName", w->model_name, "serializedFile",
                            p->entries[0].name, "handler", p->handler_name, "modelVersion",
                            w->version ? w->version : "1.0");
  if (model && w->config_file && json_object_set_new(model, "configFile", json_string(base_name(w->config_file)))) {
    json_decref(model);
    model = NULL;
  }
  json_t *root = model ? json_pack("{s:s, s:s, s:o, s:s}", "createdOn", created, "runtime", "python", "model", model,
                                   "archiverVersion", ARCHIVER_VERSION)
                       : NULL;
  char *text = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
  json_decref(root);
  return text;
}

/* ---- .mar ------------------------------------------------------------------------------ */

static inferd_code write_zip(const char *path, const plan *p, const char *manifest, bool store_all, bool force,
                             inferd_status *st) {
  int zerr = 0;
  zip_t *z = zip_open(path, ZIP_CREATE | (force ? ZIP_TRUNCATE : ZIP_EXCL), &zerr);
  if (!z) {
    zip_error_t e;
    zip_error_init_with_code(&e, zerr);
    inferd_code rc = core_fail(st, zerr == ZIP_ER_EXISTS ? INFERD_ALREADY_EXISTS : INFERD_INVALID_ARG, "%s: %s", path,
                               zip_error_strerror(&e));
    zip_error_fini(&e);
    return rc;
  }
  inferd_code rc = INFERD_OK;
  for (int i = 0; i <= p->count && rc == INFERD_OK; i++) {
    bool is_manifest = i == p->count; /* last, as torch-model-archiver writes it */
    const char *name = is_manifest ? MANIFEST_PATH : p->entries[i].name;
    zip_source_t *src = is_manifest ? zip_source_buffer(z, manifest, strlen(manifest), 0)
                                    : zip_source_file(z, p->entries[i].source, 0, 0);
    zip_int64_t index = src ? zip_file_add(z, name, src, ZIP_FL_ENC_UTF_8) : -1;
    if (index < 0) {
      rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", is_manifest ? name : p->entries[i].source, zip_strerror(z));
      if (src) zip_source_free(src);
      break;
    }
    /* entry 0 is the model: stored (see the top of the file) */
    bool store = store_all || i == 0;
    if (zip_set_file_compression(z, (zip_uint64_t)index, store ? ZIP_CM_STORE : ZIP_CM_DEFLATE, 0) != 0 ||
        zip_file_set_external_attributes(z, (zip_uint64_t)index, 0, ZIP_OPSYS_UNIX, (zip_uint32_t)0100644 << 16) != 0)
      rc = core_fail(st, INFERD_INTERNAL, "%s: %s", name, zip_strerror(z));
  }
  if (rc == INFERD_OK && zip_close(z) != 0) rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", path, zip_strerror(z));
  if (rc != INFERD_OK) zip_discard(z); /* (after a failed zip_close, z is still open) */
  return rc;
}

/* ---- no-archive: a directory ---------------------------------------------------------------- */

static inferd_code make_parents(const char *root, const char *name, inferd_status *st) {
  char path[PATH_MAX];
  int n = snprintf(path, sizeof path, "%s/%s", root, name);
  if (n < 0 || n >= (int)sizeof path) return core_fail(st, INFERD_INVALID_ARG, "%s/%s: path too long", root, name);
  for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return core_fail(st, INFERD_INVALID_ARG, "%s: %s", path, strerror(errno));
    *p = '/';
  }
  return INFERD_OK;
}

static inferd_code write_file(const char *root, const char *name, const char *source, const char *bytes,
                              inferd_status *st) {
  inferd_code rc = make_parents(root, name, st);
  if (rc != INFERD_OK) return rc;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", root, name);
  int in = source ? open(source, O_RDONLY | O_CLOEXEC) : -1;
  if (source && in < 0) return core_fail(st, INFERD_NOT_FOUND, "%s: %s", source, strerror(errno));
  int out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", path, strerror(errno));
  } else if (!source) {
    size_t len = strlen(bytes);
    if (write(out, bytes, len) != (ssize_t)len) rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", path, strerror(errno));
  } else {
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK);
    if (!buf) rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
    while (buf) {
      ssize_t got = read(in, buf, CHUNK);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", source, strerror(errno));
      if (got <= 0) break;
      if (write(out, buf, (size_t)got) != got) {
        rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", path, strerror(errno));
        break;
      }
    }
    free(buf);
  }
  if (out >= 0 && close(out) != 0 && rc == INFERD_OK) rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", path, strerror(errno));
  if (in >= 0) close(in);
  return rc;
}

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb, (void)type, (void)ftw;
  return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* Removes the tree at path (not following symbolic links); best effort. */
static void remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* The directory is built beside its place, as DIR/.NAME.tmpPID.N (a dot name, which
 * the server's model store listing skips), and put there whole: by rename when there
 * is none, else by exchanging it with the old one (renameat2 RENAME_EXCHANGE), which
 * is then removed. So a server reading the model store never sees half a model, and
 * --force leaves none of the old files behind (the old labels of a model rewritten
 * without --extra-files were served on). A symbolic link to a model directory is
 * followed: the directory it names is replaced. */
static inferd_code write_directory(const char *path, const plan *p, const char *manifest, bool force,
                                   inferd_status *st) {
  struct stat sb;
  bool exists = stat(path, &sb) == 0;
  if (exists && !force) return core_fail(st, INFERD_ALREADY_EXISTS, "%s: %s", path, strerror(EEXIST));
  if (exists && !S_ISDIR(sb.st_mode)) return core_fail(st, INFERD_ALREADY_EXISTS, "%s: not a directory", path);
  char resolved[PATH_MAX], tmp[PATH_MAX];
  const char *place = exists && realpath(path, resolved) ? resolved : path;
  const char *slash = strrchr(place, '/');
  int dir_len = slash ? (int)(slash - place) : 1;
  const char *dir = slash ? place : ".", *base = slash ? slash + 1 : place;
  for (int n = 0;; n++) {
    if (snprintf(tmp, sizeof tmp, "%.*s/.%s.tmp%ld.%d", dir_len, dir, base, (long)getpid(), n) >= (int)sizeof tmp)
      return core_fail(st, INFERD_INVALID_ARG, "%s: path too long", path);
    if (mkdir(tmp, 0755) == 0) break;
    if (errno != EEXIST || n == 100) return core_fail(st, INFERD_INVALID_ARG, "%s: %s", tmp, strerror(errno));
  }
  inferd_code rc = INFERD_OK;
  for (int i = 0; i < p->count && rc == INFERD_OK; i++) rc = write_file(tmp, p->entries[i].name, p->entries[i].source, NULL, st);
  if (rc == INFERD_OK) rc = write_file(tmp, MANIFEST_PATH, NULL, manifest, st);
  if (rc == INFERD_OK && (exists ? renameat2(AT_FDCWD, tmp, AT_FDCWD, place, RENAME_EXCHANGE) : rename(tmp, place)) != 0)
    rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", path, strerror(errno));
  remove_tree(tmp); /* the half-written one, or after the exchange the old one */
  return rc;
}

/* ---- archive_write ----------------------------------------------------------------------------- */

inferd_code archive_write(const archive_write_params *w, char *out_path, size_t out_size, inferd_status *st) {
  if (!w->model_name || !archive_valid_model_name(w->model_name))
    return core_fail(st, INFERD_INVALID_ARG, "model name '%s' is not valid ([A-Za-z0-9][A-Za-z0-9_.-]*)",
                     w->model_name ? w->model_name : "");
  if (w->version && !archive_valid_model_name(w->version))
    return core_fail(st, INFERD_INVALID_ARG, "version '%s' is not valid ([A-Za-z0-9][A-Za-z0-9_.-]*)", w->version);
  if (!w->serialized_file || !*w->serialized_file) return core_fail(st, INFERD_INVALID_ARG, "no serialized file");
  if (!w->handler || !*w->handler) return core_fail(st, INFERD_INVALID_ARG, "no handler");
  for (const char *c = w->handler; *c; c++)
    if ((unsigned char)*c < 0x20) return core_fail(st, INFERD_INVALID_ARG, "the handler's name holds a control character");
  const char *export_path = w->export_path && *w->export_path ? w->export_path : ".";
  struct stat sb;
  if (stat(export_path, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return core_fail(st, INFERD_NOT_FOUND, "export path '%s' is not a directory", export_path);

  char path[PATH_MAX];
  bool directory = w->format == ARCHIVE_FORMAT_NO_ARCHIVE;
  if (snprintf(path, sizeof path, "%s/%s%s", export_path, w->model_name, directory ? "" : ".mar") >= (int)sizeof path)
    return core_fail(st, INFERD_INVALID_ARG, "export path too long");
  if (!w->force && lstat(path, &sb) == 0)
    return core_fail(st, INFERD_ALREADY_EXISTS, "%s already exists (--force replaces it)", path);

  plan p = {0};
  inferd_code rc = plan_entries(w, &p, st);
  char *manifest = rc == INFERD_OK ? manifest_text(w, &p) : NULL;
  if (rc == INFERD_OK && !manifest) rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
  if (rc == INFERD_OK)
    rc = directory ? write_directory(path, &p, manifest, w->force, st)
                   : write_zip(path, &p, manifest, w->format == ARCHIVE_FORMAT_ZIP_STORE, w->force, st);
  free(manifest);
  plan_free(&p);
  if (rc == INFERD_OK && out_path && out_size) snprintf(out_path, out_size, "%s", path);
  return rc;
}
