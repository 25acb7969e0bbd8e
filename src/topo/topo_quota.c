/*
 * topo_quota.c - the CPU quota of this process's cgroup.
 *
 * DESIGN
 * A container limited with `--cpus 4` (Docker), a Kubernetes CPU limit or systemd's
 * CPUQuota= sees every host CPU in its affinity mask, but the kernel throttles it once
 * it has used quota/period CPU-seconds per period. Workers that start more compute
 * threads than that stall for the rest of each period, so the placement plan caps its
 * thread count at floor(quota / period) (at least 1).
 *
 * Where the quota lives:
 *   cgroup v2  /proc/self/cgroup has "0::/PATH"; the file is MOUNT/PATH/cpu.max,
 *              "max 100000" or "QUOTA PERIOD".
 *   cgroup v1  /proc/self/cgroup has "N:...cpu...:/PATH"; the files are
 *              MOUNT/PATH/cpu.cfs_quota_us (-1: none) and cpu.cfs_period_us.
 * MOUNT comes from /proc/self/mountinfo (fstype cgroup2, or cgroup with the `cpu`
 * super option). A mount may show only part of the hierarchy (a container without a
 * cgroup namespace sees /docker/ID mounted at /sys/fs/cgroup/cpu): its root field is
 * then stripped from PATH. A parent's quota also limits its children, so every
 * directory from PATH up to the mount point is read and the smallest quota wins.
 *
 * Nothing here fails: a file that cannot be read or parsed means no quota there. The
 * arithmetic is in pure functions (topo_quota_cpus, topo_quota_parse_cpu_max,
 * topo_quota_core_cap) so that tests give it numbers; topo_quota_read takes a root
 * directory so that tests give it a fake /proc and /sys.
 *
 * The memory left to the process (topo_memory_available) walks the memory controller's
 * directories the same way: a container's or a systemd unit's MemoryMax= kills the
 * process when its cgroup's working set (usage less the inactive file pages the kernel
 * reclaims first, as kubelet and docker stats count it) reaches the limit. The server
 * refuses a model or a worker that cannot fit, instead of being killed by the loading.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/topo.h"

double topo_quota_cpus(long long quota_us, long long period_us) {
  if (quota_us < 0 || period_us <= 0) return 0.0;
  return (double)quota_us / (double)period_us;
}

/* Decimal digits of a value from 1 to LLONG_MAX; false for anything else. */
static bool positive_number(const char *s, size_t n, long long *out) {
  if (n == 0) return false;
  long long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9' || v > (LLONG_MAX - (s[i] - '0')) / 10) return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return v > 0;
}

int topo_quota_parse_cpu_max(const char *text, double *cpus) {
  /* exactly two words: sscanf's "%31s %lld" cut a longer quota word in two and took an
   * overflowing period as LLONG_MAX, both silently */
  const char *word[2];
  size_t len[2];
  int n = 0;
  for (const char *p = text;;) {
    while (isspace((unsigned char)*p)) p++;
    if (!*p) break;
    if (n == 2) return -1;
    word[n] = p;
    while (*p && !isspace((unsigned char)*p)) p++;
    len[n] = (size_t)(p - word[n]);
    n++;
  }
  long long quota, period;
  if (n != 2 || !positive_number(word[1], len[1], &period)) return -1;
  if (len[0] == 3 && memcmp(word[0], "max", 3) == 0) {
    *cpus = 0.0;
    return 0;
  }
  if (!positive_number(word[0], len[0], &quota)) return -1;
  *cpus = topo_quota_cpus(quota, period);
  return 0;
}

int topo_quota_core_cap(double cpus) {
  if (!(cpus > 0)) return 0;
  if (cpus >= (double)INT_MAX) return INT_MAX;
  int cap = (int)floor(cpus);
  return cap < 1 ? 1 : cap;
}

/* ---- reading the files -------------------------------------------------------------- */

/* Reads a small file into buf (NUL-terminated). One that does not fit is refused when
 * `whole` (a quota file cut short could read as another number: "100000   ...   7" as
 * 100000), else cut after its last whole line (a cgroup path or mount line cut short
 * could name another directory or controller). Returns 0, or -1. */
static int read_small_file(const char *path, char *buf, size_t size, bool whole) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, size - 1, f);
  char more;
  bool cut = n == size - 1 && fread(&more, 1, 1, f) == 1;
  int bad = ferror(f);
  fclose(f);
  if (bad || (cut && whole)) return -1;
  if (cut)
    while (n > 0 && buf[n - 1] != '\n') n--;
  buf[n] = '\0';
  return 0;
}

static int read_long_long(const char *path, long long *out) {
  char buf[64], *end;
  if (read_small_file(path, buf, sizeof buf, true)) return -1;
  errno = 0;
  *out = strtoll(buf, &end, 10);
  if (end == buf || errno != 0) return -1;
  while (*end == ' ' || *end == '\n') end++;
  return *end == '\0' ? 0 : -1;
}

static int read_long_long_in(const char *dir, const char *name, long long *out) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return read_long_long(path, out);
}

/* Whether the comma-separated `list` contains `word`. */
static int list_has(const char *list, size_t len, const char *word) {
  size_t wlen = strlen(word);
  const char *p = list, *end = list + len;
  while (p < end) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    size_t item = comma ? (size_t)(comma - p) : (size_t)(end - p);
    if (item == wlen && memcmp(p, word, wlen) == 0) return 1;
    if (!comma) break;
    p = comma + 1;
  }
  return 0;
}

/* The cgroup path of this process in one hierarchy, from /proc/self/cgroup's text:
 * v2 (want_v2) is the "0::" line, v1 the line whose controllers include `controller`. */
static int cgroup_path(const char *text, int want_v2, const char *controller, char *out, size_t size) {
  const char *line = text;
  while (*line) {
    const char *eol = strchr(line, '\n');
    size_t len = eol ? (size_t)(eol - line) : strlen(line);
    const char *c1 = memchr(line, ':', len);
    const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
    if (c2) {
      int is_v2 = (c1 - line == 1 && line[0] == '0' && c2 == c1 + 1);
      int match = want_v2 ? is_v2 : (!is_v2 && list_has(c1 + 1, (size_t)(c2 - c1 - 1), controller));
      size_t plen = len - (size_t)(c2 + 1 - line);
      if (match && plen > 0 && plen < size) {
        memcpy(out, c2 + 1, plen);
        out[plen] = '\0';
        return 0;
      }
    }
    if (!eol) break;
    line = eol + 1;
  }
  return -1;
}

typedef struct quota_best {
  double cpus; /* 0: none found yet */
  char *source;
  size_t source_size;
} quota_best;

static void consider(quota_best *best, double cpus, const char *file) {
  if (!(cpus > 0)) return;
  if (best->cpus > 0 && best->cpus <= cpus) return;
  best->cpus = cpus;
  if (best->source && best->source_size) snprintf(best->source, best->source_size, "%s", file);
}

/* What a walk reads in each directory of the process's cgroup: its controller (v1),
 * and a visit of one directory in v1 or v2 layout (`own`: the process's cgroup itself,
 * not one of its ancestors). */
typedef struct cgroup_walk {
  const char *controller;
  void (*visit)(struct cgroup_walk *w, const char *dir, bool v2, bool own);
} cgroup_walk;

/* Visits `dir` and each parent directory down to `mount_dir`. */
static void walk_up(cgroup_walk *w, const char *mount_dir, const char *dir, bool v2) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s", dir);
  size_t stop = strlen(mount_dir);
  for (;;) {
    w->visit(w, path, v2, strcmp(path, dir) == 0);
    size_t len = strlen(path);
    if (len <= stop) break;
    char *slash = strrchr(path, '/');
    if (!slash || (size_t)(slash - path) < stop) break;
    *slash = '\0';
  }
}

typedef struct quota_walk {
  cgroup_walk walk; /* first: the visit gets it back */
  quota_best best;
} quota_walk;

static void visit_cpu(cgroup_walk *w, const char *dir, bool v2, bool own) {
  (void)own;
  quota_best *best = &((quota_walk *)w)->best;
  char file[PATH_MAX + 32];
  if (v2) {
    char text[128];
    double cpus;
    snprintf(file, sizeof file, "%s/cpu.max", dir);
    if (read_small_file(file, text, sizeof text, true) == 0 && topo_quota_parse_cpu_max(text, &cpus) == 0)
      consider(best, cpus, file);
  } else {
    long long quota, period;
    char period_file[PATH_MAX + 32];
    snprintf(file, sizeof file, "%s/cpu.cfs_quota_us", dir);
    snprintf(period_file, sizeof period_file, "%s/cpu.cfs_period_us", dir);
    if (read_long_long(file, &quota) == 0 && read_long_long(period_file, &period) == 0)
      consider(best, topo_quota_cpus(quota, period), file);
  }
}

/* Unescapes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape_octal(char *s) {
  char *w = s;
  for (char *r = s; *r; r++) {
    if (r[0] == '\\' && r[1] >= '0' && r[1] <= '7' && r[2] >= '0' && r[2] <= '7' && r[3] >= '0' && r[3] <= '7') {
      *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
      r += 3;
    } else {
      *w++ = *r;
    }
  }
  *w = '\0';
}

/* One mountinfo line: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SRC SUPEROPTS". */
static void consider_mount(cgroup_walk *w, const char *root, char *line, const char *v2_path, const char *v1_path) {
  char *tokens[64], *save = NULL;
  int count = 0;
  for (char *tok = strtok_r(line, " ", &save); tok && count < 64; tok = strtok_r(NULL, " ", &save)) tokens[count++] = tok;
  /* Optional fields end at the "-" separator, which comes after the 6 fixed ones. */
  char *fstype = NULL, *superopts = NULL;
  for (int i = 6; i < count; i++)
    if (strcmp(tokens[i], "-") == 0) {
      fstype = i + 1 < count ? tokens[i + 1] : NULL;
      superopts = i + 3 < count ? tokens[i + 3] : NULL;
      break;
    }
  if (!fstype) return;
  bool v2 = strcmp(fstype, "cgroup2") == 0;
  if (!v2 && !(strcmp(fstype, "cgroup") == 0 && superopts && list_has(superopts, strlen(superopts), w->controller)))
    return;
  const char *path = v2 ? v2_path : v1_path;
  if (!path[0]) return;
  char *mount_root = tokens[3], *mount_point = tokens[4];
  unescape_octal(mount_root);
  unescape_octal(mount_point);
  /* The part of our path below the mount's root; a mount of another subtree is not ours. */
  size_t rlen = strcmp(mount_root, "/") == 0 ? 0 : strlen(mount_root);
  if (strncmp(path, mount_root, rlen) != 0 || (path[rlen] != '\0' && path[rlen] != '/')) return;
  const char *rel = path + rlen;
  char mount_dir[PATH_MAX], dir[PATH_MAX];
  snprintf(mount_dir, sizeof mount_dir, "%s%s", root, mount_point);
  snprintf(dir, sizeof dir, "%s%s", mount_dir, strcmp(rel, "/") == 0 ? "" : rel);
  walk_up(w, mount_dir, dir, v2);
}

/* Walks every directory of the process's cgroup for w->controller, in v2 and v1. */
static void cgroup_walk_run(cgroup_walk *w, const char *root) {
  enum { CGROUP_TEXT_MAX = 16 << 10, MOUNTINFO_MAX = 256 << 10 }; /* far above real files */
  char path[PATH_MAX];
  char *cg = malloc(CGROUP_TEXT_MAX), *mi = malloc(MOUNTINFO_MAX);
  if (!cg || !mi) goto done;
  snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
  if (read_small_file(path, cg, CGROUP_TEXT_MAX, false)) goto done;
  snprintf(path, sizeof path, "%s/proc/self/mountinfo", root);
  if (read_small_file(path, mi, MOUNTINFO_MAX, false)) goto done;

  char v2_path[PATH_MAX] = "", v1_path[PATH_MAX] = "";
  if (cgroup_path(cg, 1, w->controller, v2_path, sizeof v2_path)) v2_path[0] = '\0';
  if (cgroup_path(cg, 0, w->controller, v1_path, sizeof v1_path)) v1_path[0] = '\0';

  char *save = NULL;
  for (char *line = strtok_r(mi, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    consider_mount(w, root, line, v2_path, v1_path); /* cuts only inside its line */
  }
done:
  free(cg);
  free(mi);
}

void topo_quota_read(const char *root, double *cpus, char *source, size_t source_size) {
  quota_walk q = {.walk = {.controller = "cpu", .visit = visit_cpu},
                  .best = {.cpus = 0, .source = source, .source_size = source_size}};
  if (source && source_size) snprintf(source, source_size, "none");
  cgroup_walk_run(&q.walk, root ? root : "");
  *cpus = q.best.cpus;
}

/* ---- memory ---------------------------------------------------------------------------- */

/* The value of `key` in the first line that names it: in a memory.stat text "key N", in
 * meminfo's "key:" blanks "N kB" (`meminfo`), in the text's unit. -1 when absent, or when
 * that line is anything else: a number cut or followed by other text ("2x097152 kB") is
 * not read as its first digits (fuzz_quota). */
static long long stat_value(const char *text, const char *key, bool meminfo) {
  size_t klen = strlen(key);
  for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
    if (strncmp(line, key, klen) != 0 || line[klen] != (meminfo ? ':' : ' ')) continue;
    const char *p = line + klen + 1;
    if (meminfo)
      while (*p == ' ') p++;
    long long v = 0;
    if (*p < '0' || *p > '9') return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
      if (v > (LLONG_MAX - (*p - '0')) / 10) return -1;
      v = v * 10 + (*p - '0');
    }
    if (meminfo && strncmp(p, " kB", 3) == 0) p += 3;
    return *p == '\n' || *p == '\0' ? v : -1;
  }
  return -1;
}

typedef struct memory_walk {
  cgroup_walk walk; /* first: the visit gets it back */
  uint64_t available;
  char *source;
  size_t source_size;
} memory_walk;

/* A limit at or above 2^60 is none: v1 writes LLONG_MAX rounded down to a page. */
enum { MEMORY_NO_LIMIT_SHIFT = 60 };

static void visit_memory(cgroup_walk *w, const char *dir, bool v2, bool own) {
  memory_walk *m = (memory_walk *)w;
  char file[PATH_MAX + 32], usage_file[PATH_MAX + 32], stat_file[PATH_MAX + 32], text[64];
  long long limit, usage;
  snprintf(file, sizeof file, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
  snprintf(usage_file, sizeof usage_file, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
  snprintf(stat_file, sizeof stat_file, "%s/memory.stat", dir);
  if (v2 && read_small_file(file, text, sizeof text, true) == 0 && strncmp(text, "max", 3) == 0) return;
  /* v1: an ancestor's limit holds its descendants only with memory.use_hierarchy 1 (the
   * kernel forces it on a whole sub-tree, and since 5.11 everywhere); with 0 its usage
   * does not count ours either, so its limit less its usage says nothing of our room */
  long long hierarchy;
  if (!v2 && !own && read_long_long_in(dir, "memory.use_hierarchy", &hierarchy) == 0 && hierarchy == 0) return;
  if (read_long_long(file, &limit) != 0 || limit <= 0 || limit >= (1LL << MEMORY_NO_LIMIT_SHIFT)) return;
  if (read_long_long(usage_file, &usage) != 0 || usage < 0) return;
  /* the inactive file pages, reclaimed before the OOM killer acts (v1's own count is
   * total_inactive_file: its usage counts the children too, as v2's does) */
  enum { STAT_MAX = 8 << 10 };
  char *stat = malloc(STAT_MAX);
  long long inactive = -1;
  if (stat && read_small_file(stat_file, stat, STAT_MAX, false) == 0)
    inactive = stat_value(stat, v2 ? "inactive_file" : "total_inactive_file", false);
  free(stat);
  /* usage and stat are read apart, and v1's usage lags the exact stat by the per-CPU
   * charge batches: inactive pages at or above the usage are all of it (a cgroup that
   * only read files), not none of it */
  long long working = inactive <= 0 ? usage : inactive < usage ? usage - inactive : 0;
  uint64_t left = limit > working ? (uint64_t)(limit - working) : 0;
  if (left < m->available) {
    m->available = left;
    if (m->source && m->source_size) snprintf(m->source, m->source_size, "%s", file);
  }
}

uint64_t topo_memory_available(const char *root, char *source, size_t source_size) {
  memory_walk m = {.walk = {.controller = "memory", .visit = visit_memory},
                   .available = UINT64_MAX, .source = source, .source_size = source_size};
  if (!root) root = "";
  if (source && source_size) snprintf(source, source_size, "none");
  char path[PATH_MAX], text[4096];
  snprintf(path, sizeof path, "%s/proc/meminfo", root);
  long long kb = read_small_file(path, text, sizeof text, false) == 0 ? stat_value(text, "MemAvailable", true) : -1;
  if (kb >= 0 && kb <= (long long)(UINT64_MAX >> 10)) {
    m.available = (uint64_t)kb << 10;
    if (source && source_size) snprintf(source, source_size, "%s", path);
  }
  cgroup_walk_run(&m.walk, root);
  return m.available;
}
