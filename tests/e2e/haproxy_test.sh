#!/usr/bin/env bash
# haproxy_test.sh - two inferd hosts behind HAProxy, with deploy/haproxy/haproxy.cfg as
# shipped (its addresses from the environment), all on 127.0.0.1 (DESIGN.md §8):
#   - the file is valid (haproxy -c) and HAProxy finds both hosts up by their /ping;
#   - predictions through HAProxy give the answer a host gives directly, and both
#     hosts serve some (each one's own /metrics counts them);
#   - a rolling restart loses nothing: host 2 gets SIGTERM while `inferd bench` sends
#     requests through HAProxy; every request is answered 200 (the 503s of the drain
#     and the failed connections after it are retried on host 1) and host 2 exits 0;
#   - HAProxy marks host 2 down; host 1 alone serves; host 2 started again is marked up
#     and serves again.
# Host = a separate `inferd serve` process with its own ports: what HAProxy sees of a
# machine (the addresses are all loopback: this workplace's tests reach no others).
#
#   haproxy_test.sh INFERD SOURCE_DIR WORK_DIR
set -euo pipefail
INFERD=$(realpath "$1") SRC=$(realpath "$2") WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK"
. "$SRC/tests/e2e/serve_lib.sh" # fail, free_ports, serve_jpeg
declare -A PID
cleanup() {
  local p
  for p in "${PID[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  serve_cleanup
}
trap cleanup EXIT

read -r P1 M1 X1 P2 M2 X2 LB STATS <<<"$(free_ports 8)"
serve_jpeg chelsea "$WORK/cat.jpg"

# start_host N INFERENCE MANAGEMENT METRICS: `inferd serve` with MobileNetV2, one worker.
start_host() {
  local n=$1 dir=$WORK/host$1
  mkdir -p "$dir"
  cat >"$dir/config.properties" <<EOF
inference_address=http://127.0.0.1:$2
management_address=http://127.0.0.1:$3
metrics_address=http://127.0.0.1:$4
model_store=$SRC/models
load_models=mobilenet=mobilenet_v2_imagenet.onnx
default_workers_per_model=1
number_of_netty_threads=1
EOF
  (cd "$dir" && exec "$INFERD" serve --ts-config config.properties --foreground --disable-token-auth \
    >>server.log 2>&1) &
  PID[host$n]=$!
}

# wait_until SECONDS WHAT COMMAND...: polls COMMAND every 0.1 s.
wait_until() {
  local limit=$1 what=$2 i
  shift 2
  for i in $(seq 1 $((limit * 10))); do
    "$@" && return 0
    sleep 0.1
  done
  fail "$what: not within $limit s"
  return 1
}
pings() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$1/ping")" = 200 ]; }
# ready N PORT: host N answers /ping 200 (exits the test when the host has died)
ready() {
  kill -0 "${PID[host$1]}" 2>/dev/null || { fail "host $1 died: $(tail -3 "$WORK/host$1/server.log")"; exit 1; }
  pings "$2"
}
# status NAME: HAProxy's view of server NAME of backend inferd (UP, DOWN, ...)
status() { curl -s --max-time 5 "http://127.0.0.1:$STATS/stats;csv" | awk -F, -v s="$1" '$1 == "inferd" && $2 == s {print $18}'; }
is_status() { [ "$(status "$1")" = "$2" ]; }
# served METRICS_PORT: predictions the host has counted
served() {
  curl -s --max-time 10 "http://127.0.0.1:$1/metrics?name[]=ts_inference_requests_total" --globoff |
    awk '/^ts_inference_requests_total/ {n += $2} END {print n + 0}'
}
# bench N OUT: N predictions through HAProxy from 4 clients, JSON report in OUT
bench() {
  "$INFERD" bench --mode server --url "http://127.0.0.1:$LB/predictions/mobilenet" --file "$WORK/cat.jpg" \
    --requests "$1" --concurrency 4 --timeout 60 --json >"$2"
}
# all_ok REPORT N WHAT: every one of the N requests answered 200
all_ok() {
  if /usr/bin/python3 - "$1" "$2" <<'PY'; then echo "ok   $3"; else fail "$3: $(head -c 600 "$1")"; fi
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if r["ok"] == int(sys.argv[2]) and r["errors"] == 0 else 1)
PY
}

start_host 1 "$P1" "$M1" "$X1"
start_host 2 "$P2" "$M2" "$X2"
export INFERD_LB_BIND=127.0.0.1:$LB INFERD_LB_STATS=127.0.0.1:$STATS
export INFERD_HOST1=127.0.0.1:$P1 INFERD_HOST2=127.0.0.1:$P2
CFG=$SRC/deploy/haproxy/haproxy.cfg
haproxy -c -q -f "$CFG" && echo "ok   haproxy -c: deploy/haproxy/haproxy.cfg is valid" || fail "haproxy -c rejects $CFG"
wait_until 120 "host 1 ready" ready 1 "$P1"
wait_until 120 "host 2 ready" ready 2 "$P2"
haproxy -db -f "$CFG" >"$WORK/haproxy.log" 2>&1 &
PID[haproxy]=$!
wait_until 30 "HAProxy sees host 1 up" is_status host1 UP && wait_until 30 "HAProxy sees host 2 up" is_status host2 UP &&
  echo "ok   HAProxy: both hosts UP by their /ping"

# The same answer through HAProxy as from a host directly.
curl -s --max-time 60 -T "$WORK/cat.jpg" "http://127.0.0.1:$P1/predictions/mobilenet" >"$WORK/direct.json"
curl -s --max-time 60 -T "$WORK/cat.jpg" "http://127.0.0.1:$LB/predictions/mobilenet" >"$WORK/via.json"
if /usr/bin/python3 -c 'import json,sys; a, b = (json.load(open(f)) for f in sys.argv[1:]); sys.exit(not (a == b and "Egyptian cat" in a))' \
  "$WORK/direct.json" "$WORK/via.json"; then
  echo "ok   the answer through HAProxy is the host's: $(head -c 60 "$WORK/via.json" | tr -d '\n ')..."
else
  fail "answer through HAProxy $(head -c 200 "$WORK/via.json") differs from the host's $(head -c 200 "$WORK/direct.json")"
fi

bench 60 "$WORK/spread.json"
all_ok "$WORK/spread.json" 60 "60 predictions through HAProxy: all 200"
s1=$(served "$X1") s2=$(served "$X2")
[ "$s1" -gt 0 ] && [ "$s2" -gt 0 ] && echo "ok   both hosts served (host 1: $s1, host 2: $s2)" ||
  fail "a host served nothing: host 1 $s1, host 2 $s2"

# Rolling restart: SIGTERM host 2 once the bench is under way.
N=400
bench $N "$WORK/restart.json" &
bench_pid=$!
PID[bench]=$bench_pid
base=$((s1 + s2))
under_way() { [ $(($(served "$X1") + $(served "$X2") - base)) -ge 40 ]; }
wait_until 60 "the bench under way" under_way
kill -TERM "${PID[host2]}" || fail "host 2 was gone before its SIGTERM"
status2=0
wait "${PID[host2]}" || status2=$?
unset 'PID[host2]'
[ "$status2" = 0 ] && echo "ok   host 2: SIGTERM, exit 0" || fail "host 2 exited $status2 after SIGTERM"
kill -0 "$bench_pid" 2>/dev/null && echo "ok   host 2 stopped while the bench still ran" ||
  fail "the bench ended before host 2 stopped: the restart was not tested (raise N)"
wait "$bench_pid" || fail "inferd bench exited non-zero"
unset 'PID[bench]'
all_ok "$WORK/restart.json" $N "$N predictions while host 2 stopped: all 200, none lost"

wait_until 30 "HAProxy marks host 2 down" is_status host2 DOWN && echo "ok   HAProxy: host 2 DOWN"
before=$(served "$X1")
bench 20 "$WORK/alone.json"
all_ok "$WORK/alone.json" 20 "20 predictions with host 2 down: all 200"
after=$(served "$X1")
[ $((after - before)) -eq 20 ] && echo "ok   host 1 served all 20" || fail "host 1 served $((after - before)) of 20"

# Host 2 back: marked up again, serves again (its counts start at 0).
start_host 2 "$P2" "$M2" "$X2"
wait_until 120 "host 2 ready again" ready 2 "$P2"
wait_until 30 "HAProxy marks host 2 up again" is_status host2 UP && echo "ok   HAProxy: host 2 UP again"
bench 60 "$WORK/back.json"
all_ok "$WORK/back.json" 60 "60 predictions after host 2 came back: all 200"
[ "$(served "$X2")" -gt 0 ] && echo "ok   host 2 serves again ($(served "$X2"))" || fail "host 2 serves nothing after it came back"

for h in host1 host2; do
  kill -TERM "${PID[$h]}"
  st=0
  wait "${PID[$h]}" || st=$?
  unset "PID[$h]"
  [ "$st" = 0 ] || fail "$h exited $st after SIGTERM"
done
if [ "$failures" != 0 ]; then
  echo "$failures failure(s); logs:" >&2
  tail -5 "$WORK"/host*/server.log "$WORK/haproxy.log" >&2
  exit 1
fi
echo "haproxy_test: all passed"
