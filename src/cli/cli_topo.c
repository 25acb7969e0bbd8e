/*
 * cli_topo.c - `inferd topo`: the machine's cores and NUMA nodes and the placement plan
 * the server would use.
 *
 *   inferd topo [--workers N] [--threads-per-worker T] [--use-logical-core] [--node-id N]
 *               [--synthetic DESC | --xml FILE] [--cpus LIST] [--cpu-quota CPUS]
 *
 * The plan options mean what the server's do (DESIGN.md §5). The others describe
 * another machine, to see what a plan would be there: an hwloc synthetic description
 * ("pack:2 numa:1 core:4 pu:2") or an XML export (lstopo --of xml), the logical CPUs
 * the process may use (instead of its affinity mask), and a CPU quota in CPUs (instead
 * of the cgroup's; 0 for none). Prints the machine, then the plan and its warnings;
 * exit status 0, or 2 with one line on stderr for a bad option or an impossible plan.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_internal.h"
#include "topo/topo.h"

static const char topo_usage_text[] =
    "usage: inferd topo [--workers N] [--threads-per-worker T] [--use-logical-core] [--node-id N]\n"
    "                   [--synthetic DESC | --xml FILE] [--cpus LIST] [--cpu-quota CPUS]\n";

static int parse_count(const char *s, int lo, int hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

/* A refusal: bad()'s line, into the status. */
static inferd_code refuse(inferd_status *st, const char *msg, const char *arg) {
  return core_fail(st, INFERD_INVALID_ARG, "%s%s%s (try inferd topo --help)", msg, arg ? ": " : "", arg ? arg : "");
}

inferd_code cli__topo_parse(int argc, char **argv, cli__topo_options *o, inferd_status *st) {
  enum {
    OPT_WORKERS = CLI__LONG_ONLY, OPT_THREADS, OPT_LOGICAL, OPT_NODE, OPT_SYNTHETIC, OPT_XML, OPT_CPUS, OPT_QUOTA,
  };
  static const char shorts[] = ":h";
  static const struct option longs[] = {
      {"workers", required_argument, 0, OPT_WORKERS},     {"threads-per-worker", required_argument, 0, OPT_THREADS},
      {"use-logical-core", no_argument, 0, OPT_LOGICAL},  {"node-id", required_argument, 0, OPT_NODE},
      {"synthetic", required_argument, 0, OPT_SYNTHETIC}, {"xml", required_argument, 0, OPT_XML},
      {"cpus", required_argument, 0, OPT_CPUS},           {"cpu-quota", required_argument, 0, OPT_QUOTA},
      {"help", no_argument, 0, 'h'},                      {0, 0, 0, 0},
  };
  *o = (cli__topo_options){.plan = TOPO_PLAN_PARAMS_DEFAULT};
  topo_params *tp = &o->topo;
  topo_plan_params *pp = &o->plan;
  optind = 0; /* glibc: start afresh; 1 would go on inside an option cluster an earlier parse left */
  opterr = 0; /* one line of our own instead of getopt's */
  int ch;
  while ((ch = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
    switch (ch) {
    case OPT_WORKERS:
      if (parse_count(optarg, 0, 4096, &pp->workers)) return refuse(st, "--workers wants 0..4096", optarg);
      break;
    case OPT_THREADS:
      if (parse_count(optarg, 0, 4096, &pp->threads_per_worker))
        return refuse(st, "--threads-per-worker wants 0..4096", optarg);
      break;
    case OPT_LOGICAL: pp->use_logical_core = true; break;
    case OPT_NODE:
      if (parse_count(optarg, 0, 1 << 20, &pp->node_id)) return refuse(st, "--node-id wants a NUMA node number", optarg);
      break;
    case OPT_SYNTHETIC: tp->synthetic = optarg; break;
    case OPT_XML: tp->xml_path = optarg; break;
    case OPT_CPUS: tp->allowed_cpus = optarg; break;
    case OPT_QUOTA: {
      char *end;
      double q = strtod(optarg, &end);
      if (*optarg == '\0' || *end != '\0' || !(q >= 0 && q <= 1e6))
        return refuse(st, "--cpu-quota wants a number of CPUs", optarg);
      tp->cpu_quota = q > 0 ? q : -1; /* 0 on the command line: no quota */
      break;
    }
    case 'h': o->help = true; return INFERD_OK;
    case ':': return refuse(st, "missing value for", argv[optind - 1]);
    default: {
      char letter[3];
      return refuse(st, "unknown option", cli__refused_option(ch, argv, shorts, letter));
    }
    }
  }
  if (optind != argc) return refuse(st, "unexpected argument", argv[optind]);
  return INFERD_OK;
}

int cli_topo(int argc, char **argv) {
  cli__topo_options o;
  inferd_status st = {0};
  if (cli__topo_parse(argc, argv, &o, &st) != INFERD_OK) {
    fprintf(stderr, "inferd topo: %s\n", st.message);
    return 2;
  }
  if (o.help) {
    fputs(topo_usage_text, stdout);
    return 0;
  }
  topo *t = NULL;
  if (topo_new(&o.topo, &t, &st) != INFERD_OK) {
    fprintf(stderr, "inferd topo: %s\n", st.message);
    return cli_exit_status(st.code);
  }
  topo_plan *plan = NULL;
  if (topo_plan_new(t, &o.plan, &plan, &st) != INFERD_OK) {
    fprintf(stderr, "inferd topo: %s\n", st.message);
    topo_free(t);
    return cli_exit_status(st.code);
  }
  topo_print_machine(t, stdout);
  topo_print_plan(plan, stdout);
  topo_plan_free(plan);
  topo_free(t);
  return 0;
}
