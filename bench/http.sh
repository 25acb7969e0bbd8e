#!/usr/bin/env bash
# bench/http.sh: the server's per-request overhead, inferd beside nginx (the ceiling of a static
# response on the same machine), both under wrk in the same run.
#
# Servers (both started by this script on free ports of 127.0.0.1, stopped by a trap):
#   inferd serve   two trivial models from tests/fixtures/make_tiny.py, as bare .onnx files:
#                  tiny.onnx, the weightless GlobalAveragePool [N,3,224,224] -> [N,3,1,1], so the
#                  image_classifier handler answers 3 classes; and mlp.onnx (--mlp), [N,4] ->
#                  Gemm 4x4 + Relu, served with the tensor handler (KServe v2 infer); token auth
#                  off; batch_size 1 (--batch-size); one worker each on one core (--worker-threads)
#   nginx          Debian's nginx-light with a temporary config: `return 200` of a small static
#                  body (the size of inferd's /ping answer), access log off, 2 workers
# Load: wrk -t2 -c64 -d${S}s -s bench/http_wrk.lua (keep-alive, 64 connections), one after another:
#   1. GET /ping on both: the HTTP path alone (h2o loop, routing, response)
#   2. POST /v2/models/mlp/infer with a JSON tensor [1,4] on inferd - the request path with a
#      model that costs nothing: routing, JSON parse, queue, batcher, worker, engine, JSON
#      answer - and the same POST on nginx (which discards the body)
#   3. POST /predictions/tiny with an 8x8 JPEG (634 bytes) on inferd - the image path: the same
#      plus JPEG decode, resize 256 + crop 224 + normalize, softmax/top-k - and on nginx
# in R rounds (--rounds): each round runs every row on both servers, the two taking turns
# first, and each side keeps its best round (as bench/engine.sh does: this shared machine's
# speed moves by 10% and more within minutes); prints requests/s, p50/p99 latency and errors
# of that best round, the ratio inferd/nginx of the two best, and each round's own ratio. Then
#   4. `inferd bench --mode server` itself (100 keep-alive clients, one process, as in the seed
#      experiment) POSTing the JPEG to nginx and to inferd: the load generator's own ceiling, beside
#      the highest rate bench/seed-experiment.sh needs of it (its best images/s, read from
#      bench/results/seed-experiment.md; --needed-rate R overrides), with the ratio (goal: >= 5x).
# The tables also go to bench/results/http.md (or --out). wrk and the servers share this machine's
# cores, as they would on a 2-core box; only the ratios mean something.
#
# Usage: bench/http.sh [--seconds S] [--rounds R] [--build DIR] [--no-build] [--connections C]
#                      [--batch-size B] [--bench-requests N] [--needed-rate R] [--worker-threads T]
#                      [--out FILE]
#   --seconds S       seconds of each wrk run (default 10): R rounds of 6 runs of S + 1 s, two
#                     inferd bench runs (~2 s) and start-up: ~3.5 minutes at the defaults, ~2 at
#                     --seconds 5; --seconds 2 --rounds 1 is a smoke test (~25 s)
#   --rounds R        rounds (default 3)
#   --build DIR       inferd's CMake build directory (default build/); built as bench/engine.sh does
#   --no-build        never run cmake; DIR/inferd must exist
#   --connections C   wrk connections (default 64)
#   --batch-size B    inferd's batch_size for the tiny model (default 1; B>1 uses max_batch_delay 5 ms)
#   --bench-requests N  requests of each `inferd bench` run (default 20000)
#   --needed-rate R   images/s the seed experiment needs of inferd bench (default: the best row of
#                     bench/results/seed-experiment.md)
#   --worker-threads T  one worker with T threads (default 1: cpu_launcher_args --ninstances 1
#                     --ncores_per_instance 1); 0 = the server's automatic plan (here one worker
#                     with a 2-thread OpenMP team, whose sync on cores shared with wrk and the
#                     HTTP threads costs more than the tiny model: ~3x fewer predictions/s)
#   --out FILE        where the Markdown goes (default bench/results/http.md, the committed table;
#                     a smoke run writes its own file instead of replacing it)
#
# Needs: wrk and nginx-light (Debian), python3-onnx and python3-pil (scripts/install-deps.sh).
# Exit status: 0 when the table is written, 2 for a bad option or value (one line on stderr),
# 1 when the run fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
LUA="$ROOT/bench/http_wrk.lua"
RESULTS="$ROOT/bench/results"

SECS=10
ROUNDS=3
BUILD="$ROOT/build"
NO_BUILD=0
CONNS=64
BATCH=1
WTHREADS=1
BENCH_REQUESTS=20000
NEEDED=
OUT="$RESULTS/http.md"

. "$ROOT/bench/lib.sh" # die, bad_usage, usage and the bench_ functions

COMMAND="bench/http.sh${*:+ $*}"
BENCH_OPTIONS="--seconds --rounds --build --no-build --out"
while [ $# -gt 0 ]; do
  bench_option "$@"
  if [ "$BENCH_TOOK" -gt 0 ]; then shift "$BENCH_TOOK"; continue; fi
  case "$1" in
    --connections) [ $# -ge 2 ] || bad_usage "--connections needs a value"; CONNS=$2; shift 2 ;;
    --batch-size) [ $# -ge 2 ] || bad_usage "--batch-size needs a value"; BATCH=$2; shift 2 ;;
    --worker-threads) [ $# -ge 2 ] || bad_usage "--worker-threads needs a value"; WTHREADS=$2; shift 2 ;;
    --bench-requests) [ $# -ge 2 ] || bad_usage "--bench-requests needs a value"; BENCH_REQUESTS=$2; shift 2 ;;
    --needed-rate) [ $# -ge 2 ] || bad_usage "--needed-rate needs a value"; NEEDED=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) bad_usage "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $SECS =~ ^[1-9][0-9]*$ ]] || bad_usage "--seconds must be a positive integer (wrk's -d), not '$SECS'"
[[ $CONNS =~ ^[1-9][0-9]*$ ]] || bad_usage "--connections must be a positive integer, not '$CONNS'"
[[ $BATCH =~ ^[1-9][0-9]*$ ]] || bad_usage "--batch-size must be a positive integer, not '$BATCH'"
[[ $WTHREADS =~ ^[0-9]+$ ]] || bad_usage "--worker-threads must be a number (0: automatic), not '$WTHREADS'"
[[ $BENCH_REQUESTS =~ ^[1-9][0-9]*$ ]] || bad_usage "--bench-requests must be a positive integer, not '$BENCH_REQUESTS'"
if [ -z "$NEEDED" ]; then
  # the best images/s of the seed experiment's table (column 3), if it has run
  NEEDED=$({ sed -n 's/^| [0-9]\. [^|]*| [^|]*| *\([0-9.]*\) |.*/\1/p' "$RESULTS/seed-experiment.md" 2>/dev/null \
    || true; } | sort -g | tail -n 1)
fi
[ -z "$NEEDED" ] || [[ $NEEDED =~ ^[0-9]+(\.[0-9]+)?$ ]] || bad_usage "--needed-rate must be a number, not '$NEEDED'"
[ "$CONNS" -ge 2 ] || bad_usage "--connections must be at least 2 (wrk runs 2 threads)"
bench_check_options

# ---- prerequisites -------------------------------------------------------------------
command -v wrk >/dev/null || die "wrk not found: apt-get install wrk"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)   # /usr/sbin is not on every user's PATH
[ -x "$NGINX" ] || die "nginx not found: apt-get install nginx-light"
"$PY" -I -c 'import onnx, PIL' 2>/dev/null || die "$PY cannot import onnx and PIL: run scripts/install-deps.sh"

bench_build

bench_load_warning

# ---- work dir, servers, traps --------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/inferd-http.XXXXXX")
INFERD_PID=
NGINX_PID=
WRK_PID=
stop_pid() {  # stop_pid PID NAME: SIGTERM, wait up to 10 s, then SIGKILL
  local pid=$1 i
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "http.sh: $2 (pid $pid) did not stop within 10 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  [ -z "$WRK_PID" ] || { kill -TERM "$WRK_PID" 2>/dev/null || true; wait "$WRK_PID" 2>/dev/null || true; }
  WRK_PID=
  stop_pid "$INFERD_PID" inferd
  INFERD_PID=
  stop_pid "$NGINX_PID" nginx
  NGINX_PID=
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Free ports on 127.0.0.1: inferd's inference, management and metrics ports, nginx's port.
read -r P_INF P_MGT P_MET P_NGX < <("$PY" -I - <<'PY'
import socket
socks = []
for _ in range(4):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
)

# The trivial model and a tiny image.
mkdir -p "$WORK/store"
"$PY" "$ROOT/tests/fixtures/make_tiny.py" "$WORK/store/tiny.onnx" || die "make_tiny.py failed"
"$PY" "$ROOT/tests/fixtures/make_tiny.py" "$WORK/store/mlp.onnx" --mlp || die "make_tiny.py --mlp failed"
echo '{"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": [1.5, -2, 3.25, 4]}]}' \
  >"$WORK/infer.json"
"$PY" -I - "$WORK/tiny.jpg" <<'PY' || die "making the test image failed"
import sys
from PIL import Image
img = Image.new("RGB", (8, 8))
img.putdata([((x * 37) % 256, (y * 53) % 256, ((x + y) * 29) % 256) for y in range(8) for x in range(8)])
img.save(sys.argv[1], quality=90)
PY

delay=100
[ "$BATCH" -gt 1 ] && delay=5
cat >"$WORK/config.properties" <<EOF
inference_address=http://127.0.0.1:$P_INF
management_address=http://127.0.0.1:$P_MGT
metrics_address=http://127.0.0.1:$P_MET
model_store=$WORK/store
load_models=tiny=tiny.onnx,mlp=mlp.onnx
disable_token_authorization=true
batch_size=$BATCH
max_batch_delay=$delay
job_queue_size=1000
EOF
if [ "$WTHREADS" != 0 ]; then
  printf 'cpu_launcher_enable=true\ncpu_launcher_args=--ninstances 1 --ncores_per_instance %s\n' \
    "$WTHREADS" >>"$WORK/config.properties"
fi
(cd "$WORK" && exec "$INFERD" serve --ts-config "$WORK/config.properties" --foreground \
    >"$WORK/inferd.log" 2>&1) &
INFERD_PID=$!

# nginx: a static answer of about /ping's size, the ceiling of any HTTP server here.
mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes 2;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 120s;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  default_type application/json;
  server {
    listen 127.0.0.1:$P_NGX;
    location / { return 200 '{\n  "status": "Healthy"\n}\n'; }
  }
}
EOF
"$NGINX" -t -q -p "$WORK/nginx" -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" 2>"$WORK/nginx/check.log" \
  || { cat "$WORK/nginx/check.log" >&2; die "nginx rejected its temporary config"; }
"$NGINX" -p "$WORK/nginx" -e "$WORK/nginx/error.log" -c "$WORK/nginx/nginx.conf" 2>>"$WORK/nginx/error.log" &
NGINX_PID=$!

wait_200() {  # wait_200 NAME PID URL: until URL answers 200 (60 s), or the server dies
  local name=$1 pid=$2 url=$3 i code
  for i in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || return 1
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url") || code=000
    [ "$code" = 200 ] && return 0
    sleep 0.1
  done
  echo "http.sh: $name did not answer 200 at $url within 60 s" >&2
  return 1
}
wait_200 inferd "$INFERD_PID" "http://127.0.0.1:$P_INF/ping" \
  || { tail -n 20 "$WORK/inferd.log" >&2; die "inferd did not start"; }
wait_200 nginx "$NGINX_PID" "http://127.0.0.1:$P_NGX/" \
  || { tail -n 20 "$WORK/nginx/error.log" >&2; die "nginx did not start"; }

# Both requests must work before they are measured.
code=$(curl -s -o "$WORK/answer.json" -w '%{http_code}' --max-time 10 -H 'Content-Type: application/json' \
  --data-binary "@$WORK/infer.json" "http://127.0.0.1:$P_INF/v2/models/mlp/infer") || code=000
[ "$code" = 200 ] || die "POST /v2/models/mlp/infer answered $code: $(head -c 300 "$WORK/answer.json" 2>/dev/null)"
"$PY" -I -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["outputs"][0]["shape"] == [1, 4], d' \
  "$WORK/answer.json" || die "POST /v2/models/mlp/infer did not answer a [1,4] output: $(head -c 300 "$WORK/answer.json")"
code=$(curl -s -o "$WORK/answer.json" -w '%{http_code}' --max-time 10 -H 'Content-Type: image/jpeg' \
  --data-binary "@$WORK/tiny.jpg" "http://127.0.0.1:$P_INF/predictions/tiny") || code=000
[ "$code" = 200 ] || die "POST /predictions/tiny answered $code: $(head -c 300 "$WORK/answer.json" 2>/dev/null)"
"$PY" -I -c 'import json,sys; d=json.load(open(sys.argv[1])); assert isinstance(d, dict) and len(d) == 3, d' \
  "$WORK/answer.json" || die "POST /predictions/tiny did not answer 3 classes: $(head -c 300 "$WORK/answer.json")"

# ---- measurements: one after another -------------------------------------------------
bench() {  # bench NAME URL METHOD [BODY CTYPE] -> $WORK/NAME.json (wrk's JSON line)
  local name=$1 url=$2; shift 2
  # the timed run's command line, logged as it runs; METHOD [BODY CTYPE] go to http_wrk.lua
  local cmd=(wrk -t2 -c"$CONNS" -d"${SECS}s" -s "$LUA" "$url" -- "$@")
  echo "http.sh: ${cmd[*]}" >&2
  # a 1-second warm-up opens the connections and fills caches, then the timed run
  # (wrk runs in the background and the script waits for it, so that a signal is acted on at once)
  wrk -t2 -c"$CONNS" -d1s -s "$LUA" "$url" -- "$@" >/dev/null 2>&1 &
  WRK_PID=$!
  wait "$WRK_PID" || true
  "${cmd[@]}" >"$WORK/$name.out" 2>&1 &
  WRK_PID=$!
  if ! wait "$WRK_PID"; then
    cat "$WORK/$name.out" >&2
    die "wrk failed on $url"
  fi
  WRK_PID=
  grep '^{' "$WORK/$name.out" | tail -n 1 >"$WORK/$name.json"
  [ -s "$WORK/$name.json" ] || { cat "$WORK/$name.out" >&2; die "wrk printed no result for $url"; }
}
pair() {  # pair ROUND ROW PATH METHOD [BODY CTYPE]: ROW on both servers, the first one by turns
  local r=$1 row=$2 path=$3; shift 3
  local sides=(nginx inferd)
  [ $((r % 2)) = 0 ] && sides=(inferd nginx)
  local side port
  for side in "${sides[@]}"; do
    port=$P_NGX
    [ "$side" = inferd ] && port=$P_INF
    bench "${side}_$row.r$r" "http://127.0.0.1:$port$path" "$@"
  done
}
for r in $(seq 1 "$ROUNDS"); do
  echo "http.sh: round $r of $ROUNDS" >&2
  pair "$r" get /ping GET
  pair "$r" v2 /v2/models/mlp/infer POST "$WORK/infer.json" application/json
  pair "$r" post /predictions/tiny POST "$WORK/tiny.jpg" image/jpeg
done

# inferd bench's own ceiling: 100 clients in one process, as seed-experiment.sh runs it.
loadgen() {  # loadgen NAME URL -> $WORK/NAME.json (inferd bench's JSON)
  local cmd=("$INFERD" bench --mode server --url "$2" --file "$WORK/tiny.jpg" --requests "$BENCH_REQUESTS"
             --concurrency 100 --timeout 30 --json)
  echo "http.sh: ${cmd[*]}" >&2
  "${cmd[@]}" >"$WORK/$1.json" 2>"$WORK/$1.err" || { cat "$WORK/$1.err" >&2; die "inferd bench failed on $2"; }
}
loadgen loadgen_nginx "http://127.0.0.1:$P_NGX/predictions/tiny"
loadgen loadgen_inferd "http://127.0.0.1:$P_INF/predictions/tiny"

# The server must still be healthy after the load.
curl -sf -o /dev/null --max-time 5 "http://127.0.0.1:$P_INF/ping" || die "inferd's /ping failed after the load"

# ---- table ---------------------------------------------------------------------------
table=$("$PY" -I - "$WORK" "$NEEDED" "$ROUNDS" <<'EOF'
import json, sys
work, rounds = sys.argv[1], int(sys.argv[3])
def load(name):
    return json.load(open("%s/%s.json" % (work, name)))
def runs(name):  # every round's run of NAME
    return [load("%s.r%d" % (name, r)) for r in range(1, rounds + 1)]
def errs(r):
    e = r["errors"]
    parts = ["%s %d" % (k, v) for k, v in sorted(e.items()) if v]
    return ", ".join(parts) if parts else "0"
rows = [("GET /ping", "inferd_get", "nginx_get"),
        ("POST /v2/models/mlp/infer (JSON tensor [1,4])", "inferd_v2", "nginx_v2"),
        ("POST /predictions/tiny (8x8 JPEG)", "inferd_post", "nginx_post")]
print("| request | inferd req/s | inferd p50 ms | inferd p99 ms | inferd errors "
      "| nginx req/s | nginx p99 ms | ratio inferd/nginx | ratio per round |")
print("|---|---:|---:|---:|---|---:|---:|---:|---|")
bad = []
for label, i, n in rows:
    all_i, all_n = runs(i), runs(n)
    for r in all_i + all_n:
        if r["rps"] <= 0:
            sys.exit("http.sh: a run made no requests: %r" % r)
    ri, rn = max(all_i, key=lambda r: r["rps"]), max(all_n, key=lambda r: r["rps"])
    per_round = " ".join("%.2f" % (a["rps"] / b["rps"]) for a, b in zip(all_i, all_n))
    print("| %s | %.0f | %.2f | %.2f | %s | %.0f | %.2f | %.2f | %s |"
          % (label, ri["rps"], ri["p50_ms"], ri["p99_ms"], errs(ri), rn["rps"], rn["p99_ms"],
             ri["rps"] / rn["rps"], per_round))
    for who, all_runs in (("inferd", all_i), ("nginx", all_n)):
        for k, r in enumerate(all_runs, 1):
            if any(r["errors"].values()):
                bad.append("%s %s, round %d: errors %s (status = non-2xx answers)" % (who, label, k, errs(r)))
print()
print("| load generator | against | requests | req/s | p99 ms | errors | ratio to the seed experiment's need |")
print("|---|---|---:|---:|---:|---:|---:|")
needed = float(sys.argv[2]) if sys.argv[2] else 0.0
for name, target in (("loadgen_nginx", "nginx (static answer)"), ("loadgen_inferd", "inferd /predictions/tiny")):
    r = load(name)
    rps = r["requests_per_second"]
    ratio = "%.0fx of %.2f/s" % (rps / needed, needed) if needed > 0 else "(seed experiment not run)"
    print("| inferd bench, 100 clients, 1 process | %s | %d | %.0f | %.2f | %d | %s |"
          % (target, r["requests"], rps, r["latency_ms"]["p99"], r["errors"], ratio))
    if r["errors"]:
        bad.append("inferd bench against %s: %d errors %r" % (target, r["errors"], r["status"]))
if bad:
    print()
    for b in bad:
        print("- " + b)
EOF
) || exit 1

bench_describe
header="CPU: ${cpu:-unknown} ($(nproc) logical CPUs, shared by wrk and the server); \
wrk $(wrk -v 2>&1 | sed -n 's/^wrk \([^ ]*\).*/\1/p' | head -n 1): 2 threads, $CONNS keep-alive connections, \
${SECS} s per run after a 1 s warm-up, $ROUNDS rounds (the sides take turns first; each keeps its best \
round); $("$NGINX" -v 2>&1 | sed 's/^nginx version: //') (2 workers, \
static return 200); inferd ${commit} (tiny models: a [N,4] MLP with the tensor handler, a \
GlobalAveragePool with the image_classifier handler; batch_size $BATCH, $(sed -n 's/.*info  *\([0-9]* HTTP threads\)$/\1/p' "$WORK/inferd.log" | head -n 1), \
$(sed -n 's/.*: placement \(.*\)$/\1/p' "$WORK/inferd.log" | head -n 1))."

echo
echo "$header"
echo
echo "$table"
{
  echo "# inferd HTTP overhead vs nginx"
  echo
  echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Command: \`$COMMAND\`"
  echo
  echo "$header"
  echo "GET /ping is the HTTP path alone; POST /v2/models/mlp/infer is the whole request path with a"
  echo "model that costs nothing (JSON tensor in, queue, batcher, worker, engine, JSON out);"
  echo "POST /predictions/tiny adds the image path (JPEG decode, resize/crop/normalize to 224x224,"
  echo "softmax, top-k). nginx answers all with a static body: the ceiling. Only the ratios are"
  echo "meant to be compared: all runs are from the same run, one after another; each side's"
  echo "figures are its best round, and the last column has every round's own ratio."
  echo "The second table shows that \`inferd bench\` is not the bottleneck of bench/seed-experiment.sh:"
  echo "the rate it sustains against the fastest servers here, beside the best images/s the seed"
  echo "experiment measured (the most it ever needs of the load generator)."
  echo
  echo "$table"
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo
echo "http.sh: wrote ${OUT#"$ROOT"/}" >&2
