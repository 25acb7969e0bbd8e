/*
 * topo_bind.c - a worker thread pins itself and its OpenMP team to its cores.
 *
 * DESIGN
 * oneDNN (built with the OpenMP runtime, as Debian's is) runs every primitive in
 * `#pragma omp parallel` regions started by the thread that calls it: the worker thread
 * is the master of its own team. libgomp keeps one pool of threads per master thread
 * and hands thread i of every later region to the same OS thread as long as the team
 * does not grow, so binding each team member once, from inside a region of the right
 * size, keeps the team on the worker's cores for good. OMP_PROC_BIND/OMP_PLACES cannot
 * do this: they are one setting for the whole process, and each worker has its own cores.
 *
 * Order matters: the caller first binds itself to the union of the worker's CPUs, so
 * that threads the runtime creates inherit a mask inside the worker's set, then each
 * team member (the caller is member 0) narrows itself to its own CPU.
 *
 * Memory: the worker's thread prefers its NUMA node (hwloc's non-strict BIND is
 * MPOL_PREFERRED on Linux), so its scratch arena is local without failing when the node
 * is full. Best effort, and skipped on one-node machines.
 *
 * ThreadSanitizer: Debian's libgomp is not instrumented, so TSan does not see that a
 * region's start orders the team after the caller, its end the caller after the team,
 * nor the critical section's lock. Without being told, it takes every access of the
 * region for a race with what the worker and its model did before and after (down to
 * the plan a scale frees once the worker has left bind_worker), and it often cannot
 * even name the region's side, so no suppression matches. The TSAN_* marks below say it;
 * they are nothing outside a -fsanitize=thread build (INFERD_TSAN).
 */
#include <errno.h>
#include <omp.h>
#include <string.h>

#include "core/core.h"
#include "topo/topo_internal.h"

#ifdef __SANITIZE_THREAD__
#include <sanitizer/tsan_interface.h>
#define TSAN_RELEASE(address) __tsan_release(address)
#define TSAN_ACQUIRE(address) __tsan_acquire(address)
#else
#define TSAN_RELEASE(address) ((void)(address))
#define TSAN_ACQUIRE(address) ((void)(address))
#endif

inferd_code topo_bind_current_thread(const topo_worker *w, inferd_status *st) {
  const topo *t = w->topo;
  if (!t->machine.bindable)
    return core_fail(st, INFERD_UNSUPPORTED, "worker %d: cannot bind threads on %s", w->index, t->machine.source);
  if (w->thread_count < 1) return core_fail(st, INFERD_INVALID_ARG, "worker %d: no thread to bind", w->index);
  if (omp_in_parallel())
    return core_fail(st, INFERD_INVALID_ARG, "worker %d: binding from inside an OpenMP parallel region", w->index);

  hwloc_bitmap_t all = hwloc_bitmap_alloc();
  if (!all) return core_fail(st, INFERD_NO_MEMORY, "worker %d: out of memory", w->index);
  for (int i = 0; i < w->thread_count; i++) hwloc_bitmap_set(all, (unsigned)w->cpus[i]);
  int rc = hwloc_set_cpubind(t->hw, all, HWLOC_CPUBIND_THREAD);
  int err = errno;
  hwloc_bitmap_free(all);
  if (rc) return core_fail(st, INFERD_UNAVAILABLE, "worker %d: cannot bind to cpus %s: %s", w->index, w->cpu_list, strerror(err));

  if (t->node_count > 1) {
    hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(t->hw, (unsigned)w->node);
    if (node && hwloc_set_membind(t->hw, node->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET))
      core_log(CORE_LOG_DEBUG, "worker %d: memory stays unbound (NUMA node %d): %s", w->index, w->node, strerror(errno));
  }

  /* Both are per-thread settings (the thread's data environment): other workers keep theirs. */
  omp_set_dynamic(0);
  omp_set_num_threads(w->thread_count);
  int failed = 0, failed_cpu = -1, failed_errno = 0, team = 0;
  char region_start, region_end, critical; /* addresses for TSan only: what libgomp does, said to TSan */
  TSAN_RELEASE(&region_start);
#pragma omp parallel num_threads(w->thread_count)
  {
    TSAN_ACQUIRE(&region_start);
    int i = omp_get_thread_num();
    hwloc_bitmap_t one = hwloc_bitmap_alloc();
    if (!one || hwloc_bitmap_only(one, (unsigned)w->cpus[i]) || hwloc_set_cpubind(t->hw, one, HWLOC_CPUBIND_THREAD)) {
      int bind_errno = errno; /* before the critical section, whose lock may wait in futex() */
      /* Under the lock rather than a reduction: GCC adds a reduction's share after the
       * last statement of the region, where TSan could not be told about the join. */
#pragma omp critical(topo_bind_error)
      {
        TSAN_ACQUIRE(&critical);
        failed++;
        failed_cpu = w->cpus[i], failed_errno = bind_errno;
        TSAN_RELEASE(&critical);
      }
    }
    hwloc_bitmap_free(one);
    if (i == 0) team = omp_get_num_threads();
    TSAN_RELEASE(&region_end);
  }
  TSAN_ACQUIRE(&region_end);
  if (failed)
    return core_fail(st, INFERD_UNAVAILABLE, "worker %d: cannot bind an OpenMP thread to cpu %d: %s", w->index, failed_cpu,
                     strerror(failed_errno));
  if (team < w->thread_count)
    core_log(CORE_LOG_WARN, "worker %d: OpenMP gave %d of %d threads (OMP_THREAD_LIMIT?)", w->index, team, w->thread_count);
  return INFERD_OK;
}
