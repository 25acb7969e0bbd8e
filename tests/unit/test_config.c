/*
 * test_config.c - src/config: the config.properties reader, the command line, the
 * defaults and the structured values (addresses, load_models, models={...},
 * cpu_launcher_args), through the public header only.
 *
 * Each test parses text with config_parse_text (or a file written to a temporary
 * directory for config_load) and checks fields, warnings and error messages. Error
 * tests check the code and that the message names the line and the key. Assertions
 * print both values on failure (cmocka's assert_*_equal, assert_string_equal).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"

/* ==== helpers ============================================================================ */

static config_server parse_ok(const char *text) {
  config_server cfg;
  config_defaults(&cfg);
  inferd_status st = {0};
  inferd_code rc = config_parse_text(&cfg, text, strlen(text), "test.properties", &st);
  if (rc != INFERD_OK) fail_msg("parse failed: %s", st.message);
  rc = config_finish(&cfg, &st);
  if (rc != INFERD_OK) fail_msg("finish failed: %s", st.message);
  return cfg;
}

/* Parses text that must fail; checks the code and that the message has every `want`. */
static void parse_fails(const char *text, inferd_code code, const char *want1, const char *want2) {
  config_server cfg;
  config_defaults(&cfg);
  inferd_status st = {0};
  inferd_code rc = config_parse_text(&cfg, text, strlen(text), "test.properties", &st);
  if (rc == INFERD_OK) rc = config_finish(&cfg, &st);
  if (rc == INFERD_OK) fail_msg("expected failure for <<%s>>", text);
  assert_int_equal(rc, code);
  if (want1 && !strstr(st.message, want1)) fail_msg("message '%s' lacks '%s'", st.message, want1);
  if (want2 && !strstr(st.message, want2)) fail_msg("message '%s' lacks '%s'", st.message, want2);
  assert_null(strchr(st.message, '\n'));
  config_free(&cfg);
}

static bool has_warning(const config_server *cfg, const char *a, const char *b) {
  for (int i = 0; i < cfg->warning_count; i++)
    if (strstr(cfg->warnings[i], a) && (!b || strstr(cfg->warnings[i], b))) return true;
  return false;
}

static void print_warnings(const config_server *cfg) {
  for (int i = 0; i < cfg->warning_count; i++) print_message("warning: %s\n", cfg->warnings[i]);
}

/* ==== defaults ============================================================================= */

static void defaults_are_torchserve_s(void **state) {
  config_server cfg;
  config_defaults(&cfg);
  assert_string_equal(cfg.inference_address.scheme, "http");
  assert_string_equal(cfg.inference_address.host, "127.0.0.1");
  assert_int_equal(cfg.inference_address.port, 8080);
  assert_string_equal(cfg.management_address.host, "127.0.0.1");
  assert_int_equal(cfg.management_address.port, 8081);
  assert_int_equal(cfg.metrics_address.port, 8082);
  assert_false(cfg.jpeg_dct_scaling); /* JPEGs decoded as PIL decodes them */
  assert_null(cfg.model_store);
  assert_int_equal(cfg.load_models.count, 0);
  assert_false(cfg.load_models.all);
  assert_int_equal(cfg.models.count, 0);
  assert_int_equal(cfg.default_workers_per_model, 0);
  assert_int_equal(cfg.job_queue_size, 100);
  assert_int_equal(cfg.number_of_netty_threads, 0);
  assert_false(cfg.cpu_launcher_enable);
  assert_int_equal(cfg.cpu_launcher_args.node_id, -1);
  assert_int_equal(cfg.max_request_size, 6553500);
  assert_int_equal(cfg.max_response_size, 6553500);
  assert_false(cfg.disable_token_authorization);
  assert_true(cfg.token_expiration_min == 60); /* TorchServe's default */
  assert_false(cfg.enable_model_api);
  assert_int_equal(cfg.default_response_timeout, 120);
  assert_int_equal(cfg.batch_size, 1);
  assert_int_equal(cfg.max_batch_delay, 100);
  assert_false(cfg.foreground || cfg.start || cfg.stop || cfg.help);
  assert_int_equal(cfg.warning_count, 0);
  config_free(&cfg);
}

static void help_lists_every_key_with_default(void **state) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  config_help(f);
  fclose(f);
  static const char *const want[] = {
      "inference_address", "http://127.0.0.1:8080", "management_address", "http://127.0.0.1:8081",
      "metrics_address", "http://127.0.0.1:8082", "model_store, --model-store DIR", "load_models, --models",
      "models", "default_workers_per_model", "job_queue_size", "default: 100", "number_of_netty_threads",
      "cpu_launcher_enable", "cpu_launcher_args", "max_request_size", "default: 6553500", "max_response_size",
      "disable_token_authorization, --disable-token-auth", "enable_model_api, --enable-model-api",
      "default_response_timeout", "default: 120", "token_expiration_min", "default: 60", "batch_size", "max_batch_delay", "--ts-config FILE",
      "--foreground", "--start", "--stop", "vmargs", "--ncs", "--log-config FILE"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    if (!strstr(text, want[i])) fail_msg("help lacks '%s':\n%s", want[i], text);
  free(text);
}

/* ==== the file from issue 3 =============================================================== */

static void issue_3_file(void **state) {
  const char *text =
      "model_store=model_store\n"
      "load_models=resnet-152.mar\n"
      "models={\"resnet-152\": {\"1.0\": {\"marName\": \"resnet-152.mar\", \"batchSize\": 8, \"maxBatchDelay\": 100, "
      "\"responseTimeout\": 200}}}\n"
      "default_workers_per_model=2\n"
      "job_queue_size=100\n"
      "number_of_netty_threads=4\n";
  config_server cfg = parse_ok(text);
  print_warnings(&cfg);
  assert_int_equal(cfg.warning_count, 0);
  assert_string_equal(cfg.model_store, "model_store");
  assert_false(cfg.load_models.all);
  assert_int_equal(cfg.load_models.count, 1);
  assert_null(cfg.load_models.items[0].name);
  assert_string_equal(cfg.load_models.items[0].path, "resnet-152.mar");
  assert_int_equal(cfg.models.count, 1);
  const config_model *m = config_find_model(&cfg, "resnet-152", NULL);
  assert_non_null(m);
  assert_ptr_equal(m, config_find_model(&cfg, "resnet-152", "1.0"));
  assert_null(config_find_model(&cfg, "resnet-152", "2.0"));
  assert_string_equal(m->name, "resnet-152");
  assert_string_equal(m->version, "1.0");
  assert_string_equal(m->mar_name, "resnet-152.mar");
  assert_int_equal(m->batch_size, 8);
  assert_int_equal(m->max_batch_delay_ms, 100);
  assert_int_equal(m->response_timeout_s, 200);
  assert_int_equal(m->min_workers, 2); /* from default_workers_per_model, set after models= */
  assert_int_equal(m->max_workers, 2);
  assert_int_equal(m->precision, -1); /* not given: the server runs fp32 */
  assert_int_equal(cfg.default_workers_per_model, 2);
  assert_int_equal(cfg.job_queue_size, 100);
  assert_int_equal(cfg.number_of_netty_threads, 4);
  assert_int_equal(cfg.inference_address.port, 8080); /* untouched keys keep defaults */
  config_free(&cfg);
}

/* TorchServe's documented multi-line form, with defaultVersion and two models. */
static void models_continued_over_lines(void **state) {
  const char *text = "models={\\\n"
                     "  \"noop\": {\\\n"
                     "    \"1.0\": {\\\n"
                     "        \"defaultVersion\": true,\\\n"
                     "        \"marName\": \"noop.mar\",\\\n"
                     "        \"minWorkers\": 1,\\\n"
                     "        \"maxWorkers\": 1,\\\n"
                     "        \"batchSize\": 4,\\\n"
                     "        \"maxBatchDelay\": 100,\\\n"
                     "        \"responseTimeout\": 120\\\n"
                     "    },\\\n"
                     "    \"2.0\": {\"batchSize\": \"16\"}\\\n"
                     "  },\\\n"
                     "  \"vgg16\": {\\\n"
                     "    \"1.0\": {\"minWorkers\": 3}\\\n"
                     "  }\\\n"
                     "}\n"
                     "batch_size=2\n"
                     "default_workers_per_model=1\n";
  config_server cfg = parse_ok(text);
  print_warnings(&cfg);
  assert_int_equal(cfg.warning_count, 0);
  assert_int_equal(cfg.models.count, 3);
  const config_model *noop = config_find_model(&cfg, "noop", NULL);
  assert_non_null(noop);
  assert_string_equal(noop->version, "1.0");
  assert_true(noop->default_version);
  assert_int_equal(noop->batch_size, 4);
  const config_model *noop2 = config_find_model(&cfg, "noop", "2.0");
  assert_non_null(noop2);
  assert_int_equal(noop2->batch_size, 16);           /* a numeric string, as Gson's getAsInt takes */
  assert_int_equal(noop2->max_batch_delay_ms, 100);  /* max_batch_delay's default */
  assert_int_equal(noop2->response_timeout_s, 120);
  assert_null(noop2->mar_name);
  const config_model *vgg = config_find_model(&cfg, "vgg16", NULL); /* the only version */
  assert_non_null(vgg);
  assert_int_equal(vgg->batch_size, 2); /* batch_size key */
  assert_int_equal(vgg->min_workers, 3);
  assert_int_equal(vgg->max_workers, 3); /* raised to minWorkers */
  config_free(&cfg);
}

/* ==== properties syntax ======================================================================= */

static void properties_syntax(void **state) {
  const char *text = "\xEF\xBB\xBF# a comment\n"
                     "! another comment \\\n"
                     "   \n"
                     "  job_queue_size : 7  \r\n"
                     "model_store  /srv/models\\ store\r"
                     "number_of_netty_threads=\\\n"
                     "     3\n"
                     "cpu_launcher_args=--use_logical_core \\\n"
                     "    --node_id 1\n"
                     "load_models = a\\u003db.mar, c.mar\n"
                     "inference_address=http://0.0.0.0:9090/\n";
  config_server cfg = parse_ok(text);
  print_warnings(&cfg);
  assert_int_equal(cfg.job_queue_size, 7); /* blanks around ':' and trailing blanks */
  assert_string_equal(cfg.model_store, "/srv/models store");
  assert_int_equal(cfg.number_of_netty_threads, 3);
  assert_true(cfg.cpu_launcher_args.use_logical_core);
  assert_int_equal(cfg.cpu_launcher_args.node_id, 1);
  assert_int_equal(cfg.load_models.count, 2);
  assert_string_equal(cfg.load_models.items[0].name, "a"); /* \u003d is '=' */
  assert_string_equal(cfg.load_models.items[0].path, "b.mar");
  assert_null(cfg.load_models.items[1].name);
  assert_string_equal(cfg.load_models.items[1].path, "c.mar");
  assert_string_equal(cfg.inference_address.host, "0.0.0.0");
  assert_int_equal(cfg.inference_address.port, 9090);
  /* "key==v": the first '=' separates, the second belongs to the value (Java) */
  config_free(&cfg);
  parse_fails("management_address==http://10.0.0.1:1\n", INFERD_INVALID_ARG, "test.properties:1:",
              "management_address");
  /* A line that is only a backslash continues into nothing: the next line starts afresh,
   * so a comment there is a comment (java.util.Properties since JDK 9), not a key. */
  cfg = parse_ok("  \\\n# job_queue_size=5\n  \\\n  job_queue_size=6\n");
  assert_int_equal(cfg.job_queue_size, 6);
  assert_int_equal(cfg.warning_count, 0);
  config_free(&cfg);
}

static void escapes_and_unicode(void **state) {
  config_server cfg = parse_ok("model_store=caf\\u00e9\\t\\\\x\\:y\\=z\\ \\uD83D\\uDE00\n");
  assert_string_equal(cfg.model_store, "caf\xC3\xA9\t\\x:y=z \xF0\x9F\x98\x80");
  config_free(&cfg);
  parse_fails("model_store=a\n\nmodel_store=\\u12\n", INFERD_INVALID_ARG, "test.properties:3:", "\\uXXXX");
  parse_fails("model_store=\\uD800x\n", INFERD_INVALID_ARG, "test.properties:1:", "surrogate");
  parse_fails("model_store=\\u0000\n", INFERD_INVALID_ARG, "test.properties:1:", "NUL");
  static const char with_nul[] = "job_queue_size=1\nmodel_store=a\0b\n";
  config_server c2;
  config_defaults(&c2);
  inferd_status st;
  assert_int_equal(config_parse_text(&c2, with_nul, sizeof with_nul - 1, "t", &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "t:2:"));
  config_free(&c2);
}

/* ==== warnings ================================================================================ */

/* TorchServe's TLS keys (configuration.md, "Enable SSL"): the PEM pair is read, the Java
 * KeyStore and the KServe envelope are TorchServe keys, warned about with the reason, not
 * "unknown key". */
static void torchserve_tls_keys_say_why(void **state) {
  config_server cfg = parse_ok("certificate_file=/etc/ts/cert.pem\n"
                               "private_key_file=/etc/ts/key.pem\n"
                               "keystore=keystore.p12\n"
                               "service_envelope=kservev2\n");
  print_warnings(&cfg);
  assert_string_equal(cfg.certificate_file, "/etc/ts/cert.pem");
  assert_string_equal(cfg.private_key_file, "/etc/ts/key.pem");
  assert_true(has_warning(&cfg, "'keystore' is a TorchServe key inferd does not use", "certificate_file"));
  assert_true(has_warning(&cfg, "'service_envelope' is a TorchServe key inferd does not use", "/v2"));
  assert_int_equal(cfg.warning_count, 2);
  config_free(&cfg);
  /* so are the metrics, plugin and IPEX keys of later TorchServe releases */
  cfg = parse_ok("disable_system_metrics=true\nsystem_metrics_cmd=x\nmetrics_config=m.yaml\nplugins_path=/p\n"
                 "ipex_enable=true\nuse_env_allowed_urls=false\n");
  print_warnings(&cfg);
  assert_int_equal(cfg.warning_count, 6);
  for (int i = 0; i < cfg.warning_count; i++)
    assert_non_null(strstr(cfg.warnings[i], "TorchServe key inferd does not use"));
  config_free(&cfg);
}

static void unknown_and_ignored_keys_warn(void **state) {
  config_server cfg = parse_ok("job_queue_size=5\n"
                               "frobnicate=1\n"
                               "vmargs=-Xmx1g\n"
                               "disable_token_auth=true\n"
                               "job_queue_size=6\n"
                               "models={\"m\": {\"1.0\": {\"deviceType\": \"cpu\"}}}\n"
                               "cpu_launcher_args=--enable_jemalloc --log_path /tmp --ninstances 2 stray\n");
  print_warnings(&cfg);
  assert_true(has_warning(&cfg, "test.properties:2:", "unknown key 'frobnicate'"));
  assert_true(has_warning(&cfg, "test.properties:3:", "'vmargs' is a TorchServe key inferd does not use"));
  assert_true(has_warning(&cfg, "test.properties:4:", "did you mean 'disable_token_authorization'"));
  assert_true(has_warning(&cfg, "test.properties:5:", "line 1's value is replaced"));
  assert_true(has_warning(&cfg, "test.properties:6:", "unknown field 'deviceType'"));
  assert_true(has_warning(&cfg, "'--enable_jemalloc' is not used", NULL));
  assert_true(has_warning(&cfg, "'--log_path /tmp' is not used", NULL));
  assert_true(has_warning(&cfg, "'stray' is not an option", NULL));
  assert_true(has_warning(&cfg, "cpu_launcher_args is not used: cpu_launcher_enable is false", NULL));
  assert_int_equal(cfg.warning_count, 9);
  assert_int_equal(cfg.job_queue_size, 6);
  assert_false(cfg.disable_token_authorization);
  assert_int_equal(cfg.cpu_launcher_args.ninstances, 2);
  config_free(&cfg);
}

/* allowed_urls: TorchServe's default lets http(s) and file urls through in any case; an
 * item must match the whole url; items are comma-separated; one that is no regular
 * expression fails the parse, naming the key and the item, and keeps the old value. */
static void allowed_urls(void **state) {
  config_server cfg = parse_ok("");
  assert_string_equal(cfg.allowed_urls, "file://.*|http(s)?://.*");
  assert_true(config_url_allowed(cfg.allowed_urls, "https://torchserve.pytorch.org/mar_files/squeezenet1_1.mar"));
  assert_true(config_url_allowed(cfg.allowed_urls, "HTTP://host/m.mar"));
  assert_false(config_url_allowed(cfg.allowed_urls, "ftp://host/m.mar"));
  assert_false(config_url_allowed(cfg.allowed_urls, "s3://bucket/m.mar"));
  config_free(&cfg);
  /* a backslash is the file's escape character, as in Java's: \\. in the file is \. */
  cfg = parse_ok("allowed_urls=https://models\\\\.example/.*,http://127\\\\.0\\\\.0\\\\.1:[0-9]+/ok/.*\n");
  assert_string_equal(cfg.allowed_urls, "https://models\\.example/.*,http://127\\.0\\.0\\.1:[0-9]+/ok/.*");
  assert_true(config_url_allowed(cfg.allowed_urls, "https://models.example/a.mar"));
  assert_true(config_url_allowed(cfg.allowed_urls, "http://127.0.0.1:8000/ok/a.mar"));
  assert_false(config_url_allowed(cfg.allowed_urls, "https://modelsXexample/a.mar"));
  assert_false(config_url_allowed(cfg.allowed_urls, "http://127.0.0.1:8000/other/a.mar"));
  assert_false(config_url_allowed(cfg.allowed_urls, "xhttps://models.example/a.mar")); /* the whole url */
  assert_false(config_url_allowed(cfg.allowed_urls, "https://models.example")); /* no '/' after the host */
  config_free(&cfg);
  assert_false(config_url_allowed(NULL, "https://models.example/a.mar"));
  cfg = parse_ok("allowed_urls=\n"); /* empty: nothing may be downloaded */
  assert_string_equal(cfg.allowed_urls, "");
  assert_false(config_url_allowed(cfg.allowed_urls, "https://models.example/a.mar"));
  config_free(&cfg);
  parse_fails("allowed_urls=http://a/.*,(unclosed\n", INFERD_INVALID_ARG, "allowed_urls", "'(unclosed'");
  /* repetitions that glibc's regcomp would expand for seconds and gigabytes */
  parse_fails("allowed_urls=((a{1000}){1000}){1000}\n", INFERD_INVALID_ARG, "allowed_urls", "65536 parts");
  parse_fails("allowed_urls=(((((((((((((((((((a)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+\n", INFERD_INVALID_ARG,
              "allowed_urls", "65536 parts");
  parse_fails("allowed_urls=([]{(]{300}){300}\n", INFERD_INVALID_ARG, "allowed_urls", "65536 parts");
  parse_fails("allowed_urls=([[:alpha:]]{300}){300}\n", INFERD_INVALID_ARG, "allowed_urls", "65536 parts");
  /* a lone ')' would end the group the item is wrapped in: x)|(.* would match any url */
  parse_fails("allowed_urls=x)|(.*\n", INFERD_INVALID_ARG, "allowed_urls", "closes no '('");
  parse_fails("allowed_urls=a)+++++++++++++++++++++++++\n", INFERD_INVALID_ARG, "allowed_urls", "closes no '('");
  cfg = parse_ok("allowed_urls=(a{255}){255},(b+)+x{9}[]{]{9}\n");
  config_free(&cfg);
  /* commas separate items, as TorchServe splits the key, so a count is {n} only */
  cfg = parse_ok("allowed_urls=http://h:[0-9]{4}/(ab|ba){2}\n");
  assert_true(config_url_allowed(cfg.allowed_urls, "http://h:8080/abba"));
  assert_false(config_url_allowed(cfg.allowed_urls, "http://h:80/abba"));
  config_free(&cfg);
}

static void warnings_are_bounded(void **state) {
  size_t n = 1000;
  char *text = malloc(n * 16), *p = text;
  for (size_t i = 0; i < n; i++) p += sprintf(p, "zz%zu=1\n", i);
  config_server cfg = parse_ok(text);
  assert_int_equal(cfg.warning_count, 201);
  assert_non_null(strstr(cfg.warnings[200], "more warnings"));
  config_free(&cfg);
  free(text);
}

/* ==== errors ================================================================================== */

static void bad_values_name_key_and_line(void **state) {
  parse_fails("# x\njob_queue_size=abc\n", INFERD_INVALID_ARG, "test.properties:2: job_queue_size:", "'abc'");
  parse_fails("job_queue_size=0\n", INFERD_INVALID_ARG, "job_queue_size", "1..10000000");
  parse_fails("job_queue_size=99999999999999999999999\n", INFERD_INVALID_ARG, "job_queue_size", NULL);
  parse_fails("job_queue_size=18446744073709551617\n", INFERD_INVALID_ARG, "job_queue_size", NULL); /* 2^64 + 1 */
  parse_fails("models={\"m\": {\"1.0\": {\"batchSize\": \"18446744073709551624\"}}}\n", INFERD_INVALID_ARG,
              "batchSize", NULL);
  parse_fails("job_queue_size=1.5\n", INFERD_INVALID_ARG, "job_queue_size", NULL);
  parse_fails("batch_size=1025\n", INFERD_INVALID_ARG, "batch_size", "1..1024");
  parse_fails("max_request_size=-1\n", INFERD_INVALID_ARG, "max_request_size", NULL);
  parse_fails("\n\ncpu_launcher_enable=yes\n", INFERD_INVALID_ARG, "test.properties:3: cpu_launcher_enable",
              "true or false");
  parse_fails("inference_address=ftp://x:1\n", INFERD_INVALID_ARG, "inference_address", "http");
  parse_fails("inference_address=http://:8080\n", INFERD_INVALID_ARG, "inference_address", "no host");
  parse_fails("inference_address=http://h:65536\n", INFERD_INVALID_ARG, "inference_address", "port");
  parse_fails("inference_address=http://h:80/x\n", INFERD_INVALID_ARG, "inference_address", "unexpected");
  parse_fails("inference_address=http://[::1\n", INFERD_INVALID_ARG, "inference_address", "IPv6");
  parse_fails("load_models=all,b.mar\n", INFERD_INVALID_ARG, "load_models", "'all'");
  parse_fails("load_models=m=\n", INFERD_INVALID_ARG, "load_models", "no file");
  parse_fails("cpu_launcher_args=--node_id\n", INFERD_INVALID_ARG, "cpu_launcher_args", "--node_id");
  parse_fails("cpu_launcher_args=--node_id=-1\n", INFERD_INVALID_ARG, "cpu_launcher_args", "0..4095");
  parse_fails("cpu_launcher_args=--use_logical_core=1\n", INFERD_INVALID_ARG, "cpu_launcher_args", "no value");
  parse_fails("cpu_launcher_args=--ninstances 0\n", INFERD_INVALID_ARG, "cpu_launcher_args", "1..4096");
  parse_fails("cpu_launcher_enable=\n", INFERD_INVALID_ARG, "cpu_launcher_enable", "true or false");
  const char *bad_minutes[] = {"0", "-5", "abc", "", "30min", "NaN", "Infinity", "0x10", "1e400", "525601"};
  for (size_t i = 0; i < sizeof bad_minutes / sizeof *bad_minutes; i++) {
    char text[64];
    snprintf(text, sizeof text, "\ntoken_expiration_min=%s\n", bad_minutes[i]);
    parse_fails(text, INFERD_INVALID_ARG, "test.properties:2: token_expiration_min:", "expected a number above 0");
  }
}

/* token_expiration_min: TorchServe reads it as a Double (minutes, fractions allowed). */
/* $$NAME$$ in a value is the environment variable NAME, as TorchServe's
 * ConfigManager.resolveEnvVarVals does for every value of the file; an unset one is an
 * error naming it. */
static void environment_in_values(void **state) {
  setenv("INFERD_TEST_PORT", "8123", 1);
  setenv("INFERD_TEST_DIR", "/srv/store", 1);
  unsetenv("INFERD_TEST_UNSET");
  config_server cfg = parse_ok("inference_address=http://127.0.0.1:$$INFERD_TEST_PORT$$\n"
                               "model_store=$$INFERD_TEST_DIR$$/$$INFERD_TEST_PORT$$\n"
                               "load_models=a$$b.onnx\n");
  assert_string_equal(cfg.inference_address.host, "127.0.0.1");
  assert_int_equal(cfg.inference_address.port, 8123);
  assert_string_equal(cfg.model_store, "/srv/store/8123");
  assert_int_equal(cfg.load_models.count, 1);
  assert_string_equal(cfg.load_models.items[0].path, "a$$b.onnx"); /* no closing $$: kept */
  config_free(&cfg);
  /* a one-character name is no name (TorchServe's pattern wants two); "$$$" starts one a
   * character later */
  cfg = parse_ok("model_store=/p$$X$$/$$$INFERD_TEST_DIR$$\n");
  assert_string_equal(cfg.model_store, "/p$$X$$/$/srv/store");
  config_free(&cfg);
  parse_fails("\nmodel_store=$$INFERD_TEST_UNSET$$\n", INFERD_INVALID_ARG, "test.properties:2: model_store",
              "INFERD_TEST_UNSET");
  unsetenv("INFERD_TEST_PORT");
  unsetenv("INFERD_TEST_DIR");
  (void)state;
}

static void token_expiration_minutes(void **state) {
  const struct {
    const char *text;
    double minutes;
  } good[] = {{"30", 30}, {" 0.5 ", 0.5}, {"1e2", 100}, {"+15", 15}, {"525600", 525600}};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    char text[64];
    snprintf(text, sizeof text, "token_expiration_min=%s\n", good[i].text);
    config_server cfg = parse_ok(text);
    if (cfg.token_expiration_min != good[i].minutes)
      fail_msg("token_expiration_min=%s read as %g, want %g", good[i].text, cfg.token_expiration_min, good[i].minutes);
    assert_int_equal(cfg.warning_count, 0);
    char *out = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&out, &size);
    config_write(&cfg, f);
    fclose(f);
    config_server back = parse_ok(out);
    assert_true(back.token_expiration_min == cfg.token_expiration_min);
    free(out);
    config_free(&back);
    config_free(&cfg);
  }
  /* a bad value keeps the one before */
  config_server cfg;
  config_defaults(&cfg);
  inferd_status st;
  const char *good_text = "token_expiration_min=45\n", *bad_text = "token_expiration_min=-1\n";
  assert_int_equal(config_parse_text(&cfg, good_text, strlen(good_text), "a", &st), INFERD_OK);
  assert_int_equal(config_parse_text(&cfg, bad_text, strlen(bad_text), "b", &st), INFERD_INVALID_ARG);
  assert_true(cfg.token_expiration_min == 45);
  config_free(&cfg);
  (void)state;
}

static void models_errors(void **state) {
  /* the JSON error is on the 4th natural line of a value continued over five */
  parse_fails("job_queue_size=1\n"
              "models={\\\n"
              "  \"m\": {\\\n"
              "    \"1.0\": {\"batchSize\": 8,\\\n"
              "              \"maxBatchDelay\" 5}\\\n"
              "  }\\\n"
              "}\n",
              INFERD_INVALID_ARG, "test.properties:5: models: invalid JSON", "':' expected");
  parse_fails("models={\"m\": {\"1.0\": {}}, \"m\": {\"2.0\": {}}}\n", INFERD_INVALID_ARG, "test.properties:1: models",
              "duplicate");
  parse_fails("models=[1]\n", INFERD_INVALID_ARG, "models", "JSON object");
  parse_fails("models={\"m\": 1}\n", INFERD_INVALID_ARG, "models", "object of versions");
  parse_fails("models={\"m\": {}}\n", INFERD_INVALID_ARG, "models", "object of versions");
  parse_fails("models={\"../m\": {\"1.0\": {}}}\n", INFERD_INVALID_ARG, "models", "not a valid model name");
  parse_fails("models={\"m\": {\"1/0\": {}}}\n", INFERD_INVALID_ARG, "models", "not a valid version");
  parse_fails("models={\"m\": {\"1.0\": 3}}\n", INFERD_INVALID_ARG, "models", "expected an object");
  parse_fails("models={\"m\": {\"1.0\": {\"batchSize\": 0}}}\n", INFERD_INVALID_ARG, "batchSize", "1..1024");
  parse_fails("models={\"m\": {\"1.0\": {\"batchSize\": 1025}}}\n", INFERD_INVALID_ARG, "batchSize", "1..1024");
  config_server edge = parse_ok("models={\"m\": {\"1.0\": {\"batchSize\": 1024, \"maxBatchDelay\": 600000}}}\n");
  assert_int_equal(edge.models.items[0].batch_size, 1024);
  assert_int_equal(edge.models.items[0].max_batch_delay_ms, 600000);
  config_free(&edge);
  parse_fails("models={\"m\": {\"1.0\": {\"batchSize\": 2.5}}}\n", INFERD_INVALID_ARG, "batchSize", NULL);
  parse_fails("models={\"m\": {\"1.0\": {\"batchSize\": \"8x\"}}}\n", INFERD_INVALID_ARG, "batchSize", NULL);
  parse_fails("models={\"m\": {\"1.0\": {\"responseTimeout\": true}}}\n", INFERD_INVALID_ARG, "responseTimeout", NULL);
  parse_fails("models={\"m\": {\"1.0\": {\"marName\": 5}}}\n", INFERD_INVALID_ARG, "marName", NULL);
  parse_fails("models={\"m\": {\"1.0\": {\"precision\": \"fp16\"}}}\n", INFERD_INVALID_ARG,
              "precision must be \"fp32\" or \"bf16\"", NULL);
  parse_fails("models={\"m\": {\"1.0\": {\"precision\": 16}}}\n", INFERD_INVALID_ARG, "precision", NULL);
  config_server bf16 =
      parse_ok("models={\"m\": {\"1.0\": {\"precision\": \"bf16\"}, \"2.0\": {\"precision\": \"fp32\"}}}\n");
  assert_int_equal(config_find_model(&bf16, "m", "1.0")->precision, INFERD_PRECISION_BF16);
  assert_int_equal(config_find_model(&bf16, "m", "2.0")->precision, INFERD_PRECISION_FP32);
  config_free(&bf16);
  parse_fails("models={\"m\": {\"1.0\": {\"defaultVersion\": 1}}}\n", INFERD_INVALID_ARG, "defaultVersion", NULL);
  parse_fails("models={\"m\": {\"1.0\": {\"minWorkers\": 4, \"maxWorkers\": 2}}}\n", INFERD_INVALID_ARG, "minWorkers 4",
              "maxWorkers 2");
  parse_fails("models={\"m\": {\"1.0\": {\"defaultVersion\": true}, \"2.0\": {\"defaultVersion\": true}}}\n",
              INFERD_INVALID_ARG, "two default versions", NULL);
}

/* A failed set leaves the previous value in place (and leaks nothing under ASan). */
static void failed_set_keeps_old_value(void **state) {
  config_server cfg;
  config_defaults(&cfg);
  inferd_status st;
  const char *good = "models={\"m\": {\"1.0\": {\"batchSize\": 3}}}\nload_models=a.mar\n";
  assert_int_equal(config_parse_text(&cfg, good, strlen(good), "t", &st), INFERD_OK);
  const char *bad = "models={\"m\": {\"1.0\": {\"batchSize\": 0}}}\n";
  assert_int_equal(config_parse_text(&cfg, bad, strlen(bad), "t", &st), INFERD_INVALID_ARG);
  const char *bad2 = "load_models=all,x\n";
  assert_int_equal(config_parse_text(&cfg, bad2, strlen(bad2), "t", &st), INFERD_INVALID_ARG);
  assert_int_equal(cfg.models.count, 1);
  assert_int_equal(cfg.models.items[0].batch_size, 3);
  assert_int_equal(cfg.load_models.count, 1);
  config_free(&cfg);
}

/* ==== values ================================================================================= */

static void addresses(void **state) {
  config_server cfg = parse_ok("inference_address=https://[::1]:8443\n"
                               "management_address=localhost\n"
                               "metrics_address=unix:/run/inferd/metrics.sock\n");
  assert_string_equal(cfg.inference_address.scheme, "https");
  assert_string_equal(cfg.inference_address.host, "::1");
  assert_int_equal(cfg.inference_address.port, 8443);
  assert_string_equal(cfg.management_address.scheme, "http");
  assert_string_equal(cfg.management_address.host, "localhost");
  assert_int_equal(cfg.management_address.port, 8081); /* TorchServe's default port for this key */
  assert_string_equal(cfg.metrics_address.scheme, "unix");
  assert_string_equal(cfg.metrics_address.host, "/run/inferd/metrics.sock");
  config_free(&cfg);
  cfg = parse_ok("inference_address=HTTPS://example.com\nmanagement_address=127.0.0.1:0\n");
  assert_int_equal(cfg.inference_address.port, 443);
  assert_int_equal(cfg.management_address.port, 0);
  config_free(&cfg);
  /* Without a port, TorchServe's Connector.parse takes the API's own: inference 80 (https
   * 443), management 8081 (8444), metrics 8082 (8445). One port for all three made
   * inference_address=http://0.0.0.0 and management_address=http://0.0.0.0 one listener
   * serving both APIs on port 80 instead of two on 80 and 8081. */
  cfg = parse_ok("inference_address=http://0.0.0.0\nmanagement_address=http://0.0.0.0\n"
                 "metrics_address=http://0.0.0.0/\n");
  assert_int_equal(cfg.inference_address.port, 80);
  assert_int_equal(cfg.management_address.port, 8081);
  assert_int_equal(cfg.metrics_address.port, 8082);
  config_free(&cfg);
  cfg = parse_ok("inference_address=https://0.0.0.0\nmanagement_address=https://0.0.0.0\n"
                 "metrics_address=https://[::]\n");
  assert_int_equal(cfg.inference_address.port, 443);
  assert_int_equal(cfg.management_address.port, 8444);
  assert_int_equal(cfg.metrics_address.port, 8445);
  config_free(&cfg);
  char path[160]; /* sun_path holds 107 bytes and the NUL */
  snprintf(path, sizeof path, "metrics_address=unix:/%0107d\n", 0);
  parse_fails(path, INFERD_INVALID_ARG, "metrics_address", "1..107 bytes, got 108");
  snprintf(path, sizeof path, "metrics_address=unix:/%0106d\n", 0);
  cfg = parse_ok(path);
  assert_int_equal(strlen(cfg.metrics_address.host), 107);
  config_free(&cfg);
}

static void load_models_forms(void **state) {
  config_server cfg = parse_ok("load_models=ALL\n");
  assert_true(cfg.load_models.all);
  assert_int_equal(cfg.load_models.count, 0);
  config_free(&cfg);
  cfg = parse_ok("load_models=resnet=resnet-152.mar, http://host/x.mar?a=b ,/abs/m.onnx\n");
  assert_int_equal(cfg.load_models.count, 3);
  assert_string_equal(cfg.load_models.items[0].name, "resnet");
  assert_string_equal(cfg.load_models.items[0].path, "resnet-152.mar");
  assert_null(cfg.load_models.items[1].name); /* "http://host/x.mar?a" is no model name */
  assert_string_equal(cfg.load_models.items[1].path, "http://host/x.mar?a=b");
  assert_string_equal(cfg.load_models.items[2].path, "/abs/m.onnx");
  config_free(&cfg);
  cfg = parse_ok("load_models=\n");
  assert_int_equal(cfg.load_models.count, 0);
  assert_null(cfg.load_models.text);
  config_free(&cfg);
  /* empty items are skipped with a warning: TorchServe drops a trailing one */
  cfg = parse_ok("\nload_models=a.mar,, b.mar ,\n");
  assert_int_equal(cfg.load_models.count, 2);
  assert_string_equal(cfg.load_models.items[0].path, "a.mar");
  assert_string_equal(cfg.load_models.items[1].path, "b.mar");
  assert_int_equal(cfg.warning_count, 2);
  assert_true(has_warning(&cfg, "test.properties:2: load_models: empty item in 'a.mar,, b.mar ,'", NULL));
  config_free(&cfg);
  config_defaults(&cfg);
  inferd_status st = {0};
  char *argv[] = {"serve", "--models", "a.mar,"};
  assert_int_equal(config_parse_args(&cfg, 3, argv, &st), INFERD_OK);
  assert_int_equal(cfg.load_models.count, 1);
  assert_true(has_warning(&cfg, "--models: load_models: empty item in 'a.mar,' (skipped)", NULL));
  config_free(&cfg);
}

static void launcher_args(void **state) {
  config_server cfg = parse_ok("cpu_launcher_enable=TRUE\n"
                               "cpu_launcher_args=--use-logical-core --node_id=0 --ninstances 4 "
                               "--ncores_per_instance 2\n");
  assert_true(cfg.cpu_launcher_enable);
  assert_true(cfg.cpu_launcher_args.use_logical_core);
  assert_int_equal(cfg.cpu_launcher_args.node_id, 0);
  assert_int_equal(cfg.cpu_launcher_args.ninstances, 4);
  assert_int_equal(cfg.cpu_launcher_args.ncores_per_instance, 2);
  assert_int_equal(cfg.warning_count, 0);
  config_free(&cfg);
}

static void model_names(void **state) {
  assert_true(config_valid_model_name("resnet-152"));
  assert_true(config_valid_model_name("m_1.0"));
  assert_false(config_valid_model_name(""));
  assert_false(config_valid_model_name("-m"));
  assert_false(config_valid_model_name("a/b"));
  assert_false(config_valid_model_name(".."));
  assert_false(config_valid_model_name("a b"));
  char name[258];
  memset(name, 'a', 256);
  name[256] = '\0';
  assert_false(config_valid_model_name(name)); /* 256 bytes */
  name[255] = '\0';
  assert_true(config_valid_model_name(name));
}

/* ==== command line and config_load ============================================================ */

static void command_line(void **state) {
  char *argv[] = {"serve", "--model-store", "/m", "--models", "a=a.mar", "b.mar", "--disable-token-auth",
                  "--enable-model-api", "--foreground", "--ts-config=x.properties", "-h"};
  config_server cfg;
  config_defaults(&cfg);
  inferd_status st;
  assert_int_equal(config_parse_args(&cfg, (int)(sizeof argv / sizeof *argv), argv, &st), INFERD_OK);
  assert_string_equal(cfg.model_store, "/m");
  assert_int_equal(cfg.load_models.count, 2);
  assert_string_equal(cfg.load_models.items[0].name, "a");
  assert_string_equal(cfg.load_models.items[1].path, "b.mar");
  assert_true(cfg.disable_token_authorization);
  assert_true(cfg.enable_model_api);
  assert_true(cfg.foreground);
  assert_string_equal(cfg.ts_config, "x.properties");
  assert_true(cfg.help);
  config_free(&cfg);

  /* TorchServe's quick start: `torchserve --start --ncs --model-store ... --models ...`;
   * flags inferd ignores warn once each, and those that take a value consume it */
  char *torchserve[] = {"serve", "--start", "--ncs", "--log-config", "log4j2.xml", "--model-store", "/store",
                        "--plugins-path=/plugins", "--workflow-store", "wf", "--no-config-snapshots", "--models",
                        "m.mar", "--foreground"};
  config_defaults(&cfg);
  if (config_parse_args(&cfg, (int)(sizeof torchserve / sizeof *torchserve), torchserve, &st) != INFERD_OK)
    fail_msg("TorchServe's flags refused: %s", st.message);
  print_warnings(&cfg);
  assert_string_equal(cfg.model_store, "/store");
  assert_int_equal(cfg.load_models.count, 1);
  assert_string_equal(cfg.load_models.items[0].path, "m.mar");
  assert_true(cfg.start);
  assert_true(cfg.foreground);
  assert_true(has_warning(&cfg, "'--ncs' is a TorchServe flag inferd does not use", "(ignored)"));
  assert_true(has_warning(&cfg, "'--no-config-snapshots' is a TorchServe flag", NULL));
  assert_true(has_warning(&cfg, "'--log-config' is a TorchServe flag", NULL));
  assert_true(has_warning(&cfg, "'--plugins-path' is a TorchServe flag", NULL));
  assert_true(has_warning(&cfg, "'--workflow-store' is a TorchServe flag", "no workflows"));
  assert_int_equal(cfg.warning_count, 5);
  config_free(&cfg);

  char *dashed[] = {"serve", "--model-store=--odd"}; /* such a value is given with '=' */
  config_defaults(&cfg);
  assert_int_equal(config_parse_args(&cfg, 2, dashed, &st), INFERD_OK);
  assert_string_equal(cfg.model_store, "--odd");
  config_free(&cfg);

  char *all[] = {"serve", "--models", "all", "--start"};
  config_defaults(&cfg);
  assert_int_equal(config_parse_args(&cfg, 4, all, &st), INFERD_OK);
  assert_true(cfg.load_models.all);
  assert_true(cfg.start);
  config_free(&cfg);

  struct {
    int argc;
    char *argv[4];
    const char *want;
  } bad[] = {
      {2, {"serve", "--nope"}, "unknown option '--nope'"},
      {2, {"serve", "stray"}, "unexpected argument 'stray'"},
      {2, {"serve", "--model-store"}, "--model-store needs a value"},
      {3, {"serve", "--models", "--foreground"}, "--models needs a value"},
      {2, {"serve", "--vmargs=1"}, "unknown option '--vmargs'"},
      {2, {"serve", "--foreground=maybe"}, "--foreground: expected true or false"},
      {2, {"serve", "--log-config"}, "--log-config needs a value"},
      {2, {"serve", "--ncs=true"}, "--ncs takes no value"},
      /* another option is not a value: the switch was taken as the model store */
      {3, {"serve", "--model-store", "--disable-token-auth"}, "--model-store needs a value"},
      {3, {"serve", "--log-config", "--enable-model-api"}, "--log-config needs a value"},
      {3, {"serve", "--ts-config", "-h"}, "--ts-config needs a value"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    config_defaults(&cfg);
    assert_int_equal(config_parse_args(&cfg, bad[i].argc, bad[i].argv, &st), INFERD_INVALID_ARG);
    if (!strstr(st.message, bad[i].want)) fail_msg("message '%s' lacks '%s'", st.message, bad[i].want);
    config_free(&cfg);
  }
}

static char tmpdir[64];

static char *write_temp(const char *name, const char *text) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  return path;
}

static int make_tmpdir(void **state) {
  strcpy(tmpdir, "/tmp/inferd_test_config.XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static void load_precedence(void **state) {
  const char *path = write_temp("a.properties", "job_queue_size=7\nmodel_store=from_file\nenable_envvars_config=true\n"
                                                "batch_size=4\n");
  char path_copy[128];
  strcpy(path_copy, path);
  char *argv[] = {"serve", "--ts-config", path_copy, "--model-store", "from_flag", "--start", "--stop"};
  config_server cfg;
  inferd_status st;
  unsetenv("TS_CONFIG_FILE");
  setenv("TS_BATCH_SIZE", "9", 1);
  /* --start with --stop is refused at the end */
  assert_int_equal(config_load(NULL, 7, argv, &cfg, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "--start and --stop"));
  assert_int_equal(config_load(NULL, 5, argv, &cfg, &st), INFERD_OK);
  assert_int_equal(cfg.job_queue_size, 7);             /* file over default */
  assert_string_equal(cfg.model_store, "from_flag");   /* flag over file */
  assert_int_equal(cfg.batch_size, 9);                 /* TS_ variable over file */
  assert_string_equal(cfg.ts_config, path_copy);
  config_free(&cfg);
  unsetenv("TS_BATCH_SIZE");

  /* $TS_CONFIG_FILE wins over --ts-config, as in TorchServe, with a warning */
  const char *env_file = write_temp("e.properties", "job_queue_size=11\n");
  setenv("TS_CONFIG_FILE", env_file, 1);
  assert_int_equal(config_load(NULL, 5, argv, &cfg, &st), INFERD_OK);
  assert_int_equal(cfg.job_queue_size, 11);
  assert_true(has_warning(&cfg, "($TS_CONFIG_FILE), not --ts-config", path_copy));
  config_free(&cfg);
  unsetenv("TS_CONFIG_FILE");

  /* an explicit file wins over --ts-config; a missing file is an error */
  const char *other = write_temp("b.properties", "job_queue_size=8\n");
  char other_copy[128];
  strcpy(other_copy, other);
  assert_int_equal(config_load(other_copy, 3, argv, &cfg, &st), INFERD_OK);
  assert_int_equal(cfg.job_queue_size, 8);
  config_free(&cfg);
  char *missing[] = {"serve", "--ts-config", "/nonexistent/config.properties"};
  assert_int_equal(config_load(NULL, 3, missing, &cfg, &st), INFERD_NOT_FOUND);
  assert_non_null(strstr(st.message, "/nonexistent/config.properties"));

  /* a bad value in the file: the error names file, line and key */
  const char *bad = write_temp("c.properties", "# c\n\njob_queue_size=many\n");
  char bad_copy[128];
  strcpy(bad_copy, bad);
  assert_int_equal(config_load(bad_copy, 1, argv, &cfg, &st), INFERD_INVALID_ARG);
  char want[192];
  snprintf(want, sizeof want, "%s:3: job_queue_size:", bad_copy);
  if (!strstr(st.message, want)) fail_msg("message '%s' lacks '%s'", st.message, want);

  /* --help is answered whatever the file holds */
  char *help[] = {"serve", "--help"};
  assert_int_equal(config_load(bad_copy, 2, help, &cfg, &st), INFERD_OK);
  assert_true(cfg.help);
  config_free(&cfg);

  /* no file anywhere: defaults */
  char cwd[512];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(tmpdir), 0);
  assert_int_equal(config_load(NULL, 1, argv, &cfg, &st), INFERD_OK);
  assert_null(cfg.ts_config);
  assert_int_equal(cfg.job_queue_size, 100);
  config_free(&cfg);
  /* ./config.properties is found, and TS_CONFIG_FILE wins over it */
  write_temp("config.properties", "job_queue_size=11\n");
  assert_int_equal(config_load(NULL, 1, argv, &cfg, &st), INFERD_OK);
  assert_int_equal(cfg.job_queue_size, 11);
  config_free(&cfg);
  setenv("TS_CONFIG_FILE", other_copy, 1);
  assert_int_equal(config_load(NULL, 1, argv, &cfg, &st), INFERD_OK);
  assert_int_equal(cfg.job_queue_size, 8);
  config_free(&cfg);
  unsetenv("TS_CONFIG_FILE");
  assert_int_equal(chdir(cwd), 0);
}

/* With enable_envvars_config, TS_<KEY> sets a key, but token_expiration_min is read
 * from TS_TOKEN_EXPIRATION_TIME_MIN (TorchServe's field name); the worker counts stay
 * within what the scheduler runs (256). */
static void environment_names_and_worker_range(void **state) {
  const char *path = write_temp("env.properties", "enable_envvars_config=true\n");
  char path_copy[128];
  strcpy(path_copy, path);
  char *argv[] = {"serve"};
  config_server cfg;
  inferd_status st;
  setenv("TS_TOKEN_EXPIRATION_TIME_MIN", "7", 1);
  setenv("TS_TOKEN_EXPIRATION_MIN", "9", 1); /* not TorchServe's name: a warning */
  assert_int_equal(config_load(path_copy, 1, argv, &cfg, &st), INFERD_OK);
  assert_true(cfg.token_expiration_min == 7);
  assert_true(has_warning(&cfg, "TS_TOKEN_EXPIRATION_MIN is not read", "TS_TOKEN_EXPIRATION_TIME_MIN"));
  config_free(&cfg);
  unsetenv("TS_TOKEN_EXPIRATION_TIME_MIN");
  unsetenv("TS_TOKEN_EXPIRATION_MIN");
  parse_fails("default_workers_per_model=257\n", INFERD_INVALID_ARG, "default_workers_per_model", "256");
  parse_fails("models={\"m\": {\"1.0\": {\"minWorkers\": 300}}}\n", INFERD_INVALID_ARG, "minWorkers", NULL);
  config_server ok = parse_ok("default_workers_per_model=256\n");
  assert_int_equal(ok.default_workers_per_model, 256);
  config_free(&ok);
  (void)state;
}

/* config_write's output reads back to the same values. */
static void write_round_trip(void **state) {
  const char *text = "model_store= /a path\\\\with=odd:chars #x\n"
                     "load_models=m=m.mar,n.mar\n"
                     "models={\"m\": {\"1.0\": {\"batchSize\": 8,\\n  \"marName\": \"m.mar\"}}}\n"
                     "inference_address=https://[::1]:8443\n"
                     "cpu_launcher_enable=true\n"
                     "cpu_launcher_args=--node_id 1\n"
                     "max_request_size=1000\n"
                     "enable_model_api=true\n";
  config_server a = parse_ok(text); /* models holds an escaped newline */
  print_warnings(&a);
  assert_string_equal(a.model_store, "/a path\\with=odd:chars #x");
  char *out = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&out, &size);
  config_write(&a, f);
  fclose(f);
  config_server b = parse_ok(out);
  assert_string_equal(b.model_store, a.model_store);
  assert_string_equal(b.load_models.text, a.load_models.text);
  assert_string_equal(b.models.json, a.models.json);
  assert_int_equal(b.models.items[0].batch_size, 8);
  assert_string_equal(b.inference_address.host, "::1");
  assert_int_equal(b.inference_address.port, 8443);
  assert_int_equal(b.cpu_launcher_args.node_id, 1);
  assert_true(b.cpu_launcher_enable);
  assert_int_equal(b.max_request_size, 1000);
  assert_true(b.enable_model_api);
  assert_int_equal(b.job_queue_size, 100);
  assert_int_equal(b.warning_count, 0);
  free(out);
  config_free(&a);
  config_free(&b);
}

/* ==== model-config.yaml ================================================================== */

static config_model_yaml yaml_ok(const char *text) {
  config_model_yaml y;
  inferd_status st = {0};
  if (config_model_yaml_parse(text, strlen(text), "model-config.yaml", &y, &st) != INFERD_OK)
    fail_msg("yaml <<%s>> refused: %s", text, st.message);
  return y;
}

static void yaml_fails(const char *text, const char *want1, const char *want2) {
  config_model_yaml y;
  inferd_status st = {0};
  inferd_code rc = config_model_yaml_parse(text, strlen(text), "model-config.yaml", &y, &st);
  if (rc == INFERD_OK) fail_msg("expected yaml <<%s>> to be refused", text);
  assert_int_equal(rc, INFERD_INVALID_ARG);
  if (!strstr(st.message, "model-config.yaml")) fail_msg("message '%s' lacks the file", st.message);
  if (want1 && !strstr(st.message, want1)) fail_msg("message '%s' lacks '%s'", st.message, want1);
  if (want2 && !strstr(st.message, want2)) fail_msg("message '%s' lacks '%s'", st.message, want2);
  assert_null(strchr(st.message, '\n'));
  assert_int_equal(y.values.batch_size, -1); /* a refusal leaves nothing half-read */
}

/* The file TorchServe's examples put in a .mar: the frontend keys, a handler section
 * (nested, with anchors and aliases) and keys for GPUs that inferd does not use. */
static void model_yaml_keys(void **state) {
  (void)state;
  config_model_yaml y = yaml_ok("# TorchServe frontend parameters\n"
                                "minWorkers: 2\n"
                                "maxWorkers: 4\n"
                                "batchSize: 8\n"
                                "maxBatchDelay: 50\n"
                                "responseTimeout: 300\n"
                                "deviceType: \"gpu\"\n"
                                "parallelType: pp\n"
                                "handler:\n"
                                "  defaults: &d {topk: 5, labels: [a, b]}\n"
                                "  again: *d\n"
                                "  nested: [[1, 2], {x: {y: [z]}}]\n"
                                "startupTimeout: 120\n");
  assert_int_equal(y.values.min_workers, 2);
  assert_int_equal(y.values.max_workers, 4);
  assert_int_equal(y.values.batch_size, 8);
  assert_int_equal(y.values.max_batch_delay_ms, 50);
  assert_int_equal(y.values.response_timeout_s, 300);
  assert_string_equal(y.ignored, "deviceType, parallelType, startupTimeout");

  y = yaml_ok("batchSize: !!int 4\n");
  assert_int_equal(y.values.batch_size, 4);
  assert_int_equal(y.values.min_workers, -1);
  assert_int_equal(y.values.precision, -1);
  /* inferd's own key, not listed as ignored */
  y = yaml_ok("precision: bf16\nbatchSize: 2\n");
  assert_int_equal(y.values.precision, INFERD_PRECISION_BF16);
  assert_int_equal(y.values.batch_size, 2);
  assert_string_equal(y.ignored, "");
  y = yaml_ok("precision: \"fp32\"\n");
  assert_int_equal(y.values.precision, INFERD_PRECISION_FP32);
  assert_string_equal(y.ignored, "");
  /* empty files and documents give nothing */
  const char *empty[] = {"", "# only a comment\n", "---\n", "~\n", "--- null\n...\n"};
  for (size_t i = 0; i < sizeof empty / sizeof *empty; i++) {
    y = yaml_ok(empty[i]);
    assert_int_equal(y.values.batch_size, -1);
    assert_int_equal(y.values.max_workers, -1);
  }
  /* flow style, a document marker; 0 is "not given", as TorchServe reads it */
  y = yaml_ok("--- {batchSize: 2, minWorkers: 0, maxWorkers: 0, maxBatchDelay: 0, responseTimeout: 0}\n");
  assert_int_equal(y.values.batch_size, 2);
  assert_int_equal(y.values.min_workers, -1);
  assert_int_equal(y.values.max_workers, -1);
  assert_int_equal(y.values.max_batch_delay_ms, -1);
  assert_int_equal(y.values.response_timeout_s, -1);
  y = yaml_ok("batchSize: 0\n");
  assert_int_equal(y.values.batch_size, -1);

  /* many ignored keys: the list is cut, never overflows */
  char big[4096] = "";
  for (int i = 0; i < 100; i++) snprintf(big + strlen(big), sizeof big - strlen(big), "someKey%02d: %d\n", i, i);
  y = yaml_ok(big);
  assert_true(strlen(y.ignored) < sizeof y.ignored);
  assert_non_null(strstr(y.ignored, "someKey00, someKey01"));
  assert_non_null(strstr(y.ignored, "..."));
}

static void model_yaml_errors(void **state) {
  (void)state;
  yaml_fails("batchSize: eight\n", "line 1", "batchSize: expected an integer in 1..1024, got 'eight'");
  yaml_fails("minWorkers: 1\nbatchSize: \"8\"\n", "line 2", "got '8'");
  yaml_fails("batchSize: -1\n", "1..1024", NULL);
  yaml_fails("batchSize: 1025\n", "1..1024", NULL);
  yaml_fails("maxBatchDelay: -1\n", "maxBatchDelay", NULL);
  yaml_fails("responseTimeout: 99999999999999999999\n", "responseTimeout", NULL);
  yaml_fails("batchSize: 8.5\n", "got '8.5'", NULL);
  yaml_fails("batchSize: [8]\n", "got a mapping or a list", NULL);
  yaml_fails("a: &x 8\nbatchSize: *x\n", "line 2", "got an alias");
  yaml_fails("batchSize: 8\nbatchSize: 4\n", "line 2", "batchSize is given twice");
  yaml_fails("batchSize: 8\nprecision: fp16\n", "line 2", "precision: expected fp32 or bf16, got 'fp16'");
  yaml_fails("precision: bf16\nprecision: fp32\n", "line 2", "precision is given twice");
  yaml_fails("precision: [bf16]\n", "precision", "got a mapping or a list");
  yaml_fails("precision: !!int bf16\n", "precision: expected fp32 or bf16", NULL);
  yaml_fails("maxBatchDelay: 010\n", "got '010'", NULL); /* YAML 1.1: octal 8 */
  yaml_fails("batchSize: +08\n", "got '+08'", NULL);
  yaml_fails("batchSize: 0x10\n", "got '0x10'", NULL);
  yaml_fails("batchSize: 1_0\n", "got '1_0'", NULL);
  yaml_fails("a: b\nc: \xff\xfe\n", "line 2, column 4: invalid YAML", NULL); /* an encoding error's line */
  yaml_fails("- batchSize: 8\n", "line 1", "expected a mapping");
  yaml_fails("just text\n", "expected a mapping", NULL);
  yaml_fails("batchSize: 8\n---\nbatchSize: 4\n", "line 2", "one document");
  yaml_fails("? [a, b]\n: 1\n", "a top-level key must be a name", NULL);
  yaml_fails("batchSize: 8\nminWorkers: 1: 2\n", "line 2", "invalid YAML: mapping values are not allowed");
  yaml_fails("handler: {a: [1, 2}\n", "invalid YAML", NULL);
  yaml_fails("batchSize: \"\\x00\"\n", "got '?'", NULL);
  /* a file above the bound is refused before it is parsed */
  size_t size = CONFIG_MODEL_YAML_MAX_BYTES + 1;
  char *huge = malloc(size);
  assert_non_null(huge);
  memset(huge, '#', size);
  config_model_yaml y;
  inferd_status st = {0};
  assert_int_equal(config_model_yaml_parse(huge, size, "model-config.yaml", &y, &st), INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "above the"));
  free(huge);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(defaults_are_torchserve_s),
      cmocka_unit_test(help_lists_every_key_with_default),
      cmocka_unit_test(issue_3_file),
      cmocka_unit_test(models_continued_over_lines),
      cmocka_unit_test(properties_syntax),
      cmocka_unit_test(escapes_and_unicode),
      cmocka_unit_test(unknown_and_ignored_keys_warn),
      cmocka_unit_test(allowed_urls),
      cmocka_unit_test(torchserve_tls_keys_say_why),
      cmocka_unit_test(warnings_are_bounded),
      cmocka_unit_test(bad_values_name_key_and_line),
      cmocka_unit_test(token_expiration_minutes),
      cmocka_unit_test(models_errors),
      cmocka_unit_test(failed_set_keeps_old_value),
      cmocka_unit_test(addresses),
      cmocka_unit_test(load_models_forms),
      cmocka_unit_test(launcher_args),
      cmocka_unit_test(model_names),
      cmocka_unit_test(command_line),
      cmocka_unit_test(load_precedence),
      cmocka_unit_test(environment_in_values),
      cmocka_unit_test(environment_names_and_worker_range),
      cmocka_unit_test(write_round_trip),
      cmocka_unit_test(model_yaml_keys),
      cmocka_unit_test(model_yaml_errors),
  };
  return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
