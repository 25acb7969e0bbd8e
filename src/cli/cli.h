/*
 * cli.h - the `inferd` program's subcommands. Each takes argc/argv after the
 * subcommand name and returns the process exit status: 0 success, 2 bad input or
 * usage (with a one-line message on stderr), 1 any other failure.
 */
#ifndef INFERD_CLI_H
#define INFERD_CLI_H

#include "core/core.h"

int cli_run(int argc, char **argv);
int cli_archive(int argc, char **argv);
int cli_topo(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_bench(int argc, char **argv);

/* Exit status for a failed call: 2 when the input was at fault, 1 otherwise. */
static inline int cli_exit_status(inferd_code code) {
  switch (code) {
  case INFERD_OK: return 0;
  case INFERD_INVALID_ARG:
  case INFERD_NOT_FOUND:
  case INFERD_UNSUPPORTED:
  case INFERD_TOO_LARGE: return 2;
  default: return 1;
  }
}

#endif /* INFERD_CLI_H */
