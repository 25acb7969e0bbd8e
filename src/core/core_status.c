/*
 * core_status.c - the project's one status type: names and descriptions derived from
 * INFERD_STATUS_MAP, and the helpers that write one-line messages into a caller-owned
 * inferd_status.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"

static const char *const code_names[] = {
#define X(name, text) #name,
    INFERD_STATUS_MAP(X)
#undef X
};
static const char *const code_texts[] = {
#define X(name, text) text,
    INFERD_STATUS_MAP(X)
#undef X
};
_Static_assert(CORE_ARRAY_LEN(code_names) == INFERD_CODE_COUNT, "status table size");

const char *inferd_code_name(inferd_code code) {
  return (unsigned)code < INFERD_CODE_COUNT ? code_names[code] : "UNKNOWN";
}

const char *inferd_code_str(inferd_code code) {
  return (unsigned)code < INFERD_CODE_COUNT ? code_texts[code] : "unknown status";
}

static void one_line(char *s) {
  for (; *s; s++)
    if (*s == '\n' || *s == '\r') *s = ' ';
}

inferd_code core_fail(inferd_status *st, inferd_code code, const char *fmt, ...) {
  if (st) {
    va_list ap;
    va_start(ap, fmt);
    st->code = code;
    vsnprintf(st->message, sizeof st->message, fmt, ap);
    va_end(ap);
    one_line(st->message);
  }
  return code;
}

void core_status_prefix(inferd_status *st, const char *fmt, ...) {
  if (!st) return;
  char prefix[INFERD_STATUS_MESSAGE_MAX], old[INFERD_STATUS_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, st->message, sizeof old);
  size_t n = strnlen(prefix, sizeof prefix - 3);
  memcpy(st->message, prefix, n);
  memcpy(st->message + n, ": ", 2);
  size_t room = sizeof st->message - n - 3;
  size_t m = strnlen(old, room);
  memcpy(st->message + n + 2, old, m);
  st->message[n + 2 + m] = '\0';
  one_line(st->message);
}

void core_status_ok(inferd_status *st) {
  if (!st) return;
  st->code = INFERD_OK;
  st->message[0] = '\0';
}
