/*
 * fuzz_topo_check.h - what fuzz_topo and fuzz_topo_xml share: reading the `inferd topo`
 * command line of an input, and the checks they run on what src/topo/ made: a refusal, a
 * machine, a plan and its printing. Each check
 * aborts (with one line on stderr saying what was wrong) when the promise of topo.h is
 * broken, so libFuzzer reports it.
 *
 * The promise, whatever the machine's description (a synthetic one, an XML export):
 *   - a refusal is a status with a one-line message, and returns no topo or plan;
 *   - the machine: per-core, per-node and total counts agree; the nodes are in strict
 *     OS index order, numbered from 0, and their cores partition the machine's; a CPU
 *     is a number from 0 to TOPO_MAX_CPU_NUMBER and belongs to one core; cores and nodes
 *     name packages the machine has; usable PUs are a core's own, and with allowed_cpus lie in the list as read
 *     here (digits and ranges, whole numbers: nothing wraps); usable_cpus lists exactly
 *     the usable PUs; a given quota is the machine's, with its cap floor(quota) (at
 *     least 1), and there is none otherwise;
 *   - the plan: the invariants of tests/unit/test_topo.c's check_plan (each worker on
 *     usable CPUs of its own node, no CPU or core given twice unless oversubscribed, no
 *     more slots than the quota and the usable cores allow), each worker's cpu_list is
 *     its CPUs, warnings are one line;
 *   - the printers and topo_plan_summary stay inside their buffers and lines.
 *
 * Single-threaded, like the fuzzers.
 */
#ifndef INFERD_FUZZ_TOPO_CHECK_H
#define INFERD_FUZZ_TOPO_CHECK_H

#include "topo/topo_internal.h"

/* Splits text[size], an `inferd topo` command line with NUL bytes between the arguments,
 * into argv: argv[0] is "topo", then at most max_args - 1 arguments, then NULL (argv has
 * room for max_args + 1). The arguments point into *copy, a copy of the text that the
 * caller frees. Returns the argument count. */
int fuzz_topo_split_args(const char *text, size_t size, char **argv, int max_args, char **copy);

/* Aborts with "fuzz_topo: what: detail". */
_Noreturn void fuzz_topo_fail(const char *what, const char *detail);

/* rc (not INFERD_OK) and the status topo_new or topo_plan_new left. */
void fuzz_topo_check_refusal(inferd_code rc, const inferd_status *status);

/* The machine t, made from p (whose allowed_cpus and cpu_quota are checked against it). */
void fuzz_topo_check_machine(const topo *t, const topo_params *p);

/* Makes the plan p on t, then checks it or its refusal, and its printing; frees it. */
void fuzz_topo_check_plan(const topo *t, const topo_plan_params *p);

#endif /* INFERD_FUZZ_TOPO_CHECK_H */
