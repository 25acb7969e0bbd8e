/*
 * fuzz_topo.c - libFuzzer target for what `inferd topo` makes of its command line: the
 * hwloc synthetic description (--synthetic), the CPU list (--cpus), the CPU quota and
 * the plan's options, through topo_new, topo_plan_new and the printers (src/topo/).
 *
 * Input: an `inferd topo` command line, as fuzz_cli reads one (NUL bytes split the
 * arguments; no subcommand byte), parsed by cli__topo_parse; fuzz_cli checks its
 * refusals. A line without --synthetic describes "pack:2 numa:2 core:4 pu:2" (never
 * this machine, which would make the answers depend on where the fuzzer runs); one
 * with --xml is skipped (a file's name: hwloc's XML reader is not fuzzed here).
 *
 * The promise: success, or a status (INVALID_ARG for a bad description, CPU list or
 * plan option) with a one-line message, never a crash, a hang (a description of more
 * objects than topo_new takes is refused before hwloc builds them, and
 * topo__synthetic_size never counts fewer PUs or objects than hwloc builds) or a
 * wrong answer:
 *   - the machine: per-core, per-node and total counts agree; the nodes are in OS
 *     index order and their cores partition the machine's; usable PUs are a core's own,
 *     and with --cpus lie in the list as this file reads it (digits and ranges, whole
 *     numbers: nothing wraps); usable_cpus lists exactly the usable PUs; a given quota is
 *     the machine's, with its cap floor(quota) (at least 1);
 *   - the plan: the invariants of tests/unit/test_topo.c's check_plan (each worker on
 *     usable CPUs of its own node, no CPU or core given twice unless oversubscribed, no
 *     more slots than the quota and the usable cores allow), each worker's cpu_list is
 *     its CPUs, warnings are one line;
 *   - the printers and topo_plan_summary stay inside their buffers and lines.
 *
 * Seeds: tests/fuzz/corpus/topo/.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_internal.h"
#include "topo/topo_internal.h"

enum { MAX_ARGS = 64, FUZZ_MAX_OBJECTS = 1024 };

static const char DEFAULT_MACHINE[] = "pack:2 numa:2 core:4 pu:2";

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_topo: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

static void check_refusal(inferd_code rc, const inferd_status *st) {
  if (st->code != rc || !st->message[0] || strchr(st->message, '\n') || strchr(st->message, '\r'))
    fail("a refusal without a one-line message", st->message);
}

/* ---- the CPU list, read here: "0-3,8" -------------------------------------------------- */

typedef struct cpu_range {
  unsigned long long first, last;
} cpu_range;

/* Ranges of a list topo_new accepted (its syntax is checked there); number of ranges. */
static int read_list(const char *s, cpu_range *ranges, int max) {
  int n = 0;
  while (*s && n < max) {
    char *end;
    unsigned long long a = strtoull(s, &end, 10), b = a;
    if (*end == '-') b = strtoull(end + 1, &end, 10);
    ranges[n++] = (cpu_range){a, b};
    s = *end == ',' ? end + 1 : end;
  }
  return n;
}

static bool in_list(const cpu_range *ranges, int n, int cpu) {
  for (int i = 0; i < n; i++)
    if ((unsigned long long)cpu >= ranges[i].first && (unsigned long long)cpu <= ranges[i].last) return true;
  return false;
}

/* ---- the machine ------------------------------------------------------------------------ */

static int compare_ints(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* topo_cpu_list's text for these CPUs, read back: the same set. */
static void check_list_text(const char *text, const int *cpus, int count, const char *what) {
  if (strstr(text, "...")) return; /* truncated */
  int *sorted = malloc(((size_t)count + 1) * sizeof *sorted);
  if (!sorted) abort();
  memcpy(sorted, cpus, (size_t)count * sizeof *sorted);
  qsort(sorted, (size_t)count, sizeof *sorted, compare_ints);
  cpu_range ranges[4096];
  int n = read_list(text, ranges, 4096), k = 0;
  for (int i = 0; i < n; i++)
    for (unsigned long long c = ranges[i].first; c <= ranges[i].last; c++) {
      while (k > 0 && k < count && sorted[k] == sorted[k - 1]) k++; /* duplicates print once */
      if (k >= count || (unsigned long long)sorted[k] != c) fail("a CPU list that is not its CPUs", what);
      k++;
    }
  while (k > 0 && k < count && sorted[k] == sorted[k - 1]) k++;
  if (k != count) fail("a CPU list missing CPUs", what);
  free(sorted);
}

static void check_machine(const topo *t, const cli__topo_options *o) {
  const topo_machine *m = topo_get_machine(t);
  if (m->node_count < 1 || m->core_count < 1 || m->pu_count < m->core_count || m->package_count < 1)
    fail("a machine without nodes, cores or packages", m->source);
  int pus = 0, usable_pus = 0, usable_cores = 0;
  int *usable = malloc((size_t)m->pu_count * sizeof *usable);
  if (!usable) abort();
  cpu_range ranges[256];
  int range_count = o->topo.allowed_cpus ? read_list(o->topo.allowed_cpus, ranges, 256) : 0;
  for (int c = 0; c < m->core_count; c++) {
    const topo_core *core = &m->cores[c];
    if (core->index != c || core->pu_count < 1 || core->usable_pu_count < 0 || core->usable_pu_count > core->pu_count)
      fail("a core's counts", m->source);
    if (topo__node_slot(t, core->node) < 0) fail("a core on no node", m->source);
    for (int i = 0; i < core->usable_pu_count; i++) {
      bool own = false;
      for (int j = 0; j < core->pu_count; j++) own |= core->pus[j] == core->usable_pus[i];
      if (!own) fail("a usable PU of another core", m->source);
      if (o->topo.allowed_cpus && range_count < 256 && !in_list(ranges, range_count, core->usable_pus[i]))
        fail("a usable PU outside --cpus", o->topo.allowed_cpus);
      usable[usable_pus++] = core->usable_pus[i];
    }
    pus += core->pu_count;
    usable_cores += core->usable_pu_count > 0;
  }
  if (pus != m->pu_count || usable_pus != m->usable_pu_count || usable_cores != m->usable_core_count)
    fail("the machine's counts are not its cores'", m->source);
  if (usable_pus == 0) fail("a machine without a usable PU", m->source);
  check_list_text(m->usable_cpus, usable, usable_pus, "usable_cpus");
  free(usable);

  int node_cores = 0;
  for (int i = 0; i < m->node_count; i++) {
    const topo_node *node = &m->nodes[i];
    if (i && node->os_index <= m->nodes[i - 1].os_index) fail("nodes out of OS index order", m->source);
    int usable_here = 0, pus_here = 0;
    for (int k = 0; k < node->core_count; k++) {
      int c = node->cores[k];
      if (c < 0 || c >= m->core_count || m->cores[c].node != node->os_index) fail("a node's core is not on it", m->source);
      usable_here += m->cores[c].usable_pu_count > 0;
      pus_here += m->cores[c].usable_pu_count;
    }
    if (usable_here != node->usable_core_count || pus_here != node->usable_pu_count) fail("a node's counts", m->source);
    node_cores += node->core_count;
  }
  if (node_cores != m->core_count) fail("the nodes' cores are not the machine's", m->source);

  double quota = o->topo.cpu_quota;
  if (quota > 0) { /* at most 1e6 from the command line */
    if (m->cpu_quota != quota || m->quota_cap != (quota < 1 ? 1 : (int)floor(quota)))
      fail("the quota or its cap is not the one given", m->source);
  } else if (m->cpu_quota != 0 || m->quota_cap != 0) {
    fail("a quota on a synthetic machine without one", m->source);
  }
}

/* ---- the plan ------------------------------------------------------------------------- */

static const topo_core *core_of_cpu(const topo_machine *m, int cpu) {
  for (int c = 0; c < m->core_count; c++)
    for (int i = 0; i < m->cores[c].pu_count; i++)
      if (m->cores[c].pus[i] == cpu) return &m->cores[c];
  return NULL;
}

static bool usable_cpu(const topo_core *c, int cpu) {
  for (int i = 0; c && i < c->usable_pu_count; i++)
    if (c->usable_pus[i] == cpu) return true;
  return false;
}

static void check_plan(const topo *t, const topo_plan *plan, const topo_plan_params *p) {
  const topo_machine *m = topo_get_machine(t);
  /* how often each core, and each CPU (by core index * most PUs of a core + its rank), was given */
  int max_pus = 1;
  for (int c = 0; c < m->core_count; c++) max_pus = m->cores[c].pu_count > max_pus ? m->cores[c].pu_count : max_pus;
  int *core_owner = calloc((size_t)m->core_count, sizeof(int));
  int *cpu_seen_at = calloc((size_t)m->core_count * (size_t)max_pus, sizeof(int));
  if (!core_owner || !cpu_seen_at) abort();
  if (plan->worker_count < 1) fail("a plan without workers", NULL);
  if (p->workers && plan->worker_count != p->workers) fail("another number of workers than asked", NULL);
  int threads = 0;
  for (int w = 0; w < plan->worker_count; w++) {
    const topo_worker *wk = &plan->workers[w];
    if (wk->index != w || wk->thread_count < 1 || wk->thread_count > plan->threads_per_worker || wk->topo != t)
      fail("a worker's index, thread count or topo", NULL);
    if (p->node_id != TOPO_NODE_ANY && wk->node != p->node_id) fail("a worker outside --node-id", NULL);
    for (int i = 0; i < wk->thread_count; i++) {
      int cpu = wk->cpus[i];
      const topo_core *c = core_of_cpu(m, cpu);
      if (!c || !usable_cpu(c, cpu)) fail("a worker on a CPU that is not usable", NULL);
      if (c->node != wk->node) fail("a worker's CPU on another node", NULL);
      if (wk->cores[i] != c->index) fail("a worker's core is not its CPU's", NULL);
      int rank = 0;
      while (c->pus[rank] != cpu) rank++;
      if (!plan->oversubscribed && cpu_seen_at[c->index * max_pus + rank]++) fail("a CPU given twice", NULL);
      if (!plan->use_logical_core && !plan->oversubscribed && core_owner[c->index]++) fail("a core given twice", NULL);
      threads++;
    }
    check_list_text(wk->cpu_list, wk->cpus, wk->thread_count, "a worker's cpu_list");
  }
  if (plan->slots_used > plan->slots_available) fail("more slots used than available", NULL);
  if (!plan->oversubscribed && plan->slots_used != threads) fail("slots_used is not the threads' count", NULL);
  int limit = plan->use_logical_core ? m->usable_pu_count : m->usable_core_count;
  if (plan->slots_available > limit) fail("more slots than usable cores", NULL);
  if (m->quota_cap && plan->slots_available > m->quota_cap) fail("more slots than the quota allows", NULL);
  if (plan->warning_count < 0 || plan->warning_count > TOPO_MAX_WARNINGS) fail("the warning count", NULL);
  for (int i = 0; i < plan->warning_count; i++)
    if (!plan->warnings[i][0] || strchr(plan->warnings[i], '\n') ||
        strnlen(plan->warnings[i], TOPO_WARNING_MAX) == TOPO_WARNING_MAX)
      fail("a warning that is not one line", plan->warnings[i]);
  free(core_owner);
  free(cpu_seen_at);
}

static void check_printing(const topo *t, const topo_plan *plan) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  if (!f) abort();
  topo_print_machine(t, f);
  topo_print_plan(plan, f);
  fclose(f);
  if (strlen(text) != size || strncmp(text, "machine: ", 9) != 0 || text[size - 1] != '\n')
    fail("the printed machine and plan", text);
  free(text);
  char small[40];
  for (size_t n = 1; n <= sizeof small; n += 13) {
    memset(small, 'x', sizeof small);
    topo_plan_summary(plan, small, n);
    if (strnlen(small, n) >= n) fail("topo_plan_summary past its buffer", NULL);
  }
}

/* ---- the input -------------------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *copy = malloc(size + 1), *argv[MAX_ARGS + 1] = {"topo"};
  if (!copy) abort();
  memcpy(copy, data, size);
  copy[size] = '\0';
  int argc = 1;
  for (char *p = copy; p < copy + size && argc < MAX_ARGS; p += strlen(p) + 1) argv[argc++] = p;
  argv[argc] = NULL;

  cli__topo_options o;
  inferd_status st = {0};
  if (cli__topo_parse(argc, argv, &o, &st) != INFERD_OK || o.help || o.topo.xml_path) {
    free(copy);
    return 0;
  }
  if (!o.topo.synthetic) o.topo.synthetic = DEFAULT_MACHINE;
  /* Large machines are slow to build (hwloc inserts objects in quadratic time): the
   * refusal above topo_new's limit is checked, the build only for small ones. */
  uint64_t pus, objects;
  topo__synthetic_size(o.topo.synthetic, &pus, &objects);
  bool too_large = pus > TOPO_MAX_SYNTHETIC_PUS || objects > TOPO_MAX_SYNTHETIC_OBJECTS;
  if (objects > FUZZ_MAX_OBJECTS && !too_large) {
    free(copy);
    return 0;
  }
  topo *t = NULL;
  inferd_code rc = topo_new(&o.topo, &t, &st);
  if (rc != INFERD_OK) {
    check_refusal(rc, &st);
    if (t) fail("a refusal returned a topo", NULL);
    free(copy);
    return 0;
  }
  const topo_machine *m = topo_get_machine(t);
  if (too_large) fail("a machine above the limits was built", o.topo.synthetic);
  /* (hwloc adds a NUMA node when the description has none) */
  if ((uint64_t)m->pu_count > pus || (uint64_t)(m->pu_count + m->node_count) > objects + 1)
    fail("more PUs or objects than topo__synthetic_size counted", o.topo.synthetic);
  check_machine(t, &o);
  topo_plan *plan = NULL;
  rc = topo_plan_new(t, &o.plan, &plan, &st);
  if (rc != INFERD_OK) {
    check_refusal(rc, &st);
    if (plan) fail("a refusal returned a plan", NULL);
  } else {
    check_plan(t, plan, &o.plan);
    check_printing(t, plan);
    topo_plan_free(plan);
  }
  topo_free(t);
  free(copy);
  return 0;
}
