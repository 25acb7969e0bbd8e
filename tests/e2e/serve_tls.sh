#!/usr/bin/env bash
# serve_tls.sh - https addresses, as TorchServe's config.properties gives them
# (inference_address=https://..., certificate_file, private_key_file; PEM), on the real
# MobileNetV2 of models/ with a certificate made here by openssl for 127.0.0.1:
#   - https inference and management, http metrics, on one server: /ping, a prediction
#     (5 labels), v2 ready and the model list over TLS, checked against the certificate
#     (curl --cacert); HTTP/2 over TLS by ALPN; a cleartext request to the https port
#     gets no HTTP answer; /metrics still over http;
#   - refused at start, with exit 2 and one line naming the file and what is wrong: an
#     https address without certificate_file, a missing key file, a file that is not a
#     certificate, a key that is not the certificate's, an encrypted key (nobody is there
#     to type its passphrase), and http and https on one port (the kernel would deal its
#     connections to either listener).
# (A client that leaves over TLS: serve_disconnect.sh.)
#
#   serve_tls.sh INFERD SOURCE_DIR WORK_DIR
set -euo pipefail
INFERD=$1 SRC=$2 WORK=$3
. "$SRC/tests/e2e/serve_lib.sh"
trap serve_cleanup EXIT
rm -rf "$WORK"
mkdir -p "$WORK"

cert() { # cert NAME: NAME.key and NAME.pem, a self-signed EC certificate for 127.0.0.1
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=127.0.0.1 \
    -addext subjectAltName=IP:127.0.0.1 -keyout "$WORK/$1.key" -out "$WORK/$1.pem" 2>/dev/null
}
cert server
cert other
openssl pkey -in "$WORK/server.key" -aes256 -passout pass:secret -out "$WORK/encrypted.key"
serve_jpeg chelsea "$WORK/cat.jpg"
TLS=(--cacert "$WORK/server.pem")

# ---- a server with https inference and management --------------------------------------
serve_ports
serve_config "$WORK/config.properties" \
  "inference_address=https://127.0.0.1:$INFERENCE_PORT" \
  "management_address=https://127.0.0.1:$MANAGEMENT_PORT" \
  "certificate_file=server.pem" "private_key_file=server.key" \
  "model_store=$SRC/models" "load_models=mobilenet=mobilenet_v2_imagenet.onnx"
serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground --disable-token-auth
INFERENCE_SCHEME=https serve_wait_ready 120 "${TLS[@]}" || fail "the https server is not ready"
I="https://127.0.0.1:$INFERENCE_PORT" M="https://127.0.0.1:$MANAGEMENT_PORT"
call "/ping over TLS" 200 'r["status"] == "Healthy"' "${TLS[@]}" "$I/ping"
call "a prediction over TLS" 200 'len(r) == 5 and "tabby" in r' "${TLS[@]}" -T "$WORK/cat.jpg" "$I/predictions/mobilenet"
call "v2 model ready over TLS" 200 'r["ready"] is True' "${TLS[@]}" "$I/v2/models/mobilenet/ready"
call "the management API over TLS" 200 'r["models"][0]["modelName"] == "mobilenet"' "${TLS[@]}" "$M/models"
got=$(curl -s "${TLS[@]}" --http2 -o /dev/null -w '%{http_version} %{http_code}' "$I/ping" || true)
[ "$got" = "2 200" ] && echo "ok   HTTP/2 over TLS (ALPN): $got" || fail "HTTP/2 over TLS: '$got', want '2 200'"
got=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$INFERENCE_PORT/ping" || true)
[ "$got" = 000 ] && echo "ok   cleartext HTTP to the https port: no HTTP answer" ||
  fail "cleartext HTTP to the https port answered $got"
got=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "$I/ping" || true)
[ "$got" = 000 ] && echo "ok   a client that does not trust the certificate does not connect" ||
  fail "curl without --cacert got $got from a self-signed server"
call "/metrics over http" 200 '' "http://127.0.0.1:$METRICS_PORT/metrics"
# inferd bench over TLS: trusting the server's certificate with --cacert, one HTTP/1.1
# connection per client (libcurl would multiplex them all on one HTTP/2 connection);
# without it, every request fails the certificate check and says so
"$INFERD" bench --mode server --url "$I/predictions/mobilenet" --file "$WORK/cat.jpg" --requests 6 --concurrency 2 \
  --cacert "$WORK/server.pem" --json >"$WORK/body" || fail "inferd bench --cacert: exit $?"
check_json "$WORK/body" 'r["status"] == {"200": 6} and r["connections"] == 2' "inferd bench over TLS: 6 x 200 on 2 connections"
"$INFERD" bench --mode server --url "$I/predictions/mobilenet" --file "$WORK/cat.jpg" --requests 2 --concurrency 1 \
  --json >"$WORK/body" || fail "inferd bench without --cacert: exit $?"
check_json "$WORK/body" 'r["status"] == {"0": 2} and "certificate" in list(r["no_answer"])[0]' \
  "inferd bench without --cacert: no answer, for the certificate"
serve_stop 60
[ "$SERVER_STATUS" = 0 ] && echo "ok   SIGTERM: exit 0" || fail "SIGTERM: exit status $SERVER_STATUS"

# ---- refusals at start -------------------------------------------------------------------
# refused NAME REGEX CONFIG_LINE...: a server with an https inference address and these
# lines exits 2, its last stderr line matching REGEX, within 30 s (it would serve for ever)
refused() {
  local name=$1 regex=$2 status=0
  shift 2
  serve_config "$WORK/bad.properties" "inference_address=https://127.0.0.1:$INFERENCE_PORT" "$@"
  (cd "$WORK" && timeout 30 "$INFERD" serve --ts-config bad.properties --foreground --disable-token-auth \
    >"$WORK/bad.out" 2>"$WORK/bad.err" </dev/null) || status=$?
  local line
  line=$(tail -1 "$WORK/bad.err")
  if [ "$status" = 2 ] && printf '%s\n' "$line" | grep -Eq -- "$regex"; then
    echo "ok   $name: exit 2, $line"
  else
    fail "$name: exit $status, last line '$line', want exit 2 and /$regex/"
  fi
}
serve_ports
refused "no certificate_file" "^inferd serve: https addresses need certificate_file"
refused "a missing key file" "private_key_file 'nokey.pem': No such file or directory" \
  "certificate_file=server.pem" "private_key_file=nokey.pem"
refused "a certificate_file that is no certificate" "certificate_file 'config.properties': not a PEM certificate" \
  "certificate_file=config.properties" "private_key_file=server.key"
refused "another certificate's key" "private_key_file 'other.key' is not the key of certificate_file 'server.pem'" \
  "certificate_file=server.pem" "private_key_file=other.key"
refused "an encrypted key" "private_key_file 'encrypted.key' is encrypted" \
  "certificate_file=server.pem" "private_key_file=encrypted.key"
refused "http and https on one port" "management_address http://127.0.0.1:$INFERENCE_PORT: that port is another API's" \
  "certificate_file=server.pem" "private_key_file=server.key" "management_address=http://127.0.0.1:$INFERENCE_PORT"

if [ "$failures" != 0 ]; then
  echo "$failures failure(s); server log:" >&2
  tail -30 "$WORK/server.log" >&2
  exit 1
fi
echo "serve_tls: all passed"
