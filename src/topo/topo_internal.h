/*
 * topo_internal.h - what the files of src/topo/ share; not for other subsystems.
 */
#ifndef INFERD_TOPO_INTERNAL_H
#define INFERD_TOPO_INTERNAL_H

#include <hwloc.h>

#include "topo/topo.h"

struct topo {
  hwloc_topology_t hw;
  bool hw_loaded;   /* hw was initialised and must be destroyed */
  bool this_system; /* hw describes the machine we run on */
  bool described;   /* hw was read from a synthetic description or an XML export */
  hwloc_bitmap_t usable; /* PUs this process may run on */

  topo_machine machine; /* the public view; points into the arrays below */
  int node_count;
  topo_node *nodes;               /* [node_count], OS index order */
  hwloc_const_cpuset_t *node_sets; /* [node_count] borrowed from hw */
  int core_count;
  topo_core *cores;               /* [core_count] */
  int *core_node_slot;            /* [core_count] index into nodes */
  int *pu_storage;                /* each core's pus then usable_pus */
  int *node_core_storage;         /* each node's cores */
  char *usable_list;
  char *source;
  char quota_source[512];
};

/* Upper bounds on the PUs and on all objects (packages, NUMA nodes, caches, cores, PUs:
 * all but the machine) of the hwloc synthetic description `desc`; topo_new refuses more
 * than TOPO_MAX_SYNTHETIC_PUS or TOPO_MAX_SYNTHETIC_OBJECTS before hwloc builds them.
 * Any thread. */
void topo__synthetic_size(const char *desc, uint64_t *pus, uint64_t *objects);

/* Checks the hwloc XML export text[size] (any bytes) and gives hw
 * (hwloc_topology_set_xmlbuffer) a document written here instead: the CPU and memory
 * objects only, in the form hwloc writes (topo_xml.c says what is taken). INVALID_ARG
 * with "topology: SOURCE line N: ..." for what is refused; `source` names the text
 * ("xml FILE"). Any thread. */
inferd_code topo__xml_load(hwloc_topology_t hw, const char *text, size_t size, const char *source, inferd_status *status);

/* Index into t->nodes of the node with this OS index, or -1. */
int topo__node_slot(const topo *t, int os_index);

#endif /* INFERD_TOPO_INTERNAL_H */
