/*
 * bench_sample.c - the sampling thread of `inferd bench`: every 100 ms it reads the
 * machine's CPU time from /proc/stat (busy = everything but idle and iowait, over the
 * last interval) and its memory from /proc/meminfo (used = MemTotal - MemAvailable),
 * keeps the peaks, and redraws a progress bar on stderr when stderr is a terminal. The
 * texts are read by pure functions (bench__parse_proc_stat, bench__parse_meminfo,
 * bench__cpu_percent), which tests/fuzz/fuzz_proc.c runs on any text.
 *
 * The peak CPU is that of the busiest 100 ms interval of the run; a run shorter than
 * one interval reports its whole span instead. Stopping wakes the thread at once (a
 * condition variable, not a sleep), so no interval reaches past the run.
 *
 * Invariants: one sampler per run, started and stopped by the benchmark's thread, which
 * alone takes SIGINT and SIGTERM (the sampler blocks them). The
 * progress counter may be written by other threads or processes (shared mapping); it
 * is only read here, atomically.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"

struct bench__sampler {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake; /* signalled by stop; CLOCK_MONOTONIC */
  bool stop;           /* under lock */
  int intervals;       /* CPU intervals measured */
  const volatile int64_t *progress;
  int64_t total;
  int tty;
  double start;
  double peak_cpu, peak_memory;
  unsigned long long last_busy, last_total;
};

static volatile sig_atomic_t stop_signal; /* bench_request_stop's, read by the runs' loops */

void bench_request_stop(int signo) { stop_signal = signo > 0 ? signo : SIGTERM; }

static void on_stop_signal(int signo) { bench_request_stop(signo); }

void bench_catch_stop_signals(int sa_flags) {
  static const int signals[] = {SIGINT, SIGTERM};
  for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
    struct sigaction old, sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = sa_flags;
    sigemptyset(&sa.sa_mask);
    if (sigaction(signals[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(signals[i], &sa, NULL);
  }
}

int bench__stop_signal(void) { return stop_signal; }

double bench__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the /proc texts (pure, for tests/fuzz/fuzz_proc.c) ----------------------------- */

/* Decimal digits at *p into *out, advancing *p; false for none, or past ULLONG_MAX. */
static bool read_count(const char **p, unsigned long long *out) {
  const char *s = *p;
  unsigned long long v = 0;
  if (*s < '0' || *s > '9') return false;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (v > (ULLONG_MAX - (unsigned long long)(*s - '0')) / 10) return false;
    v = v * 10 + (unsigned long long)(*s - '0');
  }
  *out = v;
  *p = s;
  return true;
}

int bench__parse_proc_stat(const char *text, unsigned long long *busy, unsigned long long *total) {
  if (strncmp(text, "cpu", 3) != 0 || (text[3] != ' ' && text[3] != '\t')) return -1;
  const char *p = text + 3;
  unsigned long long v[8] = {0}, all = 0;
  int n = 0;
  /* user nice system idle iowait irq softirq steal; guest and guest_nice, which follow,
   * are already counted in user and nice */
  while (n < 8) {
    while (*p == ' ' || *p == '\t') p++;
    if (!read_count(&p, &v[n])) break;
    if (v[n] > ULLONG_MAX - all) return -1;
    all += v[n++];
  }
  if (n < 4) return -1;
  *total = all;
  *busy = all - v[3] - v[4]; /* minus idle and iowait, which all includes */
  return 0;
}

double bench__parse_meminfo(const char *text) {
  unsigned long long total = 0, available = 0;
  bool have_total = false, have_available = false;
  for (const char *line = text; *line;) {
    static const char TOTAL[] = "MemTotal:", AVAILABLE[] = "MemAvailable:";
    bool is_total = strncmp(line, TOTAL, sizeof TOTAL - 1) == 0;
    bool is_available = strncmp(line, AVAILABLE, sizeof AVAILABLE - 1) == 0;
    if (is_total || is_available) {
      const char *p = line + (is_total ? sizeof TOTAL : sizeof AVAILABLE) - 1;
      while (*p == ' ' || *p == '\t') p++;
      unsigned long long v;
      if (read_count(&p, &v)) {
        if (is_total) total = v, have_total = true;
        else available = v, have_available = true;
      }
    }
    const char *eol = strchr(line, '\n');
    if (!eol) break;
    line = eol + 1;
  }
  /* no MemAvailable (kernels before 3.14): unknown, not 100 % */
  if (!have_total || !have_available || total == 0) return 0;
  if (available >= total) return 0;
  /* near 2^64 kB both round to the same double, or the quotient to just above 1 */
  double used = 100.0 * (double)(total - available) / (double)total;
  return used < 100.0 ? used : 100.0;
}

double bench__cpu_percent(unsigned long long last_busy, unsigned long long last_total, unsigned long long busy,
                          unsigned long long total) {
  if (total <= last_total) return -1;
  /* the kernel's idle and iowait counters can step back (proc(5)), so busy may grow by
   * more than total, or even shrink: clamp to 0..100 rather than report 180 % or 1e19 % */
  if (busy <= last_busy) return 0;
  double cpu = 100.0 * (double)(busy - last_busy) / (double)(total - last_total);
  return cpu < 100.0 ? cpu : 100.0;
}

/* ---- sampling ------------------------------------------------------------------------ */

/* Reads a /proc file into buf (NUL-terminated, cut to fit); 0, or -1. */
static int read_proc(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, size - 1, f);
  fclose(f);
  buf[n] = '\0';
  return 0;
}

static int read_cpu(unsigned long long *busy, unsigned long long *total) {
  char text[512]; /* the first line is all that is read */
  if (read_proc("/proc/stat", text, sizeof text)) return -1;
  return bench__parse_proc_stat(text, busy, total);
}

static double read_memory_percent(void) {
  char text[8192]; /* MemTotal and MemAvailable are its first and third lines */
  if (read_proc("/proc/meminfo", text, sizeof text)) return 0;
  return bench__parse_meminfo(text);
}

static void sample(bench__sampler *s) {
  unsigned long long busy, total;
  if (read_cpu(&busy, &total) == 0) {
    double cpu = s->last_total ? bench__cpu_percent(s->last_busy, s->last_total, busy, total) : -1;
    if (cpu > s->peak_cpu) s->peak_cpu = cpu;
    s->intervals += cpu >= 0;
    s->last_busy = busy;
    s->last_total = total;
  }
  double memory = read_memory_percent();
  if (memory > s->peak_memory) s->peak_memory = memory;
}

static void draw(bench__sampler *s, int final) {
  if (!s->tty || s->total <= 0) return;
  int64_t done = __atomic_load_n(s->progress, __ATOMIC_RELAXED);
  enum { WIDTH = 40 };
  int filled = (int)(WIDTH * done / s->total);
  char bar[WIDTH + 1];
  for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
  bar[WIDTH] = '\0';
  fprintf(stderr, "\r[%s] %lld/%lld %.1f s", bar, (long long)done, (long long)s->total, bench__now() - s->start);
  if (final) fputc('\n', stderr);
  fflush(stderr);
}

static void *sampler_thread(void *arg) {
  bench__sampler *s = arg;
  pthread_mutex_lock(&s->lock);
  while (!s->stop) {
    struct timespec due;
    clock_gettime(CLOCK_MONOTONIC, &due);
    due.tv_nsec += 100 * 1000 * 1000; /* 100 ms */
    if (due.tv_nsec >= 1000000000L) due.tv_sec++, due.tv_nsec -= 1000000000L;
    while (!s->stop && pthread_cond_timedwait(&s->wake, &s->lock, &due) != ETIMEDOUT) {
    }
    if (s->stop) break;
    pthread_mutex_unlock(&s->lock);
    sample(s);
    draw(s, 0);
    pthread_mutex_lock(&s->lock);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

bench__sampler *bench__sampler_start(const volatile int64_t *progress, int64_t total) {
  bench__sampler *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->progress = progress;
  s->total = total;
  s->tty = isatty(STDERR_FILENO);
  s->start = bench__now();
  sample(s); /* the baseline of the first interval */
  pthread_condattr_t attr; /* glibc: init, setclock and a default mutex cannot fail */
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int cond = pthread_cond_init(&s->wake, &attr);
  pthread_condattr_destroy(&attr);
  if (cond != 0) {
    free(s);
    return NULL;
  }
  pthread_mutex_init(&s->lock, NULL);
  /* the thread blocks SIGINT and SIGTERM: their handler must interrupt the benchmark's
   * thread (its poll, read or sleep), not this one */
  sigset_t stops, old;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stops, &old);
  int created = pthread_create(&s->thread, NULL, sampler_thread, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (created != 0) {
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return NULL;
  }
  return s;
}

void bench__sampler_stop(bench__sampler *s, double *peak_cpu, double *peak_memory) {
  *peak_cpu = *peak_memory = 0;
  if (!s) return;
  pthread_mutex_lock(&s->lock);
  s->stop = true;
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  pthread_cond_destroy(&s->wake);
  pthread_mutex_destroy(&s->lock);
  /* The last partial interval counts for memory only (a CPU share over a few ms is
   * noise), unless the run had no whole interval: then the CPU of the whole run. */
  if (s->intervals == 0) sample(s);
  double memory = read_memory_percent();
  if (memory > s->peak_memory) s->peak_memory = memory;
  draw(s, 1);
  *peak_cpu = s->peak_cpu;
  *peak_memory = s->peak_memory;
  free(s);
}
