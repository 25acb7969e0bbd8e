/*
 * onnx_external.c - tensors stored outside the model file (ONNX external data).
 *
 * A ModelProto is a protobuf message, which cannot exceed 2 GB. Larger models keep
 * their weights in files beside the .onnx: the TensorProto then has data_location
 * EXTERNAL and key/value pairs naming where its bytes are. torch.onnx.export writes one
 * file per tensor of over 1024 elements (key "location" only) as soon as the model
 * passes 2 GB; onnx.external_data_helper writes one file for all, with "offset" and
 * "length". The keys, as ONNX defines them:
 *   location  path of the file, relative to the model file's directory (required)
 *   offset    where the bytes start in it (decimal; 0 when absent)
 *   length    how many there are (decimal; up to the file's end when absent)
 *   checksum  SHA-1 of the whole file (optional; not checked, as ONNX Runtime does not)
 *   basepath  the directory the writer used (optional; ignored: the model's own is used)
 * Any other key is refused, as ONNX Runtime refuses it. So is a location that names a
 * path out of the model's directory (absolute, or with a ".." component); a symbolic
 * link inside it is followed, as ONNX Runtime follows it.
 *
 * The bytes are read (pread) into the graph's arena like any unpacked payload, where
 * big ones have a mapping of their own that the engine releases once the weight is
 * reordered: the file's pages stay in the page cache, never in the process.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx/onnx_internal.h"

void onnx_external_close(onnx_external *ext) {
  if (ext->dir_fd >= 0) close(ext->dir_fd);
  ext->dir_fd = -1;
}

/* A decimal string without sign or spaces, below 2^62. */
static bool parse_size(const char *s, uint64_t *out) {
  uint64_t v = 0;
  if (!s || !*s) return false;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > ((uint64_t)1 << 62) / 10) return false;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  *out = v;
  return true;
}

/* Relative, and no component is "..": the file is inside the model's directory tree. */
static bool location_is_inside(const char *loc) {
  if (!*loc || *loc == '/') return false;
  for (const char *p = loc; *p;) {
    size_t n = strcspn(p, "/");
    if (n == 2 && p[0] == '.' && p[1] == '.') return false;
    p += n;
    if (*p == '/') p++;
  }
  return true;
}

static inferd_code read_all(int fd, void *buf, size_t n, uint64_t offset, const char *what, const char *loc,
                            inferd_status *st) {
  unsigned char *p = buf;
  while (n) {
    ssize_t got = pread(fd, p, n, (off_t)offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return core_fail(st, INFERD_INVALID_ARG, "%s: external data '%s': %s", what, loc, strerror(errno));
    if (got == 0) return core_fail(st, INFERD_INVALID_ARG, "%s: external data '%s' shrank while it was read", what, loc);
    p += got, n -= (size_t)got, offset += (uint64_t)got;
  }
  return INFERD_OK;
}

/* What tensor t's data takes by its type and shape; UINT64_MAX when it cannot be told
 * (a bad shape or type, which tensor_to_value refuses with the tensor's name). */
static uint64_t declared_bytes(const Onnx__TensorProto *t) {
  uint64_t esize = core_dtype_size((inferd_dtype)t->data_type);
  int64_t count = t->n_dims <= INFERD_MAX_RANK ? core_shape_count((int)t->n_dims, t->dims) : -1;
  return count < 0 || !esize || (uint64_t)count > UINT64_MAX / esize ? UINT64_MAX : (uint64_t)count * esize;
}

/* Calls fn(t, ctx) for each tensor of g whose data is external: initializers, then node
 * attributes (a Constant's value). */
static void each_external(const Onnx__GraphProto *g, void (*fn)(const Onnx__TensorProto *t, void *ctx), void *ctx) {
  for (size_t i = 0; g && i < g->n_initializer; i++)
    if (onnx_tensor_is_external(g->initializer[i])) fn(g->initializer[i], ctx);
  for (size_t i = 0; g && i < g->n_node; i++)
    for (size_t k = 0; k < g->node[i]->n_attribute; k++) {
      const Onnx__TensorProto *t = g->node[i]->attribute[k]->t;
      if (t && onnx_tensor_is_external(t)) fn(t, ctx);
    }
}

typedef struct found {
  size_t count;
  uint64_t bytes;   /* declared, saturating */
  char *first;      /* the first one's location */
  size_t first_size;
} found;

static void add_found(const Onnx__TensorProto *t, void *ctx) {
  found *f = ctx;
  uint64_t bytes = declared_bytes(t);
  f->bytes = bytes > UINT64_MAX - f->bytes ? UINT64_MAX : f->bytes + bytes;
  for (size_t i = 0; i < t->n_external_data && f->count == 0 && f->first_size; i++)
    if (t->external_data[i]->key && strcmp(t->external_data[i]->key, "location") == 0)
      snprintf(f->first, f->first_size, "%s", t->external_data[i]->value ? t->external_data[i]->value : "");
  f->count++;
}

inferd_code onnx_file_external_count(const char *path, size_t *count, char *first, size_t first_size,
                                     inferd_status *st) {
  *count = 0;
  if (first_size) first[0] = '\0';
  const void *data;
  size_t size;
  inferd_code rc = core_file_map(path, &data, &size, st);
  if (rc != INFERD_OK) return rc;
  Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, data);
  core_file_unmap(data, size);
  if (!m) return INFERD_OK;
  found f = {.first = first, .first_size = first_size};
  each_external(m->graph, add_found, &f);
  onnx__model_proto__free_unpacked(m, NULL);
  *count = f.count;
  return INFERD_OK;
}

inferd_code onnx_external_check_total(const Onnx__GraphProto *g, uint64_t max_bytes, inferd_status *st) {
  if (!max_bytes) return INFERD_OK;
  found f = {0};
  each_external(g, add_found, &f);
  if (f.bytes <= max_bytes) return INFERD_OK;
  return core_fail(st, INFERD_NO_MEMORY, "its weights outside the model file (%zu tensors) need %.1f MB (%llu bytes), "
                   "more than the %.1f MB of memory it may take", f.count, (double)f.bytes / (1 << 20),
                   (unsigned long long)f.bytes, (double)max_bytes / (1 << 20));
}

inferd_code onnx_external_read(core_arena *arena, const Onnx__TensorProto *t, const char *what, size_t nbytes,
                               onnx_external *ext, void **data, inferd_status *st) {
  const char *loc = NULL, *offset_s = NULL, *length_s = NULL;
  for (size_t i = 0; i < t->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = t->external_data[i];
    const char *key = e->key ? e->key : "", *value = e->value ? e->value : "";
    if (strcmp(key, "location") == 0) loc = value;
    else if (strcmp(key, "offset") == 0) offset_s = value;
    else if (strcmp(key, "length") == 0) length_s = value;
    else if (strcmp(key, "checksum") != 0 && strcmp(key, "basepath") != 0)
      return core_fail(st, INFERD_INVALID_ARG, "%s: unknown external data key '%s'", what, key);
  }
  if (!loc) return core_fail(st, INFERD_INVALID_ARG, "%s: external data without a location", what);
  if (!location_is_inside(loc))
    return core_fail(st, INFERD_INVALID_ARG, "%s: external data location '%s' is not a relative path inside the "
                     "model's directory", what, loc);
  uint64_t offset = 0, length = 0;
  if (offset_s && !parse_size(offset_s, &offset))
    return core_fail(st, INFERD_INVALID_ARG, "%s: external data offset '%s' is not a byte count", what, offset_s);
  if (length_s && !parse_size(length_s, &length))
    return core_fail(st, INFERD_INVALID_ARG, "%s: external data length '%s' is not a byte count", what, length_s);
  if (t->has_raw_data)
    return core_fail(st, INFERD_INVALID_ARG, "%s: has both raw data and external data ('%s')", what, loc);
  /* (a model file found without its weights is a bad model, not a missing one: never
   * NOT_FOUND, which a server answers as "no such model") */
  if (!ext->dir)
    return core_fail(st, INFERD_UNSUPPORTED, "%s: its data is in the file '%s' outside the model file, and the model "
                     "came without a directory to find it in", what, loc);
  if (ext->dir_fd < 0) {
    ext->dir_fd = open(ext->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (ext->dir_fd < 0)
      return core_fail(st, INFERD_INVALID_ARG, "%s: external data: directory '%s': %s", what, ext->dir, strerror(errno));
  }
  /* O_NONBLOCK: a FIFO under that name must not wait for a writer (fstat refuses it) */
  int fd = openat(ext->dir_fd, loc, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return core_fail(st, INFERD_INVALID_ARG, "%s: external data '%s': %s", what, loc, strerror(errno));
  inferd_code rc = INFERD_OK;
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    rc = core_fail(st, INFERD_INVALID_ARG, "%s: external data '%s': %s", what, loc, strerror(errno));
    goto out;
  }
  if (!S_ISREG(sb.st_mode)) {
    rc = core_fail(st, INFERD_INVALID_ARG, "%s: external data '%s' is not a regular file (%s)", what, loc,
                   core_file_kind(&sb));
    goto out;
  }
  uint64_t size = (uint64_t)sb.st_size;
  if (offset > size) {
    rc = core_fail(st, INFERD_INVALID_ARG, "%s: external data offset %llu is past the end of '%s' (%llu bytes)", what,
                   (unsigned long long)offset, loc, (unsigned long long)size);
    goto out;
  }
  if (!length_s) length = size - offset;
  if (length > size - offset) {
    rc = core_fail(st, INFERD_INVALID_ARG, "%s: external data '%s' has %llu bytes from offset %llu, not the %llu of "
                   "its length", what, loc, (unsigned long long)(size - offset), (unsigned long long)offset,
                   (unsigned long long)length);
    goto out;
  }
  if (length != nbytes) {
    rc = core_fail(st, INFERD_INVALID_ARG, "%s: external data '%s' is %llu bytes, its shape and type need %zu", what,
                   loc, (unsigned long long)length, nbytes);
    goto out;
  }
  *data = core_arena_alloc(arena, nbytes ? nbytes : 1, 64);
  if (!*data) {
    rc = core_fail(st, INFERD_NO_MEMORY, "%s: out of memory for %zu bytes of external data", what, nbytes);
    goto out;
  }
  rc = read_all(fd, *data, nbytes, offset, what, loc, st);
out:
  close(fd);
  return rc;
}
