/*
 * core_arena.c - page-backed memory: huge-page-advised mappings and a bump arena.
 *
 * Design: page faults are a large part of loading a big model on these machines (a
 * 4 KB fault costs ~20 us under a paravirtualized MMU; loading resnet152 took 87,000
 * of them), so everything large (weights, the unpacked ONNX message, worker scratch)
 * comes from anonymous mappings advised MADV_HUGEPAGE (transparent huge pages run in
 * madvise mode), placed on 2 MB boundaries so that huge pages back all of them but a
 * partial last 2 MB. The arena hands out memory from chunks by bumping a pointer;
 * allocations of CORE_ARENA_BIG bytes or more are packed one after another into big
 * regions of their own (a mapping per weight would start and end on 4 KB pages), and
 * core_arena_release returns the whole pages of one of them early (a weight whose
 * reordered copy now exists) with MADV_DONTNEED. core_arena_free unmaps the rest.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/core.h"

enum { HUGE_PAGE = 2 << 20, SMALL_PAGE = 4096 };
/* Address space of one big region: a reservation (MAP_NORESERVE), not memory; only the
 * pages written are. Most models' weights fit in one, so the partly used huge page at
 * a region's end is paid about once. */
static const size_t REGION = (size_t)512 << 20;

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* round_up(size, 4 KB) bytes at a 2 MB boundary (over-map, then trim both ends). */
static void *map_huge_aligned(size_t size, int flags) {
  size_t mapped = round_up(size, SMALL_PAGE), over = mapped + HUGE_PAGE;
  char *raw = mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  char *p = (char *)round_up((uintptr_t)raw, HUGE_PAGE);
  if (p > raw) munmap(raw, (size_t)(p - raw));
  size_t tail = (size_t)(raw + over - (p + mapped));
  if (tail) munmap(p + mapped, tail);
  madvise(p, mapped, MADV_HUGEPAGE); /* a hint; failure is harmless */
  return p;
}

/* round_up(size, 4 KB) bytes of small pages. */
static void *map_small(size_t size) {
  void *p = mmap(NULL, round_up(size, SMALL_PAGE), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* Mappings are rounded to small pages only: with THP, a mapping rounded up to 2 MB
 * would fault whole huge pages of padding in. */
void *core_pages_alloc(size_t size) {
  if (size == 0) size = 1;
  if (size > SIZE_MAX / 2) return NULL; /* rounding up below must not wrap */
  size_t mapped = round_up(size, SMALL_PAGE);
  return mapped >= HUGE_PAGE ? map_huge_aligned(mapped, 0) : map_small(mapped);
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

typedef struct arena_region {
  struct arena_region *next;
  char *base;
  size_t size, used;
} arena_region;

typedef struct arena_big {
  char *p;
  size_t size;
  bool released;
} arena_big;

struct core_arena {
  size_t chunk_size;
  arena_chunk *chunks;   /* newest first */
  arena_region *regions; /* newest first */
  arena_big *bigs;       /* big allocations in the order made (so by address within a region) */
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
  for (arena_region *r = a->regions, *next; r; r = next) {
    next = r->next;
    munmap(r->base, r->size);
    free(r);
  }
  free(a->bigs);
  free(a);
}

static void *alloc_big(core_arena *a, size_t size, size_t align) {
  if (a->n_bigs == a->cap_bigs) {
    size_t cap = a->cap_bigs ? a->cap_bigs * 2 : 64;
    arena_big *bigs = realloc(a->bigs, cap * sizeof *bigs);
    if (!bigs) return NULL;
    a->bigs = bigs;
    a->cap_bigs = cap;
  }
  if (align < 64) align = 64;
  if (size > SIZE_MAX / 2) return NULL; /* rounding up below must not wrap */
  arena_region *r = a->regions;
  size_t offset = r ? round_up(r->used, align) : 0;
  if (!r || offset > r->size || size > r->size - offset) {
    size_t want = round_up(size, HUGE_PAGE);
    if (want < REGION) want = REGION;
    r = malloc(sizeof *r);
    if (!r) return NULL;
    if (!(r->base = map_huge_aligned(want, MAP_NORESERVE))) {
      free(r);
      return NULL;
    }
    r->size = want;
    r->used = 0;
    r->next = a->regions;
    a->regions = r;
    offset = 0;
  }
  char *p = r->base + offset;
  r->used = offset + size;
  a->bigs[a->n_bigs++] = (arena_big){p, size, false};
  a->bytes += size;
  return p;
}

void *core_arena_alloc(core_arena *a, size_t size, size_t align) {
  if (align < 16) align = 16;
  if (size >= CORE_ARENA_BIG) return alloc_big(a, size, align);
  arena_chunk *c = a->chunks;
  size_t offset = c ? round_up(c->used, align) : 0;
  if (!c || offset + size > c->size) {
    size_t need = round_up(sizeof(arena_chunk), align) + size;
    size_t chunk = need > a->chunk_size ? need : a->chunk_size;
    /* small pages: a chunk of small objects is rarely filled to a 2 MB boundary, and a
     * huge page there would be mostly padding (3 MB more RSS loading resnet152) */
    if (!(c = map_small(chunk))) return NULL;
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

/* Drops the pages of big allocation i, and the page it shares with a neighbour (the
 * allocations made just before and after it) once that neighbour is released too. */
static void drop_pages(core_arena *a, size_t i) {
  const arena_big *b = &a->bigs[i];
  uintptr_t start = (uintptr_t)b->p, end = start + b->size;
  uintptr_t from = start / SMALL_PAGE * SMALL_PAGE, to = round_up(end, SMALL_PAGE);
  if (i > 0) {
    const arena_big *prev = &a->bigs[i - 1];
    if (!prev->released && prev->p < b->p && (uintptr_t)prev->p + prev->size > from) from += SMALL_PAGE;
  }
  if (i + 1 < a->n_bigs) {
    const arena_big *next = &a->bigs[i + 1];
    if (!next->released && next->p > b->p && (uintptr_t)next->p < to) to -= SMALL_PAGE;
  }
  if (to <= from) return;
  /* Not huge-page material any more: khugepaged would otherwise collapse a 2 MB stretch
   * that keeps a live page back into a whole (zero-filled) huge page. Adjacent released
   * ranges share the flag, so their areas merge again. */
  madvise((void *)from, to - from, MADV_NOHUGEPAGE);
  madvise((void *)from, to - from, MADV_DONTNEED);
}

void core_arena_release(core_arena *a, void *p) {
  for (size_t i = a->n_bigs; i-- > 0;) {
    if (a->bigs[i].p == p && !a->bigs[i].released) {
      a->bigs[i].released = true;
      drop_pages(a, i);
      a->bytes -= a->bigs[i].size;
      return;
    }
  }
}

size_t core_arena_bytes(const core_arena *a) { return a->bytes; }
