/*
 * topo_plan.c - placement plans: which cores each worker's OpenMP team runs on.
 *
 * DESIGN
 * The unit of placement is a slot: a usable physical core (its first usable PU is the
 * one a thread binds to, so that a thread never migrates between hyperthreads), or with
 * use_logical_core every usable PU, siblings next to each other so that a worker takes
 * whole cores before it spills onto the next one. Each NUMA node that may be used
 * (every node, or node_id only) has its list of slots in core order. With
 * use_logical_core, a node whose workers take no more threads than it has cores gets
 * one thread per core instead (first PUs first, as Linux numbers them): two threads on
 * one core's hyperthreads share its FMA units, so siblings are used only when needed.
 * When they are, each worker starts on a core of its own (two workers never share a
 * core unless the node has too few cores for that).
 *
 *   1. Quota: when the cgroup's quota cap is below the number of slots, a warning says
 *      so and the plan uses at most cap slots. With one worker per node (workers = 0)
 *      or more workers than the cap, the nodes give up slots in turn (water-filling)
 *      until the cap is met, so that the plan stays balanced across nodes. With W
 *      workers that fit, the cap bounds W x T instead: a node keeps all its slots, so
 *      that one worker in a 4-CPU container on two 4-core nodes gets 4 threads, not the
 *      2 its node would keep after water-filling.
 *   2. workers = 0: one worker per node with slots, using all of them (or
 *      threads_per_worker of them when fewer).
 *   3. workers = W: every worker gets the same thread count T, and a worker never spans
 *      nodes. T defaults to the largest t with sum over nodes of floor(slots/t) >= W
 *      (and W x t within the quota cap);
 *      a given T that does not fit is lowered to that t, with a warning. Workers go one
 *      at a time to the node with the most slots left, so they spread over nodes.
 *      Slots left over stay idle (the plan reports slots_used).
 *   4. More workers than slots: each worker gets one thread and the slots are dealt
 *      round-robin, so workers share cores; `oversubscribed` is set and a warning says
 *      so. The caller decides whether to accept such a plan.
 *
 * A plan is one allocation of plain arrays; it borrows its topo for binding.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "topo/topo_internal.h"

enum { PLAN_MAX_WORKERS = 4096, PLAN_MAX_THREADS = 4096 };

typedef struct slot {
  int cpu;  /* PU OS index */
  int core; /* index into machine cores */
  int rank; /* which of its core's usable PUs: 0 for the first */
} slot;

typedef struct node_slots {
  int os_index;
  int count;  /* usable slots in the node */
  int cap;    /* slots the plan may use after the quota */
  int taken;  /* slots handed to workers so far */
  slot *slots;
} node_slots;

typedef struct plan_storage {
  topo_plan plan; /* first: a topo_plan * is a plan_storage * */
  topo_worker *workers;
  int *cpus, *cores;
  char *lists;
} plan_storage;

static void warn(topo_plan *plan, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(topo_plan *plan, const char *fmt, ...) {
  if (plan->warning_count >= TOPO_MAX_WARNINGS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(plan->warnings[plan->warning_count++], TOPO_WARNING_MAX, fmt, ap);
  va_end(ap);
}

/* The slots of each eligible node; nodes without any are left out. */
static int collect_slots(const topo *t, const topo_plan_params *p, node_slots *nodes, slot *storage) {
  int n = 0;
  slot *next = storage;
  for (int i = 0; i < t->node_count; i++) {
    const topo_node *node = &t->nodes[i];
    if (p->node_id != TOPO_NODE_ANY && node->os_index != p->node_id) continue;
    node_slots *ns = &nodes[n];
    *ns = (node_slots){.os_index = node->os_index, .slots = next};
    for (int k = 0; k < node->core_count; k++) {
      const topo_core *core = &t->cores[node->cores[k]];
      int take = p->use_logical_core ? core->usable_pu_count : CORE_MIN(core->usable_pu_count, 1);
      for (int j = 0; j < take; j++) ns->slots[ns->count++] = (slot){.cpu = core->usable_pus[j], .core = core->index, .rank = j};
    }
    if (ns->count == 0) continue;
    ns->cap = ns->count;
    next += ns->count;
    n++;
  }
  return n;
}

/* Orders a node's slots by rank (every core's first PU, then every second PU). `tmp`
 * holds ns->count slots. */
static void order_by_rank(node_slots *ns, slot *tmp) {
  int max_rank = 0;
  for (int i = 0; i < ns->count; i++) max_rank = CORE_MAX(max_rank, ns->slots[i].rank);
  int k = 0;
  for (int r = 0; r <= max_rank; r++)
    for (int i = 0; i < ns->count; i++)
      if (ns->slots[i].rank == r) tmp[k++] = ns->slots[i];
  memcpy(ns->slots, tmp, (size_t)ns->count * sizeof *tmp);
}

/* With use_logical_core: when a node's workers take no more threads than the node has
 * cores, orders its slots by rank, so that each thread gets a core of its own, and
 * returns true. */
static bool spread_over_cores(node_slots *ns, slot *tmp) {
  int cores = 0;
  for (int i = 0; i < ns->count; i++) cores += ns->slots[i].rank == 0;
  if (ns->taken > cores) return false;
  order_by_rank(ns, tmp);
  return true;
}

/* One worker's assignment before it is copied into the plan. */
typedef struct assignment {
  int node;       /* index into node_slots */
  int first;      /* first slot in that node (or flat index when oversubscribed) */
  int threads;
} assignment;

/* With use_logical_core, when node `node`'s workers need hyperthreads (more threads than
 * the node has cores): lays its slots out so that each worker starts on a core of its
 * own and takes whole cores, the last one in part (its first PUs), instead of packing
 * workers back to back: 2 workers x 3 threads on 4 two-PU cores got PUs 0-2 and 3-5,
 * both on core 1. When workers would need more cores that way than the node has, they
 * share cores: one-thread workers take every core's first PU before any second one (5
 * workers on 4 cores left core 3 idle and put two workers on each of cores 0 and 1),
 * larger ones stay packed. Its workers' slots are [first, first + threads) in
 * assignment order. `tmp` holds ns->count slots. */
static void align_to_cores(node_slots *ns, int node, const assignment *assign, int workers, slot *tmp) {
  for (int pass = 0; pass < 2; pass++) { /* 0: does it fit? 1: lay it out */
    int k = 0, next = 0; /* slots laid out in tmp; the first slot of the next core free */
    for (int w = 0; w < workers; w++) {
      if (assign[w].node != node) continue;
      for (int need = assign[w].threads; need > 0;) {
        if (next >= ns->count) { /* (only in pass 0) */
          if (assign[w].threads == 1) order_by_rank(ns, tmp); /* all have one: T is the same for all */
          return;
        }
        int end = next + 1;
        while (end < ns->count && ns->slots[end].core == ns->slots[next].core) end++;
        int take = CORE_MIN(need, end - next);
        if (pass == 1)
          for (int j = next; j < next + take; j++) tmp[k++] = ns->slots[j], ns->slots[j].rank = -1;
        need -= take;
        next = end;
      }
    }
    if (pass == 1) {
      for (int j = 0; j < ns->count; j++) /* the rest, unused, after them (rank -1: taken) */
        if (ns->slots[j].rank >= 0) tmp[k++] = ns->slots[j];
      memcpy(ns->slots, tmp, (size_t)ns->count * sizeof *tmp);
    }
  }
}

/* Lowers the nodes' caps, one slot at a time in turn, until they add up to `cap`. */
static void apply_quota(node_slots *nodes, int n, int cap) {
  for (int i = 0; i < n; i++) nodes[i].cap = 0;
  int given = 0;
  while (given < cap) {
    int progressed = 0;
    for (int i = 0; i < n && given < cap; i++)
      if (nodes[i].cap < nodes[i].count) nodes[i].cap++, given++, progressed = 1;
    if (!progressed) break;
  }
}

/* Workers of `threads` threads each that fit in the nodes' slots and, all together, in
 * `budget` slots. */
static int workers_that_fit(const node_slots *nodes, int n, int threads, int budget) {
  int w = 0;
  for (int i = 0; i < n; i++) w += nodes[i].cap / threads;
  return CORE_MIN(w, budget / threads);
}

static inferd_code validate(const topo *t, const topo_plan_params *p, inferd_status *st) {
  if (p->workers < 0 || p->workers > PLAN_MAX_WORKERS)
    return core_fail(st, INFERD_INVALID_ARG, "workers %d: want 0 (one per NUMA node) to %d", p->workers, PLAN_MAX_WORKERS);
  if (p->threads_per_worker < 0 || p->threads_per_worker > PLAN_MAX_THREADS)
    return core_fail(st, INFERD_INVALID_ARG, "threads_per_worker %d: want 0 (auto) to %d", p->threads_per_worker,
                     PLAN_MAX_THREADS);
  if (p->node_id == TOPO_NODE_ANY) return INFERD_OK;
  int which = p->node_id >= 0 ? topo__node_slot(t, p->node_id) : -1;
  if (which < 0) {
    int ids[64], n = CORE_MIN(t->node_count, 64);
    char list[128];
    for (int i = 0; i < n; i++) ids[i] = t->nodes[i].os_index;
    return core_fail(st, INFERD_INVALID_ARG, "node_id %d: no such NUMA node (nodes: %s)", p->node_id,
                     topo_cpu_list(ids, n, list, sizeof list));
  }
  if (t->nodes[which].core_count == 0) /* memory without CPUs: HBM, CXL, a GPU's memory */
    return core_fail(st, INFERD_INVALID_ARG, "node_id %d: that NUMA node has memory but no CPU of its own", p->node_id);
  if (t->nodes[which].usable_core_count == 0)
    return core_fail(st, INFERD_INVALID_ARG, "node_id %d: this process may use none of that NUMA node's CPUs", p->node_id);
  return INFERD_OK;
}

inferd_code topo_plan_new(const topo *t, const topo_plan_params *params, topo_plan **out, inferd_status *st) {
  const topo_plan_params p = params ? *params : TOPO_PLAN_PARAMS_DEFAULT;
  *out = NULL;
  inferd_code rc = validate(t, &p, st);
  if (rc != INFERD_OK) return rc;

  plan_storage *ps = calloc(1, sizeof *ps);
  node_slots *nodes = calloc((size_t)t->node_count, sizeof *nodes);
  slot *slots = calloc((size_t)t->machine.pu_count, sizeof *slots);
  int max_workers = p.workers ? p.workers : t->node_count;
  assignment *assign = calloc((size_t)max_workers, sizeof *assign);
  if (!ps || !nodes || !slots || !assign) {
    rc = core_fail(st, INFERD_NO_MEMORY, "placement plan: out of memory");
    goto done;
  }
  topo_plan *plan = &ps->plan;
  plan->use_logical_core = p.use_logical_core;
  plan->node_id = p.node_id;
  const char *unit = p.use_logical_core ? "logical CPUs" : "physical cores";

  int n = collect_slots(t, &p, nodes, slots);
  int total = 0;
  for (int i = 0; i < n; i++) total += nodes[i].count;
  if (total == 0) {
    rc = core_fail(st, INFERD_UNAVAILABLE, "placement plan: no usable CPU");
    goto done;
  }
  int cap = t->machine.quota_cap;
  bool capped = cap > 0 && cap < total;
  if (capped) {
    /* Per-node caps only where workers are spread by node or dealt round-robin; W
     * workers that fit are held to the cap as a whole (W x T <= cap, see DESIGN). */
    if (p.workers == 0 || p.workers > cap) apply_quota(nodes, n, cap);
    warn(plan, "CPU quota of %.2f CPUs (%s): using %d of %d usable %s", t->machine.cpu_quota, t->machine.quota_source,
         cap, total, unit);
  }
  int available = capped ? cap : total;
  plan->slots_available = available;

  int workers = 0, T = p.threads_per_worker;
  if (p.workers == 0) {
    /* One worker per node that has slots. */
    int reduced_from = 0, reduced_to = 0, reduced_node = 0;
    for (int i = 0; i < n; i++) {
      if (nodes[i].cap == 0) continue;
      int threads = T && T < nodes[i].cap ? T : nodes[i].cap;
      if (T > nodes[i].cap && !reduced_from) reduced_from = T, reduced_to = nodes[i].cap, reduced_node = nodes[i].os_index;
      assign[workers++] = (assignment){.node = i, .first = nodes[i].taken, .threads = threads};
      nodes[i].taken += threads;
    }
    if (reduced_from)
      warn(plan, "threads_per_worker %d reduced to %d: NUMA node %d has %d usable %s", reduced_from, reduced_to,
           reduced_node, reduced_to, unit);
  } else if (p.workers <= available) {
    /* W workers of T threads each, T the largest that fits unless given and fitting. */
    int max_cap = 0;
    for (int i = 0; i < n; i++) max_cap = CORE_MAX(max_cap, nodes[i].cap);
    int best = 1;
    for (int t_try = max_cap; t_try >= 1; t_try--)
      if (workers_that_fit(nodes, n, t_try, available) >= p.workers) {
        best = t_try;
        break;
      }
    if (T == 0) {
      T = best;
    } else if (workers_that_fit(nodes, n, T, available) < p.workers) {
      if (T > max_cap)
        warn(plan, "threads_per_worker %d reduced to %d: a worker stays inside one NUMA node, and none has more than %d usable %s",
             T, best, max_cap, unit);
      else if (capped && workers_that_fit(nodes, n, T, total) >= p.workers)
        warn(plan, "threads_per_worker %d reduced to %d: %d workers x %d threads exceed the CPU quota's %d %s", T, best,
             p.workers, T, available, unit);
      else
        warn(plan, "threads_per_worker %d reduced to %d: %d workers x %d threads do not fit in the %d usable %s of %s",
             T, best, p.workers, T, available, unit, n == 1 ? "this NUMA node" : "these NUMA nodes");
      T = best;
    }
    for (int w = 0; w < p.workers; w++) {
      int pick = -1;
      for (int i = 0; i < n; i++)
        if (nodes[i].cap - nodes[i].taken >= T && (pick < 0 || nodes[i].cap - nodes[i].taken > nodes[pick].cap - nodes[pick].taken))
          pick = i;
      if (pick < 0) { /* cannot happen: T was chosen so that the workers fit */
        rc = core_fail(st, INFERD_INTERNAL, "placement plan: worker %d does not fit", w);
        goto done;
      }
      assign[workers++] = (assignment){.node = pick, .first = nodes[pick].taken, .threads = T};
      nodes[pick].taken += T;
    }
  } else {
    /* More workers than slots: one thread each, slots dealt round-robin. */
    plan->oversubscribed = true;
    if (T > 1) warn(plan, "threads_per_worker %d reduced to 1: more workers than usable %s", T, unit);
    /* logical CPUs help only where neither node_id nor the quota limits them too */
    int logical = 0;
    for (int i = 0; i < t->node_count; i++)
      if (p.node_id == TOPO_NODE_ANY || t->nodes[i].os_index == p.node_id) logical += t->nodes[i].usable_pu_count;
    if (cap > 0) logical = CORE_MIN(logical, cap);
    int more = p.use_logical_core ? 0 : logical - available;
    warn(plan, "%d workers on %d usable %s: workers share cores (oversubscribed); use at most %d worker%s%s", p.workers,
         available, unit, available, available == 1 ? "" : "s", more > 0 ? " or use_logical_core" : "");
    for (int w = 0; w < p.workers; w++) {
      int flat = w % available, i = 0;
      while (flat >= nodes[i].cap) flat -= nodes[i++].cap;
      assign[workers++] = (assignment){.node = i, .first = flat, .threads = 1};
      if (nodes[i].taken < flat + 1) nodes[i].taken = flat + 1;
    }
  }

  if (p.use_logical_core && !plan->oversubscribed) {
    slot *tmp = calloc((size_t)t->machine.pu_count, sizeof *tmp);
    if (!tmp) {
      rc = core_fail(st, INFERD_NO_MEMORY, "placement plan: out of memory");
      goto done;
    }
    for (int i = 0; i < n; i++)
      if (!spread_over_cores(&nodes[i], tmp)) align_to_cores(&nodes[i], i, assign, workers, tmp);
    free(tmp);
  }

  /* Copy the assignments into the plan's arrays. */
  int threads_total = 0;
  for (int w = 0; w < workers; w++) threads_total += assign[w].threads;
  size_t list_size = 24; /* per thread: a number and a separator; plus slack */
  ps->workers = calloc((size_t)workers, sizeof *ps->workers);
  ps->cpus = calloc((size_t)threads_total, sizeof *ps->cpus);
  ps->cores = calloc((size_t)threads_total, sizeof *ps->cores);
  ps->lists = calloc((size_t)threads_total * 12 + (size_t)workers * list_size, 1);
  if (!ps->workers || !ps->cpus || !ps->cores || !ps->lists) {
    rc = core_fail(st, INFERD_NO_MEMORY, "placement plan: out of memory");
    goto done;
  }
  int used = 0, k = 0;
  char *list = ps->lists;
  for (int w = 0; w < workers; w++) {
    topo_worker *tw = &ps->workers[w];
    const node_slots *ns = &nodes[assign[w].node];
    *tw = (topo_worker){.index = w, .node = ns->os_index, .thread_count = assign[w].threads, .cpus = ps->cpus + k,
                        .cores = ps->cores + k, .cpu_list = list, .topo = t};
    for (int i = 0; i < assign[w].threads; i++, k++) {
      ps->cpus[k] = ns->slots[assign[w].first + i].cpu;
      ps->cores[k] = ns->slots[assign[w].first + i].core;
    }
    size_t size = (size_t)assign[w].threads * 12 + list_size;
    topo_cpu_list(tw->cpus, tw->thread_count, list, size);
    list += size;
    plan->threads_per_worker = CORE_MAX(plan->threads_per_worker, tw->thread_count);
  }
  for (int i = 0; i < n; i++) used += nodes[i].taken;
  plan->worker_count = workers;
  plan->workers = ps->workers;
  plan->slots_used = used;
  *out = plan;
  rc = INFERD_OK;

done:
  free(nodes);
  free(slots);
  free(assign);
  if (rc != INFERD_OK) topo_plan_free(ps ? &ps->plan : NULL);
  return rc;
}

void topo_plan_free(topo_plan *plan) {
  if (!plan) return;
  plan_storage *ps = (plan_storage *)plan;
  free(ps->workers);
  free(ps->cpus);
  free(ps->cores);
  free(ps->lists);
  free(ps);
}
