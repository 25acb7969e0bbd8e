/*
 * bench_local.c - `inferd bench --mode local`: the decentralized baseline. N independent
 * jobs, at most C at once, each a fresh process: this same binary re-executed as the
 * hidden `inferd bench --mode job --model M --file F [--labels L]`, which loads the
 * model, preprocesses the image with the image_classifier handler, runs it on one
 * thread (loading too: OpenMP is set to one thread before anything runs, as the
 * PyTorch jobs of the experiment call torch.set_num_threads(1) before they load) and
 * prints its top-5 as TorchServe's JSON answer. That is what every job of
 * the experiment does without a server: its start-up and model load are in its time.
 *
 * Design: the parent forks + execs jobs until C run, then polls with waitpid(WNOHANG)
 * every 2 ms; a job's stdout comes back through a pipe (read as it arrives, at most
 * BENCH_JOB_OUTPUT_MAX bytes kept), and its stderr through another, whose last line is
 * the job's reason to fail in the report (not printed as it comes: N jobs would print
 * the same line N times, into the progress bar); a job still running after --timeout
 * is killed and counted with its exit status 128 + SIGKILL. Jobs get SIGKILL when the parent dies
 * (PR_SET_PDEATHSIG), so none outlives a stopped run; a run asked to stop
 * (bench_request_stop: Ctrl-C) kills its running jobs and counts only those that ended
 * before.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <omp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "core/core.h"
#include "handler/handler.h"

/* ---- the job ------------------------------------------------------------------ */

static int job_fail(const inferd_status *st) {
  fprintf(stderr, "inferd: %s\n", st->message);
  switch (st->code) {
  case INFERD_INVALID_ARG:
  case INFERD_NOT_FOUND:
  case INFERD_UNSUPPORTED:
  case INFERD_TOO_LARGE: return 2;
  default: return 1;
  }
}

int bench_job_main(const char *model_path, const char *file, const char *labels_path) {
  inferd_status st = {0};
  inferd_model *model = NULL;
  inferd_session *session = NULL;
  handler_image_ctx *image = NULL;
  handler_labels *labels = NULL;
  const void *data = NULL;
  size_t size = 0;
  float *input = NULL;
  float *outs[8] = {0}; /* one per model output (at most 8: engine_model.c); outs[0] is classified */
  int n_out = 0;
  char *answer = NULL;
  int rc = 0;
  /* One thread for everything, the load's weight reorders and its plan too: with the
   * machine's default, the load ran a team of one thread per core beside the other
   * jobs' and compiled a second plan for the one-thread session. */
  omp_set_num_threads(1);

  char default_labels[4096];
  if (!labels_path) {
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", model_path);
    snprintf(default_labels, sizeof default_labels, "%s/index_to_name.json", dirname(copy));
    if (access(default_labels, R_OK) == 0) labels_path = default_labels;
  }
  if (labels_path && handler_labels_load(labels_path, &labels, &st) != INFERD_OK) goto fail;
  if (inferd_model_load(model_path, NULL, &model, &st) != INFERD_OK) goto fail;
  inferd_tensor_info in;
  inferd_model_input(model, 0, &in);
  if (inferd_model_num_inputs(model) != 1 || in.dtype != INFERD_DTYPE_FLOAT || in.rank != 4 ||
      in.dims[1] != HANDLER_IMAGE_CHANNELS || in.dims[2] != HANDLER_IMAGE_CROP || in.dims[3] != HANDLER_IMAGE_CROP) {
    core_fail(&st, INFERD_UNSUPPORTED, "model '%s': the image classifier wants one float [N,3,224,224] input",
              model_path);
    goto fail;
  }
  inferd_session_params sp = {.threads = 1};
  if (inferd_session_new(model, &sp, &session, &st) != INFERD_OK) goto fail;
  /* a buffer for every output, as the run writes them all; the first is classified, as
   * the server's image_classifier does */
  int64_t classes = 0;
  n_out = inferd_model_num_outputs(model);
  for (int k = 0; k < n_out && k < (int)(sizeof outs / sizeof outs[0]); k++) {
    int rank = 0;
    int64_t dims[INFERD_MAX_RANK];
    if (inferd_session_output_shape(session, 1, k, &rank, dims, &st) != INFERD_OK) goto fail;
    if (k == 0) classes = core_shape_count(rank, dims);
    if (!(outs[k] = malloc((size_t)core_shape_count(rank, dims) * sizeof(float) + 1))) {
      core_fail(&st, INFERD_NO_MEMORY, "out of memory");
      goto fail;
    }
  }
  image = handler_image_ctx_new(NULL);
  input = malloc(HANDLER_IMAGE_TENSOR_FLOATS * sizeof(float));
  if (!image || !input) {
    core_fail(&st, INFERD_NO_MEMORY, "out of memory");
    goto fail;
  }
  if (core_file_map(file, &data, &size, &st) != INFERD_OK) goto fail;
  if (handler_image_preprocess(image, data, size, input, NULL, &st) != INFERD_OK) goto fail;
  const float *ins[1] = {input};
  if (inferd_session_run(session, 1, ins, outs, &st) != INFERD_OK) goto fail;
  size_t answer_size = handler_classify_json_size(labels, HANDLER_TOPK);
  answer = malloc(answer_size);
  if (!answer) {
    core_fail(&st, INFERD_NO_MEMORY, "out of memory");
    goto fail;
  }
  if (handler_classify_json(outs[0], (int)classes, HANDLER_TOPK, labels, answer, answer_size, NULL, &st) !=
      INFERD_OK)
    goto fail;
  printf("%s\n", answer);
  fflush(stdout);
  goto out;
fail:
  rc = job_fail(&st);
out:
  free(answer);
  if (data) core_file_unmap(data, size);
  for (int k = 0; k < n_out && k < (int)(sizeof outs / sizeof outs[0]); k++) free(outs[k]);
  free(input);
  handler_image_ctx_free(image);
  inferd_session_free(session);
  inferd_model_free(model);
  handler_labels_free(labels);
  return rc;
}

/* ---- the parent --------------------------------------------------------------- */

typedef struct running_job {
  pid_t pid;
  int out_fd, err_fd; /* read ends of the job's stdout and stderr; -1 at EOF */
  int64_t index;   /* into result->jobs */
  size_t out_len, err_len;
  double started;  /* seconds */
  int killed;
} running_job;

/* Its stdout and stderr come back through two pipes (*out_fd, *err_fd: the read ends,
 * non-blocking, the caller's to close). */
static pid_t spawn_job(const bench_params *p, int *out_fd, int *err_fd) {
  int pipefd[2], errfd[2];
  if (pipe(pipefd) != 0) return -1;
  if (pipe(errfd) != 0) {
    close(pipefd[0]);
    close(pipefd[1]);
    return -1;
  }
  fflush(NULL);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(pipefd[0]);
    close(pipefd[1]);
    close(errfd[0]);
    close(errfd[1]);
    return -1;
  }
  if (pid == 0) {
    /* a job dies with the run: when `inferd bench` is killed or stopped (a benchmark
     * script's trap), its jobs are not left loading models on the cores */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(pipefd[1], STDOUT_FILENO);
    dup2(errfd[1], STDERR_FILENO);
    close(pipefd[0]);
    close(pipefd[1]);
    close(errfd[0]);
    close(errfd[1]);
    const char *argv[12];
    int n = 0;
    argv[n++] = p->self_exe;
    argv[n++] = "bench";
    argv[n++] = "--mode";
    argv[n++] = "job";
    argv[n++] = "--model";
    argv[n++] = p->model;
    argv[n++] = "--file";
    argv[n++] = p->file;
    if (p->labels) {
      argv[n++] = "--labels";
      argv[n++] = p->labels;
    }
    argv[n] = NULL;
    execv(p->self_exe, (char *const *)argv);
    _exit(127);
  }
  close(pipefd[1]);
  close(errfd[1]);
  fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
  fcntl(pipefd[0], F_SETFD, FD_CLOEXEC);
  fcntl(errfd[0], F_SETFL, O_NONBLOCK);
  fcntl(errfd[0], F_SETFD, FD_CLOEXEC);
  *out_fd = pipefd[0];
  *err_fd = errfd[0];
  return pid;
}

/* Reads what a job has written so far on one pipe into buf (the first size - 1 bytes
 * are kept, the rest read and dropped); closes the pipe at EOF. */
static void drain_pipe(int *fd, char *buf, size_t size, size_t *len) {
  while (*fd >= 0) {
    char scratch[1024];
    char *dst = scratch;
    size_t room = sizeof scratch;
    if (*len < size - 1) {
      dst = buf + *len;
      room = size - 1 - *len;
    }
    ssize_t n = read(*fd, dst, room);
    if (n > 0) {
      if (dst != scratch) *len += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EINTR)) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    close(*fd);
    *fd = -1;
  }
}

/* The same, keeping the last size - 1 bytes instead: a failing job's reason is the last
 * thing it writes, after any warnings. */
static void drain_pipe_tail(int *fd, char *buf, size_t size, size_t *len) {
  while (*fd >= 0) {
    char scratch[1024];
    ssize_t n = read(*fd, scratch, sizeof scratch);
    if (n > 0) {
      size_t add = (size_t)n, room = size - 1;
      const char *from = scratch;
      if (add > room) from += add - room, add = room;
      if (*len + add > room) { /* drop the oldest */
        memmove(buf, buf + (*len + add - room), *len - (*len + add - room));
        *len = room - add;
      }
      memcpy(buf + *len, from, add);
      *len += add;
      continue;
    }
    if (n < 0 && (errno == EINTR)) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    close(*fd);
    *fd = -1;
  }
}

static void drain(running_job *j, bench_job *job) {
  drain_pipe(&j->out_fd, job->output, sizeof job->output, &j->out_len);
  drain_pipe_tail(&j->err_fd, job->error, sizeof job->error, &j->err_len);
}

static void close_pipes(running_job *j) {
  if (j->out_fd >= 0) close(j->out_fd);
  if (j->err_fd >= 0) close(j->err_fd);
  j->out_fd = j->err_fd = -1;
}

/* job->error: the last line the job wrote on stderr (a failing job's last words are its
 * reason), or why the run killed it. Of the failed jobs only. */
static void job_error(bench_job *job, size_t len, int killed, double timeout_seconds) {
  job->error[len] = '\0';
  if (killed) {
    snprintf(job->error, sizeof job->error, "killed: still running after --timeout %g s", timeout_seconds);
    return;
  }
  while (len > 0 && (job->error[len - 1] == '\n' || job->error[len - 1] == '\r')) job->error[--len] = '\0';
  char *last = strrchr(job->error, '\n');
  if (last) memmove(job->error, last + 1, strlen(last + 1) + 1);
}

int bench_local_run(const bench_params *p, bench_result *r, char *err, size_t err_size) {
  memset(r, 0, sizeof *r);
  if (access(p->model, R_OK) != 0) {
    snprintf(err, err_size, "cannot read --model '%s': %s", p->model, strerror(errno));
    return -1;
  }
  if (access(p->file, R_OK) != 0) {
    snprintf(err, err_size, "cannot read --file '%s': %s", p->file, strerror(errno));
    return -1;
  }
  int concurrency = p->concurrency;
  if (concurrency > p->requests) concurrency = (int)p->requests;
  r->latency_ms = calloc((size_t)p->requests, sizeof(double));
  r->jobs = calloc((size_t)p->requests, sizeof(bench_job));
  running_job *running = calloc((size_t)concurrency, sizeof *running);
  if (!r->latency_ms || !r->jobs || !running) {
    snprintf(err, err_size, "out of memory");
    free(running);
    bench_result_free(r);
    return -1;
  }
  int64_t progress = 0, started = 0;
  int active = 0;
  double start = bench__now();
  bench__sampler *sampler = bench__sampler_start(&progress, p->requests);
  int rc = 0;
  while (r->done < p->requests && !bench__stop_signal()) {
    while (active < concurrency && started < p->requests) {
      running_job *j = &running[active];
      memset(j, 0, sizeof *j);
      j->started = bench__now();
      j->out_fd = j->err_fd = -1;
      j->pid = spawn_job(p, &j->out_fd, &j->err_fd);
      if (j->pid < 0) {
        snprintf(err, err_size, "cannot start a job: %s", strerror(errno));
        rc = -1;
        goto stop;
      }
      j->index = started++;
      active++;
    }
    for (int i = 0; i < active; i++) drain(&running[i], &r->jobs[running[i].index]);
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int i = 0; i < active; i++) {
        running_job *j = &running[i];
        if (j->pid != pid) continue;
        if (bench__stop_signal()) { /* it may have died of the same Ctrl-C: not a result */
          close_pipes(j);
          running[i] = running[--active];
          break;
        }
        bench_job *job = &r->jobs[j->index];
        drain(j, job); /* the job exited: what it wrote is all in the pipes */
        close_pipes(j);
        job->output[j->out_len] = '\0';
        job->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        job_error(job, j->err_len, j->killed, p->timeout_seconds);
        if (job->exit_status == 0) job->error[0] = '\0'; /* warnings, not a reason */
        job->ms = (bench__now() - j->started) * 1000.0;
        r->latency_ms[r->done++] = bench_latency(job->ms, job->exit_status == 0);
        r->status_count[job->exit_status]++;
        __atomic_add_fetch(&progress, 1, __ATOMIC_RELAXED);
        running[i] = running[--active];
        break;
      }
      continue;
    }
    double now = bench__now();
    for (int i = 0; i < active; i++)
      if (!running[i].killed && now - running[i].started > p->timeout_seconds) {
        kill(running[i].pid, SIGKILL);
        running[i].killed = 1;
      }
    struct timespec tick = {0, 2 * 1000 * 1000}; /* 2 ms */
    nanosleep(&tick, NULL);
  }
stop:
  for (int i = 0; i < active; i++) { /* after a failure to start a job, or a stop (bench_request_stop) */
    kill(running[i].pid, SIGKILL);
    while (waitpid(running[i].pid, NULL, 0) < 0 && errno == EINTR) {} /* a second signal: still reap it */
    close_pipes(&running[i]);
  }
  if (rc == 0 && r->done < p->requests) {
    r->interrupted = bench__stop_signal();
    /* jobs[] is in start order, and the report reads its first `done`: keep the jobs that
     * ended (their ms is set; a job killed by the stop never had it) */
    int64_t kept = 0;
    for (int64_t i = 0; i < started; i++)
      if (r->jobs[i].ms > 0) r->jobs[kept++] = r->jobs[i];
  }
  r->seconds = bench__now() - start;
  bench__sampler_stop(sampler, &r->peak_cpu_percent, &r->peak_memory_percent);
  free(running);
  if (rc != 0) bench_result_free(r);
  return rc;
}
