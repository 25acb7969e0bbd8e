/*
 * config_table.c - every setting of `inferd serve` as one row of one table, and
 * everything derived from it: the defaults, the config.properties reader, the
 * command-line flags, the TS_* environment overrides, `--help` and config_write.
 *
 * DESIGN
 * A row (config__option) names a config.properties key and/or a command-line flag, the
 * type of its value, the config_server field it sets (by offset), its range and its
 * default as text. The default goes through the same setter as a value from a file, so
 * there is one parser per type (types[] below, sized CONFIG_T_COUNT) and the text shown
 * by --help is the text that sets the default. TorchServe keys and `torchserve` flags
 * that mean nothing to inferd are rows of type CONFIG_T_IGNORED: they are accepted with
 * a warning that says why, so that a TorchServe user's file and command line work
 * unchanged and nothing is dropped silently (an ignored flag with a metavar still
 * takes its value).
 *
 * Invariants: a setter replaces its field only when the whole value is valid; scalar
 * values are trimmed of surrounding blanks first (Java keeps trailing blanks and then
 * fails on "100 "); a key set twice in one file warns, and the later line wins.
 */
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config_internal.h"
#include "core/core.h"

#define AT(field) offsetof(config_server, field)
#define IGNORED(key, why) {key, NULL, NULL, CONFIG_T_IGNORED, 0, 0, 0, 0, NULL, why}
#define IGNORED_FLAG(flag, metavar, why) {NULL, flag, metavar, CONFIG_T_IGNORED, 0, 0, 0, 0, NULL, why}

static const config__option options[] = {
    /* name, flag, metavar, type, flags, offset, min, max, default, help */
    {"inference_address", NULL, NULL, CONFIG_T_ADDRESS, 0, AT(inference_address), 0, 0, "http://127.0.0.1:8080",
     "inference API: /ping, /predictions/{model}, /v2 (KServe)"},
    {"management_address", NULL, NULL, CONFIG_T_ADDRESS, 0, AT(management_address), 0, 0, "http://127.0.0.1:8081",
     "management API: /models"},
    {"metrics_address", NULL, NULL, CONFIG_T_ADDRESS, 0, AT(metrics_address), 0, 0, "http://127.0.0.1:8082",
     "metrics API: /metrics (Prometheus text)"},
    {"model_store", "--model-store", "DIR", CONFIG_T_STRING, 0, AT(model_store), 0, 0, NULL,
     "directory of models: .mar archives, unpacked archive directories, bare .onnx files"},
    {"load_models", "--models", "NAME=FILE...", CONFIG_T_LOAD_MODELS, CONFIG_F_MULTI, AT(load_models), 0, 0, NULL,
     "models to load at start: all, or FILE / NAME=FILE items (comma-separated in the file, "
     "space-separated after --models), relative to model_store"},
    {"models", NULL, NULL, CONFIG_T_MODELS, 0, AT(models), 0, 0, NULL,
     "per-model settings, JSON: {\"NAME\": {\"VERSION\": {\"marName\", \"batchSize\", \"maxBatchDelay\", "
     "\"responseTimeout\", \"minWorkers\", \"maxWorkers\", \"defaultVersion\", \"precision\" (inferd only: "
     "\"fp32\" or \"bf16\")}}}"},
    {"default_workers_per_model", NULL, NULL, CONFIG_T_INT, 0, AT(default_workers_per_model), 0, CONFIG_MAX_WORKERS, "0",
     "workers per model (0: automatic, one per NUMA node on its physical cores)"},
    {"job_queue_size", NULL, NULL, CONFIG_T_INT, 0, AT(job_queue_size), 1, 10000000, "100",
     "requests queued per model; more are answered 503 at once"},
    {"number_of_netty_threads", NULL, NULL, CONFIG_T_INT, 0, AT(number_of_netty_threads), 0, 1024, "0",
     "HTTP threads (0: automatic)"},
    {"cpu_launcher_enable", NULL, NULL, CONFIG_T_BOOL, 0, AT(cpu_launcher_enable), 0, 0, "false",
     "apply cpu_launcher_args to worker placement (TorchServe's IPEX launcher switch)"},
    {"cpu_launcher_args", NULL, NULL, CONFIG_T_LAUNCHER, 0, AT(cpu_launcher_args), 0, 0, NULL,
     "--use_logical_core, --node_id N, --ninstances N, --ncores_per_instance N (other launcher options: warned)"},
    {"max_request_size", NULL, NULL, CONFIG_T_SIZE, 0, AT(max_request_size), 1, INT32_MAX, "6553500",
     "largest request body in bytes; larger requests get 413"},
    {"max_response_size", NULL, NULL, CONFIG_T_SIZE, 0, AT(max_response_size), 1, INT32_MAX, "6553500",
     "largest response body with model output in bytes (/predictions, v2 infer); larger ones get 500"},
    {"disable_token_authorization", "--disable-token-auth", NULL, CONFIG_T_BOOL, 0, AT(disable_token_authorization), 0,
     0, "false", "serve without token authorization (by default keys are written to key_file.json)"},
    {"token_expiration_min", NULL, NULL, CONFIG_T_NUMBER, 0, AT(token_expiration_min), 0, 525600, "60",
     "minutes until the inference and management keys of key_file.json expire (fractions allowed; "
     "GET /token renews a key for as long again)"},
    {"enable_model_api", "--enable-model-api", NULL, CONFIG_T_BOOL, 0, AT(enable_model_api), 0, 0, "false",
     "allow registering and unregistering models through the management API"},
    {"enable_envvars_config", NULL, NULL, CONFIG_T_BOOL, 0, AT(enable_envvars_config), 0, 0, "false",
     "let TS_<KEY> environment variables set keys (TS_JOB_QUEUE_SIZE=8; token_expiration_min is "
     "TS_TOKEN_EXPIRATION_TIME_MIN, as in TorchServe), above the file and flags"},
    {"default_response_timeout", NULL, NULL, CONFIG_T_INT, 0, AT(default_response_timeout), 1, 86400, "120",
     "seconds a request may wait for its answer before 504 (default of responseTimeout)"},
    {"batch_size", NULL, NULL, CONFIG_T_INT, 0, AT(batch_size), 1, 1024, "1",
     "largest batch the batcher forms (default of batchSize)"},
    {"max_batch_delay", NULL, NULL, CONFIG_T_INT, 0, AT(max_batch_delay), 0, 600000, "100",
     "milliseconds a request may wait for its batch to fill (default of maxBatchDelay)"},
    {"jpeg_dct_scaling", NULL, NULL, CONFIG_T_BOOL, 0, AT(jpeg_dct_scaling), 0, 0, "false",
     "inferd only: decode JPEGs of 1536 pixels and more on the shorter side at a reduced size (libjpeg's DCT "
     "scaling; about twice as fast on photos, but pixels differ from PIL's by a few 1/255, which can reorder "
     "close classes)"},
    {"allowed_urls", NULL, NULL, CONFIG_T_URLS, 0, AT(allowed_urls), 0, 0, "file://.*|http(s)?://.*",
     "urls POST /models may download an archive from: comma-separated regular expressions (POSIX extended), one "
     "of which must match the whole url, in any case; only http:// and https:// urls are downloaded"},
    {"cors_allowed_origin", NULL, NULL, CONFIG_T_STRING, 0, AT(cors_allowed_origin), 0, 0, NULL,
     "Access-Control-Allow-Origin of every response (e.g. * or https://app.example), as TorchServe; a CORS "
     "preflight (OPTIONS with Origin and Access-Control-Request-Method) is then answered 200"},
    {"cors_allowed_methods", NULL, NULL, CONFIG_T_STRING, 0, AT(cors_allowed_methods), 0, 0, NULL,
     "Access-Control-Allow-Methods of every response (e.g. GET, POST, PUT, OPTIONS)"},
    {"certificate_file", NULL, NULL, CONFIG_T_STRING, 0, AT(certificate_file), 0, 0, NULL,
     "PEM certificate (with its chain) that the https addresses present, as TorchServe's"},
    {"private_key_file", NULL, NULL, CONFIG_T_STRING, 0, AT(private_key_file), 0, 0, NULL,
     "PEM private key of certificate_file (not encrypted), as TorchServe's"},
    {"cors_allowed_headers", NULL, NULL, CONFIG_T_STRING, 0, AT(cors_allowed_headers), 0, 0, NULL,
     "Access-Control-Allow-Headers of every response (list Authorization when token auth is on)"},

    /* command line only */
    {NULL, "--ts-config", "FILE", CONFIG_T_STRING, 0, AT(ts_config), 0, 0, NULL,
     "config file; $TS_CONFIG_FILE, when set, is read instead (as TorchServe does); neither: ./config.properties "
     "when present"},
    {NULL, "--foreground", NULL, CONFIG_T_BOOL, 0, AT(foreground), 0, 0, "false", "stay in the foreground"},
    {NULL, "--start", NULL, CONFIG_T_BOOL, 0, AT(start), 0, 0, "false", "start in the background (pid file)"},
    {NULL, "--stop", NULL, CONFIG_T_BOOL, 0, AT(stop), 0, 0, "false", "stop the server started with --start"},
    {NULL, "--help", NULL, CONFIG_T_BOOL, 0, AT(help), 0, 0, "false", "this text"},

    /* TorchServe keys that have no meaning here */
    IGNORED("vmargs", "JVM options"),
    IGNORED("async_logging", "logging is synchronous, one line per event"),
    IGNORED("number_of_gpu", "inferd runs on CPUs"),
    IGNORED("netty_client_threads", "no backend processes"),
    IGNORED("install_py_dep_per_model", "no Python handlers"),
    IGNORED("decode_input_request", "no Python handlers"),
    IGNORED("blacklist_env_vars", "no Python handlers"),
    IGNORED("prefer_direct_buffer", "JVM option"),
    IGNORED("unregister_model_timeout", "unregistering drains the model's queue"),
    IGNORED("grpc_inference_port", "no gRPC API"),
    IGNORED("grpc_management_port", "no gRPC API"),
    IGNORED("enable_grpc_ssl", "no gRPC API"),
    IGNORED("metrics_mode", "metrics are served by the metrics API only"),
    IGNORED("metrics_format", "metrics are Prometheus text"),
    IGNORED("enable_metrics_api", "the metrics API is always on"),
    IGNORED("model_snapshot", "no snapshots"),
    IGNORED("snapshot_store", "no snapshots"),
    {"workflow_store", "--workflow-store", "DIR", CONFIG_T_IGNORED, 0, 0, 0, 0, NULL, "no workflows"},
    IGNORED("default_service_handler", "the handler comes from the archive"),
    IGNORED("model_server_home", "not needed"),
    IGNORED("initial_worker_port", "workers are threads"),
    IGNORED("use_native_io", "JVM option"),
    IGNORED("io_ratio", "JVM option"),
    IGNORED("metric_time_interval", "no system metrics collector"),
    IGNORED("disable_system_metrics", "no system metrics collector"),
    IGNORED("system_metrics_cmd", "no system metrics collector"),
    IGNORED("metrics_config", "the metrics are inferd's own and TorchServe's three legacy counters"),
    IGNORED("plugins_path", "no Java plugins"),
    IGNORED("ipex_enable", "no PyTorch: the engine compiles the ONNX graph to oneDNN itself"),
    IGNORED("use_env_allowed_urls", "set allowed_urls in the file, or TS_ALLOWED_URLS with enable_envvars_config"),
    IGNORED("limit_max_image_pixels", "images above 179 megapixels (PIL's limit; an interlaced PNG above 64) are always refused"),
    IGNORED("keystore", "a Java KeyStore: give https addresses certificate_file and private_key_file (PEM)"),
    IGNORED("keystore_pass", "a Java KeyStore: give https addresses certificate_file and private_key_file (PEM)"),
    IGNORED("keystore_type", "a Java KeyStore: give https addresses certificate_file and private_key_file (PEM)"),
    IGNORED("service_envelope", "no envelopes: the KServe v2 API is served natively at /v2"),

    /* `torchserve` flags that have no meaning here (its quick start passes --ncs) */
    IGNORED_FLAG("--ncs", NULL, "no config snapshots are written"),
    IGNORED_FLAG("--no-config-snapshots", NULL, "no config snapshots are written"),
    IGNORED_FLAG("--log-config", "FILE", "logging is one line per event on stderr, not log4j2"),
    IGNORED_FLAG("--plugins-path", "DIR", "no Java plugins"),
};

/* ==== the types: one setter, release and text form each ================================ */

typedef struct type_ops {
  const char *name; /* in --help */
  inferd_code (*set)(config_server *cfg, const config__option *opt, void *field, const char *value,
                     const config__where *w, inferd_status *st);
  void (*release)(void *field);
  /* the value as config.properties text (unescaped), or NULL when unset */
  const char *(*text)(const void *field, char *buf, size_t size);
} type_ops;

static const char *key_of(const config__option *opt) { return opt->name ? opt->name : opt->flag; }

static inferd_code set_int(config_server *cfg, const config__option *opt, void *field, const char *value,
                           const config__where *w, inferd_status *st) {
  int64_t v;
  if (!config__parse_int64(value, opt->min, opt->max, &v))
    return config__fail(st, INFERD_INVALID_ARG, w, key_of(opt), "expected an integer in %lld..%lld, got '%s'",
                        (long long)opt->min, (long long)opt->max, value);
  if (opt->type == CONFIG_T_INT)
    *(int *)field = (int)v;
  else
    *(int64_t *)field = v;
  return INFERD_OK;
}

static const char *text_int(const void *field, char *buf, size_t size) {
  snprintf(buf, size, "%d", *(const int *)field);
  return buf;
}

static const char *text_size(const void *field, char *buf, size_t size) {
  snprintf(buf, size, "%lld", (long long)*(const int64_t *)field);
  return buf;
}

/* A decimal number as Java's Double.valueOf reads it for TorchServe ("30", "0.5", "1e3"),
 * without its hexadecimal, NaN and Infinity forms, above opt->min and at most opt->max. */
static inferd_code set_number(config_server *cfg, const config__option *opt, void *field, const char *value,
                              const config__where *w, inferd_status *st) {
  char *end = NULL;
  errno = 0;
  double v = *value && !strpbrk(value, "xXnNiI") ? strtod(value, &end) : 0;
  if (!end || *end || errno || !(v > (double)opt->min && v <= (double)opt->max))
    return config__fail(st, INFERD_INVALID_ARG, w, key_of(opt), "expected a number above %lld and at most %lld, got '%s'",
                        (long long)opt->min, (long long)opt->max, value);
  *(double *)field = v;
  return INFERD_OK;
}

static const char *text_number(const void *field, char *buf, size_t size) {
  snprintf(buf, size, "%.17g", *(const double *)field);
  return buf;
}

static inferd_code set_bool(config_server *cfg, const config__option *opt, void *field, const char *value,
                            const config__where *w, inferd_status *st) {
  if (strcasecmp(value, "true") == 0)
    *(bool *)field = true;
  else if (strcasecmp(value, "false") == 0)
    *(bool *)field = false;
  else
    return config__fail(st, INFERD_INVALID_ARG, w, key_of(opt), "expected true or false, got '%s'", value);
  return INFERD_OK;
}

static const char *text_bool(const void *field, char *buf, size_t size) {
  return *(const bool *)field ? "true" : "false";
}

static inferd_code set_string(config_server *cfg, const config__option *opt, void *field, const char *value,
                              const config__where *w, inferd_status *st) {
  char *copy = NULL;
  if (*value && !(copy = strdup(value))) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  free(*(char **)field);
  *(char **)field = copy;
  return INFERD_OK;
}

static void release_string(void *field) {
  free(*(char **)field);
  *(char **)field = NULL;
}

static const char *text_string(const void *field, char *buf, size_t size) { return *(char *const *)field; }

static inferd_code set_address(config_server *cfg, const config__option *opt, void *field, const char *value,
                               const config__where *w, inferd_status *st) {
  return config__set_address(field, key_of(opt), value, w, st);
}

static const char *text_address(const void *field, char *buf, size_t size) {
  const config_address *a = field;
  if (strcmp(a->scheme, "unix") == 0)
    snprintf(buf, size, "unix:%s", a->host);
  else
    snprintf(buf, size, strchr(a->host, ':') ? "%s://[%s]:%d" : "%s://%s:%d", a->scheme, a->host, a->port);
  return buf;
}

static inferd_code set_load_models(config_server *cfg, const config__option *opt, void *field, const char *value,
                                   const config__where *w, inferd_status *st) {
  return config__set_load_models(cfg, field, key_of(opt), value, w, st);
}

static void release_load_models(void *field) { config__free_load_models(field); }
static const char *text_load_models(const void *field, char *buf, size_t size) {
  return ((const config_load_models *)field)->text;
}

static inferd_code set_models(config_server *cfg, const config__option *opt, void *field, const char *value,
                              const config__where *w, inferd_status *st) {
  return config__set_models(cfg, field, key_of(opt), value, w, st);
}

static void release_models(void *field) { config__free_models(field); }
static const char *text_models(const void *field, char *buf, size_t size) { return ((const config_models *)field)->json; }

static inferd_code set_launcher(config_server *cfg, const config__option *opt, void *field, const char *value,
                                const config__where *w, inferd_status *st) {
  return config__set_launcher(cfg, field, key_of(opt), value, w, st);
}

static void release_launcher(void *field) { config__free_launcher(field); }
static const char *text_launcher(const void *field, char *buf, size_t size) {
  return ((const config_launcher *)field)->text;
}

static inferd_code set_url_patterns(config_server *cfg, const config__option *opt, void *field, const char *value,
                                   const config__where *w, inferd_status *st) {
  return config__set_url_patterns(field, key_of(opt), value, w, st);
}

static inferd_code set_ignored(config_server *cfg, const config__option *opt, void *field, const char *value,
                               const config__where *w, inferd_status *st) {
  if (opt->flag && strcmp(w->source, opt->flag) == 0) /* from the command line */
    config__warn(cfg, "'%s' is a TorchServe flag inferd does not use: %s (ignored)", opt->flag, opt->help);
  else if (w->line)
    config__warn(cfg, "%s:%d: '%s' is a TorchServe key inferd does not use: %s (ignored)", w->source, w->line,
                 opt->name, opt->help);
  else
    config__warn(cfg, "%s: '%s' is a TorchServe key inferd does not use: %s (ignored)", w->source, opt->name,
                 opt->help);
  return INFERD_OK;
}

static const type_ops types[] = {
    [CONFIG_T_INT] = {"integer", set_int, NULL, text_int},
    [CONFIG_T_SIZE] = {"bytes", set_int, NULL, text_size},
    [CONFIG_T_NUMBER] = {"number", set_number, NULL, text_number},
    [CONFIG_T_BOOL] = {"true|false", set_bool, NULL, text_bool},
    [CONFIG_T_STRING] = {"text", set_string, release_string, text_string},
    [CONFIG_T_ADDRESS] = {"address", set_address, NULL, text_address},
    [CONFIG_T_LOAD_MODELS] = {"list", set_load_models, release_load_models, text_load_models},
    [CONFIG_T_MODELS] = {"JSON", set_models, release_models, text_models},
    [CONFIG_T_LAUNCHER] = {"arguments", set_launcher, release_launcher, text_launcher},
    [CONFIG_T_URLS] = {"patterns", set_url_patterns, release_string, text_string},
    [CONFIG_T_IGNORED] = {"ignored", set_ignored, NULL, NULL},
};
_Static_assert(CORE_ARRAY_LEN(types) == CONFIG_T_COUNT, "one type_ops per config__type");

/* ==== messages ========================================================================== */

inferd_code config__fail(inferd_status *st, inferd_code code, const config__where *w, const char *key,
                         const char *fmt, ...) {
  char what[INFERD_STATUS_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (w->line)
    return core_fail(st, code, "%s:%d: %s: %s", w->source, w->line, key, what);
  if (strcmp(w->source, key) == 0) return core_fail(st, code, "%s: %s", key, what);
  return core_fail(st, code, "%s: %s: %s", w->source, key, what);
}

enum { MAX_WARNINGS = 200 };

void config__warn(config_server *cfg, const char *fmt, ...) {
  if (cfg->warning_count > MAX_WARNINGS) return;
  char *line = NULL;
  if (cfg->warning_count == MAX_WARNINGS) {
    line = strdup("more warnings follow; only the first 200 are kept");
  } else {
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&line, fmt, ap) < 0) line = NULL;
    va_end(ap);
  }
  char **grown = line ? realloc(cfg->warnings, (size_t)(cfg->warning_count + 1) * sizeof *grown) : NULL;
  if (!grown) {
    free(line);
    return;
  }
  for (char *p = line; *p; p++) /* one line each, whatever the key held */
    if (*p == '\n' || *p == '\r') *p = ' ';
  cfg->warnings = grown;
  cfg->warnings[cfg->warning_count++] = line;
}

/* ==== lookup and setting ================================================================ */

const config__option *config__find_option(const char *name) {
  for (size_t i = 0; i < CORE_ARRAY_LEN(options); i++)
    if (options[i].name && strcmp(options[i].name, name) == 0) return &options[i];
  return NULL;
}

static const config__option *find_flag(const char *flag, size_t len) {
  for (size_t i = 0; i < CORE_ARRAY_LEN(options); i++)
    if (options[i].flag && strlen(options[i].flag) == len && strncmp(options[i].flag, flag, len) == 0)
      return &options[i];
  return NULL;
}

/* Sets one option from text: trims surrounding blanks, then the type's setter. */
static inferd_code set_option(config_server *cfg, const config__option *opt, const char *value,
                              const config__where *w, inferd_status *st) {
  size_t begin = 0, end = strlen(value);
  while (begin < end && isspace((unsigned char)value[begin])) begin++;
  while (end > begin && isspace((unsigned char)value[end - 1])) end--;
  char *trimmed = strndup(value + begin, end - begin);
  if (!trimmed) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  config__where at = *w;
  if (at.value_lines) at.value_lines += begin;
  inferd_code rc = types[opt->type].set(cfg, opt, (char *)cfg + opt->offset, trimmed, &at, st);
  free(trimmed);
  return rc;
}

void config_defaults(config_server *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->cpu_launcher_args.node_id = -1;
  const config__where w = {"default", 0, NULL};
  for (size_t i = 0; i < CORE_ARRAY_LEN(options); i++) {
    if (!options[i].default_value || options[i].type == CONFIG_T_IGNORED) continue;
    inferd_status st;
    inferd_code rc = set_option(cfg, &options[i], options[i].default_value, &w, &st);
    assert(rc == INFERD_OK && "every default in the table parses (and none allocates)");
    (void)rc;
  }
}

void config_free(config_server *cfg) {
  for (size_t i = 0; i < CORE_ARRAY_LEN(options); i++)
    if (types[options[i].type].release) types[options[i].type].release((char *)cfg + options[i].offset);
  for (int i = 0; i < cfg->warning_count; i++) free(cfg->warnings[i]);
  free(cfg->warnings);
  memset(cfg, 0, sizeof *cfg);
}

/* ==== the config file ======================================================================= */

typedef struct file_state {
  config_server *cfg;
  const char *source;
  int set_on_line[CORE_ARRAY_LEN(options)]; /* where each key was last set, to warn on repeats */
} file_state;

/* A known key close to an unknown one ("disable_token_auth" -> disable_token_authorization). */
static const char *suggest(const char *key) {
  size_t n = strlen(key);
  if (n < 4) return NULL;
  for (size_t i = 0; i < CORE_ARRAY_LEN(options); i++) {
    const char *name = options[i].name;
    if (!name) continue;
    size_t m = strlen(name);
    if ((m > n && strncasecmp(name, key, n) == 0) || (n > m && strncasecmp(key, name, m) == 0) ||
        (n == m && strcasecmp(name, key) == 0))
      return name;
  }
  return NULL;
}

/* TorchServe's ConfigManager.resolveEnvVarVals, run on every value of the file: each
 * $$NAME$$ (NAME two or more characters, none a '$') is replaced by the environment
 * variable NAME, which must be set. *out is NULL when there is none (the value stands);
 * else a malloc'd copy with them replaced, NUL-terminated. */
static inferd_code substitute_env(const char *value, size_t size, const char *source, int line, const char *key,
                                  char **out, inferd_status *st) {
  *out = NULL;
  size_t cap = 0, len = 0;
  char *text = NULL;
  for (size_t i = 0; i < size;) {
    /* a name runs from after "$$" to the next '$' (only looked for after a "$$", so the
     * scan stays linear) */
    bool opens = i + 1 < size && value[i] == '$' && value[i + 1] == '$';
    const char *dollar = opens && i + 2 < size ? memchr(value + i + 2, '$', size - (i + 2)) : NULL;
    size_t end = dollar ? (size_t)(dollar - value) : size;
    bool match = dollar && end - (i + 2) >= 2 && end + 1 < size && value[end + 1] == '$';
    const char *piece = value + i;
    size_t piece_len = 1;
    char name[256];
    if (match) {
      size_t name_len = end - (i + 2);
      if (name_len >= sizeof name || memchr(value + i + 2, '\0', name_len)) {
        free(text);
        return core_fail(st, INFERD_INVALID_ARG, "%s:%d: %s: $$...$$ names no environment variable", source, line, key);
      }
      memcpy(name, value + i + 2, name_len);
      name[name_len] = '\0';
      piece = getenv(name);
      if (!piece) {
        free(text);
        return core_fail(st, INFERD_INVALID_ARG, "%s:%d: %s: environment variable %s (from $$%s$$) is not set", source,
                         line, key, name, name);
      }
      piece_len = strlen(piece);
    }
    if (match || text) {
      if (!text) { /* the first one: copy what came before it */
        cap = size + piece_len + 64;
        if (!(text = malloc(cap))) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
        memcpy(text, value, i);
        len = i;
      }
      if (len + piece_len + 1 > cap) {
        cap = (len + piece_len + 1) * 2;
        char *bigger = realloc(text, cap);
        if (!bigger) {
          free(text);
          return core_fail(st, INFERD_NO_MEMORY, "out of memory");
        }
        text = bigger;
      }
      memcpy(text + len, piece, piece_len);
      len += piece_len;
    }
    i = match ? end + 2 : i + 1;
  }
  if (text) text[len] = '\0';
  *out = text;
  return INFERD_OK;
}

static inferd_code file_entry_value(file_state *fs, const char *key, const char *value, const int *value_lines,
                                    int line, inferd_status *st) {
  const config__option *opt = config__find_option(key);
  if (!opt) {
    const char *near = suggest(key);
    config__warn(fs->cfg, "%s:%d: unknown key '%s'%s%s%s (ignored)", fs->source, line, key,
                 near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
    return INFERD_OK;
  }
  size_t index = (size_t)(opt - options);
  if (fs->set_on_line[index] && opt->type != CONFIG_T_IGNORED)
    config__warn(fs->cfg, "%s:%d: '%s' is set again; line %d's value is replaced", fs->source, line, key,
                 fs->set_on_line[index]);
  fs->set_on_line[index] = line;
  const config__where w = {fs->source, line, value_lines};
  return set_option(fs->cfg, opt, value, &w, st);
}

static inferd_code file_entry(void *ctx, const char *key, const char *value, size_t value_size,
                              const int *value_lines, int line, inferd_status *st) {
  file_state *fs = ctx;
  char *substituted;
  inferd_code rc = substitute_env(value, value_size, fs->source, line, key, &substituted, st);
  if (rc != INFERD_OK) return rc;
  if (substituted) { /* positions moved: errors name the key's line only */
    value = substituted;
    value_lines = NULL;
  }
  rc = file_entry_value(fs, key, value, value_lines, line, st);
  free(substituted);
  return rc;
}

inferd_code config_parse_text(config_server *cfg, const char *text, size_t size, const char *source,
                              inferd_status *status) {
  file_state fs = {.cfg = cfg, .source = source};
  return config__properties_parse(text, size, source, file_entry, &fs, status);
}

enum { MAX_CONFIG_FILE = 16 << 20 };

inferd_code config__read_file(const char *path, size_t max, const char *what, char **text, size_t *size,
                              inferd_status *status) {
  *text = NULL;
  *size = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return core_fail(status, errno == ENOENT ? INFERD_NOT_FOUND : INFERD_INVALID_ARG, "%s: %s", path, strerror(errno));
  struct stat sb;
  inferd_code rc = INFERD_OK;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode))
    rc = core_fail(status, INFERD_INVALID_ARG, "%s: not a regular file", path);
  else if ((uint64_t)sb.st_size > max)
    rc = core_fail(status, INFERD_TOO_LARGE, "%s: %lld bytes; %s may have %zu at most", path, (long long)sb.st_size,
                   what, max);
  else if (!(*text = malloc(sb.st_size ? (size_t)sb.st_size : 1)))
    rc = core_fail(status, INFERD_NO_MEMORY, "%s: out of memory", path);
  if (rc == INFERD_OK) {
    *size = fread(*text, 1, (size_t)sb.st_size, f);
    if (*size != (size_t)sb.st_size || ferror(f)) rc = core_fail(status, INFERD_INVALID_ARG, "%s: read error", path);
  }
  fclose(f);
  if (rc != INFERD_OK) {
    free(*text);
    *text = NULL;
  }
  return rc;
}

inferd_code config_parse_file(config_server *cfg, const char *path, inferd_status *status) {
  char *text;
  size_t size;
  inferd_code rc = config__read_file(path, MAX_CONFIG_FILE, "a config file", &text, &size, status);
  if (rc == INFERD_OK) rc = config_parse_text(cfg, text, size, path, status);
  free(text);
  return rc;
}

/* ==== the command line ====================================================================== */

inferd_code config_parse_args(config_server *cfg, int argc, char **argv, inferd_status *status) {
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "-h") == 0) {
      cfg->help = true;
      continue;
    }
    if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
      return core_fail(status, INFERD_INVALID_ARG, "unexpected argument '%s' (see --help)", arg);
    const char *eq = strchr(arg, '=');
    const config__option *opt = find_flag(arg, eq ? (size_t)(eq - arg) : strlen(arg));
    if (!opt)
      return core_fail(status, INFERD_INVALID_ARG, "unknown option '%.*s' (see --help)",
                       (int)(eq ? eq - arg : (long)strlen(arg)), arg);
    const config__where w = {opt->flag, 0, NULL};
    inferd_code rc;
    if (opt->type == CONFIG_T_BOOL) {
      rc = set_option(cfg, opt, eq ? eq + 1 : "true", &w, status);
    } else if (opt->type == CONFIG_T_IGNORED && !opt->metavar) { /* an ignored switch: warns */
      if (eq) return core_fail(status, INFERD_INVALID_ARG, "%s takes no value", opt->flag);
      rc = set_option(cfg, opt, "", &w, status);
    } else if (opt->flags & CONFIG_F_MULTI) { /* --models a.mar b=b.mar: TorchServe joins them with ',' */
      size_t len = eq ? strlen(eq + 1) : 0;
      int last = i;
      while (last + 1 < argc && strncmp(argv[last + 1], "--", 2) != 0 && strcmp(argv[last + 1], "-h") != 0)
        len += strlen(argv[++last]) + 1;
      if (!eq && last == i) return core_fail(status, INFERD_INVALID_ARG, "%s needs a value", opt->flag);
      char *joined = malloc(len + 1), *p = joined;
      if (!joined) return core_fail(status, INFERD_NO_MEMORY, "out of memory");
      if (eq) p = stpcpy(p, eq + 1);
      for (int k = i + 1; k <= last; k++) {
        if (p != joined) *p++ = ',';
        p = stpcpy(p, argv[k]);
      }
      *p = '\0';
      rc = set_option(cfg, opt, joined, &w, status);
      free(joined);
      i = last;
    } else {
      /* the next argument, unless it is another option (as argparse refuses it for
       * `torchserve`): "--model-store --disable-token-auth" took the switch as the store
       * and left token auth on; a value that starts with "--" is given with '=' */
      const char *value = eq ? eq + 1 : NULL;
      if (!eq && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 && strcmp(argv[i + 1], "-h") != 0)
        value = argv[++i];
      if (!value) return core_fail(status, INFERD_INVALID_ARG, "%s needs a value", opt->flag);
      rc = set_option(cfg, opt, value, &w, status);
    }
    if (rc != INFERD_OK) return rc;
  }
  return INFERD_OK;
}

/* ==== TS_<KEY> variables ==================================================================== */

static inferd_code apply_environment(config_server *cfg, inferd_status *st) {
  for (size_t i = 0; i < CORE_ARRAY_LEN(options); i++) {
    const config__option *opt = &options[i];
    if (!opt->name || opt->type == CONFIG_T_IGNORED) continue;
    char var[80] = "TS_";
    size_t n = 3;
    for (const char *p = opt->name; *p && n + 1 < sizeof var; p++) var[n++] = (char)toupper((unsigned char)*p);
    var[n] = '\0';
    /* TorchServe names the variables after its ConfigManager fields, which are TS_<KEY>
     * but for this one */
    if (strcmp(opt->name, "token_expiration_min") == 0) {
      if (getenv(var))
        config__warn(cfg, "%s is not read: TorchServe's name for token_expiration_min is TS_TOKEN_EXPIRATION_TIME_MIN",
                     var);
      snprintf(var, sizeof var, "TS_TOKEN_EXPIRATION_TIME_MIN");
    }
    const char *value = getenv(var);
    if (!value) continue;
    const config__where w = {var, 0, NULL};
    inferd_code rc = set_option(cfg, opt, value, &w, st);
    if (rc != INFERD_OK) return rc;
  }
  return INFERD_OK;
}

/* ==== the whole load ======================================================================== */

inferd_code config_finish(config_server *cfg, inferd_status *status) {
  if (cfg->start && cfg->stop) return core_fail(status, INFERD_INVALID_ARG, "--start and --stop exclude each other");
  if (cfg->cpu_launcher_args.text && !cfg->cpu_launcher_enable)
    config__warn(cfg, "cpu_launcher_args is not used: cpu_launcher_enable is false (as in TorchServe)");
  return config__finish_models(cfg, status);
}

inferd_code config_load(const char *file, int argc, char **argv, config_server *cfg, inferd_status *status) {
  inferd_code rc;
  /* a first pass over the flags: they must be valid, and one may name the file */
  config_defaults(cfg);
  rc = config_parse_args(cfg, argc, argv, status);
  if (rc != INFERD_OK || cfg->help) { /* --help must work whatever the file says */
    if (rc != INFERD_OK) config_free(cfg);
    return rc;
  }
  char *from_flag = cfg->ts_config ? strdup(cfg->ts_config) : NULL;
  config_free(cfg);

  const char *path = file ? file : getenv("TS_CONFIG_FILE");
  bool env_wins = !file && path && *path && from_flag && strcmp(path, from_flag) != 0;
  if (!path || !*path) path = from_flag;
  if (!path && access("config.properties", F_OK) == 0) path = "config.properties";

  config_defaults(cfg);
  if (env_wins)
    config__warn(cfg, "reading %s ($TS_CONFIG_FILE), not --ts-config %s: the environment wins, as in TorchServe", path,
                 from_flag);
  rc = path ? config_parse_file(cfg, path, status) : INFERD_OK;
  if (rc == INFERD_OK) rc = config_parse_args(cfg, argc, argv, status);
  if (rc == INFERD_OK && cfg->enable_envvars_config) rc = apply_environment(cfg, status);
  if (rc == INFERD_OK && path) {
    free(cfg->ts_config);
    if (!(cfg->ts_config = strdup(path))) rc = core_fail(status, INFERD_NO_MEMORY, "out of memory");
  }
  if (rc == INFERD_OK) rc = config_finish(cfg, status);
  free(from_flag);
  if (rc != INFERD_OK) {
    config_free(cfg);
    return rc;
  }
  for (int i = 0; i < cfg->warning_count; i++) core_log(CORE_LOG_WARN, "%s", cfg->warnings[i]);
  return INFERD_OK;
}

/* ==== help and write ======================================================================== */

/* "key, --flag METAVAR" (or, with `paren`, "key (--flag METAVAR)"); either part alone
 * when the option has only one. */
static void option_label(const config__option *opt, bool paren, char *buf, size_t size) {
  const char *space = opt->metavar ? " " : "", *metavar = opt->metavar ? opt->metavar : "";
  if (opt->name && opt->flag)
    snprintf(buf, size, paren ? "%s (%s%s%s)" : "%s, %s%s%s", opt->name, opt->flag, space, metavar);
  else if (opt->name)
    snprintf(buf, size, "%s", opt->name);
  else
    snprintf(buf, size, "%s%s%s", opt->flag, space, metavar);
}

void config_help(FILE *out) {
  fprintf(out, "Settings: config.properties keys (TorchServe's), then flags, which override the file.\n\n");
  for (size_t i = 0; i < CORE_ARRAY_LEN(options); i++) {
    const config__option *opt = &options[i];
    if (opt->type == CONFIG_T_IGNORED) continue;
    char left[96];
    option_label(opt, false, left, sizeof left);
    fprintf(out, "  %s\n      %s", left, opt->help);
    if (opt->type == CONFIG_T_INT || opt->type == CONFIG_T_SIZE)
      fprintf(out, "; %lld..%lld", (long long)opt->min, (long long)opt->max);
    if (opt->type == CONFIG_T_NUMBER)
      fprintf(out, "; above %lld, at most %lld", (long long)opt->min, (long long)opt->max);
    if (opt->name || opt->type != CONFIG_T_BOOL) /* a switch's default goes without saying */
      fprintf(out, "\n      default: %s", opt->default_value ? opt->default_value : "(none)");
    fputc('\n', out);
  }
  fprintf(out, "\nTorchServe keys and flags accepted with a warning (inferd does not use them):\n ");
  size_t column = 1;
  for (size_t i = 0; i < CORE_ARRAY_LEN(options); i++) {
    const config__option *opt = &options[i];
    if (opt->type != CONFIG_T_IGNORED) continue;
    char item[96];
    option_label(opt, true, item, sizeof item);
    size_t n = strlen(item) + 1;
    if (column + n > 88) {
      fprintf(out, "\n ");
      column = 1;
    }
    fprintf(out, " %s", item);
    column += n;
  }
  fprintf(out, "\n");
}

/* Writes text as a properties value (or key), escaping what the lexer would read
 * otherwise: backslashes, line ends, leading blanks, and in keys = : # ! and blanks. */
static void write_escaped(FILE *out, const char *s, bool is_key) {
  for (const char *p = s; *p; p++) {
    char c = *p;
    if (c == '\\') fputs("\\\\", out);
    else if (c == '\n') fputs("\\n", out);
    else if (c == '\r') fputs("\\r", out);
    else if (c == '\t') fputs("\\t", out);
    else if (c == '\f') fputs("\\f", out);
    else if ((is_key || p == s) && (c == ' ' || c == '=' || c == ':' || ((c == '#' || c == '!') && p == s)))
      fprintf(out, "\\%c", c);
    else fputc(c, out);
  }
}

void config_write(const config_server *cfg, FILE *out) {
  for (size_t i = 0; i < CORE_ARRAY_LEN(options); i++) {
    const config__option *opt = &options[i];
    if (!opt->name || !types[opt->type].text) continue;
    char buf[CONFIG_HOST_MAX + 32];
    const char *text = types[opt->type].text((const char *)cfg + opt->offset, buf, sizeof buf);
    if (!text) continue;
    write_escaped(out, opt->name, true);
    fputc('=', out);
    write_escaped(out, text, false);
    fputc('\n', out);
  }
}

const config_model *config_find_model(const config_server *cfg, const char *name, const char *version) {
  const config_model *only = NULL;
  int matches = 0;
  for (int i = 0; i < cfg->models.count; i++) {
    const config_model *m = &cfg->models.items[i];
    if (strcmp(m->name, name) != 0) continue;
    if (version ? strcmp(m->version, version) == 0 : m->default_version) return m;
    only = m;
    matches++;
  }
  return !version && matches == 1 ? only : NULL;
}
