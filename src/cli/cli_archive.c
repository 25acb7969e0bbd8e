/*
 * cli_archive.c - `inferd archive`: makes a TorchServe model archive, with
 * torch-model-archiver's flags.
 *
 *   inferd archive --model-name NAME --serialized-file MODEL.onnx --handler HANDLER
 *                  [--version V] [--export-path DIR] [--extra-files F1,F2,...]
 *                  [--config-file model-config.yaml]
 *                  [--archive-format default|zip-store|no-archive] [--force]
 *
 * Writes DIR/NAME.mar (or the directory DIR/NAME with no-archive) through
 * archive_write (src/archive/) and prints the path written. --version defaults to 1.0
 * and --export-path to the current directory, where torch-model-archiver requires
 * --version. The .onnx is stored in the zip rather than deflated (see archive_write.c:
 * weights hardly compress, and inflating them would slow every server start). A
 * --config-file is read as the server will read it (config_model_yaml_read_file), so
 * that a broken one is refused here rather than at registration. So is a model that keeps
 * its weights in files beside it (ONNX external data, as torch.onnx.export writes any
 * model over 2 GB) when the format is a .mar: the server reads those only from a model
 * directory (no-archive, with the files given as --extra-files) or beside a bare .onnx.
 * Any error, an existing archive without --force included, is one line on stderr and
 * exit status 2.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archive/archive.h"
#include "cli/cli_internal.h"
#include "config/config.h"
#include "handler/handler.h"
#include "onnx/onnx.h"

static void archive_usage(FILE *f) {
  fprintf(f,
          "usage: inferd archive --model-name NAME --serialized-file MODEL.onnx --handler HANDLER\n"
          "                      [--version V] [--export-path DIR] [--extra-files F1,F2,...]\n"
          "                      [--config-file FILE]\n"
          "                      [--archive-format default|zip-store|no-archive] [-f|--force]\n"
          "\n"
          "Makes NAME.mar (a TorchServe model archive: the model, the extra files and\n"
          "MAR-INF/MANIFEST.json) in DIR, as torch-model-archiver does.\n"
          "  --model-name NAME        the model's name: [A-Za-z0-9][A-Za-z0-9_.-]*\n"
          "  --serialized-file FILE   the ONNX model\n"
          "  --handler HANDLER        a built-in handler (image_classifier, tensor) or a handler\n"
          "                           file (archived; inferd serve runs only the built-in ones)\n"
          "  --version V              the model's version (default 1.0)\n"
          "  --export-path DIR        where to write (default: the current directory)\n"
          "  --extra-files LIST       comma-separated files or directories, e.g. index_to_name.json\n"
          "  --config-file FILE       a model-config.yaml (batchSize, maxBatchDelay, responseTimeout,\n"
          "                           minWorkers, maxWorkers), read by the server at registration\n"
          "  --archive-format FORMAT  default (.mar; the model stored, other files deflated),\n"
          "                           zip-store (.mar, all stored), no-archive (the directory DIR/NAME)\n"
          "  -f, --force              replace an existing archive\n");
}

/* Splits "a,b,,c" into its non-empty items (pointers into `list`, which is modified). */
static int split_commas(char *list, const char **items, int max) {
  int n = 0;
  for (char *save = NULL, *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    while (*item == ' ') item++;
    if (!*item) continue;
    if (n == max) return -1;
    items[n++] = item;
  }
  return n;
}

/* A refusal: one line that ends by pointing at --help. */
static inferd_code refuse(inferd_status *st, const char *fmt, const char *arg) {
  char what[INFERD_STATUS_MESSAGE_MAX];
  snprintf(what, sizeof what, fmt, arg);
  return core_fail(st, INFERD_INVALID_ARG, "%s (see inferd archive --help)", what);
}

void cli__archive_options_free(cli__archive_options *o) {
  free(o->extra_copy);
  o->extra_copy = NULL;
  o->write.extra_files = NULL;
  o->write.extra_file_count = 0;
}

inferd_code cli__archive_parse(int argc, char **argv, cli__archive_options *o, inferd_status *st) {
  enum { OPT_NAME = CLI__LONG_ONLY, OPT_SERIALIZED, OPT_HANDLER, OPT_EXPORT, OPT_EXTRA, OPT_FORMAT, OPT_CONFIG };
  static const char shorts[] = ":v:fh";
  static const struct option longs[] = {
      {"model-name", required_argument, 0, OPT_NAME},     {"serialized-file", required_argument, 0, OPT_SERIALIZED},
      {"handler", required_argument, 0, OPT_HANDLER},     {"version", required_argument, 0, 'v'},
      {"export-path", required_argument, 0, OPT_EXPORT},  {"extra-files", required_argument, 0, OPT_EXTRA},
      {"archive-format", required_argument, 0, OPT_FORMAT}, {"force", no_argument, 0, 'f'},
      {"config-file", required_argument, 0, OPT_CONFIG},
      {"help", no_argument, 0, 'h'},                      {0, 0, 0, 0},
  };
  memset(o, 0, sizeof *o);
  archive_write_params *w = &o->write;
  optind = 0; /* glibc: start afresh; 1 would go on inside an option cluster an earlier parse left */
  opterr = 0; /* our own one-line messages */
  int ch;
  while ((ch = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
    switch (ch) {
    case OPT_NAME: w->model_name = optarg; break;
    case OPT_SERIALIZED: w->serialized_file = optarg; break;
    case OPT_HANDLER: w->handler = optarg; break;
    case 'v': w->version = optarg; break;
    case OPT_EXPORT: w->export_path = optarg; break;
    case OPT_EXTRA: o->extra_list = optarg; break;
    case OPT_CONFIG: w->config_file = optarg; break;
    case 'f': w->force = true; break;
    case OPT_FORMAT:
      if (strcmp(optarg, "default") == 0) w->format = ARCHIVE_FORMAT_DEFAULT;
      else if (strcmp(optarg, "zip-store") == 0) w->format = ARCHIVE_FORMAT_ZIP_STORE;
      else if (strcmp(optarg, "no-archive") == 0) w->format = ARCHIVE_FORMAT_NO_ARCHIVE;
      else if (strcmp(optarg, "tgz") == 0) return refuse(st, "--archive-format %s is not supported", optarg);
      else return refuse(st, "unknown --archive-format '%s'", optarg);
      break;
    case 'h': o->help = true; return INFERD_OK;
    case ':': return refuse(st, "%s needs a value", argv[optind - 1]);
    default: {
      char letter[3];
      return refuse(st, "unknown option '%s'", cli__refused_option(ch, argv, shorts, letter));
    }
    }
  }
  if (optind < argc) return refuse(st, "unexpected argument '%s'", argv[optind]);
  if (!w->model_name) return refuse(st, "%s is required", "--model-name");
  if (!w->serialized_file) return refuse(st, "%s is required", "--serialized-file");
  if (!w->handler) return refuse(st, "%s is required", "--handler");
  if (o->extra_list) {
    if (!(o->extra_copy = strdup(o->extra_list))) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
    int n = split_commas(o->extra_copy, o->extras, CLI__MAX_EXTRA_FILES);
    if (n < 0) return refuse(st, "%s: too many files (256 at most)", "--extra-files");
    w->extra_files = o->extras;
    w->extra_file_count = n;
  }
  return INFERD_OK;
}

int cli_archive(int argc, char **argv) {
  cli__archive_options o;
  inferd_status st = {0};
  inferd_code rc = cli__archive_parse(argc, argv, &o, &st);
  if (rc != INFERD_OK || o.help) {
    cli__archive_options_free(&o);
    if (rc == INFERD_OK) archive_usage(stdout);
    else fprintf(stderr, "inferd archive: %s\n", st.message);
    return rc == INFERD_OK ? 0 : rc == INFERD_NO_MEMORY ? 1 : 2;
  }
  char written[4096], first[256];
  size_t external = 0;
  inferd_status ignored; /* a file that cannot be read: archive_write says so */
  if (o.write.format != ARCHIVE_FORMAT_NO_ARCHIVE &&
      onnx_file_external_count(o.write.serialized_file, &external, first, sizeof first, &ignored) == INFERD_OK &&
      external > 0)
    rc = core_fail(&st, INFERD_INVALID_ARG, "%s keeps %zu tensors in files beside it (ONNX external data, the first "
                   "in '%s'), which a .mar cannot serve: make a model directory (--archive-format no-archive, with "
                   "those files in --extra-files) or serve the .onnx itself", o.write.serialized_file, external, first);
  config_model_yaml yaml;
  if (rc == INFERD_OK && o.write.config_file) rc = config_model_yaml_read_file(o.write.config_file, &yaml, &st);
  if (rc == INFERD_OK) rc = archive_write(&o.write, written, sizeof written, &st);
  const char *handler = o.write.handler; /* from argv */
  cli__archive_options_free(&o);
  if (rc != INFERD_OK) {
    fprintf(stderr, "inferd archive: %s\n", st.message);
    /* whatever archive_write refuses comes from the command line or its files */
    return rc == INFERD_NO_MEMORY || rc == INFERD_INTERNAL ? 1 : 2;
  }
  /* torch-model-archiver's archives name any handler; one inferd does not serve is worth
   * a word before the server refuses it */
  if (!handler_served(handler))
    fprintf(stderr, "inferd archive: warning: inferd serves the handlers " HANDLER_SERVED ", not '%s': this archive "
                    "is for TorchServe, `inferd serve` refuses it\n", handler);
  printf("%s\n", written);
  return 0;
}
