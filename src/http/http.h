/*
 * http.h - inferd's HTTP front end: the TorchServe-compatible inference, management
 * and metrics APIs served with h2o (DESIGN.md §1, §6).
 *
 * An http_server owns:
 *   - the listening sockets of inference_address (8080), management_address (8081)
 *     and metrics_address (8082); two keys naming the same address share one socket,
 *     which then serves both APIs (TorchServe's "all" connector);
 *   - number_of_netty_threads HTTP threads, each with its own h2o event loop and
 *     h2o_context, accepting on its own SO_REUSEPORT copy of every socket;
 *   - the token keys (key_file.json) unless token auth is disabled.
 * Requests are parsed, authorized and preprocessed on the HTTP thread that accepted
 * the connection, handed to a model's scheduler queue, and answered on that same
 * thread when a worker's done callback sends the finished request back through the
 * loop's h2o_multithread queue (http_server.c has the whole design).
 *
 * Lifecycle (one thread, the caller's, e.g. `inferd serve`'s main thread):
 *   http_server_new -> http_server_start (bind, start the HTTP threads)
 *     -> ... -> http_server_drain (graceful stop) -> http_server_free.
 *
 * Threading: every function here is called by the thread that made the server, except
 * the multipart and KServe v2 request parsers and the url helpers, which are pure and
 * may be called from any thread.
 */
#ifndef INFERD_HTTP_H
#define INFERD_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inferd/inferd.h"

struct config_server;
struct topo;

typedef struct http_server http_server;

typedef struct http_server_params {
  /* Borrowed; must outlive the server. Read: the three addresses,
   * number_of_netty_threads, max_request_size, max_response_size,
   * disable_token_authorization, enable_model_api. */
  const struct config_server *config;
  /* Where key_file.json is written; NULL (the default): "key_file.json" in the
   * working directory, as TorchServe does. Removed again by http_server_free. */
  const char *key_file;
  /* Borrowed; must outlive the server. Workers of every model are placed and pinned by
   * plans made on it (topo_plan_new). NULL: workers are not pinned. */
  const struct topo *topo;
} http_server_params;

/* Makes the server: its h2o configuration and, with token auth on, fresh random keys
 * written to the key file (mode 0600). Nothing listens yet. Free with
 * http_server_free. */
inferd_code http_server_new(const http_server_params *params, http_server **out,
                            inferd_status *status);

/* Binds every address and starts the HTTP threads; returns once they all run. Fails
 * (nothing left running) when an address cannot be bound, naming it. */
inferd_code http_server_start(http_server *server, inferd_status *status);

/* Loads every model of load_models (`all`: every model in model_store), in order,
 * from the model store through the archive reader, the engine and a scheduler with the
 * workers its configuration asks for (models={...} minWorkers, else
 * default_workers_per_model, else one per NUMA node), and waits for their workers to be
 * ready. /ping answers 200 from then on. Stops at the first model that fails, naming
 * it. Blocks: call it on the thread that made the server, after http_server_start. */
inferd_code http_server_load_models(http_server *server, inferd_status *status);

/* The port an API listens on (useful when the configured port was 0), or -1. */
typedef enum http_api { HTTP_API_INFERENCE, HTTP_API_MANAGEMENT, HTTP_API_METRICS, HTTP_API_COUNT } http_api;
int http_server_port(const http_server *server, http_api api);

/* Graceful stop, for SIGTERM/SIGINT: from now on /ping answers 503 and every new
 * prediction 503 ("shutting down"); requests already accepted are answered; returns
 * when none is left in flight or after timeout_ms (< 0: no limit). The HTTP threads
 * keep running until http_server_free. */
void http_server_drain(http_server *server, int timeout_ms);

/* Stops the HTTP threads, closes the sockets, removes the key file, frees. */
void http_server_free(http_server *server);

/* ---- multipart/form-data (pure; exposed for tests and the fuzzer) ------------------- */

/* One part of a multipart body: pointers into the body the caller passed. */
typedef struct http_multipart_part {
  const char *name; /* the form field name from Content-Disposition; not terminated */
  size_t name_len;
  const char *data; /* the part's content */
  size_t size;
} http_multipart_part;

/* Reads the boundary out of a Content-Type value ("multipart/form-data; boundary=x",
 * quoted or not, 1..70 characters as RFC 2046 allows). Returns the boundary's length
 * and sets *boundary to point into content_type, or 0 when the value is not
 * multipart/form-data with a valid boundary. */
size_t http_multipart_boundary(const char *content_type, size_t len, const char **boundary);

/* Finds the first part named one of `names` (in order of preference: the first name
 * that any part has wins) in a multipart/form-data body. Strict: the body must start
 * with the first delimiter (a preamble is allowed), every part needs a header block
 * ended by an empty line with a Content-Disposition: form-data; name="..." header, and
 * the close delimiter must be present. Returns INFERD_OK and fills *part,
 * INFERD_NOT_FOUND when the body is well formed but has no such field, or
 * INFERD_INVALID_ARG with a message naming what is malformed. Never reads outside
 * body[0..size). */
inferd_code http_multipart_find(const char *body, size_t size, const char *boundary,
                                size_t boundary_len, const char *const *names, int name_count,
                                http_multipart_part *part, inferd_status *status);

/* ---- KServe v2 infer requests (pure; exposed for tests and the fuzzer) ----------------- */

/* Memory for the parsed request (the HTTP layer: the request's pool). NULL: out of memory. */
typedef void *(*http_v2_alloc_fn)(void *ctx, size_t bytes);

/* What the model being asked expects; all borrowed for the duration of the call. */
typedef struct http_v2_spec {
  const char *model_name;         /* for messages */
  const char *input_name;         /* the model's one input */
  int item_rank;                  /* the input's rank without its batch axis */
  const int64_t *item_dims;       /* [item_rank] */
  const char *const *output_names; /* [output_count] */
  int output_count;
  int max_rows;                   /* largest batch n accepted (the model's job_queue_size) */
  /* Memory for the input's numbers from JSON "data" alone, when the caller copies them
   * out before it parses again (the HTTP layer: its thread's scratch buffer, so that a
   * 602 KB image does not go to malloc per request); NULL: the alloc of http_v2_parse. */
  http_v2_alloc_fn data_alloc;
  void *data_alloc_ctx;
} http_v2_spec;

/* A validated request. Pointers are into the body given to http_v2_parse or into
 * memory from its alloc callback (owned by whoever owns that memory). */
typedef struct http_v2_request {
  int rows;                    /* n >= 1: the batch axis of the input's shape */
  size_t row_elems;            /* floats per row: the product of item_dims */
  const float *data;           /* [rows * row_elems] from JSON "data"; NULL when binary */
  const unsigned char *binary; /* rows * row_elems little-endian float32 in the body; or NULL */
  const char *id;              /* the request's "id" (not terminated), NULL when absent */
  size_t id_len;
  int output_count;            /* outputs to answer: those the request names, in its order,
                                  else every output of the model, in the model's order */
  const int *outputs;          /* [output_count]: indexes into spec->output_names */
  const bool *output_binary;   /* [output_count]: answer that output as binary tensor data */
} http_v2_request;

/* Parses and validates POST /v2/models/{m}/infer: the body, and the value of its
 * Inference-Header-Content-Length header (header == NULL: absent; then the whole body
 * is JSON). The input must be named spec->input_name, have datatype FP32 and shape
 * [n, item_dims...] with 1 <= n <= spec->max_rows, and give n * row_elems numbers
 * in "data" (flat or nested, row-major) or, with the binary tensor data extension,
 * "parameters": {"binary_data_size": n * row_elems * 4} bytes after the JSON. Outputs
 * asked for must be the model's, each once. Returns INFERD_OK and fills *out, or
 * INFERD_INVALID_ARG (INFERD_NO_MEMORY when alloc fails) with a message naming what
 * is wrong. Never reads outside body[0..size). */
inferd_code http_v2_parse(const char *body, size_t size, const char *header, size_t header_len,
                          const http_v2_spec *spec, http_v2_alloc_fn alloc, void *alloc_ctx,
                          http_v2_request *out, inferd_status *status);

/* Copies row `row` (< r->rows) of a parsed request into dest[0..row_elems). */
void http_v2_copy_row(const http_v2_request *r, int row, float *dest);

/* Registering from a url (http_fetch.c). True when url is one POST /models downloads:
 * http:// or https://, in any case. */
bool http_url_is_remote(const char *url);
/* The name of the archive a url downloads to in model_store: the last segment of its
 * path, without the query or fragment; false when that is not a valid model name
 * ([A-Za-z0-9][A-Za-z0-9._-]*) or does not fit in size bytes. */
bool http_url_file_name(const char *url, char *out, size_t size);

#endif /* INFERD_HTTP_H */
