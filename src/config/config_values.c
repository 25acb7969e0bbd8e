/*
 * config_values.c - the values of config.properties that have a structure of their
 * own: listening addresses, load_models, models={...} (JSON, parsed with jansson),
 * cpu_launcher_args and allowed_urls.
 *
 * Each setter builds the new value on the side and replaces the old one only when the
 * whole value is valid, so a failed set leaves the config as it was (and frees nothing
 * twice). The per-model fields of models={...} are a table of their own (model_fields)
 * tied to the global key whose range they share: batchSize is checked against
 * batch_size's min..max, and takes its value when absent (config__finish_models).
 */
#include <ctype.h>
#include <jansson.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config_internal.h"
#include "core/core.h"

/* ==== small helpers ==================================================================== */

bool config__parse_int64(const char *s, int64_t min, int64_t max, int64_t *out) {
  const char *p = s;
  bool negative = false;
  if (*p == '+' || *p == '-') negative = *p++ == '-';
  if (!isdigit((unsigned char)*p)) return false;
  uint64_t v = 0;
  for (; isdigit((unsigned char)*p); p++) {
    uint64_t digit = (uint64_t)(*p - '0');
    if (v > ((uint64_t)INT64_MAX - digit) / 10) return false; /* checked before it wraps: 2^64 + 1 is not 1 */
    v = v * 10 + digit;
  }
  if (*p) return false;
  int64_t x = negative ? -(int64_t)v : (int64_t)v;
  if (x < min || x > max) return false;
  *out = x;
  return true;
}

bool config_valid_model_name(const char *name) {
  if (!name || !isalnum((unsigned char)name[0])) return false;
  for (const char *p = name; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.') return false;
  return strlen(name) <= 255;
}

/* A version goes into URLs (/predictions/m/1.0) like a name does. */
static bool valid_version(const char *v) { return config_valid_model_name(v); }

static char *dup_range(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

/* ==== allowed_urls ======================================================================== */

/* glibc's regcomp copies what a repetition repeats: x{n} is n copies of x, and x+ is
 * x x*, so "((a{1000}){1000}){1000}" took 24 s and 4 GB before it failed, and 30 nested
 * "(...)+" would be 2^30 copies. An item is refused when the parts it expands to, counted
 * as regcomp makes them, pass URL_PATTERN_PARTS ((a{255}){255}: 65,536, 0.1 s), when it
 * is longer than URL_PATTERN_MAX characters, or when a ')' closes no '('. */
enum { URL_PATTERN_MAX = 1024, URL_PATTERN_PARTS = 1 << 16 };

/* Past a bracket expression, from just after its '[': "[]a]" and "[^]a]" hold a ']',
 * and so may "[:alpha:]", "[.x.]" and "[=e=]" inside it. */
static size_t skip_bracket(const char *s, size_t len, size_t i) {
  if (i < len && s[i] == '^') i++;
  if (i < len && s[i] == ']') i++;
  while (i < len && s[i] != ']') {
    if (s[i] == '[' && i + 1 < len && (s[i + 1] == ':' || s[i + 1] == '.' || s[i + 1] == '=')) {
      const char end[2] = {s[i + 1], ']'};
      const char *at = memmem(s + i + 2, len - (i + 2), end, 2);
      i = at ? (size_t)(at - s) + 2 : len;
    } else {
      i++;
    }
  }
  return i < len ? i + 1 : len;
}

/* The parts of s[*i..] up to an unmatched ')' or the end (left at it), capped just
 * above URL_PATTERN_PARTS. */
static uint64_t pattern_parts(const char *s, size_t len, size_t *i, int depth) {
  const uint64_t cap = URL_PATTERN_PARTS + 1;
  uint64_t total = 0, last = 0; /* last: the parts of the atom a quantifier repeats */
  while (*i < len && s[*i] != ')' && total < cap) {
    char c = s[(*i)++];
    if (c == '+') { /* x+ is x x* */
      total += last;
      last = CORE_MIN(2 * last, cap);
    } else if (c == '{' && *i < len && isdigit((unsigned char)s[*i])) { /* x{n}: n copies */
      uint64_t n = 0;
      for (; *i < len && isdigit((unsigned char)s[*i]); (*i)++) n = CORE_MIN(n * 10 + (uint64_t)(s[*i] - '0'), cap);
      const char *close = memchr(s + *i, '}', len - *i);
      *i = close ? (size_t)(close - s) + 1 : len;
      total += last * (n > 0 ? n - 1 : 0);
      last = CORE_MIN(last * n, cap);
    } else if (c != '*' && c != '?' && c != '|') { /* an atom */
      if (c == '(') {
        last = depth < 32 ? pattern_parts(s, len, i, depth + 1) + 1 : cap;
        if (*i < len) (*i)++; /* its ')' */
      } else {
        if (c == '[') *i = skip_bracket(s, len, *i);
        if (c == '\\' && *i < len) (*i)++;
        last = 1;
      }
      total += last;
    }
  }
  return CORE_MIN(total, cap);
}

/* Why an item of allowed_urls is refused before regcomp sees it, or NULL. */
static const char *url_pattern_refused(const char *item, size_t len) {
  if (len > URL_PATTERN_MAX) return "longer than 1024 characters";
  size_t i = 0;
  uint64_t parts = pattern_parts(item, len, &i, 0);
  if (parts > URL_PATTERN_PARTS)
    return "regcomp would expand it to more than 65536 parts (x{n} is n copies of x, x+ two)";
  /* a ')' with no '(' would close the group the item is wrapped in ("^(" item ")$") */
  return i < len ? "a ')' closes no '('" : NULL;
}

/* Compiles one item of allowed_urls (not NUL-terminated) to match a whole url, any case. */
static int compile_url_pattern(const char *item, size_t len, regex_t *re) {
  if (url_pattern_refused(item, len)) return REG_ESIZE;
  char *anchored = malloc(len + 5);
  if (!anchored) return REG_ESPACE;
  snprintf(anchored, len + 5, "^(%.*s)$", (int)len, item);
  int rc = regcomp(re, anchored, REG_EXTENDED | REG_ICASE | REG_NOSUB);
  free(anchored);
  return rc;
}

/* The next comma-separated item of allowed_urls: *item and *len, *rest moved past it
 * (NULL after the last); false when there is none. */
static bool next_url_item(const char **rest, const char **item, size_t *len) {
  if (!*rest) return false;
  const char *end = strchr(*rest, ',');
  *item = *rest;
  *len = end ? (size_t)(end - *rest) : strlen(*rest);
  *rest = end ? end + 1 : NULL;
  return true;
}

bool config_url_allowed(const char *patterns, const char *url) {
  const char *item;
  size_t len;
  for (const char *rest = patterns; next_url_item(&rest, &item, &len);) {
    regex_t re;
    if (compile_url_pattern(item, len, &re) == 0) {
      bool match = regexec(&re, url, 0, NULL, 0) == 0;
      regfree(&re);
      if (match) return true;
    }
  }
  return false;
}

inferd_code config__set_url_patterns(char **out, const char *key, const char *value, const config__where *w,
                                     inferd_status *st) {
  const char *item;
  size_t len;
  for (const char *rest = *value ? value : NULL; next_url_item(&rest, &item, &len);) {
    regex_t re;
    int rc = compile_url_pattern(item, len, &re);
    const char *refused = rc == REG_ESIZE ? url_pattern_refused(item, len) : NULL;
    if (refused) {
      return config__fail(st, INFERD_INVALID_ARG, w, key, "'%.*s': %s", (int)CORE_MIN(len, 200), item, refused);
    } else if (rc != 0) {
      char why[128];
      regerror(rc, NULL, why, sizeof why);
      return config__fail(st, INFERD_INVALID_ARG, w, key, "'%.*s' is not a regular expression (POSIX extended): %s",
                          (int)CORE_MIN(len, 200), item, why);
    }
    regfree(&re);
  }
  char *copy = strdup(value); /* "" stays "": no url is allowed (unset is the default) */
  if (!copy) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  free(*out);
  *out = copy;
  return INFERD_OK;
}

/* ==== addresses =========================================================================== */

static bool host_char(char c) { return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_'; }

/* The port of an address that gives none: TorchServe's Connector.parse takes the API's
 * own (management 8081, https 8444; metrics 8082, https 8445) and 80 or 443 for the
 * inference API, so "http://0.0.0.0" is a different port for each key. */
static int default_port(const char *key, bool https) {
  if (strcmp(key, "management_address") == 0) return https ? 8444 : 8081;
  if (strcmp(key, "metrics_address") == 0) return https ? 8445 : 8082;
  return https ? 443 : 80;
}

inferd_code config__set_address(config_address *out, const char *key, const char *value,
                                const config__where *w, inferd_status *st) {
  config_address a = {0};
  const char *p = value;
  if (strncmp(p, "unix:", 5) == 0) {
    p += 5;
    size_t n = strlen(p);
    if (n == 0 || n >= 108) /* sun_path holds 108 bytes with the NUL */
      return config__fail(st, INFERD_INVALID_ARG, w, key, "unix socket path must have 1..107 bytes, got %zu", n);
    strcpy(a.scheme, "unix");
    memcpy(a.host, p, n + 1);
    *out = a;
    return INFERD_OK;
  }
  if (strncasecmp(p, "http://", 7) == 0) {
    strcpy(a.scheme, "http");
    p += 7;
  } else if (strncasecmp(p, "https://", 8) == 0) {
    strcpy(a.scheme, "https");
    p += 8;
  } else if (strstr(p, "://")) {
    return config__fail(st, INFERD_INVALID_ARG, w, key, "'%s': only http://, https:// and unix: addresses", value);
  } else {
    strcpy(a.scheme, "http");
  }
  a.port = default_port(key, strcmp(a.scheme, "https") == 0);
  const char *host = p, *host_end;
  if (*p == '[') { /* [IPv6] */
    host = ++p;
    while (*p && (isxdigit((unsigned char)*p) || *p == ':' || *p == '.')) p++;
    if (*p != ']' || p == host)
      return config__fail(st, INFERD_INVALID_ARG, w, key, "'%s': malformed [IPv6] host", value);
    host_end = p++;
  } else {
    while (host_char(*p)) p++;
    host_end = p;
  }
  size_t host_len = (size_t)(host_end - host);
  if (host_len == 0) return config__fail(st, INFERD_INVALID_ARG, w, key, "'%s': no host", value);
  if (host_len >= sizeof a.host) return config__fail(st, INFERD_INVALID_ARG, w, key, "host name too long");
  memcpy(a.host, host, host_len);
  a.host[host_len] = '\0';
  if (*p == ':') {
    p++;
    const char *digits = p;
    while (isdigit((unsigned char)*p)) p++;
    char port[8];
    size_t n = (size_t)(p - digits);
    int64_t v;
    if (n == 0 || n > 5) return config__fail(st, INFERD_INVALID_ARG, w, key, "'%s': port must be 0..65535", value);
    memcpy(port, digits, n);
    port[n] = '\0';
    if (!config__parse_int64(port, 0, 65535, &v))
      return config__fail(st, INFERD_INVALID_ARG, w, key, "'%s': port must be 0..65535", value);
    a.port = (int)v;
  }
  if (*p == '/') p++; /* "http://127.0.0.1:8080/" */
  if (*p) return config__fail(st, INFERD_INVALID_ARG, w, key, "'%s': unexpected '%s' after host and port", value, p);
  *out = a;
  return INFERD_OK;
}

/* ==== load_models ========================================================================== */

void config__free_load_models(config_load_models *v) {
  for (int i = 0; i < v->count; i++) {
    free(v->items[i].name);
    free(v->items[i].path);
  }
  free(v->items);
  free(v->text);
  memset(v, 0, sizeof *v);
}

static const char *trim(const char *s, const char *end, const char **trim_end) {
  while (s < end && isspace((unsigned char)*s)) s++;
  while (end > s && isspace((unsigned char)end[-1])) end--;
  *trim_end = end;
  return s;
}

inferd_code config__set_load_models(config_server *cfg, config_load_models *out, const char *key, const char *value,
                                    const config__where *w, inferd_status *st) {
  config_load_models v = {0};
  inferd_code rc = INFERD_OK;
  if (!*value) { /* nothing to load */
    config__free_load_models(out);
    return INFERD_OK;
  }
  if (!(v.text = strdup(value))) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  int n = 1;
  for (const char *p = value; *p; p++) n += *p == ',';
  if (!(v.items = calloc((size_t)n, sizeof *v.items))) {
    rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
    goto fail;
  }
  for (const char *p = value;;) {
    const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p), *item_end;
    const char *item = trim(p, end, &item_end);
    if (item == item_end) {
      /* TorchServe splits on ',' and drops "a.mar,"'s empty last item; an empty one
       * between two only logs a failed load there */
      if (w->line)
        config__warn(cfg, "%s:%d: %s: empty item in '%s' (skipped)", w->source, w->line, key, value);
      else
        config__warn(cfg, "%s: %s: empty item in '%s' (skipped)", w->source, key, value);
    } else if ((size_t)(item_end - item) == 3 && strncasecmp(item, "all", 3) == 0) {
      v.all = true;
    } else {
      config_load_model *m = &v.items[v.count++];
      /* "name=path" when what precedes '=' is a valid model name, else all of it is
       * the path (a URL may hold '=' in its query) */
      const char *eq = memchr(item, '=', (size_t)(item_end - item));
      char *name = eq ? dup_range(item, (size_t)(eq - item)) : NULL;
      if (eq && !name) {
        rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
        goto fail;
      }
      if (name && config_valid_model_name(name)) {
        m->name = name;
        item = eq + 1;
      } else {
        free(name);
      }
      if (item == item_end) {
        rc = config__fail(st, INFERD_INVALID_ARG, w, key, "model '%s' has no file", m->name);
        goto fail;
      }
      if (!(m->path = dup_range(item, (size_t)(item_end - item)))) {
        rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
        goto fail;
      }
    }
    if (!comma) break;
    p = comma + 1;
  }
  if (v.all && v.count)
    rc = config__fail(st, INFERD_INVALID_ARG, w, key, "'all' cannot be combined with other models in '%s'", value);
  if (rc != INFERD_OK) goto fail;
  config__free_load_models(out);
  *out = v;
  return INFERD_OK;
fail:
  config__free_load_models(&v);
  return rc;
}

/* ==== models={...} ============================================================================== */

/* The fields of one model version; `global` names the key whose range they share and
 * whose value they take when absent. */
static const struct model_field {
  const char *json;
  size_t offset;
  const char *global;
} model_fields[] = {
    {"batchSize", offsetof(config_model, batch_size), "batch_size"},
    {"maxBatchDelay", offsetof(config_model, max_batch_delay_ms), "max_batch_delay"},
    {"responseTimeout", offsetof(config_model, response_timeout_s), "default_response_timeout"},
    {"minWorkers", offsetof(config_model, min_workers), "default_workers_per_model"},
    {"maxWorkers", offsetof(config_model, max_workers), "default_workers_per_model"},
};

/* The table's row for a global key (config_table.c). */
const config__option *config__find_option(const char *name);

int *config__model_field(config_model *m, const char *name, int64_t *min, int64_t *max) {
  for (size_t i = 0; i < CORE_ARRAY_LEN(model_fields); i++) {
    if (strcmp(name, model_fields[i].json) != 0) continue;
    const config__option *range = config__find_option(model_fields[i].global);
    *min = range->min;
    *max = range->max;
    return (int *)((char *)m + model_fields[i].offset);
  }
  return NULL;
}

bool config_precision_parse(const char *text, size_t len, int *out) {
  if (len == 4 && memcmp(text, "fp32", 4) == 0) *out = INFERD_PRECISION_FP32;
  else if (len == 4 && memcmp(text, "bf16", 4) == 0) *out = INFERD_PRECISION_BF16;
  else return false;
  return true;
}

const char *config_precision_name(int precision) { return precision == INFERD_PRECISION_BF16 ? "bf16" : "fp32"; }

void config__free_models(config_models *v) {
  for (int i = 0; i < v->count; i++) {
    free(v->items[i].name);
    free(v->items[i].version);
    free(v->items[i].mar_name);
  }
  free(v->items);
  free(v->json);
  memset(v, 0, sizeof *v);
}

/* The line of the file that holds byte `position` of the value. */
static int line_at(const config__where *w, size_t position, size_t size) {
  if (!w->value_lines || size == 0) return w->line;
  return w->value_lines[position < size ? position : size - 1];
}

static inferd_code parse_model_version(config_server *cfg, config_model *m, json_t *params, const config__where *w,
                                       const char *key, inferd_status *st) {
  m->batch_size = m->max_batch_delay_ms = m->response_timeout_s = m->min_workers = m->max_workers = -1;
  m->precision = -1;
  if (!json_is_object(params))
    return config__fail(st, INFERD_INVALID_ARG, w, key, "'%s' version '%s': expected an object", m->name, m->version);
  const char *field;
  json_t *v;
  json_object_foreach(params, field, v) {
    if (strcmp(field, "marName") == 0) {
      if (!json_is_string(v) || !json_string_length(v))
        return config__fail(st, INFERD_INVALID_ARG, w, key, "'%s' version '%s': marName must be a file name",
                            m->name, m->version);
      if (!(m->mar_name = strdup(json_string_value(v)))) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
      continue;
    }
    if (strcmp(field, "defaultVersion") == 0) {
      if (!json_is_boolean(v))
        return config__fail(st, INFERD_INVALID_ARG, w, key, "'%s' version '%s': defaultVersion must be true or false",
                            m->name, m->version);
      m->default_version = json_is_true(v);
      continue;
    }
    if (strcmp(field, "precision") == 0) {
      if (!json_is_string(v) || !config_precision_parse(json_string_value(v), json_string_length(v), &m->precision))
        return config__fail(st, INFERD_INVALID_ARG, w, key, "'%s' version '%s': precision must be \"fp32\" or \"bf16\"",
                            m->name, m->version);
      continue;
    }
    int64_t min, max, x;
    int *target = config__model_field(m, field, &min, &max);
    if (!target) {
      config__warn(cfg, "%s:%d: %s: '%s' version '%s': unknown field '%s' (ignored)", w->source, w->line, key,
                   m->name, m->version, field);
      continue;
    }
    /* TorchServe reads these with Gson's getAsInt, which takes "8" as well as 8 */
    bool ok = json_is_integer(v)  ? (x = json_integer_value(v), x >= min && x <= max)
              : json_is_string(v) ? config__parse_int64(json_string_value(v), min, max, &x)
                                  : false;
    if (!ok)
      return config__fail(st, INFERD_INVALID_ARG, w, key, "'%s' version '%s': %s must be an integer in %lld..%lld",
                          m->name, m->version, field, (long long)min, (long long)max);
    *target = (int)x;
  }
  return INFERD_OK;
}

inferd_code config__set_models(config_server *cfg, config_models *out, const char *key, const char *value,
                               const config__where *w, inferd_status *st) {
  config_models v = {0};
  inferd_code rc = INFERD_OK;
  size_t size = strlen(value);
  if (size == 0) {
    config__free_models(out);
    return INFERD_OK;
  }
  json_error_t err;
  json_t *root = json_loadb(value, size, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    config__where at = *w;
    at.line = line_at(w, (size_t)err.position, size);
    return config__fail(st, INFERD_INVALID_ARG, &at, key, "invalid JSON (value line %d, column %d): %s", err.line,
                        err.column, err.text);
  }
  if (!json_is_object(root)) {
    rc = config__fail(st, INFERD_INVALID_ARG, w, key, "expected a JSON object {\"model\": {\"version\": {...}}}");
    goto done;
  }
  size_t total = 0;
  const char *name, *version;
  json_t *versions, *params;
  json_object_foreach(root, name, versions) {
    if (!json_is_object(versions) || json_object_size(versions) == 0) {
      rc = config__fail(st, INFERD_INVALID_ARG, w, key, "'%s': expected an object of versions", name);
      goto done;
    }
    total += json_object_size(versions);
  }
  if (!(v.json = strdup(value)) || (total && !(v.items = calloc(total, sizeof *v.items)))) {
    rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
    goto done;
  }
  json_object_foreach(root, name, versions) {
    if (!config_valid_model_name(name)) { /* (jansson refuses NUL bytes in keys) */
      rc = config__fail(st, INFERD_INVALID_ARG, w, key, "'%s' is not a valid model name ([A-Za-z0-9][A-Za-z0-9_.-]*)",
                        name);
      goto done;
    }
    json_object_foreach(versions, version, params) {
      config_model *m = &v.items[v.count++];
      if (!(m->name = strdup(name)) || !(m->version = strdup(version))) {
        rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
        goto done;
      }
      if (!valid_version(version)) {
        rc = config__fail(st, INFERD_INVALID_ARG, w, key, "'%s': '%s' is not a valid version", name, version);
        goto done;
      }
      if ((rc = parse_model_version(cfg, m, params, w, key, st)) != INFERD_OK) goto done;
    }
  }
  config__free_models(out);
  *out = v;
  v = (config_models){0};
done:
  config__free_models(&v);
  json_decref(root);
  return rc;
}

inferd_code config__finish_models(config_server *cfg, inferd_status *st) {
  config_models *models = &cfg->models;
  for (int i = 0; i < models->count; i++) {
    config_model *m = &models->items[i];
    bool min_given = m->min_workers >= 0, max_given = m->max_workers >= 0;
    for (size_t k = 0; k < CORE_ARRAY_LEN(model_fields); k++) {
      int *field = (int *)((char *)m + model_fields[k].offset);
      if (*field < 0) *field = *(const int *)((const char *)cfg + config__find_option(model_fields[k].global)->offset);
    }
    /* 0 workers means "automatic", which any bound admits */
    if (min_given && max_given && m->max_workers > 0 && m->min_workers > m->max_workers)
      return core_fail(st, INFERD_INVALID_ARG, "models: '%s' version '%s': minWorkers %d exceeds maxWorkers %d",
                       m->name, m->version, m->min_workers, m->max_workers);
    if (!min_given && max_given && m->max_workers > 0 && m->min_workers > m->max_workers) m->min_workers = m->max_workers;
    if (!max_given && m->min_workers > m->max_workers) m->max_workers = m->min_workers;
    for (int j = 0; j < i; j++)
      if (m->default_version && models->items[j].default_version && strcmp(models->items[j].name, m->name) == 0)
        return core_fail(st, INFERD_INVALID_ARG, "models: '%s' has two default versions, '%s' and '%s'", m->name,
                         models->items[j].version, m->version);
  }
  return INFERD_OK;
}

/* ==== cpu_launcher_args ==================================================================== */

/* The arguments of IPEX's launcher that inferd's placement honours. */
static const struct launcher_flag {
  const char *name; /* without the leading "--"; '-' and '_' are the same */
  size_t offset;
  int min, max; /* max 0: takes no value (a switch) */
} launcher_flags[] = {
    {"use_logical_core", offsetof(config_launcher, use_logical_core), 0, 0},
    {"node_id", offsetof(config_launcher, node_id), 0, 4095},
    {"ninstances", offsetof(config_launcher, ninstances), 1, 4096},
    {"ncores_per_instance", offsetof(config_launcher, ncores_per_instance), 1, 4096},
};

void config__free_launcher(config_launcher *v) {
  free(v->text);
  memset(v, 0, sizeof *v);
  v->node_id = -1;
}

static bool same_flag(const char *a, size_t n, const char *b) {
  if (strlen(b) != n) return false;
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i] && !((a[i] == '-' || a[i] == '_') && (b[i] == '-' || b[i] == '_'))) return false;
  return true;
}

inferd_code config__set_launcher(config_server *cfg, config_launcher *out, const char *key, const char *value,
                                 const config__where *w, inferd_status *st) {
  config_launcher v = {.node_id = -1};
  inferd_code rc = INFERD_OK;
  if (*value && !(v.text = strdup(value))) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  char *copy = strdup(value), *save = NULL;
  if (!copy) {
    free(v.text);
    return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  }
  for (char *tok = strtok_r(copy, " \t\r\n\f", &save); tok; tok = strtok_r(NULL, " \t\r\n\f", &save)) {
    if (strncmp(tok, "--", 2) != 0) {
      config__warn(cfg, "%s:%d: %s: '%s' is not an option (ignored)", w->source, w->line, key, tok);
      continue;
    }
    char *name = tok + 2, *eq = strchr(name, '='), *arg = eq ? eq + 1 : NULL;
    size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
    const struct launcher_flag *f = NULL;
    for (size_t i = 0; i < CORE_ARRAY_LEN(launcher_flags); i++)
      if (same_flag(name, name_len, launcher_flags[i].name)) f = &launcher_flags[i];
    if (!f) {
      /* the launcher's other options (--enable_jemalloc, --log_path DIR, ...) */
      char *next = save && *save ? save + strspn(save, " \t\r\n\f") : NULL;
      bool with_value = !eq && next && *next && *next != '-';
      config__warn(cfg, "%s:%d: %s: '%s%s%.*s' is not used by inferd (ignored)", w->source, w->line, key, tok,
                   with_value ? " " : "", with_value ? (int)strcspn(next, " \t\r\n\f") : 0, with_value ? next : "");
      if (with_value) strtok_r(NULL, " \t\r\n\f", &save);
      continue;
    }
    if (f->max == 0) {
      if (eq) {
        rc = config__fail(st, INFERD_INVALID_ARG, w, key, "--%s takes no value", f->name);
        break;
      }
      *(bool *)((char *)&v + f->offset) = true;
      continue;
    }
    if (!arg) arg = strtok_r(NULL, " \t\r\n\f", &save);
    int64_t x;
    if (!arg || !config__parse_int64(arg, f->min, f->max, &x)) {
      rc = config__fail(st, INFERD_INVALID_ARG, w, key, "--%s wants an integer in %d..%d, got '%s'", f->name, f->min,
                        f->max, arg ? arg : "");
      break;
    }
    *(int *)((char *)&v + f->offset) = (int)x;
  }
  free(copy);
  if (rc != INFERD_OK) {
    config__free_launcher(&v);
    return rc;
  }
  config__free_launcher(out);
  *out = v;
  return INFERD_OK;
}
