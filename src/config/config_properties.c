/*
 * config_properties.c - a lexer for Java's .properties syntax, the format of
 * TorchServe's config.properties, as java.util.Properties.load reads it:
 *
 *   - a natural line ends at \n, \r or \r\n; leading blanks (space, tab, form feed)
 *     are skipped; a line whose first non-blank is # or ! is a comment (and does not
 *     continue); a blank line is nothing;
 *   - a line ending in an odd number of backslashes continues on the next natural
 *     line, whose leading blanks are dropped (TorchServe's models={\ ...} idiom); an
 *     empty continuation line ends the logical line;
 *   - the key runs to the first unescaped '=', ':' or blank; then blanks, at most one
 *     '=' or ':', and blanks again are skipped; the rest of the line is the value;
 *   - escapes in keys and values: \t \n \r \f, \uXXXX (UTF-16, surrogate pairs joined),
 *     and \c for any other c (so "\=" "\:" "\ " "\\" "\#").
 *
 * Differences from Java, on purpose: bytes are taken as UTF-8 rather than ISO-8859-1
 * (\uXXXX is written out as UTF-8); a UTF-8 byte-order mark at the start is skipped; a
 * malformed \u escape, a lone surrogate, \u0000 or a NUL byte is an error with its line
 * (Java throws without a line, or keeps the NUL).
 *
 * Every byte of a value carries the number of the natural line it came from, so that a
 * JSON error inside a value continued over many lines (models={\ ...) names the right
 * line. Memory: two growable buffers for the logical line and its unescaped key/value,
 * reused from entry to entry; the callback borrows them until it returns.
 */
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "core/core.h"

typedef struct chars {
  char *s;
  int *lines;
  size_t len, cap;
} chars;

static bool chars_reserve(chars *c, size_t extra) {
  if (c->len + extra < c->cap) return true;
  size_t cap = c->cap ? c->cap : 256;
  while (cap <= c->len + extra) cap *= 2;
  char *s = realloc(c->s, cap);
  if (!s) return false;
  c->s = s;
  int *lines = realloc(c->lines, cap * sizeof *lines);
  if (!lines) return false;
  c->lines = lines;
  c->cap = cap;
  return true;
}

static bool chars_push(chars *c, char ch, int line) {
  if (!chars_reserve(c, 1)) return false;
  c->s[c->len] = ch;
  c->lines[c->len] = line;
  c->len++;
  c->s[c->len] = '\0';
  return true;
}

static void chars_free(chars *c) {
  free(c->s);
  free(c->lines);
}

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\f'; }

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Reads the 4 hex digits after "\u" at raw[i]; -1 when malformed. */
static long read_u4(const chars *raw, size_t i, size_t end) {
  if (end - i < 4) return -1;
  long v = 0;
  for (size_t k = 0; k < 4; k++) {
    int h = hex_value(raw->s[i + k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

static bool push_utf8(chars *out, unsigned long cp, int line) {
  char b[4];
  int n;
  if (cp < 0x80) {
    b[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    b[0] = (char)(0xC0 | (cp >> 6));
    b[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    b[0] = (char)(0xE0 | (cp >> 12));
    b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    b[0] = (char)(0xF0 | (cp >> 18));
    b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  for (int k = 0; k < n; k++)
    if (!chars_push(out, b[k], line)) return false;
  return true;
}

/* Resolves the escapes of raw[begin, end) into out (cleared first). */
static inferd_code unescape(const chars *raw, size_t begin, size_t end, chars *out, const char *source,
                            inferd_status *st) {
  out->len = 0;
  if (!chars_reserve(out, 0)) return core_fail(st, INFERD_NO_MEMORY, "%s: out of memory", source);
  out->s[0] = '\0';
  for (size_t i = begin; i < end; i++) {
    char c = raw->s[i];
    int line = raw->lines[i];
    if (c == '\\' && i + 1 < end) {
      c = raw->s[++i];
      if (c == 'u') {
        long cp = read_u4(raw, i + 1, end);
        if (cp < 0) return core_fail(st, INFERD_INVALID_ARG, "%s:%d: malformed \\uXXXX escape", source, line);
        i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate wants its low half next */
          long lo = (i + 2 < end && raw->s[i + 1] == '\\' && raw->s[i + 2] == 'u') ? read_u4(raw, i + 3, end) : -1;
          if (lo < 0xDC00 || lo > 0xDFFF)
            return core_fail(st, INFERD_INVALID_ARG, "%s:%d: \\u%04lX is half a surrogate pair", source, line, cp);
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          i += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          return core_fail(st, INFERD_INVALID_ARG, "%s:%d: \\u%04lX is half a surrogate pair", source, line, cp);
        } else if (cp == 0) {
          return core_fail(st, INFERD_INVALID_ARG, "%s:%d: \\u0000 (NUL) is not allowed", source, line);
        }
        if (!push_utf8(out, (unsigned long)cp, line)) return core_fail(st, INFERD_NO_MEMORY, "%s: out of memory", source);
        continue;
      }
      c = c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c == 'f' ? '\f' : c;
    } else if (c == '\\') {
      continue; /* a lone backslash at the very end of the input: Java drops it too */
    }
    if (!chars_push(out, c, line)) return core_fail(st, INFERD_NO_MEMORY, "%s: out of memory", source);
  }
  return INFERD_OK;
}

/* Splits one logical line into key and value, resolves escapes, hands them over. */
static inferd_code emit(const chars *raw, const char *source, chars *key, chars *value, config__entry_fn entry,
                        void *ctx, inferd_status *st) {
  size_t n = raw->len, key_end = n, value_start = n;
  bool has_separator = false, escaped = false;
  for (size_t i = 0; i < n; i++) {
    char c = raw->s[i];
    if (!escaped && (c == '=' || c == ':')) {
      key_end = i;
      value_start = i + 1;
      has_separator = true;
      break;
    }
    if (!escaped && is_blank(c)) {
      key_end = i;
      value_start = i + 1;
      break;
    }
    escaped = c == '\\' ? !escaped : false;
  }
  while (value_start < n) {
    char c = raw->s[value_start];
    if (!is_blank(c)) {
      if (has_separator || (c != '=' && c != ':')) break;
      has_separator = true;
    }
    value_start++;
  }
  inferd_code rc = unescape(raw, 0, key_end, key, source, st);
  if (rc == INFERD_OK) rc = unescape(raw, value_start, n, value, source, st);
  if (rc != INFERD_OK) return rc;
  return entry(ctx, key->s, value->s, value->len, value->lines, raw->lines[0], st);
}

inferd_code config__properties_parse(const char *text, size_t size, const char *source,
                                     config__entry_fn entry, void *ctx, inferd_status *st) {
  chars raw = {0}, key = {0}, value = {0};
  inferd_code rc = INFERD_OK;
  size_t pos = 0;
  int line = 1;
  if (size >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) pos = 3;

  while (pos < size && rc == INFERD_OK) {
    while (pos < size && is_blank(text[pos])) pos++;
    if (pos == size) break;
    char c = text[pos];
    if (c == '\n' || c == '\r') { /* blank line */
      pos += (c == '\r' && pos + 1 < size && text[pos + 1] == '\n') ? 2 : 1;
      line++;
      continue;
    }
    if (c == '#' || c == '!') { /* comment: to the end of this natural line only */
      while (pos < size && text[pos] != '\n' && text[pos] != '\r') pos++;
      continue;
    }
    raw.len = 0;
    for (;;) { /* one natural line of the logical line */
      size_t segment = raw.len;
      while (pos < size && text[pos] != '\n' && text[pos] != '\r') {
        if (text[pos] == '\0') {
          rc = core_fail(st, INFERD_INVALID_ARG, "%s:%d: NUL byte in the file", source, line);
          goto done;
        }
        if (!chars_push(&raw, text[pos], line)) {
          rc = core_fail(st, INFERD_NO_MEMORY, "%s: out of memory", source);
          goto done;
        }
        pos++;
      }
      size_t backslashes = 0;
      while (backslashes < raw.len - segment && raw.s[raw.len - 1 - backslashes] == '\\') backslashes++;
      if (pos < size) { /* consume the line end */
        pos += (text[pos] == '\r' && pos + 1 < size && text[pos + 1] == '\n') ? 2 : 1;
        line++;
      }
      if (backslashes % 2 == 0 || pos == size) break;
      raw.len--; /* the continuation backslash */
      raw.s[raw.len] = '\0';
      if (raw.len == 0) break; /* a line of only "\": the next line starts afresh (a comment there is one) */
      while (pos < size && is_blank(text[pos])) pos++;
      if (pos < size && (text[pos] == '\n' || text[pos] == '\r')) { /* empty continuation: the line ends */
        pos += (text[pos] == '\r' && pos + 1 < size && text[pos + 1] == '\n') ? 2 : 1;
        line++;
        break;
      }
    }
    if (raw.len) rc = emit(&raw, source, &key, &value, entry, ctx, st);
  }
done:
  chars_free(&raw);
  chars_free(&key);
  chars_free(&value);
  return rc;
}
