/*
 * http_server.c - listeners and HTTP threads: h2o with its own event loop
 * (libh2o-evloop), one loop per thread.
 *
 * DESIGN
 *
 * Sockets. Each distinct address among inference_address, management_address and
 * metrics_address is one listener; addresses that are equal share it and it serves
 * all their APIs (TorchServe's "all" connector). A TCP listener has one socket per
 * HTTP thread, all bound to the same address with SO_REUSEPORT, so the kernel spreads
 * new connections over the threads and no accept lock is shared. Before binding, a
 * probe socket without SO_REUSEPORT checks that no other process holds the port (with
 * SO_REUSEPORT alone, a second server of the same user would silently share it). A
 * configured port 0 is resolved once (the first socket's port) and reused by the
 * others. [::] takes IPv4 clients too (IPV6_V6ONLY off), except beside another listener
 * of this server on the IPv4 side of the same port: then it stays IPv6-only, else the
 * two would refuse each other. A unix-socket listener has one socket, dup()ed for each
 * thread; a socket file at its path that nothing accepts on (left by a killed server) is
 * replaced, a live one is "Address already in use", and the file this server made is
 * removed when it is freed (before its listeners close, and only if the path still holds
 * that file).
 *
 * Threads. number_of_netty_threads HTTP threads (0: one per usable CPU, at most 4).
 * Each makes its own h2o_evloop and h2o_context (h2o's buffers are thread-local), one
 * h2o_multithread queue, and accepts on its copy of every listener. A connection stays
 * on the thread that accepted it. Requests are routed (http_routes.c), authorized and
 * parsed on that thread; a prediction's image is decoded by the thread's preprocessing
 * thread (http_prep.c), which queues it to its model's scheduler, and the connection
 * waits while the loop serves others. The worker that
 * finishes it sends the request back with h2o_multithread_send_message to the loop
 * that owns the connection, which renders and sends the response. So every h2o object
 * is only ever touched by its own loop thread.
 *
 * One h2o_globalconf for all listeners, one hostconf per listener, whose single path
 * "/" has the handler that knows which APIs the listener serves. h2o buffers the whole
 * body before calling the handler; max_request_entity_size = max_request_size makes
 * h2o refuse larger bodies early (from Content-Length, or while reading a chunked
 * body) with 413, which http_reply.c's filter turns into a JSON error.
 *
 * Stop. http_server_drain sets `draining` (new predictions and /ping get 503) and
 * waits until no prediction is in flight. http_server_free sets each loop's `stop`
 * and wakes it with an empty message; the loop closes its listening sockets, asks h2o
 * to close idle connections, runs up to 0.2 s more to let them go, and exits.
 *
 * Config keys: inference_address, management_address, metrics_address,
 * number_of_netty_threads, max_request_size.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "http/http_internal.h"

enum { AUTO_THREADS_MAX = 4, ACCEPT_BATCH = 16 };

static const char *const api_names[HTTP_API_COUNT] = {"inference", "management", "metrics"};

/* ---- per-thread loop ------------------------------------------------------------------ */

static void on_accept(h2o_socket_t *listener, const char *err);

static void on_accept_resume(h2o_timeout_entry_t *entry) {
  http__loop *loop = H2O_STRUCT_FROM_MEMBER(http__loop, accept_resume, entry);
  for (int i = 0; i < loop->server->listener_count; i++) h2o_socket_read_start(loop->sockets[i], on_accept);
}

/* accept() failed for want of a descriptor (or of kernel memory): the connection stays
 * in the backlog and the listener stays readable, so reading it again at once would spin
 * the loop at full speed until a descriptor frees up. Stop reading the listeners and try
 * again after a tick (h2o's 100 ms timeout); connections already open go on. */
static void pause_accepting(http__loop *loop, int err) {
  for (int i = 0; i < loop->server->listener_count; i++) h2o_socket_read_stop(loop->sockets[i]);
  h2o_timeout_link(loop->ctx.loop, &loop->ctx.hundred_ms_timeout, &loop->accept_resume);
  double now = core_now_seconds();
  if (now - loop->accept_warned >= 10) {
    loop->accept_warned = now;
    core_log(CORE_LOG_WARN, "http thread %d: cannot accept connections: %s; retrying every 100 ms", loop->index,
             strerror(err));
  }
}

static void on_accept(h2o_socket_t *listener, const char *err) {
  if (err) return;
  h2o_accept_ctx_t *accept_ctx = listener->data;
  for (int i = 0; i < ACCEPT_BATCH; i++) {
    h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
    if (!sock) { /* h2o returns accept4()'s failure with its errno */
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        pause_accepting((http__loop *)accept_ctx->ctx, errno);
      break;
    }
    h2o_accept(accept_ctx, sock);
  }
}

static void on_wake(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages) {
  (void)receiver, (void)messages; /* only wakes the loop so that it looks at `stop` */
}

static int on_request(h2o_handler_t *self, h2o_req_t *req) {
  http__handler *h = (http__handler *)self;
  http__route(http__loop_of(req)->server, req, h->apis);
  return 0;
}

static bool connections_closed(http__loop *loop) {
  return h2o_linklist_is_empty(&loop->ctx.http1._conns) && h2o_linklist_is_empty(&loop->ctx.http2._conns);
}

_Thread_local http__loop *http__current_loop;

/* A loop's read_seq is odd inside a section. The seq_cst increment, the reader's
 * load of what it reads and the writer's exchange of it are one total order: a section
 * that can still see the old version began before the exchange, so the writer, reading
 * the counts after it, sees that section's odd count and waits for it to move on. */
bool http__read_begin(const http_server *s) {
  http__loop *loop = http__current_loop;
  if (!loop || loop->server != s) return false;
  unsigned before = atomic_fetch_add(&loop->read_seq, 1);
  assert(!(before & 1) && "read sections do not nest");
  (void)before;
  return true;
}

void http__read_end(bool opened) {
  if (opened) atomic_fetch_add_explicit(&http__current_loop->read_seq, 1, memory_order_release);
}

void http__read_synchronize(const http_server *s) {
  for (int t = 0; s && t < s->thread_count; t++) {
    unsigned seq = atomic_load(&s->loops[t].read_seq);
    if (!(seq & 1)) continue;
    while (atomic_load(&s->loops[t].read_seq) == seq) sched_yield();
  }
}

static void *loop_main(void *arg) {
  http__loop *loop = arg;
  http_server *s = loop->server;
  http__current_loop = loop;
  pthread_setname_np(pthread_self(), "inferd-http");
  loop->evloop = h2o_evloop_create();
  h2o_context_init(&loop->ctx, loop->evloop, &s->globalconf);
  loop->queue = h2o_multithread_create_queue(loop->evloop);
  h2o_multithread_register_receiver(loop->queue, &loop->wake_receiver, on_wake);
  http__predict_loop_init(loop);
  http__management_loop_init(loop);
  loop->accept_resume = (h2o_timeout_entry_t){.cb = on_accept_resume};
  loop->accept_warned = -1e9;
  for (int i = 0; i < s->listener_count; i++) {
    http__listener *l = &s->listeners[i];
    loop->accept_ctx[i] = (h2o_accept_ctx_t){.ctx = &loop->ctx, .hosts = l->hosts, .ssl_ctx = l->ssl_ctx};
    loop->sockets[i] = h2o_evloop_socket_create(loop->evloop, l->fds[loop->index], H2O_SOCKET_FLAG_DONT_READ);
    l->fds[loop->index] = -1; /* the socket owns it now */
    loop->sockets[i]->data = &loop->accept_ctx[i];
    h2o_socket_read_start(loop->sockets[i], on_accept);
  }
  pthread_mutex_lock(&s->start_lock);
  s->loops_ready++;
  pthread_cond_broadcast(&s->start_cond);
  pthread_mutex_unlock(&s->start_lock);

  while (!atomic_load(&loop->stop)) h2o_evloop_run(loop->evloop, INT32_MAX);

  if (h2o_timeout_is_linked(&loop->accept_resume)) h2o_timeout_unlink(&loop->accept_resume);
  for (int i = 0; i < s->listener_count; i++) {
    h2o_socket_read_stop(loop->sockets[i]);
    h2o_socket_close(loop->sockets[i]);
  }
  /* Connections still open: answer what is in progress and let them close
   * (shutdown_requested makes HTTP/1 close after the current response). h2o 2.2 cannot
   * dispose a context with open connections, and h2o_context_request_shutdown leaves a
   * timer that makes the dispose assert; so when clients keep idle connections open
   * past a short grace period, the loop's h2o objects are left to the process exit. */
  loop->ctx.shutdown_requested = 1;
  double until = core_now_seconds() + 0.2;
  while (!connections_closed(loop) && core_now_seconds() < until) h2o_evloop_run(loop->evloop, 10);
  http__predict_loop_stop(loop);
  if (!connections_closed(loop)) {
    core_log(CORE_LOG_DEBUG, "http thread %d: connections still open at exit; h2o objects left to the process exit", loop->index);
    return NULL;
  }
  h2o_multithread_unregister_receiver(loop->queue, &loop->wake_receiver);
  h2o_multithread_unregister_receiver(loop->queue, &loop->management_receiver);
  http__predict_loop_free(loop);
  h2o_context_dispose(&loop->ctx);
  h2o_multithread_destroy_queue(loop->queue);
  h2o_evloop_run(loop->evloop, 0); /* frees the sockets closed above (evloop frees them lazily) */
  h2o_evloop_destroy(loop->evloop);
  /* h2o keeps freed socket buffers in a thread-local list; give them back. (What LSan
   * still reports at exit is h2o 2.2's own: h2o_multithread_destroy_queue does not free
   * the queue with evloop, 88 bytes each, and one 4 KB pool chunk per thread.) */
  while (h2o_socket_buffer_prototype.allocator.cnt > 0) free(h2o_mem_alloc_recycle(&h2o_socket_buffer_prototype.allocator, 1));
  return NULL;
}

/* ---- listening sockets ------------------------------------------------------------------ */

static void address_text(const config_address *a, char *buf, size_t size) {
  if (strcmp(a->scheme, "unix") == 0)
    snprintf(buf, size, "unix:%s", a->host);
  else if (strchr(a->host, ':'))
    snprintf(buf, size, "%s://[%s]:%d", a->scheme, a->host, a->port);
  else
    snprintf(buf, size, "%s://%s:%d", a->scheme, a->host, a->port);
}

/* Port 0 means "any free port": two such addresses are two listeners. */
static bool same_address(const config_address *a, const config_address *b) {
  bool unix_socket = strcmp(a->scheme, "unix") == 0;
  return strcmp(a->scheme, b->scheme) == 0 && strcmp(a->host, b->host) == 0 && a->port == b->port &&
         (a->port != 0 || unix_socket);
}

/* http and https on one host and port: two listeners would share the port
 * (SO_REUSEPORT) and the kernel would deal connections to either at random. */
static bool same_port_other_scheme(const config_address *a, const config_address *b) {
  return strcmp(a->scheme, "unix") != 0 && strcmp(b->scheme, "unix") != 0 && strcmp(a->scheme, b->scheme) != 0 &&
         strcmp(a->host, b->host) == 0 && a->port == b->port && a->port != 0;
}

/* v6only: [::] takes IPv6 clients only (see bind_tcp). */
static int tcp_socket(const struct addrinfo *ai, bool reuseport, bool v6only) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0) {
    close(fd);
    return -1;
  }
  /* [::] takes IPv4 clients too, as Java's (Netty's) wildcard socket does, whatever the
   * system's net.ipv6.bindv6only says */
  int v6only_value = v6only;
  if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only_value, sizeof v6only_value);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

struct addrinfo *http__listen_address(struct addrinfo *list) {
  for (struct addrinfo *ai = list; ai; ai = ai->ai_next)
    if (ai->ai_family == AF_INET) return ai;
  return list;
}

/* Whether another listener of this server takes IPv4 clients on l's port (a configured
 * port, not 0). A dual-stack [::] would hold that port's IPv4 side too, and the two would
 * refuse each other ("Address already in use"); so [::] beside it stays IPv6-only, and
 * the IPv4 clients of that port go to the listener configured for them. */
static bool ipv4_listener_on_port(const http_server *s, const http__listener *l) {
  for (int i = 0; i < s->listener_count; i++) {
    const config_address *a = s->listeners[i].address;
    if (&s->listeners[i] == l || strcmp(a->scheme, "unix") == 0 || a->port != l->address->port) continue;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(a->host, "0", &hints, &res) != 0) continue; /* its own bind says why */
    bool ipv4 = http__listen_address(res)->ai_family == AF_INET;
    freeaddrinfo(res);
    if (ipv4) return true;
  }
  return false;
}

static inferd_code bind_tcp(http_server *s, http__listener *l, inferd_status *st) {
  char where[CONFIG_HOST_MAX + 32], port[16];
  address_text(l->address, where, sizeof where);
  snprintf(port, sizeof port, "%d", l->address->port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  int rc = getaddrinfo(l->address->host, port, &hints, &res);
  if (rc != 0) return core_fail(st, INFERD_INVALID_ARG, "%s: cannot resolve '%s': %s", where, l->address->host, gai_strerror(rc));
  struct addrinfo *ai = http__listen_address(res);
  inferd_code code = INFERD_OK;
  bool v6only = ai->ai_family == AF_INET6 && l->address->port != 0 && ipv4_listener_on_port(s, l);
  if (l->address->port != 0) {
    int probe = tcp_socket(ai, false, v6only);
    if (probe < 0)
      code = core_fail(st, errno == EADDRINUSE ? INFERD_UNAVAILABLE : INFERD_INVALID_ARG, "cannot listen on %s: %s",
                       where, strerror(errno));
    else
      close(probe);
  }
  for (int t = 0; t < s->thread_count && code == INFERD_OK; t++) {
    int fd = tcp_socket(ai, true, v6only);
    if (fd < 0 || listen(fd, SOMAXCONN) != 0) {
      code = core_fail(st, errno == EADDRINUSE ? INFERD_UNAVAILABLE : INFERD_INVALID_ARG, "cannot listen on %s: %s",
                       where, strerror(errno));
      if (fd >= 0) close(fd);
      break;
    }
    l->fds[t] = fd;
    if (t == 0) {
      struct sockaddr_storage ss;
      socklen_t len = sizeof ss;
      getsockname(fd, (struct sockaddr *)&ss, &len);
      l->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
      /* A port of 0 is resolved once: the other threads bind the same port. */
      if (ss.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)ai->ai_addr)->sin6_port = htons((uint16_t)l->port);
      else
        ((struct sockaddr_in *)ai->ai_addr)->sin_port = htons((uint16_t)l->port);
    }
  }
  freeaddrinfo(res);
  return code;
}

/* True when the socket file at sun is one that nothing accepts on any more (its server
 * was killed before it could remove it): connecting is refused. A live socket, a file
 * that is not a socket, or anything we cannot tell, is not stale. The probe does not
 * block: a live server whose backlog is full answers EAGAIN (not stale) at once, where
 * a blocking connect would wait for that server to accept. */
static bool stale_socket_file(const struct sockaddr_un *sun) {
  int saved = errno; /* the bind's, for the message when it is not stale */
  struct stat sb;
  bool refused = false;
  if (lstat(sun->sun_path, &sb) == 0 && S_ISSOCK(sb.st_mode)) {
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    refused = probe >= 0 && connect(probe, (const struct sockaddr *)sun, sizeof *sun) != 0 && errno == ECONNREFUSED;
    if (probe >= 0) close(probe);
  }
  errno = saved;
  return refused;
}

static inferd_code bind_unix(http_server *s, http__listener *l, inferd_status *st) {
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  if (strlen(l->address->host) >= sizeof sun.sun_path)
    return core_fail(st, INFERD_INVALID_ARG, "unix socket path too long: %s", l->address->host);
  strcpy(sun.sun_path, l->address->host);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return core_fail(st, INFERD_INTERNAL, "socket: %s", strerror(errno));
  /* From a successful bind on, the file is ours: http_server_free removes it, whether or
   * not the server ever got as far as serving (a later listener may fail to bind). A
   * socket file that nothing accepts on is what a killed server leaves: TorchServe
   * deletes the path before it binds; here only such a stale socket is replaced. */
  bool bound = bind(fd, (struct sockaddr *)&sun, sizeof sun) == 0;
  if (!bound && errno == EADDRINUSE && stale_socket_file(&sun)) {
    core_log(CORE_LOG_WARN, "unix:%s: replacing a socket file that no server accepts on", sun.sun_path);
    bound = unlink(sun.sun_path) == 0 && bind(fd, (struct sockaddr *)&sun, sizeof sun) == 0;
    if (!bound && errno == ENOENT) errno = EADDRINUSE; /* another start took it meanwhile */
  }
  if (!bound || listen(fd, SOMAXCONN) != 0) {
    int err = errno;
    close(fd);
    if (bound) unlink(sun.sun_path);
    return core_fail(st, err == EADDRINUSE ? INFERD_UNAVAILABLE : INFERD_INVALID_ARG, "cannot listen on unix:%s: %s",
                     l->address->host, strerror(err));
  }
  struct stat sb; /* which file is ours: the path may hold another one by the end */
  if (lstat(sun.sun_path, &sb) == 0) {
    l->made_socket_file = true;
    l->socket_dev = sb.st_dev;
    l->socket_ino = sb.st_ino;
  }
  l->fds[0] = fd;
  for (int t = 1; t < s->thread_count; t++) {
    l->fds[t] = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (l->fds[t] < 0) return core_fail(st, INFERD_INTERNAL, "dup: %s", strerror(errno));
  }
  l->port = 0;
  return INFERD_OK;
}

/* ---- lifecycle -------------------------------------------------------------------------- */

static int automatic_threads(void) {
  cpu_set_t set;
  int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  return CORE_MAX(1, CORE_MIN(n, AUTO_THREADS_MAX));
}

/* A configured header value must not break the response: no control characters. */
static inferd_code check_header_value(const char *key, const char *value, inferd_status *st) {
  for (const unsigned char *p = (const unsigned char *)value; p && *p; p++)
    if (*p < 0x20 || *p == 0x7f)
      return core_fail(st, INFERD_INVALID_ARG, "%s: a header value cannot hold control characters", key);
  return INFERD_OK;
}

inferd_code http_server_new(const http_server_params *params, http_server **out, inferd_status *st) {
  const config_server *cfg = params->config;
  inferd_code bad = check_header_value("cors_allowed_origin", cfg->cors_allowed_origin, st);
  if (bad == INFERD_OK) bad = check_header_value("cors_allowed_methods", cfg->cors_allowed_methods, st);
  if (bad == INFERD_OK) bad = check_header_value("cors_allowed_headers", cfg->cors_allowed_headers, st);
  if (bad != INFERD_OK) return bad;
  http_server *s = calloc(1, sizeof *s);
  if (!s) return core_fail(st, INFERD_NO_MEMORY, "http: out of memory");
  s->config = cfg;
  s->topo = params->topo;
  pthread_mutex_init(&s->start_lock, NULL);
  pthread_cond_init(&s->start_cond, NULL);
  s->thread_count = cfg->number_of_netty_threads > 0 ? cfg->number_of_netty_threads : automatic_threads();
  s->loops = calloc((size_t)s->thread_count, sizeof *s->loops);
  if (!s->loops) {
    free(s);
    return core_fail(st, INFERD_NO_MEMORY, "http: out of memory");
  }
  http__reply_init();
  http__json_arena_install();

  const config_address *addresses[HTTP_API_COUNT] = {&cfg->inference_address, &cfg->management_address,
                                                     &cfg->metrics_address};
  h2o_config_init(&s->globalconf);
  s->globalconf.server_name = h2o_iovec_init(H2O_STRLIT("inferd"));
  s->globalconf.max_request_entity_size = cfg->max_request_size > 0 ? (size_t)cfg->max_request_size : SIZE_MAX;
  inferd_code code = INFERD_OK;
  for (int api = 0; api < HTTP_API_COUNT && code == INFERD_OK; api++) {
    bool https = strcmp(addresses[api]->scheme, "https") == 0;
    if (https && !s->ssl_ctx && (code = http__tls_new(cfg, &s->ssl_ctx, st)) != INFERD_OK) break;
    int found = -1;
    for (int i = 0; i < s->listener_count; i++) {
      if (same_address(s->listeners[i].address, addresses[api])) found = i;
      else if (same_port_other_scheme(s->listeners[i].address, addresses[api]))
        code = core_fail(st, INFERD_INVALID_ARG, "%s_address %s://%s:%d: that port is another API's with %s",
                         api_names[api], addresses[api]->scheme, addresses[api]->host, addresses[api]->port,
                         s->listeners[i].address->scheme);
    }
    if (code != INFERD_OK) break;
    if (found < 0) {
      found = s->listener_count++;
      http__listener *l = &s->listeners[found];
      l->address = addresses[api];
      l->ssl_ctx = https ? s->ssl_ctx : NULL;
      l->fds = malloc((size_t)s->thread_count * sizeof *l->fds);
      if (!l->fds) {
        code = core_fail(st, INFERD_NO_MEMORY, "http: out of memory");
        break;
      }
      for (int t = 0; t < s->thread_count; t++) l->fds[t] = -1;
      char name[32];
      snprintf(name, sizeof name, "listener-%d", found);
      l->hostconf = h2o_config_register_host(&s->globalconf, h2o_iovec_init(name, strlen(name)), 65535);
      l->hosts[0] = l->hostconf;
      h2o_pathconf_t *path = h2o_config_register_path(l->hostconf, "/", 0);
      http__handler *h = (http__handler *)h2o_create_handler(path, sizeof *h);
      h->super.on_req = on_request;
      h2o_logger_t *logger = h2o_create_logger(path, sizeof *logger); /* h2o disposes a request */
      logger->log_access = http__request_disposed;
      l->handler = h;
      l->apis = 0;
      const char *const cors[3] = {cfg->cors_allowed_origin, cfg->cors_allowed_methods, cfg->cors_allowed_headers};
      http__register_error_filter(path, s->globalconf.max_request_entity_size, cors);
      http__register_error_filter(&l->hostconf->fallback_path, s->globalconf.max_request_entity_size, cors);
    }
    s->listeners[found].apis |= 1u << api;
    s->listener_of_api[api] = found;
  }
  /* The handler reads `apis` at request time; set them now that all are known. */
  for (int i = 0; i < s->listener_count && code == INFERD_OK; i++) s->listeners[i].handler->apis = s->listeners[i].apis;
  if (code == INFERD_OK) code = http__auth_new(!cfg->disable_token_authorization, params->key_file, s, &s->auth, st);
  if (code == INFERD_OK && !(s->metrics = metrics_registry_new(NULL)))
    code = core_fail(st, INFERD_NO_MEMORY, "http: out of memory");
  if (code == INFERD_OK) code = http__registry_new(s, &s->registry, st);
  if (code == INFERD_OK) code = http__management_new(s, &s->management, st);
  if (code != INFERD_OK) {
    http_server_free(s);
    return code;
  }
  *out = s;
  return INFERD_OK;
}

int http_server_port(const http_server *s, http_api api) {
  if ((unsigned)api >= HTTP_API_COUNT) return -1;
  return s->listeners[s->listener_of_api[api]].port;
}

inferd_code http_server_start(http_server *s, inferd_status *st) {
  inferd_code code = INFERD_OK;
  for (int i = 0; i < s->listener_count && code == INFERD_OK; i++) {
    http__listener *l = &s->listeners[i];
    code = strcmp(l->address->scheme, "unix") == 0 ? bind_unix(s, l, st) : bind_tcp(s, l, st);
  }
  for (int t = 0; t < s->thread_count && code == INFERD_OK; t++) {
    http__loop *loop = &s->loops[t];
    loop->server = s;
    loop->index = t;
    int rc = pthread_create(&loop->thread, NULL, loop_main, loop);
    if (rc != 0)
      code = core_fail(st, INFERD_INTERNAL, "http: cannot start thread %d: %s", t, strerror(rc));
    else
      loop->thread_started = true;
  }
  if (code != INFERD_OK) return code; /* http_server_free stops what started */
  pthread_mutex_lock(&s->start_lock);
  while (s->loops_ready < s->thread_count) pthread_cond_wait(&s->start_cond, &s->start_lock);
  pthread_mutex_unlock(&s->start_lock);
  for (int i = 0; i < s->listener_count; i++) {
    const http__listener *l = &s->listeners[i];
    char where[CONFIG_HOST_MAX + 32], apis[64] = "";
    config_address bound = *l->address;
    bound.port = l->port;
    address_text(&bound, where, sizeof where);
    for (int api = 0; api < HTTP_API_COUNT; api++)
      if (l->apis & (1u << api))
        snprintf(apis + strlen(apis), sizeof apis - strlen(apis), "%s%s", apis[0] ? "+" : "", api_names[api]);
    core_log(CORE_LOG_INFO, "%s API listening on %s", apis, where);
  }
  core_log(CORE_LOG_INFO, "%d HTTP thread%s", s->thread_count, s->thread_count == 1 ? "" : "s");
  return INFERD_OK;
}

/* Removes the socket files this server made, while their sockets still listen: until
 * they are closed, no other start can take a path over (its probe connects), so a file
 * at the path is ours unless someone removed it and put another there, which its inode
 * tells. After the listeners are closed, another start may find the path stale and bind
 * its own file there: removing the path then left that server unreachable. */
static void remove_socket_files(http_server *s) {
  for (int i = 0; i < s->listener_count; i++) {
    http__listener *l = &s->listeners[i];
    struct stat sb;
    if (l->made_socket_file && lstat(l->address->host, &sb) == 0 && sb.st_dev == l->socket_dev &&
        sb.st_ino == l->socket_ino)
      unlink(l->address->host);
    l->made_socket_file = false;
  }
}

void http_server_drain(http_server *s, int timeout_ms) {
  atomic_store(&s->draining, true);
  double until = core_now_seconds() + timeout_ms / 1000.0;
  while (atomic_load(&s->in_flight) > 0 && (timeout_ms < 0 || core_now_seconds() < until)) usleep(2000);
}

void http_server_free(http_server *s) {
  if (!s) return;
  /* Order matters: models are drained while the loops still run (their done callbacks
   * answer through the loops), the management thread finishes what is queued, then the
   * loops stop, then the models are freed. */
  atomic_store(&s->draining, true);
  pthread_mutex_lock(&s->start_lock);
  int started = 0;
  for (int t = 0; t < s->thread_count; t++) started += s->loops[t].thread_started;
  while (s->loops_ready < started) pthread_cond_wait(&s->start_cond, &s->start_lock);
  pthread_mutex_unlock(&s->start_lock);
  if (s->registry) {
    http__model **models;
    int n = http__registry_list(s->registry, NULL, true, &models);
    for (int i = 0; i < n; i++) {
      sched_model_drain(models[i]->sched);
      http__model_release(models[i]);
    }
    free(models);
  }
  http_server_drain(s, 10000);
  http__management_stop(s->management);
  remove_socket_files(s); /* before the loops close the listeners */
  for (int t = 0; t < s->thread_count; t++) {
    http__loop *loop = &s->loops[t];
    if (!loop->thread_started) continue;
    atomic_store(&loop->stop, true);
    h2o_multithread_send_message(&loop->wake_receiver, NULL);
  }
  for (int t = 0; t < s->thread_count; t++)
    if (s->loops[t].thread_started) pthread_join(s->loops[t].thread, NULL);
  for (int i = 0; i < s->listener_count; i++) {
    http__listener *l = &s->listeners[i];
    for (int t = 0; l->fds && t < s->thread_count; t++)
      if (l->fds[t] >= 0) close(l->fds[t]);
    free(l->fds);
  }
  http__registry_free(s->registry);
  http__management_free(s->management);
  metrics_registry_free(s->metrics);
  h2o_config_dispose(&s->globalconf);
  http__auth_free(s->auth);
  if (s->ssl_ctx) SSL_CTX_free(s->ssl_ctx);
  pthread_mutex_destroy(&s->start_lock);
  pthread_cond_destroy(&s->start_cond);
  free(s->loops);
  free(s);
}
