/*
 * fuzz_cli.c - libFuzzer target for the command lines of `inferd run`, `inferd bench`,
 * `inferd archive` and `inferd topo` (the pure parsers of src/cli/cli_internal.h).
 * `inferd serve`'s command line is config_parse_args, fuzzed by fuzz_config.
 *
 * Input: byte 0 picks the subcommand (modulo 4: run, bench, archive, topo); the rest,
 * split at NUL bytes, is argv[1..] (at most 63 arguments). argv[0] is a name that no
 * argument holds, so that a message quoting it shows up; each argument is a heap block
 * of exactly its size, so ASan sees a read past its NUL.
 *
 * The promise is the project's rule for the CLI: every bad command line is a refusal
 * (INVALID_ARG; archive may also say NO_MEMORY) with a one-line message, which the
 * subcommand prints and exits 2 on; never a crash or a silently wrong value. Checked:
 *   - a refusal: a non-empty message without CR/LF that does not quote argv[0] (the
 *     subcommand's name is never the argument at fault);
 *   - an accepted line: every value within its documented range, the combinations the
 *     usage allows (run: --bench or both --input and --output; bench: the flags of its
 *     mode; ...), every number read from a whole argument or the whole text after '='
 *     or a short option's letter (nothing like "4x" read as 4), every string an argv
 *     string, archive's --extra-files cut exactly at its commas;
 *   - argv's strings are never written to;
 *   - the parse is a function of argv alone: the same line parsed again, from fresh
 *     copies, gives the same answer, with the first copies overwritten meanwhile
 *     (getopt_long keeps a pointer into the last argv between calls; a parse that does
 *     not reset it goes on from there).
 *
 * Seeds: tests/fuzz/corpus/cli/ (each subcommand's usual lines and its refusals).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli/cli_internal.h"

enum { MAX_ARGS = 64 };

static const char ARGV0[] = "fuzz-cli-subcommand";

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_cli: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

typedef struct line {
  int argc;
  char *argv[MAX_ARGS + 1];
  char *saved[MAX_ARGS]; /* what argv[i] held before the parse (index = argument order) */
  char *original[MAX_ARGS]; /* argv[i] as allocated: getopt permutes argv[] itself */
} line;

static void line_make(line *l, const uint8_t *data, size_t size) {
  l->argc = 1;
  l->argv[0] = (char *)ARGV0;
  for (size_t at = 0; at < size && l->argc < MAX_ARGS;) {
    const uint8_t *nul = memchr(data + at, 0, size - at);
    size_t len = nul ? (size_t)(nul - (data + at)) : size - at;
    char *s = malloc(len + 1), *copy = malloc(len + 1);
    if (!s || !copy) abort();
    memcpy(s, data + at, len);
    s[len] = '\0';
    memcpy(copy, s, len + 1);
    l->original[l->argc] = s;
    l->saved[l->argc] = copy;
    l->argv[l->argc++] = s;
    at += len + 1;
  }
  l->argv[l->argc] = NULL;
}

static void line_check_unchanged(const line *l) {
  for (int i = 1; i < l->argc; i++)
    if (strcmp(l->original[i], l->saved[i]) != 0) fail("an argument was written to", l->saved[i]);
}

/* Overwrites the arguments' bytes (not their NULs): a later parse that still reads them
 * (glibc's getopt reads only through its own, uninstrumented code, so ASan would not
 * tell) sees letters no option has. */
static void line_scribble(line *l) {
  for (int i = 1; i < l->argc; i++) memset(l->original[i], 0x01, strlen(l->original[i]));
}

static void line_free(line *l) {
  for (int i = 1; i < l->argc; i++) {
    free(l->original[i]);
    free(l->saved[i]);
  }
}

/* Whether s is one of the line's arguments (pointer identity). */
static bool is_argument(const line *l, const char *s) {
  for (int i = 1; i < l->argc; i++)
    if (s == l->original[i]) return true;
  return false;
}

/* Whether s lies inside one of the arguments (an option's value after '=' or a letter). */
static bool in_argument(const line *l, const char *s) {
  for (int i = 1; i < l->argc; i++) {
    const char *a = l->original[i];
    if (s >= a && s <= a + strlen(a)) return true;
  }
  return false;
}

/* Whether an argument, the text after its '=', or after its first two characters
 * ("-t4") reads whole as the integer v. */
static bool integer_given(const line *l, long long v) {
  for (int i = 1; i < l->argc; i++) {
    const char *a = l->saved[i], *eq = strchr(a, '=');
    const char *starts[3] = {a, eq ? eq + 1 : NULL, strlen(a) > 2 ? a + 2 : NULL};
    for (int k = 0; k < 3; k++) {
      if (!starts[k] || !*starts[k]) continue;
      char *end;
      long long x = strtoll(starts[k], &end, 10);
      if (*end == '\0' && x == v) return true;
    }
    /* a short option's value may follow other letters: "-bt4" */
    if (a[0] == '-' && a[1] && a[1] != '-')
      for (const char *p = a + 2; *p; p++) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (p != end && *end == '\0' && x == v) return true;
      }
  }
  return false;
}

static bool number_given(const line *l, double v) {
  for (int i = 1; i < l->argc; i++) {
    const char *a = l->saved[i];
    for (const char *p = a; *p; p++) {
      char *end;
      double x = strtod(p, &end);
      if (p != end && *end == '\0' && x == v) return true;
    }
  }
  return false;
}

static void check_refusal(const line *l, inferd_code rc, const inferd_status *st, bool may_run_out) {
  if (rc != INFERD_INVALID_ARG && !(may_run_out && rc == INFERD_NO_MEMORY)) fail("a refusal that is not INVALID_ARG", st->message);
  if (st->code != rc || !st->message[0] || strchr(st->message, '\n') || strchr(st->message, '\r'))
    fail("a refusal without a one-line message", st->message);
  bool quoted_elsewhere = false;
  for (int i = 1; i < l->argc; i++) quoted_elsewhere |= strstr(l->saved[i], ARGV0) != NULL;
  if (!quoted_elsewhere && strstr(st->message, ARGV0)) fail("the message names the subcommand as the bad argument", st->message);
}

/* ---- the subcommands: each parses, checks, and describes what it read ------------------- */

typedef struct answer {
  inferd_code rc;
  char text[4096]; /* the message, or the options as text */
} answer;

static const char *or_null(const char *s) { return s ? s : "(null)"; }

static void run_command(line *l, answer *out) {
  cli__run_options o;
  inferd_status st = {0};
  out->rc = cli__run_parse(l->argc, l->argv, &o, &st);
  if (out->rc != INFERD_OK) {
    check_refusal(l, out->rc, &st, false);
    snprintf(out->text, sizeof out->text, "%s", st.message);
    return;
  }
  snprintf(out->text, sizeof out->text,
           "help=%d model=%s input=%s output=%s threads=%d batch=%d bench=%d json=%d profile=%d no_winograd=%d "
           "transformed_winograd=%d precision=%d seconds=%a",
           o.help, or_null(o.model), or_null(o.input), or_null(o.output), o.threads, o.batch, o.bench, o.json, o.profile,
           o.no_winograd, o.transformed_winograd, (int)o.precision, o.seconds);
  if (o.help) return;
  if (!o.model || !is_argument(l, o.model)) fail("the model is not an argument", out->text);
  if ((o.input && !in_argument(l, o.input)) || (o.output && !in_argument(l, o.output)))
    fail("--input or --output is not an argument's text", out->text);
  if (o.bench ? o.input || o.output : !o.input || !o.output) fail("--bench with a file, or a file missing", out->text);
  if (!o.bench && (o.json || o.batch != 1 || o.seconds != 5.0)) fail("a --bench flag without --bench", out->text);
  if (o.threads < 0 || o.threads > 1024 || (o.threads && !integer_given(l, o.threads))) fail("--threads", out->text);
  if (o.batch < 1 || o.batch > 1024 || (o.batch != 1 && !integer_given(l, o.batch))) fail("--batch", out->text);
  if (!(o.seconds > 0 && o.seconds <= 86400) || (o.seconds != 5.0 && !number_given(l, o.seconds)))
    fail("--seconds", out->text);
}

static void bench_command(line *l, answer *out) {
  cli__bench_options o;
  inferd_status st = {0};
  out->rc = cli__bench_parse(l->argc, l->argv, &o, &st);
  if (out->rc != INFERD_OK) {
    check_refusal(l, out->rc, &st, false);
    snprintf(out->text, sizeof out->text, "%s", st.message);
    return;
  }
  const bench_params *p = &o.params;
  int n = snprintf(out->text, sizeof out->text,
                   "help=%d job=%d json=%d mode=%d url=%s file=%s model=%s labels=%s requests=%lld concurrency=%d "
                   "processes=%d rate=%a timeout=%a range=%d:%d:%d headers=%d",
                   o.help, o.job, o.json, (int)p->mode, or_null(p->url), or_null(p->file), or_null(p->model),
                   or_null(p->labels), (long long)p->requests, p->concurrency, p->processes, p->request_rate,
                   p->timeout_seconds, o.range[0], o.range[1], o.range[2], p->header_count);
  for (int i = 0; i < p->header_count && n > 0 && (size_t)n < sizeof out->text; i++)
    n += snprintf(out->text + n, sizeof out->text - (size_t)n, " [%s]", p->headers[i]);
  if (o.help) return;
  const char *strings[] = {p->url, p->file, p->model, p->labels};
  for (size_t i = 0; i < sizeof strings / sizeof *strings; i++)
    if (strings[i] && !in_argument(l, strings[i])) fail("a value that is not an argument's text", out->text);
  if (o.job) {
    if (!p->model || !p->file) fail("--mode job without --model or --file", out->text);
    return;
  }
  if (!p->file) fail("no --file", out->text);
  if (p->requests < 1 || p->requests > 100000000 || !integer_given(l, p->requests)) fail("--requests", out->text);
  if (p->processes < 1 || p->processes > 1024 || (p->processes != 1 && !integer_given(l, p->processes)))
    fail("--processes", out->text);
  if (!(p->timeout_seconds > 0 && p->timeout_seconds <= 86400) ||
      (p->timeout_seconds != 60 && !number_given(l, p->timeout_seconds)))
    fail("--timeout", out->text);
  if (p->request_rate != 0 &&
      (!(p->request_rate > 0 && p->request_rate <= 1e6) || !number_given(l, p->request_rate) ||
       (double)(p->requests - 1) / p->request_rate > 86400))
    fail("--request-rate", out->text);
  if (p->header_count < 0 || p->header_count > BENCH_MAX_HEADERS) fail("the header count", out->text);
  for (int i = 0; i < p->header_count; i++) {
    const char *h = p->headers[i], *colon = h ? strchr(h, ':') : NULL;
    if (!colon || colon == h || !in_argument(l, h) || strpbrk(h, "\r\n") || memchr(h, ' ', (size_t)(colon - h)))
      fail("a header that is not one 'Name: value' line", out->text);
  }
  const int *r = o.range;
  if (r[0] || r[1] || r[2]) {
    if (!(1 <= r[0] && r[0] <= r[1] && r[1] <= 10000 && 1 <= r[2] && r[2] <= 10000))
      fail("a --concurrency-range out of its bounds", out->text);
    if (p->mode != BENCH_MODE_SERVER || p->concurrency != 0 || p->request_rate != 0)
      fail("--concurrency-range with --concurrency, --request-rate or local mode", out->text);
  } else if (p->concurrency < 1 || p->concurrency > 10000 || !integer_given(l, p->concurrency)) {
    fail("--concurrency", out->text);
  }
  if (p->mode == BENCH_MODE_SERVER) {
    if (!p->url || p->model || p->labels) fail("server mode without --url, or with --model or --labels", out->text);
    /* libcurl's reading of the rest ("http:/host" has host "host") is the one each request gets */
    if (strncasecmp(p->url, "http:", 5) != 0 && strncasecmp(p->url, "https:", 6) != 0)
      fail("a --url that is not http: or https:", out->text);
  } else if (p->mode == BENCH_MODE_LOCAL) {
    if (!p->model || p->url || p->header_count || p->processes != 1 || p->request_rate != 0)
      fail("local mode without --model, or with a server flag", out->text);
  } else {
    fail("no mode", out->text);
  }
}

static void archive_command(line *l, answer *out) {
  cli__archive_options o;
  inferd_status st = {0};
  out->rc = cli__archive_parse(l->argc, l->argv, &o, &st);
  if (out->rc != INFERD_OK) {
    check_refusal(l, out->rc, &st, true);
    snprintf(out->text, sizeof out->text, "%s", st.message);
    cli__archive_options_free(&o);
    return;
  }
  const archive_write_params *w = &o.write;
  int n = snprintf(out->text, sizeof out->text, "help=%d name=%s file=%s handler=%s version=%s export=%s format=%d "
                   "force=%d extras=%d", o.help, or_null(w->model_name), or_null(w->serialized_file),
                   or_null(w->handler), or_null(w->version), or_null(w->export_path), (int)w->format, w->force,
                   w->extra_file_count);
  for (int i = 0; i < w->extra_file_count && n > 0 && (size_t)n < sizeof out->text; i++)
    n += snprintf(out->text + n, sizeof out->text - (size_t)n, " [%s]", w->extra_files[i]);
  if (!o.help) {
    if (!w->model_name || !w->serialized_file || !w->handler) fail("a required flag missing", out->text);
    const char *strings[] = {w->model_name, w->serialized_file, w->handler, w->version, w->export_path};
    for (size_t i = 0; i < sizeof strings / sizeof *strings; i++)
      if (strings[i] && !in_argument(l, strings[i])) fail("a value that is not an argument's text", out->text);
    if (w->format != ARCHIVE_FORMAT_DEFAULT && w->format != ARCHIVE_FORMAT_ZIP_STORE &&
        w->format != ARCHIVE_FORMAT_NO_ARCHIVE)
      fail("an unknown format", out->text);
    if (w->extra_file_count < 0 || w->extra_file_count > CLI__MAX_EXTRA_FILES) fail("the extra file count", out->text);
    /* the list, cut again here: items between commas, leading spaces dropped, empty ones skipped */
    if (w->extra_file_count && !o.extra_list) fail("extra files without a list", out->text);
    if (o.extra_list) {
      if (!in_argument(l, o.extra_list)) fail("--extra-files is not an argument's text", out->text);
      int k = 0;
      for (const char *p = o.extra_list;;) {
        const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p);
        while (p < end && *p == ' ') p++;
        if (p < end) {
          size_t len = (size_t)(end - p);
          if (k >= w->extra_file_count || strlen(w->extra_files[k]) != len || memcmp(w->extra_files[k], p, len) != 0)
            fail("--extra-files not cut at its commas", out->text);
          k++;
        }
        if (!comma) break;
        p = comma + 1;
      }
      if (k != w->extra_file_count) fail("--extra-files has other items than its commas cut", out->text);
    }
  }
  cli__archive_options_free(&o);
}

static void topo_command(line *l, answer *out) {
  cli__topo_options o;
  inferd_status st = {0};
  out->rc = cli__topo_parse(l->argc, l->argv, &o, &st);
  if (out->rc != INFERD_OK) {
    check_refusal(l, out->rc, &st, false);
    snprintf(out->text, sizeof out->text, "%s", st.message);
    return;
  }
  const topo_params *t = &o.topo;
  const topo_plan_params *p = &o.plan;
  snprintf(out->text, sizeof out->text, "help=%d synthetic=%s xml=%s cpus=%s quota=%a workers=%d threads=%d "
           "logical=%d node=%d", o.help, or_null(t->synthetic), or_null(t->xml_path), or_null(t->allowed_cpus),
           t->cpu_quota, p->workers, p->threads_per_worker, p->use_logical_core, p->node_id);
  if (o.help) return;
  const char *strings[] = {t->synthetic, t->xml_path, t->allowed_cpus};
  for (size_t i = 0; i < sizeof strings / sizeof *strings; i++)
    if (strings[i] && !in_argument(l, strings[i])) fail("a value that is not an argument's text", out->text);
  if (p->workers < 0 || p->workers > 4096 || (p->workers && !integer_given(l, p->workers))) fail("--workers", out->text);
  if (p->threads_per_worker < 0 || p->threads_per_worker > 4096 ||
      (p->threads_per_worker && !integer_given(l, p->threads_per_worker)))
    fail("--threads-per-worker", out->text);
  if (p->node_id != TOPO_NODE_ANY && (p->node_id < 0 || p->node_id > (1 << 20) || !integer_given(l, p->node_id)))
    fail("--node-id", out->text);
  if (t->cpu_quota != 0 && t->cpu_quota != -1 &&
      (!(t->cpu_quota > 0 && t->cpu_quota <= 1e6) || !number_given(l, t->cpu_quota)))
    fail("--cpu-quota", out->text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  static void (*const commands[4])(line *, answer *) = {run_command, bench_command, archive_command, topo_command};
  void (*command)(line *, answer *) = commands[data[0] % 4];
  static answer first, again;
  line l;
  line_make(&l, data + 1, size - 1);
  command(&l, &first);
  line_check_unchanged(&l);
  line_scribble(&l);
  line second;
  line_make(&second, data + 1, size - 1);
  command(&second, &again);
  line_free(&second);
  line_free(&l);
  if (first.rc != again.rc || strcmp(first.text, again.text) != 0) {
    fprintf(stderr, "fuzz_cli: first: %s\nfuzz_cli: again: %s\n", first.text, again.text);
    fail("the same line parsed twice gave two answers", NULL);
  }
  return 0;
}
