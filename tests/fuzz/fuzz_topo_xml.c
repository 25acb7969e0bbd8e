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
 * CPUs and NUMA nodes are read here again with libxml2 (the os_index of each element
 * <object type="PU"> and type="NUMANode" without a namespace: an accepted export holds
 * no other PU or NUMA node): each CPU and node of the machine is one of them, and
 * without allowed sets (which hwloc applies) there are as many. hwloc's own XML import
 * is not hardened against hostile input: what topo_new lets through to it must not
 * crash it.
 *
 * Seeds: tests/fuzz/corpus/topo_xml/ (see corpus/README.md).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>

#include "cli/cli_internal.h"
#include "fuzz_topo_check.h"

enum { MAX_ARGS = 32, MAX_OBJECTS = 4096 };

/* The PUs and NUMA nodes of the text, and whether an object has allowed sets. */
typedef struct text_objects {
  long pus[MAX_OBJECTS], nodes[MAX_OBJECTS]; /* os_index, -1 without one; counted past MAX_OBJECTS, not kept */
  int pu_count, node_count;
  bool allowed_cpuset, allowed_nodeset;
} text_objects;

static void read_objects(const xmlNode *node, text_objects *o) {
  for (; node; node = node->next) {
    if (node->type != XML_ELEMENT_NODE) continue;
    o->allowed_cpuset |= xmlHasNsProp(node, BAD_CAST "allowed_cpuset", NULL) != NULL;
    o->allowed_nodeset |= xmlHasNsProp(node, BAD_CAST "allowed_nodeset", NULL) != NULL;
    if (!node->ns && xmlStrEqual(node->name, BAD_CAST "object")) {
      xmlChar *type = xmlGetNoNsProp(node, BAD_CAST "type"), *index = xmlGetNoNsProp(node, BAD_CAST "os_index");
      long os_index = index ? strtol((const char *)index, NULL, 10) : -1;
      if (xmlStrEqual(type, BAD_CAST "PU") && o->pu_count++ < MAX_OBJECTS) o->pus[o->pu_count - 1] = os_index;
      if (xmlStrEqual(type, BAD_CAST "NUMANode") && o->node_count++ < MAX_OBJECTS) o->nodes[o->node_count - 1] = os_index;
      xmlFree(type);
      xmlFree(index);
    }
    read_objects(node->children, o);
  }
}

static bool listed(const long *indexes, int n, long value) {
  for (int i = 0; i < n; i++)
    if (indexes[i] == value) return true;
  return false;
}

/* The machine against the PUs and NUMA nodes of the text (an export topo_new accepted). */
static void check_against_text(const topo *t, const char *text, size_t size) {
  static text_objects o;
  o = (text_objects){0};
  xmlDoc *doc = xmlReadMemory(text, (int)size, NULL, "UTF-8",
                              XML_PARSE_NONET | XML_PARSE_IGNORE_ENC | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  if (!doc) fuzz_topo_fail("libxml2 cannot read an export topo_new accepted", NULL);
  read_objects(xmlDocGetRootElement(doc), &o);
  xmlFreeDoc(doc);
  const topo_machine *m = topo_get_machine(t);
  if (o.pu_count > MAX_OBJECTS || o.node_count > MAX_OBJECTS) return;
  for (int c = 0; c < m->core_count; c++)
    for (int i = 0; i < m->cores[c].pu_count; i++)
      if (!listed(o.pus, o.pu_count, m->cores[c].pus[i])) fuzz_topo_fail("a CPU that is no PU of the text", NULL);
  for (int i = 0; i < m->node_count; i++)
    if (!listed(o.nodes, o.node_count, m->nodes[i].os_index)) fuzz_topo_fail("a NUMA node that is not the text's", NULL);
  if (!o.allowed_cpuset && m->pu_count != o.pu_count) fuzz_topo_fail("not as many CPUs as the text's PUs", NULL);
  if (!o.allowed_nodeset && m->node_count != o.node_count) fuzz_topo_fail("not as many NUMA nodes as the text's", NULL);
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
  check_against_text(t, text, xml_size);
  fuzz_topo_check_plan(t, &o.plan);
  topo_free(t);
  free(copy);
  return 0;
}
