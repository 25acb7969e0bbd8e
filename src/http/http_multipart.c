/*
 * http_multipart.c - a small, strict multipart/form-data reader (RFC 7578 / RFC 2046).
 *
 * TorchServe clients send an image either as the raw body or as a form field named
 * `data` or `file` (`curl -F data=@kitten.jpg`, `requests.post(files={"data": f})`).
 * This file finds that field without copying: the part it returns points into the
 * body h2o already holds.
 *
 * Design: one pass over the body with memmem for the delimiter "\r\n--BOUNDARY".
 *   body      := [preamble CRLF] "--" B padding CRLF part *(CRLF "--" B padding CRLF part)
 *                CRLF "--" B "--" [epilogue]            (preamble only if the body does
 *                                                         not start with "--" B)
 *   part      := *(header CRLF) CRLF content             (headers: 8 KiB at most)
 *   padding   := *(SP / HTAB)
 * Strict means: CRLF line ends only, every header line has a colon, no obsolete line
 * folding, every part has Content-Disposition: form-data with a name, and the close
 * delimiter must be there (a truncated upload is an error, not a short image).
 *
 * Invariant: every read is bounds-checked against [body, body + size); the functions
 * are pure (no allocation, no globals) and safe on any thread. tests/fuzz/
 * fuzz_multipart.c feeds them arbitrary bytes.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "http/http.h"

enum { MULTIPART_HEADERS_MAX = 8 << 10, MULTIPART_BOUNDARY_MAX = 70 };

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

static bool ieq(const char *a, size_t alen, const char *b) {
  size_t blen = strlen(b);
  if (alen != blen) return false;
  for (size_t i = 0; i < alen; i++)
    if (lower((unsigned char)a[i]) != lower((unsigned char)b[i])) return false;
  return true;
}

static bool is_space(char c) { return c == ' ' || c == '\t'; }

/* RFC 2046 bchars, plus space when not last (checked by the caller). */
static bool is_bchar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c != '\0' && strchr("'()+_,-./:=? ", c) != NULL);
}

/* RFC 7230 tchar: what may appear in an unquoted parameter value. */
static bool is_tchar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* A cursor over [p, end) for header values: "type; a=b; c=\"d\"". */
typedef struct cursor {
  const char *p, *end;
} cursor;

static void skip_spaces(cursor *c) {
  while (c->p < c->end && is_space(*c->p)) c->p++;
}

static size_t take_token(cursor *c) {
  const char *start = c->p;
  while (c->p < c->end && is_tchar(*c->p)) c->p++;
  return (size_t)(c->p - start);
}

/* Reads the next ";name=value" parameter. Returns 1 with name/value set, 0 at the end,
 * -1 when malformed. A quoted value is returned without its quotes and with its
 * backslash escapes as they are (a quoted-pair: `\` and any character but CR or LF;
 * Python's requests escapes a filename's backslashes that way). Only field names and
 * the boundary are ever compared, and neither holds a backslash, so nothing decodes
 * them. */
static int next_param(cursor *c, const char **name, size_t *name_len, const char **value,
                      size_t *value_len) {
  skip_spaces(c);
  if (c->p == c->end) return 0;
  if (*c->p != ';') return -1;
  c->p++;
  skip_spaces(c);
  *name = c->p;
  if ((*name_len = take_token(c)) == 0) return -1;
  if (c->p == c->end || *c->p != '=') return -1;
  c->p++;
  if (c->p < c->end && *c->p == '"') {
    const char *start = ++c->p;
    while (c->p < c->end && *c->p != '"') {
      if (*c->p == '\r' || *c->p == '\n') return -1;
      if (*c->p == '\\' && (++c->p == c->end || *c->p == '\r' || *c->p == '\n')) return -1;
      c->p++;
    }
    if (c->p == c->end) return -1;
    *value = start;
    *value_len = (size_t)(c->p - start);
    c->p++; /* the closing quote */
    return 1;
  }
  *value = c->p;
  *value_len = take_token(c);
  return *value_len > 0 ? 1 : -1;
}

size_t http_multipart_boundary(const char *content_type, size_t len, const char **boundary) {
  cursor c = {content_type, content_type + len};
  skip_spaces(&c);
  const char *type = c.p;
  while (c.p < c.end && *c.p != ';' && !is_space(*c.p)) c.p++;
  if (!ieq(type, (size_t)(c.p - type), "multipart/form-data")) return 0;
  const char *name, *value;
  size_t name_len, value_len;
  size_t found = 0;
  int r;
  while ((r = next_param(&c, &name, &name_len, &value, &value_len)) == 1) {
    if (!ieq(name, name_len, "boundary")) continue;
    if (found || value_len == 0 || value_len > MULTIPART_BOUNDARY_MAX || value[value_len - 1] == ' ')
      return 0;
    for (size_t i = 0; i < value_len; i++)
      if (!is_bchar(value[i])) return 0;
    *boundary = value;
    found = value_len;
  }
  return r == 0 ? found : 0;
}

/* Parses a Content-Disposition value; sets the field name. Returns false unless it is
 * "form-data" with exactly one name parameter. */
static bool disposition_name(const char *value, size_t len, const char **field, size_t *field_len) {
  cursor c = {value, value + len};
  skip_spaces(&c);
  const char *type = c.p;
  size_t type_len = take_token(&c);
  if (!ieq(type, type_len, "form-data")) return false;
  const char *name, *v;
  size_t name_len, v_len;
  bool found = false;
  int r;
  while ((r = next_param(&c, &name, &name_len, &v, &v_len)) == 1) {
    if (!ieq(name, name_len, "name")) continue;
    if (found) return false;
    *field = v;
    *field_len = v_len;
    found = true;
  }
  return r == 0 && found;
}

/* Parses the header block [p, end) (without its final empty line): lines "Name: value"
 * separated by CRLF. Sets the form field name. */
static inferd_code parse_part_headers(const char *p, const char *end, int index, const char **field,
                                      size_t *field_len, inferd_status *st) {
  bool have_name = false;
  while (p < end) {
    const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
    const char *line_end = eol ? eol : end;
    if (is_space(*p))
      return core_fail(st, INFERD_INVALID_ARG, "multipart part %d: folded header lines are not accepted", index);
    const char *colon = memchr(p, ':', (size_t)(line_end - p));
    if (!colon || colon == p)
      return core_fail(st, INFERD_INVALID_ARG, "multipart part %d: header line without a name and a colon", index);
    for (const char *q = p; q < line_end; q++)
      if (*q == '\r' || *q == '\n' || *q == '\0')
        return core_fail(st, INFERD_INVALID_ARG, "multipart part %d: control character in a header", index);
    if (ieq(p, (size_t)(colon - p), "content-disposition")) {
      if (have_name)
        return core_fail(st, INFERD_INVALID_ARG, "multipart part %d: two Content-Disposition headers", index);
      if (!disposition_name(colon + 1, (size_t)(line_end - colon - 1), field, field_len))
        return core_fail(st, INFERD_INVALID_ARG,
                         "multipart part %d: Content-Disposition must be form-data with one name", index);
      have_name = true;
    }
    p = eol ? eol + 2 : end;
  }
  if (!have_name)
    return core_fail(st, INFERD_INVALID_ARG, "multipart part %d: no Content-Disposition header", index);
  return INFERD_OK;
}

/* After a delimiter at p: "--" (close, returns 1), or padding CRLF (returns 0, *next set
 * past it), else -1. */
static int after_delimiter(const char *p, const char *end, const char **next) {
  if (end - p >= 2 && p[0] == '-' && p[1] == '-') return 1;
  while (p < end && is_space(*p)) p++;
  if (end - p >= 2 && p[0] == '\r' && p[1] == '\n') {
    *next = p + 2;
    return 0;
  }
  return -1;
}

inferd_code http_multipart_find(const char *body, size_t size, const char *boundary,
                                size_t boundary_len, const char *const *names, int name_count,
                                http_multipart_part *part, inferd_status *st) {
  if (boundary_len == 0 || boundary_len > MULTIPART_BOUNDARY_MAX)
    return core_fail(st, INFERD_INVALID_ARG, "multipart boundary must have 1 to 70 characters");
  /* "\r\n--" + boundary: the delimiter between parts. */
  char delim[4 + MULTIPART_BOUNDARY_MAX];
  memcpy(delim, "\r\n--", 4);
  memcpy(delim + 4, boundary, boundary_len);
  size_t delim_len = 4 + boundary_len;
  const char *end = body + size;

  /* The first delimiter may come without its CRLF (at the very start of the body). */
  const char *p;
  if (size >= delim_len - 2 && memcmp(body, delim + 2, delim_len - 2) == 0) {
    p = body + delim_len - 2;
  } else {
    const char *d = size ? memmem(body, size, delim, delim_len) : NULL;
    if (!d) return core_fail(st, INFERD_INVALID_ARG, "multipart body does not contain its boundary");
    p = d + delim_len;
  }

  int best_rank = name_count;
  for (int index = 0;; index++) {
    const char *next;
    int r = after_delimiter(p, end, &next);
    if (r == 1) break;
    if (r < 0) return core_fail(st, INFERD_INVALID_ARG, "multipart boundary line %d is malformed", index);
    p = next;
    /* The header block ends at the first empty line (or at once when there are none). */
    const char *headers_end;
    const char *content;
    if (end - p >= 2 && p[0] == '\r' && p[1] == '\n') {
      headers_end = p;
      content = p + 2;
    } else {
      size_t window = CORE_MIN((size_t)(end - p), (size_t)MULTIPART_HEADERS_MAX);
      const char *blank = memmem(p, window, "\r\n\r\n", 4);
      if (!blank)
        return core_fail(st, INFERD_INVALID_ARG, "multipart part %d: headers not ended by an empty line within %d bytes",
                         index, MULTIPART_HEADERS_MAX);
      headers_end = blank;
      content = blank + 4;
    }
    const char *field = NULL;
    size_t field_len = 0;
    inferd_code code = parse_part_headers(p, headers_end, index, &field, &field_len, st);
    if (code != INFERD_OK) return code;
    const char *d = memmem(content, (size_t)(end - content), delim, delim_len);
    if (!d) return core_fail(st, INFERD_INVALID_ARG, "multipart part %d is truncated: no boundary after it", index);
    for (int rank = 0; rank < best_rank; rank++) {
      if (strlen(names[rank]) == field_len && memcmp(names[rank], field, field_len) == 0) {
        best_rank = rank;
        *part = (http_multipart_part){field, field_len, content, (size_t)(d - content)};
        break;
      }
    }
    p = d + delim_len;
  }
  if (best_rank == name_count) {
    char wanted[128] = "";
    for (int i = 0, n = 0; i < name_count && n < (int)sizeof wanted; i++)
      n += snprintf(wanted + n, sizeof wanted - (size_t)n, "%s'%s'", i == 0 ? "" : i + 1 == name_count ? " or " : ", ",
                    names[i]);
    return core_fail(st, INFERD_NOT_FOUND, "multipart body has no field %s", wanted);
  }
  return INFERD_OK;
}
