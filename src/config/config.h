/*
 * config.h - the server's configuration: TorchServe's config.properties keys and the
 * `inferd serve` command line, both declared once in one table (config_table.c).
 *
 * Sources, lowest priority first (TorchServe's order):
 *   1. the defaults in the table (`inferd serve --help` prints them: config_help);
 *   2. the config file, in Java properties syntax (config_parse_file);
 *   3. the command line (config_parse_args);
 *   4. when enable_envvars_config=true: TS_<KEY> environment variables, as TorchServe's
 *      ConfigManager reads them (TS_JOB_QUEUE_SIZE=8 sets job_queue_size).
 * config_load runs all four and then config_finish, which fills the per-model values
 * of `models={...}` from the global keys and checks what spans several keys.
 *
 * A key this table does not declare is a warning that names it and its line, never
 * silently dropped; so is a TorchServe key that inferd does not use (vmargs, ...). A
 * value that does not parse or is out of range is an error naming key and line:
 *   "config.properties:4: job_queue_size: expected an integer in 1..10000000, got 'x'".
 *
 * Ownership: a config_server owns every string and array it points to; free them with
 * config_free. Threading: build one config on one thread, then share it read-only.
 */
#ifndef INFERD_CONFIG_H
#define INFERD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "inferd/inferd.h"

enum {
  CONFIG_HOST_MAX = 256,
  CONFIG_MAX_WORKERS = 256, /* workers per model: the scheduler's SCHED_MAX_WORKERS */
};

/* inference_address, management_address, metrics_address:
 * "http://127.0.0.1:8080", "https://0.0.0.0:8443", "http://[::1]:8080", "127.0.0.1:8080"
 * (no scheme: http), "http://localhost" (no port: TorchServe's for the key: inference 80,
 * management 8081, metrics 8082; https 443, 8444, 8445), "unix:/run/x.sock". */
typedef struct config_address {
  char scheme[8];              /* "http", "https" or "unix" */
  char host[CONFIG_HOST_MAX];  /* name or IP without brackets; the socket path for unix */
  int port;                    /* 0..65535 (0: the kernel picks one); 0 for unix */
} config_address;

/* One "name=path" or "path" item of load_models (or of --models). */
typedef struct config_load_model {
  char *name; /* NULL: use the name in the archive's manifest */
  char *path; /* as written: relative to model_store, or absolute */
} config_load_model;

typedef struct config_load_models {
  char *text;               /* the value as given; NULL when none */
  bool all;                 /* "all" (any case): every archive in model_store */
  config_load_model *items; /* count items, in the order given */
  int count;
} config_load_models;

/* One model version of models={"name": {"version": {...}}}. Before config_finish an
 * int field is -1 where the JSON did not give it; after, it holds the global key's
 * value (batch_size, max_batch_delay, default_response_timeout,
 * default_workers_per_model), but for precision, which has no global key. */
typedef struct config_model {
  char *name;              /* the model name (validated as TorchServe does) */
  char *version;           /* "1.0" */
  char *mar_name;          /* marName; NULL when absent */
  bool default_version;    /* defaultVersion */
  int batch_size;          /* batchSize */
  int max_batch_delay_ms;  /* maxBatchDelay, milliseconds */
  int response_timeout_s;  /* responseTimeout, seconds */
  int min_workers;         /* minWorkers; 0 = automatic (one per NUMA node) */
  int max_workers;         /* maxWorkers; 0 = automatic */
  int precision;           /* inferd only, "precision": "fp32" or "bf16" (an inferd_precision);
                              -1 when not given (then fp32), also after config_finish */
} config_model;

typedef struct config_models {
  char *json; /* the value as given; NULL when none */
  config_model *items;
  int count;
} config_models;

/* cpu_launcher_args, the arguments TorchServe passes to IPEX's launcher. */
typedef struct config_launcher {
  char *text;                /* the value as given; NULL when none */
  bool use_logical_core;     /* --use_logical_core: hyperthreads count as cores */
  int node_id;               /* --node_id N: only NUMA node N; -1 = all */
  int ninstances;            /* --ninstances N: workers; 0 = automatic */
  int ncores_per_instance;   /* --ncores_per_instance N; 0 = automatic */
} config_launcher;

/* Everything `inferd serve` is told. Defaults are in the table; see config_help. */
typedef struct config_server {
  config_address inference_address;  /* http://127.0.0.1:8080 */
  config_address management_address; /* http://127.0.0.1:8081 */
  config_address metrics_address;    /* http://127.0.0.1:8082 */
  char *model_store;                 /* NULL: none (only absolute paths load) */
  config_load_models load_models;
  config_models models;
  int default_workers_per_model;     /* 0 = automatic: one worker per NUMA node */
  int job_queue_size;                /* 100: queued requests per model before 503 */
  int number_of_netty_threads;       /* HTTP threads; 0 = automatic */
  bool cpu_launcher_enable;          /* false */
  config_launcher cpu_launcher_args;
  int64_t max_request_size;          /* 6553500 bytes */
  int64_t max_response_size;         /* 6553500 bytes */
  bool disable_token_authorization;  /* false: token auth is on */
  double token_expiration_min;       /* 60: minutes the inference and management keys
                                        live (from start, or from their /token renewal) */
  bool enable_model_api;             /* false: no register/unregister over HTTP */
  bool enable_envvars_config;        /* false */
  int default_response_timeout;      /* 120 seconds */
  int batch_size;                    /* 1: per-model default of batchSize */
  int max_batch_delay;               /* 100 milliseconds: default of maxBatchDelay */
  bool jpeg_dct_scaling;             /* false: decode JPEGs as PIL does, bit for bit
                                        (inferd's own key; see handler.h scaled_jpeg) */
  char *allowed_urls;                /* urls a model may be downloaded from (config_url_allowed) */
  char *cors_allowed_origin;         /* NULL: no Access-Control-Allow-Origin header */
  char *cors_allowed_methods;        /* NULL: no Access-Control-Allow-Methods header */
  char *cors_allowed_headers;        /* NULL: no Access-Control-Allow-Headers header */
  char *certificate_file;            /* PEM certificate (chain) of the https addresses; NULL: none */
  char *private_key_file;            /* PEM private key of that certificate; NULL: none */

  /* command line only */
  char *ts_config; /* --ts-config: the file that was read; NULL when none */
  bool foreground; /* --foreground */
  bool start;      /* --start */
  bool stop;       /* --stop */
  bool help;       /* --help / -h: the caller prints config_help and exits */

  /* one line each: "config.properties:7: unknown key 'foo' (ignored)" */
  char **warnings;
  int warning_count;
} config_server;

/* Sets every field to its default (frees nothing: use on a zeroed or freed config). */
void config_defaults(config_server *cfg);
/* Frees what cfg owns and zeroes it. */
void config_free(config_server *cfg);

/* Reads a config file (Java properties syntax: key=value, key: value or key value;
 * comments from # or !; a line ending in \ continues on the next; escapes \t \n \r \f
 * \uXXXX and \c for c) onto cfg. Unknown keys become warnings; a bad value is an error
 * naming the file, line and key. Files above 16 MiB are refused. */
inferd_code config_parse_file(config_server *cfg, const char *path, inferd_status *status);
/* The same on text in memory (need not be NUL-terminated); `source` names it in
 * messages. */
inferd_code config_parse_text(config_server *cfg, const char *text, size_t size, const char *source,
                              inferd_status *status);

/* Applies the command line onto cfg: argv[0] is the command's name and is skipped
 * (as the cli_* functions get it). Flags: --ts-config FILE, --model-store DIR,
 * --models NAME=FILE ... | all, --disable-token-auth, --enable-model-api, --foreground,
 * --start, --stop, --help; "--flag=value" works too (and is the only way to give a value
 * that starts with "--": a flag followed by another option has no value). Anything else
 * is an error. */
inferd_code config_parse_args(config_server *cfg, int argc, char **argv, inferd_status *status);

/* Fills per-model values from the global keys and checks what spans keys (--start
 * with --stop, minWorkers above maxWorkers, two default versions of one model). */
inferd_code config_finish(config_server *cfg, inferd_status *status);

/* The whole load: defaults, the file, the command line, TS_* variables, config_finish.
 * The file is `file` when not NULL, else as TorchServe finds it: $TS_CONFIG_FILE, then
 * --ts-config, then ./config.properties if it exists (none is fine: defaults). Warnings
 * are kept in cfg->warnings and also logged. With --help only the flags are read (a
 * broken file must not hide the help). On failure cfg is freed. argv[0] is the
 * command's name ("serve"). */
inferd_code config_load(const char *file, int argc, char **argv, config_server *cfg,
                        inferd_status *status);

/* Writes every key with its flag, default and meaning (the table, as `--help`). */
void config_help(FILE *out);
/* Writes cfg as a config.properties that config_parse_text reads back to the same, but
 * for a value holding $$NAME$$ (from a flag): a file's $$NAME$$ is the environment
 * variable NAME, as in TorchServe, which has no escape for it. */
void config_write(const config_server *cfg, FILE *out);

/* The entry of models={...} for name/version, or NULL. version NULL: the entry marked
 * defaultVersion, else the only one. */
const config_model *config_find_model(const config_server *cfg, const char *name, const char *version);

/* ---- model-config.yaml ------------------------------------------------------------------
 * The file a .mar's manifest names as configFile (torch-model-archiver --config-file):
 * TorchServe's frontend reads minWorkers, maxWorkers, batchSize, maxBatchDelay and
 * responseTimeout from its top-level mapping, and leaves the rest (the `handler:`
 * section, deviceType, ...) to the handler. inferd reads the same five keys with the
 * ranges of models={...}; each must be a plain integer. It also reads its own key
 * `precision: fp32` or `bf16` (inferd_precision). Other top-level keys are listed
 * in `ignored` (but `handler`, the handler's own section), never expanded or resolved
 * (aliases are not followed). Refused, with the file's line: invalid YAML, a top level
 * that is not a mapping, more than one document, one of the six keys twice, one of the
 * five not a decimal integer in range (010, which YAML 1.1 reads as 8, too), a
 * precision other than fp32 or bf16, a file above 1 MiB.
 * A key given as 0 counts as not given, as in TorchServe (maxBatchDelay: 0 leaves the
 * delay to models={...} and the global key). An empty file or document gives nothing. The workers are taken only as TorchServe
 * takes them (0 < minWorkers <= maxWorkers): the registry's rule, not this reader's. */
typedef struct config_model_yaml {
  config_model values; /* name, version, mar_name NULL; an int -1 where the file gives none */
  char ignored[256];   /* "deviceType, parallelType" ("..." when cut); "" when none */
} config_model_yaml;

enum { CONFIG_MODEL_YAML_MAX_BYTES = 1 << 20 };

/* Every value "not given": what a model without a model-config.yaml has. */
#define CONFIG_MODEL_YAML_NONE                                                                              \
  ((config_model_yaml){.values = {.batch_size = -1, .max_batch_delay_ms = -1, .response_timeout_s = -1,    \
                                  .min_workers = -1, .max_workers = -1, .precision = -1}})

/* Parses `text` (need not be NUL-terminated); `source` names it in messages:
 * "model-config.yaml: line 3: batchSize: expected an integer in 1..1024, got 'eight'". */
inferd_code config_model_yaml_parse(const void *text, size_t size, const char *source, config_model_yaml *out,
                                    inferd_status *status);
/* The same on a file; the path names it in messages. */
inferd_code config_model_yaml_read_file(const char *path, config_model_yaml *out, inferd_status *status);

/* "fp32" or "bf16" (exactly `len` bytes) as an inferd_precision; false for anything else. */
bool config_precision_parse(const char *text, size_t len, int *out);
const char *config_precision_name(int precision); /* "fp32", "bf16" */

/* True when `name` is a valid model name: [A-Za-z0-9][A-Za-z0-9_.-]* (TorchServe's
 * rule; names go into URLs). */
bool config_valid_model_name(const char *name);

/* True when one of `patterns` (allowed_urls: comma-separated POSIX extended regular
 * expressions, as TorchServe's Java ones for its default "file://.*|http(s)?://.*"; a
 * ',' always separates two, as TorchServe splits the key) matches the whole url, in any
 * case, as TorchServe's ArchiveUtils.validateURL asks.
 * NULL patterns allow nothing. */
bool config_url_allowed(const char *patterns, const char *url);

#endif /* INFERD_CONFIG_H */
