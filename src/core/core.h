/*
 * core.h - what every subsystem of inferd stands on: status reporting, logging,
 * page-backed arenas, dtypes and small tensors, NumPy .npy files, time.
 *
 * Threading: everything here is safe to call from any thread; an arena is owned by
 * one thread at a time (whoever holds the object that owns it).
 */
#ifndef INFERD_CORE_H
#define INFERD_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferd/inferd.h"

/* ---- status ---------------------------------------------------------------- */

/* Fills `st` (may be NULL) with `code` and a printf-style message; returns `code`.
 * CR and LF in the formatted text become spaces so that a message is always one
 * line, whatever user text it quotes. */
inferd_code core_fail(inferd_status *st, inferd_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepends "prefix: " to an existing message (to add where an error happened). */
void core_status_prefix(inferd_status *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void core_status_ok(inferd_status *st);

/* ---- logging (stderr, one line per call) ------------------------------------ */

typedef enum { CORE_LOG_DEBUG, CORE_LOG_INFO, CORE_LOG_WARN, CORE_LOG_ERROR } core_log_level;
void core_log_set_level(core_log_level level);
void core_log(core_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- pages and arenas -------------------------------------------------------- */

/* Anonymous zero-filled pages, asked to be transparent huge pages when the size
 * allows it (fewer page faults and TLB misses for weights and activations).
 * Returns NULL on failure. Free with core_pages_free(p, size). */
void *core_pages_alloc(size_t size);
void core_pages_free(void *p, size_t size);

/* A bump allocator over page-backed chunks. Allocations live until the arena is
 * freed; there is no per-allocation free. Requests of at least `big_threshold`
 * bytes get a mapping of their own so that they can be released early with
 * core_arena_release (used to drop weights once they are reordered). */
typedef struct core_arena core_arena;
core_arena *core_arena_new(size_t chunk_size);
void core_arena_free(core_arena *arena);
void *core_arena_alloc(core_arena *arena, size_t size, size_t align);
void *core_arena_calloc(core_arena *arena, size_t count, size_t size);
char *core_arena_strdup(core_arena *arena, const char *s);
/* Releases a big allocation (one made with size >= CORE_ARENA_BIG); other pointers
 * are ignored. The memory must not be used afterwards. */
void core_arena_release(core_arena *arena, void *p);
size_t core_arena_bytes(const core_arena *arena); /* bytes currently mapped */

enum { CORE_ARENA_BIG = 64 << 10 }; /* weights from here up can be released one by one */

/* ---- dtypes ------------------------------------------------------------------ */

size_t core_dtype_size(inferd_dtype dtype); /* 0 for unsupported */
const char *core_dtype_name(inferd_dtype dtype);

/* Number of elements of a shape; -1 on a negative dim or when the product of the
 * non-zero dims overflows (even if another dim is 0: such a shape is refused). */
int64_t core_shape_count(int rank, const int64_t *dims);
/* Writes "[1,3,224,224]" into buf. */
const char *core_shape_str(int rank, const int64_t *dims, char *buf, size_t size);

/* ---- NumPy .npy files --------------------------------------------------------- */

/* A dense C-order array read from or written to a .npy file. */
typedef struct core_npy {
  inferd_dtype dtype;
  int rank;
  int64_t dims[INFERD_MAX_RANK];
  void *data; /* owned; free with core_npy_free */
  size_t nbytes;
} core_npy;

/* Reads a little-endian, C-order .npy (versions 1-3) of float32/int64/int32/uint8/int8. */
inferd_code core_npy_read(const char *path, core_npy *out, inferd_status *st);
inferd_code core_npy_parse(const void *bytes, size_t size, core_npy *out, inferd_status *st);
inferd_code core_npy_write(const char *path, inferd_dtype dtype, int rank, const int64_t *dims,
                           const void *data, inferd_status *st);
void core_npy_free(core_npy *npy);

/* ---- files and time ---------------------------------------------------------- */

/* Reads a whole regular file of at most `max` bytes into malloc'd memory (+ a NUL); the
 * caller frees *data. NOT_FOUND when absent, TOO_LARGE above max, INVALID_ARG for
 * anything but a regular file (opened with O_NONBLOCK, so a FIFO is refused instead of
 * blocking; the flag is cleared before the reads). Read, not mapped: a file rewritten
 * meanwhile cannot fault its reader. */
inferd_code core_file_read(const char *path, uint64_t max, void **data, size_t *size, inferd_status *st);

/* Maps a whole file read-only. Free with core_file_unmap. Anything but a non-empty
 * regular file is INVALID_ARG naming the path and what it is; the file is opened with
 * O_NONBLOCK, so a FIFO with no writer is refused instead of blocking the caller. */
inferd_code core_file_map(const char *path, const void **data, size_t *size, inferd_status *st);
void core_file_unmap(const void *data, size_t size);
/* The directory part of a file's path, malloc'd: "a/b" of "a/b/m.onnx", "/" of "/m.onnx",
 * "." of "m.onnx". NULL when out of memory. */
char *core_path_dir(const char *path);
/* What a file that is not a regular file is, for messages: "a FIFO", "a directory",
 * "a character device", "a block device", "a socket"; else "a regular file" (or
 * "an unknown kind of file"). */
struct stat;
const char *core_file_kind(const struct stat *sb);

/* Runs reader(arg), which reads a mapped file, on this thread; false if the file shrank
 * under it (a page past its new end raised SIGBUS: someone truncated or rewrote it in
 * place), in which case the reader stopped where it was. The reader must hold no lock
 * and own no malloc'd state when it could fault (core_guard.c). */
bool core_guard_run(void (*reader)(void *arg), void *arg);

double core_now_seconds(void); /* CLOCK_MONOTONIC */

#define CORE_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define CORE_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CORE_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif /* INFERD_CORE_H */
