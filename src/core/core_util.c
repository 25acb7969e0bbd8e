/*
 * core_util.c - dtypes, shapes, mapped files and the clock.
 *
 * Files from outside (a model store, a path on the command line) may be anything:
 * they are opened with O_NONBLOCK and refused by fstat unless regular, so that a FIFO
 * never blocks the thread that opens it (the management thread, for a model store).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"

size_t core_dtype_size(inferd_dtype dtype) {
  switch (dtype) {
  case INFERD_DTYPE_FLOAT: return 4;
  case INFERD_DTYPE_UINT8: return 1;
  case INFERD_DTYPE_INT8: return 1;
  case INFERD_DTYPE_INT32: return 4;
  case INFERD_DTYPE_INT64: return 8;
  case INFERD_DTYPE_BOOL: return 1;
  default: return 0;
  }
}

const char *core_dtype_name(inferd_dtype dtype) {
  switch (dtype) {
  case INFERD_DTYPE_FLOAT: return "float32";
  case INFERD_DTYPE_UINT8: return "uint8";
  case INFERD_DTYPE_INT8: return "int8";
  case INFERD_DTYPE_INT32: return "int32";
  case INFERD_DTYPE_INT64: return "int64";
  case INFERD_DTYPE_BOOL: return "bool";
  default: return "unsupported dtype";
  }
}

/* -1 also when the product of the non-zero dims overflows, whatever the order, so
 * [0, 2^62, 4] is -1 although it holds no elements: the dense row-major strides of
 * every shape with a count >= 0 fit in int64 (md_plain relies on it). */
int64_t core_shape_count(int rank, const int64_t *dims) {
  int64_t n = 1;
  bool empty = false;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) return -1;
    if (dims[i] == 0) {
      empty = true;
      continue;
    }
    if (n > INT64_MAX / dims[i]) return -1;
    n *= dims[i];
  }
  return empty ? 0 : n;
}

const char *core_shape_str(int rank, const int64_t *dims, char *buf, size_t size) {
  size_t off = 0;
  off += (size_t)snprintf(buf + off, size - off, "[");
  for (int i = 0; i < rank && off < size; i++)
    off += (size_t)snprintf(buf + off, size - off, i ? ",%lld" : "%lld", (long long)dims[i]);
  if (off < size) snprintf(buf + off, size - off, "]");
  return buf;
}

const char *core_file_kind(const struct stat *sb) {
  if (S_ISREG(sb->st_mode)) return "a regular file";
  if (S_ISFIFO(sb->st_mode)) return "a FIFO";
  if (S_ISDIR(sb->st_mode)) return "a directory";
  if (S_ISCHR(sb->st_mode)) return "a character device";
  if (S_ISBLK(sb->st_mode)) return "a block device";
  if (S_ISSOCK(sb->st_mode)) return "a socket";
  return "an unknown kind of file";
}

inferd_code core_file_read(const char *path, uint64_t max, void **data, size_t *size, inferd_status *st) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return core_fail(st, errno == ENOENT ? INFERD_NOT_FOUND : INFERD_INVALID_ARG, "%s: %s", path, strerror(errno));
  struct stat sb;
  inferd_code rc = INFERD_OK;
  char *buf = NULL;
  int flags;
  if (fstat(fd, &sb) != 0) {
    rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", path, strerror(errno));
  } else if (!S_ISREG(sb.st_mode)) {
    rc = core_fail(st, INFERD_INVALID_ARG, "%s: not a regular file (%s)", path, core_file_kind(&sb));
  } else if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", path, strerror(errno));
  } else if ((uint64_t)sb.st_size > max) {
    rc = core_fail(st, INFERD_TOO_LARGE, "%s: %lld bytes; at most %llu", path, (long long)sb.st_size,
                   (unsigned long long)max);
  } else if (!(buf = malloc((size_t)sb.st_size + 1))) {
    rc = core_fail(st, INFERD_NO_MEMORY, "%s: out of memory", path);
  } else {
    size_t done = 0;
    while (done < (size_t)sb.st_size) {
      ssize_t got = read(fd, buf + done, (size_t)sb.st_size - done);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        rc = core_fail(st, INFERD_INVALID_ARG, "%s: read error", path);
        break;
      }
      done += (size_t)got;
    }
    buf[done] = '\0';
    *size = done;
  }
  close(fd);
  if (rc != INFERD_OK) {
    free(buf);
    return rc;
  }
  *data = buf;
  return INFERD_OK;
}

inferd_code core_file_map(const char *path, const void **data, size_t *size, inferd_status *st) {
  /* O_NONBLOCK: opening a FIFO that no one writes would wait for a writer for ever;
   * this way the open returns and fstat refuses it (mmap does not care for the flag) */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return core_fail(st, INFERD_NOT_FOUND, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    inferd_code rc = core_fail(st, INFERD_INVALID_ARG, "%s: %s", path, strerror(errno));
    close(fd);
    return rc;
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return core_fail(st, INFERD_INVALID_ARG, "%s: not a regular file (%s)", path, core_file_kind(&sb));
  }
  if (sb.st_size == 0) {
    close(fd);
    return core_fail(st, INFERD_INVALID_ARG, "%s: empty file", path);
  }
  void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return core_fail(st, INFERD_INTERNAL, "%s: mmap: %s", path, strerror(errno));
  *data = p;
  *size = (size_t)sb.st_size;
  return INFERD_OK;
}

void core_file_unmap(const void *data, size_t size) {
  if (data) munmap((void *)data, size);
}

char *core_path_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return strdup(".");
  return strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

double core_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
