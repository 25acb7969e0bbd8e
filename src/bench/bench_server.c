/*
 * bench_server.c - `inferd bench --mode server`: N POSTs of one file from C concurrent
 * keep-alive clients.
 *
 * Design: one libcurl multi handle per process and C easy handles made once; an easy
 * handle that finishes is removed, its latency and status recorded, and re-added for
 * the next request, so it reuses its connection from the multi handle's cache (HTTP
 * keep-alive) and nothing is allocated per request beyond what libcurl does. The loop
 * waits in curl_multi_poll. Every request has a timeout (--timeout), so a dead server
 * gives errors with status 0, never a hang; a request of status 0 is also counted by
 * libcurl's reason (refused, timed out, reset, a partial answer: bench_result.no_answer).
 *
 * Closed loop (the default): every client sends its next request as soon as its last
 * one is answered. Open loop (--request-rate R): request k is due at start + k/R and is
 * sent then by a free client; when all C are busy it waits for one, and its latency
 * counts from when it was due, so the wait shows in the percentiles instead of being
 * hidden (coordinated omission); such requests are counted as delayed. The loop sleeps
 * in curl_multi_poll until the next answer or the next due time; the due time is a
 * timerfd among the polled descriptors, since curl_multi_poll's own timeout counts
 * whole milliseconds: a request due sooner than that (above 500 requests/s) would
 * otherwise be waited for with the sockets unwatched, and an answer coming in then
 * counted late by up to the wait.
 *
 * With --processes P, P children are forked first; child i runs N_i requests on C_i
 * clients (N and C split as evenly as possible; open loop: child i sends requests i,
 * i + P, i + 2P, ... of the one schedule) and writes back through a pipe one
 * fixed-size record (its status counts and sample count) followed by its latency
 * samples. The run starts at a gate: each child sets up its clients, writes one byte
 * to its pipe and blocks on a shared "go" pipe; once all are ready the parent stores
 * the start time in a shared anonymous mapping and closes the go pipe, so neither the
 * open-loop schedule nor the measured seconds include forking and setting up (with a
 * busy server, 32 children took longer than any fixed head start). The same mapping
 * holds the progress counter that feeds the progress bar.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"

/* What a child process pipes back before its samples. */
typedef struct worker_record {
  int64_t status_count[BENCH_STATUS_SLOTS];
  int64_t no_answer[BENCH_NO_ANSWER_SLOTS];
  int64_t samples; /* doubles that follow: latencies in ms */
  int64_t connections;
  int64_t delayed;
  int32_t failed;  /* nonzero: the worker could not run (curl init failed) */
  int32_t interrupted; /* the signal that stopped it early, or 0 */
  char error[256];     /* why, when failed */
} worker_record;

/* Shared between the parent and its children (an anonymous shared mapping). */
typedef struct shared_state {
  int64_t progress; /* requests finished, for the progress bar */
  double start;     /* seconds: when the run starts, set before the go pipe closes */
} shared_state;

/* The start gate of a child process: where it says it is ready, where it waits. */
typedef struct start_gate {
  int ready_fd, go_fd;
  const shared_state *shared;
} start_gate;

/* Open loop: this process's request k is due at start + (first + k * stride) / rate
 * seconds. rate 0: closed loop, every request is due at once. */
typedef struct schedule {
  double start, rate;
  int64_t first, stride;
} schedule;

static double due_time(const schedule *sc, int64_t k) {
  return sc->start + (double)(sc->first + k * sc->stride) / sc->rate;
}

/* Waits in curl_multi_poll for an answer or until `due` (bench__now's clock, which is
 * CLOCK_MONOTONIC), whichever comes first, to the microsecond: `timer` is a timerfd
 * armed at `due` and polled beside curl's sockets. Its expiry is read back so that the
 * next wait starts clear. */
static void wait_answer_or(CURLM *multi, int timer, double due) {
  double whole = floor(due);
  struct itimerspec at = {.it_value = {(time_t)whole, (long)((due - whole) * 1e9)}};
  if (at.it_value.tv_sec == 0 && at.it_value.tv_nsec == 0) at.it_value.tv_nsec = 1; /* 0 disarms */
  struct curl_waitfd fd = {.fd = timer, .events = CURL_WAIT_POLLIN};
  if (timerfd_settime(timer, TFD_TIMER_ABSTIME, &at, NULL) != 0) { /* cannot be: a valid time, a valid fd */
    curl_multi_poll(multi, NULL, 0, 1, NULL);
    return;
  }
  curl_multi_poll(multi, &fd, 1, 100, NULL);
  uint64_t expired; /* EAGAIN when an answer came first: nothing to clear */
  ssize_t got = read(timer, &expired, sizeof expired);
  (void)got;
}

typedef struct client {
  CURL *easy;
  double started; /* seconds: when sent, or in open loop when it was due */
} client;

static size_t discard_body(char *data, size_t size, size_t count, void *user) {
  (void)data, (void)user;
  return size * count;
}

static int read_whole_file(const char *path, char **data, size_t *size, char *err, size_t err_size) {
  int fd = open(path, O_RDONLY);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) {
    snprintf(err, err_size, "cannot open --file '%s': %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  *size = (size_t)sb.st_size;
  *data = malloc(*size + 1);
  size_t got = 0;
  while (*data && got < *size) {
    ssize_t n = read(fd, *data + got, *size - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fd);
  if (!*data || got != *size) {
    snprintf(err, err_size, "cannot read --file '%s'", path);
    free(*data);
    *data = NULL;
    return -1;
  }
  return 0;
}

/* What run_clients counts, besides the latencies. */
typedef struct client_counts {
  int64_t *status_count; /* [BENCH_STATUS_SLOTS] */
  int64_t *no_answer;    /* [BENCH_NO_ANSWER_SLOTS] */
  int64_t done, connections, delayed;
} client_counts;

/* A child: says it is ready (whether or not its set-up worked) and waits until the
 * parent closes the go pipe. Returns the start time the parent set. */
static double pass_gate(const start_gate *gate) {
  char byte = 1;
  while (write(gate->ready_fd, &byte, 1) < 0 && errno == EINTR) {}
  while (read(gate->go_fd, &byte, 1) < 0 && errno == EINTR) {}
  double start;
  __atomic_load(&gate->shared->start, &start, __ATOMIC_ACQUIRE);
  return start;
}

/* A --header line for libcurl. "Name:" with an empty value would make libcurl remove
 * that header instead (curl's -H convention); the user asked for it empty, which
 * libcurl spells "Name;". Setup only. */
static struct curl_slist *append_header(struct curl_slist *list, const char *line) {
  const char *colon = strchr(line, ':');
  if (!colon || colon[strspn(colon + 1, " \t") + 1] != '\0') return curl_slist_append(list, line);
  size_t name = (size_t)(colon - line);
  char *empty = malloc(name + 2);
  if (!empty) return list;
  memcpy(empty, line, name);
  memcpy(empty + name, ";", 2);
  struct curl_slist *out = curl_slist_append(list, empty);
  free(empty);
  return out;
}

/* Runs `requests` requests on `concurrency` clients in this process, on schedule `sc`,
 * whose start is set once the clients are made: now, or by the parent after `gate`
 * (a child process). `latency_ms` has room for `requests` samples; `progress` is
 * bumped per finished request. Returns 0, or -1 with `err` when curl could not be set
 * up. */
static int run_clients(const bench_params *p, schedule *sc, const start_gate *gate, const char *body,
                       size_t body_size, int64_t requests, int concurrency, client_counts *out,
                       double *latency_ms, volatile int64_t *progress, char *err, size_t err_size) {
  out->done = out->connections = out->delayed = 0;
  if (requests <= 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    if (gate) pass_gate(gate); /* the parent waits for every child */
    if (requests <= 0) return 0;
    snprintf(err, err_size, "curl_global_init failed");
    return -1;
  }
  if (concurrency > requests) concurrency = (int)requests;
  bool gated = false;
  CURLM *multi = curl_multi_init();
  int timer = sc->rate > 0 ? timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC) : -1;
  client *clients = calloc((size_t)concurrency, sizeof *clients);
  client **idle = calloc((size_t)concurrency, sizeof *idle); /* a stack of free clients */
  struct curl_slist *headers = NULL;
  int rc = -1;
  if (!multi || !clients || !idle) {
    snprintf(err, err_size, "out of memory");
    goto out;
  }
  if (sc->rate > 0 && timer < 0) {
    snprintf(err, err_size, "timerfd_create: %s", strerror(errno));
    goto out;
  }
  curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long)concurrency);
  bool own_type = false; /* a --header 'Content-Type: ...' replaces the default */
  for (int i = 0; i < p->header_count; i++) own_type |= strncasecmp(p->headers[i], "content-type:", 13) == 0;
  if (!own_type) headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
  headers = curl_slist_append(headers, "Expect:"); /* no 100-continue round trip */
  for (int i = 0; i < p->header_count; i++) headers = append_header(headers, p->headers[i]);
  /* whole milliseconds, rounded up: 0 would mean no timeout at all to curl */
  long timeout_ms = (long)ceil(p->timeout_seconds * 1000.0);
  if (timeout_ms < 1) timeout_ms = 1;
  for (int i = 0; i < concurrency; i++) {
    CURL *e = curl_easy_init();
    if (!e) {
      snprintf(err, err_size, "curl_easy_init failed");
      goto out;
    }
    clients[i].easy = e;
    curl_easy_setopt(e, CURLOPT_URL, p->url);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1); /* https too: a connection per client */
    if (p->cacert) curl_easy_setopt(e, CURLOPT_CAINFO, p->cacert);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body); /* borrowed, not copied */
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_size);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard_body);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, (void *)&clients[i]);
  }
  for (int i = 0; i < concurrency; i++) idle[i] = &clients[concurrency - 1 - i];
  gated = true;
  sc->start = gate ? pass_gate(gate) : bench__now();
  int n_idle = concurrency;
  int64_t started = 0;
  double freed_at = 0; /* open loop: when the last time all clients were busy ended */
  while (out->done < requests) {
    if (bench__stop_signal()) break; /* the requests in flight are dropped, uncounted */
    /* send every request that is due, while a client is free */
    double now = bench__now();
    while (started < requests && n_idle > 0) {
      double due = sc->rate > 0 ? due_time(sc, started) : now;
      if (due > now) break;
      if (due < freed_at) out->delayed++;
      client *c = idle[--n_idle];
      c->started = due;
      CURLMcode added = curl_multi_add_handle(multi, c->easy);
      if (added != CURLM_OK) { /* never answered, the loop would wait for it forever */
        snprintf(err, err_size, "curl_multi_add_handle: %s", curl_multi_strerror(added));
        goto out;
      }
      started++;
    }
    int running = 0;
    CURLMcode performed = curl_multi_perform(multi, &running);
    if (performed != CURLM_OK) {
      snprintf(err, err_size, "curl_multi_perform: %s", curl_multi_strerror(performed));
      goto out;
    }
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(multi, &left))) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL *e = msg->easy_handle;
      CURLcode result = msg->data.result;
      client *c = NULL;
      curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&c);
      long status = 0;
      if (result == CURLE_OK) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
      long new_connections = 0;
      curl_easy_getinfo(e, CURLINFO_NUM_CONNECTS, &new_connections);
      out->connections += new_connections;
      if (status < 0 || status >= BENCH_STATUS_SLOTS) status = 0;
      if (status == 0) { /* why: a refused connection, a timeout and a reset are different problems */
        int why = (int)result;
        out->no_answer[why > 0 && why < BENCH_NO_ANSWER_SLOTS ? why : BENCH_NO_ANSWER_SLOTS - 1]++;
      }
      now = bench__now();
      out->status_count[status]++;
      latency_ms[out->done++] = bench_latency((now - c->started) * 1000.0, status >= 200 && status < 300);
      __atomic_add_fetch(progress, 1, __ATOMIC_RELAXED);
      curl_multi_remove_handle(multi, e);
      if (n_idle == 0) freed_at = now;
      idle[n_idle++] = c;
    }
    if (out->done >= requests) break;
    if (n_idle > 0 && started < requests && sc->rate > 0) {
      /* sleep until the next request is due, or an answer comes */
      double due = due_time(sc, started);
      if (due > bench__now()) wait_answer_or(multi, timer, due);
    } else if (n_idle == 0 || started >= requests) {
      curl_multi_poll(multi, NULL, 0, 100, NULL);
    }
  }
  rc = 0;
out:
  if (clients)
    for (int i = 0; i < concurrency; i++)
      if (clients[i].easy) {
        if (multi) curl_multi_remove_handle(multi, clients[i].easy);
        curl_easy_cleanup(clients[i].easy);
      }
  free(clients);
  free(idle);
  curl_slist_free_all(headers);
  if (multi) curl_multi_cleanup(multi);
  if (timer >= 0) close(timer);
  curl_global_cleanup();
  if (gate && !gated) pass_gate(gate);
  return rc;
}

static int write_all(int fd, const void *data, size_t size) {
  const char *p = data;
  while (size) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    size -= (size_t)n;
  }
  return 0;
}

/* The parent's children, watched while it waits for them. */
typedef struct children {
  const pid_t *pids;
  int count;
  bool told;  /* to stop (SIGTERM), once the parent was asked to */
  int failed; /* the first found dead (a signal or an exit status not 0), or -1 */
} children;

/* Passes a stop on to the children, and stops them all when one of them died: a run
 * without its results is no run, and the others would go on for nothing. A child peeked
 * at (WNOWAIT) stays to be reaped. */
static void watch_children(children *ch) {
  if (!ch->told && bench__stop_signal()) {
    for (int i = 0; i < ch->count; i++) kill(ch->pids[i], SIGTERM);
    ch->told = true;
  }
  for (int i = 0; i < ch->count && ch->failed < 0; i++) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (waitid(P_PID, (id_t)ch->pids[i], &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) continue;
    if (info.si_code == CLD_EXITED && info.si_status == 0) continue;
    ch->failed = i;
    for (int k = 0; k < ch->count; k++) kill(ch->pids[k], SIGKILL);
  }
}

/* Reads `size` bytes; -1 at EOF or on an error. With `ch` (the parent), it wakes every
 * 100 ms to watch the children (watch_children). */
static int read_all(int fd, void *data, size_t size, children *ch) {
  char *p = data;
  while (size) {
    if (ch) {
      watch_children(ch);
      struct pollfd ready = {.fd = fd, .events = POLLIN};
      if (poll(&ready, 1, 100) <= 0) continue;
    }
    ssize_t n = read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    size -= (size_t)n;
  }
  return 0;
}

int bench_server_run(const bench_params *p, bench_result *r, char *err, size_t err_size) {
  memset(r, 0, sizeof *r);
  char *body = NULL;
  size_t body_size = 0;
  if (read_whole_file(p->file, &body, &body_size, err, err_size) != 0) return -1;
  int concurrency = p->concurrency;
  if (concurrency > p->requests) concurrency = (int)p->requests;
  int processes = p->processes < 1 ? 1 : p->processes;
  if (processes > concurrency) processes = concurrency;
  r->latency_ms = malloc((size_t)p->requests * sizeof(double));
  shared_state *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (!r->latency_ms || shared == MAP_FAILED) {
    snprintf(err, err_size, "out of memory");
    free(body);
    free(r->latency_ms);
    r->latency_ms = NULL;
    if (shared != MAP_FAILED) munmap(shared, sizeof *shared);
    return -1;
  }
  *shared = (shared_state){0};
  volatile int64_t *progress = &shared->progress;
  int rc = 0;
  schedule sc = {.rate = p->request_rate, .first = 0, .stride = 1};
  if (processes == 1) {
    bench__sampler *sampler = bench__sampler_start(progress, p->requests);
    client_counts counts = {.status_count = r->status_count, .no_answer = r->no_answer};
    rc = run_clients(p, &sc, NULL, body, body_size, p->requests, concurrency, &counts, r->latency_ms, progress, err,
                     err_size);
    r->done = counts.done, r->connections = counts.connections, r->delayed = counts.delayed;
    r->interrupted = counts.done < p->requests ? bench__stop_signal() : 0;
    r->seconds = bench__now() - sc.start;
    bench__sampler_stop(sampler, &r->peak_cpu_percent, &r->peak_memory_percent);
  } else {
    pid_t pids[processes];
    int fds[processes];
    int forked = 0, fork_errno = 0;
    int go[2];
    if (pipe(go) != 0) {
      snprintf(err, err_size, "pipe: %s", strerror(errno));
      munmap(shared, sizeof *shared);
      free(body);
      bench_result_free(r);
      return -1;
    }
    fflush(NULL);
    pid_t parent = getpid();
    for (int i = 0; i < processes; i++) {
      int64_t n = p->requests / processes + (i < p->requests % processes);
      int c = concurrency / processes + (i < concurrency % processes);
      int pipefd[2];
      if (pipe(pipefd) != 0) {
        fork_errno = errno;
        break;
      }
      pid_t pid = fork();
      if (pid < 0) {
        fork_errno = errno;
        close(pipefd[0]);
        close(pipefd[1]);
        break;
      }
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* clients stop with the run */
        if (getppid() != parent) _exit(1);
        /* SIGINT and SIGTERM (the parent's, or Ctrl-C's to the whole group) stop its run and
         * it sends back what it finished; unlike the parent's, its handler stays: the parent
         * tells it after Ctrl-C may already have */
        bench_catch_stop_signals(0);
        close(pipefd[0]);
        close(go[1]);
        for (int k = 0; k < forked; k++) close(fds[k]);
        static worker_record record;
        double *samples = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
        client_counts counts = {.status_count = record.status_count, .no_answer = record.no_answer};
        schedule mine = {.rate = p->request_rate, .first = i, .stride = processes};
        start_gate gate = {.ready_fd = pipefd[1], .go_fd = go[0], .shared = shared};
        snprintf(record.error, sizeof record.error, "out of memory");
        if (!samples) pass_gate(&gate);
        record.failed = !samples || run_clients(p, &mine, &gate, body, body_size, n, c, &counts, samples, progress,
                                                record.error, sizeof record.error) != 0;
        record.samples = counts.done;
        record.interrupted = counts.done < n ? bench__stop_signal() : 0;
        record.connections = counts.connections;
        record.delayed = counts.delayed;
        int bad = write_all(pipefd[1], &record, sizeof record) ||
                  write_all(pipefd[1], samples, (size_t)counts.done * sizeof(double));
        _exit(bad || record.failed ? 1 : 0);
      }
      close(pipefd[1]);
      pids[forked] = pid;
      fds[forked++] = pipefd[0];
    }
    close(go[0]);
    children ch = {.pids = pids, .count = forked, .failed = -1};
    /* the gate: every child has made its clients (or died: then its pipe is at EOF) */
    int failed = forked < processes;
    char why[320] = ""; /* the first failure */
    if (failed)
      snprintf(why, sizeof why, "cannot start client process %d of %d: %s", forked + 1, processes,
               strerror(fork_errno));
    int lost = -1; /* the first child that died, or whose results did not come */
    for (int i = 0; i < forked; i++) {
      char ready;
      if (read_all(fds[i], &ready, 1, &ch) != 0 && lost < 0) lost = i;
    }
    bool no_start = failed || lost >= 0;
    if (no_start) /* no run without all its clients: the others are not left to run it for nothing */
      for (int i = 0; i < forked; i++) kill(pids[i], SIGKILL);
    bench__sampler *sampler = bench__sampler_start(progress, p->requests);
    double start = bench__now();
    __atomic_store(&shared->start, &start, __ATOMIC_RELEASE);
    close(go[1]);
    for (int i = 0; i < forked && !no_start; i++) {
      static worker_record record;
      if (read_all(fds[i], &record, sizeof record, &ch) != 0 || record.samples < 0 ||
          r->done + record.samples > p->requests ||
          read_all(fds[i], r->latency_ms + r->done, (size_t)record.samples * sizeof(double), &ch) != 0) {
        failed = 1;
        if (lost < 0) lost = i;
      } else {
        for (int s = 0; s < BENCH_STATUS_SLOTS; s++) r->status_count[s] += record.status_count[s];
        for (int s = 0; s < BENCH_NO_ANSWER_SLOTS; s++) r->no_answer[s] += record.no_answer[s];
        r->done += record.samples;
        r->connections += record.connections;
        r->delayed += record.delayed;
        if (record.interrupted) r->interrupted = record.interrupted;
        if (record.failed && !why[0])
          snprintf(why, sizeof why, "client process %d of %d: %.256s", i + 1, processes, record.error);
        failed |= record.failed;
      }
    }
    for (int i = 0; i < forked; i++) close(fds[i]);
    failed |= no_start;
    if (ch.failed >= 0) { /* the one that died, not one that watch_children killed */
      failed = 1;
      lost = ch.failed;
    }
    for (int i = 0; i < forked; i++) { /* EINTR: a SIGTERM after a Ctrl-C; reap it all the same */
      int status = 0;
      while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR) {}
      if (i != lost || why[0]) continue;
      if (WIFSIGNALED(status))
        snprintf(why, sizeof why, "client process %d of %d (pid %d) was killed by signal %d (%s) before it sent its "
                 "results", i + 1, processes, (int)pids[i], WTERMSIG(status), strsignal(WTERMSIG(status)));
      else
        snprintf(why, sizeof why, "client process %d of %d (pid %d) exited with status %d before it sent its results",
                 i + 1, processes, (int)pids[i], WEXITSTATUS(status));
    }
    if (bench__stop_signal() && r->done < p->requests) r->interrupted = bench__stop_signal(); /* ours, if told */
    r->seconds = bench__now() - start;
    bench__sampler_stop(sampler, &r->peak_cpu_percent, &r->peak_memory_percent);
    if (failed) {
      snprintf(err, err_size, "%s", why[0] ? why : "a client process failed");
      rc = -1;
    }
  }
  munmap(shared, sizeof *shared);
  free(body);
  if (rc != 0) bench_result_free(r);
  return rc;
}

void bench_result_free(bench_result *r) {
  free(r->latency_ms);
  free(r->jobs);
  r->latency_ms = NULL;
  r->jobs = NULL;
}
