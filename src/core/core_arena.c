/*
 * core_arena.c - page-backed memory: huge-page-advised mappings and a bump arena.
 *
 * Design: page faults are a large part of loading a big model on these machines, so
 * everything large (weights, the unpacked ONNX message, worker scratch) comes from
 * anonymous mappings advised MADV_HUGEPAGE (transparent huge pages run in madvise
 * mode). The arena hands out memory from chunks by bumping a pointer; allocations of
 * CORE_ARENA_BIG bytes or more get a mapping of their own, listed so that
 * core_arena_release can unmap one of them early (a weight whose reordered copy now
 * exists) and core_arena_free unmaps the rest.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/core.h"

enum { HUGE_PAGE = 2 << 20, SMALL_PAGE = 4096 };

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* Mappings are rounded to small pages only: with THP, a mapping rounded up to 2 MB
 * would fault whole huge pages of padding in (about 1 MB per weight on average).
 * The kernel backs the aligned 2 MB stretches inside the mapping with huge pages. */
void *core_pages_alloc(size_t size) {
  if (size == 0) size = 1;
  size_t mapped = round_up(size, SMALL_PAGE);
  void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  if (mapped >= HUGE_PAGE) madvise(p, mapped, MADV_HUGEPAGE); /* a hint; failure is harmless */
  return p;
}

void core_pages_free(void *p, size_t size) {
  if (!p) return;
  if (size == 0) size = 1;
  munmap(p, round_up(size, SMALL_PAGE));
}

typedef struct arena_chunk {
  struct arena_chunk *next;
  size_t size; /* bytes mapped, this header included */
  size_t used;
} arena_chunk;

typedef struct arena_big {
  void *p;
  size_t size;
} arena_big;

struct core_arena {
  size_t chunk_size;
  arena_chunk *chunks; /* newest first */
  arena_big *bigs;
  size_t n_bigs, cap_bigs;
  size_t bytes;
};

core_arena *core_arena_new(size_t chunk_size) {
  core_arena *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->chunk_size = chunk_size < SMALL_PAGE ? SMALL_PAGE : chunk_size;
  return a;
}

void core_arena_free(core_arena *a) {
  if (!a) return;
  for (arena_chunk *c = a->chunks, *next; c; c = next) {
    next = c->next;
    core_pages_free(c, c->size);
  }
  for (size_t i = 0; i < a->n_bigs; i++) core_pages_free(a->bigs[i].p, a->bigs[i].size);
  free(a->bigs);
  free(a);
}

static void *alloc_big(core_arena *a, size_t size) {
  if (a->n_bigs == a->cap_bigs) {
    size_t cap = a->cap_bigs ? a->cap_bigs * 2 : 64;
    arena_big *bigs = realloc(a->bigs, cap * sizeof *bigs);
    if (!bigs) return NULL;
    a->bigs = bigs;
    a->cap_bigs = cap;
  }
  void *p = core_pages_alloc(size);
  if (!p) return NULL;
  a->bigs[a->n_bigs++] = (arena_big){p, size};
  a->bytes += size;
  return p;
}

void *core_arena_alloc(core_arena *a, size_t size, size_t align) {
  if (align < 16) align = 16;
  if (size >= CORE_ARENA_BIG) return alloc_big(a, size);
  arena_chunk *c = a->chunks;
  size_t offset = c ? round_up(c->used, align) : 0;
  if (!c || offset + size > c->size) {
    size_t need = round_up(sizeof(arena_chunk), align) + size;
    size_t chunk = need > a->chunk_size ? need : a->chunk_size;
    c = core_pages_alloc(chunk);
    if (!c) return NULL;
    c->size = round_up(chunk, SMALL_PAGE);
    c->used = sizeof(arena_chunk);
    c->next = a->chunks;
    a->chunks = c;
    a->bytes += c->size;
    offset = round_up(c->used, align);
  }
  c->used = offset + size;
  return (char *)c + offset;
}

void *core_arena_calloc(core_arena *a, size_t count, size_t size) {
  if (size && count > SIZE_MAX / size) return NULL;
  /* fresh pages are zero, but chunk space may be reused after nothing: bump
   * allocation never reuses, so memory from a new mapping is already zero. */
  return core_arena_alloc(a, count * size, 16);
}

char *core_arena_strdup(core_arena *a, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = core_arena_alloc(a, n, 1);
  if (d) memcpy(d, s, n);
  return d;
}

void core_arena_release(core_arena *a, void *p) {
  for (size_t i = 0; i < a->n_bigs; i++) {
    if (a->bigs[i].p == p) {
      core_pages_free(p, a->bigs[i].size);
      a->bytes -= a->bigs[i].size;
      a->bigs[i] = a->bigs[--a->n_bigs];
      return;
    }
  }
}

size_t core_arena_bytes(const core_arena *a) { return a->bytes; }
