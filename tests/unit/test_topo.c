/*
 * test_topo.c - CPU topology, cgroup quotas, placement plans and binding.
 *
 * DESIGN
 * Plans are tested on hwloc synthetic machines, so that two packages with two NUMA
 * nodes and hyperthreads can be tested on any host:
 *   "pack:2 numa:1 core:4 pu:2"  2 nodes x 4 cores x 2 PUs, PUs 0-15, core c = PUs 2c,2c+1
 * check_plan() checks the invariants every plan must keep whatever was asked: each
 * worker's CPUs are usable, on its node, distinct from every other worker's (unless the
 * plan says it is oversubscribed), on distinct physical cores unless use_logical_core,
 * and no more slots used than available. The tests then check what was asked.
 *
 * The quota arithmetic is tested with numbers, its file reading with a fake /proc and
 * /sys laid out in a temporary directory (cgroup v2 with a parent's limit, cgroup v1
 * with a mount of a sub-tree, as in a container).
 *
 * On the real machine: the plan stays inside the process's affinity mask, and a worker
 * that binds itself gets an OpenMP team whose thread i runs on cpus[i], in this region
 * and the next (libgomp reuses the team's threads).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "topo/topo.h"
#include "topo/topo_internal.h"

#define SYNTH_2x4x2 "pack:2 numa:1 core:4 pu:2"

static topo *make_topo(const topo_params *p) {
  topo *t = NULL;
  inferd_status st = {0};
  if (topo_new(p, &t, &st) != INFERD_OK) fail_msg("topo_new: %s", st.message);
  return t;
}

static topo_plan *make_plan(const topo *t, topo_plan_params p) {
  topo_plan *plan = NULL;
  inferd_status st = {0};
  if (topo_plan_new(t, &p, &plan, &st) != INFERD_OK) fail_msg("topo_plan_new: %s", st.message);
  return plan;
}

static const topo_core *core_of_cpu(const topo_machine *m, int cpu) {
  for (int c = 0; c < m->core_count; c++)
    for (int i = 0; i < m->cores[c].pu_count; i++)
      if (m->cores[c].pus[i] == cpu) return &m->cores[c];
  return NULL;
}

static bool usable_cpu(const topo_machine *m, int cpu) {
  const topo_core *c = core_of_cpu(m, cpu);
  if (!c) return false;
  for (int i = 0; i < c->usable_pu_count; i++)
    if (c->usable_pus[i] == cpu) return true;
  return false;
}

/* The invariants of every plan. */
static void check_plan(const topo *t, const topo_plan *plan) {
  const topo_machine *m = topo_get_machine(t);
  int seen_cpu[4096] = {0}, seen_core[4096] = {0}, threads = 0;
  assert_true(plan->worker_count >= 1);
  for (int w = 0; w < plan->worker_count; w++) {
    const topo_worker *wk = &plan->workers[w];
    assert_int_equal(wk->index, w);
    assert_true(wk->thread_count >= 1);
    assert_true(wk->thread_count <= plan->threads_per_worker);
    assert_ptr_equal(wk->topo, t);
    int worker_core[4096] = {0};
    for (int i = 0; i < wk->thread_count; i++) {
      int cpu = wk->cpus[i];
      const topo_core *c = core_of_cpu(m, cpu);
      if (!c || !usable_cpu(m, cpu)) fail_msg("worker %d: cpu %d is not usable", w, cpu);
      if (c->node != wk->node) fail_msg("worker %d (node %d): cpu %d is on node %d", w, wk->node, cpu, c->node);
      assert_int_equal(wk->cores[i], c->index);
      if (!plan->oversubscribed && seen_cpu[cpu]++) fail_msg("cpu %d given twice", cpu);
      if (!plan->use_logical_core && worker_core[c->index]++) fail_msg("worker %d: core %d given twice", w, c->index);
      if (!plan->use_logical_core && !plan->oversubscribed && seen_core[c->index]++)
        fail_msg("core %d given to two workers", c->index);
      threads++;
    }
  }
  assert_true(plan->slots_used <= plan->slots_available);
  if (!plan->oversubscribed) assert_int_equal(plan->slots_used, threads);
  int limit = plan->use_logical_core ? m->usable_pu_count : m->usable_core_count;
  assert_true(plan->slots_available <= limit);
  if (m->quota_cap) assert_true(plan->slots_available <= m->quota_cap);
}

static void assert_cpus(const topo_worker *w, const char *expected_list) {
  if (strcmp(w->cpu_list, expected_list) != 0)
    fail_msg("worker %d: cpus %s, expected %s", w->index, w->cpu_list, expected_list);
}

static bool has_warning(const topo_plan *plan, const char *needle) {
  for (int i = 0; i < plan->warning_count; i++)
    if (strstr(plan->warnings[i], needle)) return true;
  return false;
}

/* ==== the machine ======================================================================== */

static void test_synthetic_machine(void **state) {
  (void)state;
  topo *t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2});
  const topo_machine *m = topo_get_machine(t);
  assert_int_equal(m->package_count, 2);
  assert_int_equal(m->node_count, 2);
  assert_int_equal(m->core_count, 8);
  assert_int_equal(m->pu_count, 16);
  assert_int_equal(m->usable_core_count, 8);
  assert_int_equal(m->usable_pu_count, 16);
  assert_string_equal(m->usable_cpus, "0-15");
  assert_false(m->bindable);
  assert_int_equal(m->quota_cap, 0);
  for (int n = 0; n < 2; n++) {
    assert_int_equal(m->nodes[n].os_index, n);
    assert_int_equal(m->nodes[n].package, n);
    assert_int_equal(m->nodes[n].core_count, 4);
  }
  const topo_core *c5 = &m->cores[5];
  assert_int_equal(c5->node, 1);
  assert_int_equal(c5->package, 1);
  assert_int_equal(c5->pu_count, 2);
  assert_int_equal(c5->pus[0], 10);
  assert_int_equal(c5->pus[1], 11);
  topo_free(t);
}

static void test_affinity_mask_is_honoured(void **state) {
  (void)state;
  /* PUs 1-5: core 0 only through PU 1, cores 1 and 2 whole; node 1 unusable. */
  topo *t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2, .allowed_cpus = "1-5"});
  const topo_machine *m = topo_get_machine(t);
  assert_int_equal(m->usable_core_count, 3);
  assert_int_equal(m->usable_pu_count, 5);
  assert_string_equal(m->usable_cpus, "1-5");
  assert_int_equal(m->cores[0].usable_pu_count, 1);
  assert_int_equal(m->cores[0].usable_pus[0], 1);
  assert_int_equal(m->nodes[1].usable_core_count, 0);

  topo_plan *plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  check_plan(t, plan);
  assert_int_equal(plan->worker_count, 1); /* node 1 has nothing usable */
  assert_int_equal(plan->workers[0].node, 0);
  assert_int_equal(plan->workers[0].thread_count, 3);
  assert_cpus(&plan->workers[0], "1-2,4");
  topo_plan_free(plan);

  /* Node 1 by name: refused with a clear message. */
  topo_plan_params p = TOPO_PLAN_PARAMS_DEFAULT;
  p.node_id = 1;
  inferd_status st = {0};
  assert_int_equal(topo_plan_new(t, &p, &plan, &st), INFERD_INVALID_ARG);
  assert_null(plan);
  assert_non_null(strstr(st.message, "node_id 1: this process may use none of that NUMA node's CPUs"));
  topo_free(t);
}

static void test_bad_params(void **state) {
  (void)state;
  topo *t = NULL;
  inferd_status st = {0};
  assert_int_equal(topo_new(&(topo_params){.synthetic = "pack:two"}, &t, &st), INFERD_INVALID_ARG);
  assert_null(t);
  assert_non_null(strstr(st.message, "synthetic"));
  assert_int_equal(topo_new(&(topo_params){.synthetic = SYNTH_2x4x2, .allowed_cpus = "x-y"}, &t, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "bad CPU list 'x-y'"));
  /* a list of CPUs the machine does not have is the caller's mistake, not the machine's */
  assert_int_equal(topo_new(&(topo_params){.synthetic = SYNTH_2x4x2, .allowed_cpus = "100-120"}, &t, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "CPU list '100-120' names no CPU"));
  assert_int_equal(topo_new(&(topo_params){.synthetic = SYNTH_2x4x2, .allowed_cpus = "1x,0"}, &t, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "bad CPU list '1x,0'"));
  /* an index hwloc would read as 4294967295 (a 512 MB cpuset; fuzz_topo) */
  assert_int_equal(topo_new(&(topo_params){.synthetic = "pack:2 core:1 pu:2(indexes=1,99999999999999,0,2)"}, &t, &st),
                   INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "has an index above 1048575, or one twice"));
  /* an index twice: hwloc merged its objects into packages inside packages (fuzz_topo) */
  assert_int_equal(topo_new(&(topo_params){.synthetic = "pack:3 pu:2(indexes=0,46,0,0,2,6)"}, &t, &st), INFERD_INVALID_ARG);
  t = make_topo(&(topo_params){.synthetic = "pack:2 core:1 pu:2(indexes=1048575,5,0,2)"});
  assert_string_equal(topo_get_machine(t)->usable_cpus, "0,2,5,1048575");
  topo_free(t);
  t = NULL;
  assert_int_equal(topo_new(&(topo_params){.synthetic = SYNTH_2x4x2, .xml_path = "/x.xml"}, &t, &st), INFERD_INVALID_ARG);
  assert_int_equal(topo_new(&(topo_params){.xml_path = "/nonexistent/topo.xml"}, &t, &st), INFERD_INVALID_ARG);

  t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2});
  topo_plan *plan = NULL;
  topo_plan_params p = TOPO_PLAN_PARAMS_DEFAULT;
  p.workers = -1;
  assert_int_equal(topo_plan_new(t, &p, &plan, &st), INFERD_INVALID_ARG);
  p = TOPO_PLAN_PARAMS_DEFAULT;
  p.threads_per_worker = -2;
  assert_int_equal(topo_plan_new(t, &p, &plan, &st), INFERD_INVALID_ARG);
  p = TOPO_PLAN_PARAMS_DEFAULT;
  p.workers = 4097; /* 4096 at most */
  assert_int_equal(topo_plan_new(t, &p, &plan, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "workers 4097"));
  p.workers = 4096;
  assert_int_equal(topo_plan_new(t, &p, &plan, &st), INFERD_OK);
  assert_true(plan->oversubscribed);
  assert_int_equal(plan->worker_count, 4096);
  topo_plan_free(plan);
  plan = NULL;
  p = TOPO_PLAN_PARAMS_DEFAULT;
  p.node_id = 2;
  assert_int_equal(topo_plan_new(t, &p, &plan, &st), INFERD_INVALID_ARG);
  assert_string_equal(st.message, "node_id 2: no such NUMA node (nodes: 0-1)");
  p.node_id = -5;
  assert_int_equal(topo_plan_new(t, &p, &plan, &st), INFERD_INVALID_ARG);
  assert_null(plan);

  /* Binding needs the real machine. */
  plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  assert_int_equal(topo_bind_current_thread(&plan->workers[0], &st), INFERD_UNSUPPORTED);
  assert_non_null(strstr(st.message, "cannot bind threads on synthetic"));
  topo_plan_free(plan);
  topo_free(t);
}

/* ==== XML exports ========================================================================= */

/* An export as lstopo --of xml writes one: 2 packages, a NUMA node each, 2 cores of 2 PUs
 * numbered as Linux numbers hyperthreads (core c: CPUs c and c + 4); with what topo_new
 * leaves out (info, page_type, an instruction cache, a PCI bridge, NUMA distances). */
static const char XML_2x2x2[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
    "<topology version=\"2.0\">\n"
    " <object type=\"Machine\" os_index=\"0\" cpuset=\"0x000000ff\" complete_cpuset=\"0x000000ff\""
    " allowed_cpuset=\"0x000000ff\" nodeset=\"0x00000003\" complete_nodeset=\"0x00000003\" allowed_nodeset=\"0x00000003\">\n"
    "  <info name=\"Backend\" value=\"Linux\"/>\n"
    "  <object type=\"Package\" os_index=\"0\" cpuset=\"0x00000033\" complete_cpuset=\"0x00000033\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\">\n"
    "   <object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x00000033\" complete_cpuset=\"0x00000033\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" local_memory=\"2147483648\">\n"
    "    <page_type size=\"4096\" count=\"524288\"/>\n"
    "   </object>\n"
    "   <object type=\"L1iCache\" cpuset=\"0x00000011\" complete_cpuset=\"0x00000011\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\" cache_size=\"32768\" depth=\"1\" cache_type=\"2\">\n"
    "    <object type=\"Core\" os_index=\"0\" cpuset=\"0x00000011\" complete_cpuset=\"0x00000011\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\">\n"
    "     <object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\" complete_cpuset=\"0x00000001\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\"/>\n"
    "     <object type=\"PU\" os_index=\"4\" cpuset=\"0x00000010\" complete_cpuset=\"0x00000010\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\"/>\n"
    "    </object>\n"
    "   </object>\n"
    "   <object type=\"Core\" os_index=\"1\" cpuset=\"0x00000022\" complete_cpuset=\"0x00000022\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\">\n"
    "    <object type=\"PU\" os_index=\"1\" cpuset=\"0x00000002\" complete_cpuset=\"0x00000002\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\"/>\n"
    "    <object type=\"PU\" os_index=\"5\" cpuset=\"0x00000020\" complete_cpuset=\"0x00000020\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\"/>\n"
    "   </object>\n"
    "  </object>\n"
    "  <object type=\"Package\" os_index=\"1\" cpuset=\"0x000000cc\" complete_cpuset=\"0x000000cc\" nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\">\n"
    "   <object type=\"NUMANode\" os_index=\"1\" cpuset=\"0x000000cc\" complete_cpuset=\"0x000000cc\" nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\" local_memory=\"2147483648\"/>\n"
    "   <object type=\"Core\" os_index=\"0\" cpuset=\"0x00000044\" complete_cpuset=\"0x00000044\" nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\">\n"
    "    <object type=\"PU\" os_index=\"2\" cpuset=\"0x00000004\" complete_cpuset=\"0x00000004\" nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\"/>\n"
    "    <object type=\"PU\" os_index=\"6\" cpuset=\"0x00000040\" complete_cpuset=\"0x00000040\" nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\"/>\n"
    "   </object>\n"
    "   <object type=\"Core\" os_index=\"1\" cpuset=\"0x00000088\" complete_cpuset=\"0x00000088\" nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\">\n"
    "    <object type=\"PU\" os_index=\"3\" cpuset=\"0x00000008\" complete_cpuset=\"0x00000008\" nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\"/>\n"
    "    <object type=\"PU\" os_index=\"7\" cpuset=\"0x00000080\" complete_cpuset=\"0x00000080\" nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\"/>\n"
    "   </object>\n"
    "  </object>\n"
    "  <object type=\"Bridge\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[00-00]\">\n"
    "   <object type=\"PCIDev\" pci_busid=\"0000:00:02.0\" pci_type=\"0180 [1af4:1042] [1af4:1042] 01\"/>\n"
    "  </object>\n"
    " </object>\n"
    " <distances2 type=\"NUMANode\" nbobjs=\"2\" kind=\"5\" indexing=\"os\">\n"
    "  <indexes length=\"3\">0 1</indexes>\n"
    "  <u64values length=\"11\">10 20 20 10</u64values>\n"
    " </distances2>\n"
    "</topology>\n";

static void check_xml_machine(const topo *t) {
  const topo_machine *m = topo_get_machine(t);
  assert_int_equal(m->package_count, 2);
  assert_int_equal(m->node_count, 2);
  assert_int_equal(m->core_count, 4);
  assert_int_equal(m->pu_count, 8);
  assert_string_equal(m->usable_cpus, "0-7");
  assert_false(m->bindable);
  assert_int_equal(m->quota_cap, 0);
  for (int n = 0; n < 2; n++) {
    assert_int_equal(m->nodes[n].os_index, n);
    assert_int_equal(m->nodes[n].package, n);
    assert_int_equal(m->nodes[n].core_count, 2);
    assert_int_equal(m->nodes[n].memory_bytes, 2147483648u);
  }
  const topo_core *c3 = &m->cores[3];
  assert_int_equal(c3->node, 1);
  assert_int_equal(c3->package, 1);
  assert_int_equal(c3->pu_count, 2);
  assert_int_equal(c3->pus[0], 3);
  assert_int_equal(c3->pus[1], 7);

  topo_plan *plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  check_plan(t, plan);
  assert_int_equal(plan->worker_count, 2);
  assert_cpus(&plan->workers[0], "0-1");
  assert_cpus(&plan->workers[1], "2-3");
  topo_plan_free(plan);
}

/* The same export from a file (--xml FILE) and from memory (xml_buffer). */
static void test_xml_export(void **state) {
  (void)state;
  char path[] = "/tmp/test_topo_xml_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, XML_2x2x2, strlen(XML_2x2x2)), (ssize_t)strlen(XML_2x2x2));
  close(fd);
  topo *t = make_topo(&(topo_params){.xml_path = path});
  check_xml_machine(t);
  assert_non_null(strstr(topo_get_machine(t)->source, "xml /tmp/test_topo_xml_"));
  topo_free(t);
  unlink(path);

  t = make_topo(&(topo_params){.xml_buffer = XML_2x2x2, .xml_size = strlen(XML_2x2x2), .allowed_cpus = "0-3"});
  assert_string_equal(topo_get_machine(t)->source, "xml buffer");
  assert_int_equal(topo_get_machine(t)->usable_pu_count, 4);
  topo_free(t);
  /* (the buffer's size counts: a NUL byte inside is refused, not the end of the text) */
  inferd_status st = {0};
  assert_int_equal(topo_new(&(topo_params){.xml_buffer = XML_2x2x2, .xml_size = sizeof XML_2x2x2}, &t, &st),
                   INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, ": a NUL byte"));
}

/* An export of a machine whose cpuset cgroup (the Machine's allowed sets) cuts it, as
 * lstopo writes one inside a container: the whole machine stays, and `usable` is what
 * the sets allow, so that `inferd topo` shows what was cut. hwloc's default drops what
 * they leave out: the machine had 4 CPUs, "4 of 4 usable", and a cpuset cut was never
 * seen (taskset's showed, as "of 8"). Here the second PU of each core is not allowed,
 * then package 0's CPUs and node 1's memory. */
static void test_xml_disallowed(void **state) {
  (void)state;
  static const char full_cpus[] = "allowed_cpuset=\"0x000000ff\"", full_nodes[] = "allowed_nodeset=\"0x00000003\"";
  char *text = strdup(XML_2x2x2);
  assert_non_null(text);
  memcpy(strstr(text, full_cpus), "allowed_cpuset=\"0x0000000f\"", sizeof full_cpus - 1);
  topo *t = make_topo(&(topo_params){.xml_buffer = text, .xml_size = strlen(text)});
  const topo_machine *m = topo_get_machine(t);
  assert_int_equal(m->pu_count, 8);
  assert_int_equal(m->usable_pu_count, 4);
  assert_int_equal(m->usable_core_count, 4);
  assert_string_equal(m->usable_cpus, "0-3");
  assert_int_equal(m->cores[3].pu_count, 2);
  assert_int_equal(m->cores[3].usable_pu_count, 1);
  topo_plan_params p = TOPO_PLAN_PARAMS_DEFAULT;
  p.use_logical_core = true;
  topo_plan *plan = make_plan(t, p);
  check_plan(t, plan);
  assert_int_equal(plan->slots_available, 4);
  topo_plan_free(plan);
  topo_free(t);

  memcpy(strstr(text, "allowed_cpuset="), "allowed_cpuset=\"0x000000cc\"", sizeof full_cpus - 1);
  memcpy(strstr(text, full_nodes), "allowed_nodeset=\"0x00000001\"", sizeof full_nodes - 1);
  t = make_topo(&(topo_params){.xml_buffer = text, .xml_size = strlen(text)});
  m = topo_get_machine(t);
  assert_int_equal(m->node_count, 2);
  assert_int_equal(m->core_count, 4);
  assert_int_equal(m->nodes[0].usable_core_count, 0);
  assert_int_equal(m->nodes[1].usable_core_count, 2);
  assert_string_equal(m->usable_cpus, "2-3,6-7");
  plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  check_plan(t, plan);
  assert_int_equal(plan->worker_count, 1);
  assert_int_equal(plan->workers[0].node, 1); /* its cores' node, whose memory it cannot bind */
  assert_cpus(&plan->workers[0], "2-3");
  topo_plan_free(plan);
  topo_free(t);
  free(text);
}

/* What hwloc 2.9 crashes on, or takes to mean another machine, is refused with the line
 * it is on (tests/fuzz/corpus/topo_xml/regress-* are the fuzzer's). */
static void test_xml_refusals(void **state) {
  (void)state;
  static const struct {
    const char *from, *to, *message;
  } cases[] = {
      /* hwloc dereferenced NULL */
      {" complete_cpuset=\"0x000000ff\"", "", "line 4: object Machine without complete_cpuset"},
      {"<object type=\"PU\" os_index=\"5\" cpuset=\"0x00000020\"", "<object type=\"PU\" os_index=\"5\" cpuset=\"0x00000020\"4\"",
       "line 18: attributes construct error"},
      /* the plan would have been another machine's */
      {"type=\"NUMANode\" os_index=\"1\" cpuset=\"0x000000cc\" complete_cpuset=\"0x000000cc\" nodeset=\"0x00000002\" complete_nodeset=\"0x00000002\"",
       "type=\"NUMANode\" os_index=\"0\" cpuset=\"0x000000cc\" complete_cpuset=\"0x000000cc\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\"",
       "line 22: a second NUMANode 0"},
      {"type=\"NUMANode\" os_index=\"1\"", "type=\"NUMANode\" os_index=\"4294967295\"", "os_index '4294967295' is not a number from 0 to 1048575"},
      {"type=\"Core\" os_index=\"1\" cpuset=\"0x00000022\"", "type=\"Core\" os_index=\"1\" cpuset=\"0x00000026\"",
       "line 16: object Core: its cpuset has CPUs that are not its PUs"},
      {"cpuset=\"0x00000040\" complete_cpuset=\"0x00000040\"", "cpuset=\"0x00000008\" complete_cpuset=\"0x00000008\"",
       "line 25: object PU 6: its cpuset is not {6}"},
      /* hwloc's own lines on stderr: a 10-line banner, then it reordered them */
      {"<object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\" complete_cpuset=\"0x00000001\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\"/>\n"
       "     <object type=\"PU\" os_index=\"4\" cpuset=\"0x00000010\" complete_cpuset=\"0x00000010\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\"/>",
       "<object type=\"PU\" os_index=\"4\" cpuset=\"0x00000010\" complete_cpuset=\"0x00000010\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\"/>\n"
       "     <object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\" complete_cpuset=\"0x00000001\" nodeset=\"0x00000001\" complete_nodeset=\"0x00000001\"/>",
       "line 13: object PU comes after an object of higher CPUs"},
      /* not an hwloc 2 export */
      {"<object type=\"Package\" os_index=\"0\"", "<object type=\"Package\" os_index=\"0\" cpuset=\"0x00000100\" complete_cpuset=\"0x00000100\"",
       "line 6: Attribute cpuset redefined"},
      {"<topology version=\"2.0\">", "<topology>", "line 3: expected <topology version=\"2.0\">"},
      {"</topology>\n", "</topology>\n<x/>", "line 41: Extra content at the end of the document"},
      {"type=\"Core\" os_index=\"1\" cpuset=\"0x00000088\"", "type=\"Socket\" os_index=\"1\" cpuset=\"0x00000088\"",
       "unknown object type 'Socket'"},
      {"type=\"Package\" os_index=\"1\"", "type=\"Core\" os_index=\"1\"", "line 23: object Core inside object Core"},
      {"0x000000ff\" complete_cpuset", "0xf...f,0x000000ff\" complete_cpuset", "is not a set like 0x000000ff"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *at = strstr(XML_2x2x2, cases[i].from);
    if (!at) fail_msg("case %zu: '%s' is not in the export", i, cases[i].from);
    char xml[sizeof XML_2x2x2 + 256];
    snprintf(xml, sizeof xml, "%.*s%s%s", (int)(at - XML_2x2x2), XML_2x2x2, cases[i].to, at + strlen(cases[i].from));
    topo *t = NULL;
    inferd_status st = {0};
    if (topo_new(&(topo_params){.xml_buffer = xml, .xml_size = strlen(xml)}, &t, &st) != INFERD_INVALID_ARG)
      fail_msg("case %zu was not refused", i);
    assert_null(t);
    if (!strstr(st.message, cases[i].message)) fail_msg("case %zu: '%s' does not say '%s'", i, st.message, cases[i].message);
    assert_null(strchr(st.message, '\n'));
  }
  topo *t = NULL;
  inferd_status st = {0};
  assert_int_equal(topo_new(&(topo_params){.xml_buffer = XML_2x2x2, .xml_size = (size_t)TOPO_MAX_XML_BYTES + 1}, &t, &st),
                   INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "is larger than 64 MiB"));
  assert_int_equal(topo_new(&(topo_params){.xml_buffer = XML_2x2x2, .xml_size = strlen(XML_2x2x2), .synthetic = "pu:2"}, &t, &st),
                   INFERD_INVALID_ARG);
  assert_null(t);
}

/* A synthetic machine above TOPO_MAX_SYNTHETIC_PUS PUs or TOPO_MAX_SYNTHETIC_OBJECTS objects
 * is refused before hwloc builds it: hwloc takes time quadratic in a level's width
 * ("01111111", octal for 299593 PUs, ran for minutes; fuzz_topo). */
static void test_synthetic_size_limit(void **state) {
  (void)state;
  static const char *const refused[] = {"01111111", "pu:4097", "pack:16 core:1024 pu:4", "pack:2 core:4096 pu:2",
                                        "core:5000 pu:1", "pack:99999999999999999999999 pu:1",
                                        "core:4096 [numa] [numa] [numa] pu:1"};
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    topo *t = NULL;
    inferd_status st = {0};
    double start = (double)clock() / CLOCKS_PER_SEC;
    if (topo_new(&(topo_params){.synthetic = refused[i]}, &t, &st) != INFERD_INVALID_ARG)
      fail_msg("synthetic '%s' was not refused", refused[i]);
    assert_null(t);
    assert_non_null(strstr(st.message, "more than 4096 PUs or 16384 objects"));
    assert_true((double)clock() / CLOCKS_PER_SEC - start < 1.0);
  }
  uint64_t pus, objects;
  topo__synthetic_size("pack:2 numa:1 core:4 pu:2", &pus, &objects);
  assert_int_equal(pus, 16);
  assert_int_equal(objects, 2 + 2 + 8 + 16);
  topo__synthetic_size("(memory=1GB) pack:0x2(memory=1GB) [numa] [numa] core:010 pu:2(indexes=0,1)", &pus, &objects);
  assert_int_equal(pus, 32);
  assert_int_equal(objects, 2 + 4 + 16 + 32);
  /* the largest ones still load */
  topo *t = make_topo(&(topo_params){.synthetic = "pack:2 numa:2 core:512 pu:2"});
  assert_int_equal(topo_get_machine(t)->pu_count, 4096);
  topo_free(t);
}

/* CPU numbers are read whole: hwloc's reader truncated them to an unsigned (4294967296
 * was CPU 0) and allocated a bitmap up to the largest (4294967295: 512 MB, 5-10 s). */
static void test_cpu_list_numbers(void **state) {
  (void)state;
  static const char *const refused[] = {"4294967296", "1,4294967295", "0-1048576", "99999999999999999999", "3-2",
                                        "0-", "-1", "1,,2", "1-2-3", "0x1"};
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    topo *t = NULL;
    inferd_status st = {0};
    double start = (double)clock() / CLOCKS_PER_SEC;
    if (topo_new(&(topo_params){.synthetic = SYNTH_2x4x2, .allowed_cpus = refused[i]}, &t, &st) != INFERD_INVALID_ARG)
      fail_msg("CPU list '%s' was not refused", refused[i]);
    assert_null(t);
    if (!strstr(st.message, "bad CPU list")) fail_msg("CPU list '%s': %s", refused[i], st.message);
    assert_true((double)clock() / CLOCKS_PER_SEC - start < 1.0);
  }
  topo *t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2, .allowed_cpus = "15,0-1,1048575"});
  assert_string_equal(topo_get_machine(t)->usable_cpus, "0-1,15");
  topo_free(t);
  /* decimal, as Linux's cpulist format: hwloc read "010" as octal, CPU 8 (fuzz_topo) */
  t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2, .allowed_cpus = "010,09"});
  assert_string_equal(topo_get_machine(t)->usable_cpus, "9-10");
  topo_free(t);
}

/* ==== plans ============================================================================== */

static void test_default_plan_one_worker_per_node(void **state) {
  (void)state;
  topo *t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2});
  topo_plan *plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  check_plan(t, plan);
  assert_int_equal(plan->worker_count, 2);
  assert_int_equal(plan->threads_per_worker, 4);
  assert_int_equal(plan->workers[0].node, 0);
  assert_int_equal(plan->workers[1].node, 1);
  /* The first PU of each physical core: never two hyperthreads of one core. */
  assert_cpus(&plan->workers[0], "0,2,4,6");
  assert_cpus(&plan->workers[1], "8,10,12,14");
  assert_int_equal(plan->slots_available, 8);
  assert_int_equal(plan->slots_used, 8);
  assert_false(plan->oversubscribed);
  assert_int_equal(plan->warning_count, 0);
  char line[256];
  assert_string_equal(topo_plan_summary(plan, line, sizeof line),
                      "2 workers x 4 threads: worker 0 node 0 cpus 0,2,4,6; worker 1 node 1 cpus 8,10,12,14");
  topo_plan_free(plan);

  /* threads_per_worker below a node's cores: that many; above: the node's, with a warning. */
  topo_plan_params p = TOPO_PLAN_PARAMS_DEFAULT;
  p.threads_per_worker = 3;
  plan = make_plan(t, p);
  check_plan(t, plan);
  assert_int_equal(plan->worker_count, 2);
  assert_cpus(&plan->workers[1], "8,10,12");
  assert_int_equal(plan->warning_count, 0);
  topo_plan_free(plan);
  p.threads_per_worker = 6;
  plan = make_plan(t, p);
  check_plan(t, plan);
  assert_int_equal(plan->workers[0].thread_count, 4);
  assert_true(has_warning(plan, "threads_per_worker 6 reduced to 4: NUMA node 0 has 4 usable physical cores"));
  topo_plan_free(plan);
  topo_free(t);
}

static void test_workers_times_threads_limits(void **state) {
  (void)state;
  topo *t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2});
  static const struct {
    int workers, threads;   /* asked */
    int want_threads;       /* per worker */
    bool warned, oversubscribed;
  } cases[] = {
      {1, 0, 4, false, false},  /* one worker: a whole node, not both */
      {2, 0, 4, false, false},
      {3, 0, 2, false, false},  /* 4/2 + 4/2 = 4 >= 3: two idle cores */
      {4, 0, 2, false, false},
      {5, 0, 1, false, false},
      {8, 0, 1, false, false},
      {2, 3, 3, false, false},  /* fits: 3 + 3 on 4 + 4 */
      {3, 4, 2, true, false},   /* 3 x 4 > 8: lowered */
      {1, 8, 4, true, false},   /* a worker stays inside one node */
      {8, 2, 1, true, false},
      {9, 0, 1, true, true},    /* more workers than cores */
      {20, 4, 1, true, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    topo_plan_params p = TOPO_PLAN_PARAMS_DEFAULT;
    p.workers = cases[i].workers;
    p.threads_per_worker = cases[i].threads;
    topo_plan *plan = make_plan(t, p);
    check_plan(t, plan);
    if (plan->worker_count != cases[i].workers || plan->threads_per_worker != cases[i].want_threads ||
        (plan->warning_count > 0) != cases[i].warned || plan->oversubscribed != cases[i].oversubscribed)
      fail_msg("workers %d threads %d: got %d workers x %d threads, %d warnings, oversubscribed %d; "
               "expected %d x %d, warned %d, oversubscribed %d (first warning: %s)",
               cases[i].workers, cases[i].threads, plan->worker_count, plan->threads_per_worker, plan->warning_count,
               plan->oversubscribed, cases[i].workers, cases[i].want_threads, cases[i].warned, cases[i].oversubscribed,
               plan->warning_count ? plan->warnings[0] : "-");
    for (int w = 0; w < plan->worker_count; w++) assert_int_equal(plan->workers[w].thread_count, cases[i].want_threads);
    if (!plan->oversubscribed) assert_true(plan->worker_count * plan->threads_per_worker <= plan->slots_available);
    topo_plan_free(plan);
  }
  /* Workers spread over the nodes rather than filling one first. */
  topo_plan_params p = TOPO_PLAN_PARAMS_DEFAULT;
  p.workers = 2;
  p.threads_per_worker = 2;
  topo_plan *plan = make_plan(t, p);
  assert_int_equal(plan->workers[0].node, 0);
  assert_int_equal(plan->workers[1].node, 1);
  topo_plan_free(plan);
  /* The oversubscription warning says what to do. */
  p.workers = 9;
  p.threads_per_worker = 0;
  plan = make_plan(t, p);
  assert_true(has_warning(plan, "9 workers on 8 usable physical cores: workers share cores (oversubscribed); "
                                "use at most 8 workers or use_logical_core"));
  assert_int_equal(plan->slots_used, 8);
  topo_plan_free(plan);
  topo_free(t);
}

static void test_use_logical_core(void **state) {
  (void)state;
  topo *t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2});
  topo_plan_params p = TOPO_PLAN_PARAMS_DEFAULT;
  p.use_logical_core = true;
  topo_plan *plan = make_plan(t, p);
  check_plan(t, plan);
  assert_int_equal(plan->worker_count, 2);
  assert_int_equal(plan->threads_per_worker, 8);
  assert_cpus(&plan->workers[0], "0-7");
  assert_int_equal(plan->slots_available, 16);
  topo_plan_free(plan);

  /* 4 workers x 4 logical CPUs: each takes two whole cores, siblings together. */
  p.workers = 4;
  plan = make_plan(t, p);
  check_plan(t, plan);
  assert_int_equal(plan->threads_per_worker, 4);
  for (int w = 0; w < 4; w++) {
    const topo_worker *wk = &plan->workers[w];
    assert_int_equal(wk->cores[0], wk->cores[1]);
    assert_int_equal(wk->cores[2], wk->cores[3]);
    assert_int_not_equal(wk->cores[0], wk->cores[2]);
  }
  topo_plan_free(plan);

  /* Fewer threads than cores: each thread gets a core of its own, hyperthreads stay idle.
   * 3 workers x 1 thread (two on node 0, one on node 1), then one worker per node x 2. */
  p.workers = 3;
  p.threads_per_worker = 1;
  for (int round = 0; round < 2; round++) {
    plan = make_plan(t, p);
    check_plan(t, plan);
    assert_false(plan->oversubscribed);
    int used[4096] = {0}, threads = 0;
    for (int w = 0; w < plan->worker_count; w++)
      for (int i = 0; i < plan->workers[w].thread_count; i++, threads++)
        if (used[plan->workers[w].cores[i]]++) fail_msg("core %d runs two threads", plan->workers[w].cores[i]);
    assert_int_equal(threads, round == 0 ? 3 : 4);
    topo_plan_free(plan);
    p.workers = 0;
    p.threads_per_worker = 2;
  }
  p.threads_per_worker = 0;

  /* Exactly as many threads as cores: still one per core, no sibling used. */
  p.workers = 2;
  p.threads_per_worker = 4;
  plan = make_plan(t, p);
  check_plan(t, plan);
  assert_cpus(&plan->workers[0], "0,2,4,6");
  assert_cpus(&plan->workers[1], "8,10,12,14");
  topo_plan_free(plan);
  p.threads_per_worker = 0;

  /* Siblings needed: each worker still starts on a core of its own. 2 workers x 3 on
   * node 0's 4 cores got CPUs 0-2 and 3-5, both on core 1 (CPUs 2 and 3). */
  p.node_id = 0;
  p.workers = 2;
  p.threads_per_worker = 3;
  plan = make_plan(t, p);
  check_plan(t, plan);
  assert_cpus(&plan->workers[0], "0-2");
  assert_cpus(&plan->workers[1], "4-6");
  topo_plan_free(plan);
  /* More one-thread workers than cores: every core gets one before any gets two (5 on
   * 4 cores put two on each of cores 0 and 1 and left core 3 idle). */
  p.workers = 5;
  p.threads_per_worker = 0;
  plan = make_plan(t, p);
  check_plan(t, plan);
  int per_core[8] = {0};
  for (int w = 0; w < plan->worker_count; w++) per_core[plan->workers[w].cores[0]]++;
  for (int c = 0; c < 4; c++) assert_in_range(per_core[c], 1, 2);
  topo_plan_free(plan);
  p.node_id = TOPO_NODE_ANY;

  /* 16 workers fit with logical cores, not without. */
  p.workers = 16;
  plan = make_plan(t, p);
  check_plan(t, plan);
  assert_false(plan->oversubscribed);
  assert_int_equal(plan->slots_used, 16);
  topo_plan_free(plan);
  p.use_logical_core = false;
  plan = make_plan(t, p);
  assert_true(plan->oversubscribed);
  topo_plan_free(plan);
  topo_free(t);
}

static void test_node_id(void **state) {
  (void)state;
  topo *t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2});
  topo_plan_params p = TOPO_PLAN_PARAMS_DEFAULT;
  p.node_id = 1;
  topo_plan *plan = make_plan(t, p);
  check_plan(t, plan);
  assert_int_equal(plan->worker_count, 1);
  assert_int_equal(plan->workers[0].node, 1);
  assert_cpus(&plan->workers[0], "8,10,12,14");
  assert_int_equal(plan->slots_available, 4);
  topo_plan_free(plan);

  /* Two workers on node 1 only share its 4 cores. */
  p.workers = 2;
  plan = make_plan(t, p);
  check_plan(t, plan);
  assert_int_equal(plan->threads_per_worker, 2);
  assert_cpus(&plan->workers[0], "8,10");
  assert_cpus(&plan->workers[1], "12,14");
  topo_plan_free(plan);
  topo_free(t);

  /* A node of memory alone (HBM or CXL beside each package's DDR) has no CPU: that is
   * not the affinity mask's doing, and the message says which it is. */
  t = make_topo(&(topo_params){.synthetic = "pack:2 [numa] [numa] core:2 pu:2"});
  assert_int_equal(topo_get_machine(t)->nodes[1].core_count, 0);
  p = TOPO_PLAN_PARAMS_DEFAULT;
  p.node_id = 1;
  inferd_status st = {0};
  assert_int_equal(topo_plan_new(t, &p, &plan, &st), INFERD_INVALID_ARG);
  assert_null(plan);
  assert_string_equal(st.message, "node_id 1: that NUMA node has memory but no CPU of its own");
  topo_free(t);

  /* Zero-initialised params mean node 0, not any node: TOPO_PLAN_PARAMS_DEFAULT is -1. */
  assert_int_equal(TOPO_PLAN_PARAMS_DEFAULT.node_id, TOPO_NODE_ANY);
}

static void test_quota_caps_the_plan(void **state) {
  (void)state;
  /* 3.5 CPUs of quota on 8 cores: 3 compute threads, spread over both nodes. */
  topo *t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2, .cpu_quota = 3.5});
  const topo_machine *m = topo_get_machine(t);
  assert_int_equal(m->quota_cap, 3);
  assert_int_equal(m->usable_core_count, 8); /* the quota caps the plan, not the machine */
  topo_plan *plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  check_plan(t, plan);
  assert_int_equal(plan->slots_available, 3);
  assert_int_equal(plan->worker_count, 2);
  assert_int_equal(plan->workers[0].thread_count, 2);
  assert_int_equal(plan->workers[1].thread_count, 1);
  assert_true(has_warning(plan, "CPU quota of 3.50 CPUs (given): using 3 of 8 usable physical cores"));
  topo_plan_free(plan);

  /* Workers x threads never exceed the cap, and use all of it when they fit: one worker
   * gets 3 threads on one node (it got 2: the cap was first split 2 + 1 over the nodes). */
  topo_plan_params p = TOPO_PLAN_PARAMS_DEFAULT;
  p.workers = 1;
  p.threads_per_worker = 4;
  plan = make_plan(t, p);
  check_plan(t, plan);
  assert_int_equal(plan->threads_per_worker, 3);
  assert_true(has_warning(plan, "threads_per_worker 4 reduced to 3: 1 workers x 4 threads exceed the CPU quota's 3 physical cores"));
  topo_plan_free(plan);
  p.threads_per_worker = 0;
  for (int workers = 1; workers <= 3; workers++) {
    p.workers = workers;
    plan = make_plan(t, p);
    check_plan(t, plan);
    assert_int_equal(plan->worker_count, workers);
    assert_int_equal(plan->threads_per_worker, 3 / workers);
    assert_int_equal(plan->slots_used, workers * (3 / workers));
    assert_false(plan->oversubscribed);
    if (workers == 3) { /* as many workers as the cap: the nodes keep their slots, workers alternate */
      assert_int_equal(plan->workers[0].node, 0);
      assert_int_equal(plan->workers[1].node, 1);
      assert_int_equal(plan->workers[2].node, 0);
    }
    topo_plan_free(plan);
  }
  topo_free(t);

  /* --cpus 4 on two 4-core nodes: one worker takes the 4 CPUs of one node; two workers
   * take 2 each, one per node. */
  t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2, .cpu_quota = 4});
  p = TOPO_PLAN_PARAMS_DEFAULT;
  p.workers = 1;
  plan = make_plan(t, p);
  check_plan(t, plan);
  assert_int_equal(plan->threads_per_worker, 4);
  assert_cpus(&plan->workers[0], "0,2,4,6");
  topo_plan_free(plan);
  p.workers = 2;
  plan = make_plan(t, p);
  check_plan(t, plan);
  assert_int_equal(plan->threads_per_worker, 2);
  assert_int_not_equal(plan->workers[0].node, plan->workers[1].node);
  topo_plan_free(plan);
  topo_free(t);

  /* Half a CPU still runs one thread; more workers than that share it, and say so. */
  t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2, .cpu_quota = 0.5});
  p = TOPO_PLAN_PARAMS_DEFAULT;
  p.workers = 2;
  plan = make_plan(t, p);
  check_plan(t, plan);
  assert_int_equal(plan->slots_available, 1);
  assert_true(plan->oversubscribed);
  /* logical CPUs would not help: the quota caps them too */
  assert_true(has_warning(plan, "2 workers on 1 usable physical cores: workers share cores (oversubscribed); "
                                "use at most 1 worker"));
  assert_false(has_warning(plan, "use_logical_core"));
  topo_plan_free(plan);
  topo_free(t);

  /* A quota above the cores changes nothing. */
  t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2, .cpu_quota = 64});
  plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  assert_int_equal(plan->slots_available, 8);
  assert_int_equal(plan->warning_count, 0);
  topo_plan_free(plan);
  topo_free(t);
  /* Nor does one of exactly the cores. */
  t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2, .cpu_quota = 8});
  plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  assert_int_equal(plan->slots_available, 8);
  assert_int_equal(plan->warning_count, 0);
  topo_plan_free(plan);
  topo_free(t);

  /* Nodes of 2 and 4 usable cores under a cap of 5: the smaller node gives none up, the
   * larger one gives up one (2 + 3), never more slots than a node has. */
  t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2, .allowed_cpus = "0-3,8-15", .cpu_quota = 5});
  plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  check_plan(t, plan);
  assert_int_equal(plan->worker_count, 2);
  assert_cpus(&plan->workers[0], "0,2");
  assert_cpus(&plan->workers[1], "8,10,12");
  topo_plan_free(plan);
  topo_free(t);
}

/* ==== the quota's arithmetic and files ======================================================== */

static void test_quota_arithmetic(void **state) {
  (void)state;
  assert_true(topo_quota_cpus(150000, 100000) == 1.5);
  assert_true(topo_quota_cpus(400000, 100000) == 4.0);
  assert_true(topo_quota_cpus(-1, 100000) == 0.0); /* v1's "no quota" */
  assert_true(topo_quota_cpus(50000, 0) == 0.0);

  double cpus = -7;
  assert_int_equal(topo_quota_parse_cpu_max("max 100000\n", &cpus), 0);
  assert_true(cpus == 0.0);
  assert_int_equal(topo_quota_parse_cpu_max("150000 100000\n", &cpus), 0);
  assert_true(cpus == 1.5);
  assert_int_equal(topo_quota_parse_cpu_max("200000 50000", &cpus), 0);
  assert_true(cpus == 4.0);
  static const char *const malformed[] = {"", "max", "100000", "abc 100000", "-5 100000", "100 0", "100 100 100", "1e5 100000",
                                          /* fuzz_quota: an overflowing period, a long quota word cut in two */
                                          "150 99999999999999999999", "99999999999999999999 100000",
                                          "0000000000000000000000000150000100000", "+5 100000", "max -1"};
  for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++)
    if (topo_quota_parse_cpu_max(malformed[i], &cpus) != -1) fail_msg("accepted cpu.max '%s'", malformed[i]);
  assert_int_equal(topo_quota_parse_cpu_max(" 150000\t100000 \n", &cpus), 0);
  assert_true(cpus == 1.5);

  assert_int_equal(topo_quota_core_cap(0), 0);
  assert_int_equal(topo_quota_core_cap(-1), 0);
  assert_int_equal(topo_quota_core_cap(0.5), 1);
  assert_int_equal(topo_quota_core_cap(1.5), 1);
  assert_int_equal(topo_quota_core_cap(3.99), 3);
  assert_int_equal(topo_quota_core_cap(4), 4);
}

static void write_file(const char *root, const char *rel, const char *text) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  /* mkdir -p of the parent */
  for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')) != NULL; p++) {
    *p = '\0';
    mkdir(path, 0755);
    *p = '/';
  }
  FILE *f = fopen(path, "w");
  if (!f) fail_msg("cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

static char *make_root(void) {
  char tmpl[] = "/tmp/inferd_topo_test_XXXXXX";
  char *dir = mkdtemp(tmpl);
  if (!dir) fail_msg("mkdtemp failed");
  return strdup(dir);
}

static void remove_root(char *root) {
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  free(root);
}

static void test_quota_files_cgroup_v2(void **state) {
  (void)state;
  char *root = make_root();
  write_file(root, "proc/self/cgroup", "0::/kubepods/pod1/c1\n");
  write_file(root, "proc/self/mountinfo",
             "22 1 0:20 / /proc rw,relatime - proc proc rw\n"
             "30 22 0:27 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n");
  write_file(root, "sys/fs/cgroup/cpu.max", "max 100000\n");
  write_file(root, "sys/fs/cgroup/kubepods/cpu.max", "max 100000\n");
  write_file(root, "sys/fs/cgroup/kubepods/pod1/cpu.max", "250000 100000\n"); /* the pod's limit */
  write_file(root, "sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n");
  double cpus = 0;
  char source[512];
  topo_quota_read(root, &cpus, source, sizeof source);
  if (cpus != 2.5) fail_msg("quota %g, expected 2.5 (from the parent)", cpus);
  assert_non_null(strstr(source, "/sys/fs/cgroup/kubepods/pod1/cpu.max"));

  /* The container's own, smaller limit wins. */
  write_file(root, "sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "150000 100000\n");
  topo_quota_read(root, &cpus, source, sizeof source);
  assert_true(cpus == 1.5);
  assert_non_null(strstr(source, "/pod1/c1/cpu.max"));

  /* No limit anywhere; and unreadable or garbage files are no quota, not an error. */
  write_file(root, "sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "garbage\n");
  write_file(root, "sys/fs/cgroup/kubepods/pod1/cpu.max", "max 100000\n");
  topo_quota_read(root, &cpus, source, sizeof source);
  assert_true(cpus == 0);
  assert_string_equal(source, "none");
  remove_root(root);

  /* No /proc at all. */
  topo_quota_read("/nonexistent", &cpus, source, sizeof source);
  assert_true(cpus == 0);
}

#define MiB(n) ((uint64_t)(n) << 20)

/* Memory left: MemAvailable, or less under a memory cgroup's limit, whose working set is
 * its usage less its inactive file pages (v2 files, limits on two levels). */
static void test_memory_available_cgroup_v2(void **state) {
  (void)state;
  char *root = make_root();
  write_file(root, "proc/meminfo", "MemTotal:       24683620 kB\nMemFree:  100 kB\nMemAvailable:    2097152 kB\n");
  write_file(root, "proc/self/cgroup", "0::/system.slice/inferd.service\n");
  write_file(root, "proc/self/mountinfo",
             "30 22 0:27 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n");
  char source[512];
  /* no limit anywhere: MemAvailable (2 GiB) */
  write_file(root, "sys/fs/cgroup/system.slice/inferd.service/memory.max", "max\n");
  assert_true(topo_memory_available(root, source, sizeof source) == MiB(2048));
  assert_non_null(strstr(source, "/proc/meminfo"));
  /* the unit's MemoryMax=1G with 600 MiB used, 100 MiB of it inactive file pages */
  write_file(root, "sys/fs/cgroup/system.slice/inferd.service/memory.max", "1073741824\n");
  write_file(root, "sys/fs/cgroup/system.slice/inferd.service/memory.current", "629145600\n");
  write_file(root, "sys/fs/cgroup/system.slice/inferd.service/memory.stat",
             "anon 400000000\nfile 200000000\nactive_file 94371840\ninactive_file 104857600\n");
  uint64_t left = topo_memory_available(root, source, sizeof source);
  if (left != MiB(1024 - 500)) fail_msg("%llu bytes left, expected 524 MiB", (unsigned long long)left);
  assert_non_null(strstr(source, "inferd.service/memory.max"));
  /* a parent's smaller limit wins: 700 MiB with 650 MiB used and no stat file */
  write_file(root, "sys/fs/cgroup/system.slice/memory.max", "734003200\n");
  write_file(root, "sys/fs/cgroup/system.slice/memory.current", "681574400\n");
  assert_true(topo_memory_available(root, source, sizeof source) == MiB(50));
  assert_non_null(strstr(source, "system.slice/memory.max"));
  /* inactive file pages at or above the usage (the stat read apart from memory.current,
   * v1's usage lagging its stat): the working set is none, not the whole usage */
  write_file(root, "sys/fs/cgroup/system.slice/memory.max", "max\n");
  write_file(root, "sys/fs/cgroup/system.slice/inferd.service/memory.stat", "anon 0\ninactive_file 630194176\n");
  left = topo_memory_available(root, source, sizeof source);
  if (left != MiB(1024)) fail_msg("%llu bytes left, expected 1024 MiB (no working set)", (unsigned long long)left);
  write_file(root, "sys/fs/cgroup/system.slice/memory.max", "734003200\n");
  /* over the limit: nothing left */
  write_file(root, "sys/fs/cgroup/system.slice/memory.current", "800000000\n");
  assert_true(topo_memory_available(root, NULL, 0) == 0);
  remove_root(root);
  /* nothing readable: no bound */
  assert_true(topo_memory_available("/nonexistent", source, sizeof source) == UINT64_MAX);
  assert_string_equal(source, "none");
}

/* The same in cgroup v1 (this machine's layout: a memory hierarchy of its own), where
 * "no limit" is LLONG_MAX rounded down to a page and the stat key is total_inactive_file. */
static void test_memory_available_cgroup_v1(void **state) {
  (void)state;
  char *root = make_root();
  write_file(root, "proc/meminfo", "MemTotal:       24683620 kB\nMemAvailable:   24215420 kB\n");
  write_file(root, "proc/self/cgroup", "5:cpu,cpuacct:/\n4:memory:/jobs/j1\n0::/\n");
  write_file(root, "proc/self/mountinfo",
             "30 22 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
             "37 22 0:33 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n");
  write_file(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  write_file(root, "sys/fs/cgroup/memory/memory.usage_in_bytes", "5000000000\n");
  write_file(root, "sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", "9223372036854771712\n");
  write_file(root, "sys/fs/cgroup/memory/jobs/memory.usage_in_bytes", "400000000\n");
  write_file(root, "sys/fs/cgroup/memory/jobs/j1/memory.limit_in_bytes", "268435456\n"); /* 256 MiB */
  write_file(root, "sys/fs/cgroup/memory/jobs/j1/memory.usage_in_bytes", "209715200\n"); /* 200 MiB */
  write_file(root, "sys/fs/cgroup/memory/jobs/j1/memory.stat",
             "cache 100000000\ninactive_file 1048576\ntotal_inactive_file 41943040\n"); /* 40 MiB */
  char source[512];
  uint64_t left = topo_memory_available(root, source, sizeof source);
  if (left != MiB(256 - 160)) fail_msg("%llu bytes left, expected 96 MiB", (unsigned long long)left);
  assert_non_null(strstr(source, "/jobs/j1/memory.limit_in_bytes"));
  /* a parent's limit without memory.use_hierarchy does not hold its children (nor does
   * its usage count theirs): 10 MiB left there is not ours; with use_hierarchy 1 it is */
  write_file(root, "sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", "314572800\n");  /* 300 MiB */
  write_file(root, "sys/fs/cgroup/memory/jobs/memory.usage_in_bytes", "304087040\n");  /* 290 MiB */
  write_file(root, "sys/fs/cgroup/memory/jobs/memory.use_hierarchy", "0\n");
  left = topo_memory_available(root, source, sizeof source);
  if (left != MiB(96)) fail_msg("%llu bytes left from %s, expected 96 MiB", (unsigned long long)left, source);
  write_file(root, "sys/fs/cgroup/memory/jobs/memory.use_hierarchy", "1\n");
  left = topo_memory_available(root, source, sizeof source);
  if (left != MiB(10)) fail_msg("%llu bytes left from %s, expected 10 MiB", (unsigned long long)left, source);
  /* the process's own cgroup counts whatever its flag */
  write_file(root, "sys/fs/cgroup/memory/jobs/j1/memory.use_hierarchy", "0\n");
  write_file(root, "sys/fs/cgroup/memory/jobs/memory.use_hierarchy", "0\n");
  assert_true(topo_memory_available(root, source, sizeof source) == MiB(96));
  remove_root(root);
}

/* A MemAvailable or an inactive_file whose number is followed by other text is not read:
 * "2x097152 kB" was taken as 2 kB, "104857600x" as 100 MiB (fuzz_quota). The kernel's
 * own lines ("MemAvailable:   N kB", "inactive_file N") still are. */
static void test_memory_available_malformed(void **state) {
  (void)state;
  char *root = make_root();
  char source[512];
  write_file(root, "proc/meminfo", "MemTotal:       24683620 kB\nMemAvailable:    2x097152 kB\n");
  uint64_t left = topo_memory_available(root, source, sizeof source);
  if (left != UINT64_MAX) fail_msg("%llu bytes left from %s, expected no bound", (unsigned long long)left, source);
  write_file(root, "proc/meminfo", "MemTotal:       24683620 kB\nMemAvailable:    2097152 MB\n");
  assert_true(topo_memory_available(root, source, sizeof source) == UINT64_MAX);
  write_file(root, "proc/meminfo", "MemTotal:       24683620 kB\nMemAvailable:    2097152 kB\n");
  assert_true(topo_memory_available(root, source, sizeof source) == MiB(2048));
  write_file(root, "proc/self/cgroup", "0::/a\n");
  write_file(root, "proc/self/mountinfo", "30 22 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  write_file(root, "sys/fs/cgroup/a/memory.max", "1073741824\n");
  write_file(root, "sys/fs/cgroup/a/memory.current", "629145600\n");
  write_file(root, "sys/fs/cgroup/a/memory.stat", "anon 1\ninactive_file 104857600x\n");
  left = topo_memory_available(root, source, sizeof source);
  if (left != MiB(1024 - 600)) fail_msg("%llu bytes left, expected 424 MiB (no inactive pages)", (unsigned long long)left);
  write_file(root, "sys/fs/cgroup/a/memory.stat", "anon 1\ninactive_file 104857600\n");
  left = topo_memory_available(root, source, sizeof source);
  if (left != MiB(1024 - 500)) fail_msg("%llu bytes left, expected 524 MiB", (unsigned long long)left);
  remove_root(root);
}

/* A quota file that does not fit the reader's buffer is no quota: cut short, it read as
 * another one (fuzz_quota). A mountinfo too long for its buffer still counts up to its
 * last whole line. */
static void test_quota_files_too_long(void **state) {
  (void)state;
  char *root = make_root();
  write_file(root, "proc/self/cgroup", "4:cpu,cpuacct:/a\n0::/b\n");
  char mountinfo[300000] = "";
  strcat(mountinfo, "30 22 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
                    "36 22 0:32 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n");
  while (strlen(mountinfo) < 280000) strcat(mountinfo, "99 22 0:99 / /mnt/x rw - tmpfs tmpfs rw\n");
  write_file(root, "proc/self/mountinfo", mountinfo);
  char cpu_max[200];
  snprintf(cpu_max, sizeof cpu_max, "150000 100000%*s7\n", 150, "");
  write_file(root, "sys/fs/cgroup/unified/b/cpu.max", cpu_max);
  char period[100];
  snprintf(period, sizeof period, "100000%*s7\n", 70, "");
  write_file(root, "sys/fs/cgroup/cpu/a/cpu.cfs_quota_us", "300000\n");
  write_file(root, "sys/fs/cgroup/cpu/a/cpu.cfs_period_us", period);
  double cpus = -1;
  char source[512];
  topo_quota_read(root, &cpus, source, sizeof source);
  if (cpus != 0) fail_msg("quota %g from %s, expected none", cpus, source);
  write_file(root, "sys/fs/cgroup/cpu/a/cpu.cfs_period_us", "100000\n");
  topo_quota_read(root, &cpus, source, sizeof source);
  if (cpus != 3) fail_msg("quota %g, expected 3 (a long mountinfo is read up to its last line)", cpus);
  remove_root(root);
}

static void test_quota_files_cgroup_v1_container(void **state) {
  (void)state;
  /* A container without a cgroup namespace: /proc/self/cgroup names the host's path,
   * the mount shows only that sub-tree (its root field is /docker/abc). */
  char *root = make_root();
  write_file(root, "proc/self/cgroup",
             "12:memory:/docker/abc\n"
             "4:cpu,cpuacct:/docker/abc\n"
             "1:name=systemd:/docker/abc\n"
             "0::/system.slice/docker.service\n");
  write_file(root, "proc/self/mountinfo",
             "40 30 0:36 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
             "41 30 0:37 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n");
  write_file(root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "300000\n");
  write_file(root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  write_file(root, "sys/fs/cgroup/memory/cpu.cfs_quota_us", "100000\n"); /* not the cpu hierarchy */
  write_file(root, "sys/fs/cgroup/memory/cpu.cfs_period_us", "100000\n");
  double cpus = 0;
  char source[512];
  topo_quota_read(root, &cpus, source, sizeof source);
  if (cpus != 3.0) fail_msg("quota %g, expected 3", cpus);
  assert_non_null(strstr(source, "cpu,cpuacct/cpu.cfs_quota_us"));

  /* -1: no quota. */
  write_file(root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  topo_quota_read(root, &cpus, source, sizeof source);
  assert_true(cpus == 0);
  remove_root(root);
}

/* ==== rendering helpers =================================================================== */

static void test_cpu_list(void **state) {
  (void)state;
  char buf[64];
  static const int ids[] = {11, 3, 1, 2, 8, 10, 0, 3};
  assert_string_equal(topo_cpu_list(ids, 8, buf, sizeof buf), "0-3,8,10-11");
  assert_string_equal(topo_cpu_list(ids, 0, buf, sizeof buf), "");
  static const int one[] = {5};
  assert_string_equal(topo_cpu_list(one, 1, buf, sizeof buf), "5");
  static const int spread[] = {0, 2, 4, 6, 8, 10, 12, 14};
  char small[10];
  assert_string_equal(topo_cpu_list(spread, 8, small, sizeof small), "0,2,4...");
}

static void test_print(void **state) {
  (void)state;
  topo *t = make_topo(&(topo_params){.synthetic = SYNTH_2x4x2, .allowed_cpus = "0-14"});
  topo_plan_params p = TOPO_PLAN_PARAMS_DEFAULT;
  p.workers = 3;
  p.threads_per_worker = 4;
  topo_plan *plan = make_plan(t, p);
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  topo_print_machine(t, f);
  topo_print_plan(plan, f);
  fclose(f);
  static const char *const expected[] = {
      "machine: synthetic 'pack:2 numa:1 core:4 pu:2'\n",
      "  2 packages, 2 NUMA nodes, 8 physical cores, 16 logical CPUs\n",
      "  NUMA node 1 (package 1, 1.0 GiB): 4 cores, 4 usable\n",
      "    core 7: cpus 14-15 (usable: 14)\n",
      "usable: 8 of 8 physical cores, 15 of 16 logical CPUs (cpus 0-14)\n",
      "  cpu quota: none\n",
      "plan: 3 workers, physical cores only\n",
      "  worker 0: NUMA node 0, 2 threads, cpus 0,2 (cores 0-1)\n",
      "  worker 1: NUMA node 1, 2 threads, cpus 8,10 (cores 4-5)\n",
      "  uses 6 of 8 usable physical cores\n",
      "warning: threads_per_worker 4 reduced to 2: 3 workers x 4 threads do not fit in the 8 usable physical cores of these NUMA nodes\n",
  };
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
    if (!strstr(text, expected[i])) fail_msg("missing:\n%sin:\n%s", expected[i], text);
  free(text);
  topo_plan_free(plan);
  topo_free(t);
}

/* ==== the real machine ======================================================================= */

static void test_real_machine_plan_is_sane(void **state) {
  (void)state;
  topo *t = make_topo(NULL);
  const topo_machine *m = topo_get_machine(t);
  assert_true(m->usable_core_count >= 1 && m->usable_core_count <= m->core_count);
  assert_true(m->usable_pu_count >= m->usable_core_count);
  assert_true(m->bindable);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  assert_int_equal(sched_getaffinity(0, sizeof mask, &mask), 0);
  assert_true(m->usable_pu_count <= CPU_COUNT(&mask));

  topo_plan *plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  check_plan(t, plan);
  for (int w = 0; w < plan->worker_count; w++)
    for (int i = 0; i < plan->workers[w].thread_count; i++)
      if (!CPU_ISSET(plan->workers[w].cpus[i], &mask)) fail_msg("cpu %d is outside the affinity mask", plan->workers[w].cpus[i]);
  int threads = 0;
  for (int w = 0; w < plan->worker_count; w++) threads += plan->workers[w].thread_count;
  assert_true(threads <= m->usable_core_count);
  if (m->quota_cap) assert_true(threads <= m->quota_cap);
  char line[512];
  fprintf(stderr, "this machine: %s\n", topo_plan_summary(plan, line, sizeof line));
  topo_plan_free(plan);
  topo_free(t);
}

typedef struct bind_result {
  const topo_worker *worker;
  const topo_worker *rebind; /* NULL, or what the thread binds to before the second region */
  pthread_barrier_t bound;   /* with rebind: the test frees worker's plan between the two */
  pthread_barrier_t freed;
  inferd_status status;
  int team[2];          /* team size in the first and second region */
  int cpu_of[2][64];    /* the single CPU in thread i's mask, -1 if several */
  long tid[2][64];
} bind_result;

static int only_cpu(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1) return -1;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) return c;
  return -1;
}

static void *bind_thread(void *arg) {
  bind_result *r = arg;
  inferd_code code = topo_bind_current_thread(r->worker, &r->status);
  for (int region = 0; region < 2; region++) {
    if (region == 1 && r->rebind) { /* a scale: the old plan is freed, the worker binds anew */
      pthread_barrier_wait(&r->bound);
      pthread_barrier_wait(&r->freed);
      if (code == INFERD_OK) code = topo_bind_current_thread(r->rebind, &r->status);
    }
    if (code != INFERD_OK) return NULL;
    /* Like oneDNN: a parallel region of the default size, started by the worker. */
#pragma omp parallel
    {
      int i = omp_get_thread_num();
      if (i == 0) r->team[region] = omp_get_num_threads();
      if (i < 64) {
        r->cpu_of[region][i] = only_cpu();
        r->tid[region][i] = (long)syscall(SYS_gettid);
      }
    }
  }
  return NULL;
}

static void test_real_machine_binding(void **state) {
  (void)state;
  topo *t = make_topo(NULL);
  topo_plan *plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  const topo_worker *w = &plan->workers[0];
  bind_result r = {.worker = w};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, bind_thread, &r), 0);
  pthread_join(thread, NULL);
  if (r.status.code != INFERD_OK) fail_msg("bind: %s", r.status.message);
  for (int region = 0; region < 2; region++) {
    assert_int_equal(r.team[region], w->thread_count);
    for (int i = 0; i < w->thread_count && i < 64; i++) {
      if (r.cpu_of[region][i] != w->cpus[i])
        fail_msg("region %d: OpenMP thread %d runs on cpu %d, expected only %d", region, i, r.cpu_of[region][i], w->cpus[i]);
      assert_int_equal(r.tid[region][i], r.tid[0][i]); /* the same OS threads again */
    }
  }
  /* The test's own thread was not touched. */
  cpu_set_t mask;
  assert_int_equal(sched_getaffinity(0, sizeof mask, &mask), 0);
  assert_true(CPU_COUNT(&mask) >= topo_get_machine(t)->usable_pu_count);
  topo_plan_free(plan);
  topo_free(t);
}

/* A worker re-binding after a scale, as bind_worker does: the same thread binds again,
 * to a slot of a new plan, after another thread freed the old plan (placement_plan); its
 * OpenMP team is reused. Under ThreadSanitizer this is what topo_bind.c's annotations
 * and tests/tsan.supp's race_top entry are for; everywhere, the reused team must be
 * bound to the new plan's CPUs. */
static void test_real_machine_rebinding(void **state) {
  (void)state;
  topo *t = make_topo(NULL);
  topo_plan *old_plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  topo_plan *new_plan = make_plan(t, TOPO_PLAN_PARAMS_DEFAULT);
  const topo_worker *w = &new_plan->workers[new_plan->worker_count - 1];
  bind_result r = {.worker = &old_plan->workers[0], .rebind = w};
  pthread_barrier_init(&r.bound, NULL, 2);
  pthread_barrier_init(&r.freed, NULL, 2);
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, bind_thread, &r), 0);
  pthread_barrier_wait(&r.bound);
  topo_plan_free(old_plan);
  pthread_barrier_wait(&r.freed);
  pthread_join(thread, NULL);
  pthread_barrier_destroy(&r.bound);
  pthread_barrier_destroy(&r.freed);
  if (r.status.code != INFERD_OK) fail_msg("bind: %s", r.status.message);
  assert_int_equal(r.team[1], w->thread_count);
  for (int i = 0; i < w->thread_count && i < 64; i++) {
    if (r.cpu_of[1][i] != w->cpus[i])
      fail_msg("after the re-bind, OpenMP thread %d runs on cpu %d, expected only %d", i, r.cpu_of[1][i], w->cpus[i]);
    if (i < r.team[0]) assert_int_equal(r.tid[1][i], r.tid[0][i]); /* the team was reused */
  }
  topo_plan_free(new_plan);
  topo_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_synthetic_machine),
      cmocka_unit_test(test_synthetic_size_limit),
      cmocka_unit_test(test_cpu_list_numbers),
      cmocka_unit_test(test_affinity_mask_is_honoured),
      cmocka_unit_test(test_bad_params),
      cmocka_unit_test(test_xml_export),
      cmocka_unit_test(test_xml_refusals),
      cmocka_unit_test(test_xml_disallowed),
      cmocka_unit_test(test_default_plan_one_worker_per_node),
      cmocka_unit_test(test_workers_times_threads_limits),
      cmocka_unit_test(test_use_logical_core),
      cmocka_unit_test(test_node_id),
      cmocka_unit_test(test_quota_caps_the_plan),
      cmocka_unit_test(test_quota_arithmetic),
      cmocka_unit_test(test_quota_files_cgroup_v2),
      cmocka_unit_test(test_memory_available_cgroup_v2),
      cmocka_unit_test(test_memory_available_cgroup_v1),
      cmocka_unit_test(test_memory_available_malformed),
      cmocka_unit_test(test_quota_files_cgroup_v1_container),
      cmocka_unit_test(test_quota_files_too_long),
      cmocka_unit_test(test_cpu_list),
      cmocka_unit_test(test_print),
      cmocka_unit_test(test_real_machine_plan_is_sane),
      cmocka_unit_test(test_real_machine_binding),
      cmocka_unit_test(test_real_machine_rebinding),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
