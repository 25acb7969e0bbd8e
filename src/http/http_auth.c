/*
 * http_auth.c - TorchServe's token authorization (on by default; --disable-token-auth
 * or disable_token_authorization=true turns it off).
 *
 * At start three random keys are made from /dev/urandom and written to key_file.json
 * in the working directory (mode 0600, replaced atomically through a fresh temporary
 * file: see write_key_file), in TorchServe's layout:
 *   {"management": {"key": "...", "expiration time": "2024-01-16T22:23:32Z"},
 *    "inference":  {"key": "...", "expiration time": "..."},
 *    "API":        {"key": "..."}}
 * The inference key guards the inference API (port 8080), the management key the
 * management API (8081), the API key only GET /token?type=inference|management, which
 * replaces that key (and its expiry) and rewrites the file. Inference and management
 * keys expire token_expiration_min minutes (default 60, fractions allowed, as in
 * TorchServe) after they were made or renewed; the API key never does. The server makes
 * the keys before the management API exists (http__auth_new has no config), so
 * http__management_new applies token_expiration_min with http__auth_set_expiration,
 * which re-dates the two keys from now and rewrites the file, before any request is
 * served.
 * Requests carry "Authorization: Bearer <key>"; a missing, wrong or expired key gets
 * 401 with a message saying where the key is.
 *
 * Differences from TorchServe, on purpose: keys have 144 random bits (24 base64url
 * characters) instead of 48; the comparison takes time independent of where the keys
 * differ; /ping, /v2/health/live and /v2/health/ready and the metrics port need no key (load balancer and
 * kubelet probes carry no secrets; they reveal only liveness); a bad key is 401, not
 * 400. The key file is removed when the server stops, as TorchServe does.
 *
 * Threading: the current keys are one immutable key set behind an atomic pointer.
 * Checks (the server's HTTP threads) load the pointer and compare inside a read section
 * (http__read_begin); /token builds a new set under a mutex, publishes it, waits out the
 * sections that may still read the old one (http__read_synchronize) and frees it. A
 * check on any other thread (a test, the fuzzer) must not race a regeneration.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "http/http_internal.h"

enum {
  KEY_BYTES = 18,                     /* random bytes per key */
  KEY_CHARS = KEY_BYTES / 3 * 4,      /* base64url, no padding */
  KEY_LIFETIME_SECONDS = 60 * 60,     /* until http__auth_set_expiration: TorchServe's
                                         default token_expiration_min */
};

typedef struct key_set {
  char keys[HTTP__KEY_COUNT][KEY_CHARS + 1];
  time_t expires[HTTP__KEY_COUNT]; /* wall clock; 0: never (the API key) */
} key_set;

struct http__auth {
  bool enabled;
  const http_server *server; /* whose HTTP threads check keys; NULL: none do */
  char *path;
  time_t lifetime;      /* seconds an inference or management key lives; under lock */
  _Atomic(key_set *) current;
  pthread_mutex_t lock; /* serializes regenerations and the file */
};

static const char *const kind_names[HTTP__KEY_COUNT] = {"inference", "management", "API"};


static inferd_code random_key(char out[KEY_CHARS + 1], inferd_status *st) {
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  unsigned char raw[KEY_BYTES];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return core_fail(st, INFERD_INTERNAL, "token auth: cannot open /dev/urandom: %s", strerror(errno));
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = read(fd, raw + got, sizeof raw - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return core_fail(st, INFERD_INTERNAL, "token auth: cannot read /dev/urandom");
    }
    got += (size_t)n;
  }
  close(fd);
  for (int i = 0, o = 0; i < KEY_BYTES; i += 3) {
    unsigned v = (unsigned)raw[i] << 16 | (unsigned)raw[i + 1] << 8 | raw[i + 2];
    out[o++] = alphabet[v >> 18 & 63];
    out[o++] = alphabet[v >> 12 & 63];
    out[o++] = alphabet[v >> 6 & 63];
    out[o++] = alphabet[v & 63];
  }
  out[KEY_CHARS] = '\0';
  return INFERD_OK;
}

static void iso8601(time_t t, char out[32]) {
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Writes the key file next to its final path, then renames it over (readers never see
 * half a file). The temporary file is a new one (mkostemp: O_EXCL, a random name), so
 * neither a file nor a symlink someone put there beforehand can be written through or
 * leave its mode on the keys; it is made 0600 before a key goes in, as TorchServe
 * forces rw------- on its key file. Called with the lock held (or before any thread
 * runs). */
static inferd_code write_key_file(const char *path, const key_set *ks, inferd_status *st) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp)
    return core_fail(st, INFERD_INVALID_ARG, "token auth: key file path too long");
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) return core_fail(st, INFERD_INTERNAL, "token auth: cannot write %s: %s", tmp, strerror(errno));
  if (fchmod(fd, 0600) != 0) {
    int err = errno;
    close(fd);
    unlink(tmp);
    return core_fail(st, INFERD_INTERNAL, "token auth: cannot make %s private: %s", tmp, strerror(err));
  }
  FILE *f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    unlink(tmp);
    return core_fail(st, INFERD_INTERNAL, "token auth: cannot write %s", tmp);
  }
  char m[32], i[32];
  iso8601(ks->expires[HTTP__KEY_MANAGEMENT], m);
  iso8601(ks->expires[HTTP__KEY_INFERENCE], i);
  fprintf(f,
          "{\n"
          "  \"management\": {\n    \"key\": \"%s\",\n    \"expiration time\": \"%s\"\n  },\n"
          "  \"inference\": {\n    \"key\": \"%s\",\n    \"expiration time\": \"%s\"\n  },\n"
          "  \"API\": {\n    \"key\": \"%s\"\n  }\n"
          "}\n",
          ks->keys[HTTP__KEY_MANAGEMENT], m, ks->keys[HTTP__KEY_INFERENCE], i, ks->keys[HTTP__KEY_API]);
  bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    int err = errno;
    unlink(tmp);
    return core_fail(st, INFERD_INTERNAL, "token auth: cannot write %s: %s", path, strerror(err));
  }
  return INFERD_OK;
}

inferd_code http__auth_new(bool enabled, const char *key_file, const http_server *server, http__auth **out,
                          inferd_status *st) {
  http__auth *auth = calloc(1, sizeof *auth);
  if (!auth) return core_fail(st, INFERD_NO_MEMORY, "token auth: out of memory");
  auth->enabled = enabled;
  auth->server = server;
  auth->lifetime = KEY_LIFETIME_SECONDS;
  pthread_mutex_init(&auth->lock, NULL);
  if (!enabled) {
    *out = auth;
    return INFERD_OK;
  }
  key_set *ks = calloc(1, sizeof *ks);
  auth->path = strdup(key_file ? key_file : "key_file.json");
  if (!ks || !auth->path) {
    free(ks);
    http__auth_free(auth);
    return core_fail(st, INFERD_NO_MEMORY, "token auth: out of memory");
  }
  time_t now = time(NULL);
  inferd_code code = INFERD_OK;
  for (int k = 0; k < HTTP__KEY_COUNT && code == INFERD_OK; k++) {
    code = random_key(ks->keys[k], st);
    ks->expires[k] = k == HTTP__KEY_API ? 0 : now + KEY_LIFETIME_SECONDS;
  }
  if (code == INFERD_OK) code = write_key_file(auth->path, ks, st);
  if (code != INFERD_OK) {
    free(ks);
    free(auth->path);
    auth->path = NULL; /* nothing written: nothing to remove */
    http__auth_free(auth);
    return code;
  }
  atomic_store(&auth->current, ks);
  core_log(CORE_LOG_INFO,
           "token authorization is on: keys are in %s (send 'Authorization: Bearer <key>'; "
           "--disable-token-auth turns this off)",
           auth->path);
  *out = auth;
  return INFERD_OK;
}

void http__auth_free(http__auth *auth) {
  if (!auth) return;
  free(atomic_load(&auth->current));
  if (auth->path) unlink(auth->path);
  free(auth->path);
  pthread_mutex_destroy(&auth->lock);
  free(auth);
}

/* Constant time in key_len: touches every byte of the key whatever `given` is. */
static bool key_equal(const char *given, size_t given_len, const char *key, size_t key_len) {
  unsigned diff = given_len != key_len;
  for (size_t i = 0; i < key_len; i++) diff |= (unsigned char)(i < given_len ? given[i] : 0) ^ (unsigned char)key[i];
  return diff == 0;
}

bool http__auth_check(http__auth *auth, const h2o_req_t *req, http__key_kind kind) {
  if (!auth->enabled) return true;
  ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
  if (i < 0) return false;
  const char *v = req->headers.entries[i].value.base;
  size_t n = req->headers.entries[i].value.len;
  if (n < 7 || !h2o_lcstris(v, 6, H2O_STRLIT("bearer")) || (v[6] != ' ' && v[6] != '\t')) return false;
  v += 7, n -= 7;
  while (n && (*v == ' ' || *v == '\t')) v++, n--;
  while (n && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
  bool opened = http__read_begin(auth->server);
  const key_set *ks = atomic_load(&auth->current);
  bool ok = key_equal(v, n, ks->keys[kind], KEY_CHARS);
  time_t expires = ks->expires[kind];
  http__read_end(opened);
  return ok && (expires == 0 || time(NULL) < expires);
}

/* Under the lock: makes ks current, waits out the checks that may still read the old
 * set, frees it. */
static void publish_locked(http__auth *auth, key_set *ks) {
  key_set *old = atomic_exchange(&auth->current, ks);
  http__read_synchronize(auth->server);
  free(old);
}

inferd_code http__auth_regenerate(http__auth *auth, http__key_kind kind, inferd_status *st) {
  if (!auth->enabled) return core_fail(st, INFERD_UNSUPPORTED, "token authorization is disabled");
  if (kind != HTTP__KEY_INFERENCE && kind != HTTP__KEY_MANAGEMENT)
    return core_fail(st, INFERD_INVALID_ARG, "token type must be 'inference' or 'management'");
  pthread_mutex_lock(&auth->lock);
  key_set *old = atomic_load(&auth->current);
  key_set *ks = malloc(sizeof *ks);
  inferd_code code = ks ? INFERD_OK : core_fail(st, INFERD_NO_MEMORY, "token auth: out of memory");
  if (code == INFERD_OK) {
    *ks = *old;
    ks->expires[kind] = time(NULL) + auth->lifetime;
    code = random_key(ks->keys[kind], st);
  }
  if (code == INFERD_OK) code = write_key_file(auth->path, ks, st);
  if (code == INFERD_OK) {
    publish_locked(auth, ks);
    core_log(CORE_LOG_INFO, "token authorization: new %s key written to %s", kind_names[kind], auth->path);
  } else {
    free(ks);
  }
  pthread_mutex_unlock(&auth->lock);
  return code;
}

inferd_code http__auth_set_expiration(http__auth *auth, double minutes, inferd_status *st) {
  if (!(minutes > 0 && minutes <= 525600))
    return core_fail(st, INFERD_INVALID_ARG, "token_expiration_min %g is not a number of minutes above 0", minutes);
  pthread_mutex_lock(&auth->lock);
  auth->lifetime = (time_t)(minutes * 60); /* as TorchServe: whole seconds, truncated */
  inferd_code code = INFERD_OK;
  key_set *old = auth->enabled ? atomic_load(&auth->current) : NULL;
  if (old) {
    key_set *ks = malloc(sizeof *ks);
    code = ks ? INFERD_OK : core_fail(st, INFERD_NO_MEMORY, "token auth: out of memory");
    if (code == INFERD_OK) {
      *ks = *old;
      time_t now = time(NULL);
      ks->expires[HTTP__KEY_INFERENCE] = ks->expires[HTTP__KEY_MANAGEMENT] = now + auth->lifetime;
      code = write_key_file(auth->path, ks, st);
      if (code == INFERD_OK)
        publish_locked(auth, ks);
      else
        free(ks);
    }
  }
  pthread_mutex_unlock(&auth->lock);
  if (code == INFERD_OK && old)
    core_log(CORE_LOG_INFO, "token authorization: inference and management keys expire after %g minutes", minutes);
  return code;
}
