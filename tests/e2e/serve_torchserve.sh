#!/usr/bin/env bash
# serve_torchserve.sh - a TorchServe user's setup, unchanged: the config.properties of
# issue 3 (only the three addresses are added, on free ports, so that tests can run side
# by side) and resnet-152.mar made by `inferd archive` from the torchvision resnet152
# export of tests/fixtures, in model_store/.
#   - Python requests.post(url, data=jpeg_bytes, octet-stream) gets 200 and 5 labels;
#     curl -T and curl -F data=@ get the same answer;
#   - describe shows what the config asked: 2 workers ready, batchSize 8, maxBatchDelay
#     100, responseTimeout 200;
#   - start-up time to /ping 200 is printed (a figure, not a pass/fail: it depends on
#     the machine's load);
#   - a worker holds one scratch arena: batches of every size 1..8 grow RSS by at most
#     2 x the batch-8 plan's scratch plus a quarter of the weights;
#   - workers share one copy of the weights: RSS of the ready server with 4 workers is
#     below RSS with 1 worker plus half the weights' size (both measured the same way,
#     after the workers' warm-up);
#   - scaling re-pins: the 1-worker server scaled to 2 and back to 1 (management API,
#     synchronous) shows in describe the plan for each count: disjoint cores at 2.
#
#   serve_torchserve.sh INFERD SOURCE_DIR FIXTURES_DIR WORK_DIR
set -euo pipefail
INFERD=$1 SRC=$2 FIX=$3 WORK=$4
. "$SRC/tests/e2e/serve_lib.sh"
trap serve_cleanup EXIT
rm -rf "$WORK"
mkdir -p "$WORK/model_store"

serve_jpeg coffee "$WORK/coffee.jpg"
serve_resnet152_mar "$FIX" "$WORK/model_store"

# config.properties exactly as the issue gives it, then the addresses.
write_config() { # write_config WORKERS FILE
  serve_ports
  cat >"$2" <<EOF
model_store=model_store
load_models=resnet-152.mar
models={"resnet-152": {"1.0": {"marName": "resnet-152.mar", "batchSize": 8, "maxBatchDelay": 100, "responseTimeout": 200}}}
default_workers_per_model=$1
job_queue_size=100
number_of_netty_threads=4
inference_address=http://127.0.0.1:$INFERENCE_PORT
management_address=http://127.0.0.1:$MANAGEMENT_PORT
metrics_address=http://127.0.0.1:$METRICS_PORT
EOF
}

rss_kb() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$SERVER_PID/status"; }

# ---- the issue's config (2 workers) ----
write_config 2 "$WORK/config.properties"
start=$(date +%s.%N)
serve_start "$WORK" --foreground # finds ./config.properties as TorchServe does
serve_wait_ready 180
ready=$(date +%s.%N)
echo "ok   ready (/ping 200) $(echo "$ready - $start" | bc) s after start"
serve_keys "$WORK"
I="http://127.0.0.1:$INFERENCE_PORT"
/usr/bin/python3 - "$WORK" "$I" "$INFERENCE_KEY" <<'PY' || fail "requests.post / curl answers"
import json, os, subprocess, sys
import requests
work, url, key = sys.argv[1:]
jpeg = open(os.path.join(work, "coffee.jpg"), "rb").read()
r = requests.post(url + "/predictions/resnet-152", data=jpeg,
                  headers={"Content-Type": "application/octet-stream", "Authorization": "Bearer " + key}, timeout=120)
assert r.status_code == 200, (r.status_code, r.text)
answer = json.loads(r.text)
assert len(answer) == 5 and all(isinstance(v, float) for v in answer.values()), answer
auth = ["-H", "Authorization: Bearer " + key]
raw = subprocess.run(["curl", "-s", "--max-time", "120", *auth, "-T", os.path.join(work, "coffee.jpg"),
                      url + "/predictions/resnet-152"], capture_output=True, text=True, check=True).stdout
form = subprocess.run(["curl", "-s", "--max-time", "120", *auth, "-F", "data=@" + os.path.join(work, "coffee.jpg"),
                       url + "/predictions/resnet-152"], capture_output=True, text=True, check=True).stdout
assert raw == r.text and form == r.text, (raw, form, r.text)
print("ok   requests.post, curl -T and curl -F data=@ give the same 5 labels")
PY
# ---- a worker holds one scratch arena, its largest plan's, whatever batch sizes it ran ----
# Clients at concurrency 1..8 against maxBatchDelay 100 make batches of every size up to
# 8. RSS may grow by 2 workers x the batch-8 plan's scratch, plus the other seven plans'
# kernels and metadata (allowed: a quarter of the weights). An arena per batch size held
# 1 + 2 + ... + 8 plans' scratch: 2 x 315 MB.
rss_ready=$(rss_kb)
for c in 1 2 3 4 5 6 7 8; do
  "$INFERD" bench --mode server --url "$I/predictions/resnet-152" --file "$WORK/coffee.jpg" --requests $((4 * c)) \
    --concurrency $c --header "Authorization: Bearer $INFERENCE_KEY" >"$WORK/sweep.out" 2>&1 ||
    fail "bench at concurrency $c: $(tail -n 3 "$WORK/sweep.out")"
done
rss_swept=$(rss_kb)
scratch8_kb=$("$INFERD" run "$FIX/resnet152.onnx" --bench --batch 8 --seconds 0.5 --profile 2>&1 >/dev/null |
  sed -n 's/.*scratch \([0-9.]*\) MB at batch 8.*/\1/p' | awk '{printf "%d", $1 * 1024}')
curl -s -H "Authorization: Bearer $MANAGEMENT_KEY" "http://127.0.0.1:$MANAGEMENT_PORT/models/resnet-152" >"$WORK/describe.json"
/usr/bin/python3 - "$WORK/describe.json" <<'PY' || fail "describe does not show the config"
import json, sys
d = json.load(open(sys.argv[1]))[0]
ready = [w for w in d["workers"] if w["status"] in ("READY", "BUSY")]
assert len(ready) == 2 and d["batchSize"] == 8 and d["maxBatchDelay"] == 100 and d["responseTimeout"] == 200, d
print("ok   describe: 2 workers (cores %s), batchSize 8, maxBatchDelay 100, responseTimeout 200"
      % ", ".join(w["cores"] or "-" for w in ready))
PY
weights_kb=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["memoryUsage"] // 1024)' "$WORK/describe.json")
grown=$((rss_swept - rss_ready))
bound=$((2 * scratch8_kb + weights_kb / 4))
if [ -n "$scratch8_kb" ] && [ "$scratch8_kb" -gt 0 ] && [ "$grown" -le "$bound" ]; then
  echo "ok   batches 1..8 on 2 workers grew RSS by $((grown / 1024)) MB (at most $((bound / 1024)): 2 x $((scratch8_kb / 1024)) MB of batch-8 scratch + a quarter of the weights)"
else
  fail "batches 1..8 on 2 workers grew RSS by $((grown / 1024)) MB, above $((bound / 1024)) MB (batch-8 scratch '${scratch8_kb}' kB)"
fi
serve_stop 120
[ "$SERVER_STATUS" = 0 ] || fail "SIGTERM: exit status $SERVER_STATUS"

# ---- scaling re-pins every worker (DESIGN.md §5) ----
# From 1 worker on all N usable cores: scale to 2 (synchronous), then back to 1. After
# each step describe must show the plan for the new count: with N >= 2 the 2 workers
# hold disjoint, non-empty core sets inside the first worker's, each with as many
# threads as cores; back at 1 the worker holds all N cores again.
describe_to() { curl -s -H "Authorization: Bearer $MANAGEMENT_KEY" "http://127.0.0.1:$MANAGEMENT_PORT/models/resnet-152" >"$1"; }
scale_to() {
  local code
  code=$(curl -s -o "$WORK/scale.out" -w '%{http_code}' -X PUT -H "Authorization: Bearer $MANAGEMENT_KEY" \
    "http://127.0.0.1:$MANAGEMENT_PORT/models/resnet-152?min_worker=$1&synchronous=true")
  [ "$code" = 200 ] || fail "scale to $1: HTTP $code $(cat "$WORK/scale.out")"
}
check_scaling_repins() {
  serve_keys "$WORK"
  describe_to "$WORK/scale0.json"
  scale_to 2
  describe_to "$WORK/scale2.json"
  scale_to 1
  describe_to "$WORK/scale1.json"
  /usr/bin/python3 - "$WORK" <<'PY' || fail "scaling does not re-pin the workers"
import json, os, sys
work = sys.argv[1]
def workers(name):
    d = json.load(open(os.path.join(work, name)))[0]
    return [w for w in d["workers"] if w["status"] in ("READY", "BUSY")]
def cpus(text):
    out = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out
before, two, after = workers("scale0.json"), workers("scale2.json"), workers("scale1.json")
assert len(before) == 1 and len(two) == 2 and len(after) == 1, (before, two, after)
# hwloc knows every machine this runs on: an unpinned worker (no cores) is a failure,
# not a reason to skip
assert all(w["cores"] for w in before + two + after), ("a worker is not pinned: describe names no cores", before, two, after)
all_cpus = cpus(before[0]["cores"])
assert before[0]["threads"] == len(all_cpus), before
sets = [cpus(w["cores"]) for w in two]
if len(all_cpus) >= 2:
    assert all(sets) and not sets[0] & sets[1], ("workers share cores after scaling up", two)
    assert sets[0] | sets[1] <= all_cpus, (two, all_cpus)
    assert all(w["threads"] == len(s) for w, s in zip(two, sets)), two
    assert sum(w["threads"] for w in two) <= len(all_cpus), two
assert cpus(after[0]["cores"]) == all_cpus and after[0]["threads"] == len(all_cpus), after
print("ok   scaling re-pins: 1 worker on %s -> 2 workers on %s -> 1 worker on %s"
      % (before[0]["cores"], " and ".join(w["cores"] for w in two), after[0]["cores"]))
PY
}

# ---- one copy of the weights: 1 worker vs 4 workers ----
for workers in 1 4; do
  write_config $workers "$WORK/config.properties"
  serve_start "$WORK" --foreground
  serve_wait_ready 180
  # no settling time: /ping is 200 once every worker has bound its plans of batch 1 and
  # batchSize (sched.h's ready), and RSS stays where it is then (seen unchanged over the next 8 s)
  eval "rss_$workers=$(rss_kb)"
  [ "$workers" = 1 ] && check_scaling_repins
  serve_stop 120
  [ "$SERVER_STATUS" = 0 ] || fail "$workers workers: exit status $SERVER_STATUS"
done
echo "RSS when ready: 1 worker $((rss_1 / 1024)) MB, 4 workers $((rss_4 / 1024)) MB; weights $((weights_kb / 1024)) MB"
if [ "$rss_4" -lt $((rss_1 + weights_kb / 2)) ]; then
  echo "ok   4 workers add $(((rss_4 - rss_1) / 1024)) MB: less than half the weights (one shared copy)"
else
  fail "4 workers add $(((rss_4 - rss_1) / 1024)) MB, not less than half the weights ($((weights_kb / 2048)) MB)"
fi

if [ "$failures" -ne 0 ]; then
  tail -n 30 "$WORK/server.log" >&2
  echo "serve_torchserve: $failures failure(s)" >&2
  exit 1
fi
echo "serve_torchserve: all passed"
