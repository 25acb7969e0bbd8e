/*
 * topo.h - the CPUs this process may use, and how to place workers on them.
 *
 * A topo is a snapshot of the machine taken with hwloc: packages, NUMA nodes, physical
 * cores and their logical CPUs (PUs, the hyperthreads), and which of those this process
 * may run on. "May run on" is what a container gives, not what the host has:
 *   - the PUs in the process's affinity mask (taskset, numactl, a cpuset cgroup), and
 *   - at most floor(quota / period) of them, where quota/period is the CPU quota of the
 *     process's cgroup (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us; the
 *     smallest one on the path from its cgroup up to the root of the hierarchy).
 *
 * A plan (topo_plan_new) gives each worker a disjoint set of physical cores inside one
 * NUMA node and a thread count, never more threads in all than the usable physical
 * cores (logical CPUs with use_logical_core). When the request cannot be met, the plan
 * says so in its warnings (fewer threads per worker; or, if there are more workers than
 * cores, workers that share cores, with `oversubscribed` set) rather than failing or
 * oversubscribing silently. A worker thread applies its part with
 * topo_bind_current_thread.
 *
 * Threading: a topo and its plans are read-only once made and may be read by any number
 * of threads; topo_bind_current_thread is called by each worker thread on itself. A plan
 * borrows its topo: free plans first.
 */
#ifndef INFERD_TOPO_H
#define INFERD_TOPO_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "inferd/inferd.h"

typedef struct topo topo;

enum { TOPO_MAX_SYNTHETIC_PUS = 4096, TOPO_MAX_SYNTHETIC_OBJECTS = 16384, TOPO_MAX_CPU_NUMBER = (1 << 20) - 1 };
/* Any machine has at most this many NUMA nodes (Linux numbers at most 1024). */
enum { TOPO_MAX_NUMA_NODES = 1024 };
/* An XML export: at most this many bytes and objects (packages, caches, cores, PUs, NUMA
 * nodes...). A 4096-CPU machine's export is about 4 MB of 10,000 objects. */
enum { TOPO_MAX_XML_BYTES = 64 << 20, TOPO_MAX_XML_OBJECTS = 1 << 16 };

typedef struct topo_params {
  /* Where the machine description comes from; at most one of them. All NULL (the
   * default): this machine. `synthetic` is an hwloc synthetic description
   * ("pack:2 numa:1 core:4 pu:2") of at most TOPO_MAX_SYNTHETIC_PUS PUs and
   * TOPO_MAX_SYNTHETIC_OBJECTS objects in all; `xml_path` an hwloc XML export
   * (lstopo --of xml, hwloc 2) of another machine, and `xml_buffer` the same text in
   * memory, xml_size bytes (borrowed during topo_new only). An export is read strictly
   * (src/topo/topo_xml.c says what is taken): hwloc itself is not given text it would
   * choke on. None of them can be bound to (topo_bind_current_thread fails with
   * UNSUPPORTED). */
  const char *synthetic;
  const char *xml_path;
  const char *xml_buffer;
  size_t xml_size;
  /* Logical CPUs the process may use, as a list "0-3,8" of CPU numbers up to
   * TOPO_MAX_CPU_NUMBER (Linux has at most 8192 CPUs). NULL (the default): the
   * process's affinity mask on this machine, every PU of a synthetic or XML one. */
  const char *allowed_cpus;
  /* CPUs granted by a CPU quota. 0 (the default): read the cgroup's quota on this
   * machine, none for a synthetic or XML one; > 0: this many; < 0: no quota. */
  double cpu_quota;
} topo_params;

/* Snapshots the machine. Returns INVALID_ARG for a bad synthetic description, XML file
 * or CPU list (and for a description or export of a machine without a usable CPU, or
 * whose CPUs or NUMA nodes do not add up: a CPU in two cores, two NUMA nodes of one
 * number), UNAVAILABLE when hwloc cannot read this machine or no CPU of it is usable.
 * Free with topo_free. */
inferd_code topo_new(const topo_params *params, topo **out, inferd_status *status);
void topo_free(topo *t);

/* ---- the machine ------------------------------------------------------------------ */

typedef struct topo_core {
  int index;           /* 0..core_count-1 in hwloc's logical order (package by package) */
  int os_index;        /* the core id Linux reports (repeats across packages) */
  int package;         /* logical index of its package */
  int node;            /* OS index of the NUMA node whose memory is local to it */
  int pu_count;
  const int *pus;      /* [pu_count] OS indices (Linux CPU numbers) of its PUs */
  int usable_pu_count;
  const int *usable_pus; /* [usable_pu_count] those of them this process may run on */
} topo_core;

typedef struct topo_node {
  int os_index;           /* the number numactl and --node-id use */
  int package;            /* logical index of its package; -1 when it spans packages */
  uint64_t memory_bytes;  /* local memory, 0 when unknown */
  int core_count;
  const int *cores;       /* [core_count] indices into topo_machine.cores */
  int usable_core_count;  /* cores with at least one usable PU */
  int usable_pu_count;
} topo_node;

typedef struct topo_machine {
  const char *source;     /* "this machine", "synthetic 'pack:2 ...'", "xml FILE" */
  int package_count;
  int node_count;
  const topo_node *nodes; /* [node_count] in OS index order */
  int core_count;
  const topo_core *cores; /* [core_count] */
  int pu_count;
  /* After the affinity mask (or params.allowed_cpus), before the quota. */
  int usable_core_count;
  int usable_pu_count;
  const char *usable_cpus; /* list of usable PUs, "0-3,8" */
  /* The CPU quota: cpu_quota CPUs (0: none), allowing quota_cap threads to compute at
   * once (0: no cap); quota_source says where it was read ("none" without one). */
  double cpu_quota;
  int quota_cap;
  const char *quota_source;
  bool bindable;          /* this machine (not synthetic/XML) and hwloc can bind threads */
} topo_machine;

/* Borrowed from t; valid until topo_free. */
const topo_machine *topo_get_machine(const topo *t);

/* ---- CPU quota (pure functions, exposed for tests) ----------------------------------- */

/* CPUs granted by a CFS quota of quota_us per period_us: quota/period, or 0 (no quota)
 * when quota_us < 0 (v1 writes -1 for "max") or period_us <= 0. */
double topo_quota_cpus(long long quota_us, long long period_us);
/* Parses the text of a cgroup v2 cpu.max file ("max 100000" or "150000 100000\n") into
 * CPUs (0: no quota): two blank-separated words, "max" or the quota, then the period,
 * each decimal digits of a value from 1 to LLONG_MAX. Returns 0, or -1 when the text is
 * malformed. */
int topo_quota_parse_cpu_max(const char *text, double *cpus);
/* How many threads a quota lets compute at once without being throttled: floor(cpus),
 * at least 1; 0 (no cap) when cpus <= 0. A 1.5-CPU container gets one compute core. */
int topo_quota_core_cap(double cpus);
/* The smallest quota on the path from this process's cgroup to the root of its
 * hierarchy, in cgroup v2 and v1 (cpu controller) alike. `root` prefixes every path
 * read ("" for the real /proc and /sys; a directory laid out the same way in tests).
 * *cpus = 0 when there is none. `source` (may be NULL) gets the file that set it, or
 * "none". Unreadable files mean "no quota there", never an error. */
void topo_quota_read(const char *root, double *cpus, char *source, size_t source_size);

/* ---- memory left ----------------------------------------------------------------------- */

/* Bytes the process can still take: the smallest of /proc/meminfo's MemAvailable and,
 * for each memory cgroup with a limit from the process's up to the root of its
 * hierarchy (v2 memory.max, v1 memory.limit_in_bytes), that limit less the cgroup's
 * working set (its usage less its inactive file pages). UINT64_MAX when nothing could be
 * read. `root` and `source` as topo_quota_read's (source: the file of the smallest). */
uint64_t topo_memory_available(const char *root, char *source, size_t source_size);

/* ---- placement plans ---------------------------------------------------------------- */

enum { TOPO_NODE_ANY = -1, TOPO_MAX_WARNINGS = 4, TOPO_WARNING_MAX = 240 };

typedef struct topo_plan_params {
  int workers;            /* 0 (default): one worker per NUMA node that has usable cores */
  int threads_per_worker; /* 0 (default): as many as fit (all of its node's cores with
                             workers = 0; the largest equal share otherwise) */
  bool use_logical_core;  /* count every hyperthread as a core (TorchServe's
                             --use_logical_core); default false: physical cores only */
  int node_id;            /* TOPO_NODE_ANY (-1, the default); N: only NUMA node N */
} topo_plan_params;

#define TOPO_PLAN_PARAMS_DEFAULT \
  ((topo_plan_params){.workers = 0, .threads_per_worker = 0, .use_logical_core = false, .node_id = TOPO_NODE_ANY})

typedef struct topo_worker {
  int index;
  int node;             /* OS index of its NUMA node */
  int thread_count;     /* its OpenMP team's size */
  const int *cpus;      /* [thread_count] the PU (Linux CPU number) OpenMP thread i runs on */
  const int *cores;     /* [thread_count] index in topo_machine.cores of that PU's core */
  const char *cpu_list; /* cpus as a list, "0-3" */
  const topo *topo;     /* borrowed: the machine it binds on */
} topo_worker;

typedef struct topo_plan {
  int worker_count;
  const topo_worker *workers; /* [worker_count] */
  int threads_per_worker;     /* the largest thread_count of a worker */
  bool use_logical_core;
  int node_id;                /* as asked: TOPO_NODE_ANY or a node */
  /* Cores (logical CPUs with use_logical_core) the plan could use after the affinity
   * mask, node_id and the quota cap, and how many distinct ones it uses. */
  int slots_available;
  int slots_used;
  bool oversubscribed;        /* more workers than cores: some share cores */
  int warning_count;
  char warnings[TOPO_MAX_WARNINGS][TOPO_WARNING_MAX]; /* one line each, no newline */
} topo_plan;

/* Makes a plan on t. INVALID_ARG for a negative count, a node_id that is not one of
 * t's NUMA nodes or has no usable core. Free with topo_plan_free, before topo_free. */
inferd_code topo_plan_new(const topo *t, const topo_plan_params *params, topo_plan **out,
                          inferd_status *status);
void topo_plan_free(topo_plan *plan);

/* ---- binding -------------------------------------------------------------------------- */

/* Called by a worker thread on itself before it runs anything:
 *   1. binds the calling thread to the union of w's CPUs (threads it creates later
 *      inherit this mask) and its memory policy to w's NUMA node (preferred, not strict:
 *      best effort, and only on machines with more than one node);
 *   2. sets the calling thread's OpenMP thread count to w->thread_count
 *      (omp_set_num_threads is per thread: other workers keep theirs);
 *   3. runs one `#pragma omp parallel num_threads(T)` region in which OpenMP thread i
 *      binds itself to w->cpus[i] (hwloc_set_cpubind, HWLOC_CPUBIND_THREAD). The caller
 *      is thread 0 and stays on cpus[0]. libgomp keeps a team's threads alive for the
 *      next parallel region of the same master thread and gives thread i the same OS
 *      thread again, so oneDNN's later regions on this thread run on w's cores, one
 *      thread per core.
 * A session run by this thread must therefore use w->thread_count threads (a larger team
 * would create threads that inherit cpus[0]'s mask). Returns UNSUPPORTED for a synthetic
 * or XML topology, UNAVAILABLE when the OS refuses a binding. */
inferd_code topo_bind_current_thread(const topo_worker *w, inferd_status *status);

/* ---- rendering ---------------------------------------------------------------------- */

/* The machine: packages, NUMA nodes, cores with their PUs, the usable set after the
 * affinity mask and the CPU quota. Several lines. */
void topo_print_machine(const topo *t, FILE *out);
/* The plan: one line per worker, then its warnings ("warning: ..."). */
void topo_print_plan(const topo_plan *plan, FILE *out);
/* One line for a log: "2 workers x 4 threads: worker 0 node 0 cpus 0-3; worker 1 ...".
 * Truncated (ending in "...") to fit; returns buf. */
const char *topo_plan_summary(const topo_plan *plan, char *buf, size_t size);
/* Formats CPU numbers as a list with ranges ("0-3,8,10-11"); unsorted input is fine.
 * Truncated to fit; returns buf. */
const char *topo_cpu_list(const int *cpus, int count, char *buf, size_t size);

#endif /* INFERD_TOPO_H */
