/*
 * cli_internal.h - what the files of src/cli/ share: the subcommands' command-line
 * parsers, pure functions so that tests/fuzz/fuzz_cli.c can run them on any argv.
 * Names carry the cli__ prefix; nothing outside src/cli/ and the fuzz target includes it.
 *
 * Each cli__X_parse reads argv (argv[0] is the subcommand's name, as cli_main passes
 * it) into its options, and checks every value and combination that needs no file:
 * it opens, stats and allocates nothing but what its options own (archive's list of
 * extra files), and writes nothing. It returns INFERD_OK, with `help` set when --help
 * was asked (the subcommand then prints its usage on stdout, exit 0), or INVALID_ARG
 * with a one-line message in *status, which the subcommand prints after its prefix
 * ("inferd bench: ...") and exits with status 2. Strings in the options point into argv,
 * which getopt_long may permute.
 *
 * Threading: getopt_long's globals make these single-threaded; each parse starts
 * getopt afresh, so one process may parse any number of command lines.
 */
#ifndef INFERD_CLI_INTERNAL_H
#define INFERD_CLI_INTERNAL_H

#include <getopt.h>
#include <stdbool.h>
#include <string.h>

#include "archive/archive.h"
#include "bench/bench.h"
#include "cli/cli.h"
#include "topo/topo.h"

/* ---- getopt_long's refusals ----------------------------------------------------------- */

/* Long options without a letter of their own have `val`s from here up, above any char:
 * getopt_long sets optopt to an option's val when it refuses a value given to a long
 * option that takes none, and to the letter when it refuses a letter. */
enum { CLI__LONG_ONLY = 256 };

/* The argument to name after getopt_long returned `ch` ('?' or, with an optstring that
 * starts with ':', ':' for a missing value), as typed: "-x" (in `letter`) for a letter
 * that is not one of `shorts`, which may sit inside a cluster ("-bx") where optind still
 * points at the cluster (argv[optind - 1] is then the argument before it, or the
 * subcommand's name); else the whole argument getopt_long just passed. */
static inline const char *cli__refused_option(int ch, char **argv, const char *shorts, char letter[3]) {
  bool is_letter = optopt != 0 && optopt < CLI__LONG_ONLY; /* negative: a byte above 127 */
  if (ch == '?' && is_letter && (optopt == ':' || !strchr(shorts, optopt))) {
    letter[0] = '-', letter[1] = (char)optopt, letter[2] = '\0';
    return letter;
  }
  return argv[optind - 1];
}

/* ---- inferd run ------------------------------------------------------------------- */

typedef struct cli__run_options {
  const char *model;          /* the one positional argument */
  const char *input, *output; /* --input, --output: without --bench, both set */
  int threads;                /* 0 (default: the engine's choice) or 1..1024 */
  int batch;                  /* --bench's batch, 1..1024; default 1 */
  int bench, json, profile, no_winograd, transformed_winograd;
  inferd_precision precision;
  double seconds;             /* --bench's time, (0, 86400]; default 5 */
  bool help;
} cli__run_options;

inferd_code cli__run_parse(int argc, char **argv, cli__run_options *out, inferd_status *status);

/* ---- inferd bench ----------------------------------------------------------------- */

typedef struct cli__bench_options {
  bench_params params; /* mode, url, file, model, labels, headers, counts, rate, timeout */
  bool job;            /* --mode job: one job of local mode (params.model and .file set) */
  int json;
  int range[3];        /* --concurrency-range START, END, STEP; all 0 when not given */
  bool help;
} cli__bench_options;

/* The files (--file, --model, --labels) are named, not checked: cli_bench checks that
 * they are readable regular files afterwards. */
inferd_code cli__bench_parse(int argc, char **argv, cli__bench_options *out, inferd_status *status);

/* ---- inferd archive --------------------------------------------------------------- */

enum { CLI__MAX_EXTRA_FILES = 256 };

typedef struct cli__archive_options {
  archive_write_params write; /* extra_files points into extras */
  const char *extra_list;     /* --extra-files as given, or NULL */
  const char *extras[CLI__MAX_EXTRA_FILES];
  char *extra_copy;           /* owned: the --extra-files list cut at its commas */
  bool help;
} cli__archive_options;

/* Free with cli__archive_options_free, also after a failure. */
inferd_code cli__archive_parse(int argc, char **argv, cli__archive_options *out, inferd_status *status);
void cli__archive_options_free(cli__archive_options *options);

/* ---- inferd topo ------------------------------------------------------------------ */

typedef struct cli__topo_options {
  topo_params topo;      /* --synthetic, --xml, --cpus (checked by topo_new), --cpu-quota */
  topo_plan_params plan; /* --workers, --threads-per-worker, --use-logical-core, --node-id */
  bool help;
} cli__topo_options;

inferd_code cli__topo_parse(int argc, char **argv, cli__topo_options *out, inferd_status *status);

#endif /* INFERD_CLI_INTERNAL_H */
