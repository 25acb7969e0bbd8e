/*
 * http_describe.c - the API description: `OPTIONS /` or `GET /api-description` on any
 * address answers an OpenAPI 3.0.1 document of the APIs that address serves, as
 * TorchServe's ApiDescriptionRequestHandler does (its clients generate code from it).
 *
 * One table lists every endpoint inferd routes (http_routes.c, http_v2.c,
 * http_management.c): its API, method, path, parameters, body and the statuses it can
 * answer. A document is built from the rows of the listener's APIs with jansson.
 * test_server_api_description sends every operation of the document to the server and
 * fails when one is not routed (405, or 404 "Requested resource is not found"), so the table
 * cannot list what the router does not serve.
 *
 * Not a hot path: the document (about 30 KB) is built per request and copied into the
 * request's pool.
 *
 * Threading: any HTTP thread; the table is constant.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_internal.h"

typedef struct param {
  const char *name, *in, *type, *text; /* type "string[]": an array of strings (name[]=a&name[]=b) */
  bool required;
} param;

enum { MAX_PARAMS = 8, MAX_ERRORS = 8 };

typedef struct endpoint {
  http_api api;
  const char *method, *path, *id, *text;
  param params[MAX_PARAMS];
  const char *body;     /* the request body's media type, NULL for none */
  const char *answer;   /* the media type of a success */
  int success;          /* its status */
  int errors[MAX_ERRORS]; /* 0-terminated */
  int also;             /* another success status, 0 for none (202: a register or a scale answered before its
                         * workers run, synchronous=false) */
  bool model_api;       /* served only with enable_model_api (405 without): described only then */
} endpoint;

#define MODEL {"model_name", "path", "string", "Name of the model.", true}
#define VERSION {"model_version", "path", "string", "Version of the model.", true}
#define JSON "application/json"
#define CONFIGURED " Default: the archive's model-config.yaml, else the server's configuration."
#define DESCRIBE_TEXT "The OpenAPI 3.0.1 description of the APIs this address serves."

static const endpoint endpoints[] = {
    /* inference API (TorchServe's port 8080) */
    {HTTP_API_INFERENCE, "options", "/", "apiDescription", DESCRIBE_TEXT, {{0}}, NULL, JSON, 200, {0}, 0, false},
    {HTTP_API_INFERENCE, "get", "/api-description", "apiDescriptionGet", DESCRIBE_TEXT, {{0}}, NULL, JSON, 200, {0}, 0, false},
    {HTTP_API_INFERENCE, "get", "/ping", "ping",
     "Health: Healthy once every model loaded at start-up has its workers running (one scaled to 0 aside) and the "
     "server is not shutting down (POST and HEAD too).",
     {{0}}, NULL, JSON, 200, {503}, 0, false},
    {HTTP_API_INFERENCE, "post", "/predictions/{model_name}", "predictions",
     "Runs the default version of the model on the request body: raw bytes, or the fields data, body or file of a "
     "multipart form (PUT too). image_classifier answers the top 5 classes with their probabilities.",
     {MODEL}, "*/*", JSON, 200, {400, 401, 404, 413, 500, 503, 504}, 0, false},
    {HTTP_API_INFERENCE, "post", "/predictions/{model_name}/{model_version}", "versionPredictions",
     "As /predictions/{model_name}, with the version named.", {MODEL, VERSION}, "*/*", JSON, 200,
     {400, 401, 404, 413, 500, 503, 504}, 0, false},
    {HTTP_API_INFERENCE, "get", "/v2", "serverMetadata", "KServe v2: the server's name, version and extensions.",
     {{0}}, NULL, JSON, 200, {401}, 0, false},
    {HTTP_API_INFERENCE, "get", "/v2/health/live", "serverLive", "KServe v2: the server is live.", {{0}}, NULL, JSON,
     200, {0}, 0, false},
    {HTTP_API_INFERENCE, "get", "/v2/health/ready", "serverReady",
     "KServe v2: ready as /ping is healthy ({\"ready\": false} with 503 otherwise).", {{0}}, NULL, JSON, 200, {503}, 0, false},
    {HTTP_API_INFERENCE, "get", "/v2/models/{model_name}", "modelMetadata",
     "KServe v2: the model's inputs and outputs (name, datatype, shape; -1 for a free axis).", {MODEL}, NULL, JSON,
     200, {401, 404}, 0, false},
    {HTTP_API_INFERENCE, "get", "/v2/models/{model_name}/versions/{model_version}", "modelVersionMetadata",
     "KServe v2: as /v2/models/{model_name}, with the version named.", {MODEL, VERSION}, NULL, JSON, 200, {401, 404},
     0, false},
    {HTTP_API_INFERENCE, "get", "/v2/models/{model_name}/ready", "modelReady",
     "KServe v2: whether the model has a worker running ({\"ready\": false} with 503 otherwise).", {MODEL}, NULL,
     JSON, 200, {401, 404, 503}, 0, false},
    {HTTP_API_INFERENCE, "get", "/v2/models/{model_name}/versions/{model_version}/ready", "modelVersionReady",
     "KServe v2: as /v2/models/{model_name}/ready, with the version named.", {MODEL, VERSION}, NULL, JSON, 200,
     {401, 404, 503}, 0, false},
    {HTTP_API_INFERENCE, "post", "/v2/models/{model_name}/infer", "modelInfer",
     "KServe v2 inference: a JSON request of input tensors, or with the binary tensor data extension a JSON header "
     "of Inference-Header-Content-Length bytes followed by the tensors' bytes.",
     {MODEL, {"Inference-Header-Content-Length", "header", "integer",
              "Length of the JSON header when the tensors' bytes follow it (binary tensor data extension).", false}},
     "application/json", JSON, 200, {400, 401, 404, 413, 500, 503, 504}, 0, false},
    {HTTP_API_INFERENCE, "post", "/v2/models/{model_name}/versions/{model_version}/infer", "modelVersionInfer",
     "As /v2/models/{model_name}/infer, with the version named.",
     {MODEL, VERSION, {"Inference-Header-Content-Length", "header", "integer",
                       "Length of the JSON header when the tensors' bytes follow it (binary tensor data extension).",
                       false}},
     "application/json", JSON, 200, {400, 401, 404, 413, 500, 503, 504}, 0, false},

    /* management API (8081) */
    {HTTP_API_MANAGEMENT, "options", "/", "apiDescription", DESCRIBE_TEXT, {{0}}, NULL, JSON, 200, {0}, 0, false},
    {HTTP_API_MANAGEMENT, "get", "/api-description", "apiDescriptionGet", DESCRIBE_TEXT, {{0}}, NULL, JSON, 200, {0},
     0, false},
    {HTTP_API_MANAGEMENT, "get", "/models", "listModels", "The registered models, a page at a time.",
     {{"limit", "query", "integer", "Models per page (at most 100, the default).", false},
      {"next_page_token", "query", "integer", "Where the page starts, from the last page's nextPageToken.", false}},
     NULL, JSON, 200, {400, 401}, 0, false},
    {HTTP_API_MANAGEMENT, "post", "/models", "registerModel",
     "Registers a model archive (.mar) of the model store, or one downloaded into it (with --enable-model-api). "
     "The parameters may also be a JSON object body (Content-Type: application/json).",
     {{"url", "query", "string",
       "The archive's file name in the model store, or an http(s) url matching allowed_urls to download it from.",
       true},
      {"model_name", "query", "string", "Name of the model (default: the archive's).", false},
      {"initial_workers", "query", "integer", "Workers to start, 0..256." CONFIGURED, false},
      {"batch_size", "query", "integer", "Largest batch, 1..1024." CONFIGURED, false},
      {"max_batch_delay", "query", "integer", "Milliseconds a batch waits to fill, 0..600000." CONFIGURED, false},
      {"response_timeout", "query", "integer", "Seconds a request may wait for its answer, 1..86400." CONFIGURED, false},
      {"synchronous", "query", "boolean", "Answer once the workers run (default true).", false}},
     "application/json", JSON, 200, {400, 401, 404, 409, 500, 503, 507}, 202, true},
    {HTTP_API_MANAGEMENT, "get", "/models/{model_name}", "describeModel",
     "The default version of the model: its settings and its workers with their cores.", {MODEL}, NULL, JSON, 200,
     {401, 404}, 0, false},
    {HTTP_API_MANAGEMENT, "put", "/models/{model_name}", "setAutoScale",
     "Scales the default version of the model to min_worker workers.",
     {MODEL,
      {"min_worker", "query", "integer", "Workers (default 1).", false},
      {"max_worker", "query", "integer", "At least min_worker (default min_worker).", false},
      {"model_version", "query", "string", "The version to scale instead of the default.", false},
      {"synchronous", "query", "boolean", "Answer once the workers run (default false: 202 at once).", false}},
     NULL, JSON, 200, {400, 401, 404, 500, 503, 507}, 202, false},
    {HTTP_API_MANAGEMENT, "delete", "/models/{model_name}", "unregisterModel",
     "Unregisters the default version of the model (with --enable-model-api).", {MODEL}, NULL, JSON, 200,
     {401, 403, 404, 503}, 0, true},
    {HTTP_API_MANAGEMENT, "get", "/models/{model_name}/{model_version}", "describeModelVersion",
     "One version of the model, or every version with \"all\".", {MODEL, VERSION}, NULL, JSON, 200, {401, 404}, 0, false},
    {HTTP_API_MANAGEMENT, "put", "/models/{model_name}/{model_version}", "versionSetAutoScale",
     "As PUT /models/{model_name}, for the version named.",
     {MODEL, VERSION,
      {"min_worker", "query", "integer", "Workers (default 1).", false},
      {"max_worker", "query", "integer", "At least min_worker (default min_worker).", false},
      {"synchronous", "query", "boolean", "Answer once the workers run (default false: 202 at once).", false}},
     NULL, JSON, 200, {400, 401, 404, 500, 503, 507}, 202, false},
    {HTTP_API_MANAGEMENT, "delete", "/models/{model_name}/{model_version}", "versionUnregisterModel",
     "Unregisters the version named (with --enable-model-api).", {MODEL, VERSION}, NULL, JSON, 200,
     {401, 403, 404, 503}, 0, true},
    {HTTP_API_MANAGEMENT, "put", "/models/{model_name}/{model_version}/set-default", "setDefault",
     "Makes the version named the model's default.", {MODEL, VERSION}, NULL, JSON, 200, {401, 404, 503}, 0, false},
    {HTTP_API_MANAGEMENT, "get", "/token", "token",
     "Renews the inference or the management key (token authorization; needs the API key).",
     {{"type", "query", "string", "inference or management.", true}}, NULL, JSON, 200, {400, 401}, 0, false},

    /* metrics API (8082) */
    {HTTP_API_METRICS, "options", "/", "apiDescription", DESCRIBE_TEXT, {{0}}, NULL, JSON, 200, {0}, 0, false},
    {HTTP_API_METRICS, "get", "/api-description", "apiDescriptionGet", DESCRIBE_TEXT, {{0}}, NULL, JSON, 200, {0}, 0, false},
    {HTTP_API_METRICS, "get", "/metrics", "metrics", "Prometheus text format 0.0.4 of the server's metrics.",
     {{"name[]", "query", "string[]", "Only these metric families (repeat the parameter for several).", false}}, NULL,
     "text/plain; version=0.0.4", 200, {400}, 0, false},
};

static json_t *schema_of(const char *type) {
  if (strcmp(type, "string[]") == 0) return json_pack("{s:s, s:{s:s}}", "type", "array", "items", "type", "string");
  return json_pack("{s:s}", "type", type);
}

static json_t *error_response(int status, bool v2) {
  const char *reason = "Error";
#define HTTP__DESCRIBE_REASON(name, code, text, type) \
  if (code == status) reason = text;
  HTTP__ERROR_MAP(HTTP__DESCRIBE_REASON)
#undef HTTP__DESCRIBE_REASON
  return json_pack("{s:s, s:{s:{s:{s:s}}}}", "description", reason, "content", JSON, "schema", "$ref",
                   v2 ? "#/components/schemas/V2Error" : "#/components/schemas/Error");
}

/* Each piece is checked: json_object_set_new and json_array_append_new free the value
 * they are given when they fail (out of memory), and a document with a part left out
 * must not be served as the description. NULL when memory ran out. */
static json_t *operation(const endpoint *e) {
  json_t *params = json_array(), *responses = json_object();
  bool ok = params && responses;
  for (int i = 0; ok && i < MAX_PARAMS && e->params[i].name; i++) {
    const param *p = &e->params[i];
    ok = json_array_append_new(params, json_pack("{s:s, s:s, s:s, s:b, s:o}", "in", p->in, "name", p->name,
                                                 "description", p->text, "required", p->required, "schema",
                                                 schema_of(p->type))) == 0;
  }
  char code[8];
  snprintf(code, sizeof code, "%d", e->success);
  ok = ok && json_object_set_new(responses, code,
                                 json_pack("{s:s, s:{s:{s:{s:s}}}}", "description", "Success", "content", e->answer,
                                           "schema", "type", strcmp(e->answer, JSON) == 0 ? "object" : "string")) == 0;
  if (e->also) {
    snprintf(code, sizeof code, "%d", e->also);
    ok = ok && json_object_set_new(responses, code,
                                   json_pack("{s:s, s:{s:{s:{s:s}}}}", "description", "Accepted", "content", JSON,
                                             "schema", "type", "object")) == 0;
  }
  bool v2 = strncmp(e->path, "/v2", 3) == 0;
  for (int i = 0; ok && i < MAX_ERRORS && e->errors[i]; i++) {
    snprintf(code, sizeof code, "%d", e->errors[i]);
    ok = json_object_set_new(responses, code, error_response(e->errors[i], v2)) == 0;
  }
  if (!ok) {
    json_decref(params);
    json_decref(responses);
    return NULL;
  }
  json_t *op = json_pack("{s:s, s:s, s:o, s:o}", "description", e->text, "operationId", e->id, "parameters", params,
                         "responses", responses); /* on failure, json_pack releases both */
  if (op && e->body &&
      json_object_set_new(op, "requestBody",
                          json_pack("{s:b, s:{s:{s:{s:s, s:s}}}}", "required", true, "content", e->body, "schema",
                                    "type", "string", "format", "binary")) != 0) {
    json_decref(op);
    op = NULL;
  }
  return op;
}

json_t *http__describe_document(unsigned apis, bool model_api) {
  json_t *paths = json_object();
  for (size_t i = 0; paths && i < CORE_ARRAY_LEN(endpoints); i++) {
    const endpoint *e = &endpoints[i];
    if (!(apis & (1u << e->api)) || (e->model_api && !model_api)) continue;
    json_t *item = json_object_get(paths, e->path);
    if (!item && json_object_set_new(paths, e->path, item = json_object()) != 0) item = NULL; /* freed */
    /* a listener of several APIs: one "/" */
    if (!item || json_object_set_new(item, e->method, operation(e)) != 0) {
      json_decref(paths);
      return NULL;
    }
  }
  json_t *error = json_pack(
      "{s:s, s:[sss], s:{s:{s:s}, s:{s:s}, s:{s:s}}}", "type", "object", "required", "code", "type", "message",
      "properties", "code", "type", "integer", "type", "type", "string", "message", "type", "string");
  json_t *v2_error =
      json_pack("{s:s, s:[s], s:{s:{s:s}}}", "type", "object", "required", "error", "properties", "error", "type", "string");
  return json_pack("{s:s, s:{s:s, s:s, s:s}, s:o, s:{s:{s:o, s:o}}}", "openapi", "3.0.1", "info", "title", "inferd APIs",
                   "description", "inferd: a CPU model-inference server speaking TorchServe's APIs and KServe v2",
                   "version", INFERD_VERSION_TEXT, "paths", paths, "components", "schemas", "Error", error, "V2Error",
                   v2_error);
}

void http__describe(h2o_req_t *req, unsigned apis, bool model_api) {
  json_t *doc = http__describe_document(apis, model_api);
  char *text = doc ? json_dumps(doc, JSON_INDENT(2)) : NULL;
  json_decref(doc);
  if (!text) {
    http__send_error(req, HTTP__E_UNAVAILABLE, "out of memory for the API description");
    return;
  }
  size_t len = strlen(text);
  char *body = h2o_mem_alloc_pool(&req->pool, len + 1);
  memcpy(body, text, len);
  body[len++] = '\n';
  free(text);
  http__send_json(req, 200, body, len);
}
