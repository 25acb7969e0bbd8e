/*
 * fuzz_topo_xml.c - libFuzzer target for `inferd topo --xml FILE`: an hwloc XML export
 * of a machine read by topo_new (src/topo/topo_machine.c), then the plan made on it
 * and the printers, as fuzz_topo does for synthetic machines.
 *
 * Input: the XML text, then optionally a NUL byte and an `inferd topo` command line
 * (NUL bytes between the arguments, as fuzz_topo reads one) for the plan options,
 * --cpus and --cpu-quota; a line that fails to parse, asks for help or names another
 * machine (--synthetic, --xml) is skipped. The text goes to topo_new as
 * topo_params.xml_buffer, which is what --xml FILE reads the file into.
 *
 * The promise: success, or INVALID_ARG with a one-line message, never a crash, a hang
 * or a wrong answer: the rules of fuzz_topo_check.h, and the machine is the text's. Its
 * CPUs and NUMA nodes are read here again, plainly (the os_index of each <object
 * type="PU" ...> and type="NUMANode" tag: an accepted export has no other tag of that
 * form): each CPU and node of the machine is one of them, and without allowed sets
 * (which hwloc applies) there are as many. hwloc's own XML import is not hardened
 * against hostile input: what topo_new lets through to it must not crash it.
 *
 * Seeds: tests/fuzz/corpus/topo_xml/ (see corpus/README.md).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_internal.h"
#include "fuzz_topo_check.h"

enum { MAX_ARGS = 32 };

/* The os_index of every <object type="TYPE" ...> tag of the text (NUL-terminated) after
 * its <topology tag (the prolog is not read: an accepted one holds no tag), in
 * indexes[] (at most max; more are counted, not kept); their count. */
static int tagged_indexes(const char *text, const char *type, long *indexes, int max) {
  char want[40];
  snprintf(want, sizeof want, " type=\"%s\"", type); /* (not subtype=) */
  int n = 0;
  const char *start = strstr(text, "<topology");
  for (const char *p = start ? start : text; (p = strstr(p, "<object")); p++) {
    const char *end = strchr(p, '>'), *t = strstr(p, want), *os = strstr(p, " os_index=\"");
    if (!end || !t || t > end) continue;
    if (n < max) indexes[n] = os && os < end ? strtol(os + 11, NULL, 10) : -1;
    n++;
  }
  return n;
}

static bool listed(const long *indexes, int n, long value) {
  for (int i = 0; i < n; i++)
    if (indexes[i] == value) return true;
  return false;
}

/* The machine against the text's PUs and NUMA nodes. */
static void check_against_text(const topo *t, const char *text) {
  enum { MAX = 4096 };
  static long pus[MAX], nodes[MAX];
  const topo_machine *m = topo_get_machine(t);
  int pu_count = tagged_indexes(text, "PU", pus, MAX), node_count = tagged_indexes(text, "NUMANode", nodes, MAX);
  if (pu_count > MAX || node_count > MAX) return;
  for (int c = 0; c < m->core_count; c++)
    for (int i = 0; i < m->cores[c].pu_count; i++)
      if (!listed(pus, pu_count, m->cores[c].pus[i])) fuzz_topo_fail("a CPU that is no PU of the text", NULL);
  for (int i = 0; i < m->node_count; i++)
    if (!listed(nodes, node_count, m->nodes[i].os_index)) fuzz_topo_fail("a NUMA node that is not the text's", NULL);
  if (!strstr(text, "allowed_cpuset=") && m->pu_count != pu_count) fuzz_topo_fail("not as many CPUs as the text's PUs", NULL);
  if (!strstr(text, "allowed_nodeset=") && m->node_count != node_count)
    fuzz_topo_fail("not as many NUMA nodes as the text's", NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  const char *nul = memchr(text, '\0', size);
  size_t xml_size = nul ? (size_t)(nul - text) : size;

  /* the command line after the XML */
  char *copy, *argv[MAX_ARGS + 1];
  int argc = fuzz_topo_split_args(nul ? nul + 1 : "", nul ? size - xml_size - 1 : 0, argv, MAX_ARGS, &copy);
  cli__topo_options o;
  inferd_status st = {0};
  if (cli__topo_parse(argc, argv, &o, &st) != INFERD_OK || o.help || o.topo.synthetic || o.topo.xml_path) {
    free(copy);
    return 0;
  }

  o.topo.xml_buffer = text;
  o.topo.xml_size = xml_size;
  topo *t = NULL;
  inferd_code rc = topo_new(&o.topo, &t, &st);
  if (rc != INFERD_OK) {
    fuzz_topo_check_refusal(rc, &st);
    if (rc != INFERD_INVALID_ARG) fuzz_topo_fail("an XML refused with another status than INVALID_ARG", st.message);
    if (t) fuzz_topo_fail("a refusal returned a topo", NULL);
    free(copy);
    return 0;
  }
  fuzz_topo_check_machine(t, &o.topo);
  char *xml = malloc(xml_size + 1);
  if (!xml) abort();
  memcpy(xml, text, xml_size);
  xml[xml_size] = '\0';
  check_against_text(t, xml);
  free(xml);
  fuzz_topo_check_plan(t, &o.plan);
  topo_free(t);
  free(copy);
  return 0;
}
