/*
 * http_tls.c - TLS for the https addresses, from TorchServe's certificate_file and
 * private_key_file keys (PEM; its Java KeyStore keys are not read).
 *
 * One SSL_CTX for the whole server, made before any thread starts and then only read:
 * every https listener of every HTTP thread hands it to h2o_accept, which does the
 * handshake on the event loop. TLS 1.2 and 1.3 (OpenSSL's default suites), the
 * certificate chain and its key checked against each other at start, and ALPN offering
 * h2 and http/1.1 (h2o's list), so that HTTP/2 clients get HTTP/2 over TLS as they do
 * over cleartext. An encrypted key is refused, as nobody is there to type its
 * passphrase (OpenSSL's default would ask on the terminal). Every failure is one line
 * naming the file and OpenSSL's reason.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "http/http_internal.h"

/* No passphrase: an encrypted private key fails to load instead of prompting, and the
 * flag says why it failed. */
static int no_passphrase(char *buf, int size, int rwflag, void *asked) {
  if (asked) *(bool *)asked = true;
  return 0;
}

/* The reason of OpenSSL's last error, and its queue emptied. */
static const char *openssl_reason(char *buf, size_t size) {
  unsigned long e = ERR_peek_last_error();
  const char *reason = e ? ERR_reason_error_string(e) : NULL;
  if (reason)
    snprintf(buf, size, "%s", reason);
  else if (e)
    ERR_error_string_n(e, buf, size);
  else
    snprintf(buf, size, "unknown error");
  ERR_clear_error();
  return buf;
}

/* A file OpenSSL is to read: its own words for what is wrong with its content, ours for
 * a file that cannot be opened at all. */
static inferd_code readable(const char *key, const char *path, inferd_status *st) {
  if (!path) return core_fail(st, INFERD_INVALID_ARG, "https addresses need %s (PEM), as TorchServe's do", key);
  FILE *f = fopen(path, "rb");
  if (!f) return core_fail(st, INFERD_INVALID_ARG, "%s '%s': %s", key, path, strerror(errno));
  fclose(f);
  return INFERD_OK;
}

inferd_code http__tls_new(const config_server *cfg, SSL_CTX **out, inferd_status *st) {
  *out = NULL;
  inferd_code code = readable("certificate_file", cfg->certificate_file, st);
  if (code == INFERD_OK) code = readable("private_key_file", cfg->private_key_file, st);
  if (code != INFERD_OK) return code;
  char why[256];
  ERR_clear_error();
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  if (!ctx) return core_fail(st, INFERD_NO_MEMORY, "TLS: %s", openssl_reason(why, sizeof why));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  bool asked = false;
  SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
  SSL_CTX_set_default_passwd_cb_userdata(ctx, &asked);
  if (SSL_CTX_use_certificate_chain_file(ctx, cfg->certificate_file) != 1)
    code = core_fail(st, INFERD_INVALID_ARG, "certificate_file '%s': not a PEM certificate (%s)", cfg->certificate_file,
                     openssl_reason(why, sizeof why));
  else if (SSL_CTX_use_PrivateKey_file(ctx, cfg->private_key_file, SSL_FILETYPE_PEM) != 1)
    code = asked ? core_fail(st, INFERD_INVALID_ARG, "private_key_file '%s' is encrypted: give it without a passphrase "
                                                     "(openssl pkey -in FILE -out FILE)", cfg->private_key_file)
           : ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH
               ? core_fail(st, INFERD_INVALID_ARG, "private_key_file '%s' is not the key of certificate_file '%s'",
                           cfg->private_key_file, cfg->certificate_file)
               : core_fail(st, INFERD_INVALID_ARG, "private_key_file '%s': not a PEM private key (%s)",
                           cfg->private_key_file, openssl_reason(why, sizeof why));
  else if (SSL_CTX_check_private_key(ctx) != 1)
    code = core_fail(st, INFERD_INVALID_ARG, "private_key_file '%s' is not the key of certificate_file '%s' (%s)",
                     cfg->private_key_file, cfg->certificate_file, openssl_reason(why, sizeof why));
  SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL); /* `asked` goes out of scope */
  if (code != INFERD_OK) {
    ERR_clear_error(); /* what the messages above did not take */
    SSL_CTX_free(ctx);
    return code;
  }
  h2o_ssl_register_alpn_protocols(ctx, h2o_http2_alpn_protocols);
  *out = ctx;
  return INFERD_OK;
}
