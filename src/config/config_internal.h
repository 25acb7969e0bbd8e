/*
 * config_internal.h - what the files of src/config share and nobody else includes:
 * the option table's row type, the per-type setters and the properties lexer.
 */
#ifndef INFERD_CONFIG_INTERNAL_H
#define INFERD_CONFIG_INTERNAL_H

#include <stdarg.h>

#include "config/config.h"

/* Where a value came from, for messages: "config.properties:4", "--models",
 * "TS_JOB_QUEUE_SIZE", "default". */
typedef struct config__where {
  const char *source;
  int line;               /* 1-based line of the key in a file; 0 otherwise */
  const int *value_lines; /* the file line of each byte of the value, or NULL */
} config__where;

typedef enum config__type {
  CONFIG_T_INT,         /* int, min..max */
  CONFIG_T_SIZE,        /* int64_t bytes, min..max */
  CONFIG_T_NUMBER,      /* double, decimal (fractions allowed), above min, at most max */
  CONFIG_T_BOOL,        /* true/false, any case */
  CONFIG_T_STRING,      /* char *, owned; empty = NULL */
  CONFIG_T_ADDRESS,     /* config_address */
  CONFIG_T_LOAD_MODELS, /* config_load_models */
  CONFIG_T_MODELS,      /* config_models (JSON) */
  CONFIG_T_LAUNCHER,    /* config_launcher (cpu_launcher_args) */
  CONFIG_T_URLS,        /* char *, owned: comma-separated regular expressions (allowed_urls); "" allows none */
  CONFIG_T_IGNORED,     /* a TorchServe key inferd does not use: a warning */
  CONFIG_T_COUNT
} config__type;

enum {
  CONFIG_F_MULTI = 1 << 0, /* the flag takes one or more arguments, joined with ',' */
};

/* One row of the table (config_table.c). */
typedef struct config__option {
  const char *name;          /* config.properties key; NULL for command-line-only rows */
  const char *flag;          /* command-line flag; NULL when the key has none */
  const char *metavar;       /* the flag's argument in help ("DIR"); NULL for bools */
  config__type type;
  unsigned flags;            /* CONFIG_F_* */
  size_t offset;             /* of the target field in config_server */
  int64_t min, max;          /* CONFIG_T_INT / CONFIG_T_SIZE */
  const char *default_value; /* text parsed by the row's setter; NULL = unset */
  const char *help;          /* for CONFIG_T_IGNORED: why inferd ignores it */
} config__option;

/* Formats "source:line: key: " (or "source: key: ") + message into status. */
inferd_code config__fail(inferd_status *st, inferd_code code, const config__where *w, const char *key,
                         const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Appends a warning line to cfg->warnings (bounded; the overflow is counted in one). */
void config__warn(config_server *cfg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reads the regular file `path` of at most `max` bytes (`what` names such a file in
 * the message: "a config file") into *text, which the caller frees. */
inferd_code config__read_file(const char *path, size_t max, const char *what, char **text, size_t *size,
                              inferd_status *status);

/* The structured setters (config_values.c). Each parses `value` (NUL-terminated,
 * already trimmed) into a new value and replaces *out only on success. */
inferd_code config__set_address(config_address *out, const char *key, const char *value,
                                const config__where *w, inferd_status *st);
inferd_code config__set_load_models(config_server *cfg, config_load_models *out, const char *key, const char *value,
                                    const config__where *w, inferd_status *st);
inferd_code config__set_models(config_server *cfg, config_models *out, const char *key, const char *value,
                               const config__where *w, inferd_status *st);
inferd_code config__set_launcher(config_server *cfg, config_launcher *out, const char *key,
                                 const char *value, const config__where *w, inferd_status *st);
inferd_code config__set_url_patterns(char **out, const char *key, const char *value, const config__where *w,
                                     inferd_status *st);
/* The int field of m that models={...} and model-config.yaml call `name` ("batchSize"),
 * with the range of the global key it shares (batch_size's 1..1024); NULL for a name
 * that is not one of them. */
int *config__model_field(config_model *m, const char *name, int64_t *min, int64_t *max);
void config__free_load_models(config_load_models *v);
void config__free_models(config_models *v);
void config__free_launcher(config_launcher *v);
/* Fills the -1 fields of every model from the global keys; checks defaultVersion. */
inferd_code config__finish_models(config_server *cfg, inferd_status *st);

/* The properties lexer (config_properties.c): calls `entry` once per key/value pair in
 * file order. key and value are NUL-terminated, escapes resolved; value_lines[i] is the
 * line of value byte i. Stops at the first error (a bad escape, a NUL byte) or when
 * `entry` fails. */
typedef inferd_code (*config__entry_fn)(void *ctx, const char *key, const char *value, size_t value_size,
                                        const int *value_lines, int line, inferd_status *st);
inferd_code config__properties_parse(const char *text, size_t size, const char *source,
                                     config__entry_fn entry, void *ctx, inferd_status *st);

/* Parses a whole decimal integer in min..max (leading +/- allowed, nothing else). */
bool config__parse_int64(const char *s, int64_t min, int64_t max, int64_t *out);

#endif /* INFERD_CONFIG_INTERNAL_H */
