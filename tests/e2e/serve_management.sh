#!/usr/bin/env bash
# serve_management.sh - TorchServe's model management over HTTP, end to end, on the real
# `inferd serve --enable-model-api` (127.0.0.1, free ports, token auth on) with a model
# store holding two versions of MobileNetV2 as .mar archives made by `inferd archive`:
#   register (synchronous, 1 worker) -> list -> classify the chelsea photo; scale as
#   TorchServe's handleScaleModel does (min_worker defaults to 1, max_worker to
#   min_worker, max_worker < min_worker is a 400, model_version names the version;
#   describe reports both, the model runs min_worker workers); the same
#   version again is a conflict; a second version; describe all versions (a trailing '/'
#   dropped, an inner empty segment an empty model name, as TorchServe's split); set-default;
#   predictions by version; the default version cannot be removed while another exists
#   (403 InvalidModelVersionException, TorchServe's answer);
#   unregister both -> 404 for describe and predictions;
#   bad registrations get a 4xx with a JSON message: no url, a url outside the model
#   store, an ftp url, an https url naming an archive the store has (409, as nothing
#   may be downloaded over it), a missing file, a %00 in url or model_name (which would cut
#   the file name short), a bad model_name or initial_workers, a url that is not UTF-8
#   (JSON bodies must be: it would vanish from the list); no token is 401; error
#   messages that echo bytes that are not UTF-8 stay valid JSON (U+FFFD);
#   a register without synchronous waits for its workers (TorchServe's default), one with
#   synchronous=false is a 202; status messages with the longest name and version are whole;
#   GET /models pagination over 101 models as TorchServe's ApiUtils.getModelList: limit
#   above 100 or below 0 is 100, limit=0 lists none, a page token below 0 is 0, a page
#   that ends exactly at the end still has a nextPageToken (to an empty page); v2 infer on
#   one model while another is registered and unregistered 20 times: 200 with the right
#   answer, or 404/503 for the one that comes and goes; a configured default version whose
#   synchronous register fails goes, and the default before is the default again, also
#   when a set-default made the failing version the default meanwhile; a synchronous
#   scale whose workers fail to start is a 500 as such a register is; an
#   archive's model-config.yaml sets workers and batching (a request's values win), and a
#   broken or missing one is a 400 naming it. inferd's own `precision: bf16`, from a
#   model-config.yaml or from models={...}: describe says so, the weights take about half
#   the fp32 model's memory (7.1 MB against 14.2: biases stay float32), and the cat photo
#   keeps its class.
#   A model of load_models scaled to 0 leaves /ping and /v2/health/ready at 200 (its own
#   v2 ready is 503), as TorchServe's /ping counts minWorkers.
# The server is stopped in every path, and must exit 0 on SIGTERM.
#
#   serve_management.sh INFERD SOURCE_DIR WORK_DIR
set -euo pipefail
INFERD=$1 SRC=$2 WORK=$3
. "$SRC/tests/e2e/serve_lib.sh"
trap serve_cleanup EXIT

rm -rf "$WORK"
mkdir -p "$WORK/store" "$WORK/v2"
PHOTO=/usr/lib/python3/dist-packages/skimage/data/chelsea.png

archive() { # VERSION DIR
  "$INFERD" archive --model-name mnet --version "$1" --serialized-file "$SRC/models/mobilenet_v2_imagenet.onnx" \
    --handler image_classifier --extra-files "$SRC/models/index_to_name.json" --export-path "$2" >/dev/null
}
archive 1.0 "$WORK/store"
archive 2.0 "$WORK/v2"
mv "$WORK/v2/mnet.mar" "$WORK/store/mnet-v2.mar"
# a tiny MLP in archives with a model-config.yaml (torch-model-archiver --config-file):
# ys loads at startup, ym and ybad are registered below
"${INFERD_PYTHON:-/usr/bin/python3}" "$SRC/tests/fixtures/make_tiny.py" "$WORK/store/mlp.onnx" --mlp
printf 'minWorkers: 1\nmaxWorkers: 3\nbatchSize: 4\nmaxBatchDelay: 20\nresponseTimeout: 30\ndeviceType: gpu\nhandler:\n  topk: 3\n' \
  >"$WORK/model-config.yaml"
yaml_archive() { # NAME FORMAT [YAML]
  "$INFERD" archive --model-name "$1" --serialized-file "$WORK/store/mlp.onnx" --handler tensor \
    --config-file "${3:-$WORK/model-config.yaml}" --archive-format "$2" --export-path "$WORK/v2" >/dev/null
}
yaml_archive ys default
yaml_archive ym default
printf 'minWorkers: 2\nbatchSize: 2\n' >"$WORK/yw.yaml" # minWorkers without maxWorkers: not taken
yaml_archive yw default "$WORK/yw.yaml"
mv "$WORK/v2/ys.mar" "$WORK/v2/ym.mar" "$WORK/v2/yw.mar" "$WORK/store/"
# MobileNetV2 in bfloat16: by its model-config.yaml (mnet16), by models={...} (mnet16j)
printf 'precision: bf16\n' >"$WORK/bf16.yaml"
for name in mnet16 mnet16j; do
  "$INFERD" archive --model-name "$name" --serialized-file "$SRC/models/mobilenet_v2_imagenet.onnx" \
    --handler image_classifier --extra-files "$SRC/models/index_to_name.json" --export-path "$WORK/store" \
    $([ "$name" = mnet16 ] && echo --config-file "$WORK/bf16.yaml") >/dev/null
done
yaml_archive ym no-archive # the directory v2/ym, broken below as ybad

serve_ports
serve_config "$WORK/config.properties" \
  "model_store=$WORK/store" \
  "enable_model_api=true" \
  "load_models=ys.mar" \
  "default_workers_per_model=1" \
  'models={"dv": {"2.0": {"defaultVersion": true, "batchSize": 8}}, "ys": {"1.0": {"batchSize": 8, "minWorkers": 2, "maxBatchDelay": 5}}, "mnet16j": {"1.0": {"precision": "bf16"}}}'
serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground
serve_wait_ready 60
serve_keys "$WORK"
M="http://127.0.0.1:$MANAGEMENT_PORT"
I="http://127.0.0.1:$INFERENCE_PORT"

# mcall NAME EXPECTED_STATUS [PYTHON_CONDITION_ON_r] CURL_ARGS...: serve_lib.sh's call,
# where no condition means any JSON object with a message or a status
mcall() {
  local cond=$3
  [ -n "$cond" ] || cond='isinstance(r, dict) and (r.get("message") or r.get("status"))'
  call "$1" "$2" "$cond" "${@:4}"
}
MA=(-H "Authorization: Bearer $MANAGEMENT_KEY")
IA=(-H "Authorization: Bearer $INFERENCE_KEY")

# ys: its model-config.yaml wins over models={...}, as in TorchServe
settings() { # BATCH DELAY TIMEOUT MIN MAX: describe's settings
  echo "(r[0]['batchSize'], r[0]['maxBatchDelay'], r[0]['responseTimeout'], r[0]['minWorkers'], r[0]['maxWorkers']) == ($1, $2, $3, $4, $5)"
}
mcall "ys loaded at startup with its model-config.yaml's settings" 200 "$(settings 4 20 30 1 3)" "${MA[@]}" "$M/models/ys"
# a model of load_models scaled to 0 on purpose leaves the server healthy, as TorchServe's
# /ping (running workers against the sum of minWorkers); the model itself is not ready
mcall "scale ys (loaded at startup) to 0" 200 '' "${MA[@]}" -X PUT "$M/models/ys?min_worker=0&synchronous=true"
call "/ping with ys scaled to 0: still Healthy" 200 'r == {"status": "Healthy"}' "$I/ping"
call "/v2/health/ready with ys scaled to 0" 200 'r == {"ready": True}' "$I/v2/health/ready"
call "v2 ready of ys scaled to 0: false" 503 'r["ready"] is False' "${IA[@]}" "$I/v2/models/ys/ready"
mcall "scale ys back to 1" 200 '' "${MA[@]}" -X PUT "$M/models/ys?min_worker=1&synchronous=true"
call "/ping with ys back at 1 worker" 200 'r == {"status": "Healthy"}' "$I/ping"
call "v2 ready of ys back at 1 worker" 200 'r["ready"] is True' "${IA[@]}" "$I/v2/models/ys/ready"
mcall "unregister ys" 200 '' "${MA[@]}" -X DELETE "$M/models/ys"
mcall "empty list" 200 'r["models"] == []' "${MA[@]}" "$M/models"
mcall "register mnet 1.0" 200 '"registered with 1 initial workers" in r["status"]' \
  "${MA[@]}" -X POST "$M/models?url=mnet.mar&initial_workers=1&synchronous=true"
mcall "listed" 200 '[m["modelName"] for m in r["models"]] == ["mnet"]' "${MA[@]}" "$M/models"
mcall "classify with 1.0" 200 'list(r)[0] == "Egyptian cat" and len(r) == 5' "${IA[@]}" -T "$PHOTO" "$I/predictions/mnet"

# ---- scaling ------------------------------------------------------------------------------
workers() { # MIN MAX RUNNING: describe's minWorkers, maxWorkers and running workers
  echo "r[0]['minWorkers'] == $1 and r[0]['maxWorkers'] == $2 and len([w for w in r[0]['workers'] if w['status'] in ('READY', 'BUSY')]) == $3"
}
mcall "scale with no parameters: min_worker defaults to 1" 200 'r["status"] == "Workers scaled to 1 for model: mnet"' \
  "${MA[@]}" -X PUT "$M/models/mnet?synchronous=true"
mcall "describe: 1 worker, max 1" 200 "$(workers 1 1 1)" "${MA[@]}" "$M/models/mnet"
mcall "max_worker alone: min_worker stays 1" 200 '"Workers scaled to 1 " in r["status"]' \
  "${MA[@]}" -X PUT "$M/models/mnet?max_worker=2&synchronous=true"
mcall "describe: 1 worker, max 2" 200 "$(workers 1 2 1)" "${MA[@]}" "$M/models/mnet"
mcall "min_worker=2, max_worker=3, model_version=1.0" 200 'r["status"] == "Workers scaled to 2 for model: mnet, version: 1.0"' \
  "${MA[@]}" -X PUT "$M/models/mnet?min_worker=2&max_worker=3&model_version=1.0&synchronous=true"
mcall "describe: 2 workers, max 3" 200 "$(workers 2 3 2)" "${MA[@]}" "$M/models/mnet"
metric_workers() { # MODEL VERSION: inferd_workers of that model at a scrape
  curl -s --max-time 30 "http://127.0.0.1:$METRICS_PORT/metrics" |
    sed -n "s/^inferd_workers{model_name=\"$1\",model_version=\"$2\"} //p"
}
[ "$(metric_workers mnet 1.0)" = 2 ] && echo "ok   /metrics: inferd_workers 2" ||
  fail "/metrics: inferd_workers of mnet is '$(metric_workers mnet 1.0)', want 2"
mcall "max_worker below min_worker" 400 \
  'r == {"code": 400, "type": "BadRequestException", "message": "max_worker cannot be less than min_worker."}' \
  "${MA[@]}" -X PUT "$M/models/mnet?min_worker=3&max_worker=2&synchronous=true"
mcall "describe: unchanged by the 400" 200 "$(workers 2 3 2)" "${MA[@]}" "$M/models/mnet"
mcall "min_worker=2 alone" 200 '"Workers scaled to 2 " in r["status"]' \
  "${MA[@]}" -X PUT "$M/models/mnet?min_worker=2&synchronous=true"
mcall "describe: max_worker follows min_worker" 200 "$(workers 2 2 2)" "${MA[@]}" "$M/models/mnet"
mcall "without synchronous: 202" 202 'r["status"] == "Processing worker updates..."' \
  "${MA[@]}" -X PUT "$M/models/mnet?min_worker=2&max_worker=2"
mcall "model_version of no such version" 404 '' "${MA[@]}" -X PUT "$M/models/mnet?min_worker=1&model_version=9.9"
mcall "a bad min_worker" 400 '' "${MA[@]}" -X PUT "$M/models/mnet?min_worker=x"
mcall "an empty min_worker is its default, 1" 200 '"Workers scaled to 1 " in r["status"]' \
  "${MA[@]}" -X PUT "$M/models/mnet?min_worker=&max_worker=&synchronous=true"
mcall "a bad max_worker" 400 '' "${MA[@]}" -X PUT "$M/models/mnet?max_worker=-1"
mcall "a model_version that is not UTF-8: kept where well-formed, else U+FFFD" 404 \
  'r["message"] == "Model version: \u00e9\ufffd does not exist for model: mnet"' \
  "${MA[@]}" -X PUT "$M/models/mnet?model_version=%C3%A9%FF"
mcall "back to 1 by the version in the path" 200 'r["status"] == "Workers scaled to 1 for model: mnet, version: 1.0"' \
  "${MA[@]}" -X PUT "$M/models/mnet/1.0?min_worker=1&synchronous=true"
mcall "describe: 1 worker, max 1 again" 200 "$(workers 1 1 1)" "${MA[@]}" "$M/models/mnet"
[ "$(metric_workers mnet 1.0)" = 1 ] && echo "ok   /metrics: inferd_workers 1 after scaling down" ||
  fail "/metrics: inferd_workers of mnet is '$(metric_workers mnet 1.0)', want 1"
mcall "classify after scaling" 200 'list(r)[0] == "Egyptian cat"' "${IA[@]}" -T "$PHOTO" "$I/predictions/mnet"
mcall "the same version again: conflict" 409 '' "${MA[@]}" -X POST "$M/models?url=mnet.mar&synchronous=true"
mcall "register mnet 2.0" 200 '"Version: 2.0" in r["status"]' \
  "${MA[@]}" -X POST "$M/models?url=mnet-v2.mar&initial_workers=1&synchronous=true"
mcall "describe all versions" 200 'sorted(m["modelVersion"] for m in r) == ["1.0", "2.0"]' "${MA[@]}" "$M/models/mnet/all"
mcall "a trailing / is dropped" 200 'sorted(m["modelVersion"] for m in r) == ["1.0", "2.0"]' "${MA[@]}" "$M/models/mnet/all/"
# as TorchServe's split("/"): an inner empty segment is an empty model name, not skipped
mcall "/models//1.0 names the model ''" 404 'r["message"] == "Model not found: "' "${MA[@]}" "$M/models//1.0"
mcall "/models//mnet too" 404 'r["message"] == "Model not found: "' "${MA[@]}" "$M/models//mnet"
mcall "v2 metadata lists both versions" 200 'r["versions"] == ["1.0", "2.0"]' "${IA[@]}" "$I/v2/models/mnet"
mcall "v2 metadata of a version lists both too" 200 'r["versions"] == ["1.0", "2.0"]' "${IA[@]}" \
  "$I/v2/models/mnet/versions/2.0"
mcall "default is still 1.0" 200 '[m["modelVersion"] for m in r] == ["1.0"]' "${MA[@]}" "$M/models/mnet"
mcall "set-default 2.0" 200 '"2.0" in r["status"]' "${MA[@]}" -X PUT "$M/models/mnet/2.0/set-default"
mcall "default is 2.0" 200 '[m["modelVersion"] for m in r] == ["2.0"]' "${MA[@]}" "$M/models/mnet"
mcall "set-default of no such version" 404 '' "${MA[@]}" -X PUT "$M/models/mnet/9.9/set-default"
mcall "classify with 1.0 by version" 200 'list(r)[0] == "Egyptian cat"' "${IA[@]}" -T "$PHOTO" "$I/predictions/mnet/1.0"
mcall "classify with the default" 200 'list(r)[0] == "Egyptian cat"' "${IA[@]}" -T "$PHOTO" "$I/predictions/mnet"
mcall "the default may not go first: 403, as TorchServe" 403 \
  'r["type"] == "InvalidModelVersionException" and r["message"].startswith("Cannot remove default version 2.0 of model mnet")' \
  "${MA[@]}" -X DELETE "$M/models/mnet/2.0"
mcall "nor by the model's name alone" 403 '' "${MA[@]}" -X DELETE "$M/models/mnet"
mcall "unregister 1.0" 200 '"unregistered" in r["status"]' "${MA[@]}" -X DELETE "$M/models/mnet/1.0"
mcall "1.0 is gone" 404 '' "${IA[@]}" -T "$PHOTO" "$I/predictions/mnet/1.0"
mcall "unregister the last version" 200 '' "${MA[@]}" -X DELETE "$M/models/mnet"
mcall "describe after unregister" 404 '' "${MA[@]}" "$M/models/mnet"
mcall "predictions after unregister" 404 '' "${IA[@]}" -T "$PHOTO" "$I/predictions/mnet"
mcall "empty list again" 200 'r["models"] == []' "${MA[@]}" "$M/models"

# ---- bad registrations ------------------------------------------------------------------
mcall "no url" 400 '' "${MA[@]}" -X POST "$M/models"
mcall "url outside the model store" 400 '' "${MA[@]}" -X POST "$M/models?url=../store/mnet.mar"
# (serve_download.sh downloads; these two are refused before any connection is made)
mcall "an https url naming an archive the store has" 409 'r["message"] == "Model file already exists mnet.mar"' \
  "${MA[@]}" -X POST "$M/models?url=https://example.com/mnet.mar"
mcall "an ftp url" 400 '"only http:// and https://" in r["message"]' "${MA[@]}" -X POST "$M/models?url=ftp://example.com/m.mar"
mcall "url of no file" 404 '' "${MA[@]}" -X POST "$M/models?url=none.mar"
mcall "a %00 in url" 400 '"NUL" in r["message"]' "${MA[@]}" -X POST "$M/models?url=mnet.mar%00.txt"
mcall "a %00 in model_name" 400 '"NUL" in r["message"]' "${MA[@]}" -X POST "$M/models?url=mnet.mar&model_name=a%00b"
mcall "a bad model_name" 400 '' "${MA[@]}" -X POST "$M/models?url=mnet.mar&model_name=-x"
mcall "a bad initial_workers" 400 '' "${MA[@]}" -X POST "$M/models?url=mnet.mar&initial_workers=x"
mcall "no token" 401 '' -X POST "$M/models?url=mnet.mar"
mcall "a url that is not UTF-8" 400 '"\ufffd.mar" in r["message"]' "${MA[@]}" -X POST "$M/models?url=%FF.mar"
cp "$WORK/store/mnet.mar" "$WORK/store/$(printf '\377').mar"
mcall "a file whose name is not UTF-8" 400 '' "${MA[@]}" -X POST "$M/models?url=%FF.mar&synchronous=true"
mcall "which registered nothing" 404 '' "${MA[@]}" "$M/models/mnet"
mcall "nothing registered by the bad requests" 200 'r["models"] == []' "${MA[@]}" "$M/models"

# synchronous: a register waits for its workers unless told not to (TorchServe's default is
# true for a register, false for a scale)
mcall "register without synchronous: 200 once its worker is up" 200 '"registered with 1 initial workers" in r["status"]' \
  "${MA[@]}" -X POST "$M/models?url=mlp.onnx&model_name=plain&initial_workers=1"
mcall "which is ready at once" 200 'r[0]["ready"] and [w["status"] for w in r[0]["workers"]] == ["READY"]' \
  "${MA[@]}" "$M/models/plain"
mcall "register with synchronous=false: 202" 202 'r["status"] == "Processing worker updates..."' \
  "${MA[@]}" -X POST "$M/models?url=mlp.onnx&model_name=plain2&initial_workers=1&synchronous=false"
mcall "unregister plain" 200 '' "${MA[@]}" -X DELETE "$M/models/plain"
mcall "unregister plain2" 200 '' "${MA[@]}" -X DELETE "$M/models/plain2"

# a JSON body with the query's keys, as TorchServe's parseRequest reads one when the
# Content-Type is application/json (the query is then not read)
JA=("${MA[@]}" -H 'Content-Type: application/json; charset=utf-8' -X POST)
mcall "register by a JSON body" 200 '"registered with 1 initial workers" in r["status"]' "${JA[@]}" \
  -d '{"url": "mlp.onnx", "model_name": "byjson", "initial_workers": 1, "batch_size": 2, "max_batch_delay": 7, "handler": "x"}' \
  "$M/models?url=none.mar&model_name=notthis"
mcall "which has the body's settings" 200 "$(settings 2 7 120 1 1) and r[0]['modelName'] == 'byjson'" \
  "${MA[@]}" "$M/models/byjson"
mcall "a JSON body with synchronous false: 202" 202 '' "${JA[@]}" \
  -d '{"url": "mlp.onnx", "model_name": "byjson2", "initial_workers": 1, "synchronous": false}' "$M/models"
mcall "a JSON body without url" 400 'r["message"] == "Parameter url is required."' "${JA[@]}" \
  -d '{"model_name": "x"}' "$M/models?url=mlp.onnx"
mcall "a JSON body that is not JSON" 400 '"JSON" in r["message"]' "${JA[@]}" -d '{"url": ' "$M/models"
mcall "a JSON body that is not an object" 400 '' "${JA[@]}" -d '["mlp.onnx"]' "$M/models"
mcall "numbers as strings or integral reals, as TorchServe's Gson reads them" 200 \
  '"registered with 1 initial workers" in r["status"]' "${JA[@]}" \
  -d '{"url": "mlp.onnx", "model_name": "bystr", "initial_workers": "1", "batch_size": 2.0, "synchronous": "TRUE"}' "$M/models"
mcall "unregister bystr" 200 '' "${MA[@]}" -X DELETE "$M/models/bystr"
mcall "a JSON body whose initial_workers is not a number" 400 '"initial_workers" in r["message"]' "${JA[@]}" \
  -d '{"url": "mlp.onnx", "initial_workers": "1x"}' "$M/models"
mcall "a JSON body whose initial_workers is a fraction" 400 '"initial_workers" in r["message"]' "${JA[@]}" \
  -d '{"url": "mlp.onnx", "initial_workers": 1.5}' "$M/models"
mcall "a JSON body whose batch_size is out of range" 400 '"batch_size" in r["message"]' "${JA[@]}" \
  -d '{"url": "mlp.onnx", "batch_size": 0}' "$M/models"
mcall "a JSON body whose url is a number" 400 '' "${JA[@]}" -d '{"url": 5}' "$M/models"
mcall "a JSON body whose synchronous is neither true nor false" 400 '"synchronous" in r["message"]' "${JA[@]}" \
  -d '{"url": "mlp.onnx", "synchronous": "yes"}' "$M/models"
mcall "unregister byjson" 200 '' "${MA[@]}" -X DELETE "$M/models/byjson"
mcall "unregister byjson2" 200 '' "${MA[@]}" -X DELETE "$M/models/byjson2"

# the longest name and version (255 bytes each): the status messages are whole
LONG_N=$(printf 'n%.0s' $(seq 1 255)) LONG_V=$(printf 'v%.0s' $(seq 1 255))
"$INFERD" archive --model-name longv --version "$LONG_V" --serialized-file "$WORK/store/mlp.onnx" --handler tensor \
  --export-path "$WORK/v2" --force >/dev/null
mv "$WORK/v2/longv.mar" "$WORK/store/longv.mar"
mcall "register the longest name and version: the whole message" 200 \
  "r['status'] == 'Model \"$LONG_N\" Version: $LONG_V registered with 0 initial workers. Use scale workers API to add workers for the model.'" \
  "${MA[@]}" -X POST "$M/models?url=longv.mar&model_name=$LONG_N&initial_workers=0"
mcall "set-default of it: the whole message" 200 \
  "r['status'] == 'Default version successfully updated for model \"$LONG_N\" to \"$LONG_V\"'" \
  "${MA[@]}" -X PUT "$M/models/$LONG_N/$LONG_V/set-default"
mcall "scale it by version: the whole message" 200 \
  "r['status'] == 'Workers scaled to 0 for model: $LONG_N, version: $LONG_V'" \
  "${MA[@]}" -X PUT "$M/models/$LONG_N/$LONG_V?min_worker=0&synchronous=true"
mcall "unregister it" 200 '' "${MA[@]}" -X DELETE "$M/models/$LONG_N"

# ---- pagination: 101 models (bare .onnx files of a tiny MLP, registered with no workers) --
for i in $(seq -w 0 100); do
  ln -s mlp.onnx "$WORK/store/m$i.onnx"
  code=$(curl -s -o "$WORK/body" -w '%{http_code}' "${MA[@]}" -X POST "$M/models?url=m$i.onnx&initial_workers=0") ||
    code=000
  [ "$code" = 200 ] || fail "register m$i: HTTP $code: $(head -c 300 "$WORK/body")"
done
names() { # FIRST COUNT: the names m<FIRST> .. as a Python list
  echo "['m%03d' % i for i in range($1, $1 + $2)]"
}
mcall "list: 100 by default" 200 "[m['modelName'] for m in r['models']] == $(names 0 100) and r['nextPageToken'] == '100'" \
  "${MA[@]}" "$M/models"
mcall "limit=500 is 100" 200 "[m['modelName'] for m in r['models']] == $(names 0 100) and r['nextPageToken'] == '100'" \
  "${MA[@]}" "$M/models?limit=500"
mcall "limit=-1 is 100" 200 "[m['modelName'] for m in r['models']] == $(names 0 100)" "${MA[@]}" "$M/models?limit=-1"
mcall "limit=0 lists none" 200 "r['models'] == []" "${MA[@]}" "$M/models?limit=0"
mcall "limit=100, second page" 200 "[m['modelName'] for m in r['models']] == $(names 100 1) and 'nextPageToken' not in r" \
  "${MA[@]}" "$M/models?limit=100&next_page_token=100"
mcall "limit=2 from 99, ending at the end: a token all the same" 200 \
  "[m['modelName'] for m in r['models']] == $(names 99 2) and r['nextPageToken'] == '101'" \
  "${MA[@]}" "$M/models?limit=2&next_page_token=99"
mcall "from 101, an empty page" 200 "r['models'] == [] and 'nextPageToken' not in r" \
  "${MA[@]}" "$M/models?limit=2&next_page_token=101"
mcall "limit=3, a token below 0 is 0" 200 "[m['modelName'] for m in r['models']] == $(names 0 3) and r['nextPageToken'] == '3'" \
  "${MA[@]}" "$M/models?limit=3&next_page_token=-5"
mcall "limit not a number" 400 '' "${MA[@]}" "$M/models?limit=x"
# an empty value is the default, as TorchServe's getIntParameter reads it
mcall "empty limit and next_page_token: the first page" 200 \
  "[m['modelName'] for m in r['models']] == $(names 0 100) and r['nextPageToken'] == '100'" \
  "${MA[@]}" "$M/models?limit=&next_page_token="

# ---- a configured default version whose register fails ------------------------------------
# dv 2.0 is the default by models={...} and loads at its batchSize 8, but its Reshape to
# [8, 4] cannot run a batch of 1, so its workers fail to start: the synchronous register
# fails, 2.0 is gone and 1.0, the default before, is the default again.
"${INFERD_PYTHON:-/usr/bin/python3}" - "$WORK/only8.onnx" <<'PY'
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
nodes = [helper.make_node("Reshape", ["input", "shape"], ["r"], name="reshape"),
         helper.make_node("Relu", ["r"], ["output"], name="relu")]
graph = helper.make_graph(nodes, "only8", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 4])],
                          initializer=[numpy_helper.from_array(np.array([8, 4], np.int64), "shape")])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
PY
for v in 1.0 2.0; do
  model=$WORK/store/mlp.onnx
  [ $v = 1.0 ] || model=$WORK/only8.onnx
  "$INFERD" archive --model-name dv --version $v --serialized-file "$model" --handler tensor \
    --export-path "$WORK/v2" --force >/dev/null
  mv "$WORK/v2/dv.mar" "$WORK/store/dv-$v.mar"
done
mcall "register dv 1.0" 200 '' "${MA[@]}" -X POST "$M/models?url=dv-1.0.mar&initial_workers=1&synchronous=true"
code=$(curl -s -o "$WORK/body" -w '%{http_code}' "${MA[@]}" -X POST \
  "$M/models?url=dv-2.0.mar&initial_workers=1&synchronous=true") || code=000
case $code in
  500) grep -q 'Failed to start workers for model dv version: 2.0' "$WORK/body" &&
    echo "ok   register dv 2.0 (the configured default) fails: HTTP $code $(head -c 200 "$WORK/body")" ||
    fail "register dv 2.0: the message should say its workers failed: $(head -c 300 "$WORK/body")" ;;
  *) fail "register dv 2.0 should fail: HTTP $code $(head -c 300 "$WORK/body")" ;;
esac
mcall "dv: only 1.0 is left, the default again" 200 \
  '[(m["modelVersion"], m["isDefault"]) for m in r] == [("1.0", True)]' "${MA[@]}" "$M/models/dv/all"
call "dv answers with 1.0" 200 'r["model_version"] == "1.0"' "${IA[@]}" -H 'Content-Type: application/json' \
  -d '{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}' "$I/v2/models/dv/infer"
mcall "unregister dv" 200 '' "${MA[@]}" -X DELETE "$M/models/dv"
# A synchronous scale whose workers fail to start is the server's failure too, as for a
# register (TorchServe's updateModelWorkers serves both): 500, not the engine's 400 (the
# client's request was good). d8 is the same model at batchSize 8, with no workers yet.
mcall "register d8 (only8) with no workers" 200 '"registered with 0 initial workers" in r["status"]' \
  "${MA[@]}" -X POST "$M/models?url=dv-2.0.mar&model_name=d8&batch_size=8&initial_workers=0"
mcall "a synchronous scale of d8 whose worker fails: 500" 500 \
  'r["type"] == "InternalServerException" and r["message"].startswith("Failed to start workers for model d8 version: 2.0")' \
  "${MA[@]}" -X PUT "$M/models/d8?min_worker=1&synchronous=true"
mcall "unregister d8" 200 '' "${MA[@]}" -X DELETE "$M/models/d8"

# The same failure while a client sets the failing version as the default (set-default
# runs on the HTTP threads, beside the register waiting for its workers): dw 2.0 is no
# configured default, and 64 failing workers give the set-default time to land. dw 1.0
# must be the default afterwards, not a version no lookup without a version finds.
for v in 1.0 2.0; do cp "$WORK/store/dv-$v.mar" "$WORK/store/dw-$v.mar"; done
mcall "register dw 1.0" 200 '' "${MA[@]}" -X POST "$M/models?url=dw-1.0.mar&model_name=dw&initial_workers=1&synchronous=true"
if ! "${INFERD_PYTHON:-/usr/bin/python3}" - "$M" "$MANAGEMENT_KEY" <<'PY'; then fail "set-default during a failing register"; fi
import sys, threading
import requests

m, key = sys.argv[1:3]
auth = {"Authorization": "Bearer " + key}
landed, done = [], threading.Event()


def set_default():
    with requests.Session() as s:
        while not done.is_set():
            if s.put(m + "/models/dw/2.0/set-default", headers=auth, timeout=60).status_code == 200:
                landed.append(1)


t = threading.Thread(target=set_default)
t.start()
r = requests.post(m + "/models?url=dw-2.0.mar&model_name=dw&batch_size=8&initial_workers=64&synchronous=true",
                  headers=auth, timeout=120)
done.set()
t.join()
bad = [] if r.status_code >= 400 else ["register dw 2.0 should fail: HTTP %d" % r.status_code]
d = requests.get(m + "/models/dw/all", headers=auth, timeout=60)
if d.status_code != 200 or [(x["modelVersion"], x["isDefault"]) for x in d.json()] != [("1.0", True)]:
    bad.append("dw/all: HTTP %d %s" % (d.status_code, d.text[:300]))
d = requests.get(m + "/models/dw", headers=auth, timeout=60)
if d.status_code != 200:
    bad.append("dw without a version: HTTP %d %s" % (d.status_code, d.text[:200]))
for b in bad:
    print("     " + b)
print("%s  dw 1.0 is the default again after a failed register of 2.0 (set-default of 2.0 landed %d times "
      "meanwhile%s)" % ("FAIL" if bad else "ok  ", len(landed), "" if landed else ": the race was not reached"))
sys.exit(1 if bad else 0)
PY
mcall "unregister dw" 200 '' "${MA[@]}" -X DELETE "$M/models/dw"

# ---- model-config.yaml in the archive ---------------------------------------------------------
# torch-model-archiver --config-file: the manifest's configFile names a YAML file whose
# frontend keys set the model's workers and batching; a request's own values win.
mcall "register ym: its model-config.yaml names 1 worker" 200 '"registered with 1 initial workers" in r["status"]' \
  "${MA[@]}" -X POST "$M/models?url=ym.mar&synchronous=true"
mcall "describe ym: the yaml's settings" 200 "$(settings 4 20 30 1 3)" "${MA[@]}" "$M/models/ym"
mcall "unregister ym" 200 '' "${MA[@]}" -X DELETE "$M/models/ym"
mcall "register ym with batch_size and initial_workers: the request wins" 200 \
  '"registered with 0 initial workers" in r["status"]' \
  "${MA[@]}" -X POST "$M/models?url=ym.mar&batch_size=2&initial_workers=0&synchronous=true"
mcall "describe ym: batch_size from the request, the rest from the yaml" 200 "$(settings 2 20 30 0 3)" \
  "${MA[@]}" "$M/models/ym"
mcall "unregister ym again" 200 '' "${MA[@]}" -X DELETE "$M/models/ym"
mcall "register yw, whose yaml has minWorkers alone: default_workers_per_model's 1 worker" 200 \
  '"registered with 1 initial workers" in r["status"]' "${MA[@]}" -X POST "$M/models?url=yw.mar&synchronous=true"
mcall "describe yw: its batchSize, the default's workers" 200 "$(settings 2 100 120 1 1)" "${MA[@]}" "$M/models/yw"
mcall "unregister yw" 200 '' "${MA[@]}" -X DELETE "$M/models/yw"
rm -rf "$WORK/store/ybad" && mv "$WORK/v2/ym" "$WORK/store/ybad"
printf 'batchSize: 4\nmaxBatchDelay: soon\n' >"$WORK/store/ybad/model-config.yaml"
mcall "a model-config.yaml with a bad value: 400 naming file, line and key" 400 \
  '"model-config.yaml: line 2: maxBatchDelay" in r["message"]' "${MA[@]}" -X POST "$M/models?url=ybad&synchronous=true"
printf 'batchSize: 4\nmaxBatchDelay: 1: 2\n' >"$WORK/store/ybad/model-config.yaml"
mcall "a model-config.yaml that is not YAML: 400" 400 '"invalid YAML" in r["message"]' \
  "${MA[@]}" -X POST "$M/models?url=ybad&synchronous=true"
rm "$WORK/store/ybad/model-config.yaml"
mcall "a configFile missing from the archive: 400" 400 '"is not in the archive" in r["message"]' \
  "${MA[@]}" -X POST "$M/models?url=ybad&synchronous=true"
mcall "which registered nothing" 404 '' "${MA[@]}" "$M/models/ym"

# ---- precision: bf16 ---------------------------------------------------------------------------
mcall "register the fp32 MobileNetV2 as mnet32" 200 '' "${MA[@]}" -X POST \
  "$M/models?url=mnet.mar&model_name=mnet32&initial_workers=0&synchronous=true"
mcall "describe mnet32: fp32, the default" 200 'r[0]["precision"] == "fp32"' "${MA[@]}" "$M/models/mnet32"
fp32_bytes=$(curl -s "${MA[@]}" "$M/models/mnet32" |
  /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["memoryUsage"])')
mcall "unregister mnet32" 200 '' "${MA[@]}" -X DELETE "$M/models/mnet32"
for name in mnet16 mnet16j; do
  mcall "register $name (bf16)" 200 '' "${MA[@]}" -X POST "$M/models?url=$name.mar&synchronous=true"
  mcall "describe $name: bf16, weights below 60% of the fp32 model's $fp32_bytes bytes" 200 \
    "r[0]['precision'] == 'bf16' and 0 < r[0]['memoryUsage'] < 0.6 * $fp32_bytes" "${MA[@]}" "$M/models/$name"
  mcall "classify with $name" 200 'list(r)[0] == "Egyptian cat" and len(r) == 5' "${IA[@]}" -T "$PHOTO" \
    "$I/predictions/$name"
  mcall "unregister $name" 200 '' "${MA[@]}" -X DELETE "$M/models/$name"
done

# ---- lookups while the registry changes ------------------------------------------------------
# Two clients send v2 infer to "steady" (always registered) and to "churn", which is
# registered and unregistered 20 times or more meanwhile: every answer is 200 and equal to
# `inferd run`, or, for churn only, 404 (not registered) or 503 (draining).
"${INFERD_PYTHON:-/usr/bin/python3}" -c 'import numpy as np, sys; np.save(sys.argv[1], np.array([[0.5, -1.0, 2.0, 0.25]], np.float32))' \
  "$WORK/row.npy"
"$INFERD" run "$WORK/store/mlp.onnx" --input "$WORK/row.npy" --output "$WORK/row.out.npy" >/dev/null
mcall "register steady" 200 '' "${MA[@]}" -X POST "$M/models?url=mlp.onnx&model_name=steady&initial_workers=1&synchronous=true"
if ! "${INFERD_PYTHON:-/usr/bin/python3}" - "$M" "http://127.0.0.1:$INFERENCE_PORT" "$MANAGEMENT_KEY" "$INFERENCE_KEY" \
  "$WORK" <<'PY'; then fail "lookups while the registry changes"; fi
import os, sys, threading, time
import numpy as np
import requests

m, i, mkey, ikey, work = sys.argv[1:6]
row = np.load(os.path.join(work, "row.npy"))
want = np.load(os.path.join(work, "row.out.npy"))
body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": row.reshape(-1).tolist()}]}
done, bad, counts, lock = threading.Event(), [], {}, threading.Lock()
deadline = time.time() + 120


def client():
    with requests.Session() as s:
        for n in range(3000):
            if done.is_set() or time.time() > deadline:
                return
            name = "steady" if n % 2 else "churn"
            r = s.post("%s/v2/models/%s/infer" % (i, name), json=body, headers={"Authorization": "Bearer " + ikey},
                       timeout=60)
            with lock:
                counts[(name, r.status_code)] = counts.get((name, r.status_code), 0) + 1
            if r.status_code == 200:
                got = np.array(r.json()["outputs"][0]["data"], np.float32)
                if not np.allclose(got, want.reshape(-1), rtol=1e-5, atol=1e-6):
                    bad.append("%s answered %s, want %s" % (name, got, want.reshape(-1)))
            elif name == "steady" or r.status_code not in (404, 503):
                bad.append("%s: HTTP %d %s" % (name, r.status_code, r.text[:200]))


threads = [threading.Thread(target=client) for _ in range(2)]
for t in threads:
    t.start()
auth = {"Authorization": "Bearer " + mkey}
with requests.Session() as s:
    for k in range(200):  # at least 20 cycles, until the clients have seen both models answer
        if k >= 20 and counts.get(("steady", 200)) and counts.get(("churn", 200)) or time.time() > deadline:
            break
        r = s.post(m + "/models?url=mlp.onnx&model_name=churn&initial_workers=1&synchronous=true", headers=auth,
                   timeout=60)
        if r.status_code != 200:
            bad.append("register churn: HTTP %d %s" % (r.status_code, r.text[:200]))
        time.sleep(0.02)
        r = s.delete(m + "/models/churn", headers=auth, timeout=60)
        if r.status_code != 200:
            bad.append("unregister churn: HTTP %d %s" % (r.status_code, r.text[:200]))
done.set()
for t in threads:
    t.join()
print("     answers: %s" % ", ".join("%s %d: %d" % (n, c, k) for (n, c), k in sorted(counts.items())))
if counts.get(("steady", 200), 0) == 0 or counts.get(("churn", 200), 0) == 0:
    bad.append("no 200 from steady or churn: the clients did not overlap the changes")
for b in bad[:10]:
    print("     " + b)
print("%s  %d register/unregister cycles of churn beside infer on it and on steady" % ("FAIL" if bad else "ok  ", k))
sys.exit(1 if bad else 0)
PY

serve_finish serve_management "$WORK"
