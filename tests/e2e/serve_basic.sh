#!/usr/bin/env bash
# serve_basic.sh - `inferd serve` as a TorchServe client sees it, on the real MobileNetV2
# of models/ and real photos (Debian's python3-skimage data):
#   /ping healthy once loaded (serve_startup.sh asserts its 503 while loading);
#   predictions with the raw body (curl -T), multipart
#   (-F data=@, -F file=@), base64 text (a text/plain body, a form field) and Python
#   requests giving the same answer; 404 unknown model
#   and version, 400 corrupt / truncated / empty image, 413 above max_request_size (by
#   Content-Length and chunked), 417 an unknown Expect, 401 missing / wrong token, 405 wrong method; the
#   management API (list, describe with workers and cores, register refused without
#   --enable-model-api); /metrics; /ping still 200 after all the bad requests; images
#   decoded by the preprocessing threads ("inferd-prep"), not by the HTTP threads
#   ("inferd-http"), whose event loops must stay free (their CPU time compared); SIGTERM
#   exits 0 and removes key_file.json. (--start, --stop and the other signals:
#   serve_signals.sh.)
#
#   serve_basic.sh INFERD SOURCE_DIR WORK_DIR
set -euo pipefail
INFERD=$1 SRC=$2 WORK=$3
. "$SRC/tests/e2e/serve_lib.sh"
trap serve_cleanup EXIT

rm -rf "$WORK"
mkdir -p "$WORK"
DATA=/usr/lib/python3/dist-packages/skimage/data

# A JPEG and a PNG of real photos, a corrupt file, a truncated JPEG, an oversized body.
/usr/bin/python3 - "$DATA" "$WORK" <<'PY'
import os, sys
from PIL import Image
data, work = sys.argv[1:]
Image.open(os.path.join(data, "chelsea.png")).convert("RGB").save(os.path.join(work, "cat.jpg"), quality=90)
jpg = open(os.path.join(work, "cat.jpg"), "rb").read()
open(os.path.join(work, "truncated.jpg"), "wb").write(jpg[: len(jpg) // 3])
open(os.path.join(work, "corrupt.jpg"), "wb").write(b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40)
open(os.path.join(work, "big.bin"), "wb").write(b"\0" * 3_000_000)
# 6000x4000 (24 megapixels) of smooth gradients: ~0.3 MB as JPEG, tens of ms to decode
import numpy as np
x = np.linspace(0, 255, 6000, dtype=np.float32)[None, :]
y = np.linspace(0, 255, 4000, dtype=np.float32)[:, None]
rgb = np.stack([x + 0 * y, 0 * x + y, (x + y) / 2], axis=2).astype(np.uint8)
Image.fromarray(rgb).save(os.path.join(work, "gradient.jpg"), quality=90)
PY
cp "$DATA/coffee.png" "$WORK/coffee.png"

serve_ports
serve_config "$WORK/config.properties" \
  "model_store=$SRC/models" \
  "load_models=mobilenet=mobilenet_v2_imagenet.onnx" \
  "number_of_netty_threads=2" \
  "max_request_size=2000000"
serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground
serve_wait_ready 120
[ "$SAW_UNHEALTHY" = 1 ] && echo "ok   /ping said 503 Unhealthy while the model loaded" ||
  echo "note /ping was never seen unhealthy (the model loaded before the first poll)"
serve_keys "$WORK"
I="http://127.0.0.1:$INFERENCE_PORT" M="http://127.0.0.1:$MANAGEMENT_PORT"
AUTH="Authorization: Bearer $INFERENCE_KEY"
MAUTH="Authorization: Bearer $MANAGEMENT_KEY"

# expect CODE NAME CURL_ARGS...: the status must be CODE; the body is left in $WORK/body.
expect() {
  local want=$1 name=$2 got
  shift 2
  got=$(curl -s -o "$WORK/body" -w '%{http_code}' --max-time 60 "$@") || got="curl-error-$?"
  if [ "$got" != "$want" ]; then
    fail "$name: HTTP $got, expected $want: $(head -c 400 "$WORK/body" 2>/dev/null)"
    return 1
  fi
  echo "ok   $name ($got)"
}
# body_has TEXT NAME: the last body contains TEXT.
body_has() {
  grep -q -- "$1" "$WORK/body" || fail "$2: body lacks '$1': $(head -c 400 "$WORK/body")"
}
json_error() { # json_error CODE NAME: a TorchServe error body {"code": CODE, "type", "message"}
  /usr/bin/python3 - "$WORK/body" "$1" <<'PY' || fail "$2: not a TorchServe error body: $(head -c 300 "$WORK/body")"
import json, sys
b = json.load(open(sys.argv[1]))
assert b["code"] == int(sys.argv[2]) and b["type"] and b["message"], b
PY
}

expect 200 "ping" "$I/ping" && body_has '"Healthy"' ping

# ---- predictions: the same answer however the image is sent ----
expect 200 "predict raw body (curl -T)" -H "$AUTH" -T "$WORK/cat.jpg" "$I/predictions/mobilenet" && cp "$WORK/body" "$WORK/raw.json"
expect 200 "predict multipart data=@" -H "$AUTH" -F "data=@$WORK/cat.jpg" "$I/predictions/mobilenet" && cp "$WORK/body" "$WORK/multipart.json"
expect 200 "predict multipart file=@" -H "$AUTH" -F "file=@$WORK/cat.jpg" "$I/predictions/mobilenet" && cp "$WORK/body" "$WORK/file.json"
expect 200 "predict with version" -H "$AUTH" -T "$WORK/cat.jpg" "$I/predictions/mobilenet/1.0" && cp "$WORK/body" "$WORK/version.json"
expect 200 "predict PNG" -H "$AUTH" -T "$WORK/coffee.png" "$I/predictions/mobilenet" && cp "$WORK/body" "$WORK/coffee.json"
# base64 text, as TorchServe's image_classifier decodes it: a text/plain body (76-column
# lines, as base64(1) writes them) and a form field that is not a file
base64 "$WORK/cat.jpg" >"$WORK/cat.b64"
expect 200 "predict base64 text/plain body" -H "$AUTH" -H "Content-Type: text/plain" --data-binary "@$WORK/cat.b64" \
  "$I/predictions/mobilenet" && cp "$WORK/body" "$WORK/base64.json"
expect 200 "predict base64 form field" -H "$AUTH" -F "data=<$WORK/cat.b64" "$I/predictions/mobilenet" &&
  cp "$WORK/body" "$WORK/base64-field.json"
printf 'bm90IGFuIGltYWdl\n' >"$WORK/text.b64" # "not an image"
expect 400 "base64 of something else" -H "$AUTH" -H "Content-Type: text/plain" --data-binary "@$WORK/text.b64" \
  "$I/predictions/mobilenet" && json_error 400 "base64 of something else"
/usr/bin/python3 - "$WORK" "$I" "$INFERENCE_KEY" <<'PY' || fail "answers differ or are not 5 labels"
import json, os, sys
import requests
work, url, key = sys.argv[1:]
raw = open(os.path.join(work, "raw.json")).read()
for other in ("multipart.json", "file.json", "version.json", "base64.json", "base64-field.json"):
    assert open(os.path.join(work, other)).read() == raw, other
r = requests.post(url + "/predictions/mobilenet", data=open(os.path.join(work, "cat.jpg"), "rb").read(),
                  headers={"Content-Type": "application/octet-stream", "Authorization": "Bearer " + key}, timeout=60)
assert r.status_code == 200 and r.text == raw, (r.status_code, r.text)
answer = json.loads(raw)
assert len(answer) == 5, answer
top = max(answer, key=answer.get)
assert top in ("Egyptian cat", "tabby", "tiger cat"), answer
assert abs(sum(answer.values()) - 1) < 0.1 and list(answer.values()) == sorted(answer.values(), reverse=True), answer
coffee = json.loads(open(os.path.join(work, "coffee.json")).read())
assert max(coffee, key=coffee.get) in ("cup", "espresso", "coffee mug"), coffee
print("ok   same answer by curl -T, -F data=@, -F file=@, /1.0, base64 text and requests.post:", top, answer[top])
PY

# ---- errors, each a TorchServe error body ----
expect 404 "unknown model" -H "$AUTH" -T "$WORK/cat.jpg" "$I/predictions/nosuchmodel" && json_error 404 "unknown model"
body_has "Model not found: nosuchmodel" "unknown model"
expect 404 "unknown version" -H "$AUTH" -T "$WORK/cat.jpg" "$I/predictions/mobilenet/9.9" && json_error 404 "unknown version"
expect 400 "corrupt image" -H "$AUTH" -T "$WORK/corrupt.jpg" "$I/predictions/mobilenet" && json_error 400 "corrupt image"
expect 400 "truncated JPEG" -H "$AUTH" -T "$WORK/truncated.jpg" "$I/predictions/mobilenet" && json_error 400 "truncated JPEG"
expect 400 "empty body" -H "$AUTH" -X POST "$I/predictions/mobilenet" && json_error 400 "empty body"
expect 400 "multipart without data field" -H "$AUTH" -F "other=@$WORK/cat.jpg" "$I/predictions/mobilenet" &&
  json_error 400 "multipart without data field"
expect 413 "body above max_request_size" -H "$AUTH" -T "$WORK/big.bin" "$I/predictions/mobilenet" &&
  json_error 413 "body above max_request_size"
expect 413 "chunked body above max_request_size" -H "$AUTH" -H "Transfer-Encoding: chunked" -T "$WORK/big.bin" \
  "$I/predictions/mobilenet" && json_error 413 "chunked body above max_request_size"
expect 417 "an Expect h2o does not know" -H "$AUTH" -H "Expect: something-else" -T "$WORK/cat.jpg" \
  "$I/predictions/mobilenet" && json_error 417 "an Expect h2o does not know"
expect 401 "no token" -T "$WORK/cat.jpg" "$I/predictions/mobilenet" && json_error 401 "no token"
expect 401 "wrong token" -H "Authorization: Bearer x$INFERENCE_KEY" -T "$WORK/cat.jpg" "$I/predictions/mobilenet" &&
  json_error 401 "wrong token"
expect 401 "management key on the inference API" -H "$MAUTH" -T "$WORK/cat.jpg" "$I/predictions/mobilenet"
expect 405 "GET /predictions" -H "$AUTH" "$I/predictions/mobilenet" && json_error 405 "GET /predictions"
expect 404 "unknown path" "$I/nope" && json_error 404 "unknown path"

# ---- management and metrics ----
expect 401 "management without token" "$M/models"
expect 200 "list models" -H "$MAUTH" "$M/models" && body_has '"modelName": "mobilenet"' "list models"
# each worker READY and pinned: its cores named (a "cores" key alone is there, empty, for
# a worker that was never bound) and at least one thread
expect 200 "describe model" -H "$MAUTH" "$M/models/mobilenet" &&
  check_json "$WORK/body" 'len(r[0]["workers"]) >= 1 and all(w["status"] == "READY" and w["cores"] and w["threads"] >= 1 for w in r[0]["workers"])' \
    "describe model: workers READY, each pinned to named cores"
# A scale is answered 202 before it is done unless synchronous=true (as TorchServe's); here
# to the count the model already has. The API description lists that answer.
workers=$(/usr/bin/python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))[0]["workers"]))' "$WORK/body")
expect 202 "scale, asynchronous by default" -X PUT -H "$MAUTH" "$M/models/mobilenet?min_worker=$workers"
curl -s -o "$WORK/api.json" --max-time 10 -X OPTIONS "$M/"
check_json "$WORK/api.json" '"202" in r["paths"]["/models/{model_name}"]["put"]["responses"]' \
  "API description: PUT /models/{model_name} may answer 202"
expect 405 "register without --enable-model-api" -X POST -H "$MAUTH" "$M/models?url=x.mar" &&
  json_error 405 "register without --enable-model-api"
expect 200 "metrics" "http://127.0.0.1:$METRICS_PORT/metrics" && body_has 'ts_inference_requests_total{model_name="mobilenet"' metrics
expect 200 "KServe v2 ready" "$I/v2/health/ready"
expect 200 "KServe v2 model ready" -H "$AUTH" "$I/v2/models/mobilenet/ready"

# ---- still serving after all that ----
expect 200 "ping after the bad requests" "$I/ping"
expect 200 "predict after the bad requests" -H "$AUTH" -T "$WORK/cat.jpg" "$I/predictions/mobilenet"
cmp -s "$WORK/body" "$WORK/raw.json" || fail "the answer changed after the bad requests"

# Who decodes: CPU seconds (utime + stime of /proc/PID/task/*/stat) of the threads named
# NAME, summed.
thread_cpu() {
  local name=$1 total=0 task ticks
  for task in /proc/"$SERVER_PID"/task/*; do
    [ "$(cat "$task/comm" 2>/dev/null)" = "$name" ] || continue
    ticks=$(sed 's/^.*) //' "$task/stat" | awk '{print $12 + $13}')
    total=$((total + ticks))
  done
  echo "$total"
}
http0=$(thread_cpu inferd-http) prep0=$(thread_cpu inferd-prep)
for i in 1 2 3 4 5 6; do
  expect 200 "24-megapixel JPEG $i" -H "$AUTH" -T "$WORK/gradient.jpg" "$I/predictions/mobilenet" >/dev/null
done
http=$(($(thread_cpu inferd-http) - http0)) prep=$(($(thread_cpu inferd-prep) - prep0))
if [ "$prep" -gt 0 ] && [ "$prep" -gt $((4 * http)) ]; then
  echo "ok   six 24-megapixel JPEGs decoded off the event loops: preprocessing threads $prep ticks, HTTP threads $http"
else
  fail "six 24-megapixel JPEGs: preprocessing threads took $prep CPU ticks, HTTP threads $http (want over 4 times as many)"
fi

# ---- graceful stop ----
serve_stop 60
[ "$SERVER_STATUS" = 0 ] || fail "SIGTERM: exit status $SERVER_STATUS, expected 0"
[ ! -e "$WORK/key_file.json" ] || fail "key_file.json still there after the stop"
if [ "$failures" -ne 0 ]; then
  echo "---- server log ----" >&2
  tail -n 40 "$WORK/server.log" >&2
  echo "serve_basic: $failures failure(s)" >&2
  exit 1
fi
echo "serve_basic: all passed"
