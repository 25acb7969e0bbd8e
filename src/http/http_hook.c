/*
 * http_hook.c - learning that h2o disposed a request that waited for jobs.
 *
 * DESIGN
 *
 * A request that waits for its jobs must learn when h2o disposes it: before its answer
 * (an HTTP/2 client reset its stream: the jobs are cancelled) and after it (an answer
 * written into an answer block: the block goes back to the loop). h2o 2.2's one
 * per-request callback is a shared entry in the request's pool, which
 * h2o_mem_alloc_shared mallocs and frees for each request. Instead, every listener's
 * path has a logger (http_server.c), whose log_access h2o_dispose_request calls for
 * every request it disposes, before it clears the request's pool; the logger
 * (http__request_disposed) takes the request's hook out of its loop's table here.
 *
 * The table maps a request's address to its hook: open addressing with linear
 * probing, at most half full, removal by backward shift (no tombstones). Hooks are
 * recycled on the loop's free list. The table doubles when it must and never shrinks,
 * so after warm-up a request that waits allocates nothing; a request without a hook
 * (a ping, a management call) costs one hash and one probe of an empty slot.
 *
 * A hook lives from http__hook_attach until h2o disposes its request: the hook's job
 * field must be cleared before that job is recycled (the request outlives it), and
 * nothing may use the hook once the request is gone (its jobs then have req == NULL).
 *
 * Threading: a loop's table and hooks are touched only by that loop's thread.
 */
#include <stdint.h>
#include <stdlib.h>

#include "http/http_internal.h"

enum { FIRST_CAPACITY = 64 };

static size_t home(const http__loop *loop, const h2o_req_t *req) {
  uint64_t h = (uint64_t)(uintptr_t)req * 0x9E3779B97F4A7C15ull; /* the high bits mix all of them */
  return (size_t)(h >> 32) & loop->hooks_mask;
}

static void place(http__loop *loop, http__hook *hook) {
  size_t i = home(loop, hook->req);
  while (loop->hooks[i]) i = (i + 1) & loop->hooks_mask;
  loop->hooks[i] = hook;
}

static bool grow(http__loop *loop) {
  size_t old_cap = loop->hooks ? loop->hooks_mask + 1 : 0;
  size_t cap = old_cap ? old_cap * 2 : FIRST_CAPACITY;
  http__hook **slots = calloc(cap, sizeof *slots);
  if (!slots) return false;
  http__hook **old = loop->hooks;
  loop->hooks = slots;
  loop->hooks_mask = cap - 1;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i]) place(loop, old[i]);
  free(old);
  return true;
}

http__hook *http__hook_attach(http__loop *loop, h2o_req_t *req) {
  size_t cap = loop->hooks ? loop->hooks_mask + 1 : 0;
  if ((loop->hook_count + 1) * 2 > cap && !grow(loop)) return NULL;
  http__hook *hook = loop->free_hooks;
  if (hook)
    loop->free_hooks = hook->next_free;
  else if (!(hook = malloc(sizeof *hook)))
    return NULL;
  *hook = (http__hook){.req = req};
  place(loop, hook);
  loop->hook_count++;
  return hook;
}

http__hook *http__hook_detach(http__loop *loop, const h2o_req_t *req) {
  if (loop->hook_count == 0) return NULL;
  size_t mask = loop->hooks_mask, i = home(loop, req);
  while (loop->hooks[i] && loop->hooks[i]->req != req) i = (i + 1) & mask;
  http__hook *hook = loop->hooks[i];
  if (!hook) return NULL;
  /* Backward shift: every later hook of the run whose home is not in (i, j] (cyclically)
   * could not be found past the hole at i, so it moves into it, leaving a hole at j. */
  for (size_t j = i;;) {
    loop->hooks[i] = NULL;
    for (;;) {
      j = (j + 1) & mask;
      if (!loop->hooks[j]) {
        loop->hook_count--;
        return hook;
      }
      size_t k = home(loop, loop->hooks[j]->req);
      bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
      if (!stays) break;
    }
    loop->hooks[i] = loop->hooks[j];
    i = j;
  }
}

void http__hook_put(http__loop *loop, http__hook *hook) {
  hook->next_free = loop->free_hooks;
  loop->free_hooks = hook;
}

void http__hooks_free(http__loop *loop) {
  size_t cap = loop->hooks ? loop->hooks_mask + 1 : 0;
  for (size_t i = 0; i < cap; i++) free(loop->hooks[i]); /* requests h2o never disposed */
  free(loop->hooks);
  loop->hooks = NULL;
  loop->hooks_mask = 0;
  loop->hook_count = 0;
  while (loop->free_hooks) {
    http__hook *hook = loop->free_hooks;
    loop->free_hooks = hook->next_free;
    free(hook);
  }
}
