/*
 * fuzz_model_yaml.c - libFuzzer target for a .mar's model-config.yaml
 * (config_model_yaml_parse, src/config/config_model_yaml.c).
 *
 * Each input is a model-config.yaml. On failure: INVALID_ARG or NO_MEMORY, a one-line
 * message, and every value -1. On success: each of the five integer keys is -1 (not
 * given) or in the range of its models={...} field (batchSize 1..1024, maxBatchDelay
 * 0..600000, responseTimeout 1..86400, workers 0..256), precision -1 or an
 * inferd_precision, and the list of ignored keys one NUL-terminated line.
 *
 * Seeds: tests/fuzz/corpus/model_yaml/ (TorchServe's example files, flow style,
 * anchors and aliases, several documents, deep nesting).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"

static void fail(const char *what) {
  fprintf(stderr, "fuzz_model_yaml: %s\n", what);
  abort();
}

static void check_range(int v, int min, int max, const char *what) {
  if (v != -1 && (v < min || v > max)) fail(what);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  config_model_yaml y;
  inferd_status st = {0};
  inferd_code rc = config_model_yaml_parse(data, size, "model-config.yaml", &y, &st);
  const config_model *v = &y.values;
  if (rc != INFERD_OK) {
    if (st.code != rc || (rc != INFERD_INVALID_ARG && rc != INFERD_NO_MEMORY) || !st.message[0] ||
        strchr(st.message, '\n'))
      fail("a refusal without INVALID_ARG and a one-line message");
    if (v->batch_size != -1 || v->min_workers != -1 || v->max_workers != -1 || v->max_batch_delay_ms != -1 ||
        v->response_timeout_s != -1 || v->precision != -1 || y.ignored[0])
      fail("a refusal that left values behind");
    return 0;
  }
  check_range(v->batch_size, 1, 1024, "batchSize out of range");
  check_range(v->max_batch_delay_ms, 0, 600000, "maxBatchDelay out of range");
  check_range(v->response_timeout_s, 1, 86400, "responseTimeout out of range");
  check_range(v->min_workers, 0, CONFIG_MAX_WORKERS, "minWorkers out of range");
  check_range(v->max_workers, 0, CONFIG_MAX_WORKERS, "maxWorkers out of range");
  check_range(v->precision, INFERD_PRECISION_FP32, INFERD_PRECISION_BF16, "precision out of range");
  if (v->name || v->version || v->mar_name) fail("a string field set");
  if (!memchr(y.ignored, '\0', sizeof y.ignored)) fail("ignored is not terminated");
  for (const char *c = y.ignored; *c; c++)
    if ((unsigned char)*c < 0x20) fail("a control byte in ignored");
  return 0;
}
