/*
 * fuzz_topo.c - libFuzzer target for what `inferd topo` makes of its command line: the
 * hwloc synthetic description (--synthetic), the CPU list (--cpus), the CPU quota and
 * the plan's options, through topo_new, topo_plan_new and the printers (src/topo/).
 *
 * Input: an `inferd topo` command line, as fuzz_cli reads one (NUL bytes split the
 * arguments; no subcommand byte), parsed by cli__topo_parse; fuzz_cli checks its
 * refusals. A line without --synthetic describes "pack:2 numa:2 core:4 pu:2" (never
 * this machine, which would make the answers depend on where the fuzzer runs); one
 * with --xml is skipped (a file's name: fuzz_topo_xml fuzzes the XML reader).
 *
 * The promise: success, or a status (INVALID_ARG for a bad description, CPU list or
 * plan option) with a one-line message, never a crash, a hang (a description of more
 * objects than topo_new takes is refused before hwloc builds them, and
 * topo__synthetic_size never counts fewer PUs or objects than hwloc builds) or a
 * wrong answer: the machine, the plan and their printing keep the rules that
 * fuzz_topo_check.h lists.
 *
 * Seeds: tests/fuzz/corpus/topo/.
 */
#include <stdint.h>
#include <stdlib.h>

#include "cli/cli_internal.h"
#include "fuzz_topo_check.h"

enum { MAX_ARGS = 64, FUZZ_MAX_OBJECTS = 1024 };

static const char DEFAULT_MACHINE[] = "pack:2 numa:2 core:4 pu:2";

/* ---- the input -------------------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *copy, *argv[MAX_ARGS + 1];
  int argc = fuzz_topo_split_args((const char *)data, size, argv, MAX_ARGS, &copy);

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
    fuzz_topo_check_refusal(rc, &st);
    if (t) fuzz_topo_fail("a refusal returned a topo", NULL);
    free(copy);
    return 0;
  }
  const topo_machine *m = topo_get_machine(t);
  if (too_large) fuzz_topo_fail("a machine above the limits was built", o.topo.synthetic);
  /* (hwloc adds a NUMA node when the description has none) */
  if ((uint64_t)m->pu_count > pus || (uint64_t)(m->pu_count + m->node_count) > objects + 1)
    fuzz_topo_fail("more PUs or objects than topo__synthetic_size counted", o.topo.synthetic);
  fuzz_topo_check_machine(t, &o.topo);
  fuzz_topo_check_plan(t, &o.plan);
  topo_free(t);
  free(copy);
  return 0;
}
