#!/usr/bin/env bash
# serve_timeout.sh - responseTimeout bounds how long a client waits, even while its batch
# still runs (the engine cannot stop a batch; the HTTP loop answers 504 at the deadline).
#
# resnet-152.mar (torchvision resnet152 of tests/fixtures, via `inferd archive`) with
# batchSize 64, maxBatchDelay 500 and responseTimeout 1, one worker:
#   - 64 concurrent clients post the same photo: each gets 200 or 504 (TorchServe's
#     error JSON). Some requests' batch was still running when the last client had its
#     answer: only the timer can have answered those, and they are all 504s;
#   - a KServe v2 infer of 64 images whose rows are still running gets 504 with the Open
#     Inference Protocol's error JSON;
#   - the server goes on: a request on the idle worker gets 200 with 5 labels,
#     /metrics counts exactly the 504s the clients got, and SIGTERM exits 0 (the
#     cancelled jobs came back and were freed).
# What ran after an answer is decided by the server's own account, not by a clock: /metrics
# counts a request (inferd_inference_latency_milliseconds_count) once its batch has
# ended, before its answer is sent, so a count that grows after a client had its answer
# shows a batch that outlasted it. On a quiet machine the worker takes one request, then
# the other 63 as one batch of several seconds; on a loaded one the first request's batch
# alone runs past the deadline and the others expire in the queue. Should nothing be
# counted after the answers (every batch ended before them, on a machine much faster
# than these; or what the timer answered had expired unrun in the queue), the attempt
# does not count: again, at most 3 times. A request after them that takes longer than responseTimeout
# even alone (a loaded machine) is answered 504 at its deadline, no earlier; its 5 labels
# are checked on the first of at most 3 that beats the deadline.
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
  "max_request_size=67108864" \
  "number_of_netty_threads=2"
serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground --disable-token-auth
serve_wait_ready 180
URL="http://127.0.0.1:$INFERENCE_PORT/predictions/resnet-152"
PY=${INFERD_PYTHON:-/usr/bin/python3}

ran() { # requests whose batch has ended (the worker counts them before their answers go)
  curl -s --max-time 60 "http://127.0.0.1:$METRICS_PORT/metrics" |
    sed -n 's/^inferd_inference_latency_milliseconds_count{[^}]*} \([0-9]*\)$/\1/p'
}
wait_idle() { # until no batch runs and nothing is queued (bounded: only a hang reaches it)
  local end=$((SECONDS + 300))
  while [ "$SECONDS" -lt "$end" ]; do
    curl -s --max-time 60 "http://127.0.0.1:$MANAGEMENT_PORT/models/resnet-152" >"$WORK/describe.json" || true
    "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))[0]
sys.exit(0 if d["jobQueueStatus"]["pendingRequests"] == 0 and [w["status"] for w in d["workers"]] == ["READY"] else 1)' \
      "$WORK/describe.json" 2>/dev/null && return 0
    sleep 0.2
  done
  fail "the worker was still busy 300 s later: $(cat "$WORK/describe.json")"
  return 1
}
answers_504=0 # 504s the clients got, for /metrics' count

# ---- 64 clients at once: the timer answers those whose batch still runs ----
counted=0 failed_before=$failures
for attempt in 1 2 3; do
  "$INFERD" bench --mode server --url "$URL" --file "$WORK/cat.jpg" --requests 64 --concurrency 64 --timeout 120 \
    --json >"$WORK/burst.json" || fail "inferd bench: exit $?"
  ran_at_answers=$(ran)
  wait_idle || break
  late=$(($(ran) - ran_at_answers)) # requests whose batch ended after every client had its answer
  got=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["status"].get("504", 0))' "$WORK/burst.json") || got=0
  answers_504=$((answers_504 + got))
  check_json "$WORK/burst.json" 'r["completed"] == 64 and set(r["status"]) <= {"200", "504"}' \
    "64 clients, responseTimeout 1 s: each answered, 200 or 504"
  if [ "$late" = 0 ]; then
    echo "     attempt $attempt does not count: no request counted after the last answer (batches ended before it, or expired unrun)"
    continue
  fi
  counted=1
  check_json "$WORK/burst.json" "r['status'].get('504', 0) >= $late" \
    "$late request(s) still in a running batch when all 64 were answered: 504 from the timer"
  break
done
[ "$counted" = 1 ] || [ "$failures" != "$failed_before" ] ||
  fail "3 bursts: no request counted after the last answer; the timer never answered a running batch"

# ---- a KServe v2 infer of 64 images: 504 while its rows run ----
counted=0 failed_before=$failures
for attempt in 1 2 3; do
  "$PY" - "http://127.0.0.1:$INFERENCE_PORT/v2/models/resnet-152/infer" "$WORK/v2.json" <<'PY' || fail "v2 infer request"
import json, sys, time, urllib.error, urllib.request
url, out = sys.argv[1:]
rows = 64  # one batch of batchSize: seconds even where a batch of 16 took 0.8 s
header = json.dumps({"inputs": [{"name": "input", "shape": [rows, 3, 224, 224], "datatype": "FP32",
                                 "parameters": {"binary_data_size": rows * 3 * 224 * 224 * 4}}]}).encode()
body = header + bytes(rows * 3 * 224 * 224 * 4)  # zeros
req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/octet-stream",
                                                      "Inference-Header-Content-Length": str(len(header))})
start = time.monotonic()
try:
    with urllib.request.urlopen(req, timeout=120) as r:
        status, text = r.status, r.read()[:1000].decode(errors="replace")
except urllib.error.HTTPError as e:
    status, text = e.code, e.read().decode()
seconds = time.monotonic() - start
try:
    body = json.loads(text)
except ValueError:
    body = text
json.dump({"status": status, "seconds": round(seconds, 3), "body": body}, open(out, "w"))
PY
  ran_at_answer=$(ran)
  wait_idle || break
  late=$(($(ran) - ran_at_answer))
  if [ "$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["status"])' "$WORK/v2.json")" = 504 ]; then
    answers_504=$((answers_504 + 1))
  fi
  if [ "$late" = 0 ]; then
    echo "     attempt $attempt does not count: no row counted after the answer (all ran before it, or expired unrun): $(head -c 100 "$WORK/v2.json")"
    continue
  fi
  counted=1
  check_json "$WORK/v2.json" 'r["status"] == 504 and "response timeout" in r["body"]["error"]' \
    "a v2 infer with $late of its 64 rows still running: 504 with the Open Inference Protocol's error JSON"
  break
done
[ "$counted" = 1 ] || [ "$failures" != "$failed_before" ] ||
  fail "3 v2 infers: no row counted after the answer; the timer never answered one while its rows ran"

# ---- the server goes on ----
counted=0 failed_before=$failures
for attempt in 1 2 3; do
  before=$(ran)
  out=$(curl -s -o "$WORK/after.json" -w '%{http_code} %{time_total}' --max-time 120 -T "$WORK/cat.jpg" "$URL") ||
    out="curl-error 0"
  wait_idle || break
  code=${out% *} seconds=${out#* }
  [ "$code" = 504 ] && answers_504=$((answers_504 + 1))
  runs=$(($(ran) - before))
  if [ "$code" = 200 ] && [ "$runs" = 1 ]; then
    counted=1
    check_json "$WORK/after.json" 'len(r) == 5' "a request after the timed-out batches: 200 with 5 labels"
  elif [ "$code" = 504 ] && [ "$runs" -le 1 ] && awk -v s="$seconds" 'BEGIN { exit !(s >= 1) }'; then
    echo "     attempt $attempt does not count: 504 at its deadline ($seconds s; run by the worker: $runs)"
    continue
  else
    fail "a request after the timed-out batches answered $code after $seconds s, $runs run(s): $(head -c 300 "$WORK/after.json")"
  fi
  break
done
[ "$counted" = 1 ] || [ "$failures" != "$failed_before" ] ||
  echo "     inconclusive: resnet-152 ran longer than responseTimeout (1 s) alone 3 times; the 5 labels are not checked"

curl -s "http://127.0.0.1:$METRICS_PORT/metrics" >"$WORK/metrics.txt" || fail "GET /metrics"
"$PY" - "$WORK/metrics.txt" "$answers_504" <<'PY' || fail "/metrics does not count the 504s the clients got"
import re, sys
text, want = open(sys.argv[1]).read(), int(sys.argv[2])
m = re.search(r'^inferd_requests_total\{[^}]*"504"[^}]*\} (\S+)$', text, re.M)
got = float(m.group(1)) if m else 0
print("ok   /metrics: %d answers 504, as the clients got" % got if got == want else
      "metrics count %d answers 504, the clients got %d" % (got, want))
sys.exit(0 if got == want else 1)
PY

serve_finish serve_timeout "$WORK"
