/*
 * topo_machine.c - the snapshot of the machine: hwloc discovery, the usable set.
 *
 * DESIGN
 * topo_new loads an hwloc topology (this machine, a synthetic description or an XML
 * export) and copies what the planner and the printers need into plain arrays:
 * NUMA nodes in OS-index order, physical cores in hwloc's logical order, the PUs of each
 * core and which of them the process may use. Everything is allocated once here and
 * freed by topo_free; nothing is recomputed later.
 *
 * Usable PUs = the affinity mask (hwloc_get_cpubind of the whole process: the union of
 * its threads' masks, so a process whose workers are already pinned still sees its
 * whole set) intersected with hwloc's allowed cpuset (the cpuset cgroup; an export's
 * allowed_cpuset). hwloc is asked to keep what the cgroup leaves out
 * (HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED), so the machine is the whole machine and a
 * cpuset's cut shows as CPUs that are not usable, as taskset's does. A synthetic or
 * XML topology has no process: every PU is usable unless params.allowed_cpus (or an
 * export's allowed set) says otherwise. The CPU quota is read separately (topo_quota.c)
 * and only caps the plan.
 *
 * A core's NUMA node is the first node (OS order) whose cpuset contains the core's;
 * nodes that cover no core (CPU-less memory, HBM beside DDR) get no workers. Machines
 * where hwloc finds no Core objects (some VMs) get one core per PU.
 *
 * An XML export is never given to hwloc as it is: topo_xml.c reads it (with libxml2),
 * checks it and writes the document hwloc reads (hwloc's XML import crashes on
 * malformed input).
 * What hwloc then builds, from an export, a description or this machine, must add up
 * before it is copied: each PU is one CPU numbered up to TOPO_MAX_CPU_NUMBER and no two
 * PUs are one CPU, a core's cpuset is exactly its PUs, NUMA nodes have distinct numbers
 * up to TOPO_MAX_CPU_NUMBER. Otherwise topo_new fails: INVALID_ARG for a description
 * or export, UNAVAILABLE for this machine (hwloc keeps these rules there).
 */
#include <ctype.h>
#include <errno.h>
#include <hwloc.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "topo/topo_internal.h"

static char *dup_printf(const char *fmt, const char *arg) {
  size_t n = strlen(fmt) + strlen(arg) + 1;
  char *s = malloc(n);
  if (s) snprintf(s, n, fmt, arg);
  return s;
}

/* hwloc's synthetic grammar, as far as sizes go: an optional "(attributes)" for the
 * machine, then levels separated by blanks (hwloc takes newlines and tabs too), each
 * "type:arity" or a bare arity (strtoul base 0: "010" is 8) with optional
 * "(attributes)", and memory children in "[...]" after a level, one each per object of
 * that level. Each level has arity times more objects than the one above; the last
 * one's are the PUs. Text hwloc would refuse may be overcounted, never a description it
 * takes undercounted. Saturates at UINT64_MAX. */
static uint64_t saturating_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static uint64_t saturating_mul(uint64_t a, uint64_t b) { return b && a > UINT64_MAX / b ? UINT64_MAX : a * b; }

void topo__synthetic_size(const char *desc, uint64_t *pus, uint64_t *objects) {
  uint64_t width = 1; /* objects of the current level */
  const char *p = desc;
  *pus = *objects = 0;
  if (*p == '(') {
    const char *close = strchr(p, ')');
    if (!close) return; /* hwloc refuses it */
    p = close + 1;
  }
  for (;;) {
    while (isspace((unsigned char)*p)) p++; /* hwloc 2.9 takes any blank between levels */
    if (!*p) break;
    if (*p == '[') { /* a memory child of every object of the level above */
      const char *close = strchr(p, ']');
      *objects = saturating_add(*objects, width);
      if (!close) break;
      p = close + 1;
      continue;
    }
    if (!isdigit((unsigned char)*p)) { /* "type:" (hwloc looks for the next ':' wherever it is) */
      const char *colon = strchr(p, ':');
      if (!colon) break;
      p = colon + 1;
    }
    char *end;
    errno = 0;
    unsigned long long arity = strtoull(p, &end, 0);
    if (end == p) break;
    if (errno == ERANGE) arity = UINT64_MAX;
    if (arity == 0) arity = 1; /* hwloc refuses it; a bound must not drop to 0 */
    width = saturating_mul(width, arity);
    *objects = saturating_add(*objects, width);
    *pus = width;
    p = end;
    if (*p == '(') {
      const char *close = strchr(p, ')');
      if (!close) break;
      p = close + 1;
    }
  }
}

/* Whether every explicit index list of a synthetic description ("pu:4(indexes=0,2,1,3)")
 * names distinct CPU (or NUMA node) numbers from 0 to TOPO_MAX_CPU_NUMBER: hwloc reads
 * each with strtoul into an unsigned, so "99999999999" is PU 4294967295, whose cpuset
 * takes 512 MB, and merges the objects of a number given twice into a tree of packages
 * inside packages. (hwloc checks the other form, an interleaving like "2*2:1*2".) */
static bool synthetic_indexes_ok(const char *desc) {
  hwloc_bitmap_t seen = hwloc_bitmap_alloc();
  bool ok = seen != NULL;
  for (const char *p = desc; ok && (p = strstr(p, "indexes="));) {
    p += strlen("indexes=");
    size_t length = strcspn(p, " )");
    if (strspn(p, "0123456789,") != length) continue;
    hwloc_bitmap_zero(seen);
    for (const char *end = p + length; ok && p < end;) {
      unsigned long n = 0;
      for (; ok && p < end && isdigit((unsigned char)*p); p++) ok = (n = n * 10 + (unsigned long)(*p - '0')) <= TOPO_MAX_CPU_NUMBER;
      if (ok && hwloc_bitmap_isset(seen, (unsigned)n)) ok = false;
      if (ok) hwloc_bitmap_set(seen, (unsigned)n);
      if (p < end) p++; /* the comma */
    }
  }
  hwloc_bitmap_free(seen);
  return ok;
}

/* What a machine that does not add up is: the fault of its description or export, or
 * hwloc's reading of this one. */
static inferd_code odd_machine(const topo *t) { return t->described ? INFERD_INVALID_ARG : INFERD_UNAVAILABLE; }

/* The file's bytes; past TOPO_MAX_XML_BYTES, only enough for topo__xml_load to refuse them. */
static inferd_code read_xml_file(const char *path, char **text, size_t *size, inferd_status *st) {
  FILE *f = fopen(path, "rb");
  if (!f) return core_fail(st, INFERD_INVALID_ARG, "topology: cannot read hwloc XML '%s': %s", path, strerror(errno));
  char *buf = NULL;
  size_t cap = 0, n = 0, got = 1;
  while (got && n <= TOPO_MAX_XML_BYTES) {
    if (n == cap) {
      char *grown = realloc(buf, cap ? cap * 2 : 1 << 16);
      if (!grown) {
        free(buf);
        fclose(f);
        return core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
      }
      buf = grown;
      cap = cap ? cap * 2 : 1 << 16;
    }
    got = fread(buf + n, 1, cap - n, f);
    n += got;
  }
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    free(buf);
    return core_fail(st, INFERD_INVALID_ARG, "topology: cannot read hwloc XML '%s'", path);
  }
  *text = buf;
  *size = n;
  return INFERD_OK;
}

/* hwloc reads the export as topo__xml_load wrote it again, never as given. */
static inferd_code load_xml(topo *t, const topo_params *p, inferd_status *st) {
  char *file = NULL;
  size_t size = p->xml_size;
  inferd_code rc = p->xml_path ? read_xml_file(p->xml_path, &file, &size, st) : INFERD_OK;
  if (rc == INFERD_OK) rc = topo__xml_load(t->hw, file ? file : p->xml_buffer, size, t->source, st);
  free(file);
  return rc;
}

static inferd_code load_hwloc(topo *t, const topo_params *p, inferd_status *st) {
  if (hwloc_topology_init(&t->hw)) return core_fail(st, INFERD_NO_MEMORY, "hwloc: cannot initialise a topology");
  t->hw_loaded = true;
  if (!!p->synthetic + !!p->xml_path + !!p->xml_buffer > 1)
    return core_fail(st, INFERD_INVALID_ARG, "topology: give a synthetic description or an XML file, not both");
  if (p->synthetic) {
    /* hwloc builds a synthetic machine in time quadratic in a level's width: 4096 PUs
     * under one core take 1.6 s, 65536 PUs in packages of 4096 cores 78 s */
    uint64_t pus, objects;
    topo__synthetic_size(p->synthetic, &pus, &objects);
    if (pus > TOPO_MAX_SYNTHETIC_PUS || objects > TOPO_MAX_SYNTHETIC_OBJECTS)
      return core_fail(st, INFERD_INVALID_ARG, "topology: synthetic description '%s' has more than %d PUs or %d objects",
                       p->synthetic, TOPO_MAX_SYNTHETIC_PUS, TOPO_MAX_SYNTHETIC_OBJECTS);
    if (!synthetic_indexes_ok(p->synthetic))
      return core_fail(st, INFERD_INVALID_ARG, "topology: synthetic description '%s' has an index above %d, or one twice",
                       p->synthetic, TOPO_MAX_CPU_NUMBER);
    t->described = true;
    if (hwloc_topology_set_synthetic(t->hw, p->synthetic))
      return core_fail(st, INFERD_INVALID_ARG, "topology: bad hwloc synthetic description '%s'", p->synthetic);
    t->machine.source = t->source = dup_printf("synthetic '%s'", p->synthetic);
  } else if (p->xml_path || p->xml_buffer) {
    t->described = true;
    t->machine.source = t->source = p->xml_path ? dup_printf("xml %s", p->xml_path) : dup_printf("%s", "xml buffer");
    if (!t->source) return core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
    inferd_code rc = load_xml(t, p, st);
    if (rc != INFERD_OK) return rc;
  } else {
    t->machine.source = t->source = dup_printf("%s", "this machine");
  }
  if (!t->source) return core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
  /* keep the CPUs and NUMA nodes a cpuset cgroup (or an export's allowed sets) leaves
   * out, so that the machine is the whole machine and `usable` says what was cut */
  hwloc_topology_set_flags(t->hw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  if (hwloc_topology_load(t->hw))
    return core_fail(st, odd_machine(t), "topology: hwloc cannot load %s: %s", t->source, strerror(errno));
  t->this_system = hwloc_topology_is_thissystem(t->hw);
  return INFERD_OK;
}

/* "0-3,8" into `set`: decimal numbers and ranges separated by commas, nothing else,
 * each number at most TOPO_MAX_CPU_NUMBER and a range's first at most its last; as
 * Linux's cpulist format, "010" is CPU 10. Read here rather than by hwloc, whose parser
 * skips what it does not understand ("1x,0" was CPU 0), reads numbers base 0 ("010"
 * was CPU 8), truncates them to an unsigned (4294967296 was CPU 0) and allocates a
 * bitmap up to the largest (4294967295: 512 MB, 5-10 s). */
static bool cpu_list_read(const char *s, hwloc_bitmap_t set) {
  for (;;) {
    unsigned long first = 0, last = 0;
    for (int range = 0; range < 2; range++) {
      if (!isdigit((unsigned char)*s)) return false;
      unsigned long n = 0;
      for (; isdigit((unsigned char)*s); s++) {
        n = n * 10 + (unsigned long)(*s - '0');
        if (n > TOPO_MAX_CPU_NUMBER) return false;
      }
      if (range == 0) first = n;
      last = n;
      if (range == 1 || *s != '-') break;
      s++;
    }
    if (last < first || hwloc_bitmap_set_range(set, (unsigned)first, (int)last) != 0) return false;
    if (*s == '\0') return true;
    if (*s++ != ',') return false;
  }
}

/* The PUs this process may use. */
static inferd_code usable_set(topo *t, const topo_params *p, inferd_status *st) {
  t->usable = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(t->hw));
  if (!t->usable) return core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
  if (p->allowed_cpus) {
    hwloc_bitmap_t given = hwloc_bitmap_alloc();
    if (!given) return core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
    int bad = !cpu_list_read(p->allowed_cpus, given) || hwloc_bitmap_iszero(given);
    if (!bad) hwloc_bitmap_and(t->usable, t->usable, given);
    hwloc_bitmap_free(given);
    if (bad)
      return core_fail(st, INFERD_INVALID_ARG, "topology: bad CPU list '%s' (want e.g. 0-3,8; CPUs 0 to %d)",
                       p->allowed_cpus, TOPO_MAX_CPU_NUMBER);
  } else if (t->this_system) {
    hwloc_bitmap_t bound = hwloc_bitmap_alloc();
    if (!bound) return core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
    if (hwloc_get_cpubind(t->hw, bound, HWLOC_CPUBIND_PROCESS) == 0 && !hwloc_bitmap_iszero(bound))
      hwloc_bitmap_and(t->usable, t->usable, bound);
    hwloc_bitmap_free(bound);
  }
  if (hwloc_bitmap_iszero(t->usable) && p->allowed_cpus)
    return core_fail(st, INFERD_INVALID_ARG, "topology: CPU list '%s' names no CPU this process may use on %s",
                     p->allowed_cpus, t->source);
  if (hwloc_bitmap_iszero(t->usable)) return core_fail(st, odd_machine(t), "topology: no usable CPU on %s", t->source);
  return INFERD_OK;
}

static int compare_node_objects(const void *a, const void *b) {
  unsigned x = (*(const hwloc_obj_t *)a)->os_index, y = (*(const hwloc_obj_t *)b)->os_index;
  return (x > y) - (x < y);
}

/* The NUMA nodes in OS index order; each has a number of its own (the one --node-id
 * takes), at most TOPO_MAX_CPU_NUMBER. */
static inferd_code fill_nodes(topo *t, inferd_status *st) {
  int n = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE);
  if (n <= 0) n = 0;
  if (n > TOPO_MAX_NUMA_NODES)
    return core_fail(st, odd_machine(t), "topology: %s has more than %d NUMA nodes", t->source, TOPO_MAX_NUMA_NODES);
  t->nodes = calloc((size_t)(n ? n : 1), sizeof *t->nodes);
  t->node_sets = calloc((size_t)(n ? n : 1), sizeof *t->node_sets);
  hwloc_obj_t *objs = calloc((size_t)(n ? n : 1), sizeof *objs);
  inferd_code rc = INFERD_OK;
  if (!t->nodes || !t->node_sets || !objs) {
    rc = core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
  } else if (n == 0) { /* cannot happen with hwloc 2, which always has one; keep a stand-in */
    t->nodes[0] = (topo_node){.os_index = 0, .package = -1};
    t->node_sets[0] = hwloc_topology_get_topology_cpuset(t->hw);
    t->node_count = 1;
  } else {
    int found = 0;
    for (hwloc_obj_t obj = NULL; found < n && (obj = hwloc_get_next_obj_by_type(t->hw, HWLOC_OBJ_NUMANODE, obj));)
      objs[found++] = obj;
    qsort(objs, (size_t)found, sizeof *objs, compare_node_objects);
    for (int i = 0; i < found && rc == INFERD_OK; i++) {
      unsigned os_index = objs[i]->os_index;
      if (os_index > TOPO_MAX_CPU_NUMBER)
        rc = core_fail(st, odd_machine(t), "topology: a NUMA node of %s has no number from 0 to %d", t->source,
                       TOPO_MAX_CPU_NUMBER);
      else if (i && os_index == objs[i - 1]->os_index)
        rc = core_fail(st, odd_machine(t), "topology: %s has two NUMA nodes numbered %u", t->source, os_index);
      t->nodes[i] = (topo_node){.os_index = (int)os_index, .package = -2,
                                .memory_bytes = objs[i]->attr ? objs[i]->attr->numanode.local_memory : 0};
      t->node_sets[i] = objs[i]->cpuset;
    }
    t->node_count = found;
  }
  free(objs);
  t->machine.node_count = t->node_count;
  t->machine.nodes = t->nodes;
  return rc;
}

/* The node (index into t->nodes) whose cpuset holds the core's, else the first that has
 * part of it (a core split across nodes), else the first node (a core no node covers).
 * A node whose memory the cgroup's cpuset.mems does not allow is kept: its cores are
 * still its own, and binding memory there fails softly (topo_bind.c). */
static int node_of(const topo *t, hwloc_const_cpuset_t cpus) {
  for (int i = 0; i < t->node_count; i++)
    if (t->node_sets[i] && !hwloc_bitmap_iszero(t->node_sets[i]) && hwloc_bitmap_isincluded(cpus, t->node_sets[i]))
      return i;
  for (int i = 0; i < t->node_count; i++)
    if (t->node_sets[i] && hwloc_bitmap_intersects(cpus, t->node_sets[i])) return i;
  return 0;
}

/* Each PU is one CPU (its cpuset is its os_index, at most TOPO_MAX_CPU_NUMBER), no two
 * PUs are one CPU, and with Core objects each PU lies in a core, which counts it in
 * pus_of_core[the core's logical index]. hwloc keeps this on this machine; an export may
 * say anything (a core whose cpuset names another core's CPU, a PU in no core). */
static inferd_code check_pus(topo *t, bool have_cores, int *pus_of_core, int ncores, inferd_status *st) {
  hwloc_bitmap_t seen = hwloc_bitmap_alloc();
  if (!seen) return core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
  inferd_code rc = INFERD_OK;
  for (hwloc_obj_t pu = NULL; rc == INFERD_OK && (pu = hwloc_get_next_obj_by_type(t->hw, HWLOC_OBJ_PU, pu));) {
    unsigned cpu = pu->os_index;
    if (cpu > TOPO_MAX_CPU_NUMBER || hwloc_bitmap_weight(pu->cpuset) != 1 || !hwloc_bitmap_isset(pu->cpuset, cpu)) {
      rc = core_fail(st, odd_machine(t), "topology: PU %u of %s is not CPU %u alone, or not a CPU from 0 to %d", cpu,
                     t->source, cpu, TOPO_MAX_CPU_NUMBER);
    } else if (hwloc_bitmap_isset(seen, cpu)) {
      rc = core_fail(st, odd_machine(t), "topology: %s has two PUs for CPU %u", t->source, cpu);
    } else if (have_cores) {
      hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t->hw, HWLOC_OBJ_CORE, pu);
      if (!core || (int)core->logical_index >= ncores || !hwloc_bitmap_isset(core->cpuset, cpu))
        rc = core_fail(st, odd_machine(t), "topology: CPU %u of %s is in no core", cpu, t->source);
      else
        pus_of_core[core->logical_index]++;
    }
    hwloc_bitmap_set(seen, cpu);
  }
  hwloc_bitmap_free(seen);
  return rc;
}

/* The cores (the PUs when hwloc found no Core object), each with its PUs and its NUMA
 * node; after check_pus, a core's cpuset is exactly its PUs. */
static inferd_code fill_cores(topo *t, inferd_status *st) {
  int have_cores = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_CORE);
  if (have_cores < 0) return core_fail(st, odd_machine(t), "topology: %s has cores at several depths", t->source);
  hwloc_obj_type_t core_type = have_cores > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  int ncores = hwloc_get_nbobjs_by_type(t->hw, core_type);
  int npus = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PU);
  if (ncores <= 0 || npus <= 0) return core_fail(st, odd_machine(t), "topology: hwloc found no CPU on %s", t->source);
  t->cores = calloc((size_t)ncores, sizeof *t->cores);
  t->pu_storage = calloc((size_t)npus * 2, sizeof *t->pu_storage);
  t->node_core_storage = calloc((size_t)ncores, sizeof *t->node_core_storage);
  t->core_node_slot = calloc((size_t)ncores, sizeof *t->core_node_slot);
  if (!t->cores || !t->pu_storage || !t->node_core_storage || !t->core_node_slot)
    return core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
  int *pus_of_core = t->node_core_storage; /* (borrowed until the nodes' lists are made below) */
  inferd_code rc = check_pus(t, have_cores > 0, pus_of_core, ncores, st);
  if (rc != INFERD_OK) return rc;

  int *pu_next = t->pu_storage, *pu_end = t->pu_storage + 2 * npus;
  hwloc_obj_t obj = NULL;
  for (int c = 0; c < ncores && (obj = hwloc_get_next_obj_by_type(t->hw, core_type, obj)); c++) {
    topo_core *core = &t->cores[c];
    int count = hwloc_bitmap_weight(obj->cpuset);
    if (count <= 0 || (have_cores > 0 && count != pus_of_core[c]) || pu_next + 2 * count > pu_end)
      return core_fail(st, odd_machine(t), "topology: core %d of %s: its cpuset is not its PUs", c, t->source);
    int slot = node_of(t, obj->cpuset);
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(t->hw, HWLOC_OBJ_PACKAGE, obj);
    *core = (topo_core){.index = c, .os_index = (int)obj->os_index, .package = pkg ? (int)pkg->logical_index : 0,
                        .node = t->nodes[slot].os_index};
    t->core_node_slot[c] = slot;
    int *pus = pu_next, *usable = pu_next + count;
    pu_next += 2 * count;
    int id;
    hwloc_bitmap_foreach_begin(id, obj->cpuset) {
      pus[core->pu_count++] = id;
      if (hwloc_bitmap_isset(t->usable, (unsigned)id)) usable[core->usable_pu_count++] = id;
    }
    hwloc_bitmap_foreach_end();
    core->pus = pus;
    core->usable_pus = usable;
    t->core_count++;
    t->machine.pu_count += core->pu_count;
    t->machine.usable_pu_count += core->usable_pu_count;
    if (core->usable_pu_count) t->machine.usable_core_count++;
  }
  t->machine.core_count = t->core_count;
  t->machine.cores = t->cores;
  int packages = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_PACKAGE);
  if (packages < 0) return core_fail(st, odd_machine(t), "topology: %s has packages at several depths", t->source);
  t->machine.package_count = packages > 0 ? packages : 1;

  /* Each node's cores, in core order. */
  int *next = t->node_core_storage;
  for (int i = 0; i < t->node_count; i++) {
    topo_node *node = &t->nodes[i];
    node->cores = next;
    for (int c = 0; c < t->core_count; c++) {
      if (t->core_node_slot[c] != i) continue;
      const topo_core *core = &t->cores[c];
      *next++ = c;
      node->core_count++;
      node->usable_pu_count += core->usable_pu_count;
      if (core->usable_pu_count) node->usable_core_count++;
      node->package = node->package == -2 || node->package == core->package ? core->package : -1;
    }
    if (node->package == -2) node->package = -1;
  }
  return INFERD_OK;
}

static inferd_code fill_usable_list(topo *t, inferd_status *st) {
  int count = t->machine.usable_pu_count, *ids = malloc((size_t)(count ? count : 1) * sizeof *ids), n = 0;
  if (!ids) return core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
  for (int c = 0; c < t->core_count; c++)
    for (int i = 0; i < t->cores[c].usable_pu_count; i++) ids[n++] = t->cores[c].usable_pus[i];
  size_t size = (size_t)n * 12 + 16;
  t->usable_list = malloc(size);
  if (t->usable_list) topo_cpu_list(ids, n, t->usable_list, size);
  free(ids);
  if (!t->usable_list) return core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
  t->machine.usable_cpus = t->usable_list;
  return INFERD_OK;
}

static void read_quota(topo *t, const topo_params *p) {
  double cpus = 0;
  if (p->cpu_quota > 0) {
    cpus = p->cpu_quota;
    snprintf(t->quota_source, sizeof t->quota_source, "given");
  } else if (p->cpu_quota == 0 && t->this_system && !p->synthetic && !p->xml_path && !p->xml_buffer) {
    topo_quota_read("", &cpus, t->quota_source, sizeof t->quota_source);
  } else {
    snprintf(t->quota_source, sizeof t->quota_source, "none");
  }
  t->machine.cpu_quota = cpus;
  t->machine.quota_cap = topo_quota_core_cap(cpus);
  t->machine.quota_source = t->quota_source;
}

inferd_code topo_new(const topo_params *params, topo **out, inferd_status *st) {
  static const topo_params defaults;
  const topo_params *p = params ? params : &defaults;
  *out = NULL;
  topo *t = calloc(1, sizeof *t);
  if (!t) return core_fail(st, INFERD_NO_MEMORY, "topology: out of memory");
  inferd_code rc = load_hwloc(t, p, st);
  if (rc == INFERD_OK) rc = usable_set(t, p, st);
  if (rc == INFERD_OK) rc = fill_nodes(t, st);
  if (rc == INFERD_OK) rc = fill_cores(t, st);
  if (rc == INFERD_OK && t->machine.usable_pu_count == 0) /* usable CPUs that are no PU's */
    rc = p->allowed_cpus ? core_fail(st, INFERD_INVALID_ARG, "topology: CPU list '%s' names no CPU of %s", p->allowed_cpus, t->source)
                         : core_fail(st, odd_machine(t), "topology: no usable CPU on %s", t->source);
  if (rc == INFERD_OK) rc = fill_usable_list(t, st);
  if (rc != INFERD_OK) {
    topo_free(t);
    return rc;
  }
  read_quota(t, p);
  const struct hwloc_topology_support *support = hwloc_topology_get_support(t->hw);
  t->machine.bindable = t->this_system && support && support->cpubind->set_thisthread_cpubind;
  *out = t;
  return INFERD_OK;
}

void topo_free(topo *t) {
  if (!t) return;
  if (t->usable) hwloc_bitmap_free(t->usable);
  if (t->hw_loaded) hwloc_topology_destroy(t->hw);
  free(t->nodes);
  free(t->node_sets);
  free(t->cores);
  free(t->pu_storage);
  free(t->node_core_storage);
  free(t->core_node_slot);
  free(t->usable_list);
  free(t->source);
  free(t);
}

const topo_machine *topo_get_machine(const topo *t) { return &t->machine; }

int topo__node_slot(const topo *t, int os_index) {
  for (int i = 0; i < t->node_count; i++)
    if (t->nodes[i].os_index == os_index) return i;
  return -1;
}
