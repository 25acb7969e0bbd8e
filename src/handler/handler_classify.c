/*
 * handler_classify.c - image_classifier postprocessing: softmax, top-k, labels from
 * index_to_name.json, and the answer rendered as TorchServe renders it.
 *
 * DESIGN
 * TorchServe's image_classifier ends with
 *     ps = softmax(logits); probs, classes = topk(ps, 5)
 *     result = {mapping[str(c)]: p for c, p in zip(classes, probs)}  # map_class_to_label
 *     body = json.dumps(result, indent=2)                             # otf_message_handler
 * and a client may depend on its form, so this file reproduces it:
 *   - probabilities are float32 (softmax is computed here in double and rounded once:
 *     the float32 nearest the exact value; torch's float32 kernel is off by a few ulp
 *     over 1000 classes, so the last digits printed may differ from TorchServe's, and
 *     where its rounding makes small probabilities equal, its order of the tied classes
 *     may differ too) and printed as Python prints the double of a float32: the
 *     shortest digits that read back the same ("0.7413", "1e-05", "1.0");
 *   - labels are escaped as json.dumps does with ensure_ascii: \" \\ \n \r \t \b \f,
 *     other control characters and everything outside printable ASCII as \uXXXX
 *     (surrogate pairs above U+FFFF), lowercase hex;
 *   - layout "{\n  \"label\": p,\n  ...\n}", most probable first;
 *   - two classes with the same name are one key of the Python dict: the first one's
 *     place, the later one's probability (ImageNet has two "crane"s and two "maillot"s).
 * Where TorchServe fails, inferd answers: a class missing from the mapping is named by
 * its index (TorchServe raises KeyError), fewer than k classes give fewer entries.
 *
 * Labels are parsed once (jansson) into an array sorted by class index holding each name
 * and its escaped JSON form, so rendering an answer is lookups and copies into the
 * caller's buffer: no allocation per request. A loaded handler_labels is read-only and
 * shared by every thread.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/core.h"
#include "handler/handler.h"

typedef struct label {
  int64_t index;
  const char *name; /* UTF-8, into the pool */
  const char *json; /* the name as a JSON string literal, quotes included, into the pool */
  size_t json_len;
} label;

struct handler_labels {
  label *entries; /* sorted by index, no duplicates */
  size_t count;
  size_t json_max; /* longest json_len */
  char *pool;      /* all strings */
};

/* ==== parsing index_to_name.json =========================================================== */

/* A key TorchServe would look up: str(class index), i.e. canonical decimal. -1 otherwise. */
static int64_t key_index(const char *key) {
  if (!key[0] || (key[0] == '0' && key[1]) || strlen(key) > 10) return -1;
  int64_t v = 0;
  for (const char *p = key; *p; p++) {
    if (*p < '0' || *p > '9') return -1;
    v = v * 10 + (*p - '0');
  }
  return v <= INT32_MAX ? v : -1;
}

/* The name a mapping value stands for (TorchServe's load_label_mapping: a string, or
 * the last element of a list, which must be a string); NULL when neither. */
static const char *value_name(const json_t *value) {
  if (json_is_array(value)) value = json_array_get(value, json_array_size(value) - 1);
  return json_is_string(value) ? json_string_value(value) : NULL;
}

/* Decodes one UTF-8 sequence (jansson has validated it); returns its length. */
static int utf8_next(const unsigned char *s, uint32_t *cp) {
  if (s[0] < 0x80) { *cp = s[0]; return 1; }
  if ((s[0] & 0xE0) == 0xC0) { *cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F); return 2; }
  if ((s[0] & 0xF0) == 0xE0) { *cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F); return 3; }
  *cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
  return 4;
}

/* Writes `name` (of `len` bytes) as Python's json.dumps(ensure_ascii=True) writes a
 * string into `out` (NULL: only count); returns the length. At most 12 bytes per input
 * byte (a 4-byte sequence becomes a 12-byte surrogate pair). */
static size_t json_escape(const char *name, size_t len, char *out) {
  size_t n = 0;
#define EMIT(...) (n += out ? (size_t)sprintf(out + n, __VA_ARGS__) : (size_t)snprintf(NULL, 0, __VA_ARGS__))
  EMIT("\"");
  const unsigned char *s = (const unsigned char *)name, *end = s + len;
  while (s < end) {
    uint32_t cp;
    s += utf8_next(s, &cp);
    switch (cp) {
    case '"': EMIT("\\\""); break;
    case '\\': EMIT("\\\\"); break;
    case '\n': EMIT("\\n"); break;
    case '\r': EMIT("\\r"); break;
    case '\t': EMIT("\\t"); break;
    case '\b': EMIT("\\b"); break;
    case '\f': EMIT("\\f"); break;
    default:
      if (cp >= 0x20 && cp < 0x7F) EMIT("%c", (int)cp);
      else if (cp < 0x10000) EMIT("\\u%04x", (unsigned)cp);
      else EMIT("\\u%04x\\u%04x", (unsigned)(0xD800 + ((cp - 0x10000) >> 10)), (unsigned)(0xDC00 + ((cp - 0x10000) & 0x3FF)));
    }
  }
  EMIT("\"");
#undef EMIT
  return n;
}

static int by_index(const void *a, const void *b) {
  const label *x = a, *y = b;
  return (x->index > y->index) - (x->index < y->index);
}

/* Fills `labels` from the pairs (index, name) the mapping holds. */
static inferd_code build(handler_labels *labels, json_t *root, json_t *names, const char *what, inferd_status *st) {
  size_t cap = names ? json_array_size(names) : json_object_size(root);
  labels->entries = calloc(cap ? cap : 1, sizeof(label));
  if (!labels->entries) return core_fail(st, INFERD_NO_MEMORY, "%s: out of memory", what);
  /* pass 1: validate, record (index, name) and the pool size */
  size_t pool = 0;
  if (names) {
    for (size_t i = 0; i < cap; i++) {
      const json_t *v = json_array_get(names, i);
      if (!json_is_string(v))
        return core_fail(st, INFERD_INVALID_ARG, "%s: object_type_names[%zu] is not a string", what, i);
      if (i > INT32_MAX) break;
      labels->entries[labels->count++] = (label){.index = (int64_t)i, .name = json_string_value(v)};
    }
  } else {
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
      const char *name = value_name(v);
      if (!name)
        return core_fail(st, INFERD_INVALID_ARG,
                         "%s: the label of key '%.40s' must be a string or a list ending with a string", what, key);
      int64_t index = key_index(key);
      if (index >= 0) labels->entries[labels->count++] = (label){.index = index, .name = name};
    }
  }
  for (size_t i = 0; i < labels->count; i++) {
    size_t len = strlen(labels->entries[i].name);
    pool += len + 1 + json_escape(labels->entries[i].name, len, NULL) + 1;
  }
  /* pass 2: copy names and their escaped forms into one pool */
  labels->pool = malloc(pool ? pool : 1);
  if (!labels->pool) return core_fail(st, INFERD_NO_MEMORY, "%s: out of memory", what);
  char *p = labels->pool;
  for (size_t i = 0; i < labels->count; i++) {
    label *e = &labels->entries[i];
    size_t len = strlen(e->name);
    memcpy(p, e->name, len + 1);
    e->name = p;
    p += len + 1;
    e->json = p;
    e->json_len = json_escape(e->name, len, p);
    p += e->json_len + 1;
    labels->json_max = CORE_MAX(labels->json_max, e->json_len);
  }
  qsort(labels->entries, labels->count, sizeof(label), by_index);
  return INFERD_OK;
}

inferd_code handler_labels_parse(const void *json, size_t size, const char *name, handler_labels **out,
                                 inferd_status *status) {
  *out = NULL;
  if (!name) name = "index_to_name.json";
  json_error_t error;
  json_t *root = json_loadb(json, size, 0, &error);
  if (!root)
    return core_fail(status, INFERD_INVALID_ARG, "%s: line %d column %d: %s", name, error.line, error.column,
                     error.text);
  inferd_code rc;
  handler_labels *labels = calloc(1, sizeof *labels);
  if (!labels) {
    rc = core_fail(status, INFERD_NO_MEMORY, "%s: out of memory", name);
  } else if (!json_is_object(root)) {
    rc = core_fail(status, INFERD_INVALID_ARG, "%s: expected an object {\"class index\": \"label\", ...}", name);
  } else {
    /* the older TorchServe examples' {"object_type_names": [...]} */
    json_t *names = json_object_get(root, "object_type_names");
    rc = build(labels, root, json_is_array(names) ? names : NULL, name, status);
  }
  json_decref(root); /* build copied every string it keeps */
  if (rc != INFERD_OK) {
    handler_labels_free(labels);
    return rc;
  }
  /* a key given twice was already resolved by jansson (the later value, as in Python) */
  *out = labels;
  core_status_ok(status);
  return INFERD_OK;
}

inferd_code handler_labels_load(const char *path, handler_labels **out, inferd_status *status) {
  enum { LABELS_MAX = 64 << 20 }; /* ImageNet's are 35 KB */
  *out = NULL;
  void *data;
  size_t size;
  /* read, not mapped: a labels file rewritten while the server loads it cannot fault */
  inferd_code rc = core_file_read(path, LABELS_MAX, &data, &size, status); /* NOT_FOUND when absent */
  if (rc != INFERD_OK) return rc;
  rc = handler_labels_parse(data, size, path, out, status);
  free(data);
  return rc;
}

void handler_labels_free(handler_labels *labels) {
  if (!labels) return;
  free(labels->entries);
  free(labels->pool);
  free(labels);
}

static const label *find(const handler_labels *labels, int64_t index) {
  if (!labels) return NULL;
  size_t lo = 0, hi = labels->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (labels->entries[mid].index < index) lo = mid + 1;
    else hi = mid;
  }
  return lo < labels->count && labels->entries[lo].index == index ? &labels->entries[lo] : NULL;
}

const char *handler_labels_name(const handler_labels *labels, int64_t index) {
  const label *e = find(labels, index);
  return e ? e->name : NULL;
}

/* ==== softmax and top-k ==================================================================== */

int handler_classify_topk(const float *logits, int n, int k, handler_class *top) {
  if (n <= 0 || k <= 0) return 0;
  /* -inf is a class the model rules out (a masked logit): probability 0, as torch's
   * softmax gives it. NaN, +inf, or every logit -inf make torch's softmax NaN. */
  float max = -INFINITY;
  for (int i = 0; i < n; i++) {
    if (isnan(logits[i]) || logits[i] == INFINITY) return -1;
    if (logits[i] > max) max = logits[i];
  }
  if (max == -INFINITY) return -1;
  double sum = 0.0;
  for (int i = 0; i < n; i++) sum += exp((double)logits[i] - max);
  /* top k by logit (softmax is monotonic), insertion into a sorted list */
  int count = 0;
  for (int i = 0; i < n; i++) {
    if (count == k && logits[i] <= logits[top[count - 1].index]) continue;
    int j = count < k ? count++ : count - 1;
    while (j > 0 && logits[top[j - 1].index] < logits[i]) {
      top[j] = top[j - 1];
      j--;
    }
    top[j].index = i;
  }
  for (int j = 0; j < count; j++) top[j].probability = (float)(exp((double)logits[top[j].index] - max) / sum);
  return count;
}

/* ==== the answer =========================================================================== */

enum {
  NUMBER_MAX = 32, /* "1.2345678901234567e-308" and ".0" fit */
  INDEX_JSON_MAX = 12, /* "\"2147483647\"" */
};

/* Python's repr of the double of a float32: the shortest %g that reads back the same,
 * with ".0" after an integral fixed-point value ("1.0", "0.0"). Exponent rules agree
 * with Python's for |x| < 1e16, which a probability is. */
static int format_probability(float p, char *out) {
  double d = p;
  int len = 0;
  for (int precision = 1; precision <= 17; precision++) {
    len = snprintf(out, NUMBER_MAX, "%.*g", precision, d);
    if (strtod(out, NULL) == d) break;
  }
  if (!strpbrk(out, ".e")) {
    memcpy(out + len, ".0", 3);
    len += 2;
  }
  return len;
}

size_t handler_classify_json_size(const handler_labels *labels, int k) {
  size_t key = CORE_MAX(labels ? labels->json_max : 0, (size_t)INDEX_JSON_MAX);
  /* "{\n" + k * ("  " key ": " number ",\n") + "}" + NUL */
  return 2 + (size_t)(k > 0 ? k : 0) * (2 + key + 2 + NUMBER_MAX + 2) + 1 + 1;
}

inferd_code handler_classify_json(const float *logits, int n, int k, const handler_labels *labels, char *buf,
                                  size_t size, size_t *length, inferd_status *status) {
  handler_class top[HANDLER_TOPK_MAX];
  int count = handler_classify_topk(logits, n, CORE_MIN(k, (int)HANDLER_TOPK_MAX), top);
  if (count < 0)
    return core_fail(status, INFERD_INTERNAL, "postprocess: the model returned a logit that is NaN or +inf, or only -inf");

  /* one key per distinct name, in the place of its first class (a Python dict) */
  struct {
    const char *json; /* the key, quoted: a label's, or `index` */
    size_t json_len;
    char index[INDEX_JSON_MAX + 1];
    float probability;
  } keys[HANDLER_TOPK_MAX];
  int nkeys = 0;
  for (int j = 0; j < count; j++) {
    const label *e = find(labels, top[j].index);
    if (e) {
      keys[nkeys].json = e->json;
      keys[nkeys].json_len = e->json_len;
    } else {
      keys[nkeys].json_len = (size_t)snprintf(keys[nkeys].index, sizeof keys[nkeys].index, "\"%d\"", top[j].index);
      keys[nkeys].json = keys[nkeys].index;
    }
    keys[nkeys].probability = top[j].probability;
    int i = 0;
    while (i < nkeys && !(keys[i].json_len == keys[nkeys].json_len &&
                          memcmp(keys[i].json, keys[nkeys].json, keys[i].json_len) == 0))
      i++;
    if (i < nkeys) keys[i].probability = keys[nkeys].probability; /* a name seen before */
    else nkeys++;
  }

  size_t used = 0;
#define PUT(src, len)                                      \
  do {                                                     \
    if (used + (len) < size) memcpy(buf + used, (src), (len)); \
    used += (len);                                         \
  } while (0)
  if (nkeys == 0) {
    PUT("{}", 2);
  } else {
    PUT("{\n", 2);
    for (int i = 0; i < nkeys; i++) {
      char number[NUMBER_MAX];
      int number_len = format_probability(keys[i].probability, number);
      PUT("  ", 2);
      PUT(keys[i].json, keys[i].json_len);
      PUT(": ", 2);
      PUT(number, (size_t)number_len);
      if (i + 1 < nkeys) PUT(",\n", 2);
    }
    PUT("\n}", 2);
  }
#undef PUT
  /* every piece fitted exactly when the whole does: `used` only grows */
  if (used >= size) {
    if (size) buf[0] = '\0';
    return core_fail(status, INFERD_TOO_LARGE, "postprocess: the answer needs %zu bytes, the buffer has %zu",
                     used + 1, size);
  }
  buf[used] = '\0';
  if (length) *length = used;
  core_status_ok(status);
  return INFERD_OK;
}
