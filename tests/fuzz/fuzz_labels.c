/*
 * fuzz_labels.c - libFuzzer target for index_to_name.json, the label file of a .mar
 * (handler_labels_parse in src/handler/handler_classify.c), and the answer rendered
 * with it (handler_classify_json).
 *
 * Each input is a label file. On failure the status must carry the code, INVALID_ARG
 * (or NO_MEMORY), with a one-line message. On success the top-32 answer over 32 classes
 * (distinct logits, so the order is fixed) must fit the buffer handler_classify_json_size
 * promises (a heap block of exactly that size, so ASan sees an overrun) and be JSON
 * without duplicate keys whose every key is a top class's label (or its index when it
 * has none) read back exactly, as a client's json.loads would.
 *
 * Seeds: tests/fuzz/corpus/labels/ (ImageNet-style lists, plain names, the older
 * object_type_names form, escapes and non-ASCII names, a name given twice).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler/handler.h"

enum { CLASSES = 32 };

static void fail(const char *what) {
  fprintf(stderr, "fuzz_labels: %s\n", what);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  handler_labels *labels = NULL;
  inferd_status st = {0};
  inferd_code rc = handler_labels_parse(data, size, NULL, &labels, &st);
  if (rc != INFERD_OK) {
    if (labels || st.code != rc || (rc != INFERD_INVALID_ARG && rc != INFERD_NO_MEMORY) || !st.message[0] ||
        strchr(st.message, '\n'))
      fail("a refusal without INVALID_ARG and a one-line message");
    return 0;
  }
  float logits[CLASSES];
  for (int i = 0; i < CLASSES; i++) logits[i] = (float)((i * 7) % CLASSES) / 4.0f;
  size_t cap = handler_classify_json_size(labels, CLASSES), length = 0;
  char *buf = malloc(cap);
  if (!buf) fail("malloc");
  if (handler_classify_json(logits, CLASSES, CLASSES, labels, buf, cap, &length, &st) != INFERD_OK)
    fail("the answer does not fit handler_classify_json_size");
  if (length != strlen(buf)) fail("length is not the answer's");
  json_error_t error;
  json_t *answer = json_loads(buf, JSON_REJECT_DUPLICATES, &error);
  if (!json_is_object(answer)) {
    fprintf(stderr, "fuzz_labels: the answer is not a JSON object (%s):\n%s\n", error.text, buf);
    abort();
  }
  const char *key;
  json_t *value;
  json_object_foreach(answer, key, value) {
    bool known = false;
    for (int i = 0; i < CLASSES && !known; i++) {
      char index[16];
      const char *name = handler_labels_name(labels, i);
      if (!name) snprintf(index, sizeof index, "%d", i), name = index;
      known = strcmp(name, key) == 0;
    }
    if (!known || !json_is_real(value)) fail("a key that is no class's label, or a value that is not a number");
  }
  json_decref(answer);
  free(buf);
  handler_labels_free(labels);
  return 0;
}
