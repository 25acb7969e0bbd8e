/*
 * core_status.c - the project's one status type: names and descriptions derived from
 * INFERD_STATUS_MAP, and the helpers that write one-line messages into a caller-owned
 * inferd_status.
 */
#include <stdio.h>
#include <stdlib.h>
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

static bool utf8_continuation(char c) { return ((unsigned char)c & 0xC0) == 0x80; }

/* Copies text (len bytes) into the status's message. A text too long for it loses its
 * middle, not its end: what went wrong comes last ("node '<a 2000-byte name>' (Einsum):
 * op not supported"), where it is ("<a long path>: ..."), first. No UTF-8 character is
 * cut in two at either side of the "...". */
static void message_fit(inferd_status *st, const char *text, size_t len) {
  char *to = st->message;
  if (len < sizeof st->message) {
    memcpy(to, text, len);
    to[len] = '\0';
  } else {
    size_t head = (sizeof st->message - 4) / 2, from = len - (sizeof st->message - 4 - head);
    for (int i = 0; i < 3 && head > 0 && utf8_continuation(text[head]); i++) head--;
    for (int i = 0; i < 3 && from < len && utf8_continuation(text[from]); i++) from++;
    memcpy(to, text, head);
    memcpy(to + head, "...", 3);
    memcpy(to + head + 3, text + from, len - from);
    to[head + 3 + len - from] = '\0';
  }
  one_line(to);
}

/* Formats fmt, then appends `suffix` (NULL: none), into the status's message. */
static void message_set(inferd_status *st, const char *suffix, const char *fmt, va_list ap) {
  char small[1024], *text = small;
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  size_t head = n > 0 ? (size_t)n : 0, extra = suffix ? strlen(suffix) : 0; /* suffix: at most a message */
  if (head + extra >= sizeof small) {
    char *big = malloc(head + extra + 1);
    if (big) {
      vsnprintf(big, head + 1, fmt, again);
      text = big;
    } else if (head > sizeof small - 1 - extra) { /* out of memory: keep what fits */
      head = sizeof small - 1 - extra;
    }
  }
  va_end(again);
  memcpy(text + head, suffix ? suffix : "", extra);
  message_fit(st, text, head + extra);
  if (text != small) free(text);
}

inferd_code core_fail(inferd_status *st, inferd_code code, const char *fmt, ...) {
  if (st) {
    va_list ap;
    va_start(ap, fmt);
    st->code = code;
    message_set(st, NULL, fmt, ap);
    va_end(ap);
  }
  return code;
}

void core_status_prefix(inferd_status *st, const char *fmt, ...) {
  if (!st) return;
  char suffix[INFERD_STATUS_MESSAGE_MAX + 2] = ": ";
  memcpy(suffix + 2, st->message, sizeof st->message);
  suffix[sizeof suffix - 1] = '\0';
  va_list ap;
  va_start(ap, fmt);
  message_set(st, suffix, fmt, ap);
  va_end(ap);
}

void core_status_ok(inferd_status *st) {
  if (!st) return;
  st->code = INFERD_OK;
  st->message[0] = '\0';
}
