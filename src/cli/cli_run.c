/*
 * cli_run.c - `inferd run`: one model, no server.
 *
 *   inferd run MODEL.onnx --input X.npy --output Y.npy [--threads N] [--profile]
 *                         [--no-winograd | --transformed-winograd] [--precision fp32|bf16]
 *   inferd run MODEL.onnx --bench [--batch N] [--threads T] [--seconds S] [--json] [--profile]
 *                                 [--no-winograd | --transformed-winograd] [--precision fp32|bf16]
 *
 * The first form runs one batch read from a float32 .npy (the model's input shape
 * with any batch size) and writes the first output as .npy. The second warms up, then
 * runs batches for S seconds and reports throughput and latency; its last line is
 * `throughput: <float> images/s`, or one JSON object with --json. --no-winograd keeps
 * every convolution direct (inferd_model_params.no_winograd); --transformed-winograd
 * keeps Winograd's weights transformed, trading memory for speed
 * (inferd_model_params.winograd_transformed); --precision bf16 runs the convolutions
 * in bfloat16 (inferd_model_params.precision). --profile then prints, on
 * stderr, the time per op kind and the PROFILE_STEPS slowest steps of the plan (each with its node,
 * oneDNN kernel, output shape and GFLOP/s); with --bench, of the timed runs only (the
 * warm-up's first touch of the scratch made some steps look 2x slower than they run).
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "bench/bench.h"
#include "cli/cli_internal.h"

enum { PROFILE_STEPS = 20 };

static void run_usage(FILE *f) {
  fprintf(f,
          "usage: inferd run MODEL.onnx --input X.npy --output Y.npy [--threads N] [--profile]\n"
          "                             [--no-winograd | --transformed-winograd] [--precision fp32|bf16]\n"
          "       inferd run MODEL.onnx --bench [--batch N] [--threads T] [--seconds S] [--json] [--profile]\n"
          "                                     [--no-winograd | --transformed-winograd] [--precision fp32|bf16]\n");
}

static int fail(const inferd_status *st) {
  fprintf(stderr, "inferd: %s\n", st->message);
  return cli_exit_status(st->code);
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

enum { OPT_BENCH = CLI__LONG_ONLY, OPT_JSON, OPT_PROFILE, OPT_NO_WINOGRAD, OPT_TRANSFORMED_WINOGRAD, OPT_PRECISION };

inferd_code cli__run_parse(int argc, char **argv, cli__run_options *o, inferd_status *st) {
  static const char shorts[] = "i:o:t:b:s:h";
  static const struct option longs[] = {
      {"input", required_argument, 0, 'i'},        {"output", required_argument, 0, 'o'},
      {"threads", required_argument, 0, 't'},      {"batch", required_argument, 0, 'b'},
      {"seconds", required_argument, 0, 's'},      {"bench", no_argument, 0, OPT_BENCH},
      {"json", no_argument, 0, OPT_JSON},          {"profile", no_argument, 0, OPT_PROFILE},
      {"no-winograd", no_argument, 0, OPT_NO_WINOGRAD}, {"help", no_argument, 0, 'h'},
      {"transformed-winograd", no_argument, 0, OPT_TRANSFORMED_WINOGRAD},
      {"precision", required_argument, 0, OPT_PRECISION},  {0, 0, 0, 0},
  };
  *o = (cli__run_options){.batch = 1, .seconds = 5.0};
  optind = 0; /* glibc: start afresh; 1 would go on inside an option cluster an earlier parse left */
  opterr = 0; /* one line of our own below */
  bool bench_only = false; /* --batch or --seconds given */
  int ch;
  while ((ch = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
    switch (ch) {
    case 'i':
    case 'o':
      /* another option is not a file name: "--output --profile" wrote the output to a
       * file named --profile and ran without the profile (one that starts with -- is
       * given as --output=--name) */
      if (optarg == argv[optind - 1] && strncmp(optarg, "--", 2) == 0)
        return core_fail(st, INFERD_INVALID_ARG, "run: missing value for %s (inferd run --help)",
                         ch == 'i' ? "--input" : "--output");
      *(ch == 'i' ? &o->input : &o->output) = optarg;
      break;
    case 't':
      if (parse_int(optarg, 1, INFERD_SESSION_THREADS_MAX, &o->threads))
        return core_fail(st, INFERD_INVALID_ARG, "--threads wants 1..%d", INFERD_SESSION_THREADS_MAX);
      break;
    case 'b':
      if (parse_int(optarg, 1, 1024, &o->batch)) return core_fail(st, INFERD_INVALID_ARG, "--batch wants 1..1024");
      bench_only = true;
      break;
    case 's': {
      bench_only = true;
      char *end;
      o->seconds = strtod(optarg, &end);
      if (*end || !(o->seconds > 0 && o->seconds <= 86400))
        return core_fail(st, INFERD_INVALID_ARG, "--seconds wants a positive number");
      break;
    }
    case OPT_BENCH: o->bench = 1; break;
    case OPT_JSON: o->json = 1; break;
    case OPT_PROFILE: o->profile = 1; break;
    case OPT_NO_WINOGRAD: o->no_winograd = 1; break;
    case OPT_TRANSFORMED_WINOGRAD: o->transformed_winograd = 1; break;
    case OPT_PRECISION:
      if (strcmp(optarg, "fp32") == 0) o->precision = INFERD_PRECISION_FP32;
      else if (strcmp(optarg, "bf16") == 0) o->precision = INFERD_PRECISION_BF16;
      else return core_fail(st, INFERD_INVALID_ARG, "--precision wants fp32 or bf16");
      break;
    case 'h': o->help = true; return INFERD_OK;
    default: {
      char letter[3];
      return core_fail(st, INFERD_INVALID_ARG, "run: unknown option or missing value: %s (inferd run --help)",
                       cli__refused_option(ch, argv, shorts, letter));
    }
    }
  }
  if (optind == argc) return core_fail(st, INFERD_INVALID_ARG, "run needs a MODEL.onnx (inferd run --help)");
  if (o->no_winograd && o->transformed_winograd)
    return core_fail(st, INFERD_INVALID_ARG, "run: --no-winograd and --transformed-winograd exclude each other");
  if (optind < argc - 1)
    return core_fail(st, INFERD_INVALID_ARG, "run: unexpected argument: %s (inferd run --help)", argv[optind + 1]);
  o->model = argv[optind];
  if (!o->bench && (!o->input || !o->output))
    return core_fail(st, INFERD_INVALID_ARG, "run needs --input and --output (or --bench)");
  if (!o->bench && (bench_only || o->json))
    return core_fail(st, INFERD_INVALID_ARG,
                     "--batch, --seconds and --json go with --bench (the batch of --input is its own)");
  if (o->bench && (o->input || o->output))
    return core_fail(st, INFERD_INVALID_ARG, "--bench runs a batch of its own; --input and --output go without it");
  return INFERD_OK;
}

/* Checks that a .npy batch fits the model's first input; returns the batch size. */
static inferd_code check_input(const inferd_model *m, const core_npy *x, int *batch, inferd_status *st) {
  inferd_tensor_info in;
  inferd_model_input(m, 0, &in);
  char want[128], got[128];
  core_shape_str(in.rank, in.dims, want, sizeof want);
  core_shape_str(x->rank, x->dims, got, sizeof got);
  if (inferd_model_num_inputs(m) != 1)
    return core_fail(st, INFERD_UNSUPPORTED, "model has %d inputs; inferd run feeds one", inferd_model_num_inputs(m));
  if (x->dtype != INFERD_DTYPE_FLOAT)
    return core_fail(st, INFERD_INVALID_ARG, "input '%s': expected float32, got %s", in.name, core_dtype_name(x->dtype));
  if (x->rank != in.rank)
    return core_fail(st, INFERD_INVALID_ARG, "input '%s': expected rank %d %s, got rank %d %s", in.name, in.rank, want,
                     x->rank, got);
  for (int i = 1; i < in.rank; i++)
    if (x->dims[i] != in.dims[i])
      return core_fail(st, INFERD_INVALID_ARG, "input '%s': expected shape %s (-1 = any batch), got %s", in.name, want, got);
  if (x->dims[0] < 1 || x->dims[0] > 1024)
    return core_fail(st, INFERD_INVALID_ARG, "input '%s': batch %lld outside 1..1024", in.name, (long long)x->dims[0]);
  *batch = (int)x->dims[0];
  return INFERD_OK;
}

static int run_once(inferd_model *m, inferd_session *s, cli__run_options *o, const core_npy *x) {
  inferd_status st = {0};
  int batch = 0, rank = 0;
  int64_t dims[INFERD_MAX_RANK];
  if (check_input(m, x, &batch, &st) != INFERD_OK ||
      inferd_session_output_shape(s, batch, 0, &rank, dims, &st) != INFERD_OK)
    return fail(&st);
  o->batch = batch;
  int rc = 0;
  float *y = NULL;
  int n_out = inferd_model_num_outputs(m);
  float *outs[8] = {0};
  for (int k = 0; k < n_out; k++) {
    int r;
    int64_t d[INFERD_MAX_RANK];
    if (inferd_session_output_shape(s, batch, k, &r, d, &st) != INFERD_OK) {
      rc = fail(&st);
      goto free_outs;
    }
    outs[k] = malloc((size_t)core_shape_count(r, d) * sizeof(float) + 1);
    if (!outs[k]) {
      rc = 1;
      fprintf(stderr, "inferd: out of memory\n");
      goto free_outs;
    }
  }
  y = outs[0];
  const float *ins[1] = {x->data};
  if (inferd_session_run(s, batch, ins, outs, &st) != INFERD_OK ||
      core_npy_write(o->output, INFERD_DTYPE_FLOAT, rank, dims, y, &st) != INFERD_OK)
    rc = fail(&st);
free_outs:
  for (int k = 0; k < n_out; k++) free(outs[k]);
  return rc;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int run_bench(inferd_model *m, inferd_session *s, const cli__run_options *o) {
  inferd_status st = {0};
  inferd_tensor_info in;
  inferd_model_input(m, 0, &in);
  if (inferd_model_num_inputs(m) != 1) {
    fprintf(stderr, "inferd: model has %d inputs; inferd run feeds one\n", inferd_model_num_inputs(m));
    return 2;
  }
  for (int i = 1; i < in.rank; i++)
    if (in.dims[i] < 1) {
      fprintf(stderr, "inferd: input '%s': dimension %d is not fixed; --bench needs a fixed item shape\n", in.name, i);
      return 2;
    }
  in.dims[0] = o->batch;
  int64_t count = core_shape_count(in.rank, in.dims);
  int n_out = inferd_model_num_outputs(m);
  float *x = malloc((size_t)count * sizeof *x), *outs[8] = {0};
  size_t lat_cap = 1 << 12; /* latencies; doubled when full (rarely: the run is timed by the clock) */
  double *lat = malloc(lat_cap * sizeof *lat);
  int rc = 0;
  if (!x || !lat) {
    fprintf(stderr, "inferd: out of memory\n");
    rc = 1;
    goto out;
  }
  uint32_t seed = 12345;
  for (int64_t i = 0; i < count; i++) { /* a fixed pseudo-random image batch */
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
  }
  for (int k = 0; k < n_out; k++) {
    int r;
    int64_t d[INFERD_MAX_RANK];
    if (inferd_session_output_shape(s, o->batch, k, &r, d, &st) != INFERD_OK) {
      rc = fail(&st);
      goto out;
    }
    if (!(outs[k] = malloc((size_t)core_shape_count(r, d) * sizeof(float) + 1))) {
      rc = 1;
      goto out;
    }
  }
  const float *ins[1] = {x};
  /* warm-up: first runs bind the plan and fault in the arena */
  double t_warm = core_now_seconds();
  for (int i = 0; i < 3 || core_now_seconds() - t_warm < CORE_MIN(1.0, o->seconds / 5); i++)
    if (inferd_session_run(s, o->batch, ins, outs, &st) != INFERD_OK) {
      rc = fail(&st);
      goto out;
    }
  inferd_session_profile_reset(s); /* --profile counts the timed runs only */
  int iters = 0;
  double t0 = core_now_seconds(), now = t0;
  while (now - t0 < o->seconds || iters < 3) {
    if ((size_t)iters == lat_cap) {
      double *more = iters < INT32_MAX / 2 ? realloc(lat, 2 * lat_cap * sizeof *lat) : NULL;
      if (!more) break; /* the runs so far are the measurement */
      lat = more;
      lat_cap *= 2;
    }
    double ts = now;
    if (inferd_session_run(s, o->batch, ins, outs, &st) != INFERD_OK) {
      rc = fail(&st);
      goto out;
    }
    now = core_now_seconds();
    lat[iters++] = (now - ts) * 1e3;
  }
  double total = now - t0, mean = total * 1e3 / iters;
  qsort(lat, (size_t)iters, sizeof *lat, cmp_double);
  double p50 = bench_nearest_rank(lat, iters, 0.5), p99 = bench_nearest_rank(lat, iters, 0.99);
  double throughput = iters * o->batch / total, gflop = inferd_model_flops_per_item(m) * 1e-9;
  int threads = inferd_session_threads(s);
  const char *precision = o->precision == INFERD_PRECISION_BF16 ? "bf16" : "fp32";
  if (o->json) {
    json_t *path = json_stringn_nocheck(o->model, strlen(o->model)); /* a path need not be UTF-8 */
    char *model = path ? json_dumps(path, JSON_ENCODE_ANY) : NULL;
    json_decref(path);
    printf("{\"model\": %s, \"batch\": %d, \"threads\": %d, \"precision\": \"%s\", \"iterations\": %d, "
           "\"seconds\": %.3f, \"throughput\": %.3f, \"latency_ms\": {\"mean\": %.3f, \"p50\": %.3f, \"p99\": %.3f}, "
           "\"gflop_per_image\": %.4f}\n",
           model ? model : "null", o->batch, threads, precision, iters, total, throughput, mean, p50, p99, gflop);
    free(model);
  } else {
    printf("model: %s\nbatch: %d\nthreads: %d\nprecision: %s\niterations: %d in %.2f s\n", o->model, o->batch, threads,
           precision, iters, total);
    printf("latency_ms: mean %.2f  p50 %.2f  p99 %.2f\n", mean, p50, p99);
    printf("gflop_per_image: %.3f  achieved: %.1f GFLOP/s\n", gflop, gflop * throughput);
    printf("throughput: %.2f images/s\n", throughput);
  }
out:
  for (int k = 0; k < n_out; k++) free(outs[k]);
  free(x);
  free(lat);
  return rc;
}

int cli_run(int argc, char **argv) {
  cli__run_options o;
  inferd_status st = {0};
  if (cli__run_parse(argc, argv, &o, &st) != INFERD_OK) return fail(&st);
  if (o.help) {
    run_usage(stdout);
    return 0;
  }
  /* the input first: the model is tuned for its batch size (inferd_model_params.opt_batch) */
  core_npy x = {0};
  if (!o.bench && core_npy_read(o.input, &x, &st) != INFERD_OK) return fail(&st);
  int opt_batch = o.bench ? o.batch : x.rank >= 1 && x.dims[0] >= 1 && x.dims[0] <= 1024 ? (int)x.dims[0] : 1;
  inferd_model *m;
  inferd_model_params mp = {
      .opt_batch = opt_batch, .no_winograd = o.no_winograd, .winograd_transformed = o.transformed_winograd,
      .precision = o.precision};
  if (inferd_model_load(o.model, &mp, &m, &st) != INFERD_OK) {
    core_npy_free(&x);
    return fail(&st);
  }
  inferd_session *s;
  inferd_session_params sp = {.threads = o.threads, .profile = o.profile};
  if (inferd_session_new(m, &sp, &s, &st) != INFERD_OK) {
    inferd_model_free(m);
    core_npy_free(&x);
    return fail(&st);
  }
  int rc = o.bench ? run_bench(m, s, &o) : run_once(m, s, &o, &x);
  core_npy_free(&x);
  if (o.profile && rc == 0) {
    char buf[8192];
    FILE *f = stderr; /* stdout ends with the throughput line or holds the JSON object */
    inferd_session_profile(s, buf, sizeof buf);
    fprintf(f, "%s", buf);
    inferd_session_profile_steps(s, o.batch, PROFILE_STEPS, buf, sizeof buf);
    fprintf(f, "%s", buf);
    fprintf(f, "memory: weights %.1f MB (shared), scratch %.1f MB at batch %d (this session)\n",
            inferd_model_weights_bytes(m) / 1048576.0, inferd_session_scratch_bytes(s, o.batch) / 1048576.0, o.batch);
  }
  inferd_session_free(s);
  inferd_model_free(m);
  return rc;
}
