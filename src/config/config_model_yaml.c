/*
 * config_model_yaml.c - a .mar's model-config.yaml (config.h), read with libyaml's
 * event parser.
 *
 * Events rather than a document tree: nothing is built that the five integer keys and
 * inferd's `precision` do not need, an alias stays an event (never expanded, so nested
 * aliases cost nothing), and skipping the handler's section is counting the starts and
 * ends of its nodes. libyaml checks the syntax; this file checks the shape (a mapping
 * at the top, one document) and the six values.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config/config_internal.h"
#include "core/core.h"

#define INT_TAG "tag:yaml.org,2002:int"

typedef struct reader {
  yaml_parser_t parser;
  const unsigned char *text; /* for the line of an encoding error */
  yaml_event_t event; /* the current one, valid while have_event */
  bool have_event;
  const char *source;
  inferd_status *st;
} reader;

static size_t line_of(const reader *r) { return r->event.start_mark.line + 1; }

/* Moves to the next event; libyaml's error, with its line, when the text stops being
 * YAML. */
static inferd_code next(reader *r) {
  if (r->have_event) yaml_event_delete(&r->event);
  r->have_event = false;
  if (yaml_parser_parse(&r->parser, &r->event)) {
    r->have_event = true;
    return INFERD_OK;
  }
  const yaml_parser_t *p = &r->parser;
  if (p->error == YAML_MEMORY_ERROR) return core_fail(r->st, INFERD_NO_MEMORY, "%s: out of memory", r->source);
  size_t line = p->problem_mark.line + 1, column = p->problem_mark.column + 1;
  if (p->error == YAML_READER_ERROR) { /* an encoding error: libyaml gives its byte offset only */
    line = 1;
    column = 1;
    for (size_t i = 0; i < p->problem_offset; i++, column++)
      if (r->text[i] == '\n') line++, column = 0;
  }
  return core_fail(r->st, INFERD_INVALID_ARG, "%s: line %zu, column %zu: invalid YAML: %s%s%s%s", r->source, line,
                   column, p->problem ? p->problem : "syntax error", p->context ? " (" : "",
                   p->context ? p->context : "", p->context ? ")" : "");
}

/* Copies at most size - 1 bytes of text for a one-line message, control bytes as '?'. */
static void printable(char *out, size_t size, const unsigned char *text, size_t len) {
  size_t n = len < size - 1 ? len : size - 1;
  for (size_t i = 0; i < n; i++) out[i] = text[i] < 0x20 || text[i] == 0x7f ? '?' : (char)text[i];
  out[n] = '\0';
}

/* Skips the node that the current event starts (a scalar, an alias, or a whole
 * mapping or sequence), leaving its last event current. */
static inferd_code skip_node(reader *r) {
  for (long depth = 0;;) {
    yaml_event_type_t t = r->event.type;
    if (t == YAML_MAPPING_START_EVENT || t == YAML_SEQUENCE_START_EVENT) depth++;
    if (t == YAML_MAPPING_END_EVENT || t == YAML_SEQUENCE_END_EVENT) depth--;
    if (depth == 0) return INFERD_OK;
    inferd_code rc = next(r);
    if (rc != INFERD_OK) return rc;
  }
}

/* A null scalar, as YAML 1.1 spells it: an empty document's root. */
static bool is_null(const yaml_event_t *e) {
  if (e->type != YAML_SCALAR_EVENT || e->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || e->data.scalar.tag)
    return false;
  const char *v = (const char *)e->data.scalar.value;
  return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

/* The current event is the value of `key`, one of the five: a plain decimal integer
 * in min..max (or one tagged !!int), or 0, which leaves *out unset: TorchServe's
 * ModelConfig defaults every key to 0 and takes only values above it. YAML 1.1, which TorchServe's SnakeYAML reads,
 * takes 010 as octal 8 and 0x10, 1_000 and 1:30 as numbers too: those are refused
 * rather than read otherwise. */
static inferd_code read_int(reader *r, const char *key, int64_t min, int64_t max, int *out) {
  const yaml_event_t *e = &r->event;
  char got[40] = "a mapping or a list";
  if (e->type == YAML_ALIAS_EVENT) snprintf(got, sizeof got, "an alias");
  if (e->type == YAML_SCALAR_EVENT) {
    const char *tag = (const char *)e->data.scalar.tag;
    size_t len = e->data.scalar.length;
    int64_t x;
    const char *v = (const char *)e->data.scalar.value, *digits = v + (*v == '+' || *v == '-');
    if ((!tag || !strcmp(tag, INT_TAG)) && e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE && strlen(v) == len &&
        !(digits[0] == '0' && digits[1]) && config__parse_int64(v, CORE_MIN(min, 0), max, &x) &&
        (x == 0 || x >= min)) {
      if (x != 0) *out = (int)x;
      return INFERD_OK;
    }
    got[0] = '\'';
    printable(got + 1, sizeof got - 2, e->data.scalar.value, len);
    strcat(got, "'");
  }
  return core_fail(r->st, INFERD_INVALID_ARG, "%s: line %zu: %s: expected an integer in %lld..%lld, got %s",
                   r->source, line_of(r), key, (long long)min, (long long)max, got);
}

/* precision: fp32 or bf16, a plain or quoted scalar (a tag other than !!str refused) */
static inferd_code read_precision(reader *r, int *out) {
  const yaml_event_t *e = &r->event;
  char got[40] = "a mapping or a list";
  if (e->type == YAML_ALIAS_EVENT) snprintf(got, sizeof got, "an alias");
  if (e->type == YAML_SCALAR_EVENT) {
    const char *tag = (const char *)e->data.scalar.tag;
    if ((!tag || !strcmp(tag, YAML_STR_TAG)) &&
        config_precision_parse((const char *)e->data.scalar.value, e->data.scalar.length, out))
      return INFERD_OK;
    got[0] = '\'';
    printable(got + 1, sizeof got - 2, e->data.scalar.value, e->data.scalar.length);
    strcat(got, "'");
  }
  return core_fail(r->st, INFERD_INVALID_ARG, "%s: line %zu: precision: expected fp32 or bf16, got %s", r->source,
                   line_of(r), got);
}

/* Adds a top-level key inferd does not use to out->ignored. */
static void note_ignored(config_model_yaml *out, const yaml_event_t *key) {
  size_t used = strlen(out->ignored), room = sizeof out->ignored - used;
  if (room < 5 || strstr(out->ignored, "...")) return;
  char name[64];
  printable(name, sizeof name, key->data.scalar.value, key->data.scalar.length);
  int n = snprintf(out->ignored + used, room, "%s%s", used ? ", " : "", name);
  if (n < 0 || (size_t)n >= room) strcpy(out->ignored + sizeof out->ignored - 4, "...");
}

/* The current event starts the top-level mapping; reads it through its end. */
static inferd_code read_mapping(reader *r, config_model_yaml *out) {
  unsigned seen = 0;
  for (;;) {
    inferd_code rc = next(r);
    if (rc != INFERD_OK) return rc;
    if (r->event.type == YAML_MAPPING_END_EVENT) return INFERD_OK;
    if (r->event.type != YAML_SCALAR_EVENT)
      return core_fail(r->st, INFERD_INVALID_ARG, "%s: line %zu: a top-level key must be a name", r->source,
                       line_of(r));
    char key[64];
    printable(key, sizeof key, r->event.data.scalar.value, r->event.data.scalar.length);
    bool whole = r->event.data.scalar.length < sizeof key && strlen(key) == r->event.data.scalar.length;
    int64_t min, max;
    int *field = whole ? config__model_field(&out->values, key, &min, &max) : NULL;
    bool precision = whole && strcmp(key, "precision") == 0;
    if (!field && !precision && strcmp(key, "handler") != 0) note_ignored(out, &r->event);
    if ((rc = next(r)) != INFERD_OK) return rc;
    if (precision) {
      if (out->values.precision >= 0)
        return core_fail(r->st, INFERD_INVALID_ARG, "%s: line %zu: precision is given twice", r->source, line_of(r));
      if ((rc = read_precision(r, &out->values.precision)) != INFERD_OK) return rc;
      continue;
    }
    if (!field) {
      if ((rc = skip_node(r)) != INFERD_OK) return rc;
      continue;
    }
    unsigned bit = 1u << ((size_t)((char *)field - (char *)&out->values) / sizeof(int) % 32);
    if (seen & bit)
      return core_fail(r->st, INFERD_INVALID_ARG, "%s: line %zu: %s is given twice", r->source, line_of(r), key);
    seen |= bit;
    if ((rc = read_int(r, key, min, max, field)) != INFERD_OK) return rc;
  }
}

static inferd_code expect(reader *r, yaml_event_type_t type, const char *what) {
  inferd_code rc = next(r);
  if (rc == INFERD_OK && r->event.type != type)
    rc = core_fail(r->st, INFERD_INVALID_ARG, "%s: line %zu: %s", r->source, line_of(r), what);
  return rc;
}

static inferd_code read_stream(reader *r, config_model_yaml *out) {
  inferd_code rc = expect(r, YAML_STREAM_START_EVENT, "expected the start of the stream");
  if (rc == INFERD_OK) rc = next(r);
  if (rc != INFERD_OK || r->event.type == YAML_STREAM_END_EVENT) return rc; /* an empty file */
  if (r->event.type != YAML_DOCUMENT_START_EVENT) return expect(r, YAML_DOCUMENT_START_EVENT, "expected a document");
  if ((rc = next(r)) != INFERD_OK) return rc;
  if (r->event.type == YAML_MAPPING_START_EVENT)
    rc = read_mapping(r, out);
  else if (!is_null(&r->event))
    rc = core_fail(r->st, INFERD_INVALID_ARG, "%s: line %zu: expected a mapping of keys (minWorkers: 1, ...)",
                   r->source, line_of(r));
  if (rc == INFERD_OK) rc = expect(r, YAML_DOCUMENT_END_EVENT, "expected the end of the document");
  if (rc == INFERD_OK) rc = expect(r, YAML_STREAM_END_EVENT, "expected one document, found another");
  return rc;
}

inferd_code config_model_yaml_parse(const void *text, size_t size, const char *source, config_model_yaml *out,
                                    inferd_status *st) {
  *out = CONFIG_MODEL_YAML_NONE;
  if (size > CONFIG_MODEL_YAML_MAX_BYTES)
    return core_fail(st, INFERD_INVALID_ARG, "%s: %zu bytes, above the %d a model-config.yaml may have", source, size,
                     CONFIG_MODEL_YAML_MAX_BYTES);
  reader r = {.text = text, .source = source, .st = st};
  if (!yaml_parser_initialize(&r.parser)) return core_fail(st, INFERD_NO_MEMORY, "%s: out of memory", source);
  yaml_parser_set_input_string(&r.parser, text, size);
  inferd_code rc = read_stream(&r, out);
  if (r.have_event) yaml_event_delete(&r.event);
  yaml_parser_delete(&r.parser);
  if (rc != INFERD_OK) *out = CONFIG_MODEL_YAML_NONE;
  return rc;
}

inferd_code config_model_yaml_read_file(const char *path, config_model_yaml *out, inferd_status *st) {
  char *text;
  size_t size;
  inferd_code rc = config__read_file(path, CONFIG_MODEL_YAML_MAX_BYTES, "a model-config.yaml", &text, &size, st);
  if (rc == INFERD_OK) rc = config_model_yaml_parse(text, size, path, out, st);
  free(text);
  return rc;
}
