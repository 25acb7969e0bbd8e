/*
 * engine_model.c - the public engine API (include/inferd/inferd.h): loading a model,
 * the plan cache, sessions and runs.
 *
 * DESIGN
 * Load = parse (onnx/) -> passes (engine_passes.c) -> compile the plan of the batch the
 * model is tuned for (inferd_model_params.opt_batch), which
 * checks every node and reorders every weight into the weight cache -> release the
 * IR's plain weight copies. A model is read-only after that except for its plan cache
 * and weight cache, both under model->lock.
 *
 * A session keeps, per (batch size), a plan_instance: the plan (a counted reference)
 * and oneDNN memory objects bound to the session's scratch arena. A session runs one
 * batch at a time, so its instances share that one arena (activations from the memory
 * plan, then oneDNN's scratchpad), sized for the largest plan bound so far: binding a
 * larger plan grows it and points the other instances at the new one. A worker that
 * sees every batch size up to 8 holds the batch-8 scratch, not the sum of eight. Running
 * a batch size the session has seen touches only the session: no allocation of ours,
 * no lock (dnnl_primitive_execute allocates its argument map per call, out of reach).
 * Input/output arrays are bound per run with dnnl_memory_set_data_handle.
 *
 * Threads: the compute team of a run is the calling thread's OpenMP team, sized by
 * the session's thread count; plans are compiled per (batch, threads).
 */
#include <omp.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine.h"

/* ---- op registry ------------------------------------------------------------------- */

static const char *const op_names[OP_KIND_COUNT] = {
#define ENGINE__NAME(id, name, fn, min_inputs) [OP_##id] = name,
    ENGINE_OPS(ENGINE__NAME)
#undef ENGINE__NAME
        [OP_REORDER] = "Reorder",
        [OP_CONV_WINOGRAD] = "Conv/Winograd",
};
_Static_assert(CORE_ARRAY_LEN(op_names) == OP_KIND_COUNT, "op name table size");

static const int op_min_inputs[OP_COUNT] = {
#define ENGINE__MIN(id, name, fn, min_inputs) [OP_##id] = min_inputs,
    ENGINE_OPS(ENGINE__MIN)
#undef ENGINE__MIN
};

int engine_op_min_inputs(op_kind op) { return (unsigned)op < OP_COUNT ? op_min_inputs[op] : 0; }

const char *engine_op_name(op_kind op) { return (unsigned)op < OP_KIND_COUNT ? op_names[op] : "?"; }

op_kind engine_op_find(const char *op_type, const char *domain) {
  if (domain && *domain) return OP_COUNT;
  for (int i = 0; i < OP_COUNT; i++)
    if (strcmp(op_names[i], op_type) == 0) return (op_kind)i;
  return OP_COUNT;
}

/* ---- plan cache ----------------------------------------------------------------------- */

static void plan_release(inferd_model *m, plan *p) {
  pthread_mutex_lock(&m->lock);
  bool last = --p->refs == 0;
  pthread_mutex_unlock(&m->lock);
  if (last) engine_plan_free(p);
}

/* Returns a counted reference to the plan for (batch, threads), compiling it on a miss.
 * Caller holds model->lock. */
static inferd_code plan_get_locked(inferd_model *m, int batch, int threads, plan **out, inferd_status *st) {
  int free_slot = -1, lru = 0;
  for (int i = 0; i < m->max_plans; i++) {
    plan *p = m->cache[i].plan;
    if (!p) {
      free_slot = i;
      continue;
    }
    if (p->batch == batch && p->threads == threads) {
      m->cache[i].used = ++m->clock;
      p->refs++;
      *out = p;
      return INFERD_OK;
    }
    if (m->cache[i].used < m->cache[lru].used) lru = i;
  }
  if (m->fixed_batch > 0 && batch != m->fixed_batch)
    return core_fail(st, INFERD_INVALID_ARG,
                     "batch size %d: the model's inputs declare a fixed batch size of %d (a number, not a dynamic "
                     "axis); export it with a dynamic batch axis to run other batch sizes",
                     batch, m->fixed_batch);
  plan *p;
  inferd_code rc = engine_plan_compile(m, batch, threads, &p, st);
  if (rc != INFERD_OK) return rc;
  int slot = free_slot >= 0 ? free_slot : lru;
  if (m->cache[slot].plan && --m->cache[slot].plan->refs == 0) engine_plan_free(m->cache[slot].plan);
  m->cache[slot].plan = p;
  m->cache[slot].used = ++m->clock;
  p->refs++;
  *out = p;
  return INFERD_OK;
}

/* ---- loading ------------------------------------------------------------------------------ */

static inferd_code describe_io(inferd_model *m, inferd_status *st) {
  const ir_graph *g = m->graph;
  m->n_inputs = g->n_inputs;
  m->n_outputs = g->n_outputs;
  m->inputs = calloc((size_t)g->n_inputs + 1, sizeof *m->inputs);
  m->outputs = calloc((size_t)g->n_outputs + 1, sizeof *m->outputs);
  if (!m->inputs || !m->outputs) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  for (int k = 0; k < g->n_inputs; k++) {
    const ir_value *v = &g->values[g->inputs[k]];
    if (v->dtype != INFERD_DTYPE_FLOAT)
      return core_fail(st, INFERD_UNSUPPORTED, "input '%s' is %s; only float32 inputs are supported", v->name,
                       core_dtype_name(v->dtype));
    if (v->rank < 1)
      return core_fail(st, INFERD_UNSUPPORTED, "input '%s' has no declared shape with a batch axis", v->name);
    for (int i = 1; i < v->rank; i++)
      if (v->dims[i] < 0)
        return core_fail(st, INFERD_UNSUPPORTED, "input '%s': dimension %d is dynamic; only the batch axis may be",
                         v->name, i);
    int64_t item = core_shape_count(v->rank - 1, v->dims + 1);
    if (item < 0 || item > ((int64_t)1 << 32))
      return core_fail(st, INFERD_UNSUPPORTED, "input '%s' is too large (%lld elements per item)", v->name, (long long)item);
    /* A batch axis declared as a number (not a name) is the only batch the model runs:
     * an export without dynamic axes bakes it into constants (Reshape to [1, -1]). */
    if (v->dims[0] > 0 && m->fixed_batch > 0 && v->dims[0] != m->fixed_batch)
      return core_fail(st, INFERD_UNSUPPORTED, "inputs declare different batch sizes (%lld and %d)",
                       (long long)v->dims[0], m->fixed_batch);
    if (v->dims[0] > 0) {
      if (v->dims[0] > m->max_batch)
        return core_fail(st, INFERD_UNSUPPORTED, "input '%s' has a fixed batch size of %lld, above the largest batch %d",
                         v->name, (long long)v->dims[0], m->max_batch);
      m->fixed_batch = (int)v->dims[0];
    }
    m->inputs[k] = (inferd_tensor_info){.name = v->name, .dtype = v->dtype, .rank = v->rank};
    memcpy(m->inputs[k].dims, v->dims, sizeof v->dims);
    if (v->dims[0] <= 0) m->inputs[k].dims[0] = -1;
  }
  if (m->fixed_batch > 0) m->opt_batch = m->fixed_batch;
  for (int k = 0; k < g->n_outputs; k++) {
    const ir_value *v = &g->values[g->outputs[k]];
    m->outputs[k] = (inferd_tensor_info){.name = v->name, .dtype = INFERD_DTYPE_FLOAT, .rank = -1};
  }
  if (g->n_inputs == 0) return core_fail(st, INFERD_UNSUPPORTED, "model has no inputs");
  if (g->n_outputs > 8) return core_fail(st, INFERD_UNSUPPORTED, "model has %d outputs; at most 8", g->n_outputs);
  return INFERD_OK;
}

static inferd_code finish_load(ir_graph *g, const inferd_model_params *params, inferd_model **out,
                               inferd_status *st) {
  inferd_model *m = calloc(1, sizeof *m);
  if (!m) {
    ir_graph_free(g);
    return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  }
  m->graph = g;
  pthread_mutex_init(&m->lock, NULL);
  m->max_plans = params && params->max_cached_plans > 0 ? CORE_MIN(params->max_cached_plans, PLAN_CACHE_MAX) : 8;
  m->max_batch = params && params->max_batch > 0 ? params->max_batch : 1024;
  m->max_scratch = params && params->max_scratch_bytes ? params->max_scratch_bytes : (size_t)8 << 30;
  m->no_winograd = params && params->no_winograd;
  m->winograd_transformed = !m->no_winograd && params && params->winograd_transformed;
  m->bf16 = params && params->precision == INFERD_PRECISION_BF16;
  m->opt_batch = params && params->opt_batch > 0 ? CORE_MIN(params->opt_batch, m->max_batch) : 1;
  inferd_code rc = INFERD_OK;
  m->extra = calloc((size_t)g->n_nodes + 1, sizeof *m->extra);
  m->weight_arena = core_arena_new(8 << 20);
  if (!m->extra || !m->weight_arena) rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
  if (rc == INFERD_OK && dnnl_engine_create(&m->engine, dnnl_cpu, 0) != dnnl_success)
    rc = core_fail(st, INFERD_INTERNAL, "oneDNN has no CPU engine");
  if (rc == INFERD_OK && params && params->precision != INFERD_PRECISION_FP32 &&
      params->precision != INFERD_PRECISION_BF16)
    rc = core_fail(st, INFERD_INVALID_ARG, "unknown precision %d", (int)params->precision);
  /* below AVX-512, oneDNN 2.6 has only its reference kernels for bfloat16 */
  if (rc == INFERD_OK && m->bf16 &&
      (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) != dnnl_cpu_isa_avx512_core) /* isa bits */
    rc = core_fail(st, INFERD_UNSUPPORTED, "bf16 precision needs a CPU with AVX-512 (avx512f, bw, vl, dq)");
  if (rc == INFERD_OK) rc = describe_io(m, st);
  if (rc == INFERD_OK) rc = engine_passes_run(m, st);
  /* one slot per value, sized after the passes, which add values (folded weights) */
  if (rc == INFERD_OK && !(m->weights = calloc((size_t)g->n_values + 1, sizeof *m->weights)))
    rc = core_fail(st, INFERD_NO_MEMORY, "out of memory");
  if (rc == INFERD_OK) rc = engine_weights_mark(m, st);
  if (rc == INFERD_OK) {
    /* Compile the batch the model is tuned for now: it checks every node and fills the
     * weight cache, in the layouts that batch's kernels chose. */
    plan *p;
    pthread_mutex_lock(&m->lock);
    rc = plan_get_locked(m, m->opt_batch, omp_get_max_threads(), &p, st);
    if (rc == INFERD_OK) {
      p->refs--;
      m->opt_scratch = p->arena_bytes + p->scratchpad_bytes;
      m->flops_per_item = p->flops / m->opt_batch; /* read without the lock: written once, here */
      engine_weights_release_plain(m);
      for (int k = 0; k < m->n_outputs; k++) {
        m->outputs[k].rank = p->out_rank[k];
        memcpy(m->outputs[k].dims, p->out_dims[k], sizeof p->out_dims[k]);
        /* the batch axis: a first dimension of another size than the batch compiled here
         * does not follow the batch (a constant output, as a detector's anchor boxes) */
        if (m->fixed_batch == 0 && p->out_rank[k] >= 1 && p->out_dims[k][0] == m->opt_batch)
          m->outputs[k].dims[0] = -1;
      }
    }
    pthread_mutex_unlock(&m->lock);
  }
  if (rc != INFERD_OK) {
    inferd_model_free(m);
    return rc;
  }
  *out = m;
  return INFERD_OK;
}

inferd_code inferd_model_load(const char *path, const inferd_model_params *params, inferd_model **out,
                              inferd_status *st) {
  if (!out) return core_fail(st, INFERD_INVALID_ARG, "inferd_model_load: out is NULL");
  *out = NULL;
  if (!path) return core_fail(st, INFERD_INVALID_ARG, "inferd_model_load: path is NULL");
  ir_graph *g;
  onnx_load_params lp = {.max_external_bytes = params ? params->max_external_bytes : 0};
  inferd_code rc = onnx_load_file(path, &lp, &g, st);
  if (rc != INFERD_OK) return rc;
  rc = finish_load(g, params, out, st);
  if (rc != INFERD_OK) core_status_prefix(st, "%s", path);
  return rc;
}

inferd_code inferd_model_load_memory(const void *data, size_t size, const inferd_model_params *params,
                                     inferd_model **out, inferd_status *st) {
  if (!out) return core_fail(st, INFERD_INVALID_ARG, "inferd_model_load_memory: out is NULL");
  *out = NULL;
  if (!data && size) return core_fail(st, INFERD_INVALID_ARG, "inferd_model_load_memory: data is NULL, size %zu", size);
  ir_graph *g;
  onnx_load_params lp = {0};
  if (params) {
    lp.mapped_file = params->mapped_file;
    lp.dir = params->external_data_dir;
    lp.max_external_bytes = params->max_external_bytes;
  }
  inferd_code rc = onnx_load_memory(data, size, &lp, &g, st);
  if (rc != INFERD_OK) return rc;
  return finish_load(g, params, out, st);
}

void inferd_model_free(inferd_model *m) {
  if (!m) return;
  for (int i = 0; i < PLAN_CACHE_MAX; i++)
    if (m->cache[i].plan && --m->cache[i].plan->refs == 0) engine_plan_free(m->cache[i].plan);
  if (m->engine) dnnl_engine_destroy(m->engine);
  core_arena_free(m->weight_arena);
  free(m->weights);
  free(m->weight_only);
  free(m->extra);
  free(m->inputs);
  free(m->outputs);
  ir_graph_free(m->graph);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

int inferd_model_num_inputs(const inferd_model *m) { return m->n_inputs; }
int inferd_model_num_outputs(const inferd_model *m) { return m->n_outputs; }

inferd_code inferd_model_input(const inferd_model *m, int index, inferd_tensor_info *info) {
  if (!m || !info || index < 0 || index >= m->n_inputs) return INFERD_INVALID_ARG;
  *info = m->inputs[index];
  return INFERD_OK;
}

inferd_code inferd_model_output(const inferd_model *m, int index, inferd_tensor_info *info) {
  if (!m || !info || index < 0 || index >= m->n_outputs) return INFERD_INVALID_ARG;
  *info = m->outputs[index];
  return INFERD_OK;
}

size_t inferd_model_weights_bytes(const inferd_model *m) { return atomic_load(&m->weights_bytes); }
double inferd_model_flops_per_item(const inferd_model *m) { return m->flops_per_item; }
size_t inferd_model_scratch_bytes(const inferd_model *m) { return m->opt_scratch; }

/* ---- sessions ------------------------------------------------------------------------------ */

/* A step argument that is the caller's input or output array, set at each run. */
typedef struct io_binding {
  dnnl_memory_t mem; /* primitive steps */
  int slot;          /* custom steps: index into ptrs */
  ref_kind kind;
  int index;
  size_t offset;
} io_binding;

typedef struct plan_instance {
  plan *plan;
  size_t arena_size; /* what the plan needs of the session's arena */
  dnnl_memory_t *mems;    /* [plan->n_slots]: see plan_step.slot */
  dnnl_exec_arg_t *args;  /* same shape */
  void **ptrs;            /* custom steps' resolved pointers, same shape */
  io_binding *io;
  int n_io;
  double *step_seconds; /* [plan->n_steps], with profile on: each step's time over `runs` */
  long runs;
} plan_instance;


struct inferd_session {
  inferd_model *model;
  int threads;
  dnnl_stream_t stream;
  plan_instance inst[INFERD_SESSION_BATCH_SIZES];
  int n_inst;
  char *arena; /* the instances' scratch: activations, then oneDNN's scratchpad */
  size_t arena_size;
  bool profile;
  double op_seconds[OP_KIND_COUNT];
  long op_calls[OP_KIND_COUNT];
  double run_seconds;
};

inferd_code inferd_session_new(inferd_model *m, const inferd_session_params *params, inferd_session **out,
                               inferd_status *st) {
  if (!out) return core_fail(st, INFERD_INVALID_ARG, "inferd_session_new: out is NULL");
  *out = NULL;
  if (!m) return core_fail(st, INFERD_INVALID_ARG, "inferd_session_new: model is NULL");
  if (params && (params->threads < 0 || params->threads > INFERD_SESSION_THREADS_MAX))
    return core_fail(st, INFERD_INVALID_ARG, "inferd_session_new: threads %d: want 0 (OpenMP's default) to %d",
                     params->threads, INFERD_SESSION_THREADS_MAX);
  inferd_session *s = calloc(1, sizeof *s);
  if (!s) return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  s->model = m;
  s->threads = params && params->threads > 0 ? params->threads : omp_get_max_threads();
  s->profile = params && params->profile;
  if (dnnl_stream_create(&s->stream, m->engine, dnnl_stream_default_flags) != dnnl_success) {
    free(s);
    return core_fail(st, INFERD_INTERNAL, "oneDNN could not create a stream");
  }
  *out = s;
  return INFERD_OK;
}

static void instance_free(inferd_session *s, plan_instance *in) {
  if (!in->plan) return;
  for (int i = 0; in->mems && i < in->plan->n_slots; i++)
    if (in->mems[i]) dnnl_memory_destroy(in->mems[i]);
  free(in->mems);
  free(in->args);
  free(in->ptrs);
  free(in->io);
  free(in->step_seconds);
  plan_release(s->model, in->plan);
  memset(in, 0, sizeof *in);
}

void inferd_session_free(inferd_session *s) {
  if (!s) return;
  for (int i = 0; i < s->n_inst; i++) instance_free(s, &s->inst[i]);
  core_pages_free(s->arena, s->arena_size);
  dnnl_stream_destroy(s->stream);
  free(s);
}

static void *ref_pointer(const plan *p, char *arena, const plan_ref *r) {
  switch (r->kind) {
  case REF_BUFFER: {
    const plan_buffer *b = &p->buffers[r->index];
    if (b->bind != REF_BUFFER) return NULL; /* bound per run */
    return arena + b->offset + r->offset;
  }
  case REF_WEIGHT: return (void *)r->data;
  default: return NULL;
  }
}

/* Which caller array a ref reads or writes, if any. */
static bool ref_io(const plan *p, const plan_ref *r, ref_kind *kind, int *index) {
  if (r->kind == REF_INPUT || r->kind == REF_OUTPUT) {
    *kind = r->kind, *index = r->index;
    return true;
  }
  if (r->kind == REF_BUFFER && p->buffers[r->index].bind != REF_BUFFER) {
    *kind = p->buffers[r->index].bind, *index = p->buffers[r->index].io_index;
    return true;
  }
  return false;
}

/* Points a bound instance's arena buffers and scratchpads into a new `arena` (the
 * weights and the caller's arrays stay as they are). False if oneDNN refused one. */
static bool instance_repoint(inferd_session *s, plan_instance *in, char *arena) {
  bool ok = true;
  const plan *p = in->plan;
  for (int i = 0; i < p->n_steps; i++) {
    const plan_step *step = &p->steps[i];
    int base = step->slot;
    for (int a = 0; a <= step->n_args; a++) {
      void *ptr = arena + p->arena_bytes; /* the scratchpad, after the arguments */
      if (a < step->n_args) {
        if (step->args[a].kind != REF_BUFFER || !(ptr = ref_pointer(p, arena, &step->args[a]))) continue;
        in->ptrs[base + a] = ptr;
      }
      if (in->mems[base + a] && dnnl_memory_set_data_handle_v2(in->mems[base + a], ptr, s->stream) != dnnl_success)
        ok = false;
    }
  }
  return ok;
}

/* Makes the session's arena at least `size` bytes, pointing its instances at the new one. */
static inferd_code session_arena_reserve(inferd_session *s, size_t size, inferd_status *st) {
  if (size <= s->arena_size && s->arena) return INFERD_OK;
  char *arena = core_pages_alloc(size);
  if (!arena) return core_fail(st, INFERD_NO_MEMORY, "out of memory for a %zu-byte scratch arena", size);
  for (int i = 0; i < s->n_inst; i++) {
    if (!instance_repoint(s, &s->inst[i], arena)) { /* back to the old arena, which stays */
      for (int k = 0; k <= i; k++) instance_repoint(s, &s->inst[k], s->arena);
      core_pages_free(arena, size);
      return core_fail(st, INFERD_INTERNAL, "oneDNN could not move a memory object to a %zu-byte arena", size);
    }
  }
  core_pages_free(s->arena, s->arena_size);
  s->arena = arena;
  s->arena_size = size;
  return INFERD_OK;
}

static inferd_code instance_bind(inferd_session *s, plan *p, plan_instance *in, inferd_status *st) {
  memset(in, 0, sizeof *in);
  in->plan = p;
  int slots = p->n_slots;
  in->arena_size = p->arena_bytes + p->scratchpad_bytes;
  in->mems = calloc((size_t)slots + 1, sizeof *in->mems);
  in->args = calloc((size_t)slots + 1, sizeof *in->args);
  in->ptrs = calloc((size_t)slots + 1, sizeof *in->ptrs);
  in->io = calloc((size_t)slots + 1, sizeof *in->io);
  if (s->profile) in->step_seconds = calloc((size_t)p->n_steps + 1, sizeof *in->step_seconds);
  if (!in->mems || !in->args || !in->ptrs || !in->io || (s->profile && !in->step_seconds)) {
    instance_free(s, in);
    return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  }
  inferd_code rc = session_arena_reserve(s, in->arena_size, st);
  if (rc != INFERD_OK) {
    instance_free(s, in);
    return rc;
  }
  dnnl_engine_t eng = s->model->engine;
  for (int i = 0; i < p->n_steps; i++) {
    const plan_step *step = &p->steps[i];
    int base = step->slot;
    for (int a = 0; a < step->n_args; a++) {
      const plan_ref *r = &step->args[a];
      void *ptr = ref_pointer(p, s->arena, r);
      in->ptrs[base + a] = ptr;
      ref_kind kind;
      int index;
      bool io = ref_io(p, r, &kind, &index);
      if (step->prim) {
        if (dnnl_memory_create(&in->mems[base + a], &r->md, eng, io ? DNNL_MEMORY_NONE : ptr) != dnnl_success) {
          instance_free(s, in);
          return core_fail(st, INFERD_INTERNAL, "oneDNN could not create a memory object");
        }
        in->args[base + a] = (dnnl_exec_arg_t){step->arg_kinds[a], in->mems[base + a]};
      }
      if (io) in->io[in->n_io++] = (io_binding){in->mems[base + a], base + a, kind, index, r->offset};
    }
    if (step->prim && p->scratchpad_bytes) {
      const_dnnl_primitive_desc_t pd;
      dnnl_primitive_get_primitive_desc(step->prim, &pd);
      const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
      if (smd && dnnl_memory_desc_get_size(smd) > 0) {
        int a = step->n_args;
        if (dnnl_memory_create(&in->mems[base + a], smd, eng, s->arena + p->arena_bytes) != dnnl_success) {
          instance_free(s, in);
          return core_fail(st, INFERD_INTERNAL, "oneDNN could not create a scratchpad");
        }
        in->args[base + a] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, in->mems[base + a]};
      }
    }
  }
  return INFERD_OK;
}

/* The session's instance for `batch`, binding the model's plan on first use. */
static inferd_code session_instance(inferd_session *s, int batch, plan_instance **out, inferd_status *st) {
  for (int i = 0; i < s->n_inst; i++)
    if (s->inst[i].plan->batch == batch) {
      *out = &s->inst[i];
      return INFERD_OK;
    }
  inferd_model *m = s->model;
  if (batch < 1 || batch > m->max_batch)
    return core_fail(st, INFERD_INVALID_ARG, "batch size %d outside 1..%d", batch, m->max_batch);
  plan *p;
  omp_set_num_threads(s->threads);
  pthread_mutex_lock(&m->lock);
  inferd_code rc = plan_get_locked(m, batch, s->threads, &p, st);
  if (rc == INFERD_OK && !p->instantiated && (rc = engine_plan_instantiate(p, st)) != INFERD_OK) p->refs--;
  pthread_mutex_unlock(&m->lock);
  if (rc != INFERD_OK) return rc;
  if (s->n_inst == INFERD_SESSION_BATCH_SIZES) instance_free(s, &s->inst[--s->n_inst]);
  plan_instance *in = &s->inst[s->n_inst];
  /* on failure instance_bind has released the plan with the instance */
  if ((rc = instance_bind(s, p, in, st)) != INFERD_OK) return rc;
  s->n_inst++;
  *out = in;
  return INFERD_OK;
}

inferd_code inferd_session_output_shape(inferd_session *s, int batch, int index, int *rank,
                                        int64_t dims[INFERD_MAX_RANK], inferd_status *st) {
  if (!s || !rank || !dims)
    return core_fail(st, INFERD_INVALID_ARG, "inferd_session_output_shape: %s is NULL",
                     !s ? "session" : !rank ? "rank" : "dims");
  plan_instance *in = NULL;
  int caller_threads = omp_get_max_threads();
  inferd_code rc = session_instance(s, batch, &in, st);
  omp_set_num_threads(caller_threads);
  if (rc != INFERD_OK) return rc;
  if (index < 0 || index >= in->plan->n_outputs)
    return core_fail(st, INFERD_INVALID_ARG, "output %d: the model has %d", index, in->plan->n_outputs);
  *rank = in->plan->out_rank[index];
  memcpy(dims, in->plan->out_dims[index], sizeof in->plan->out_dims[index]);
  return INFERD_OK;
}

int inferd_session_threads(const inferd_session *s) { return s->threads; }

size_t inferd_session_scratch_bytes(const inferd_session *s, int batch) {
  for (int i = 0; i < s->n_inst; i++)
    if (s->inst[i].plan->batch == batch) return s->inst[i].arena_size;
  return 0;
}

size_t inferd_session_arena_bytes(const inferd_session *s) { return s->arena ? s->arena_size : 0; }

static inferd_code session_run(inferd_session *s, int batch, const float *const *inputs, float *const *outputs,
                              inferd_status *st) {
  plan_instance *in = NULL;
  inferd_code rc = session_instance(s, batch, &in, st); /* checks the batch size first */
  if (rc != INFERD_OK) return rc;
  const inferd_model *m = s->model;
  if (!inputs || !outputs)
    return core_fail(st, INFERD_INVALID_ARG, "inferd_session_run: %s is NULL", !inputs ? "inputs" : "outputs");
  for (int k = 0; k < m->n_inputs; k++)
    if (!inputs[k]) return core_fail(st, INFERD_INVALID_ARG, "input %d ('%s') is NULL", k, m->inputs[k].name);
  for (int k = 0; k < m->n_outputs; k++)
    if (!outputs[k]) return core_fail(st, INFERD_INVALID_ARG, "output %d ('%s') is NULL", k, m->outputs[k].name);
  for (int i = 0; i < in->n_io; i++) {
    const io_binding *b = &in->io[i];
    char *base = b->kind == REF_INPUT ? (char *)inputs[b->index] : (char *)outputs[b->index];
    if (b->mem) dnnl_memory_set_data_handle_v2(b->mem, base + b->offset, s->stream);
    else in->ptrs[b->slot] = base + b->offset;
  }
  omp_set_num_threads(s->threads);
  const plan *p = in->plan;
  double t0 = s->profile ? core_now_seconds() : 0;
  for (int i = 0; i < p->n_steps; i++) {
    const plan_step *step = &p->steps[i];
    int base = step->slot;
    double ts = s->profile ? core_now_seconds() : 0;
    if (step->prim) {
      int nargs = step->n_args + (in->args[base + step->n_args].memory ? 1 : 0);
      if (dnnl_primitive_execute(step->prim, s->stream, nargs, &in->args[base]) != dnnl_success)
        return core_fail(st, INFERD_INTERNAL, "node '%s' (%s): oneDNN failed to execute", step->node,
                         engine_op_name(step->op));
    } else {
      step->fn(step, &in->ptrs[base]);
    }
    if (s->profile) {
      double dt = core_now_seconds() - ts;
      s->op_seconds[step->op] += dt;
      s->op_calls[step->op]++;
      in->step_seconds[i] += dt;
    }
  }
  if (s->profile) {
    s->run_seconds += core_now_seconds() - t0;
    in->runs++;
  }
  return INFERD_OK;
}

/* The calling thread's OpenMP thread count is the session's while it runs, and the
 * caller's again after: the default of sessions and plans made later on this thread. */
inferd_code inferd_session_run(inferd_session *s, int batch, const float *const *inputs, float *const *outputs,
                               inferd_status *st) {
  if (!s) return core_fail(st, INFERD_INVALID_ARG, "inferd_session_run: session is NULL");
  int caller_threads = omp_get_max_threads();
  inferd_code rc = session_run(s, batch, inputs, outputs, st);
  omp_set_num_threads(caller_threads);
  return rc;
}

void inferd_session_profile_reset(inferd_session *s) {
  memset(s->op_seconds, 0, sizeof s->op_seconds);
  memset(s->op_calls, 0, sizeof s->op_calls);
  s->run_seconds = 0;
  for (int i = 0; i < s->n_inst; i++) {
    plan_instance *in = &s->inst[i];
    if (in->step_seconds) memset(in->step_seconds, 0, (size_t)in->plan->n_steps * sizeof *in->step_seconds);
    in->runs = 0;
  }
}

void inferd_session_profile(const inferd_session *s, char *buf, size_t size) {
  size_t off = 0;
  off += (size_t)snprintf(buf, size, "%-20s %8s %12s %7s\n", "op", "calls", "total_ms", "share");
  for (int op = 0; op < OP_KIND_COUNT && off < size; op++) {
    if (!s->op_calls[op]) continue;
    off += (size_t)snprintf(buf + off, size - off, "%-20s %8ld %12.2f %6.1f%%\n", engine_op_name((op_kind)op),
                            s->op_calls[op], s->op_seconds[op] * 1e3,
                            s->run_seconds > 0 ? 100.0 * s->op_seconds[op] / s->run_seconds : 0.0);
  }
}

/* The oneDNN implementation that runs a step ("jit_1x1:avx512_core"), or "inferd". */
static const char *step_kernel(const plan_step *step) {
  const_dnnl_primitive_desc_t pd;
  const char *impl = NULL;
  if (step->prim && dnnl_primitive_get_primitive_desc(step->prim, &pd) == dnnl_success &&
      dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
    return impl;
  return "inferd";
}

/* The shape a step writes ("8x256x14x14"): its destination argument's. */
static void step_output_shape(const plan_step *step, char *buf, size_t size) {
  int a = step->n_args - 1;
  for (int i = 0; i < step->n_args; i++)
    if (step->arg_kinds[i] == DNNL_ARG_DST || step->arg_kinds[i] == DNNL_ARG_TO) a = i;
  buf[0] = '\0';
  if (a < 0) return;
  const dnnl_memory_desc_t *md = &step->args[a].md;
  size_t off = 0;
  for (int d = 0; d < md->ndims && off < size; d++)
    off += (size_t)snprintf(buf + off, size - off, d ? "x%lld" : "%lld", (long long)md->dims[d]);
}

typedef struct step_time {
  double seconds;
  int index;
} step_time;

static int slower_first(const void *a, const void *b) {
  double x = ((const step_time *)a)->seconds, y = ((const step_time *)b)->seconds;
  return (x < y) - (x > y);
}

void inferd_session_profile_steps(const inferd_session *s, int batch, int top, char *buf, size_t size) {
  if (size) buf[0] = '\0';
  const plan_instance *in = NULL;
  for (int i = 0; i < s->n_inst; i++)
    if (s->inst[i].plan->batch == batch) in = &s->inst[i];
  if (!in || !in->step_seconds || in->runs == 0 || size == 0 || top < 1) return;
  const plan *p = in->plan;
  step_time *order = malloc((size_t)p->n_steps * sizeof *order);
  if (!order) return;
  double total = 0;
  for (int i = 0; i < p->n_steps; i++) {
    order[i] = (step_time){in->step_seconds[i], i};
    total += in->step_seconds[i];
  }
  qsort(order, (size_t)p->n_steps, sizeof *order, slower_first);
  size_t off = (size_t)snprintf(buf, size,
                                "%d slowest of %d steps at batch %d (%ld runs):\n%8s %6s %7s  %-15s %-26s %-16s %s\n",
                                top < p->n_steps ? top : p->n_steps, p->n_steps, batch, in->runs, "ms/run", "share",
                                "GFLOP/s", "op", "kernel", "output", "node");
  for (int k = 0; k < p->n_steps && k < top && off < size; k++) {
    const plan_step *step = &p->steps[order[k].index];
    double per_run = order[k].seconds / (double)in->runs;
    char gflops[16] = "-", shape[64];
    double rate = per_run > 0 ? step->flops / per_run * 1e-9 : 0;
    if (rate > 0) snprintf(gflops, sizeof gflops, rate >= 100 ? "%.0f" : "%.2g", rate);
    step_output_shape(step, shape, sizeof shape);
    off += (size_t)snprintf(buf + off, size - off, "%8.3f %5.1f%% %7s  %-15s %-26s %-16s %s\n", per_run * 1e3,
                            total > 0 ? 100.0 * order[k].seconds / total : 0.0, gflops, engine_op_name(step->op),
                            step_kernel(step), shape, step->node ? step->node : "");
  }
  free(order);
}
