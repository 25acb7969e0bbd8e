#!/usr/bin/env bash
# serve_download.sh - registering a model from an http:// url, as TorchServe's
# POST /models?url=https://.../NAME.mar, on the real `inferd serve --enable-model-api`
# (127.0.0.1, free ports) with archives served by Python's http.server on 127.0.0.1:
#   allowed_urls (a regular expression) lets only /ok/ through: a url elsewhere is a 404
#   naming it (TorchServe's ModelNotFoundException) and downloads nothing, and so is a
#   redirect from /ok/ to elsewhere, while one within /ok/ is followed (a redirect loop
#   stops after 5); a register from /ok/mnet.mar downloads it into the
#   model store as mnet.mar, describe reports the url, the photo is classified; the same
#   url again is a 409 (the file exists); a missing file (404), a url with no file name or
#   a hidden one are 400s; a downloaded .onnx whose weight is external data naming a file
#   in the model store is a 400 (a download is one file: it reads nothing beside it);
#   a download that is no archive is a 400 and is deleted; no
#   temporary file is left behind; the unregister deletes mnet.mar, after which the url
#   registers again. An allowed_urls that is no regular expression stops the server at
#   start with exit status 2, naming the key.
#   A download blocks the management queue (the file server holds /ok/slow-* for 3 s),
#   which makes a race deterministic: an asynchronous scale without a version, queued
#   behind it, scales the version that was the default when it came, not the one a
#   set-default made the default meanwhile (TorchServe finds it when the request comes).
#
#   serve_download.sh INFERD SOURCE_DIR WORK_DIR
set -euo pipefail
INFERD=$1 SRC=$2 WORK=$3
. "$SRC/tests/e2e/serve_lib.sh"
WEB_PID=
cleanup() {
  [ -z "$WEB_PID" ] || kill "$WEB_PID" 2>/dev/null || true
  serve_cleanup
}
trap cleanup EXIT

rm -rf "$WORK"
mkdir -p "$WORK/store" "$WORK/web/ok" "$WORK/web/other"
PHOTO=/usr/lib/python3/dist-packages/skimage/data/chelsea.png
"$INFERD" archive --model-name mnet --version 1.0 --serialized-file "$SRC/models/mobilenet_v2_imagenet.onnx" \
  --handler image_classifier --extra-files "$SRC/models/index_to_name.json" --export-path "$WORK/web/ok" >/dev/null
cp "$WORK/web/ok/mnet.mar" "$WORK/web/other/mnet.mar"
"$INFERD" archive --model-name mnet --version 2.0 --serialized-file "$SRC/models/mobilenet_v2_imagenet.onnx" \
  --handler image_classifier --export-path "$WORK" >/dev/null
mv "$WORK/mnet.mar" "$WORK/web/ok/mnet-v2.mar"
"${INFERD_PYTHON:-/usr/bin/python3}" "$SRC/tests/fixtures/make_tiny.py" "$WORK/web/ok/tiny.onnx"
head -c 4096 /dev/urandom >"$WORK/web/ok/junk.mar"
# ext.onnx: MatMul by a weight stored as external data in stolen.bin, a file model_store
# holds; downloaded into model_store, it must not read it (a download is one file)
"${INFERD_PYTHON:-/usr/bin/python3}" - "$WORK" <<'PY'
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
work = sys.argv[1]
w = np.ones((4, 3), np.float32)
t = numpy_helper.from_array(w, "w")
t.ClearField("raw_data")
t.data_location = TensorProto.EXTERNAL
e = t.external_data.add()
e.key, e.value = "location", "stolen.bin"
g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "ext",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [t])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), work + "/web/ok/ext.onnx")
w.tofile(work + "/store/stolen.bin")
PY
printf 'not hidden\n' >"$WORK/web/ok/.hidden"

serve_ports
set -- $(free_ports 4)
WEB_PORT=
for p in "$@"; do
  case $p in "$INFERENCE_PORT" | "$MANAGEMENT_PORT" | "$METRICS_PORT") ;; *) WEB_PORT=$p ;; esac
done
[ -n "$WEB_PORT" ] || { echo "serve_download: no free port for the file server" >&2; exit 1; }
# Python's http.server, where /ok/slow-X is X after 3 s (writing "begin /ok/slow-X" to
# its log first), /ok/moved-X redirects to /ok/X, /ok/away-X to /other/X and /ok/loop-X
# to itself
(cd "$WORK/web" && exec /usr/bin/python3 -u -c '
import http.server, sys, time
class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        for prefix, to in (("/ok/moved-", "/ok/"), ("/ok/away-", "/other/"), ("/ok/loop-", "/ok/loop-")):
            if self.path.startswith(prefix):
                self.send_response(302)
                self.send_header("Location", to + self.path[len(prefix):])
                self.send_header("Content-Length", "9")
                self.end_headers()
                self.wfile.write(b"redirect\n")
                return
        if self.path.startswith("/ok/slow-"):
            print("begin " + self.path, flush=True)
            time.sleep(3)
            self.path = "/ok/" + self.path[len("/ok/slow-"):]
        super().do_GET()
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
' "$WEB_PORT" >"$WORK/web.log" 2>&1) &
WEB_PID=$!
W="http://127.0.0.1:$WEB_PORT"
web_up=no
for i in $(seq 1 100); do
  curl -sf -o /dev/null --max-time 2 "$W/ok/mnet.mar" && { web_up=yes; break; }
  sleep 0.1
done
[ "$web_up" = yes ] || { echo "FAIL: the file server did not start: $(cat "$WORK/web.log")" >&2; exit 1; }

# an allowed_urls that does not compile: the server does not start
serve_config "$WORK/bad.properties" "model_store=$WORK/store" "allowed_urls=http://ok/.*,(unclosed"
status=0
(cd "$WORK" && timeout 60 "$INFERD" serve --ts-config "$WORK/bad.properties" --foreground >bad.log 2>&1) || status=$?
if [ "$status" = 2 ] && grep -q "allowed_urls.*(unclosed" "$WORK/bad.log"; then
  echo "ok   allowed_urls that is no regular expression: exit 2, naming it"
else
  fail "allowed_urls '(unclosed': exit $status, want 2 naming the key: $(head -c 300 "$WORK/bad.log")"
fi

serve_config "$WORK/config.properties" \
  "model_store=$WORK/store" \
  "enable_model_api=true" \
  "disable_token_authorization=true" \
  "allowed_urls=http://127\\\\.0\\\\.0\\\\.1:$WEB_PORT/ok/.*" # \\. in the file: \. (Java's escapes)
serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground
serve_wait_ready 60
M="http://127.0.0.1:$MANAGEMENT_PORT"
I="http://127.0.0.1:$INFERENCE_PORT"
store_has() { [ -e "$WORK/store/$1" ]; }
no_temporaries() {
  if ls -A "$WORK/store" | grep -q '^\.'; then fail "$1: a temporary file is left: $(ls -A "$WORK/store")"; fi
}

call "a url allowed_urls does not match" 404 \
  "'does not match any allowed URL(s)' in r['message'] and '/other/mnet.mar' in r['message']" \
  -X POST "$M/models?url=$W/other/mnet.mar"
store_has mnet.mar && fail "the url that is not allowed was downloaded"
call "a redirect out of allowed_urls" 404 \
  "'does not match any allowed URL(s)' in r['message'] and '/other/mnet.mar' in r['message']" \
  -X POST "$M/models?url=$W/ok/away-mnet.mar"
store_has away-mnet.mar && fail "the redirect out of allowed_urls was downloaded"
call "a redirect loop" 400 "'more than 5 redirects' in r['message']" -X POST "$M/models?url=$W/ok/loop-x.mar"

call "register from an allowed url" 200 "'registered with 1 initial workers' in r['status']" \
  -X POST "$M/models?url=$W/ok/mnet.mar&initial_workers=1"
store_has mnet.mar || fail "mnet.mar is not in the model store"
mode=$(stat -c %a "$WORK/store/mnet.mar") want=$(printf '%o' $((0666 & ~$(umask))))
[ "$mode" = "$want" ] && echo "ok   the download's mode is the umask's ($mode)" ||
  fail "mnet.mar has mode $mode, the umask makes $want (a temporary file's 600 kept?)"
call "describe: modelUrl is the url" 200 "r[0]['modelUrl'] == '$W/ok/mnet.mar'" "$M/models/mnet"
call "classify with the downloaded model" 200 "len(r) == 5 and any('cat' in k for k in r)" \
  -X POST "$I/predictions/mnet" -T "$PHOTO"
call "the same url again: the file exists" 409 "r['message'] == 'Model file already exists mnet.mar'" \
  -X POST "$M/models?url=$W/ok/mnet.mar"

call "a missing file" 400 "'Failed to download archive from' in r['message'] and '404' in r['message']" \
  -X POST "$M/models?url=$W/ok/missing.mar"
store_has missing.mar && fail "a failed download left missing.mar"
call "a url without a file name" 400 "'file name' in r['message']" -X POST "$M/models?url=$W/ok/"
call "a url naming a hidden file" 400 "'file name' in r['message']" -X POST "$M/models?url=$W/ok/.hidden"
store_has .hidden && fail "the hidden file was downloaded"
call "a download that is no archive" 400 "'junk.mar' in r['message']" -X POST "$M/models?url=$W/ok/junk.mar"
call "a downloaded .onnx reads no external data from model_store" 400 \
  "\"'stolen.bin' outside the model file, and the model came without a directory\" in r['message']" \
  -X POST "$M/models?url=$W/ok/ext.onnx"
store_has junk.mar && fail "junk.mar was kept after its register failed"
no_temporaries "after the failed downloads"

# the race: scale mnet (default 1.0) asynchronously behind a 3 s download, set-default 2.0
call "register version 2.0 from a redirected url" 200 "'registered with 1 initial workers' in r['status']" \
  -X POST "$M/models?url=$W/ok/moved-mnet-v2.mar&initial_workers=1"
store_has moved-mnet-v2.mar || fail "the redirected download is not in the store as moved-mnet-v2.mar"
curl -s --max-time 60 -o "$WORK/slow.json" -X POST "$M/models?url=$W/ok/slow-tiny.onnx&model_name=tiny&initial_workers=1" &
SLOW_PID=$!
for i in $(seq 1 200); do # until the download has begun: the management thread waits for it
  grep -q "begin /ok/slow-tiny.onnx" "$WORK/web.log" && break
  sleep 0.05
done
call "an asynchronous scale without a version, queued behind the download" 202 '' \
  -X PUT "$M/models/mnet?min_worker=2"
call "set-default 2.0 while the scale waits" 200 '' -X PUT "$M/models/mnet/2.0/set-default"
call "the scale waits behind the download" 200 "r[0]['minWorkers'] == 1" "$M/models/mnet/1.0"
wait "$SLOW_PID" || fail "the slow register: curl exit $?"
check_json "$WORK/slow.json" "'registered with 1 initial workers' in r['status']" "the slow download registered"
for i in $(seq 1 100); do
  curl -s -o "$WORK/v1.json" "$M/models/mnet/1.0"
  /usr/bin/python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))[0]["minWorkers"] != 2)' \
    "$WORK/v1.json" && break
  sleep 0.1
done
call "the scale went to 1.0, the default when it came" 200 "r[0]['minWorkers'] == 2" "$M/models/mnet/1.0"
call "not to 2.0, the default when it ran" 200 "r[0]['minWorkers'] == 1" "$M/models/mnet/2.0"
call "unregister version 1.0" 200 '' -X DELETE "$M/models/mnet/1.0"
call "unregister version 2.0" 200 '' -X DELETE "$M/models/mnet/2.0"
call "unregister slow-tiny" 200 '' -X DELETE "$M/models/tiny"
store_has moved-mnet-v2.mar && fail "the unregister left moved-mnet-v2.mar"
store_has slow-tiny.onnx && fail "the unregister left slow-tiny.onnx"
store_has mnet.mar && fail "the unregister left mnet.mar in the model store"
call "the url registers again" 200 "'registered with 1 initial workers' in r['status']" \
  -X POST "$M/models?url=$W/ok/mnet.mar&initial_workers=1"
call "classify again" 200 "len(r) == 5" -X POST "$I/predictions/mnet" -T "$PHOTO"
no_temporaries "at the end"

serve_finish serve_download "$WORK"
