/*
 * fuzz_config.c - libFuzzer target for the config.properties reader and the serve
 * command line (src/config/).
 *
 * An input whose first byte is 0x01 is a command line: the rest, split at NUL bytes,
 * becomes argv[1..] for config_parse_args. Any other input is a config file for
 * config_parse_text. Either way the promise is: success, or a status with that code
 * and a one-line message; never a crash, a leak or an overread.
 *
 * After a successful parse and config_finish, the values must be in the table's
 * ranges, every string non-empty, every warning one line, and the config must survive
 * a round trip: what config_write writes parses back (without error) to a config that
 * config_write writes identically. The one exception: a value holding $$NAME$$, which
 * only a flag can give (a file's $$NAME$$ is the environment variable NAME, as in
 * TorchServe, with no escape), so no config.properties can hold it.
 *
 * A few environment variables are set (INFERD_FUZZ_*, see set_environment), so that a
 * file's $$NAME$$ substitution also succeeds: its values then go through the same
 * checks. Seeds: written by tests/fuzz/CMakeLists.txt, and tests/fuzz/corpus/config/.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

static void fail(const char *what) {
  fprintf(stderr, "fuzz_config: %s\n", what);
  abort();
}

static void check_refusal(inferd_code rc, const inferd_status *st) {
  if (st->code != rc || !st->message[0] || strchr(st->message, '\n')) fail("refusal without a one-line message");
}

static void check_values(const config_server *c) {
  if (c->job_queue_size < 1 || c->batch_size < 1 || c->batch_size > 1024 || c->max_batch_delay < 0 ||
      c->default_response_timeout < 1 || c->default_workers_per_model < 0 || c->number_of_netty_threads < 0 ||
      c->max_request_size < 1 || c->max_response_size < 1)
    fail("a value outside its range");
  const config_address *addresses[] = {&c->inference_address, &c->management_address, &c->metrics_address};
  for (int i = 0; i < 3; i++)
    if (!addresses[i]->host[0] || addresses[i]->port < 0 || addresses[i]->port > 65535) fail("a bad address");
  if (c->model_store && !c->model_store[0]) fail("an empty model_store");
  for (int i = 0; i < c->load_models.count; i++) {
    const config_load_model *m = &c->load_models.items[i];
    if (!m->path || !m->path[0] || (m->name && !config_valid_model_name(m->name))) fail("a bad load_models item");
  }
  if (c->load_models.all && c->load_models.count) fail("'all' with items");
  for (int i = 0; i < c->models.count; i++) {
    const config_model *m = &c->models.items[i];
    if (!config_valid_model_name(m->name) || !m->version[0]) fail("a bad model name or version");
    if (m->batch_size < 1 || m->max_batch_delay_ms < 0 || m->response_timeout_s < 1 || m->min_workers < 0 ||
        m->max_workers < 0)
      fail("a per-model value left unset or out of range");
    if (m->max_workers > 0 && m->min_workers > m->max_workers) fail("minWorkers above maxWorkers");
    if (m->precision < -1 || m->precision > INFERD_PRECISION_BF16) fail("a precision out of range");
  }
  for (int i = 0; i < c->warning_count; i++)
    if (!c->warnings[i][0] || strchr(c->warnings[i], '\n')) fail("a warning that is not one line");
  if (c->start && c->stop) fail("--start with --stop accepted");
}

static void set_environment(void) {
  static const char *const vars[][2] = {
      {"INFERD_FUZZ_PORT", "8085"},
      {"INFERD_FUZZ_DIR", "/srv/model store"},
      {"INFERD_FUZZ_LIST", "a.mar, b=b.mar"},
      {"INFERD_FUZZ_MODELS", "{\"m\": {\"1.0\": {\"marName\": \"m.mar\", \"batchSize\": 4}}}"},
      {"INFERD_FUZZ_ODD", "x\n\\ y=z:#!\t$"},
      {"INFERD_FUZZ_EMPTY", ""},
  };
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    if (setenv(vars[i][0], vars[i][1], 1) != 0) fail("setenv");
}

/* A $$NAME$$ as substitute_env (config_table.c) finds one: a name of two or more
 * characters, none a '$'. */
static bool holds_env_reference(const char *text) {
  for (const char *p = strstr(text, "$$"); p; p = strstr(p + 1, "$$")) {
    const char *end = strchr(p + 2, '$');
    if (end && end - (p + 2) >= 2 && end[1] == '$') return true;
  }
  return false;
}

static char *written(const config_server *c, size_t *size) {
  char *text = NULL;
  FILE *f = open_memstream(&text, size);
  if (!f) fail("open_memstream");
  config_write(c, f);
  fclose(f);
  return text;
}

static void round_trip(const config_server *c) {
  size_t size;
  char *text = written(c, &size);
  if (holds_env_reference(text)) { /* from a flag: a file cannot say it */
    free(text);
    return;
  }
  config_server again;
  config_defaults(&again);
  inferd_status st = {0};
  if (config_parse_text(&again, text, size, "written", &st) != INFERD_OK || config_finish(&again, &st) != INFERD_OK) {
    fprintf(stderr, "fuzz_config: config_write wrote what does not parse back: %s\n---\n%s---\n", st.message, text);
    abort();
  }
  size_t size2;
  char *text2 = written(&again, &size2);
  if (size2 != size || memcmp(text, text2, size) != 0) {
    fprintf(stderr, "fuzz_config: round trip differs:\n---\n%s---\n%s---\n", text, text2);
    abort();
  }
  free(text);
  free(text2);
  config_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool environment_set;
  if (!environment_set) set_environment(), environment_set = true;
  config_server cfg;
  config_defaults(&cfg);
  inferd_status st = {0};
  inferd_code rc;
  if (size > 0 && data[0] == 0x01) {
    /* a command line: argv[0] is the command, the rest split at NUL bytes */
    char *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = '\0';
    char *argv[64] = {"serve"};
    int argc = 1;
    for (char *p = copy; p < copy + size - 1 && argc < 64; p += strlen(p) + 1) argv[argc++] = p;
    rc = config_parse_args(&cfg, argc, argv, &st);
    free(copy);
  } else {
    rc = config_parse_text(&cfg, (const char *)data, size, "fuzz", &st);
  }
  if (rc == INFERD_OK) rc = config_finish(&cfg, &st);
  if (rc != INFERD_OK) {
    check_refusal(rc, &st);
  } else {
    check_values(&cfg);
    round_trip(&cfg);
  }
  config_free(&cfg);
  return 0;
}
