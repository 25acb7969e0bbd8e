/*
 * cli_serve.c - `inferd serve`: the model server, with TorchServe's command line.
 *
 *   inferd serve [--ts-config FILE] [--model-store DIR] [--models NAME=FILE ... | all]
 *                [--disable-token-auth] [--enable-model-api] [--foreground | --start | --stop]
 *
 * Configuration is one table (src/config): defaults, then config.properties
 * ($TS_CONFIG_FILE, --ts-config, or ./config.properties), then the flags; `--help`
 * lists every key.
 *
 * Foreground or background: inferd stays in the foreground unless --start is given
 * (TorchServe's `torchserve --start` backgrounds by default; inferd's default is what
 * a terminal, systemd, a container and a test all want). --start forks a server that
 * logs to logs/inferd.log, writes its pid to the pid file ($INFERD_PID_FILE, else
 * /tmp/.inferd.pid) and returns once it listens (exit 0) or has failed (exit 1);
 * --stop sends that server SIGTERM and waits until it has exited; with no server
 * running it says so and exits 0, as `torchserve --stop` does. The server holds an
 * fcntl lock on its pid file while it lives, and --stop signals only the lock's holder:
 * a stale file's pid, perhaps reused by another program (or another inferd), is left
 * alone. --start --foreground
 * (a container's entry point) writes the pid file and stays in the foreground, as
 * TorchServe waits on its server then. A foreground server writes no pid file
 * otherwise (stop it with SIGTERM or Ctrl-C), so several can run at once.
 *
 * Start-up, in order: the machine's topology (hwloc; workers are unpinned when it
 * cannot be read), the HTTP server (sockets bound, HTTP threads running, key_file.json
 * written; /ping says 503 "Unhealthy" meanwhile), then every model of load_models,
 * loaded and warmed up with its workers placed by the topology plan (logged per
 * model); /ping turns 200 "Healthy" when all are ready. Until then the management API
 * answers reads but refuses every change with 503 (TorchServe does not listen yet). A model of load_models that
 * fails to load stops the server with exit status 1 (or 2 when the model or the config
 * is at fault): a server that cannot serve what it was told to serve should not look
 * healthy to a load balancer.
 *
 * Stop: SIGTERM, SIGINT or SIGHUP (a closed terminal; the JVM runs TorchServe's
 * shutdown hooks on it) drains - new predictions and /ping get 503, requests already
 * accepted are answered (for at most default_response_timeout + 5 s), then the server
 * exits with status 0. A second signal, while models still load or during the drain,
 * exits at once (status 128 + signal; the pid and key files are removed), so a second
 * Ctrl-C always works. SIGINT and SIGHUP that were ignored when the server started
 * (`nohup`, a script's background job) stay ignored. Signals are
 * blocked in every thread and taken by one thread with sigwait, so no handler runs
 * inside a library; it wakes the main thread through a semaphore.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "config/config.h"
#include "http/http.h"
#include "topo/topo.h"

static const char LOG_DIR[] = "logs", LOG_FILE[] = "logs/inferd.log";

static const char *pid_file(void) {
  const char *p = getenv("INFERD_PID_FILE");
  return p && *p ? p : "/tmp/.inferd.pid";
}

static void serve_usage(FILE *f) {
  fprintf(f,
          "usage: inferd serve [--ts-config FILE] [--model-store DIR] [--models NAME=FILE ... | all]\n"
          "                    [--disable-token-auth] [--enable-model-api] [--foreground | --start | --stop]\n\n"
          "Serves models with TorchServe's APIs: inference (/ping, /predictions/{model}), management\n"
          "(/models) and metrics (/metrics). Stays in the foreground unless --start is given.\n\n"
          "Configuration keys (config.properties) and flags:\n");
  config_help(f);
}

static long read_pid(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long pid = -1;
  if (fscanf(f, "%ld", &pid) != 1) pid = -1;
  fclose(f);
  return pid;
}

/* The pid file is locked (an fcntl write lock on the whole file) by the server that
 * wrote it, for as long as that process lives. The lock, not the pid written in the
 * file, says whether a server runs and which one: F_GETLK names the holder. A file that
 * nobody locks was left by a server that died, and the pid in it may since belong to
 * any process, another inferd among them (`inferd bench`, a foreground server), so it
 * is never signalled. The kernel drops the lock when the process exits, before it is a
 * zombie, so --stop also sees the exit of a server whose parent never reaps it. */

/* The pid of the process that holds the lock of the file open at `fd`; 0 when none
 * does, -1 when it cannot be asked (errno set). */
static long lock_holder(int fd) {
  struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  if (fcntl(fd, F_GETLK, &lock) != 0) return -1;
  return lock.l_type == F_UNLCK ? 0 : (long)lock.l_pid;
}

/* --stop: SIGTERM to the server that holds the pid file, then wait (bounded) until it
 * has exited (it removes the file itself). */
static int stop_server(void) {
  const char *path = pid_file();
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    printf("inferd is not currently running (no pid file %s).\n", path);
    return 0;
  }
  long pid = lock_holder(fd);
  if (pid < 0) {
    fprintf(stderr, "inferd serve: cannot read the lock of %s: %s\n", path, strerror(errno));
    close(fd);
    return 1;
  }
  if (pid == 0) {
    long named = read_pid(path);
    if (named > 0 && named <= INT_MAX && (kill((pid_t)named, 0) == 0 || errno == EPERM))
      printf("inferd is not currently running: pid %ld of %s is not an inferd server (a stale pid file, removed); "
             "not stopping it\n", named, path);
    else
      printf("inferd is not currently running (no live pid in %s).\n", path);
    unlink(path);
    close(fd);
    return 0;
  }
  if (kill((pid_t)pid, SIGTERM) != 0) {
    fprintf(stderr, "inferd serve: cannot stop pid %ld of %s: %s\n", pid, path, strerror(errno));
    close(fd);
    return 1;
  }
  for (int i = 0; i < 1800 && lock_holder(fd) == pid; i++) { /* at most 3 minutes */
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  bool gone = lock_holder(fd) != pid;
  close(fd);
  if (!gone) {
    fprintf(stderr, "inferd serve: pid %ld is still draining after 3 minutes\n", pid);
    return 1;
  }
  printf("inferd has stopped.\n");
  return 0;
}

/* Whether a live server holds the pid file (then says so on stderr). */
static bool already_running(void) {
  const char *path = pid_file();
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  long pid = lock_holder(fd);
  close(fd);
  if (pid > 0) {
    fprintf(stderr, "inferd serve: a server is already running (pid %ld, %s); stop it with --stop\n", pid, path);
    return true;
  }
  return false;
}

static int pid_fd = -1; /* the locked pid file, open until the process exits */

/* Creates the pid file, locks it and writes this process's pid into it. INFERD_ALREADY_EXISTS
 * when another live server holds it; a file that cannot be written or locked (a file
 * system without locks) is only logged, as a server runs without one. */
static inferd_code claim_pid_file(bool *written, inferd_status *st) {
  const char *path = pid_file();
  *written = false;
  for (;;) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      core_log(CORE_LOG_WARN, "cannot write the pid file %s: %s", path, strerror(errno));
      return INFERD_OK;
    }
    struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_SETLK, &lock) != 0) {
      if (errno == EACCES || errno == EAGAIN) {
        long pid = lock_holder(fd);
        close(fd);
        return core_fail(st, INFERD_ALREADY_EXISTS, "a server is already running (pid %ld, %s); stop it with --stop",
                         pid, path);
      }
      core_log(CORE_LOG_WARN, "cannot lock the pid file %s (%s): --stop cannot tell a stale one", path,
               strerror(errno));
    }
    /* The server before us may have removed the file between our open and our lock:
     * then we hold a file no one can find; open the path again. */
    struct stat ours, named;
    if (fstat(fd, &ours) != 0 || stat(path, &named) != 0 || ours.st_dev != named.st_dev ||
        ours.st_ino != named.st_ino) {
      close(fd);
      continue;
    }
    char text[32];
    int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || write(fd, text, (size_t)n) != n) {
      core_log(CORE_LOG_WARN, "cannot write the pid file %s: %s", path, strerror(errno));
      unlink(path);
      close(fd);
      return INFERD_OK;
    }
    pid_fd = fd;
    *written = true;
    return INFERD_OK;
  }
}

/* --start: fork a server in its own session; return when it listens or has failed.
 * Returns -1 in the child (which goes on to serve) with *notify_fd set; the exit
 * status in the parent. */
static int start_background(int *notify_fd) {
  if (already_running()) return 1;
  mkdir(LOG_DIR, 0755);
  int log = open(LOG_FILE, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) {
    fprintf(stderr, "inferd serve: cannot write %s: %s\n", LOG_FILE, strerror(errno));
    return 1;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    close(log);
    fprintf(stderr, "inferd serve: pipe: %s\n", strerror(errno));
    return 1;
  }
  fflush(NULL);
  pid_t child = fork();
  if (child < 0) {
    fprintf(stderr, "inferd serve: fork: %s\n", strerror(errno));
    return 1;
  }
  if (child == 0) {
    close(fds[0]);
    setsid();
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, 0), close(null);
    dup2(log, 1);
    dup2(log, 2);
    close(log);
    *notify_fd = fds[1];
    return -1;
  }
  close(log);
  close(fds[1]);
  char ok = 0;
  ssize_t n;
  while ((n = read(fds[0], &ok, 1)) < 0 && errno == EINTR) {
  }
  close(fds[0]);
  if (n == 1 && ok == '1') {
    printf("inferd serve: started (pid %ld); log in %s; stop with `inferd serve --stop`\n", (long)child, LOG_FILE);
    return 0;
  }
  int status;
  waitpid(child, &status, WNOHANG);
  fprintf(stderr, "inferd serve: the server failed to start; see %s\n", LOG_FILE);
  return 1;
}

static sem_t stop_requested;        /* posted by the signal thread at the first stop signal */
static atomic_int stop_signal;       /* which signal that was */
static atomic_bool pid_file_written; /* --start: removed again on every way out */
static sigset_t stop_signals;        /* the signal thread's set (it outlives cli_serve's frame) */
static char key_file[PATH_MAX];      /* token auth's key file, absolute; "" when none */
static atomic_bool key_file_written; /* the server has written it; a forced exit removes it */
static pthread_mutex_t serving_lock = PTHREAD_MUTEX_INITIALIZER;
static http_server *serving;         /* under serving_lock: the server, while it exists */

static const char *signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM"; }

/* Takes the stop signals: the first asks the main thread to drain (whenever it gets
 * there: models may still be loading); a second one exits at once. */
static void *signal_thread(void *arg) {
  (void)arg;
  const sigset_t *set = &stop_signals;
  for (int count = 0;; count++) {
    int sig = 0;
    if (sigwait(set, &sig) != 0) continue;
    if (count == 0) {
      atomic_store(&stop_signal, sig);
      /* New requests and /ping get 503 from now on, also while models still load. */
      pthread_mutex_lock(&serving_lock);
      if (serving) http_server_drain(serving, 0);
      pthread_mutex_unlock(&serving_lock);
      sem_post(&stop_requested);
      continue;
    }
    core_log(CORE_LOG_WARN, "%s again: exiting without waiting for the drain", signal_name(sig));
    if (atomic_load(&pid_file_written)) unlink(pid_file());
    if (atomic_load(&key_file_written)) unlink(key_file); /* live keys must not outlast the server */
    _exit(128 + sig);
  }
  return NULL;
}

static int fail(const inferd_status *st) {
  core_log(CORE_LOG_ERROR, "%s", st->message);
  fprintf(stderr, "inferd serve: %s\n", st->message);
  return cli_exit_status(st->code);
}

/* Raises the soft limit on open files to the hard one, as the JVM does for TorchServe:
 * every connection holds a descriptor, and the usual soft limit (1024) would refuse
 * clients long before the hard one. */
static void raise_open_files(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == rl.rlim_max) return;
  unsigned long long was = (unsigned long long)rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
    core_log(CORE_LOG_INFO, "open files: soft limit raised from %llu to the hard limit %llu", was,
             (unsigned long long)rl.rlim_max);
  else
    core_log(CORE_LOG_WARN, "open files: cannot raise the soft limit %llu to %llu: %s", was,
             (unsigned long long)rl.rlim_max, strerror(errno));
}

int cli_serve(int argc, char **argv) {
  config_server cfg;
  inferd_status st;
  inferd_code code = config_load(NULL, argc, argv, &cfg, &st);
  if (code != INFERD_OK) {
    fprintf(stderr, "inferd serve: %s\n", st.message);
    return cli_exit_status(code);
  }
  if (cfg.help) {
    serve_usage(stdout);
    config_free(&cfg);
    return 0;
  }
  if (cfg.stop) {
    config_free(&cfg);
    return stop_server();
  }
  /* As torchserve does ("--model-store directory not found"): a server that cannot find
   * its store would start, report ready and fail every registration. */
  if (cfg.model_store) {
    struct stat store;
    const char *why = stat(cfg.model_store, &store) != 0 ? strerror(errno)
                      : !S_ISDIR(store.st_mode)          ? "not a directory"
                                                         : NULL;
    if (why) {
      /* core_fail keeps it one line, whatever the name */
      core_fail(&st, INFERD_INVALID_ARG, "model_store '%s': %s", cfg.model_store, why);
      fprintf(stderr, "inferd serve: %s\n", st.message);
      config_free(&cfg);
      return cli_exit_status(INFERD_INVALID_ARG);
    }
  }
  int notify_fd = -1;
  if (cfg.start && cfg.foreground && already_running()) {
    config_free(&cfg);
    return 1;
  }
  if (cfg.start && !cfg.foreground) {
    int status = start_background(&notify_fd);
    if (status >= 0) {
      config_free(&cfg);
      return status;
    }
  }

  /* From here on signals are taken by the signal thread; every thread inherits this mask.
   * SIGINT and SIGHUP count only when they were not ignored: `nohup` ignores SIGHUP and a
   * script's background job SIGINT, and a blocked signal is queued for sigwait even when
   * its disposition is to ignore it. */
  signal(SIGPIPE, SIG_IGN);
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  const int optional[] = {SIGINT, SIGHUP};
  for (size_t i = 0; i < sizeof optional / sizeof *optional; i++) {
    struct sigaction old;
    if (sigaction(optional[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN) sigaddset(&stop_signals, optional[i]);
  }
  pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
  sem_init(&stop_requested, 0, 0);
  pthread_t signals;
  if (pthread_create(&signals, NULL, signal_thread, NULL) != 0) {
    fprintf(stderr, "inferd serve: cannot start the signal thread\n");
    config_free(&cfg);
    return 1;
  }
  pthread_detach(signals);

  raise_open_files();
  topo *machine = NULL;
  if (topo_new(NULL, &machine, &st) != INFERD_OK) {
    core_log(CORE_LOG_WARN, "cannot read the CPU topology (%s): workers will not be pinned", st.message);
    machine = NULL;
  } else {
    const topo_machine *tm = topo_get_machine(machine);
    char quota[320] = "none";
    if (tm->quota_cap) snprintf(quota, sizeof quota, "%.2f CPUs (%s)", tm->cpu_quota, tm->quota_source);
    core_log(CORE_LOG_INFO, "machine: %d package%s, %d NUMA node%s, %d usable physical cores (CPUs %s), quota %s",
             tm->package_count, tm->package_count == 1 ? "" : "s", tm->node_count, tm->node_count == 1 ? "" : "s",
             tm->usable_core_count, tm->usable_cpus, quota);
  }

  /* key_file.json in the working directory, by its absolute name for the signal thread */
  char cwd[PATH_MAX - 32];
  if (!cfg.disable_token_authorization && getcwd(cwd, sizeof cwd))
    snprintf(key_file, sizeof key_file, "%s/key_file.json", cwd);
  http_server_params params = {.config = &cfg, .key_file = key_file[0] ? key_file : NULL, .topo = machine};
  http_server *server = NULL;
  int exit_status = 0;
  code = http_server_new(&params, &server, &st);
  atomic_store(&key_file_written, code == INFERD_OK && key_file[0]);
  pthread_mutex_lock(&serving_lock);
  serving = server;
  if (server && atomic_load(&stop_signal)) http_server_drain(server, 0); /* a stop already came */
  pthread_mutex_unlock(&serving_lock);
  if (code == INFERD_OK) code = http_server_start(server, &st);
  if (code == INFERD_OK && cfg.start) {
    bool written;
    code = claim_pid_file(&written, &st);
    atomic_store(&pid_file_written, written);
  }
  if (code == INFERD_OK && cfg.start) {
    if (notify_fd >= 0) {
      (void)!write(notify_fd, "1", 1);
      close(notify_fd);
    }
  }
  if (code == INFERD_OK) code = http_server_load_models(server, &st);
  if (code != INFERD_OK) {
    exit_status = fail(&st);
  } else {
    if (!atomic_load(&stop_signal)) /* else a stop came while the models loaded: never ready */
      core_log(CORE_LOG_INFO, "inferd is ready: inference port %d, management port %d, metrics port %d",
               http_server_port(server, HTTP_API_INFERENCE), http_server_port(server, HTTP_API_MANAGEMENT),
               http_server_port(server, HTTP_API_METRICS));
    while (sem_wait(&stop_requested) != 0 && errno == EINTR) {
    }
    core_log(CORE_LOG_INFO, "%s: draining (new requests get 503, queued ones are answered; a second signal exits now)",
             signal_name(atomic_load(&stop_signal)));
    http_server_drain(server, (cfg.default_response_timeout + 5) * 1000);
  }
  pthread_mutex_lock(&serving_lock);
  serving = NULL;
  pthread_mutex_unlock(&serving_lock);
  http_server_free(server); /* removes the key file */
  atomic_store(&key_file_written, false);
  topo_free(machine);
  if (atomic_load(&pid_file_written)) unlink(pid_file()); /* the lock goes with the process */
  config_free(&cfg);
  if (exit_status == 0) core_log(CORE_LOG_INFO, "inferd has stopped");
  return exit_status;
}
