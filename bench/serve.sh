#!/usr/bin/env bash
# bench/serve.sh: what serving costs, measured in one run on this machine.
#
#   1. start-up: `inferd serve` with the TorchServe config of issue 3 (resnet-152.mar made
#      by `inferd archive`, batchSize 8, 2 workers) until /ping answers 200, three times
#      (the first run reads the model from disk, the others from the page cache);
#   2. serving overhead: resnet50 served as image_classifier (batchSize 8, the server's
#      own placement) to 32 concurrent keep-alive clients (`inferd bench --mode server`)
#      sending a real JPEG, against `inferd run --bench` on the same model, batch 8 and
#      2 threads, offline. The clients, HTTP threads and JPEG decoding share the 2 cores
#      with the workers, as they would on a real host.
#
# Usage: bench/serve.sh [--requests N] (default 400; about 1 minute on 2 idle cores)
# Needs the build (build/inferd) and the models bench/engine.sh exports into
# bench/results/tmp/ (it runs engine_torch.py --export-onnx when they are missing).
# Writes bench/results/serve.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
INFERD="$ROOT/build/inferd"
TMPM="$ROOT/bench/results/tmp"
REQUESTS=400
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) REQUESTS=$2; shift 2 ;;
    *) echo "serve.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$INFERD" ] || { echo "serve.sh: build inferd first (cmake --build build)" >&2; exit 1; }
mkdir -p "$TMPM"
for m in resnet50 resnet152; do
  [ -f "$TMPM/$m.onnx" ] || /usr/bin/python3 "$ROOT/bench/engine_torch.py" --model "$m" --export-onnx "$TMPM/$m.onnx" >/dev/null
done
work=$(mktemp -d)
pid=""
cleanup() { [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT INT TERM
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
/usr/bin/python3 -c "from PIL import Image; Image.open('/usr/lib/python3/dist-packages/skimage/data/chelsea.png').convert('RGB').save('$work/chelsea.jpg', quality=90)"

serve() { # MAR NAME: start the server on a config for MAR; sets pid, PORT and START (seconds to /ping 200)
  local mar=$1 name=$2 p1 p2 p3 t0 t1
  p1=$(free_port); p2=$(free_port); p3=$(free_port)
  cat > "$work/config.properties" <<CONF
inference_address=http://127.0.0.1:$p1
management_address=http://127.0.0.1:$p2
metrics_address=http://127.0.0.1:$p3
model_store=$work/model_store
load_models=$mar
models={"$name": {"1.0": {"marName": "$mar", "batchSize": 8, "maxBatchDelay": 100, "responseTimeout": 200}}}
default_workers_per_model=${WORKERS:-2}
job_queue_size=100
number_of_netty_threads=4
CONF
  t0=$(date +%s.%N)
  (cd "$work" && exec "$INFERD" serve --ts-config config.properties --foreground --disable-token-auth) >"$work/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$p1/ping" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
    sleep 0.02
  done
  t1=$(date +%s.%N)
  PORT=$p1
  START=$(printf "%.2f" "$(echo "$t1 - $t0" | bc)")
}
stop() { kill -TERM "$pid"; wait "$pid" || true; pid=""; }

mkdir -p "$work/model_store"
"$INFERD" archive --model-name resnet-152 --serialized-file "$TMPM/resnet152.onnx" --handler image_classifier \
  --extra-files "$ROOT/models/index_to_name.json" --export-path "$work/model_store" >/dev/null
"$INFERD" archive --model-name resnet-50 --serialized-file "$TMPM/resnet50.onnx" --handler image_classifier \
  --extra-files "$ROOT/models/index_to_name.json" --export-path "$work/model_store" >/dev/null

starts=()
for i in 1 2 3; do
  serve resnet-152.mar resnet-152
  starts+=("$START")
  stop
done
echo "serve.sh: resnet152 ready after ${starts[*]} s" >&2

offline=$("$INFERD" run "$TMPM/resnet50.onnx" --bench --batch 8 --threads 2 --seconds 10 --json |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["throughput"])')
WORKERS=1 serve resnet-50.mar resnet-50
"$INFERD" bench --mode server --url "http://127.0.0.1:$PORT/predictions/resnet-50" --file "$work/chelsea.jpg" \
  --requests 32 --concurrency 32 >/dev/null # warm-up: compiles the plans of every batch size
served_json=$("$INFERD" bench --mode server --url "http://127.0.0.1:$PORT/predictions/resnet-50" \
  --file "$work/chelsea.jpg" --requests "$REQUESTS" --concurrency 32 --json)
stop
read -r served p99 errors < <(echo "$served_json" | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
print("%.2f" % r["images_per_second"], "%.1f" % r["latency_ms"]["p99"], r["errors"])')
ratio=$(echo "scale=3; $served / $offline" | bc)
{
  echo "# Serving: start-up and overhead"
  echo
  echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'); command: \`bench/serve.sh --requests $REQUESTS\`; CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; inferd $(git -C "$ROOT" rev-parse --short HEAD)"
  echo
  echo "| measure | value |"
  echo "|---|---|"
  echo "| resnet152 start-up to /ping 200 (issue 3 config, 2 workers), 3 runs | ${starts[*]} s |"
  echo "| resnet50 offline, \`inferd run --bench --batch 8 --threads 2\` | $offline images/s |"
  echo "| resnet50 served, 1 worker x 2 threads, batchSize 8, 32 clients, JPEG | $served images/s (p99 $p99 ms, $errors errors) |"
  echo "| served / offline | $ratio |"
} | tee "$ROOT/bench/results/serve.md"
