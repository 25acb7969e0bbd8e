/*
 * fuzz_quota.c - libFuzzer target for the cgroup readers (src/topo/topo_quota.c): the
 * text of a cgroup v2 cpu.max (topo_quota_parse_cpu_max), the whole walk of
 * topo_quota_read over /proc/self/cgroup, /proc/self/mountinfo and the quota files of
 * the cgroup hierarchies, and the memory walk of topo_memory_available over
 * /proc/meminfo and the memory cgroup files of the same hierarchies, in a fake root
 * directory.
 *
 * Input: byte 0 picks the form.
 *   even: the rest is the text of a cpu.max file (up to its first NUL).
 *   odd:  the rest, split at NUL bytes, is the content of these files under the fake
 *         root, in this order (a file past the input's last piece is absent):
 *           proc/self/cgroup, proc/self/mountinfo,
 *           sys/fs/cgroup/cpu.max, sys/fs/cgroup/a/cpu.max, sys/fs/cgroup/a/b/cpu.max,
 *           sys/fs/cgroup/cpu/cpu.cfs_quota_us, sys/fs/cgroup/cpu/cpu.cfs_period_us,
 *           sys/fs/cgroup/cpu/a/cpu.cfs_quota_us, sys/fs/cgroup/cpu/a/cpu.cfs_period_us,
 *           proc/meminfo,
 *           then memory.max, memory.current, memory.stat in sys/fs/cgroup, .../a and
 *           .../a/b (v2), then memory.limit_in_bytes, memory.usage_in_bytes,
 *           memory.stat in sys/fs/cgroup/memory and .../memory/a (v1), and
 *           sys/fs/cgroup/memory/memory.use_hierarchy
 *         Bit 1 of byte 0 gives topo_quota_read and topo_memory_available a 12-byte
 *         buffer for the source. Both walks read the one fake root.
 *
 * The promise: no crash or overread, and no wrong number from a malformed file.
 *   - cpu.max: accepted exactly when this file's own reading of the format accepts it:
 *     two words, "max" or a quota, then a period, each quota or period decimal digits
 *     of a value from 1 to 2^63-1 (the kernel writes "max 100000\n" or "150000 100000\n");
 *     CPUs are quota / period, 0 for "max";
 *   - the walk: CPUs finite and not negative; the source "none" exactly when there is
 *     no quota; else a cpu.max or cpu.cfs_quota_us file which, read whole and parsed
 *     as here (a v1 quota with the period beside it: whole numbers, then blanks),
 *     gives those CPUs exactly; topo_quota_core_cap of them is floor(CPUs), at least 1.
 *   - memory: the source "none" exactly when UINT64_MAX (no bound) is returned; never
 *     more than MemAvailable when meminfo (up to 4 KB, as the kernel's ~1.5 KB) has a
 *     first line "MemAvailable:" of blanks, digits and " kB" (or none), and then a
 *     bound; when the source is meminfo, exactly that many KiB; when it is a limit file
 *     (memory.max or memory.limit_in_bytes), that file read whole (a whole number from
 *     1 to 2^60-1, then blanks) with the usage beside it (the same, from 0) and the
 *     inactive file pages of the memory.stat beside it (the first line "inactive_file
 *     N", v1 "total_inactive_file N", N digits up to the line's end, in its first 8 KB
 *     of whole lines; all of the usage when N is above it) give exactly
 *     limit - (usage - inactive), or 0 when that is negative.
 *
 * Seeds: tests/fuzz/corpus/quota/ (cgroup v2 and v1 layouts, containers that see part
 * of the hierarchy, octal escapes in mountinfo, memory limits on several levels).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "topo/topo.h"

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_quota: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

/* ---- the formats, read here ------------------------------------------------------------ */

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

/* Decimal digits, 1 .. 2^63-1. */
static bool positive_number(const char *s, size_t n, long long *out) {
  if (n == 0) return false;
  unsigned long long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    if (v > ((unsigned long long)LLONG_MAX - (unsigned long long)(s[i] - '0')) / 10) return false;
    v = v * 10 + (unsigned long long)(s[i] - '0');
  }
  if (v == 0) return false;
  *out = (long long)v;
  return true;
}

static bool cpu_max(const char *text, double *cpus) {
  const char *word[3];
  size_t len[3];
  int n = 0;
  for (const char *p = text; *p;) {
    while (*p && is_blank(*p)) p++;
    if (!*p) break;
    if (n == 3) return false;
    word[n] = p;
    while (*p && !is_blank(*p)) p++;
    len[n] = (size_t)(p - word[n]);
    n++;
  }
  long long quota, period;
  if (n != 2 || !positive_number(word[1], len[1], &period)) return false;
  if (len[0] == 3 && memcmp(word[0], "max", 3) == 0) {
    *cpus = 0;
    return true;
  }
  if (!positive_number(word[0], len[0], &quota)) return false;
  *cpus = (double)quota / (double)period;
  return true;
}

/* A v1 file: a whole number (strtoll), then blanks. */
static bool v1_number(const char *text, long long *out) {
  char *end;
  errno = 0;
  *out = strtoll(text, &end, 10);
  if (end == text || errno) return false;
  while (*end == ' ' || *end == '\n') end++;
  return *end == '\0';
}

/* ---- the fake root ----------------------------------------------------------------------- */

static const char *const FILES[] = {
    "proc/self/cgroup",
    "proc/self/mountinfo",
    "sys/fs/cgroup/cpu.max",
    "sys/fs/cgroup/a/cpu.max",
    "sys/fs/cgroup/a/b/cpu.max",
    "sys/fs/cgroup/cpu/cpu.cfs_quota_us",
    "sys/fs/cgroup/cpu/cpu.cfs_period_us",
    "sys/fs/cgroup/cpu/a/cpu.cfs_quota_us",
    "sys/fs/cgroup/cpu/a/cpu.cfs_period_us",
    "proc/meminfo",
    "sys/fs/cgroup/memory.max",
    "sys/fs/cgroup/memory.current",
    "sys/fs/cgroup/memory.stat",
    "sys/fs/cgroup/a/memory.max",
    "sys/fs/cgroup/a/memory.current",
    "sys/fs/cgroup/a/memory.stat",
    "sys/fs/cgroup/a/b/memory.max",
    "sys/fs/cgroup/a/b/memory.current",
    "sys/fs/cgroup/a/b/memory.stat",
    "sys/fs/cgroup/memory/memory.limit_in_bytes",
    "sys/fs/cgroup/memory/memory.usage_in_bytes",
    "sys/fs/cgroup/memory/memory.stat",
    "sys/fs/cgroup/memory/a/memory.limit_in_bytes",
    "sys/fs/cgroup/memory/a/memory.usage_in_bytes",
    "sys/fs/cgroup/memory/a/memory.stat",
    "sys/fs/cgroup/memory/memory.use_hierarchy",
};
enum { FILE_COUNT = sizeof FILES / sizeof *FILES };

static char root[64];

static void remove_root(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "fuzz_quota: could not remove %s\n", root);
}

static void make_root(void) {
  const char *shm = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(root, sizeof root, "%s/fuzz_quota.XXXXXX", shm);
  if (!mkdtemp(root)) fail("mkdtemp", strerror(errno));
  atexit(remove_root);
  static const char *const dirs[] = {"proc", "proc/self", "sys", "sys/fs", "sys/fs/cgroup", "sys/fs/cgroup/a",
                                     "sys/fs/cgroup/a/b", "sys/fs/cgroup/cpu", "sys/fs/cgroup/cpu/a",
                                     "sys/fs/cgroup/memory", "sys/fs/cgroup/memory/a"};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
    if (mkdir(path, 0755) != 0) fail("mkdir", path);
  }
}

static void put_file(int i, const char *data, size_t size) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", root, FILES[i]);
  if (!data) {
    unlink(path);
    return;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("open", path);
  for (size_t done = 0; done < size;) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) fail("write", path);
    done += (size_t)n;
  }
  close(fd);
}

/* A whole file as a string; NULL when it cannot be read or holds a NUL. */
static char *read_whole(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *text = NULL;
  size_t size = 0, cap = 0;
  for (int c; (c = fgetc(f)) != EOF;) {
    if (size + 2 > cap && !(text = realloc(text, cap = cap * 2 + 64))) abort();
    text[size++] = (char)c;
  }
  fclose(f);
  if (!text && !(text = malloc(1))) abort();
  text[size] = '\0';
  if (strlen(text) != size) {
    free(text);
    return NULL;
  }
  return text;
}

/* The quota the file the walk named gives, read whole here; NAN when it gives none.
 * By its path (a ".." in the fake files' paths may lead anywhere). */
static double quota_of(const char *source) {
  static const char V2[] = "/cpu.max", V1[] = "/cpu.cfs_quota_us";
  size_t n = strlen(source);
  double cpus = NAN;
  char *text = read_whole(source);
  if (!text) return NAN;
  if (n > strlen(V2) && strcmp(source + n - strlen(V2), V2) == 0) {
    if (!cpu_max(text, &cpus)) cpus = NAN;
  } else if (n > strlen(V1) && strcmp(source + n - strlen(V1), V1) == 0) {
    char period_path[PATH_MAX + 64];
    snprintf(period_path, sizeof period_path, "%.*s/cpu.cfs_period_us", (int)(n - strlen(V1)), source);
    char *period_text = read_whole(period_path);
    long long quota, period;
    if (period_text && v1_number(text, &quota) && v1_number(period_text, &period) && quota >= 0 && period > 0)
      cpus = (double)quota / (double)period;
    free(period_text);
  }
  free(text);
  return cpus;
}

/* ---- memory, read here ------------------------------------------------------------------ */

/* The first `max` - 1 bytes of a file, cut after their last whole line when the file is
 * longer (what the walk reads of meminfo and memory.stat); NULL as read_whole. */
static char *read_head(const char *path, size_t max) {
  char *text = read_whole(path);
  if (text && strlen(text) > max - 1) {
    size_t n = max - 1;
    while (n > 0 && text[n - 1] != '\n') n--;
    text[n] = '\0';
  }
  return text;
}

/* The first line of `text` that starts with `key` and then `sep`: its digits, which
 * must run to the line's end (or to " kB" there when `kb`). -1 when there is no such
 * line, -2 when that line is malformed or its value above 2^63-1. */
static long long key_value(const char *text, const char *key, char sep, bool kb) {
  size_t klen = strlen(key);
  for (const char *line = text; *line;) {
    const char *eol = strchr(line, '\n');
    size_t len = eol ? (size_t)(eol - line) : strlen(line);
    if (len > klen && memcmp(line, key, klen) == 0 && line[klen] == sep) {
      const char *p = line + klen + 1, *end = line + len;
      if (sep == ':')
        while (p < end && *p == ' ') p++;
      if (kb && end - p >= 3 && memcmp(end - 3, " kB", 3) == 0) end -= 3;
      long long v = 0;
      if (p == end) return -2;
      for (; p < end; p++) { /* digits, 0 .. 2^63-1 */
        if (*p < '0' || *p > '9' || v > (LLONG_MAX - (*p - '0')) / 10) return -2;
        v = v * 10 + (*p - '0');
      }
      return v;
    }
    if (!eol) break;
    line = eol + 1;
  }
  return -1;
}

static bool ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), t = strlen(tail);
  return n > t && strcmp(s + n - t, tail) == 0;
}

/* What the limit file the walk named, with the usage and memory.stat beside it, leaves
 * (see the promise); -1 when they give no bound. */
static long long memory_left_of(const char *source) {
  static const char V2[] = "/memory.max", V1[] = "/memory.limit_in_bytes";
  bool v2 = ends_with(source, V2);
  if (!v2 && !ends_with(source, V1)) return -1;
  size_t dir_len = strlen(source) - strlen(v2 ? V2 : V1);
  char usage_path[PATH_MAX + 64], stat_path[PATH_MAX + 64];
  snprintf(usage_path, sizeof usage_path, "%.*s/%s", (int)dir_len, source,
           v2 ? "memory.current" : "memory.usage_in_bytes");
  snprintf(stat_path, sizeof stat_path, "%.*s/memory.stat", (int)dir_len, source);
  char *limit_text = read_whole(source), *usage_text = read_whole(usage_path), *stat = read_head(stat_path, 8 << 10);
  long long limit, usage, left = -1;
  if (limit_text && usage_text && v1_number(limit_text, &limit) && v1_number(usage_text, &usage) && limit > 0 &&
      limit < (1LL << 60) && usage >= 0) {
    long long inactive = stat ? key_value(stat, v2 ? "inactive_file" : "total_inactive_file", ' ', false) : -1;
    long long working = inactive <= 0 ? usage : inactive < usage ? usage - inactive : 0;
    left = limit > working ? limit - working : 0;
  }
  free(limit_text);
  free(usage_text);
  free(stat);
  return left;
}

static void check_memory(const char *source, size_t source_size, uint64_t left) {
  if (strnlen(source, source_size) >= source_size) fail("memory: the source is not NUL-terminated in its buffer", NULL);
  if (source_size < 64) return;
  if ((left == UINT64_MAX) != (strcmp(source, "none") == 0))
    fail("memory: the source is 'none' exactly when there is no bound", source);
  char meminfo_path[128];
  snprintf(meminfo_path, sizeof meminfo_path, "%s/proc/meminfo", root);
  char *meminfo = read_whole(meminfo_path);
  long long kb = -1;
  if (meminfo && strlen(meminfo) < 4096) kb = key_value(meminfo, "MemAvailable", ':', true);
  free(meminfo);
  if (kb >= 0 && kb <= (long long)(UINT64_MAX >> 10)) {
    if (left > (uint64_t)kb << 10) {
      fprintf(stderr, "fuzz_quota: %llu bytes left from %s, MemAvailable %lld kB\n", (unsigned long long)left, source,
              kb);
      fail("memory: more than MemAvailable", NULL);
    }
  }
  if (strcmp(source, meminfo_path) == 0) {
    if (!(kb >= 0 && left == (uint64_t)kb << 10)) {
      fprintf(stderr, "fuzz_quota: %llu bytes left from meminfo, which gives %lld kB\n", (unsigned long long)left, kb);
      fail("memory: a MemAvailable meminfo does not give", NULL);
    }
  } else if (left != UINT64_MAX) {
    long long want = memory_left_of(source);
    if (want < 0 || (uint64_t)want != left) {
      fprintf(stderr, "fuzz_quota: %llu bytes left from %s, whose files give %lld\n", (unsigned long long)left,
              source, want);
      fail("memory: a bound its files do not give", NULL);
    }
  }
}

static void check_cap(double cpus) {
  int cap = topo_quota_core_cap(cpus);
  int want = !(cpus > 0) ? 0 : cpus >= (double)INT_MAX ? INT_MAX : cpus < 1 ? 1 : (int)floor(cpus);
  if (cap != want) fail("topo_quota_core_cap is not floor(CPUs), at least 1", NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    char *text = malloc(size);
    if (!text) abort();
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    double cpus = -1, want = -1;
    int rc = topo_quota_parse_cpu_max(text, &cpus);
    bool ok = cpu_max(text, &want);
    if ((rc == 0) != ok) fail(ok ? "a valid cpu.max refused" : "a malformed cpu.max accepted", text);
    if (ok && cpus != want) fail("cpu.max read as other CPUs", text);
    if (ok) check_cap(cpus);
    free(text);
    return 0;
  }

  if (!root[0]) make_root();
  const uint8_t *p = data + 1, *end = data + size;
  for (int i = 0; i < FILE_COUNT; i++) {
    if (p > end) { /* the pieces ran out */
      put_file(i, NULL, 0);
      continue;
    }
    const uint8_t *nul = memchr(p, 0, (size_t)(end - p));
    size_t n = nul ? (size_t)(nul - p) : (size_t)(end - p);
    put_file(i, (const char *)p, n);
    p += n + 1;
  }
  bool small = data[0] & 2;
  char source[PATH_MAX + 64];
  size_t source_size = small ? 12 : sizeof source;
  memset(source, 'x', sizeof source);
  double cpus = -1;
  topo_quota_read(root, &cpus, source, source_size);
  if (strnlen(source, source_size) >= source_size) fail("the source is not NUL-terminated in its buffer", NULL);
  if (!isfinite(cpus) || cpus < 0) fail("CPUs negative or not finite", NULL);
  check_cap(cpus);
  char memory_source[PATH_MAX + 64];
  memset(memory_source, 'x', sizeof memory_source);
  uint64_t left = topo_memory_available(root, memory_source, source_size);
  check_memory(memory_source, source_size, left);
  if (small) return 0;
  if ((cpus == 0) != (strcmp(source, "none") == 0)) fail("the source is 'none' exactly when there is no quota", source);
  if (cpus > 0) {
    double want = quota_of(source);
    if (!(want == cpus)) {
      fprintf(stderr, "fuzz_quota: read %.17g from %s, which gives %.17g\n", cpus, source, want);
      fail("a quota its file does not give", NULL);
    }
  }
  return 0;
}
