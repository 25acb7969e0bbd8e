/*
 * cli_main.c - the one `inferd` binary: dispatches to its subcommands.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const struct {
  const char *name;
  int (*fn)(int argc, char **argv);
  const char *help;
} commands[] = {
    {"serve", cli_serve, "serve models over HTTP with TorchServe's APIs (inference, management, metrics)"},
    {"run", cli_run, "run one model on a .npy batch, or benchmark it (--bench)"},
    {"archive", cli_archive, "make a TorchServe model archive (.mar) from an ONNX model"},
    {"bench", cli_bench, "load-test a server, or run N independent classification jobs (the decentralized baseline)"},
    {"topo", cli_topo, "show the machine's cores and NUMA nodes and the workers' placement plan"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: inferd <command> [options]\n\ncommands:\n");
  for (size_t i = 0; i < CORE_ARRAY_LEN(commands); i++) fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "\n`inferd <command> --help` describes a command.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  for (size_t i = 0; i < CORE_ARRAY_LEN(commands); i++)
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
  inferd_status st; /* core_fail keeps it one line, whatever argv[1] holds */
  core_fail(&st, INFERD_INVALID_ARG, "unknown command '%s' (try inferd --help)", argv[1]);
  fprintf(stderr, "inferd: %s\n", st.message);
  return 2;
}
