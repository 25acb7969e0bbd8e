#!/usr/bin/env bash
# serve_startup.sh - the management API while the models of load_models still load, on
# the real `inferd serve --enable-model-api` (127.0.0.1, free ports, token auth on):
# load_models is a tiny model (make_tiny.py --mlp), then a slow one made here (a chain
# of 2000 small convolutions: about 1 s to load and compile, more to warm up two workers).
# While the slow one is not registered yet, a client hammers the tiny one with
# DELETE /models/tiny, PUT ?min_worker=0, a POST of its name and set-default: each must be
# 503 with a JSON message (before the fix a DELETE freed the tiny model while start-up
# still waited for its workers, a PUT ?min_worker=0 made start-up fail and a POST was a
# 409), while GET /models answers 200 and /ping 503 "Unhealthy". Then /ping turns 200, both models are listed and
# answer v2 infer, and the changes refused before are accepted. While a register runs,
# 100 asynchronous scales: 63 wait behind it, the rest are 503. SIGTERM must exit 0.
# First, with its own server: SIGTERM while load_models still loads; /ping is never 200
# and the server never says it is ready, then exits 0. Before that, a model_store that is
# missing or a file: exit 2 with one line.
# Where how fast the machine is decides whether something could be tested, the server's
# log timestamps decide whether it was, and a run where it was not is made again.
#
#   serve_startup.sh INFERD SOURCE_DIR WORK_DIR
set -euo pipefail
INFERD=$1 SRC=$2 WORK=$3
PY=${INFERD_PYTHON:-/usr/bin/python3}
. "$SRC/tests/e2e/serve_lib.sh"
trap serve_cleanup EXIT

rm -rf "$WORK"
mkdir -p "$WORK/store"
"$PY" "$SRC/tests/fixtures/make_tiny.py" "$WORK/store/mlp.onnx" --mlp
"$PY" - "$WORK/store/slow.onnx" <<'PY'
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(11)
nodes, weights, x = [], [], "input"
for i in range(2000):  # load time is per node (checks, fusion, a oneDNN primitive each)
    weights.append(numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.05).astype(np.float32), f"w{i}"))
    nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"conv{i}", kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
    x = f"r{i}"
nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
nodes.append(helper.make_node("Flatten", ["pool"], ["output"], name="flatten", axis=1))
graph = helper.make_graph(nodes, "slow", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 16, 8, 8])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 16])], initializer=weights)
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
PY

# ---- a model_store that is not a directory: refused at start (torchserve: "--model-store
# directory not found"), one line and exit 2, before any port is taken; the server it
# started before ran on, said it was ready and failed every registration ----
serve_ports
serve_config "$WORK/config.properties" "disable_token_authorization=true"
for store in "$WORK/missing" "$WORK/store/mlp.onnx"; do
  status=0
  timeout 30 "$INFERD" serve --ts-config "$WORK/config.properties" --model-store "$store" --foreground \
    >"$WORK/store.out" 2>&1 || status=$?
  [ "$status" = 2 ] && [ "$(wc -l <"$WORK/store.out")" = 1 ] && grep -q "model_store '$store'" "$WORK/store.out" &&
    echo "ok   --model-store $(basename "$store"): exit 2, $(cat "$WORK/store.out")" ||
    fail "--model-store $store: exit $status, $(head -3 "$WORK/store.out")"
done

# ---- first, its own server: a stop while load_models still loads ----
# Eight copies of the slow model; SIGTERM once the second starts loading. Until the
# server exits, /ping must never say 200, and it must never log "inferd is ready"; it
# exits 0. The attempt counts when the load ended after the signal (the log's "models
# ready" line, in the server's clock); else it is made again, at most 3 times.
mkdir -p "$WORK/stop/store"
for k in 1 2 3 4 5 6 7 8; do ln -s ../../store/slow.onnx "$WORK/stop/store/s$k.onnx"; done
serve_ports
serve_config "$WORK/stop/config.properties" \
  "model_store=$WORK/stop/store" \
  "load_models=$(printf 's%d=s%d.onnx,' 1 1 2 2 3 3 4 4 5 5 6 6 7 7 8 8 | sed 's/,$//')" \
  "disable_token_authorization=true"
for attempt in 1 2 3; do
  serve_start "$WORK/stop" --ts-config "$WORK/stop/config.properties" --foreground
  verdict=0
  "$PY" - "$WORK/stop/server.log" "$SERVER_PID" "$INFERENCE_PORT" <<'PY' || verdict=$?
import calendar, os, re, signal, sys, time
import requests

log, pid, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def lines():
    with open(log, encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def stamp(line):
    t = line.split()[0]
    return calendar.timegm(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) + int(t[20:23]) / 1000


def alive():
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


deadline = time.time() + 60
while not any("loading s2.onnx" in l for l in lines()):
    if time.time() > deadline or not alive():
        sys.exit("the server never started to load s2")
    time.sleep(0.005)
killed = time.time()
os.kill(pid, signal.SIGTERM)
codes = []
deadline = time.time() + 120
while alive() and time.time() < deadline:
    try:
        codes.append(requests.get("http://127.0.0.1:%d/ping" % port, timeout=10).status_code)
    except requests.RequestException:
        pass
    time.sleep(0.02)
ready = [l for l in lines() if re.search(r"\d+ models ready in", l)]
if ready and stamp(ready[0]) <= killed:
    print("     attempt does not count: the models were loaded before the signal")
    sys.exit(3)
said_ready = [l for l in lines() if "inferd is ready" in l]
print("%s  SIGTERM while load_models loads: /ping %s, %s" % (
    "ok  " if 200 not in codes and not said_ready and 503 in codes else "FAIL",
    " ".join("%dx%d" % (codes.count(c), c) for c in sorted(set(codes))), said_ready or "never logged ready"))
sys.exit(1 if 200 in codes or said_ready or 503 not in codes else 0)
PY
  serve_wait_exit 120 "SIGTERM during the load"
  [ "$verdict" = 3 ] && continue
  [ "$verdict" = 0 ] || fail "a stop while load_models loads"
  [ "$SERVER_STATUS" = 0 ] && echo "ok   SIGTERM during the load: exit 0" || fail "SIGTERM during the load: exit $SERVER_STATUS"
  break
done
[ "$verdict" != 3 ] || fail "a stop while load_models loads: 3 attempts, every load ended before its signal"

serve_ports
serve_config "$WORK/config.properties" \
  "model_store=$WORK/store" \
  "load_models=tiny=mlp.onnx,slow=slow.onnx" \
  "enable_model_api=true" \
  'models={"slow": {"1.0": {"minWorkers": 2}}, "tiny": {"1.0": {"minWorkers": 1}}}'
# The hammer: until GET /models lists the slow model, every change must be 503, and
# /ping 503 "Unhealthy". Whether a round fits before the slow model is listed, and
# whether start-up is still on when a round's requests arrive, depends on the machine:
# an answer other than 503 fails the test only if it came before the last of the three
# start-up workers logged "ready" (start-up cannot have ended: it waits for them), and a
# run with no round at all, or with such an answer after that line, does not count: the
# server is started again, at most 3 times.
counted=0 failed_before=$failures
for attempt in 1 2 3; do
  serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground
  status=0
  "$PY" - "$WORK" "$MANAGEMENT_PORT" "$SERVER_PID" "$INFERENCE_PORT" <<'PY' || status=$?
import calendar, json, os, re, sys, time
import requests

work, port, pid, inference_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
m = "http://127.0.0.1:%d" % port
session = requests.Session()
deadline = time.time() + 120
while True:  # key_file.json is written before the ports listen
    if time.time() > deadline:
        sys.exit("the management port did not answer within 120 s")
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("the server exited while starting")
    try:
        key = json.load(open(os.path.join(work, "key_file.json")))["management"]["key"]
        if session.get(m + "/models", headers={"Authorization": "Bearer " + key}, timeout=60).status_code == 200:
            break
    except (OSError, ValueError, KeyError, requests.RequestException):
        pass
    time.sleep(0.01)


def workers_ready():
    """When the last start-up worker (tiny's, slow's two) logged "ready" (server clock,
    the same wall clock as time.time()); waits for the three lines, at most 120 s."""
    wanted = [r"model 'tiny/1\.0': worker 0 ready in", r"model 'slow/1\.0': worker 0 ready in",
              r"model 'slow/1\.0': worker 1 ready in"]
    end = time.time() + 120
    while time.time() < end:
        found = {}
        for line in open(os.path.join(work, "server.log"), encoding="utf-8", errors="replace"):
            for w in wanted:
                if w not in found and re.search(w, line):
                    stamp = line.split()[0]  # 2026-11-30T11:21:23.005Z
                    found[w] = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + int(stamp[20:23]) / 1e3
        if len(found) == len(wanted):
            return max(found.values())
        time.sleep(0.05)
    sys.exit("the start-up workers did not all log 'ready' within 120 s")


def unexpected(what, r):
    """An answer other than start-up's: a failure if it came while start-up surely ran."""
    answered = time.time()
    if answered < workers_ready():
        sys.exit("%s during start-up: %d %s" % (what, r.status_code, r.text[:300]))
    print("     %s: %d after every start-up worker was ready (start-up may have ended): this run does not count"
          % (what, r.status_code))
    sys.exit(3)


auth = {"Authorization": "Bearer " + key}
changes = [("DELETE", "/models/tiny"), ("DELETE", "/models/tiny/1.0"), ("PUT", "/models/tiny?min_worker=0"),
           ("POST", "/models?url=mlp.onnx&model_name=tiny&initial_workers=1&synchronous=true"),
           ("PUT", "/models/tiny/1.0/set-default")]
rounds = 0
while True:
    r = session.get(m + "/models", headers=auth, timeout=60)
    if r.status_code != 200:
        sys.exit("GET /models during start-up: %d %s" % (r.status_code, r.text[:300]))
    if "slow" in [x["modelName"] for x in r.json()["models"]]:
        break
    for method, path in changes:
        r = session.request(method, m + path, headers=auth, timeout=60)
        body = r.json() if r.headers.get("content-type") == "application/json" else None
        if r.status_code != 503 or not body or body.get("code") != 503 or "load_models" not in body.get("message", ""):
            unexpected("%s %s" % (method, path), r)
    # /ping is truthful meanwhile: Unhealthy until every startup model is ready
    r = session.get("http://127.0.0.1:%d/ping" % inference_port, timeout=60)
    if r.status_code != 503 or r.json().get("status") != "Unhealthy":
        unexpected("/ping", r)
    rounds += 1
    if time.time() > deadline:
        sys.exit("the slow model was not registered within 120 s")
if rounds < 1:
    print("     no round before the slow model was registered: this run does not count")
    sys.exit(3)
print("ok   %d rounds of DELETE/PUT/POST/set-default during start-up: all 503" % rounds)
PY
  if [ "$status" = 3 ]; then
    serve_stop 120
    echo "     attempt $attempt does not count"
    continue
  fi
  [ "$status" = 0 ] && counted=1 || fail "changes during start-up"
  break
done
if [ "$counted" != 1 ] && [ "$failures" = "$failed_before" ]; then # the server was stopped: nothing left to test
  fail "3 starts: start-up never outlasted a round of changes; they were not tested"
  exit 1
fi

serve_wait_ready 120 || fail "the server did not become ready"
serve_keys "$WORK"
M="http://127.0.0.1:$MANAGEMENT_PORT"
I="http://127.0.0.1:$INFERENCE_PORT"
MA=(-H "Authorization: Bearer $MANAGEMENT_KEY")
IA=(-H "Authorization: Bearer $INFERENCE_KEY")

call "both startup models listed" 200 '[m["modelName"] for m in r["models"]] == ["slow", "tiny"]' "${MA[@]}" "$M/models"
call "tiny: 1 worker, loaded at startup" 200 'r[0]["loadedAtStartup"] and r[0]["minWorkers"] == 1 and len(r[0]["workers"]) == 1' \
  "${MA[@]}" "$M/models/tiny"
call "infer on tiny" 200 'r["outputs"][0]["shape"] == [1, 4]' "${IA[@]}" -H 'Content-Type: application/json' \
  -d '{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}' "$I/v2/models/tiny/infer"
call "infer on slow" 200 'r["outputs"][0]["shape"] == [1, 16]' "${IA[@]}" -H 'Content-Type: application/json' \
  -d "{\"inputs\": [{\"name\": \"input\", \"datatype\": \"FP32\", \"shape\": [1, 16, 8, 8], \"data\": [$(seq -s, 1 1024)]}]}" \
  "$I/v2/models/slow/infer"
call "scale after start-up" 200 '"Workers scaled to 2" in r["status"]' "${MA[@]}" -X PUT "$M/models/tiny?min_worker=2&synchronous=true"
call "set-default after start-up" 200 '"1.0" in r["status"]' "${MA[@]}" -X PUT "$M/models/tiny/1.0/set-default"
call "unregister after start-up" 200 '"unregistered" in r["status"]' "${MA[@]}" -X DELETE "$M/models/tiny"
call "register after start-up" 200 '"registered with 1 initial workers" in r["status"]' \
  "${MA[@]}" -X POST "$M/models?url=mlp.onnx&model_name=tiny&initial_workers=1&synchronous=true"
call "ping still healthy" 200 'r["status"] == "Healthy"' "$I/ping"

# While the management thread loads the slow model again (about half a second), 100
# asynchronous scale requests: 64 changes may be queued or running (the register and 63
# scales), the others get 503 at once (an
# asynchronous scale answers 202 before it runs, so nothing else bounds them). The scales
# start once the server logs the register's "loading" line; the attempt counts only when
# every scale was answered before the log's "loaded in" line for it (the server's clock),
# since a change taken from the queue earlier frees a place. Else it is made again, with a
# new name, at most 3 times; a machine too slow for all 3 fails the test.
if ! "$PY" - "$M" "$MANAGEMENT_KEY" "$WORK/server.log" <<'PY'; then fail "asynchronous scale requests beyond the bound"; fi
import calendar, http.client, json, re, sys, threading, time, urllib.parse
import requests

m, key, log = sys.argv[1], sys.argv[2], sys.argv[3]
auth = {"Authorization": "Bearer " + key}
url = urllib.parse.urlsplit(m)


def log_line(pattern, limit):
    """The server log's first line matching pattern, waiting up to limit seconds."""
    deadline = time.time() + limit
    while time.time() < deadline:
        with open(log, encoding="utf-8", errors="replace") as f:
            for line in f:
                if re.search(pattern, line):
                    return line
        time.sleep(0.005)
    sys.exit("no log line /%s/ within %d s" % (pattern, limit))


def log_time(line):
    stamp = line.split()[0]  # 2026-11-30T11:21:23.005Z
    t = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    return t + int(stamp[20:23]) / 1000


for attempt in range(1, 4):
    name = "slow%d" % (attempt + 1)
    answer = {}

    def register():
        r = requests.post(m + "/models?url=slow.onnx&model_name=%s&initial_workers=1&synchronous=true" % name,
                          headers=auth, timeout=120)
        answer["status"], answer["body"] = r.status_code, r.text

    t = threading.Thread(target=register)
    t.start()
    log_line(r"loading slow\.onnx as model %s$" % name, 60)
    codes, busy = [], None
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    for i in range(100):
        conn.request("PUT", "/models/tiny?min_worker=%d" % (1 + i % 2), headers=auth)
        r = conn.getresponse()
        body = r.read()
        codes.append(r.status)
        if r.status == 503:
            busy = json.loads(body)["message"]
    last = time.time()
    conn.close()
    t.join(130)
    if answer.get("status") != 200 or "registered with 1 initial workers" not in answer.get("body", ""):
        sys.exit("register %s: %s" % (name, answer))
    print("ok   the register behind them (%s)" % name)
    loaded = log_time(log_line(r"model %s version 1\.0 \(slow\.onnx\) loaded in" % name, 10))
    summary = "%d x 202, %d x 503 (%s)" % (codes.count(202), codes.count(503), busy)
    if loaded <= last:
        print("     attempt %d does not count: the register ended first; %s" % (attempt, summary))
        # the scales taken after it may fill the queue again: a synchronous one is
        # answered once every change before it has run
        # (itself a 503 while the queue is full: again, until it fits)
        for _ in range(1200):
            r = requests.put(m + "/models/tiny?min_worker=1&synchronous=true", headers=auth, timeout=120)
            if r.status_code != 503:
                break
            time.sleep(0.05)
        if r.status_code != 200:
            sys.exit("emptying the queue before the next attempt: HTTP %d %s" % (r.status_code, r.text[:200]))
        continue
    print("ok   100 asynchronous scales during a register: %s" % summary)
    # the register is one of the 64 changes queued or running
    sys.exit(0 if codes.count(202) == 63 and codes.count(503) == 37 and "64 model changes" in (busy or "") else 1)
sys.exit("3 attempts: every register ended before its 100 scales were answered")
PY
call "the queue drains: a scale is accepted again" 200 '"Workers scaled to 1" in r["status"]' \
  "${MA[@]}" -X PUT "$M/models/tiny?min_worker=1&synchronous=true"

serve_finish serve_startup "$WORK"
