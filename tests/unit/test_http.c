/*
 * test_http.c - the HTTP layer without models: the multipart/form-data reader case by
 * case, the JSON escaping of error messages and strings (UTF-8 kept, ill-formed
 * sequences replaced), the JSON arena of the v2 infer parse (no malloc on a repeated
 * [1,3,224,224] request; the keep limit; jansson objects made outside it freed by
 * free(), from this and other threads), and a real server (port 0, two HTTP threads,
 * token auth on) answering raw HTTP/1.1 requests on a socket: /ping, unknown paths,
 * missing keys, wrong methods, oversized bodies, the management list, and the graceful
 * stop; and that a log message stays one line.
 *
 * DESIGN
 * Multipart cases are one table: body, wanted code, wanted content. Server cases send
 * bytes written by hand (no HTTP client library) and check the status line and that
 * error bodies are TorchServe's JSON ({"code", "type", "message"}); the key file goes to
 * a temporary directory. Assertions print what was got.
 *
 * LSan: h2o 2.2 leaks its multithread queues and one pool chunk per thread at exit
 * (http_server.c says which); __lsan_default_suppressions names them so that the
 * sanitizer build's leak check stays meaningful for inferd's own code.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "config/config.h"
#include "http/http.h"
#include "http/http_internal.h"

const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:h2o_multithread_create_queue\nleak:h2o_mem_alloc_recycle\n";
}

/* ==== multipart ========================================================================= */

static void test_boundary(void **state) {
  (void)state;
  static const struct {
    const char *type, *boundary; /* NULL: refused */
  } cases[] = {
      {"multipart/form-data; boundary=abc", "abc"},
      {"Multipart/Form-Data;boundary=\"a b'c\"", "a b'c"},
      {"multipart/form-data; charset=utf-8; boundary=------------------------d74496d66958873e",
       "------------------------d74496d66958873e"},
      {"multipart/form-data", NULL},
      {"multipart/form-data; boundary=", NULL},
      {"multipart/form-data; boundary=\"unterminated", NULL},
      {"multipart/form-data; boundary=\"ends in space \"", NULL},
      {"multipart/form-data; boundary=a; boundary=b", NULL},
      {"multipart/mixed; boundary=abc", NULL},
      {"application/octet-stream", NULL},
      {"multipart/form-data; boundary=12345678901234567890123456789012345678901234567890123456789012345678901", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *b = NULL;
    size_t n = http_multipart_boundary(cases[i].type, strlen(cases[i].type), &b);
    if (!cases[i].boundary) {
      if (n != 0) fail_msg("'%s': expected refusal, got boundary '%.*s'", cases[i].type, (int)n, b);
    } else if (n != strlen(cases[i].boundary) || memcmp(b, cases[i].boundary, n) != 0) {
      fail_msg("'%s': expected boundary '%s', got '%.*s' (%zu)", cases[i].type, cases[i].boundary, (int)n,
               n ? b : "", n);
    }
  }
  /* a NUL inside a quoted boundary is no bchar (RFC 2046), though strchr finds one in any set */
  static const char nul[] = "multipart/form-data; boundary=\"a\0b\"";
  const char *b = NULL;
  assert_int_equal(http_multipart_boundary(nul, sizeof nul - 1, &b), 0);
}

static void test_multipart_find(void **state) {
  (void)state;
  static const char *const names[] = {"data", "file"};
  static const struct {
    const char *what, *body;
    inferd_code code;
    const char *content; /* when OK */
  } cases[] = {
      {"curl -F data=@x",
       "--XyZ\r\nContent-Disposition: form-data; name=\"data\"; filename=\"x.jpg\"\r\nContent-Type: image/jpeg\r\n\r\n"
       "JPEG\r\nbytes\r\n--XyZ--\r\n",
       INFERD_OK, "JPEG\r\nbytes"},
      {"preamble, file field, padding after the boundary",
       "ignored preamble\r\n--XyZ  \r\ncontent-disposition: form-data; name=file\r\n\r\nPNG\r\n--XyZ--", INFERD_OK,
       "PNG"},
      {"data wins over file whatever the order",
       "--XyZ\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nF\r\n--XyZ\r\nContent-Disposition: form-data; "
       "name=\"data\"\r\n\r\nD\r\n--XyZ--\r\n",
       INFERD_OK, "D"},
      {"empty part", "--XyZ\r\nContent-Disposition: form-data; name=\"data\"\r\n\r\n\r\n--XyZ--\r\n", INFERD_OK, ""},
      {"no such field", "--XyZ\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nx\r\n--XyZ--\r\n",
       INFERD_NOT_FOUND, NULL},
      {"no parts", "--XyZ--\r\n", INFERD_NOT_FOUND, NULL},
      {"truncated: no close delimiter", "--XyZ\r\nContent-Disposition: form-data; name=\"data\"\r\n\r\nJPEG",
       INFERD_INVALID_ARG, NULL},
      {"no boundary at all", "just bytes", INFERD_INVALID_ARG, NULL},
      {"empty body", "", INFERD_INVALID_ARG, NULL},
      {"headers never end", "--XyZ\r\nContent-Disposition: form-data; name=\"data\"\r\n", INFERD_INVALID_ARG, NULL},
      {"no Content-Disposition", "--XyZ\r\nContent-Type: image/jpeg\r\n\r\nx\r\n--XyZ--", INFERD_INVALID_ARG, NULL},
      {"not form-data", "--XyZ\r\nContent-Disposition: attachment; name=\"data\"\r\n\r\nx\r\n--XyZ--",
       INFERD_INVALID_ARG, NULL},
      {"two names", "--XyZ\r\nContent-Disposition: form-data; name=\"data\"; name=\"file\"\r\n\r\nx\r\n--XyZ--",
       INFERD_INVALID_ARG, NULL},
      {"header without colon", "--XyZ\r\nContent-Disposition form-data\r\n\r\nx\r\n--XyZ--", INFERD_INVALID_ARG, NULL},
      {"folded header", "--XyZ\r\nContent-Disposition: form-data;\r\n name=\"data\"\r\n\r\nx\r\n--XyZ--",
       INFERD_INVALID_ARG, NULL},
      {"LF-only line ends", "--XyZ\nContent-Disposition: form-data; name=\"data\"\n\nx\n--XyZ--\n", INFERD_INVALID_ARG,
       NULL},
      {"garbage after a boundary", "--XyZ\r\nContent-Disposition: form-data; name=\"data\"\r\n\r\nx\r\n--XyZjunk",
       INFERD_INVALID_ARG, NULL},
      {"requests' escaped backslashes in a filename (C:\\photos\\cat.png)",
       "--XyZ\r\nContent-Disposition: form-data; name=\"data\"; filename=\"C:\\\\photos\\\\cat.png\"\r\n\r\nPNG\r\n"
       "--XyZ--\r\n",
       INFERD_OK, "PNG"},
      {"an escaped quote in a filename",
       "--XyZ\r\nContent-Disposition: form-data; name=\"data\"; filename=\"a\\\"b.png\"\r\n\r\nPNG\r\n--XyZ--\r\n", INFERD_OK,
       "PNG"},
      {"a backslash at the end of the header",
       "--XyZ\r\nContent-Disposition: form-data; name=\"data\"; filename=\"a\\\r\n\r\nPNG\r\n--XyZ--\r\n",
       INFERD_INVALID_ARG, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t size = strlen(cases[i].body);
    char *body = malloc(size ? size : 1); /* exact size: ASan sees a read past it */
    memcpy(body, cases[i].body, size);
    http_multipart_part part = {0};
    inferd_status st = {0};
    inferd_code code = http_multipart_find(body, size, "XyZ", 3, names, 2, &part, &st);
    if (code != cases[i].code)
      fail_msg("%s: expected %s, got %s (%s)", cases[i].what, inferd_code_name(cases[i].code), inferd_code_name(code),
               st.message);
    if (code == INFERD_OK) {
      if (part.size != strlen(cases[i].content) || memcmp(part.data, cases[i].content, part.size) != 0)
        fail_msg("%s: expected content '%s', got '%.*s'", cases[i].what, cases[i].content, (int)part.size, part.data);
    } else if (st.message[0] == '\0') {
      fail_msg("%s: no message with %s", cases[i].what, inferd_code_name(code));
    }
    free(body);
  }
}

/* ==== JSON escaping and UTF-8 =============================================================== */

/* Byte sequences in an error message and the string content the body must carry: every
 * well-formed UTF-8 character as it is, each maximal subpart of an ill-formed sequence
 * as one \ufffd (Unicode's recommended practice, Table 3-7 of the standard). */
static const struct {
  const char *what, *in, *out;
  bool valid; /* well-formed UTF-8 */
} utf8_cases[] = {
    {"ASCII", "Model not found: x", "Model not found: x", true},
    {"2-byte e-acute", "caf\xc3\xa9", "caf\xc3\xa9", true},
    {"3-byte euro sign", "\xe2\x82\xac 5", "\xe2\x82\xac 5", true},
    {"4-byte emoji", "\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80", true},
    {"U+D7FF, last before the surrogates", "\xed\x9f\xbf", "\xed\x9f\xbf", true},
    {"U+E000, first after the surrogates", "\xee\x80\x80", "\xee\x80\x80", true},
    {"U+FFFD itself", "\xef\xbf\xbd", "\xef\xbf\xbd", true},
    {"U+10FFFF, the last code point", "\xf4\x8f\xbf\xbf", "\xf4\x8f\xbf\xbf", true},
    {"0xFF (never UTF-8)", "\xff" ".mar", "\\ufffd.mar", false},
    {"0xFE", "a\xfe" "b", "a\\ufffdb", false},
    {"a stray continuation byte", "\x80", "\\ufffd", false},
    {"two stray continuation bytes", "\xbf\x80", "\\ufffd\\ufffd", false},
    {"overlong '/' (C0 AF)", "\xc0\xaf", "\\ufffd\\ufffd", false},
    {"overlong NUL (C1 80)", "\xc1\x80", "\\ufffd\\ufffd", false},
    {"overlong 3-byte '/' (E0 80 AF)", "\xe0\x80\xaf", "\\ufffd\\ufffd\\ufffd", false},
    {"overlong 4-byte (F0 8F BF BF)", "\xf0\x8f\xbf\xbf", "\\ufffd\\ufffd\\ufffd\\ufffd", false},
    {"surrogate U+D800", "\xed\xa0\x80", "\\ufffd\\ufffd\\ufffd", false},
    {"surrogate U+DFFF", "\xed\xbf\xbf", "\\ufffd\\ufffd\\ufffd", false},
    {"U+110000, past the last", "\xf4\x90\x80\x80", "\\ufffd\\ufffd\\ufffd\\ufffd", false},
    {"F5 lead (past U+10FFFF)", "\xf5\x80\x80\x80", "\\ufffd\\ufffd\\ufffd\\ufffd", false},
    {"2-byte cut at the end", "a\xc3", "a\\ufffd", false},
    {"3-byte cut at the end", "\xe2\x82", "\\ufffd", false},
    {"4-byte cut at the end", "\xf0\x9f\x98", "\\ufffd", false},
    {"3-byte cut by ASCII", "\xe2\x82" "x", "\\ufffdx", false},
    {"4-byte cut by a new lead", "\xf0\x9f\xc3\xa9", "\\ufffd\xc3\xa9", false},
    {"well-formed then cut", "\xc3\xa9\xc3", "\xc3\xa9\\ufffd", false},
    {"quotes, backslash, CR/LF, control", "\"a\\b\"\r\n\x01", "\\\"a\\\\b\\\"  \\u0001", true},
};

/* The message content of a rendered error body: between "message": " and "\n}\n. */
static void message_of(const char *body, size_t len, char *out, size_t size) {
  const char *start = strstr(body, "\"message\": \"");
  assert_non_null(start);
  start += strlen("\"message\": \"");
  assert_true(len >= 4 && strcmp(body + len - 4, "\"\n}\n") == 0);
  size_t n = (size_t)(body + len - 4 - start);
  assert_true(n < size);
  memcpy(out, start, n);
  out[n] = '\0';
}

static void test_error_body_utf8(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof utf8_cases / sizeof utf8_cases[0]; i++) {
    char body[1024], got[1024];
    size_t len = http__render_error(body, sizeof body, HTTP__E_BAD_REQUEST, utf8_cases[i].in);
    message_of(body, len, got, sizeof got);
    if (strcmp(got, utf8_cases[i].out) != 0)
      fail_msg("%s: message rendered as '%s', want '%s'", utf8_cases[i].what, got, utf8_cases[i].out);
    json_error_t err;
    json_t *parsed = json_loadb(body, len, 0, &err); /* jansson refuses ill-formed UTF-8 */
    if (!parsed) fail_msg("%s: body is not valid JSON: %s:\n%s", utf8_cases[i].what, err.text, body);
    json_decref(parsed);
    if (http__utf8_valid(utf8_cases[i].in, strlen(utf8_cases[i].in)) != utf8_cases[i].valid)
      fail_msg("%s: http__utf8_valid says %d, want %d", utf8_cases[i].what, !utf8_cases[i].valid, utf8_cases[i].valid);
  }
  /* Truncated to fit: never inside a character. */
  char message[601] = {0};
  for (int i = 0; i < 300; i++) memcpy(message + 2 * i, "\xc3\xa9", 2);
  for (size_t cap = 128; cap < 160; cap++) {
    char body[160];
    size_t len = http__render_error(body, cap, HTTP__E_BAD_REQUEST, message);
    json_error_t err;
    json_t *parsed = json_loadb(body, len, 0, &err);
    if (!parsed) fail_msg("cap %zu: truncated body is not valid JSON: %s:\n%.*s", cap, err.text, (int)len, body);
    json_decref(parsed);
  }
}

/* The same escaping for JSON strings built in a request's pool (v2 names and ids). */
static void test_buf_json_string_utf8(void **state) {
  (void)state;
  h2o_mem_pool_t pool;
  h2o_mem_init_pool(&pool);
  for (size_t i = 0; i < sizeof utf8_cases / sizeof utf8_cases[0]; i++) {
    if (strpbrk(utf8_cases[i].in, "\r\n\x01")) continue; /* control characters: \u00XX here */
    http__buf b;
    http__buf_init(&b, &pool, 8);
    http__buf_json_string(&b, utf8_cases[i].in, strlen(utf8_cases[i].in));
    char want[256];
    snprintf(want, sizeof want, "\"%s\"", utf8_cases[i].out);
    if (strcmp(b.data, want) != 0) fail_msg("%s: escaped as %s, want %s", utf8_cases[i].what, b.data, want);
  }
  h2o_mem_clear_pool(&pool);
}

/* ==== JSON numbers ======================================================================= */

/* http__float_json(x) is the text snprintf "%.9g" writes for (double)x, or null.
 * *checked counts the values it formats itself, |x| >= 2^-21 (smaller ones may go to
 * snprintf: their comparison cannot fail). */
static void check_float_json(float x, unsigned long *checked) {
  char got[HTTP__FLOAT_CHARS], want[64];
  size_t len = http__float_json(x, got);
  if (isfinite(x)) snprintf(want, sizeof want, "%.9g", (double)x);
  else strcpy(want, "null");
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  if (strcmp(got, want) != 0 || len != strlen(want))
    fail_msg("float 0x%08x: '%s' (length %zu), want '%s'", bits, got, len, want);
  if (!(fabsf(x) < 0x1p-21f)) ++*checked; /* infinities and NaN too: "null" is its own */
}

/* Against glibc's printf over a spread of every bit pattern (both signs, subnormals,
 * NaNs and infinities), random mantissas at every exponent, values of 10 significant
 * digits that end in 5 (ties: to even), and the neighbours of the powers of ten and of
 * 9.999999995 * 10^n (rounding that carries into one more digit; %g's switch between
 * fixed and scientific notation below 1e-4 and from 1e9). */
static void test_float_json(void **state) {
  (void)state;
  unsigned long checked = 0;
  for (uint64_t bits = 0; bits <= UINT32_MAX; bits += 4099) {
    float x;
    uint32_t b = (uint32_t)bits;
    memcpy(&x, &b, sizeof x);
    check_float_json(x, &checked);
  }
  uint64_t seed = 0x9e3779b97f4a7c15u;
  for (int e = -149; e <= 104; e++)
    for (int i = 0; i < 200; i++) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      float m = (float)(uint32_t)(seed >> 40 | 1u << 23); /* a 24-bit mantissa */
      check_float_json(ldexpf(m, e) * (i & 1 ? -1.0f : 1.0f), &checked);
    }
  int ties = 0;
  for (int k = 1; k <= 30; k++)
    for (int i = 0; i < 2000; i++) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      float x = ldexpf((float)(uint32_t)(seed >> 40 | 1u), -k);
      char exact[64];
      int n = snprintf(exact, sizeof exact, "%.40g", (double)x); /* exact: x has at most 30 fraction digits */
      int sig = 0;
      for (int j = 0; j < n && exact[j] != 'e'; j++) /* significant digits: from the first non-zero one */
        sig += exact[j] >= '0' && exact[j] <= '9' && (sig || exact[j] != '0');
      ties += sig == 10 && exact[n - 1] == '5';
      check_float_json(x, &checked);
    }
  if (ties < 100) fail_msg("only %d ties among the values of 10 significant digits", ties);
  for (int p = -45; p <= 38; p++) {
    const double centres[] = {pow(10, p), 9.999999995 * pow(10, p), 9.99999995 * pow(10, p)};
    for (size_t c = 0; c < sizeof centres / sizeof *centres; c++) {
      float x = (float)centres[c];
      for (int j = 0; j < 8; j++) x = nextafterf(x, 0);
      for (int j = 0; j < 16 && isfinite(x); j++, x = nextafterf(x, INFINITY)) check_float_json(x, &checked);
    }
  }
  check_float_json(-0.0f, &checked);
  check_float_json(FLT_MAX, &checked);
  check_float_json(-FLT_MIN, &checked);
  check_float_json(999999999.5f, &checked);
  if (checked < 500000) fail_msg("only %lu floats of 2^-21 and more checked", checked);
}

/* The file name a url downloads to: the path's last segment, without the query and
 * fragment, and only a valid model name (no hidden file, no directory, no '..'). */
static void test_url_file_name(void **state) {
  char name[64];
  assert_true(http_url_file_name("https://torchserve.pytorch.org/mar_files/squeezenet1_1.mar", name, sizeof name));
  assert_string_equal(name, "squeezenet1_1.mar");
  assert_true(http_url_file_name("http://h/a/m-2.onnx?sig=abc/def#frag", name, sizeof name));
  assert_string_equal(name, "m-2.onnx");
  assert_true(http_url_file_name("http://h:80/x", name, sizeof name));
  assert_string_equal(name, "x");
  const char *bad[] = {"http://h/",          "http://h/a/",      "http://h/.hidden",  "http://h/..",
                       "http://h/a/..?x=1",  "http://h/a%2Fb.mar", "http://h/a b.mar", "http://h/m.mar/",
                       "http://h/?q=m.mar",  "http://host",      "http://h?x=1",      "https://h#m.mar"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    if (http_url_file_name(bad[i], name, sizeof name)) fail_msg("%s gave the file name '%s'", bad[i], name);
  assert_false(http_url_file_name("http://h/0123456789.mar", name, 8)); /* does not fit */
  assert_true(http_url_is_remote("HTTPS://h/m.mar"));
  assert_true(http_url_is_remote("http://h/m.mar"));
  assert_false(http_url_is_remote("file:///m.mar"));
  assert_false(http_url_is_remote("m.mar"));
}

/* A log message is one line: a url or a name with a newline (a registration's url is the
 * client's) cannot start a forged line, nor an escape byte reach a terminal. */
static void test_log_one_line(void **state) {
  (void)state;
  char path[] = "/tmp/inferd-test-log-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  fflush(stderr);
  int saved = dup(STDERR_FILENO);
  assert_true(saved >= 0);
  assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
  core_log(CORE_LOG_INFO, "loading %s", "a.onnx\n2026-01-01T00:00:00.000Z info  forged\r\x1b[2Jx\x7f\xc2\x85|\xc3\xa9");
  fflush(stderr);
  assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
  close(saved);
  char got[512] = {0};
  ssize_t n = pread(fd, got, sizeof got - 1, 0);
  close(fd);
  assert_true(n > 0);
  const char *msg = strstr(got, "loading ");
  if (!msg) fail_msg("no message in <<%s>>", got);
  assert_string_equal(msg, "loading a.onnx?2026-01-01T00:00:00.000Z info  forged??[2Jx???|\xc3\xa9\n");
}

/* Which outputs a v2 infer answers, and how: every output in the model's order when the
 * request names none (binary_data_output for all), else those named, in that order, each
 * binary only by its own binary_data (as Triton reads them); an output named twice, an
 * unknown one, or more than the model has are 400s that say so. */
static void test_v2_outputs(void **state) {
  (void)state;
  static const int64_t dims[1] = {2};
  static const char *const names[3] = {"a", "b", "c"};
  const http_v2_spec spec = {.model_name = "m", .input_name = "x", .item_rank = 1, .item_dims = dims,
                             .output_names = names, .output_count = 3, .max_rows = 4};
  static const struct {
    const char *tail; /* after the input, inside the request object */
    const char *want; /* the outputs answered ("c0 a1": c inline, a binary), or what the error says */
  } cases[] = {
      {"", "a0 b0 c0"},
      {", \"outputs\": []", "a0 b0 c0"},
      {", \"parameters\": {\"binary_data_output\": true}", "a1 b1 c1"},
      {", \"outputs\": [{\"name\": \"c\"}, {\"name\": \"a\"}]", "c0 a0"},
      {", \"parameters\": {\"binary_data_output\": true}, \"outputs\": [{\"name\": \"b\"}]", "b0"},
      {", \"outputs\": [{\"name\": \"b\", \"parameters\": {\"binary_data\": true}}, {\"name\": \"a\"}]", "b1 a0"},
      {", \"outputs\": [{\"name\": \"a\"}, {\"name\": \"a\"}]", "error: output 'a' is asked for twice"},
      {", \"outputs\": [{\"name\": \"d\"}]", "error: unknown output 'd': model m has 'a', 'b', 'c'"},
      {", \"outputs\": [{\"name\": \"a\"}, {\"name\": \"b\"}, {\"name\": \"c\"}, {\"name\": \"a\"}]",
       "error: \"outputs\" names 4 outputs; model m has 3"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char body[512];
    int len = snprintf(body, sizeof body,
                       "{\"inputs\": [{\"name\": \"x\", \"shape\": [1, 2], \"datatype\": \"FP32\", \"data\": [1, 2]}]%s}",
                       cases[i].tail);
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    http_v2_request r;
    inferd_status st = {0};
    char got[INFERD_STATUS_MESSAGE_MAX + 16] = "";
    if (http_v2_parse(body, (size_t)len, NULL, 0, &spec, (http_v2_alloc_fn)h2o_mem_alloc_pool, &pool, &r, &st) ==
        INFERD_OK) {
      for (int k = 0; k < r.output_count; k++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s%d", k ? " " : "", names[r.outputs[k]],
                 r.output_binary[k]);
    } else {
      snprintf(got, sizeof got, "error: %s", st.message);
    }
    h2o_mem_clear_pool(&pool);
    if (strncmp(got, cases[i].want, strlen(cases[i].want)) != 0)
      fail_msg("request tail <<%s>>: got <<%s>>, want <<%s>>", cases[i].tail, got, cases[i].want);
  }
}

/* Nested "data" must follow the shape: flat, fully nested and nested by leading
 * dimensions (each innermost array a whole block) give the same numbers; a ragged
 * array whose total is right (a row short, the next one long), an empty array among
 * them, or numbers beside arrays are 400s naming the array, not numbers moved to
 * another row. Shape [2, 2, 2] here. */
static void test_v2_nested_data(void **state) {
  (void)state;
  static const int64_t dims[2] = {2, 2};
  static const char *const names[1] = {"y"};
  const http_v2_spec spec = {.model_name = "m", .input_name = "x", .item_rank = 2, .item_dims = dims,
                             .output_names = names, .output_count = 1, .max_rows = 4};
  static const struct {
    const char *data;
    const char *want; /* "ok", or what the error says */
  } cases[] = {
      {"[1, 2, 3, 4, 5, 6, 7, 8]", "ok"},
      {"[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]", "ok"},
      {"[[1, 2, 3, 4], [5, 6, 7, 8]]", "ok"},
      {"[[1, 2, 3, 4], [[5, 6], [7, 8]]]", "ok"},
      {"[[1, 2, 3], [4, 5, 6, 7, 8]]", "error: input 'x': \"data\"[0] has 3 values, shape needs 4 there"},
      {"[[[1, 2, 3], [4]], [[5, 6], [7, 8]]]", "error: input 'x': \"data\"[0][0] has 3 values, shape needs 2 there"},
      {"[[], [1, 2, 3, 4], [5, 6, 7, 8]]", "error: input 'x': \"data\" has 3 elements, shape needs 2 arrays there"},
      {"[[1, 2, 3, 4, 5, 6, 7, 8]]", "error: input 'x': \"data\" has 1 elements, shape needs 2 arrays there"},
      {"[[[1, 2], [3, 4], []], [[5, 6], [7, 8]]]",
       "error: input 'x': \"data\"[0] has 3 elements, shape needs 2 arrays there"},
      {"[[1, 2, 3, 4], 5, 6, 7, 8]", "error: input 'x': \"data\" has 5 elements"},
      {"[[[1, 2], 3, 4], [5, 6, 7, 8]]", "error: input 'x': \"data\"[0] has 3 elements"},
      {"[1, 2, [3, 4], 5, 6, 7, 8]", "error: input 'x': \"data\"[2] is an array, but \"data\"[0] is not"},
      {"[[[[1, 2]], [[3, 4]]], [[5, 6], [7, 8]]]", "error: input 'x': \"data\" is nested deeper than its shape"},
      {"[1, 2, 3, 4, 5, 6, 7]", "error: input 'x': \"data\" has 7 values, shape needs 8"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char body[512];
    int len = snprintf(body, sizeof body,
                       "{\"inputs\": [{\"name\": \"x\", \"shape\": [2, 2, 2], \"datatype\": \"FP32\", \"data\": %s}]}",
                       cases[i].data);
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    http_v2_request r;
    inferd_status st = {0};
    char got[INFERD_STATUS_MESSAGE_MAX + 16] = "ok";
    if (http_v2_parse(body, (size_t)len, NULL, 0, &spec, (http_v2_alloc_fn)h2o_mem_alloc_pool, &pool, &r, &st) ==
        INFERD_OK) {
      for (int k = 0; k < 8; k++)
        if (r.data[k] != (float)(k + 1)) snprintf(got, sizeof got, "data[%d] is %g", k, (double)r.data[k]);
    } else {
      snprintf(got, sizeof got, "error: %s", st.message);
    }
    h2o_mem_clear_pool(&pool);
    if (strncmp(got, cases[i].want, strlen(cases[i].want)) != 0)
      fail_msg("data %s: got <<%s>>, want <<%s>>", cases[i].data, got, cases[i].want);
  }
}

/* FP32 data at the edge of the range: a decimal that rounds to FLT_MAX is FLT_MAX, as
 * "3.40282347e+38" (how %.9g, this server's answers included, writes FLT_MAX: a double
 * just above it) and "3.4028235e38" (float32's shortest repr); one that rounds to
 * infinity is a 400. */
static void test_v2_fp32_range(void **state) {
  (void)state;
  static const int64_t dims[1] = {1};
  static const char *const names[1] = {"y"};
  const http_v2_spec spec = {.model_name = "m", .input_name = "x", .item_rank = 1, .item_dims = dims,
                             .output_names = names, .output_count = 1, .max_rows = 1};
  static const struct {
    const char *number;
    float want; /* 0: refused as outside the FP32 range */
  } cases[] = {
      {"3.40282347e+38", FLT_MAX},         {"-3.40282347e+38", -FLT_MAX},       {"3.4028235e38", FLT_MAX},
      {"3.4028234663852886e38", FLT_MAX},  {"3.4028235677973362e38", FLT_MAX}, {"3.4028235677973366e38", 0},
      {"3.4028236e38", 0},                 {"-1e39", 0},                        {"1.5", 1.5f},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char body[256];
    int len = snprintf(body, sizeof body,
                       "{\"inputs\": [{\"name\": \"x\", \"shape\": [1, 1], \"datatype\": \"FP32\", \"data\": [%s]}]}",
                       cases[i].number);
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    http_v2_request r;
    inferd_status st = {0};
    inferd_code code =
        http_v2_parse(body, (size_t)len, NULL, 0, &spec, (http_v2_alloc_fn)h2o_mem_alloc_pool, &pool, &r, &st);
    float got = code == INFERD_OK ? r.data[0] : 0;
    h2o_mem_clear_pool(&pool);
    if (got != cases[i].want || (code != INFERD_OK && !strstr(st.message, "outside the FP32 range")))
      fail_msg("data [%s]: got %s %.9g, want %.9g", cases[i].number, code == INFERD_OK ? "ok" : st.message,
               (double)got, (double)cases[i].want);
  }
}

/* The Inference-Header-Content-Length value as Triton reads it: 0 means the whole body
 * is JSON (as without the header), trailing blanks end the value rather than make it
 * "not a byte count"; a negative or signed value, or one past the body, is refused. */
static void test_v2_header_length(void **state) {
  (void)state;
  static const int64_t dims[1] = {2};
  static const char *const names[1] = {"y"};
  const http_v2_spec spec = {.model_name = "m", .input_name = "x", .item_rank = 1, .item_dims = dims,
                             .output_names = names, .output_count = 1, .max_rows = 1};
  static const char json[] = "{\"inputs\": [{\"name\": \"x\", \"shape\": [1, 2], \"datatype\": \"FP32\", \"data\": [1, 2]}]}";
  static const char binary_json[] =
      "{\"inputs\": [{\"name\": \"x\", \"shape\": [1, 2], \"datatype\": \"FP32\", "
      "\"parameters\": {\"binary_data_size\": 8}}]}";
  char binary_length[16], binary_length_blank[16];
  snprintf(binary_length, sizeof binary_length, "%zu", sizeof binary_json - 1);
  snprintf(binary_length_blank, sizeof binary_length_blank, "%zu \t", sizeof binary_json - 1);
  static const float two[2] = {1, 2};
  char binary_body[sizeof binary_json - 1 + sizeof two];
  memcpy(binary_body, binary_json, sizeof binary_json - 1);
  memcpy(binary_body + sizeof binary_json - 1, two, sizeof two); /* (little-endian here) */
  const struct {
    const char *body;
    size_t size;
    const char *header;
    const char *want; /* "ok", or what the error says */
  } cases[] = {
      {json, sizeof json - 1, "0", "ok"},
      {json, sizeof json - 1, "0 ", "ok"},
      {binary_body, sizeof binary_body, binary_length, "ok"},
      {binary_body, sizeof binary_body, binary_length_blank, "ok"},
      {binary_body, sizeof binary_body, "0", "error: malformed JSON"},
      {json, sizeof json - 1, "-5", "error: Inference-Header-Content-Length '-5' is not a byte count"},
      {json, sizeof json - 1, "+5", "error: Inference-Header-Content-Length '+5' is not a byte count"},
      {json, sizeof json - 1, "", "error: Inference-Header-Content-Length '' is not a byte count"},
      {json, sizeof json - 1, "1000", "error: Inference-Header-Content-Length 1000 is more than the body's"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    http_v2_request r;
    inferd_status st = {0};
    char got[INFERD_STATUS_MESSAGE_MAX + 16] = "ok";
    if (http_v2_parse(cases[i].body, cases[i].size, cases[i].header, strlen(cases[i].header), &spec,
                      (http_v2_alloc_fn)h2o_mem_alloc_pool, &pool, &r, &st) == INFERD_OK) {
      float x[2];
      http_v2_copy_row(&r, 0, x);
      if (x[0] != 1 || x[1] != 2) snprintf(got, sizeof got, "row is %g %g", (double)x[0], (double)x[1]);
    } else {
      snprintf(got, sizeof got, "error: %s", st.message);
    }
    h2o_mem_clear_pool(&pool);
    if (strncmp(got, cases[i].want, strlen(cases[i].want)) != 0)
      fail_msg("case %zu, header '%s': got <<%s>>, want <<%s>>", i, cases[i].header, got, cases[i].want);
  }
}

/* A field of the wrong type is named with what it belongs to, and a wrong shape with the
 * shape the model takes: these texts are written only when the parse fails. */
static void test_v2_field_errors(void **state) {
  (void)state;
  static const int64_t dims[2] = {2, 3};
  static const char *const names[1] = {"y"};
  const http_v2_spec spec = {.model_name = "m", .input_name = "x", .item_rank = 2, .item_dims = dims,
                             .output_names = names, .output_count = 1, .max_rows = 4};
#define V2_INPUT(shape, extra) \
  "{\"inputs\": [{\"name\": \"x\", \"shape\": " shape ", \"datatype\": \"FP32\", " \
  "\"data\": [1, 2, 3, 4, 5, 6]" extra "}]"
  const struct {
    const char *body, *want;
  } cases[] = {
      {V2_INPUT("[1, 2, 3]", "") "}", "ok"},
      {V2_INPUT("[1, 2, 3]", ", \"parameters\": 5") "}", "input 'x': \"parameters\" must be an object"},
      {V2_INPUT("[1, 2, 3]", ", \"parameters\": {\"binary_data_size\": -1}") "}",
       "input 'x': \"binary_data_size\" must be a non-negative integer"},
      {V2_INPUT("[1, 2, 3]", "") ", \"outputs\": [{\"name\": \"y\", \"parameters\": []}]}",
       "output 'y': \"parameters\" must be an object"},
      {V2_INPUT("[1, 2, 3]", "") ", \"outputs\": [{\"name\": \"y\", \"parameters\": {\"binary_data\": 1}}]}",
       "output 'y': \"binary_data\" must be true or false"},
      {V2_INPUT("[1, 2, 3]", "") ", \"parameters\": {\"binary_data_output\": \"yes\"}}",
       "request parameters: \"binary_data_output\" must be true or false"},
      {V2_INPUT("[1, 2, 3]", "") ", \"parameters\": 1}", "request: \"parameters\" must be an object"},
      {V2_INPUT("[1, 6]", "") "}", "input 'x': shape has rank 2, model m takes [n, 2, 3]"},
      {V2_INPUT("[1, 3, 2]", "") "}", "input 'x': shape[1] is 3, model m takes [n, 2, 3]"},
  };
#undef V2_INPUT
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    http_v2_request r;
    inferd_status st = {0};
    const char *got = http_v2_parse(cases[i].body, strlen(cases[i].body), NULL, 0, &spec,
                                    (http_v2_alloc_fn)h2o_mem_alloc_pool, &pool, &r, &st) == INFERD_OK
                          ? "ok"
                          : st.message;
    if (strcmp(got, cases[i].want) != 0) fail_msg("%s: got <<%s>>, want <<%s>>", cases[i].body, got, cases[i].want);
    h2o_mem_clear_pool(&pool);
  }
}

/* Binary FP32 input must be finite, as JSON "data" is: a NaN or an infinity is a 400
 * naming the element, never run (oneDNN's Relu turned a NaN into 0: a valid-looking
 * answer). The largest finite values and -0 pass. */
static void test_v2_binary_not_finite(void **state) {
  (void)state;
  static const int64_t dims[1] = {3};
  static const char *const names[1] = {"y"};
  const http_v2_spec spec = {.model_name = "m", .input_name = "x", .item_rank = 1, .item_dims = dims,
                             .output_names = names, .output_count = 1, .max_rows = 1};
  static const char json[] = "{\"inputs\": [{\"name\": \"x\", \"shape\": [1, 3], \"datatype\": \"FP32\", "
                             "\"parameters\": {\"binary_data_size\": 12}}]}";
  const struct {
    float values[3];
    const char *want;
  } cases[] = {
      {{FLT_MAX, -FLT_MAX, -0.0f}, "ok"},
      {{1, NAN, 2}, "error: input 'x': binary element 1 is NaN: FP32 input must be finite"},
      {{INFINITY, 1, 2}, "error: input 'x': binary element 0 is infinity"},
      {{1, 2, -INFINITY}, "error: input 'x': binary element 2 is -infinity"},
  };
  char length[16];
  snprintf(length, sizeof length, "%zu", sizeof json - 1);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char body[sizeof json - 1 + 3 * sizeof(float)];
    memcpy(body, json, sizeof json - 1);
    memcpy(body + sizeof json - 1, cases[i].values, sizeof cases[i].values);
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    http_v2_request r;
    inferd_status st = {0};
    char got[INFERD_STATUS_MESSAGE_MAX + 16] = "ok";
    if (http_v2_parse(body, sizeof body, length, strlen(length), &spec, (http_v2_alloc_fn)h2o_mem_alloc_pool, &pool,
                      &r, &st) != INFERD_OK)
      snprintf(got, sizeof got, "error: %s", st.message);
    h2o_mem_clear_pool(&pool);
    if (strncmp(got, cases[i].want, strlen(cases[i].want)) != 0)
      fail_msg("case %zu: got <<%s>>, want <<%s>>", i, got, cases[i].want);
  }
}

/* The input's checks, each at its edge: the datatype is "FP32" exactly (Triton's names
 * are upper case), the batch is 1..max_rows, every other dimension is the model's, and
 * binary data is exactly binary_data_size bytes, which is the shape's size. An
 * Inference-Header-Content-Length of the whole body is JSON with no binary data. */
static void test_v2_input_checks(void **state) {
  (void)state;
  static const int64_t dims[1] = {2};
  static const char *const names[1] = {"y"};
  const http_v2_spec spec = {.model_name = "m", .input_name = "x", .item_rank = 1, .item_dims = dims,
                             .output_names = names, .output_count = 1, .max_rows = 4};
  static const char binary[] = "\0\0\x80\x3f\0\0\0\x40\0\0\x40\x40"; /* 1, 2, 3 as FP32 */
  static const struct {
    const char *shape, *datatype, *data; /* data: "binary:N" for binary_data_size N and N bytes of `binary` */
    int extra;                           /* binary bytes beyond N */
    const char *want;                    /* "ok", or what the error says */
  } cases[] = {
      {"[1, 2]", "FP32", "[1, 2]", 0, "ok"},
      {"[4, 2]", "FP32", "[1, 2, 3, 4, 5, 6, 7, 8]", 0, "ok"},
      {"[1, 2]", "fp32", "[1, 2]", 0, "error: input 'x': datatype"},
      {"[0, 2]", "FP32", "[]", 0, "error: input 'x': batch 0 out of range"},
      {"[5, 2]", "FP32", "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]", 0, "error: input 'x': batch 5 out of range"},
      {"[1, 3]", "FP32", "[1, 2, 3]", 0, "error: input 'x': shape[1] is 3"},
      {"[1, 1]", "FP32", "[1]", 0, "error: input 'x': shape[1] is 1"},
      {"[1, 2]", "FP32", "binary:8", 0, "ok"},
      {"[1, 2]", "FP32", "binary:12", 0, "error: input 'x': binary_data_size 12 does not match shape"},
      {"[1, 2]", "FP32", "binary:8", 4, "error: 12 bytes of binary data after the JSON, but input 'x' takes 8"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char body[512];
    int binary_bytes = -1;
    sscanf(cases[i].data, "binary:%d", &binary_bytes);
    int len;
    if (binary_bytes < 0)
      len = snprintf(body, sizeof body,
                     "{\"inputs\": [{\"name\": \"x\", \"shape\": %s, \"datatype\": \"%s\", \"data\": %s}]}",
                     cases[i].shape, cases[i].datatype, cases[i].data);
    else
      len = snprintf(body, sizeof body, "{\"inputs\": [{\"name\": \"x\", \"shape\": %s, \"datatype\": \"%s\", "
                     "\"parameters\": {\"binary_data_size\": %d}}]}", cases[i].shape, cases[i].datatype, binary_bytes);
    char header[16];
    int header_len = snprintf(header, sizeof header, "%d", len);
    if (binary_bytes >= 0) {
      memcpy(body + len, binary, (size_t)(binary_bytes + cases[i].extra));
      len += binary_bytes + cases[i].extra;
    }
    h2o_mem_pool_t pool;
    h2o_mem_init_pool(&pool);
    http_v2_request r;
    inferd_status st = {0};
    char got[INFERD_STATUS_MESSAGE_MAX + 16] = "ok";
    /* the header is sent with every request: for JSON alone, it is the whole body */
    if (http_v2_parse(body, (size_t)len, header, (size_t)header_len, &spec, (http_v2_alloc_fn)h2o_mem_alloc_pool, &pool,
                      &r, &st) != INFERD_OK)
      snprintf(got, sizeof got, "error: %s", st.message);
    h2o_mem_clear_pool(&pool);
    if (strncmp(got, cases[i].want, strlen(cases[i].want)) != 0)
      fail_msg("shape %s, datatype %s, data %s (+%d): got <<%s>>, want <<%s>>", cases[i].shape, cases[i].datatype,
               cases[i].data, cases[i].extra, got, cases[i].want);
  }
}

/* ==== the JSON arena of the v2 infer parse ================================================== */

/* A [1,3,224,224] FP32 request as a client sends it: 150,528 numbers in "data". */
static const int64_t image_dims[3] = {3, 224, 224};
static const char *const v2_outputs[1] = {"output"};
static const http_v2_spec image_spec = {.model_name = "m", .input_name = "input", .item_rank = 3,
                                        .item_dims = image_dims, .output_names = v2_outputs, .output_count = 1,
                                        .max_rows = 8};
enum { IMAGE_ELEMS = 3 * 224 * 224 };

static float image_value(size_t i) { return (float)((int)(i % 1024) - 512) / 8; } /* exact in FP32 and JSON */

static char *image_request(size_t *len) {
  size_t cap = 200 + (size_t)IMAGE_ELEMS * 10;
  char *body = malloc(cap);
  assert_non_null(body);
  size_t n = (size_t)snprintf(body, cap,
                              "{\"id\": \"arena\", \"inputs\": [{\"name\": \"input\", \"datatype\": \"FP32\", "
                              "\"shape\": [1, 3, 224, 224], \"data\": [");
  for (size_t i = 0; i < IMAGE_ELEMS; i++)
    n += (size_t)snprintf(body + n, cap - n, "%s%g", i ? "," : "", (double)image_value(i));
  n += (size_t)snprintf(body + n, cap - n, "]}]}");
  assert_true(n < cap);
  *len = n;
  return body;
}

/* The parsed request's memory: one buffer reused by every parse of a test. */
typedef struct parse_memory {
  char *base;
  size_t cap, used;
} parse_memory;

/* Room for one parsed image request (its rows and id). */
static parse_memory image_parse_memory(void) {
  parse_memory m = {malloc(IMAGE_ELEMS * sizeof(float) + 64), IMAGE_ELEMS * sizeof(float) + 64, 0};
  assert_non_null(m.base);
  return m;
}

static void *parse_alloc(void *ctx, size_t bytes) {
  parse_memory *m = ctx;
  bytes = (bytes + 15) / 16 * 16;
  if (bytes > m->cap - m->used) return NULL;
  void *p = m->base + m->used;
  m->used += bytes;
  return p;
}

static void parse_image(const char *body, size_t len, parse_memory *memory) {
  memory->used = 0;
  http_v2_request r;
  inferd_status st = {0};
  inferd_code code = http_v2_parse(body, len, NULL, 0, &image_spec, parse_alloc, memory, &r, &st);
  if (code != INFERD_OK) fail_msg("parse: %s", st.message);
  assert_int_equal(r.rows, 1);
  assert_int_equal(r.row_elems, IMAGE_ELEMS);
  assert_non_null(r.data);
  assert_int_equal(r.id_len, 5);
  assert_memory_equal(r.id, "arena", 5);
  for (size_t i = 0; i < IMAGE_ELEMS; i++)
    if (r.data[i] != image_value(i)) fail_msg("data[%zu] is %g, want %g", i, (double)r.data[i], (double)image_value(i));
}

/* spec.data_alloc: the input's numbers (602 KB here) come from it, what else the parse
 * keeps (output indexes, the id) from alloc, a few bytes: the server gives the first
 * its thread's scratch buffer and the second the request's pool, whose blocks of 1 KB
 * or more h2o takes from malloc. */
static void test_v2_data_alloc(void **state) {
  (void)state;
  size_t len;
  char *body = image_request(&len);
  parse_memory data = image_parse_memory(), rest = image_parse_memory();
  http_v2_spec spec = image_spec;
  spec.data_alloc = parse_alloc;
  spec.data_alloc_ctx = &data;
  http_v2_request r;
  inferd_status st = {0};
  if (http_v2_parse(body, len, NULL, 0, &spec, parse_alloc, &rest, &r, &st) != INFERD_OK)
    fail_msg("parse: %s", st.message);
  assert_true((const char *)r.data >= data.base && (const char *)r.data < data.base + data.cap);
  assert_int_equal(data.used, IMAGE_ELEMS * sizeof(float));
  if (rest.used >= 1024) fail_msg("%zu bytes from alloc besides the numbers", rest.used);
  for (size_t i = 0; i < IMAGE_ELEMS; i += 997) assert_true(r.data[i] == image_value(i));
  free(data.base);
  free(rest.base);
  free(body);
}

/* The second parse of the same request on one thread takes no malloc: every jansson
 * allocation (~150,000) comes from the arena, which neither grows nor falls back to
 * malloc. Without the arena each number of the request is a malloc. */
static void test_json_arena_steady_state(void **state) {
  (void)state;
  http__json_arena_install();
  http__json_arena_set_keep(0);
  size_t len;
  char *body = image_request(&len);
  parse_memory memory = image_parse_memory();

  http__json_arena_stats before, after;
  parse_image(body, len, &memory);
  http__json_arena_get_stats(&before);
  parse_image(body, len, &memory);
  http__json_arena_get_stats(&after);

  unsigned long long from_arena = after.arena_allocs - before.arena_allocs;
  unsigned long long by_malloc = after.fallback_mallocs - before.fallback_mallocs;
  unsigned long long chunk_mallocs = after.chunk_mallocs - before.chunk_mallocs;
  if (by_malloc != 0 || chunk_mallocs != 0 || after.chunks != before.chunks || after.bytes != before.bytes)
    fail_msg("second parse: %llu jansson mallocs, %llu chunk mallocs, chunks %zu -> %zu (%zu -> %zu bytes); want "
             "none, and no growth",
             by_malloc, chunk_mallocs, before.chunks, after.chunks, before.bytes, after.bytes);
  if (from_arena < IMAGE_ELEMS)
    fail_msg("second parse: %llu jansson allocations from the arena, want at least one per number (%d)", from_arena,
             IMAGE_ELEMS);
  /* What the arena holds for this request: a few chunks, well under the keep limit. */
  if (after.chunks > 12 || after.bytes > (size_t)32 << 20)
    fail_msg("arena holds %zu chunks, %zu bytes for a 1.1 MB request", after.chunks, after.bytes);

  /* A failing parse resets it the same way: no malloc, nothing kept beyond. */
  static const char bad_body[] = "{\"inputs\": [{\"name\": \"input\", \"datatype\": \"FP32\", \"shape\": [1, 3, 224, "
                                 "224], \"data\": [1, 2, \"three\"]}]}";
  http_v2_request r;
  inferd_status st = {0};
  assert_int_equal(http_v2_parse(bad_body, sizeof bad_body - 1, NULL, 0, &image_spec, parse_alloc, &memory, &r, &st),
                   INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "data element 2 is not a number"));
  static const char malformed[] = "{\"inputs\": [1, 2";
  assert_int_equal(http_v2_parse(malformed, sizeof malformed - 1, NULL, 0, &image_spec, parse_alloc, &memory, &r, &st),
                   INFERD_INVALID_ARG);
  assert_non_null(strstr(st.message, "malformed JSON at line 1"));
  http__json_arena_stats end;
  http__json_arena_get_stats(&end);
  assert_int_equal(end.fallback_mallocs, after.fallback_mallocs);
  assert_int_equal(end.chunk_mallocs, after.chunk_mallocs);

  http__json_arena_thread_free();
  http__json_arena_get_stats(&end);
  assert_int_equal(end.chunks, 0);
  assert_int_equal(end.bytes, 0);
  free(memory.base);
  free(body);
}

/* The keep limit: after a request the arena keeps only its first chunks up to the
 * limit and returns the others; the next request grows it again. */
static void test_json_arena_keep_limit(void **state) {
  (void)state;
  http__json_arena_install();
  size_t len;
  char *body = image_request(&len);
  parse_memory memory = image_parse_memory();
  http__json_arena_set_keep((size_t)1 << 20);
  parse_image(body, len, &memory);
  http__json_arena_stats s;
  http__json_arena_get_stats(&s);
  if (s.bytes > (size_t)1 << 20 || s.chunks == 0)
    fail_msg("keep limit 1 MB: the arena keeps %zu chunks, %zu bytes", s.chunks, s.bytes);
  http__json_arena_set_keep(1); /* smaller than any chunk: nothing is kept */
  parse_image(body, len, &memory);
  http__json_arena_get_stats(&s);
  assert_int_equal(s.chunks, 0);
  assert_int_equal(s.bytes, 0);
  http__json_arena_set_keep(0);
  free(memory.base);
  free(body);
}

/* jansson objects made outside the arena are malloc'd and freed by free(), wherever
 * they are freed: made before a parse and freed during or after one, made by another
 * thread while this thread's arena is active, made by another thread and freed here.
 * The ASan build (leak check on) catches a block freed twice, by the wrong allocator,
 * or not at all; LSan also checks that a thread's chunks are freed when it exits. */
static void *pack_on_thread(void *arg) {
  (void)arg;
  http__json_arena_stats before, after;
  http__json_arena_get_stats(&before);
  json_t *o = json_pack("{s:s, s:[i, f]}", "made", "elsewhere", "values", 1, 2.5);
  http__json_arena_get_stats(&after);
  if (after.arena_allocs != before.arena_allocs || after.fallback_mallocs == before.fallback_mallocs) return NULL;
  return o;
}

static void *parse_on_thread(void *arg) {
  const char *body = arg;
  parse_memory memory = {malloc(IMAGE_ELEMS * sizeof(float) + 64), IMAGE_ELEMS * sizeof(float) + 64, 0};
  if (!memory.base) return NULL;
  http_v2_request r;
  inferd_status st = {0};
  inferd_code code = http_v2_parse(body, strlen(body), NULL, 0, &image_spec, parse_alloc, &memory, &r, &st);
  free(memory.base);
  http__json_arena_stats s;
  http__json_arena_get_stats(&s);
  /* the thread exits holding its chunks: its exit destructor frees them */
  return code == INFERD_OK && s.chunks > 0 ? (void *)1 : NULL;
}

static void test_json_arena_outside_objects(void **state) {
  (void)state;
  http__json_arena_install();
  size_t len;
  char *body = image_request(&len);
  parse_memory memory = image_parse_memory();

  json_t *before_parse = json_pack("{s:s, s:[i, i, i]}", "config", "kept", "list", 1, 2, 3);
  json_t *freed_in_arena = json_pack("[s, {s:i}]", "freed", "while", 1);
  assert_non_null(before_parse);
  assert_non_null(freed_in_arena);
  parse_image(body, len, &memory); /* the arena now has chunks on this thread */

  /* Freed while the arena is active (an outside block is not the arena's). */
  http__json_arena_begin();
  json_decref(freed_in_arena);
  /* Made while this thread's arena is active, by another thread: malloc'd there. */
  pthread_t thread;
  void *made = NULL;
  assert_int_equal(pthread_create(&thread, NULL, pack_on_thread, NULL), 0);
  assert_int_equal(pthread_join(thread, &made), 0);
  if (!made) fail_msg("json_pack on another thread did not come from malloc");
  /* Made here while the arena is active: from the arena; its decref does nothing. */
  http__json_arena_stats s0, s1;
  http__json_arena_get_stats(&s0);
  json_t *in_arena = json_pack("{s:[i, i]}", "arena", 1, 2);
  http__json_arena_get_stats(&s1);
  assert_non_null(in_arena);
  assert_true(s1.arena_allocs > s0.arena_allocs);
  assert_int_equal(s1.fallback_mallocs, s0.fallback_mallocs);
  json_decref(in_arena);
  http__json_arena_end();

  /* After: objects from another thread and from before the parse still free normally. */
  assert_string_equal(json_string_value(json_object_get(made, "made")), "elsewhere");
  json_decref(made);
  assert_int_equal(json_integer_value(json_array_get(json_object_get(before_parse, "list"), 2)), 3);
  json_decref(before_parse);
  json_t *after_parse = json_pack("{s:s}", "after", "parse");
  http__json_arena_get_stats(&s0);
  assert_int_equal(s0.arena_allocs, s1.arena_allocs); /* not from the arena */
  char *text = json_dumps(after_parse, JSON_COMPACT);
  assert_string_equal(text, "{\"after\":\"parse\"}");
  free(text); /* json_dumps: the malloc side of the installed pair, so plain free() */
  json_decref(after_parse);

  /* A thread that parses and exits: its chunks are freed by the exit destructor. */
  void *parsed = NULL;
  assert_int_equal(pthread_create(&thread, NULL, parse_on_thread, body), 0);
  assert_int_equal(pthread_join(thread, &parsed), 0);
  if (!parsed) fail_msg("parse on another thread failed or kept no chunk");

  http__json_arena_thread_free();
  free(memory.base);
  free(body);
}

/* ==== answer blocks and dispose hooks ======================================================= */

/* A v2 answer is written into an answer block, which the request's dispose hook gives
 * back to its loop once h2o is done with the request: the next answer reuses it, where
 * the request's pool would malloc and free every answer of 1 KB and more. A loop keeps
 * at most 16 blocks, none above 1 MB. */
static void test_answer_blocks(void **state) {
  (void)state;
  static http__loop loop; /* only its free lists and hook table are used */
  h2o_conn_t conn = {.ctx = &loop.ctx};
  enum { AT_ONCE = 20 };
  static h2o_req_t reqs[AT_ONCE];
  for (int i = 0; i < AT_ONCE; i++) reqs[i].conn = &conn;
  http__job job = {.loop = &loop};
  assert_non_null(job.hook = http__hook_attach(&loop, &reqs[0]));
  char *a = http__answer_memory(&job, 12000);
  assert_non_null(a);
  memset(a, 'x', 12000);
  assert_null(http__answer_memory(&job, 10)); /* one answer per request */
  http__request_disposed(NULL, &reqs[0]);
  assert_int_equal(loop.free_block_count, 1);
  http__request_disposed(NULL, &reqs[0]); /* disposed without a hook: nothing */
  assert_int_equal(loop.free_block_count, 1);

  assert_non_null(job.hook = http__hook_attach(&loop, &reqs[0]));
  char *b = http__answer_memory(&job, 5000);
  assert_ptr_equal(b, a); /* the same block again: no malloc */
  assert_int_equal(loop.free_block_count, 0);
  http__request_disposed(NULL, &reqs[0]);

  assert_non_null(job.hook = http__hook_attach(&loop, &reqs[0])); /* a block above 1 MB is freed when given back */
  char *big = http__answer_memory(&job, (size_t)2 << 20);
  assert_non_null(big);
  assert_ptr_not_equal(big, a);
  memset(big, 'y', (size_t)2 << 20);
  http__request_disposed(NULL, &reqs[0]);
  assert_int_equal(loop.free_block_count, 1);

  for (int i = 0; i < AT_ONCE; i++) {
    assert_non_null(job.hook = http__hook_attach(&loop, &reqs[i]));
    assert_non_null(http__answer_memory(&job, 1000));
  }
  assert_int_equal(loop.free_block_count, 0);
  for (int i = 0; i < AT_ONCE; i++) http__request_disposed(NULL, &reqs[i]);
  assert_int_equal(loop.free_block_count, 16);
  assert_int_equal(loop.hook_count, 0);
  while (loop.free_blocks) { /* what http__predict_loop_free does */
    http__block *next = loop.free_blocks->next_free;
    free(loop.free_blocks);
    loop.free_blocks = next;
  }
  http__hooks_free(&loop);
}

/* The hook table: thousands of requests attached at once (the table grows), taken out
 * in a shuffled order, each found exactly once and only while attached, hooks recycled
 * (after warm-up, attaching allocates nothing). The keys are random addresses (the
 * table never reads a request): an array's evenly spaced addresses hash without a
 * single collision, and so would not test the probing or the removal's shifts. */
static void test_hook_table(void **state) {
  (void)state;
  static http__loop loop;
  enum { N = 5000, SPREAD = 16 };
  static char space[N * SPREAD * 8];
  static bool used[N * SPREAD];
  static h2o_req_t *reqs[N];
  static http__hook *hooks[N];
  static int order[N];
  uint64_t seed = 42;
  for (int i = 0; i < N; i++) {
    int at;
    do {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      at = (int)((seed >> 33) % (N * SPREAD));
    } while (used[at]);
    used[at] = true;
    reqs[i] = (h2o_req_t *)(void *)(space + (size_t)at * 8);
  }
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) {
      assert_null(http__hook_detach(&loop, reqs[i]));
      assert_non_null(hooks[i] = http__hook_attach(&loop, reqs[i]));
      assert_ptr_equal(hooks[i]->req, reqs[i]);
      order[i] = i;
    }
    assert_int_equal(loop.hook_count, N);
    for (int i = N - 1; i > 0; i--) { /* Fisher-Yates */
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      int j = (int)((seed >> 33) % (uint64_t)(i + 1)), t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    for (int k = 0; k < N; k++) {
      int i = order[k];
      http__hook *hook = http__hook_detach(&loop, reqs[i]);
      if (hook != hooks[i]) fail_msg("round %d, %d-th removal: request %d got hook %p, want %p", round, k, i, (void *)hook, (void *)hooks[i]);
      assert_null(http__hook_detach(&loop, reqs[i]));
      http__hook_put(&loop, hook);
      if (k % 7 == 0 && k + 1 < N) { /* the others are still there */
        int other = order[k + 1];
        http__hook *still = http__hook_detach(&loop, reqs[other]);
        assert_ptr_equal(still, hooks[other]);
        http__hook_put(&loop, still);
        assert_ptr_equal(http__hook_attach(&loop, reqs[other]), still); /* recycled: the same one */
      }
    }
    assert_int_equal(loop.hook_count, 0);
  }
  http__hooks_free(&loop);
}

/* ==== a server without models =============================================================== */

typedef struct server_fixture {
  config_server cfg;
  http_server *server;
  char dir[64];
  char key_file[128];
  time_t started; /* before the keys were made */
} server_fixture;

/* A server whose keys live `minutes` (token_expiration_min; 0: the default). */
static int server_setup_keys(void **state, double minutes, bool model_api, bool cors) {
  server_fixture *f = calloc(1, sizeof *f);
  config_defaults(&f->cfg);
  if (minutes > 0) f->cfg.token_expiration_min = minutes;
  f->cfg.enable_model_api = model_api;
  if (cors) {
    f->cfg.cors_allowed_origin = strdup("https://app.example");
    f->cfg.cors_allowed_methods = strdup("GET, POST, PUT, OPTIONS");
    f->cfg.cors_allowed_headers = strdup("Authorization, Content-Type");
  }
  f->started = time(NULL);
  const config_address any = {"http", "127.0.0.1", 0};
  f->cfg.inference_address = f->cfg.management_address = f->cfg.metrics_address = any;
  f->cfg.management_address.port = 0;
  strcpy(f->cfg.metrics_address.host, "localhost"); /* a name, resolved */
  f->cfg.number_of_netty_threads = 2;
  f->cfg.max_request_size = 1000;
  strcpy(f->dir, "/tmp/inferd-test-http.XXXXXX");
  if (!mkdtemp(f->dir)) return -1;
  snprintf(f->key_file, sizeof f->key_file, "%s/key_file.json", f->dir);
  http_server_params params = {.config = &f->cfg, .key_file = f->key_file};
  inferd_status st;
  if (http_server_new(&params, &f->server, &st) != INFERD_OK || http_server_start(f->server, &st) != INFERD_OK ||
      http_server_load_models(f->server, &st) != INFERD_OK) {
    print_error("server: %s\n", st.message);
    return -1;
  }
  *state = f;
  return 0;
}

static int server_setup(void **state) { return server_setup_keys(state, 0, false, false); }
/* with enable_model_api: register and unregister over HTTP */
static int server_setup_model_api(void **state) { return server_setup_keys(state, 0, true, false); }
/* 10.5 minutes: a fraction, and far longer than the test takes on any machine */
static int server_setup_fractional_minute_keys(void **state) { return server_setup_keys(state, 10.5, false, false); }
/* 0.0001 minutes is 0 whole seconds: the keys are expired as soon as they are made. */
static int server_setup_expired_keys(void **state) { return server_setup_keys(state, 0.0001, false, false); }
/* with cors_allowed_origin, _methods and _headers */
static int server_setup_cors(void **state) { return server_setup_keys(state, 0, false, true); }

static int server_teardown(void **state) {
  server_fixture *f = *state;
  http_server_drain(f->server, 1000);
  http_server_free(f->server);
  /* the server removes its key file when it stops, as TorchServe does: a failure here */
  bool left = access(f->key_file, F_OK) == 0;
  if (left) {
    print_error("key file %s left behind\n", f->key_file);
    unlink(f->key_file);
  }
  rmdir(f->dir);
  config_free(&f->cfg);
  free(f);
  return left ? -1 : 0;
}

/* Sends `request` to the address `sa` and reads the whole response (Connection: close). */
static int exchange_at(const struct sockaddr *sa, socklen_t sa_len, const char *request, char *response, size_t size) {
  int fd = socket(sa->sa_family, SOCK_STREAM, 0);
  struct timeval tv = {120, 0}; /* only a hung server takes this long */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, sa, sa_len) != 0) {
    close(fd);
    return -1;
  }
  size_t len = strlen(request), sent = 0;
  while (sent < len) {
    ssize_t n = send(fd, request + sent, len - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += (size_t)n;
  }
  size_t got = 0;
  ssize_t n;
  while (got + 1 < size && (n = recv(fd, response + got, size - 1 - got, 0)) > 0) got += (size_t)n;
  response[got] = '\0';
  close(fd);
  return (int)got;
}

/* The same to the API's port on 127.0.0.1. */
static int exchange(server_fixture *f, http_api api, const char *request, char *response, size_t size) {
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)http_server_port(f->server, api))};
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return exchange_at((struct sockaddr *)&sin, sizeof sin, request, response, size);
}

static void expect_response(server_fixture *f, http_api api, const char *request, int status, const char *body_has) {
  char response[8192];
  assert_true(exchange(f, api, request, response, sizeof response) > 0);
  int got = 0;
  if (sscanf(response, "HTTP/1.%*d %d", &got) != 1 || got != status)
    fail_msg("request '%.40s...': expected %d, got response:\n%s", request, status, response);
  if (body_has && !strstr(response, body_has))
    fail_msg("request '%.40s...': response lacks '%s':\n%s", request, body_has, response);
  if (status >= 400 && status != 503 && (!strstr(response, "\"code\": ") || !strstr(response, "\"type\": ") ||
                        !strstr(response, "\"message\": ") || !strstr(response, "application/json")))
    fail_msg("request '%.40s...': not a TorchServe error body:\n%s", request, response);
}

static void test_server_routes(void **state) {
  server_fixture *f = *state;
  assert_true(http_server_port(f->server, HTTP_API_INFERENCE) > 0);
  assert_int_not_equal(http_server_port(f->server, HTTP_API_INFERENCE), http_server_port(f->server, HTTP_API_MANAGEMENT));
  assert_int_equal(access(f->key_file, F_OK), 0);
  expect_response(f, HTTP_API_INFERENCE, "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200, "Healthy");
  expect_response(f, HTTP_API_INFERENCE, "GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404,
                  "ResourceNotFoundException");
  expect_response(f, HTTP_API_INFERENCE,
                  "POST /predictions/m HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx", 401,
                  "InvalidKeyException");
  expect_response(f, HTTP_API_INFERENCE,
                  "POST /predictions/m HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nContent-Length: 1\r\n"
                  "Connection: close\r\n\r\nx",
                  401, "Token Authorization failed");
  expect_response(f, HTTP_API_INFERENCE, "DELETE /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405,
                  "MethodNotAllowedException");
  expect_response(f, HTTP_API_INFERENCE,
                  "POST /predictions/m HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n", 413,
                  "max_request_size (1000 bytes)");
  expect_response(f, HTTP_API_INFERENCE, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200,
                  "\"live\": true");
  /* The inference API is not served on the management port, and the reverse. */
  expect_response(f, HTTP_API_MANAGEMENT, "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404, NULL);
  expect_response(f, HTTP_API_INFERENCE, "GET /models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404, NULL);
  expect_response(f, HTTP_API_MANAGEMENT, "GET /models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 401, NULL);
  expect_response(f, HTTP_API_METRICS, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200,
                  "Requests4XX");
}

/* GET /metrics?name[]=...: TorchServe's filter, its keys decoded and ';' a separator
 * as Netty's QueryStringDecoder reads them. */
static void test_server_metrics_filter(void **state) {
  server_fixture *f = *state;
  static const struct {
    const char *query, *has, *lacks[2];
  } cases[] = {
      {"name[]=Requests4XX", "Requests4XX{", {"Requests2XX", "Requests5XX"}},
      {"name%5B%5D=Requests5XX;name[]=Requests2XX", "Requests5XX{", {"Requests4XX", "Requests4XX"}},
      {"x=1&name%5b%5d=Requests2XX", "Requests2XX{", {"Requests4XX", "Requests5XX"}},
      {"name[]=nope", NULL, {"Requests", "# TYPE"}},
      {"name=Requests4XX", "Requests2XX{", {"nothing", "nothing"}}, /* not the filter's key */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char request[256], response[8192];
    snprintf(request, sizeof request, "GET /metrics?%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
             cases[i].query);
    assert_true(exchange(f, HTTP_API_METRICS, request, response, sizeof response) > 0);
    if (strncmp(response, "HTTP/1.1 200", 12) != 0) fail_msg("%s: not 200:\n%s", cases[i].query, response);
    if (cases[i].has && !strstr(response, cases[i].has)) fail_msg("%s: lacks %s:\n%s", cases[i].query, cases[i].has, response);
    for (int k = 0; k < 2; k++)
      if (strstr(response, cases[i].lacks[k])) fail_msg("%s: has %s:\n%s", cases[i].query, cases[i].lacks[k], response);
  }
  char request[2048] = "GET /metrics?";
  for (int i = 0; i < 65; i++) strcat(request, "name[]=Requests4XX&");
  strcat(request, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  expect_response(f, HTTP_API_METRICS, request, 400, "at most 64 name[] parameters");
}

static void read_key(server_fixture *f, const char *kind, char *key, size_t key_size, time_t *expires);

/* cors_allowed_*: the three headers on every response, as TorchServe sends them (a
 * success, a routed error, h2o's own 413 and a 401 of every API); a preflight gets 200
 * with them. Without the keys (test_server_no_cors): no such header, a preflight is
 * routed as any OPTIONS. */
static void test_server_cors(void **state) {
  server_fixture *f = *state;
  static const struct {
    http_api api;
    const char *request;
    int status;
  } cases[] = {
      {HTTP_API_INFERENCE, "GET /ping HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\nConnection: close\r\n\r\n",
       200},
      {HTTP_API_INFERENCE, "GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404},
      {HTTP_API_INFERENCE,
       "POST /predictions/m HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n", 413},
      {HTTP_API_MANAGEMENT, "GET /models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 401},
      {HTTP_API_METRICS, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200},
      {HTTP_API_INFERENCE,
       "OPTIONS /predictions/m HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\n"
       "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization\r\n"
       "Connection: close\r\n\r\n",
       200},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char response[8192];
    assert_true(exchange(f, cases[i].api, cases[i].request, response, sizeof response) > 0);
    int status = 0;
    sscanf(response, "HTTP/1.%*d %d", &status);
    if (status != cases[i].status) fail_msg("case %zu: want %d:\n%s", i, cases[i].status, response);
    static const char *const headers[] = {"access-control-allow-origin: https://app.example\r\n",
                                          "access-control-allow-methods: GET, POST, PUT, OPTIONS\r\n",
                                          "access-control-allow-headers: Authorization, Content-Type\r\n"};
    for (int h = 0; h < 3; h++) {
      const char *at = strstr(response, headers[h]);
      if (!at) fail_msg("case %zu: CORS header missing: %s\n%s", i, headers[h], response);
      if (strstr(at + 1, headers[h])) fail_msg("case %zu: CORS header twice: %s\n%s", i, headers[h], response);
    }
  }
}

static void test_server_no_cors(void **state) {
  server_fixture *f = *state;
  char response[8192];
  assert_true(exchange(f, HTTP_API_INFERENCE,
                       "GET /ping HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\nConnection: close\r\n\r\n",
                       response, sizeof response) > 0);
  if (strstr(response, "access-control-")) fail_msg("CORS headers without cors_allowed_*:\n%s", response);
  expect_response(f, HTTP_API_INFERENCE,
                  "OPTIONS /predictions/m HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\n"
                  "Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n",
                  405, "MethodNotAllowedException");
}

/* The body of a response as JSON (NULL when it is not). */
static json_t *response_json(const char *response) {
  const char *body = strstr(response, "\r\n\r\n");
  return body ? json_loads(body + 4, 0, NULL) : NULL;
}

/* Without enable_model_api, register and unregister answer 405: the description leaves
 * them out, and keeps the rest of the management API. */
static void test_server_api_description_no_model_api(void **state) {
  server_fixture *f = *state;
  enum { BIG = 1 << 18 };
  char *response = malloc(BIG);
  assert_non_null(response);
  assert_true(exchange(f, HTTP_API_MANAGEMENT, "OPTIONS / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", response,
                       BIG) > 0);
  json_t *doc = response_json(response);
  if (!doc) fail_msg("not JSON: %.300s", response);
  json_t *paths = json_object_get(doc, "paths");
  assert_non_null(json_object_get(json_object_get(paths, "/models"), "get"));
  assert_null(json_object_get(json_object_get(paths, "/models"), "post"));
  assert_non_null(json_object_get(json_object_get(paths, "/models/{model_name}"), "put"));
  assert_null(json_object_get(json_object_get(paths, "/models/{model_name}"), "delete"));
  assert_null(json_object_get(json_object_get(paths, "/models/{model_name}/{model_version}"), "delete"));
  json_decref(doc);
  free(response);
}

/* OPTIONS / and /api-description: an OpenAPI 3.0.1 document of the port's APIs (as
 * TorchServe's), and every operation it lists is one the server routes: sent with the
 * API's key, none is answered 405 or 404 "Requested resource is not found" (the
 * router's answer to a path it does not know, in TorchServe's and in v2's error body). */
static void test_server_api_description(void **state) {
  server_fixture *f = *state;
  char keys[2][64];
  time_t expires;
  read_key(f, "inference", keys[HTTP_API_INFERENCE], sizeof keys[0], &expires);
  read_key(f, "management", keys[HTTP_API_MANAGEMENT], sizeof keys[0], &expires);
  static const struct {
    http_api api;
    const char *has, *lacks;
  } apis[] = {
      {HTTP_API_INFERENCE, "/predictions/{model_name}/{model_version}", "/models"},
      {HTTP_API_MANAGEMENT, "/models/{model_name}/{model_version}/set-default", "/ping"},
      {HTTP_API_METRICS, "/metrics", "/models"},
  };
  enum { BIG = 1 << 18 };
  char *response = malloc(BIG), *again = malloc(BIG);
  assert_non_null(response);
  assert_non_null(again);
  int operations = 0;
  for (size_t a = 0; a < sizeof apis / sizeof apis[0]; a++) {
    assert_true(exchange(f, apis[a].api, "OPTIONS / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", response, BIG) > 0);
    assert_true(exchange(f, apis[a].api, "GET /api-description HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", again,
                         BIG) > 0);
    if (strncmp(response, "HTTP/1.1 200", 12) != 0) fail_msg("OPTIONS /: %.300s", response);
    json_t *doc = response_json(response), *doc2 = response_json(again);
    if (!doc || !doc2) fail_msg("not JSON: %.300s", response);
    assert_true(json_equal(doc, doc2));
    assert_string_equal(json_string_value(json_object_get(doc, "openapi")), "3.0.1");
    json_t *paths = json_object_get(doc, "paths");
    if (!json_object_get(paths, apis[a].has)) fail_msg("API %d lacks %s", apis[a].api, apis[a].has);
    /* 507 OutOfMemoryError: a scale whose workers do not fit; never a prediction (503) */
    json_t *scale = json_object_get(json_object_get(paths, "/models/{model_name}"), "put");
    json_t *predict = json_object_get(json_object_get(paths, "/predictions/{model_name}"), "post");
    if (apis[a].api == HTTP_API_MANAGEMENT) {
      json_t *insufficient = json_object_get(json_object_get(scale, "responses"), "507");
      if (!insufficient) fail_msg("PUT /models/{model_name} lists no 507");
      assert_string_equal(json_string_value(json_object_get(insufficient, "description")), "Insufficient Storage");
    }
    /* a register with synchronous=false is answered 202 before its workers run; an
     * unregister of the default version while others exist is 403 (TorchServe's), and
     * no unregister is a 409 */
    json_t *reg = json_object_get(json_object_get(paths, "/models"), "post");
    json_t *unreg = json_object_get(json_object_get(paths, "/models/{model_name}"), "delete");
    if (apis[a].api == HTTP_API_MANAGEMENT) {
      if (!json_object_get(json_object_get(reg, "responses"), "202")) fail_msg("POST /models lists no 202");
      if (!json_object_get(json_object_get(unreg, "responses"), "403")) fail_msg("DELETE /models/{m} lists no 403");
      if (json_object_get(json_object_get(unreg, "responses"), "409")) fail_msg("DELETE /models/{m} lists 409");
    }
    if (apis[a].api == HTTP_API_INFERENCE && json_object_get(json_object_get(predict, "responses"), "507"))
      fail_msg("POST /predictions/{model_name} lists 507");
    if (json_object_get(paths, apis[a].lacks)) fail_msg("API %d has %s", apis[a].api, apis[a].lacks);
    const char *path;
    json_t *item;
    json_object_foreach(paths, path, item) {
      const char *method;
      json_t *op;
      json_object_foreach(item, method, op) {
        char target[256] = "", request[512];
        for (const char *p = path; *p;) { /* {model_name} -> m, {model_version} -> 1 */
          if (*p == '{') {
            strcat(target, strncmp(p, "{model_name}", 12) == 0 ? "m" : "1");
            p = strchr(p, '}') + 1;
          } else {
            strncat(target, p++, 1);
          }
        }
        char upper[16] = "";
        for (size_t i = 0; method[i] && i < sizeof upper - 1; i++) upper[i] = (char)(method[i] - 'a' + 'A');
        const char *key = apis[a].api == HTTP_API_METRICS ? "none" : keys[apis[a].api];
        snprintf(request, sizeof request, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                 "Content-Length: 0\r\nConnection: close\r\n\r\n", upper, target, key);
        assert_true(exchange(f, apis[a].api, request, again, BIG) > 0);
        int status = 0;
        sscanf(again, "HTTP/1.%*d %d", &status);
        if (status == 405 || (status == 404 && strstr(again, "Requested resource is not found"))) /* v2 too */
          fail_msg("%s %s is described but not routed: %.300s", upper, target, again);
        if (!json_object_get(op, "operationId") || !json_is_object(json_object_get(op, "responses")))
          fail_msg("%s %s: no operationId or responses", upper, path);
        operations++;
      }
    }
    json_decref(doc);
    json_decref(doc2);
  }
  assert_true(operations >= 25);
  expect_response(f, HTTP_API_INFERENCE, "DELETE / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 405,
                  "MethodNotAllowedException");
  free(response);
  free(again);
}

/* From key_file.json: the key of `kind` ("management", "inference", "API") and, but for
 * the API key, its expiry (0 when it has none). */
static void read_key(server_fixture *f, const char *kind, char *key, size_t key_size, time_t *expires) {
  FILE *in = fopen(f->key_file, "r");
  assert_non_null(in);
  char text[2048];
  size_t n = fread(text, 1, sizeof text - 1, in);
  fclose(in);
  text[n] = '\0';
  char section[32];
  snprintf(section, sizeof section, "\"%s\": {", kind);
  const char *at = strstr(text, section);
  assert_non_null(at);
  const char *k = strstr(at, "\"key\": \"");
  assert_non_null(k);
  k += strlen("\"key\": \"");
  size_t len = strcspn(k, "\"");
  assert_true(len > 0 && len < key_size);
  memcpy(key, k, len);
  key[len] = '\0';
  *expires = 0;
  const char *e = strstr(at, "\"expiration time\": \"");
  const char *end = strchr(at, '}');
  if (e && e < end) {
    struct tm tm = {0};
    assert_non_null(strptime(e + strlen("\"expiration time\": \""), "%Y-%m-%dT%H:%M:%SZ", &tm));
    *expires = timegm(&tm);
  }
}

static void expect_with_key(server_fixture *f, http_api api, const char *method_path, const char *key, int status) {
  char request[512];
  snprintf(request, sizeof request, "%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 0\r\n"
           "Connection: close\r\n\r\n", method_path, key);
  expect_response(f, api, request, status, NULL);
}

/* token_expiration_min=10.5: both keys expire 630 s after they were made; they work now. */
static void test_keys_live_token_expiration_min(void **state) {
  server_fixture *f = *state;
  time_t now = time(NULL);
  char key[64];
  time_t expires;
  const char *kinds[] = {"management", "inference"};
  for (int i = 0; i < 2; i++) {
    read_key(f, kinds[i], key, sizeof key, &expires);
    if (expires < f->started + 630 || expires > now + 630)
      fail_msg("%s key expires at %lld, want %lld..%lld", kinds[i], (long long)expires, (long long)f->started + 630,
               (long long)now + 630);
  }
  read_key(f, "management", key, sizeof key, &expires);
  expect_with_key(f, HTTP_API_MANAGEMENT, "GET /models", key, 200);
  /* a page token past any list: 400, not a signed overflow of offset + limit */
  expect_with_key(f, HTTP_API_MANAGEMENT, "GET /models?limit=1000&next_page_token=2147483647", key, 400);
  expect_with_key(f, HTTP_API_MANAGEMENT, "GET /models?next_page_token=5", key, 200);
}

/* Keys with no lifetime left are refused; the API key never expires, and a key it
 * renews gets the configured lifetime again (none here). */
static void test_expired_keys_refused(void **state) {
  server_fixture *f = *state;
  char key[64];
  time_t expires;
  read_key(f, "management", key, sizeof key, &expires);
  expect_with_key(f, HTTP_API_MANAGEMENT, "GET /models", key, 401);
  read_key(f, "inference", key, sizeof key, &expires);
  expect_with_key(f, HTTP_API_INFERENCE, "POST /predictions/m", key, 401);
  read_key(f, "API", key, sizeof key, &expires);
  assert_int_equal(expires, 0);
  expect_with_key(f, HTTP_API_MANAGEMENT, "GET /token?type=management", key, 200);
  read_key(f, "management", key, sizeof key, &expires);
  expect_with_key(f, HTTP_API_MANAGEMENT, "GET /models", key, 401);
}

/* The key file is private and rewritten through a fresh temporary file. Regression:
 * the temporary name was key_file.json.tmp<pid>, opened without O_EXCL, so a file or a
 * symlink planted there beforehand kept its mode on the keys or was written through. */
static void test_key_file_private(void **state) {
  server_fixture *f = *state;
  struct stat sb;
  assert_int_equal(stat(f->key_file, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  char victim[192], planted[192];
  snprintf(victim, sizeof victim, "%s/victim", f->dir);
  snprintf(planted, sizeof planted, "%s.tmp%ld", f->key_file, (long)getpid());
  FILE *out = fopen(victim, "w");
  assert_non_null(out);
  fputs("untouched\n", out);
  fclose(out);
  assert_int_equal(symlink(victim, planted), 0);
  char key[64];
  time_t expires;
  read_key(f, "API", key, sizeof key, &expires);
  expect_with_key(f, HTTP_API_MANAGEMENT, "GET /token?type=inference", key, 200);
  char text[64] = {0};
  FILE *in = fopen(victim, "r");
  assert_non_null(in);
  assert_non_null(fgets(text, sizeof text, in));
  fclose(in);
  assert_string_equal(text, "untouched\n");
  assert_int_equal(lstat(f->key_file, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  assert_int_equal(sb.st_mode & 0777, 0600);
  unlink(planted);
  unlink(victim);
}

/* Key checks stay right while /token replaces the key set again and again: a thread
 * asks GET /models with the management key while the test renews the inference key 100
 * times, and on until the thread has made 20 checks (however the two are scheduled, the
 * checks overlap the renewals; 120 s bound only a hang). Each renewal builds a new set from the current one and frees the old one once
 * no HTTP thread can be reading it; the management key is the same in every set, so
 * never a 401. (A read of a freed set would take a race of a few instructions: the
 * sanitizer build is not expected to catch one here.) */
typedef struct checker {
  server_fixture *f;
  const char *key;
  atomic_bool stop;
  atomic_int sent; /* read by the renewing thread */
  int bad;
  char last_bad[256];
} checker;

static void *check_models(void *arg) {
  checker *c = arg;
  char request[512], response[8192];
  snprintf(request, sizeof request, "GET /models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
           "Connection: close\r\n\r\n", c->key);
  for (int i = 0; i < 5000 && !atomic_load(&c->stop); i++, atomic_fetch_add(&c->sent, 1)) {
    int got = 0;
    if (exchange(c->f, HTTP_API_MANAGEMENT, request, response, sizeof response) <= 0 ||
        sscanf(response, "HTTP/1.%*d %d", &got) != 1 || got != 200) {
      c->bad++;
      snprintf(c->last_bad, sizeof c->last_bad, "%.200s", response);
    }
  }
  return NULL;
}

static void test_checks_during_renewals(void **state) {
  server_fixture *f = *state;
  char management[64], api[64];
  time_t expires;
  read_key(f, "management", management, sizeof management, &expires);
  read_key(f, "API", api, sizeof api, &expires);
  checker c = {.f = f, .key = management};
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, check_models, &c), 0);
  double until = core_now_seconds() + 120;
  int renewals = 0;
  for (; (renewals < 100 || atomic_load(&c.sent) < 20) && core_now_seconds() < until; renewals++)
    expect_with_key(f, HTTP_API_MANAGEMENT, "GET /token?type=inference", api, 200);
  atomic_store(&c.stop, true);
  assert_int_equal(pthread_join(thread, NULL), 0);
  int sent = atomic_load(&c.sent);
  if (c.bad) fail_msg("%d of %d checks with the management key failed; last: %s", c.bad, sent, c.last_bad);
  if (sent < 20) fail_msg("%d checks during %d renewals in 120 s", sent, renewals);
}

static void test_server_drain(void **state) {
  server_fixture *f = *state;
  http_server_drain(f->server, 1000);
  expect_response(f, HTTP_API_INFERENCE, "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 503,
                  "Unhealthy");
}

/* A second server made in a process whose first one serves (an embedder's, or a test's):
 * making it must not rewrite what the first one's HTTP threads read to answer, such as
 * the canned error bodies. ThreadSanitizer reported http__reply_init's writes racing
 * with a loop's canned 404 before they were made once per process. */
static void test_second_server_while_one_serves(void **state) {
  server_fixture *f = *state;
  const char *nowhere = "GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  expect_response(f, HTTP_API_INFERENCE, nowhere, 404, "ResourceNotFoundException");
  config_server cfg;
  config_defaults(&cfg);
  cfg.disable_token_authorization = true;
  http_server_params params = {.config = &cfg};
  http_server *second = NULL;
  inferd_status st;
  if (http_server_new(&params, &second, &st) != INFERD_OK) fail_msg("second server: %s", st.message);
  expect_response(f, HTTP_API_INFERENCE, nowhere, 404, "ResourceNotFoundException");
  http_server_free(second);
  config_free(&cfg);
}

/* A model change that reaches the management API after its thread has stopped (the
 * server stops; its loops still serve open connections for a moment) gets 503 at once,
 * instead of waiting in a queue nobody runs and never being answered. */
static void test_management_after_stop(void **state) {
  server_fixture *f = *state;
  char key[128], request[512];
  time_t expires;
  read_key(f, "management", key, sizeof key, &expires);
  http__management_stop(f->server->management);
  snprintf(request, sizeof request,
           "POST /models?url=none.onnx HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 0\r\n"
           "Connection: close\r\n\r\n",
           key);
  expect_response(f, HTTP_API_MANAGEMENT, request, 503, "the server is shutting down");
}

/* A CORS value that would break the response (a newline from a properties escape) is
 * refused at start, naming its key. */
static void test_cors_value_refused(void **state) {
  (void)state;
  static const char *const bad[] = {"https://a.example\r\nSet-Cookie: x=1", "GET\tPOST", "x\x7f"};
  for (int k = 0; k < 3; k++) {
    config_server cfg;
    config_defaults(&cfg);
    cfg.disable_token_authorization = true;
    char **field = k == 0 ? &cfg.cors_allowed_origin : k == 1 ? &cfg.cors_allowed_methods : &cfg.cors_allowed_headers;
    *field = strdup(bad[k]);
    http_server_params params = {.config = &cfg};
    http_server *server = NULL;
    inferd_status st = {0};
    assert_int_equal(http_server_new(&params, &server, &st), INFERD_INVALID_ARG);
    assert_null(server);
    const char *key = k == 0 ? "cors_allowed_origin" : k == 1 ? "cors_allowed_methods" : "cors_allowed_headers";
    if (!strstr(st.message, key) || !strstr(st.message, "control characters")) fail_msg("message: %s", st.message);
    config_free(&cfg);
  }
}

/* Makes the temporary directory `dir` (a mkdtemp template) and names a socket in it. */
static struct sockaddr_un unix_path(char *dir) {
  assert_non_null(mkdtemp(dir));
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  snprintf(sun.sun_path, sizeof sun.sun_path, "%s/inference.sock", dir);
  return sun;
}

/* A socket listening on `sun` with `backlog`, as another server's would. */
static int unix_listen(const struct sockaddr_un *sun, int backlog) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  assert_int_equal(bind(fd, (const struct sockaddr *)sun, sizeof *sun), 0);
  assert_int_equal(listen(fd, backlog), 0);
  return fd;
}

/* Defaults, no token auth, the inference API on the unix socket `path`, the others on
 * free ports of 127.0.0.1. */
static void config_unix_inference(config_server *cfg, const char *path) {
  config_defaults(cfg);
  cfg->disable_token_authorization = true;
  cfg->number_of_netty_threads = 2;
  cfg->inference_address = (config_address){"unix", "", 0};
  snprintf(cfg->inference_address.host, sizeof cfg->inference_address.host, "%s", path);
  cfg->management_address = cfg->metrics_address = (config_address){"http", "127.0.0.1", 0};
}

/* A start that fails after a unix socket was bound (here: the management port is held by
 * another socket) removes the socket file it made; it used to stay, and the next start on
 * the same path failed with "Address already in use" although nothing served it. */
static void test_unix_socket_removed_after_failed_start(void **state) {
  (void)state;
  int holder = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sin = {.sin_family = AF_INET};
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sin;
  assert_int_equal(bind(holder, (struct sockaddr *)&sin, sizeof sin), 0);
  assert_int_equal(listen(holder, 1), 0);
  assert_int_equal(getsockname(holder, (struct sockaddr *)&sin, &len), 0);

  char dir[] = "/tmp/inferd-test-unix.XXXXXX";
  struct sockaddr_un sun = unix_path(dir);
  const char *path = sun.sun_path;
  config_server cfg;
  config_unix_inference(&cfg, path);
  cfg.management_address.port = ntohs(sin.sin_port);
  http_server_params params = {.config = &cfg};
  http_server *server = NULL;
  inferd_status st;
  assert_int_equal(http_server_new(&params, &server, &st), INFERD_OK);
  inferd_code code = http_server_start(server, &st);
  http_server_free(server);
  close(holder);
  bool left = access(path, F_OK) == 0;
  unlink(path);
  rmdir(dir);
  config_free(&cfg);
  assert_int_equal(code, INFERD_UNAVAILABLE);
  if (left) fail_msg("the failed start left its socket file %s behind", path);
}

/* A unix socket file left by a server that did not stop (SIGKILL, a crash) does not keep
 * the next start from binding: nothing accepts on it, so it is removed and bound again
 * (TorchServe deletes the path before it binds). A socket someone still listens on is
 * refused with "Address already in use" and left alone. */
static void test_unix_socket_stale_file_replaced(void **state) {
  (void)state;
  char dir[] = "/tmp/inferd-test-unix.XXXXXX";
  struct sockaddr_un sun = unix_path(dir);
  int stale = unix_listen(&sun, 1);

  config_server cfg;
  config_unix_inference(&cfg, sun.sun_path);
  http_server_params params = {.config = &cfg};
  http_server *server = NULL;
  inferd_status st;
  /* someone listens there: refused, and the file stays theirs */
  assert_int_equal(http_server_new(&params, &server, &st), INFERD_OK);
  inferd_code code = http_server_start(server, &st);
  http_server_free(server);
  assert_int_equal(code, INFERD_UNAVAILABLE);
  assert_int_equal(access(sun.sun_path, F_OK), 0);
  /* its owner is gone without removing it: the start takes the path over */
  close(stale);
  assert_int_equal(http_server_new(&params, &server, &st), INFERD_OK);
  code = http_server_start(server, &st);
  if (code == INFERD_OK) code = http_server_load_models(server, &st);
  if (code != INFERD_OK) fail_msg("start over a stale socket file: %s", st.message);
  int client = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_int_equal(connect(client, (struct sockaddr *)&sun, sizeof sun), 0);
  const char ping[] = "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  assert_int_equal(send(client, ping, sizeof ping - 1, MSG_NOSIGNAL), (ssize_t)(sizeof ping - 1));
  char response[1024] = "";
  ssize_t got = recv(client, response, sizeof response - 1, MSG_WAITALL);
  close(client);
  http_server_free(server);
  bool left = access(sun.sun_path, F_OK) == 0;
  unlink(sun.sun_path);
  rmdir(dir);
  config_free(&cfg);
  assert_true(got > 0);
  if (strncmp(response, "HTTP/1.1 200", 12) != 0) fail_msg("/ping over the socket: %s", response);
  if (left) fail_msg("the server left its socket file behind");
}

/* The socket file is removed at the end only while it is still the one this server
 * bound. Once its path holds another server's socket (the operator removed the file and
 * started another server there, or a start came between this server closing its
 * listeners and removing the file, saw nothing accepting and took the path over), that
 * file stays: removing it left the other server running but unreachable. */
static void test_unix_socket_of_another_server_kept(void **state) {
  (void)state;
  char dir[] = "/tmp/inferd-test-unix.XXXXXX";
  struct sockaddr_un sun = unix_path(dir);
  config_server cfg;
  config_unix_inference(&cfg, sun.sun_path);
  http_server_params params = {.config = &cfg};
  http_server *server = NULL;
  inferd_status st;
  assert_int_equal(http_server_new(&params, &server, &st), INFERD_OK);
  if (http_server_start(server, &st) != INFERD_OK) fail_msg("start: %s", st.message);
  /* the path now belongs to someone else */
  assert_int_equal(unlink(sun.sun_path), 0);
  int other = unix_listen(&sun, 1);
  http_server_free(server);
  bool kept = access(sun.sun_path, F_OK) == 0;
  close(other);
  unlink(sun.sun_path);
  rmdir(dir);
  config_free(&cfg);
  if (!kept) fail_msg("http_server_free removed the socket file of another server");
}

/* A start runs in a thread so that a start that blocks can be reported instead of
 * hanging the test. */
typedef struct start_attempt {
  http_server *server;
  inferd_status st;
  inferd_code code;
  atomic_bool done;
} start_attempt;

static void *start_on_thread(void *arg) {
  start_attempt *a = arg;
  a->code = http_server_start(a->server, &a->st);
  atomic_store(&a->done, true);
  return NULL;
}

/* A live server whose listen backlog is full (its threads are stuck, or it is stopped
 * with SIGSTOP, while clients keep connecting) still holds its path: a start is
 * refused with "Address already in use" at once. The check whether the path is stale
 * connected with a blocking socket, which waits for room in that backlog: the start
 * hung for as long as the other server did. */
static void test_unix_socket_full_backlog_refused(void **state) {
  (void)state;
  char dir[] = "/tmp/inferd-test-unix.XXXXXX";
  struct sockaddr_un sun = unix_path(dir);
  int live = unix_listen(&sun, 0);
  int waiting[8], n = 0; /* connections that nobody accepts, until the backlog is full */
  for (; n < 8; n++) {
    waiting[n] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (connect(waiting[n], (struct sockaddr *)&sun, sizeof sun) != 0) break;
  }
  assert_true(n < 8 && errno == EAGAIN);

  config_server cfg;
  config_unix_inference(&cfg, sun.sun_path);
  http_server_params params = {.config = &cfg};
  start_attempt attempt = {.done = false};
  assert_int_equal(http_server_new(&params, &attempt.server, &attempt.st), INFERD_OK);
  pthread_t thread;
  assert_int_equal(pthread_create(&thread, NULL, start_on_thread, &attempt), 0);
  for (int ms = 0; ms < 10000 && !atomic_load(&attempt.done); ms += 10) usleep(10000);
  bool hung = !atomic_load(&attempt.done);
  close(live); /* wakes a blocked connect: its thread can be joined */
  pthread_join(thread, NULL);
  http_server_free(attempt.server);
  for (int i = 0; i <= n; i++) close(waiting[i]);
  unlink(sun.sun_path);
  rmdir(dir);
  config_free(&cfg);
  if (hung) fail_msg("the start blocked for 10 s on a live socket whose backlog is full");
  assert_int_equal(attempt.code, INFERD_UNAVAILABLE);
}

/* A host name with IPv6 and IPv4 addresses ("localhost" where /etc/hosts also maps ::1,
 * as Debian's does, and glibc sorts ::1 first) is bound at its IPv4 address, as
 * TorchServe's InetSocketAddress does (Java prefers IPv4), so that clients of
 * 127.0.0.1 reach it; it used to be bound at the first address only, ::1. A name with
 * only IPv6 addresses keeps the first. */
static void test_listen_address_prefers_ipv4(void **state) {
  (void)state;
  struct sockaddr_in6 six = {.sin6_family = AF_INET6};
  struct sockaddr_in four = {.sin_family = AF_INET};
  struct addrinfo v4 = {.ai_family = AF_INET, .ai_addr = (struct sockaddr *)&four, .ai_addrlen = sizeof four};
  struct addrinfo v6b = {.ai_family = AF_INET6, .ai_addr = (struct sockaddr *)&six, .ai_addrlen = sizeof six};
  struct addrinfo v6 = {.ai_family = AF_INET6, .ai_addr = (struct sockaddr *)&six, .ai_addrlen = sizeof six,
                        .ai_next = &v4};
  assert_ptr_equal(http__listen_address(&v6), &v4);
  assert_ptr_equal(http__listen_address(&v4), &v4);
  v6.ai_next = &v6b;
  assert_ptr_equal(http__listen_address(&v6), &v6);
}

/* Whether this host has ::1: a container whose IPv6 is disabled has none, yet binds [::]
 * (dual-stack, IPv4 only then). The tests below check their IPv6 clients only where it is. */
static bool ipv6_loopback(void) {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  struct sockaddr_in6 one = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  bool usable = fd >= 0 && bind(fd, (struct sockaddr *)&one, sizeof one) == 0;
  if (fd >= 0) close(fd);
  return usable;
}

/* http://[::] takes IPv4 clients as well as IPv6 ones, as Netty's wildcard socket does
 * (Java leaves IPV6_V6ONLY off); it used to take IPv6 clients only. */
static void test_ipv6_wildcard_takes_ipv4(void **state) {
  (void)state;
  config_server cfg;
  config_defaults(&cfg);
  cfg.disable_token_authorization = true;
  cfg.number_of_netty_threads = 2;
  cfg.inference_address = (config_address){"http", "::", 0};
  cfg.management_address = cfg.metrics_address = (config_address){"http", "127.0.0.1", 0};
  http_server_params params = {.config = &cfg};
  http_server *server = NULL;
  inferd_status st;
  assert_int_equal(http_server_new(&params, &server, &st), INFERD_OK);
  if (http_server_start(server, &st) != INFERD_OK) fail_msg("start on [::]: %s", st.message);
  uint16_t port = htons((uint16_t)http_server_port(server, HTTP_API_INFERENCE));
  struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = port};
  v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = port, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  const char *ping = "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  char r4[1024] = "", r6[1024] = "";
  int n4 = exchange_at((struct sockaddr *)&v4, sizeof v4, ping, r4, sizeof r4);
  bool has_v6 = ipv6_loopback();
  int n6 = has_v6 ? exchange_at((struct sockaddr *)&v6, sizeof v6, ping, r6, sizeof r6) : 0;
  http_server_drain(server, 1000);
  http_server_free(server);
  config_free(&cfg);
  /* no models are loaded: /ping answers 503, the same to both */
  if (n4 <= 0 || strncmp(r4, "HTTP/1.1 503 ", 13) != 0)
    fail_msg("127.0.0.1 to a server on [::]: %s", n4 <= 0 ? "refused" : r4);
  if (has_v6 && (n6 <= 0 || strncmp(r6, "HTTP/1.1 503 ", 13) != 0))
    fail_msg("::1 to a server on [::]: %s", n6 <= 0 ? "refused" : r6);
}

/* http://[::]:P beside http://127.0.0.1:P in one config (two APIs on one port, told
 * apart by the client's address family) starts, as it did when [::] was IPv6-only: the
 * dual-stack [::] took the IPv4 side of P too, and the start failed with "Address
 * already in use" against its own listener. IPv4 clients of P reach the IPv4 listener,
 * IPv6 ones [::]. */
static void test_ipv6_wildcard_beside_ipv4_on_one_port(void **state) {
  (void)state;
  /* a port free on both sides: a dual-stack socket bound to port 0 holds both */
  int picker = socket(AF_INET6, SOCK_STREAM, 0), off = 0;
  setsockopt(picker, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  struct sockaddr_in6 any = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
  socklen_t any_len = sizeof any;
  if (bind(picker, (struct sockaddr *)&any, sizeof any) != 0 || getsockname(picker, (struct sockaddr *)&any, &any_len))
    fail_msg("no free port: %s", strerror(errno));
  int port = ntohs(any.sin6_port);
  close(picker);
  config_server cfg;
  config_defaults(&cfg);
  cfg.disable_token_authorization = true;
  cfg.number_of_netty_threads = 2;
  cfg.inference_address = (config_address){"http", "127.0.0.1", port};
  cfg.management_address = (config_address){"http", "::", port};
  cfg.metrics_address = (config_address){"http", "127.0.0.1", 0};
  http_server_params params = {.config = &cfg};
  http_server *server = NULL;
  inferd_status st;
  assert_int_equal(http_server_new(&params, &server, &st), INFERD_OK);
  inferd_code started = http_server_start(server, &st);
  char r4[1024] = "", r6[1024] = "";
  int n4 = -1, n6 = -1;
  bool has_v6 = ipv6_loopback();
  if (started == INFERD_OK) {
    struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    const char *models = "GET /models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    n4 = exchange_at((struct sockaddr *)&v4, sizeof v4, models, r4, sizeof r4);
    if (has_v6) n6 = exchange_at((struct sockaddr *)&v6, sizeof v6, models, r6, sizeof r6);
    http_server_drain(server, 1000);
  }
  http_server_free(server);
  config_free(&cfg);
  if (started != INFERD_OK) fail_msg("start with [::]:%d beside 127.0.0.1:%d: %s", port, port, st.message);
  /* /models is the management API's: the inference API does not know it */
  if (n4 <= 0 || strncmp(r4, "HTTP/1.1 404 ", 13) != 0)
    fail_msg("127.0.0.1:%d (inference) GET /models: %s", port, n4 <= 0 ? "refused" : r4);
  if (has_v6 && (n6 <= 0 || strncmp(r6, "HTTP/1.1 200 ", 13) != 0))
    fail_msg("[::1]:%d (management) GET /models: %s", port, n6 <= 0 ? "refused" : r6);
}

/* jansson's allocator for test_describe_out_of_memory: the saved pair, failing the
 * allocation numbered fail_at (0: the first) only. */
static json_malloc_t saved_malloc;
static json_free_t saved_free;
static long allocations, fail_at;

static void *failing_malloc(size_t size) { return allocations++ == fail_at ? NULL : saved_malloc(size); }

/* The API description with memory running out at each of its allocations in turn: each
 * build is the whole document or NULL (http__describe then answers 503), never a
 * document with parts missing, and nothing freed is used (ASan). A failed
 * json_object_set_new frees the value it was given: the path item added to "paths" was
 * used after that, and a failed append or set was ignored, leaving a partial document. */
static void test_describe_out_of_memory(void **state) {
  (void)state;
  static const unsigned apis[] = {1u << HTTP_API_METRICS, 1u << HTTP_API_MANAGEMENT,
                                  (1u << HTTP_API_INFERENCE) | (1u << HTTP_API_MANAGEMENT) | (1u << HTTP_API_METRICS)};
  json_get_alloc_funcs(&saved_malloc, &saved_free);
  for (size_t a = 0; a < sizeof apis / sizeof apis[0]; a++) {
    json_t *whole = http__describe_document(apis[a], true);
    assert_non_null(whole);
    json_set_alloc_funcs(failing_malloc, saved_free);
    long partial = -1, built = 0;
    for (fail_at = 0;; fail_at++) {
      allocations = 0;
      json_t *doc = http__describe_document(apis[a], true);
      bool complete = allocations <= fail_at; /* no allocation failed */
      if (doc && !json_equal(doc, whole) && partial < 0) partial = fail_at;
      built += doc != NULL;
      json_decref(doc);
      if (complete) break;
    }
    json_set_alloc_funcs(saved_malloc, saved_free);
    json_decref(whole);
    if (partial >= 0) fail_msg("APIs %#x: allocation %ld failing gave a partial document", apis[a], partial);
    assert_int_equal(built, 1); /* only the build where nothing failed */
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_boundary),
      cmocka_unit_test(test_multipart_find),
      cmocka_unit_test(test_error_body_utf8),
      cmocka_unit_test(test_buf_json_string_utf8),
      cmocka_unit_test(test_float_json),
      cmocka_unit_test(test_log_one_line),
      cmocka_unit_test(test_url_file_name),
      cmocka_unit_test(test_v2_outputs),
      cmocka_unit_test(test_v2_nested_data),
      cmocka_unit_test(test_v2_fp32_range),
      cmocka_unit_test(test_v2_header_length),
      cmocka_unit_test(test_v2_field_errors),
      cmocka_unit_test(test_v2_binary_not_finite),
      cmocka_unit_test(test_v2_input_checks),
      cmocka_unit_test(test_v2_data_alloc),
      cmocka_unit_test(test_json_arena_steady_state),
      cmocka_unit_test(test_json_arena_keep_limit),
      cmocka_unit_test(test_json_arena_outside_objects),
      cmocka_unit_test(test_answer_blocks),
      cmocka_unit_test(test_hook_table),
      cmocka_unit_test(test_ipv6_wildcard_takes_ipv4),
      cmocka_unit_test(test_ipv6_wildcard_beside_ipv4_on_one_port),
      cmocka_unit_test(test_unix_socket_removed_after_failed_start),
      cmocka_unit_test(test_unix_socket_stale_file_replaced),
      cmocka_unit_test(test_unix_socket_of_another_server_kept),
      cmocka_unit_test(test_unix_socket_full_backlog_refused),
      cmocka_unit_test(test_listen_address_prefers_ipv4),
      cmocka_unit_test(test_describe_out_of_memory),
      cmocka_unit_test_setup_teardown(test_server_routes, server_setup, server_teardown),
      cmocka_unit_test_setup_teardown(test_server_metrics_filter, server_setup, server_teardown),
      cmocka_unit_test_setup_teardown(test_server_drain, server_setup, server_teardown),
      cmocka_unit_test_setup_teardown(test_second_server_while_one_serves, server_setup, server_teardown),
      cmocka_unit_test_setup_teardown(test_server_cors, server_setup_cors, server_teardown),
      cmocka_unit_test_setup_teardown(test_server_no_cors, server_setup, server_teardown),
      cmocka_unit_test_setup_teardown(test_server_api_description_no_model_api, server_setup, server_teardown),
      cmocka_unit_test(test_cors_value_refused),
      cmocka_unit_test_setup_teardown(test_management_after_stop, server_setup_model_api, server_teardown),
      cmocka_unit_test_setup_teardown(test_server_api_description, server_setup_model_api, server_teardown),
      cmocka_unit_test_setup_teardown(test_key_file_private, server_setup, server_teardown),
      cmocka_unit_test_setup_teardown(test_checks_during_renewals, server_setup, server_teardown),
      cmocka_unit_test_setup_teardown(test_keys_live_token_expiration_min, server_setup_fractional_minute_keys,
                                      server_teardown),
      cmocka_unit_test_setup_teardown(test_expired_keys_refused, server_setup_expired_keys, server_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
