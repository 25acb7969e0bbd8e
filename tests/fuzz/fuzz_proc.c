/*
 * fuzz_proc.c - libFuzzer target for the /proc readings of inferd bench's sampler
 * (src/bench/bench_sample.c): /proc/stat's first line (bench__parse_proc_stat), the CPU
 * busy % between two readings (bench__cpu_percent) and /proc/meminfo
 * (bench__parse_meminfo). Their numbers end up in the report as "peak CPU" and "peak
 * memory" percentages.
 *
 * Input: byte 0 picks the form (modulo 3); the rest, up to a NUL, is
 *   0: a /proc/stat text;
 *   1: a /proc/meminfo text;
 *   2: two /proc/stat texts, split at the first NUL: the earlier reading, then the later.
 *
 * The promise: no crash or overread, and a percentage is a percentage.
 *   - /proc/stat: accepted exactly when its first line is "cpu", blanks, then at least
 *     four counts (decimal digits) whose first eight add up within 64 bits, as this file
 *     reads it; then total is that sum and busy is total less the 4th and 5th counts
 *     (idle, iowait);
 *   - busy %: -1 exactly when total did not grow, else in [0, 100], whatever the
 *     counters did (the kernel's idle and iowait can step back);
 *   - memory %: in [0, 100]: 100 * (MemTotal - MemAvailable) / MemTotal when both lines
 *     hold counts (the last line of each) and MemAvailable is below MemTotal, else 0.
 *
 * Seeds: tests/fuzz/corpus/proc/ (this machine's kind of files, an older kernel's
 * /proc/stat with four counts, a meminfo without MemAvailable).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

static void fail(const char *what, const char *text) {
  fprintf(stderr, "fuzz_proc: %s\n---\n%s\n---\n", what, text ? text : "");
  abort();
}

/* Decimal digits at *p (at least one), within 64 bits. */
static bool count_at(const char **p, unsigned long long *out) {
  const char *s = *p;
  if (*s < '0' || *s > '9') return false;
  unsigned long long v = 0;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (v > (UINT64_MAX - (unsigned)(*s - '0')) / 10) return false;
    v = v * 10 + (unsigned)(*s - '0');
  }
  *p = s;
  *out = v;
  return true;
}

static bool stat_line(const char *text, unsigned long long *busy, unsigned long long *total) {
  if (strncmp(text, "cpu", 3) != 0 || (text[3] != ' ' && text[3] != '\t')) return false;
  const char *p = text + 3;
  unsigned long long v[8] = {0}, sum = 0;
  int n = 0;
  while (n < 8) {
    while (*p == ' ' || *p == '\t') p++;
    if (!count_at(&p, &v[n])) break;
    if (v[n] > UINT64_MAX - sum) return false;
    sum += v[n++];
  }
  if (n < 4) return false;
  *total = sum;
  *busy = sum - v[3] - v[4];
  return true;
}

static void check_stat(const char *text) {
  unsigned long long busy = 0, total = 0, want_busy, want_total;
  int rc = bench__parse_proc_stat(text, &busy, &total);
  bool ok = stat_line(text, &want_busy, &want_total);
  if ((rc == 0) != ok) fail(ok ? "a /proc/stat line refused" : "a malformed /proc/stat line accepted", text);
  if (ok && (busy != want_busy || total != want_total)) fail("/proc/stat read as other counts", text);
  if (ok && busy > total) fail("busy above total", text);
}

static void check_meminfo(const char *text) {
  double used = bench__parse_meminfo(text);
  if (!(used >= 0 && used <= 100)) {
    fprintf(stderr, "fuzz_proc: memory %g %%\n", used);
    fail("a memory percentage outside [0, 100]", text);
  }
  unsigned long long total = 0, available = 0;
  bool have_total = false, have_available = false;
  for (const char *line = text; *line;) {
    const char *p = line;
    unsigned long long v;
    if (strncmp(line, "MemTotal:", 9) == 0) {
      for (p += 9; *p == ' ' || *p == '\t';) p++;
      if (count_at(&p, &v)) total = v, have_total = true;
    } else if (strncmp(line, "MemAvailable:", 13) == 0) {
      for (p += 13; *p == ' ' || *p == '\t';) p++;
      if (count_at(&p, &v)) available = v, have_available = true;
    }
    const char *eol = strchr(line, '\n');
    if (!eol) break;
    line = eol + 1;
  }
  double want = have_total && have_available && available < total
                    ? 100.0 * (double)(total - available) / (double)total
                    : 0; /* unknown: no reading rather than 100 % */
  if (want > 100) want = 100; /* the quotient of two doubles near 2^64 */
  if (used != want) fail("memory read as another percentage", text);
}

static void check_interval(const char *before, const char *after) {
  unsigned long long busy0, total0, busy1, total1;
  if (bench__parse_proc_stat(before, &busy0, &total0) != 0 || bench__parse_proc_stat(after, &busy1, &total1) != 0)
    return;
  double cpu = bench__cpu_percent(busy0, total0, busy1, total1);
  if ((cpu == -1) != (total1 <= total0)) fail("-1 is for a total that did not grow", after);
  if (cpu != -1 && !(cpu >= 0 && cpu <= 100)) {
    fprintf(stderr, "fuzz_proc: CPU %g %%\n", cpu);
    fail("a CPU percentage outside [0, 100]", after);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  char *text = malloc(size); /* the rest, NUL-terminated: an overread shows */
  if (!text) abort();
  memcpy(text, data + 1, size - 1);
  text[size - 1] = '\0';
  switch (data[0] % 3) {
  case 0: check_stat(text); break;
  case 1: check_meminfo(text); break;
  default: {
    size_t first = strlen(text);
    check_stat(text);
    if (first + 1 < size - 1) { /* a second text after the NUL */
      check_stat(text + first + 1);
      check_interval(text, text + first + 1);
    }
  }
  }
  free(text);
  return 0;
}
