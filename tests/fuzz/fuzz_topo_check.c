/*
 * fuzz_topo_check.c - what fuzz_topo and fuzz_topo_xml share (see fuzz_topo_check.h).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_topo_check.h"

int fuzz_topo_split_args(const char *text, size_t size, char **argv, int max_args, char **copy) {
  *copy = malloc(size + 1);
  if (!*copy) abort();
  if (size) memcpy(*copy, text, size);
  (*copy)[size] = '\0';
  int argc = 0;
  argv[argc++] = "topo";
  for (char *p = *copy; p < *copy + size && argc < max_args; p += strlen(p) + 1) argv[argc++] = p;
  argv[argc] = NULL;
  return argc;
}

void fuzz_topo_fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_topo: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

void fuzz_topo_check_refusal(inferd_code rc, const inferd_status *st) {
  if (rc == INFERD_OK || st->code != rc || !st->message[0] || strchr(st->message, '\n') || strchr(st->message, '\r'))
    fuzz_topo_fail("a refusal without a one-line message", st->message);
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
      if (k >= count || (unsigned long long)sorted[k] != c) fuzz_topo_fail("a CPU list that is not its CPUs", what);
      k++;
    }
  while (k > 0 && k < count && sorted[k] == sorted[k - 1]) k++;
  if (k != count) fuzz_topo_fail("a CPU list missing CPUs", what);
  free(sorted);
}

void fuzz_topo_check_machine(const topo *t, const topo_params *p) {
  const topo_machine *m = topo_get_machine(t);
  if (m->node_count < 1 || m->core_count < 1 || m->pu_count < m->core_count || m->package_count < 1)
    fuzz_topo_fail("a machine without nodes, cores or packages", m->source);
  int pus = 0, usable_pus = 0, usable_cores = 0;
  int *usable = malloc((size_t)m->pu_count * sizeof *usable);
  if (!usable) abort();
  cpu_range ranges[256];
  int range_count = p->allowed_cpus ? read_list(p->allowed_cpus, ranges, 256) : 0;
  for (int c = 0; c < m->core_count; c++) {
    const topo_core *core = &m->cores[c];
    if (core->index != c || core->pu_count < 1 || core->usable_pu_count < 0 || core->usable_pu_count > core->pu_count)
      fuzz_topo_fail("a core's counts", m->source);
    if (topo__node_slot(t, core->node) < 0) fuzz_topo_fail("a core on no node", m->source);
    for (int i = 0; i < core->usable_pu_count; i++) {
      bool own = false;
      for (int j = 0; j < core->pu_count; j++) own |= core->pus[j] == core->usable_pus[i];
      if (!own) fuzz_topo_fail("a usable PU of another core", m->source);
      if (p->allowed_cpus && range_count < 256 && !in_list(ranges, range_count, core->usable_pus[i]))
        fuzz_topo_fail("a usable PU outside the CPU list", p->allowed_cpus);
      usable[usable_pus++] = core->usable_pus[i];
    }
    pus += core->pu_count;
    usable_cores += core->usable_pu_count > 0;
  }
  if (pus != m->pu_count || usable_pus != m->usable_pu_count || usable_cores != m->usable_core_count)
    fuzz_topo_fail("the machine's counts are not its cores'", m->source);
  if (usable_pus == 0) fuzz_topo_fail("a machine without a usable PU", m->source);
  check_list_text(m->usable_cpus, usable, usable_pus, "usable_cpus");
  free(usable);

  /* Every CPU is one core's, once, and a number --cpus can name. */
  int *all = malloc((size_t)m->pu_count * sizeof *all), n = 0;
  if (!all) abort();
  for (int c = 0; c < m->core_count; c++)
    for (int i = 0; i < m->cores[c].pu_count; i++) all[n++] = m->cores[c].pus[i];
  qsort(all, (size_t)n, sizeof *all, compare_ints);
  for (int i = 0; i < n; i++) {
    if (all[i] < 0 || all[i] > TOPO_MAX_CPU_NUMBER) fuzz_topo_fail("a CPU number out of range", m->source);
    if (i && all[i] == all[i - 1]) fuzz_topo_fail("a CPU in two cores, or twice in one", m->source);
  }
  free(all);
  for (int c = 0; c < m->core_count; c++)
    if (m->cores[c].package < 0 || m->cores[c].package >= m->package_count) fuzz_topo_fail("a core's package", m->source);

  int node_cores = 0;
  for (int i = 0; i < m->node_count; i++) {
    const topo_node *node = &m->nodes[i];
    if (node->os_index < 0 || (i && node->os_index <= m->nodes[i - 1].os_index))
      fuzz_topo_fail("nodes out of OS index order, or numbered below 0", m->source);
    if (node->package < -1 || node->package >= m->package_count) fuzz_topo_fail("a node's package", m->source);
    int usable_here = 0, pus_here = 0;
    for (int k = 0; k < node->core_count; k++) {
      int c = node->cores[k];
      if (c < 0 || c >= m->core_count || m->cores[c].node != node->os_index) fuzz_topo_fail("a node's core is not on it", m->source);
      usable_here += m->cores[c].usable_pu_count > 0;
      pus_here += m->cores[c].usable_pu_count;
    }
    if (usable_here != node->usable_core_count || pus_here != node->usable_pu_count) fuzz_topo_fail("a node's counts", m->source);
    node_cores += node->core_count;
  }
  if (node_cores != m->core_count) fuzz_topo_fail("the nodes' cores are not the machine's", m->source);

  double quota = p->cpu_quota;
  if (quota > 0) { /* at most 1e6 from the command line */
    if (m->cpu_quota != quota || m->quota_cap != (quota < 1 ? 1 : (int)floor(quota)))
      fuzz_topo_fail("the quota or its cap is not the one given", m->source);
  } else if (m->cpu_quota != 0 || m->quota_cap != 0) {
    fuzz_topo_fail("a quota on a described machine without one", m->source);
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

static void check_plan_made(const topo *t, const topo_plan *plan, const topo_plan_params *p) {
  const topo_machine *m = topo_get_machine(t);
  /* how often each core, and each CPU (by core index * most PUs of a core + its rank), was given */
  int max_pus = 1;
  for (int c = 0; c < m->core_count; c++) max_pus = m->cores[c].pu_count > max_pus ? m->cores[c].pu_count : max_pus;
  int *core_owner = calloc((size_t)m->core_count, sizeof(int));
  int *cpu_seen_at = calloc((size_t)m->core_count * (size_t)max_pus, sizeof(int));
  if (!core_owner || !cpu_seen_at) abort();
  if (plan->worker_count < 1) fuzz_topo_fail("a plan without workers", NULL);
  if (p->workers && plan->worker_count != p->workers) fuzz_topo_fail("another number of workers than asked", NULL);
  int threads = 0;
  for (int w = 0; w < plan->worker_count; w++) {
    const topo_worker *wk = &plan->workers[w];
    if (wk->index != w || wk->thread_count < 1 || wk->thread_count > plan->threads_per_worker || wk->topo != t)
      fuzz_topo_fail("a worker's index, thread count or topo", NULL);
    if (p->node_id != TOPO_NODE_ANY && wk->node != p->node_id) fuzz_topo_fail("a worker outside --node-id", NULL);
    for (int i = 0; i < wk->thread_count; i++) {
      int cpu = wk->cpus[i];
      const topo_core *c = core_of_cpu(m, cpu);
      if (!c || !usable_cpu(c, cpu)) fuzz_topo_fail("a worker on a CPU that is not usable", NULL);
      if (c->node != wk->node) fuzz_topo_fail("a worker's CPU on another node", NULL);
      if (wk->cores[i] != c->index) fuzz_topo_fail("a worker's core is not its CPU's", NULL);
      int rank = 0;
      while (c->pus[rank] != cpu) rank++;
      if (!plan->oversubscribed && cpu_seen_at[c->index * max_pus + rank]++) fuzz_topo_fail("a CPU given twice", NULL);
      if (!plan->use_logical_core && !plan->oversubscribed && core_owner[c->index]++) fuzz_topo_fail("a core given twice", NULL);
      threads++;
    }
    check_list_text(wk->cpu_list, wk->cpus, wk->thread_count, "a worker's cpu_list");
  }
  if (plan->slots_used > plan->slots_available) fuzz_topo_fail("more slots used than available", NULL);
  if (!plan->oversubscribed && plan->slots_used != threads) fuzz_topo_fail("slots_used is not the threads' count", NULL);
  int limit = plan->use_logical_core ? m->usable_pu_count : m->usable_core_count;
  if (plan->slots_available > limit) fuzz_topo_fail("more slots than usable cores", NULL);
  if (m->quota_cap && plan->slots_available > m->quota_cap) fuzz_topo_fail("more slots than the quota allows", NULL);
  if (plan->warning_count < 0 || plan->warning_count > TOPO_MAX_WARNINGS) fuzz_topo_fail("the warning count", NULL);
  for (int i = 0; i < plan->warning_count; i++)
    if (!plan->warnings[i][0] || strchr(plan->warnings[i], '\n') ||
        strnlen(plan->warnings[i], TOPO_WARNING_MAX) == TOPO_WARNING_MAX)
      fuzz_topo_fail("a warning that is not one line", plan->warnings[i]);
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
    fuzz_topo_fail("the printed machine and plan", text);
  free(text);
  char small[40];
  for (size_t n = 1; n <= sizeof small; n += 13) {
    memset(small, 'x', sizeof small);
    topo_plan_summary(plan, small, n);
    if (strnlen(small, n) >= n) fuzz_topo_fail("topo_plan_summary past its buffer", NULL);
  }
}


void fuzz_topo_check_plan(const topo *t, const topo_plan_params *p) {
  topo_plan *plan = NULL;
  inferd_status st = {0};
  inferd_code rc = topo_plan_new(t, p, &plan, &st);
  if (rc != INFERD_OK) {
    fuzz_topo_check_refusal(rc, &st);
    if (plan) fuzz_topo_fail("a refusal returned a plan", NULL);
    return;
  }
  check_plan_made(t, plan, p);
  check_printing(t, plan);
  topo_plan_free(plan);
}
