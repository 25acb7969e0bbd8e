/*
 * topo_print.c - the machine and a plan as text, for `inferd topo` and the server's log.
 *
 * The output is for people, but its lines start with fixed words ("machine:",
 * "usable:", "plan:", "worker N:", "warning:") so that scripts and tests can grep it.
 * The describe API renders topo_plan's fields itself.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "topo/topo_internal.h"

static int compare_ints(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

const char *topo_cpu_list(const int *cpus, int count, char *buf, size_t size) {
  if (!size) return buf;
  buf[0] = '\0';
  if (count <= 0) return buf;
  int *sorted = malloc((size_t)count * sizeof *sorted);
  const int *ids = cpus;
  if (sorted) {
    memcpy(sorted, cpus, (size_t)count * sizeof *sorted);
    qsort(sorted, (size_t)count, sizeof *sorted, compare_ints);
    ids = sorted;
  }
  size_t used = 0;
  for (int i = 0; i < count;) {
    int j = i;
    while (j + 1 < count && (ids[j + 1] == ids[j] + 1 || ids[j + 1] == ids[j])) j++;
    char item[32];
    int len = ids[j] == ids[i] ? snprintf(item, sizeof item, "%s%d", i ? "," : "", ids[i])
                               : snprintf(item, sizeof item, "%s%d-%d", i ? "," : "", ids[i], ids[j]);
    if (used + (size_t)len + 4 > size) { /* room for "..." and the NUL */
      if (used + 4 <= size) memcpy(buf + used, "...", 4);
      break;
    }
    memcpy(buf + used, item, (size_t)len + 1);
    used += (size_t)len;
    i = j + 1;
  }
  free(sorted);
  return buf;
}

static void print_memory(FILE *out, uint64_t bytes) {
  if (!bytes) return;
  if (bytes >= (1ull << 30)) fprintf(out, ", %.1f GiB", (double)bytes / (double)(1ull << 30));
  else fprintf(out, ", %.0f MiB", (double)bytes / (double)(1ull << 20));
}

static const char *plural(int n, const char *one, const char *many) { return n == 1 ? one : many; }

void topo_print_machine(const topo *t, FILE *out) {
  const topo_machine *m = &t->machine;
  char list[256];
  fprintf(out, "machine: %s\n", m->source);
  fprintf(out, "  %d %s, %d NUMA %s, %d physical %s, %d logical %s\n", m->package_count,
          plural(m->package_count, "package", "packages"), m->node_count, plural(m->node_count, "node", "nodes"),
          m->core_count, plural(m->core_count, "core", "cores"), m->pu_count, plural(m->pu_count, "CPU", "CPUs"));
  for (int i = 0; i < m->node_count; i++) {
    const topo_node *node = &m->nodes[i];
    fprintf(out, "  NUMA node %d (", node->os_index);
    if (node->package >= 0) fprintf(out, "package %d", node->package);
    else fprintf(out, "%s", node->core_count ? "several packages" : "no CPU");
    print_memory(out, node->memory_bytes);
    fprintf(out, "): %d %s, %d usable\n", node->core_count, plural(node->core_count, "core", "cores"),
            node->usable_core_count);
    for (int k = 0; k < node->core_count; k++) {
      const topo_core *core = &m->cores[node->cores[k]];
      fprintf(out, "    core %d: cpus %s", core->index, topo_cpu_list(core->pus, core->pu_count, list, sizeof list));
      if (core->usable_pu_count == 0) fprintf(out, " (not usable)");
      else if (core->usable_pu_count < core->pu_count)
        fprintf(out, " (usable: %s)", topo_cpu_list(core->usable_pus, core->usable_pu_count, list, sizeof list));
      fputc('\n', out);
    }
  }
  fprintf(out, "usable: %d of %d physical %s, %d of %d logical %s (cpus %s)\n", m->usable_core_count, m->core_count,
          plural(m->core_count, "core", "cores"), m->usable_pu_count, m->pu_count, plural(m->pu_count, "CPU", "CPUs"),
          m->usable_cpus);
  if (m->cpu_quota > 0)
    fprintf(out, "  cpu quota: %.2f CPUs (%s): at most %d computing %s\n", m->cpu_quota, m->quota_source, m->quota_cap,
            plural(m->quota_cap, "thread", "threads"));
  else
    fprintf(out, "  cpu quota: none\n");
}

void topo_print_plan(const topo_plan *plan, FILE *out) {
  const char *unit = plan->use_logical_core ? "logical CPUs" : "physical cores";
  fprintf(out, "plan: %d %s, %s", plan->worker_count, plural(plan->worker_count, "worker", "workers"),
          plan->use_logical_core ? "logical cores allowed" : "physical cores only");
  if (plan->node_id != TOPO_NODE_ANY) fprintf(out, ", NUMA node %d only", plan->node_id);
  fputc('\n', out);
  char cores[256];
  for (int w = 0; w < plan->worker_count; w++) {
    const topo_worker *wk = &plan->workers[w];
    fprintf(out, "  worker %d: NUMA node %d, %d %s, cpus %s (cores %s)\n", wk->index, wk->node, wk->thread_count,
            plural(wk->thread_count, "thread", "threads"), wk->cpu_list,
            topo_cpu_list(wk->cores, wk->thread_count, cores, sizeof cores));
  }
  fprintf(out, "  uses %d of %d usable %s%s\n", plan->slots_used, plan->slots_available, unit,
          plan->oversubscribed ? " (oversubscribed)" : "");
  for (int i = 0; i < plan->warning_count; i++) fprintf(out, "warning: %s\n", plan->warnings[i]);
}

const char *topo_plan_summary(const topo_plan *plan, char *buf, size_t size) {
  if (!size) return buf;
  size_t used = 0;
  int n = snprintf(buf, size, "%d %s x %d %s%s", plan->worker_count, plural(plan->worker_count, "worker", "workers"),
                   plan->threads_per_worker, plural(plan->threads_per_worker, "thread", "threads"),
                   plan->oversubscribed ? " (oversubscribed)" : "");
  if (n < 0 || (size_t)n >= size) goto truncated;
  used = (size_t)n;
  for (int w = 0; w < plan->worker_count; w++) {
    const topo_worker *wk = &plan->workers[w];
    n = snprintf(buf + used, size - used, "%s worker %d node %d cpus %s", w ? ";" : ":", wk->index, wk->node,
                 wk->cpu_list);
    if (n < 0 || (size_t)n >= size - used) goto truncated;
    used += (size_t)n;
  }
  return buf;
truncated:
  if (size >= 4) memcpy(buf + size - 4, "...", 4);
  return buf;
}
