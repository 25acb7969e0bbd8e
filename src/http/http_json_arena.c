/*
 * http_json_arena.c - jansson's allocator: a per-thread bump arena for the KServe v2
 * infer parse, malloc for everything else.
 *
 * DESIGN
 *
 * Why. jansson makes one json_t per JSON value, each with its own malloc: a v2 infer
 * request carrying a [1,3,224,224] FP32 tensor as "data" was 150,617 malloc calls
 * (and as many frees) per request, measured with gdb on the server. The tree lives
 * only while http_v2_parse reads it, so its memory can come from an arena that is
 * reset, not freed, when the parse is done and reused by the next request on the same
 * HTTP thread: no malloc in steady state (DESIGN.md §2, "hot paths do not allocate
 * with malloc").
 *
 * How. jansson's allocator is process-wide (json_set_alloc_funcs), so
 * http__json_arena_install sets a pair once per process, at the first server's start
 * (http_server_new, before its HTTP threads exist; later calls do nothing):
 *   json_malloc  from this thread's arena while one is active on it
 *                (http__json_arena_begin .. http__json_arena_end), else malloc;
 *   json_free    nothing for a block inside one of this thread's arena chunks (an
 *                address-range check over its few chunks), else free.
 * The range check, rather than a header before each block, keeps malloc'd blocks plain:
 * a jansson object made before the pair was installed, on another thread, or on this
 * thread outside begin/end (config, archive manifests, management answers, anything
 * that outlives a request) is an ordinary malloc block and is freed by free(), whenever
 * and wherever it is freed. Only http_v2_parse runs with the arena active, from
 * json_loadb to the json_decref of the tree; nothing of the tree escapes it (strings
 * the answer needs are copied into the request's pool first).
 *
 * The arena. Chunks are malloc'd, kept in the order they were made, and filled by
 * bumping an offset; a block that does not fit the rest of a chunk goes to the next
 * one (or a new one), so the same request replays the same placement and a request
 * no larger than an earlier one takes no chunk at all. A new chunk is as large as all
 * chunks so far (at least 256 KB, at most 16 MB, or the block's size when that is
 * larger): growth is geometric, the slack is at most one chunk. Blocks are 8-byte
 * aligned: jansson's objects hold nothing wider than a pointer, size_t, json_int_t or
 * double (a 24-byte json_real stays 24 bytes, not 32). Freeing a block does nothing;
 * jansson's arrays grow by malloc + copy + free, so a tree takes up to twice its
 * array tables here, the same order as malloc's per-block headers.
 *
 * Bounds. While a request is parsed the arena holds what jansson's tree of that body
 * needs (its array tables up to twice, as said above) plus at most one chunk of slack:
 * a body is at most max_request_size bytes (h2o refuses larger ones before the handler
 * runs), so the arena is bounded as the malloc'd tree was, within a small factor. The
 * [1,3,224,224] request (1.1 MB of JSON) takes 6 chunks, 8 MB. http__json_arena_end
 * resets the arena and keeps only its first chunks up to keep_bytes in all (64 MB
 * unless http__json_arena_set_keep says otherwise); the chunks beyond are returned with
 * free. A chunk that cannot be had is an allocation failure
 * (jansson then fails the parse with "out of memory", as it did with malloc).
 *
 * Threads. Each thread has its own arena (_Thread_local); begin/end and every block
 * are the calling thread's, so there are no locks. A thread's chunks are freed when it
 * exits (a pthread key destructor) or by http__json_arena_thread_free. keep_bytes
 * (atomic) is changed only by tests, through http__json_arena_set_keep.
 *
 * Under AddressSanitizer every chunk is poisoned when made and at each reset, and each
 * block is unpoisoned when given out, so a use of a block after the reset, or of a
 * chunk's memory not given out (the alignment padding after a block included), is
 * reported.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include <jansson.h>

#include "http/http_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

enum { BLOCK_ALIGN = 8 };
static const size_t FIRST_CHUNK = (size_t)256 << 10; /* bytes */
static const size_t MAX_CHUNK = (size_t)16 << 20;    /* bytes; larger blocks get a chunk of their own */
static const size_t DEFAULT_KEEP = (size_t)64 << 20; /* bytes kept across requests per thread */

_Static_assert(_Alignof(json_int_t) <= BLOCK_ALIGN && _Alignof(double) <= BLOCK_ALIGN &&
                   _Alignof(void *) <= BLOCK_ALIGN && _Alignof(size_t) <= BLOCK_ALIGN,
               "jansson's objects need no more than BLOCK_ALIGN");

typedef struct chunk {
  struct chunk *next; /* the next chunk made, or NULL */
  size_t size;        /* usable bytes after this header */
} chunk;
_Static_assert(sizeof(chunk) % BLOCK_ALIGN == 0, "blocks start aligned");

static inline char *chunk_data(chunk *c) { return (char *)(c + 1); }

typedef struct json_arena {
  chunk *first;      /* chunks in the order made; NULL: none */
  chunk *current;    /* the chunk being filled (NULL until the first block) */
  size_t used;       /* bytes of current given out */
  size_t held;       /* sum of the chunks' sizes */
  bool active;       /* between begin and end */
  bool key_set;      /* the exit destructor knows this thread */
  http__json_arena_stats stats;
} json_arena;

static _Thread_local json_arena arena;
static _Atomic size_t keep_bytes; /* bytes; 0: DEFAULT_KEEP */
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

static void release_chunks(json_arena *a, chunk **link) {
  for (chunk *c = *link, *next; c; c = next) {
    next = c->next;
    a->held -= c->size;
    a->stats.chunks--;
    UNPOISON(chunk_data(c), c->size); /* malloc's own redzones are what ASan checks after free */
    free(c);
  }
  *link = NULL;
}

static void on_thread_exit(void *value) { release_chunks(value, &((json_arena *)value)->first); }

static void make_exit_key(void) {
  if (pthread_key_create(&exit_key, on_thread_exit) != 0) exit_key = (pthread_key_t)-1;
}

/* The chunk a block of `need` bytes goes to when none of the existing ones has room. */
static chunk *grow(json_arena *a, size_t need) {
  size_t size = a->held < FIRST_CHUNK ? FIRST_CHUNK : a->held > MAX_CHUNK ? MAX_CHUNK : a->held;
  if (size < need) size = need;
  if (size > SIZE_MAX - sizeof(chunk)) return NULL;
  chunk *c = malloc(sizeof(chunk) + size);
  if (!c) return NULL;
  if (!a->key_set) { /* first chunk of this thread: free them all when it exits */
    pthread_once(&exit_key_once, make_exit_key);
    a->key_set = exit_key != (pthread_key_t)-1 && pthread_setspecific(exit_key, a) == 0;
  }
  c->next = NULL;
  c->size = size;
  POISON(chunk_data(c), size);
  chunk **link = &a->first;
  while (*link) link = &(*link)->next;
  *link = c;
  a->held += size;
  a->stats.chunks++;
  a->stats.chunk_mallocs++;
  return c;
}

static void *json_arena_malloc(size_t size) {
  json_arena *a = &arena;
  if (!a->active) {
    a->stats.fallback_mallocs++;
    return malloc(size);
  }
  if (size > SIZE_MAX - 2 * BLOCK_ALIGN) return NULL;
  size_t need = (size + BLOCK_ALIGN - 1) / BLOCK_ALIGN * BLOCK_ALIGN;
  if (need == 0) need = BLOCK_ALIGN;
  chunk *c = a->current ? a->current : a->first;
  size_t used = a->current ? a->used : 0;
  while (c && c->size - used < need) { /* the rest of this chunk is too small: next */
    c = c->next;
    used = 0;
  }
  if (!c && !(c = grow(a, need))) return NULL;
  char *p = chunk_data(c) + used;
  a->current = c;
  a->used = used + need;
  a->stats.arena_allocs++;
  UNPOISON(p, size);
  return p;
}

static bool owns(const json_arena *a, const void *p) {
  uintptr_t address = (uintptr_t)p;
  for (chunk *c = a->first; c; c = c->next) {
    uintptr_t start = (uintptr_t)chunk_data(c);
    if (address >= start && address - start < c->size) return true;
  }
  return false;
}

static void json_arena_free(void *p) {
  if (!p) return;
  if (arena.first && owns(&arena, p)) return; /* reclaimed by the reset */
  free(p);
}

static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static void install(void) { json_set_alloc_funcs(json_arena_malloc, json_arena_free); }

void http__json_arena_install(void) { pthread_once(&install_once, install); }

void http__json_arena_set_keep(size_t bytes) { atomic_store_explicit(&keep_bytes, bytes, memory_order_relaxed); }

void http__json_arena_begin(void) {
  json_arena *a = &arena;
  a->active = true;
  a->current = NULL;
  a->used = 0;
}

void http__json_arena_end(void) {
  json_arena *a = &arena;
  a->active = false;
  a->current = NULL;
  a->used = 0;
  size_t keep = atomic_load_explicit(&keep_bytes, memory_order_relaxed), kept = 0;
  if (keep == 0) keep = DEFAULT_KEEP;
  chunk **link = &a->first;
  while (*link && kept + (*link)->size <= keep) {
    kept += (*link)->size;
    POISON(chunk_data(*link), (*link)->size);
    link = &(*link)->next;
  }
  release_chunks(a, link);
}

void http__json_arena_thread_free(void) {
  json_arena *a = &arena;
  release_chunks(a, &a->first);
  a->current = NULL;
  a->used = 0;
}

void http__json_arena_get_stats(http__json_arena_stats *out) {
  *out = arena.stats;
  out->bytes = arena.held;
}
