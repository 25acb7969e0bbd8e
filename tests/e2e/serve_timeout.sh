#!/usr/bin/env bash
# serve_timeout.sh - responseTimeout bounds how long a client waits, even while its batch
# still runs (the engine cannot stop a batch; the HTTP loop answers 504 at the deadline).
#
# resnet-152.mar (torchvision resnet152 of tests/fixtures, via `inferd archive`) with
# batchSize 64, maxBatchDelay 500 and responseTimeout 1, one worker. 64 concurrent
# clients post the same photo: the worker takes the first few at once (those already
# queued), then the others as one batch, which takes several seconds here (3 s and more
# at 2 threads, in engine runs of 16 images). Every request of that batch was taken
# before its deadline, so only the timer can answer it in time:
#   - most answers (at least 32 of 64) are 504 (TorchServe's error JSON), the others
#     200, all given while that batch still ran (/metrics has not yet recorded its end);
#   - a KServe v2 infer sent then, queued behind that batch, gets 504 too, also before
#     the batch ends;
#   - the server goes on: a request after the batch gets 200 with 5 labels, /metrics
#     counts the 504s, and SIGTERM exits 0 (the cancelled jobs came back and were freed).
# A batch that ran faster than 1 s would not test the timer, so the test also checks
# that the requests' batches ran longer than the deadline (/metrics' inference time).
#
#   serve_timeout.sh INFERD SOURCE_DIR FIXTURES_DIR WORK_DIR
set -euo pipefail
INFERD=$1 SRC=$2 FIX=$3 WORK=$4
. "$SRC/tests/e2e/serve_lib.sh"
trap serve_cleanup EXIT
rm -rf "$WORK"
mkdir -p "$WORK/model_store"

serve_jpeg chelsea "$WORK/cat.jpg"
serve_resnet152_mar "$FIX" "$WORK/model_store"

serve_ports
serve_config "$WORK/config.properties" \
  "model_store=model_store" \
  "load_models=resnet-152.mar" \
  'models={"resnet-152": {"1.0": {"marName": "resnet-152.mar", "batchSize": 64, "maxBatchDelay": 500, "responseTimeout": 1}}}' \
  "default_workers_per_model=1" \
  "job_queue_size=100" \
  "number_of_netty_threads=2"
serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground --disable-token-auth
serve_wait_ready 180
URL="http://127.0.0.1:$INFERENCE_PORT/predictions/resnet-152"

inference_count() { # requests whose batch has ended (the worker records them after it)
  curl -s "http://127.0.0.1:$METRICS_PORT/metrics" |
    sed -n 's/^inferd_inference_latency_milliseconds_count{[^}]*} \([0-9]*\)$/\1/p'
}

"$INFERD" bench --mode server --url "$URL" --file "$WORK/cat.jpg" --requests 64 --concurrency 64 --timeout 60 \
  --json >"$WORK/burst.json" || fail "inferd bench: exit $?"
check_json "$WORK/burst.json" 'r["completed"] == 64 and set(r["status"]) <= {"200", "504"} and r["status"].get("504", 0) >= 32' \
  "64 clients, responseTimeout 1 s, most of them in a batch running longer: 504 for them"
# The 504s came from the timer: their batch has not ended yet (only the scheduler's own
# check, when a worker takes a request, could answer 504 otherwise, and it would have to
# wait for the worker).
ended=$(inference_count)
if [ "${ended:-64}" -lt 64 ]; then
  echo "ok   all 64 answered while the long batch still ran ($ended of 64 requests' batches had ended)"
else
  fail "the burst was answered only after its batches ended: the timer did not answer it"
fi

# KServe v2 infer waiting behind that batch: 504 from the timer too, before the batch ends.
/usr/bin/python3 - "http://127.0.0.1:$INFERENCE_PORT/v2/models/resnet-152/infer" "$WORK/v2.json" <<'PY' ||
import json, sys, urllib.error, urllib.request
url, out = sys.argv[1:]
body = {"inputs": [{"name": "input", "shape": [1, 3, 224, 224], "datatype": "FP32", "data": [0.0] * (3 * 224 * 224)}]}
req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        status, text = r.status, r.read().decode()
except urllib.error.HTTPError as e:
    status, text = e.code, e.read().decode()
json.dump({"status": status, "body": json.loads(text)}, open(out, "w"))
PY
  fail "v2 infer request"
ended=$(inference_count)
check_json "$WORK/v2.json" 'r["status"] == 504 and "response timeout" in r["body"]["error"]' \
  "a v2 infer queued behind the long batch: 504 with the Open Inference Protocol's error JSON"
[ "${ended:-64}" -lt 64 ] && echo "ok   ... answered while that batch still ran" ||
  fail "the v2 infer was answered only after the batch ended"

# The batch goes on after its clients got 504: wait (bounded) until it ended for all 64
# requests; then the next request is answered, and the batches ran long.
for _ in $(seq 1 600); do
  [ "$(inference_count)" -ge 64 ] && break
  sleep 0.1
done
code=$(curl -s -o "$WORK/after.json" -w '%{http_code}' --max-time 60 -T "$WORK/cat.jpg" "$URL") || code=curl-error
if [ "$code" = 200 ]; then
  check_json "$WORK/after.json" 'len(r) == 5' "a request after the timed-out batch: 200 with 5 labels"
else
  fail "a request after the timed-out batch answered $code: $(cat "$WORK/after.json")"
fi
curl -s "http://127.0.0.1:$METRICS_PORT/metrics" >"$WORK/metrics.txt" || fail "GET /metrics"
/usr/bin/python3 - "$WORK/metrics.txt" <<'PY' || fail "/metrics: the 504s, and batches that ran longer than the deadline"
import re, sys
text = open(sys.argv[1]).read()
def value(pattern):
    m = re.search(pattern, text, re.M)
    return float(m.group(1)) if m else None
timeouts = value(r'^inferd_requests_total\{[^}]*"504"[^}]*\} (\S+)$')
total = value(r'^inferd_inference_latency_milliseconds_sum\{[^}]*\} (\S+)$')
count = value(r'^inferd_inference_latency_milliseconds_count\{[^}]*\} (\S+)$')
mean = total / count if total is not None and count else None
print("metrics: %s answers 504; a request's batch ran %s ms on average" % (timeouts, mean))
sys.exit(0 if timeouts is not None and timeouts >= 33 and mean is not None and mean > 1000 else 1)
PY

serve_finish serve_timeout "$WORK"
