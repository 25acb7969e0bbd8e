/*
 * http_fetch.c - registering a model from an http:// or https:// url, as TorchServe's
 * POST /models?url=https://host/path/NAME.mar does: the archive is downloaded into
 * model_store as NAME (the url path's last segment) and registered from there; an
 * unregister deletes that file again (TorchServe's ModelArchive.removeModel).
 *
 * Checks, in TorchServe's order and with its messages where it has one:
 *   - the url must match allowed_urls (config_url_allowed: one of its comma-separated
 *     regular expressions matches the whole url, in any case): else 404 "Given URL ...
 *     does not match any allowed URL(s)" (TorchServe's ModelNotFoundException); so must
 *     every url a redirect leads to (at most 5), which are followed here, one at a time,
 *     not by curl, so that allowed_urls cannot be left by a redirect;
 *   - NAME must already be absent from model_store: else 409 "Model file already exists
 *     NAME" (TorchServe answers 500, having thrown from the same check);
 *   - the download must succeed: else 400 "Failed to download archive from: URL", with
 *     curl's reason or the HTTP status.
 * NAME must also be a valid model name ([A-Za-z0-9][A-Za-z0-9._-]*, after the query and
 * fragment are cut off), so that a url cannot name a hidden file, a directory or a path
 * outside the store; a url without a path names none.
 *
 * The download goes to a temporary file in model_store (".download-PID-N", made with
 * the umask's mode as any file), which is linked to NAME only when it is whole (link
 * fails if NAME appeared meanwhile), so a failed or cut download leaves nothing under
 * NAME. It runs on the management thread (libcurl's easy interface: it blocks the other
 * management calls, as a register that loads a large model does) with a 30 s connect
 * timeout, a stall limit (below 16 KiB/s for 60 s), an hour at most, at most
 * HTTP__FETCH_MAX_BYTES, http and https only, and stops when the server starts draining
 * (503).
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http/http_internal.h"

enum { HTTP__FETCH_MAX_BYTES_GIB = 16, FETCH_MAX_REDIRECTS = 5, FETCH_URL_MAX = 4096 };
#define HTTP__FETCH_MAX_BYTES ((curl_off_t)HTTP__FETCH_MAX_BYTES_GIB << 30)

bool http_url_is_remote(const char *url) {
  return strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0;
}

bool http_url_file_name(const char *url, char *out, size_t size) {
  const char *scheme = strstr(url, "://");
  size_t len = strcspn(url, "?#"), start = len, host = scheme ? (size_t)(scheme - url) + 3 : 0;
  while (start > host && url[start - 1] != '/') start--;
  if (start == host) return false; /* no path after the host: no file name */
  if (len - start >= size) return false;
  memcpy(out, url + start, len - start);
  out[len - start] = '\0';
  return config_valid_model_name(out);
}

typedef struct fetch_sink {
  int fd;
  int write_errno; /* why a write failed; 0: none did */
  const atomic_bool *cancel;
} fetch_sink;

static size_t sink_write(char *data, size_t size, size_t count, void *ctx) {
  fetch_sink *s = ctx;
  size_t total = size * count, done = 0;
  while (done < total) {
    ssize_t n = write(s->fd, data + done, total - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      s->write_errno = n < 0 ? errno : EIO;
      return 0; /* curl stops with CURLE_WRITE_ERROR */
    }
    done += (size_t)n;
  }
  return total;
}

static int sink_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
  const fetch_sink *s = ctx;
  return atomic_load(s->cancel) ? 1 : 0; /* nonzero: CURLE_ABORTED_BY_CALLBACK */
}

/* Empties the file for the next hop of a redirect (its 3xx body was written to it). */
static bool sink_rewind(fetch_sink *s) {
  if (ftruncate(s->fd, 0) == 0 && lseek(s->fd, 0, SEEK_SET) == 0) return true;
  s->write_errno = errno;
  return false;
}

/* Why a transfer failed, as the answer's status. */
static inferd_code transfer_failed(CURLcode rc, long status, const char *url, const char *reason,
                                   const fetch_sink *sink, inferd_status *st) {
  if (rc == CURLE_ABORTED_BY_CALLBACK)
    return core_fail(st, INFERD_UNAVAILABLE, "The server is shutting down: the download of %s was stopped", url);
  if (rc == CURLE_HTTP_RETURNED_ERROR)
    return core_fail(st, INFERD_INVALID_ARG, "Failed to download archive from: %s: HTTP status %ld", url, status);
  if (rc == CURLE_FILESIZE_EXCEEDED)
    return core_fail(st, INFERD_INVALID_ARG, "Failed to download archive from: %s: larger than %d GiB", url,
                     HTTP__FETCH_MAX_BYTES_GIB);
  if (rc == CURLE_WRITE_ERROR && sink->write_errno)
    return core_fail(st, INFERD_INTERNAL, "Failed to save the archive downloaded from %s: %s", url,
                     strerror(sink->write_errno));
  return core_fail(st, INFERD_INVALID_ARG, "Failed to download archive from: %s: %s", url,
                   reason[0] ? reason : curl_easy_strerror(rc));
}

/* Downloads url to the open file sink->fd, following redirects that allowed_urls allows. */
static inferd_code download(const config_server *cfg, const char *url, fetch_sink *sink, inferd_status *st) {
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    return core_fail(st, INFERD_INTERNAL, "curl_global_init failed");
  CURL *e = curl_easy_init();
  if (!e) {
    curl_global_cleanup();
    return core_fail(st, INFERD_NO_MEMORY, "out of memory");
  }
  char reason[CURL_ERROR_SIZE] = "", hop[FETCH_URL_MAX];
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 16384L);
  curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(e, CURLOPT_TIMEOUT, 3600L);
  curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, HTTP__FETCH_MAX_BYTES);
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "inferd");
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, reason);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, sink_write);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, sink);
  curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, sink_progress);
  curl_easy_setopt(e, CURLOPT_XFERINFODATA, sink);
  curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
  const char *at = url;
  inferd_code code = INFERD_OK;
  for (int hops = 0;; hops++) {
    curl_easy_setopt(e, CURLOPT_URL, at);
    CURLcode rc = curl_easy_perform(e);
    long status = 0;
    char *next = NULL;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK) {
      code = transfer_failed(rc, status, at, reason, sink, st);
    } else if (status >= 300 && status < 400 && curl_easy_getinfo(e, CURLINFO_REDIRECT_URL, &next) == CURLE_OK &&
               next) {
      if (hops == FETCH_MAX_REDIRECTS)
        code = core_fail(st, INFERD_INVALID_ARG, "Failed to download archive from: %s: more than %d redirects", url,
                         FETCH_MAX_REDIRECTS);
      else if (!config_url_allowed(cfg->allowed_urls, next))
        code = core_fail(st, INFERD_NOT_FOUND, "Given URL %s does not match any allowed URL(s) (a redirect of %s)",
                         next, url);
      else if (strlen(next) >= sizeof hop)
        code = core_fail(st, INFERD_INVALID_ARG, "Failed to download archive from: %s: a redirect too long", url);
      else if (!sink_rewind(sink))
        code = transfer_failed(CURLE_WRITE_ERROR, status, at, reason, sink, st);
      if (code == INFERD_OK) {
        memmove(hop, next, strlen(next) + 1); /* next lives in e until the next transfer */
        at = hop;
        continue;
      }
    } else if (status < 200 || status >= 300) {
      /* a 1xx, a 3xx without a Location */
      code = transfer_failed(CURLE_HTTP_RETURNED_ERROR, status, at, reason, sink, st);
    }
    break;
  }
  curl_easy_cleanup(e);
  curl_global_cleanup();
  return code;
}

inferd_code http__fetch(const config_server *cfg, const char *url, const atomic_bool *cancel, char *name,
                        size_t name_size, inferd_status *st) {
  if (!cfg->model_store) return core_fail(st, INFERD_NOT_FOUND, "Model store has not been configured.");
  if (!config_url_allowed(cfg->allowed_urls, url))
    return core_fail(st, INFERD_NOT_FOUND, "Given URL %s does not match any allowed URL(s)", url);
  if (!http_url_file_name(url, name, name_size))
    return core_fail(st, INFERD_INVALID_ARG,
                     "url '%s': its path must end in a file name of [A-Za-z0-9][A-Za-z0-9._-]* (the archive's name "
                     "in model_store)",
                     url);
  static unsigned downloads; /* the management thread's */
  char final[4096], temp[4096];
  if (http__resolve_path(cfg, name, true, final, sizeof final, st) != INFERD_OK) return st->code;
  if (snprintf(temp, sizeof temp, "%s/.download-%d-%u", cfg->model_store, (int)getpid(), ++downloads) >=
      (int)sizeof temp)
    return core_fail(st, INFERD_INVALID_ARG, "url '%s': path too long", url);
  struct stat sb;
  if (lstat(final, &sb) == 0) return core_fail(st, INFERD_ALREADY_EXISTS, "Model file already exists %s", name);
  fetch_sink sink = {.fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666), .cancel = cancel};
  if (sink.fd < 0)
    return core_fail(st, INFERD_INTERNAL, "model_store %s: cannot create a file: %s", cfg->model_store,
                     strerror(errno));
  double t0 = core_now_seconds();
  core_log(CORE_LOG_INFO, "downloading %s into model_store as %s", url, name);
  inferd_code code = download(cfg, url, &sink, st);
  if (close(sink.fd) != 0 && code == INFERD_OK)
    code = core_fail(st, INFERD_INTERNAL, "Failed to save the archive downloaded from %s: %s", url, strerror(errno));
  if (code == INFERD_OK && link(temp, final) != 0)
    code = errno == EEXIST ? core_fail(st, INFERD_ALREADY_EXISTS, "Model file already exists %s", name)
                           : core_fail(st, INFERD_INTERNAL, "model_store: cannot name the download %s: %s", name,
                                       strerror(errno));
  unlink(temp);
  if (code == INFERD_OK)
    core_log(CORE_LOG_INFO, "downloaded %s (%lld bytes) in %.2f s", name,
             stat(final, &sb) == 0 ? (long long)sb.st_size : -1LL, core_now_seconds() - t0);
  return code;
}

void http__fetch_remove(const config_server *cfg, const char *name) {
  char path[4096];
  inferd_status st;
  if (http__resolve_path(cfg, name, true, path, sizeof path, &st) != INFERD_OK) return;
  if (unlink(path) != 0 && errno != ENOENT)
    core_log(CORE_LOG_WARN, "model_store: cannot remove the downloaded %s: %s", path, strerror(errno));
}
