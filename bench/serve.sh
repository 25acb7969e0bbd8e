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
#   --requests N  requests of the timed serving run, a positive integer
#   -h, --help    this text
# Needs the build (build/inferd) and the models bench/engine.sh exports into
# bench/results/tmp/ (it runs engine_torch.py --export-onnx when they are missing or
# older than engine_torch.py).
# Writes bench/results/serve.md.
# Exit status: 0 when the table is written, 2 for a bad option or value (one line on
# stderr), 1 when the run fails.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
INFERD="$ROOT/build/inferd"
TMPM="$ROOT/bench/results/tmp"
REQUESTS=400
. "$ROOT/bench/lib.sh" # die, bad_usage, usage and the bench_ functions
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) [ $# -ge 2 ] || bad_usage "--requests needs a value"; REQUESTS=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) bad_usage "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $REQUESTS =~ ^[1-9][0-9]*$ ]] || bad_usage "--requests must be a positive integer, not '$REQUESTS'"
[ -x "$INFERD" ] || die "build inferd first (cmake --build build)"
bench_describe  # cpu and commit (copes without git), for the table's header
bench_scaffold # $work, $pid, $child; cleaned up on exit, a signal ends the run
mkdir -p "$TMPM"
for m in resnet50 resnet152; do  # remade when missing or stale, as bench/engine.sh does
  if ! { [ -s "$TMPM/$m.onnx" ] && [ "$TMPM/$m.onnx" -nt "$ROOT/bench/engine_torch.py" ]; }; then
    echo "serve.sh: exporting $m to ${TMPM#"$ROOT"/}/$m.onnx" >&2
    bench_run_child /dev/null "exporting $m" \
      /usr/bin/python3 "$ROOT/bench/engine_torch.py" --model "$m" --export-onnx "$TMPM/$m.onnx"
  fi
done
/usr/bin/python3 -I -c "from PIL import Image; Image.open('/usr/lib/python3/dist-packages/skimage/data/chelsea.png').convert('RGB').save('$work/chelsea.jpg', quality=90)"

serve() { # MAR NAME: start the server on a config for MAR; sets pid, PORT and START (seconds to /ping 200)
  local mar=$1 name=$2 t1
  bench_serve_start "$name" "model_store=$work/model_store" "load_models=$mar" \
    "models={\"$name\": {\"1.0\": {\"marName\": \"$mar\", \"batchSize\": 8, \"maxBatchDelay\": 100, \"responseTimeout\": 200}}}" \
    "default_workers_per_model=${WORKERS:-2}" "job_queue_size=100" "number_of_netty_threads=4"
  t1=$(date +%s.%N)
  START=$(printf "%.2f" "$(echo "$t1 - $BENCH_SERVE_LAUNCHED" | bc)")
}

mkdir -p "$work/model_store"
"$INFERD" archive --model-name resnet-152 --serialized-file "$TMPM/resnet152.onnx" --handler image_classifier \
  --extra-files "$ROOT/models/index_to_name.json" --export-path "$work/model_store" >/dev/null
"$INFERD" archive --model-name resnet-50 --serialized-file "$TMPM/resnet50.onnx" --handler image_classifier \
  --extra-files "$ROOT/models/index_to_name.json" --export-path "$work/model_store" >/dev/null

starts=()
for _ in 1 2 3; do
  serve resnet-152.mar resnet-152
  starts+=("$START")
  bench_serve_stop
done
echo "serve.sh: resnet152 ready after ${starts[*]} s" >&2

bench_run_child "$work/offline.json" "inferd run --bench (resnet50, offline)" \
  "$INFERD" run "$TMPM/resnet50.onnx" --bench --batch 8 --threads 2 --seconds 10 --json
offline=$(/usr/bin/python3 -I -c 'import json,sys; print(json.load(open(sys.argv[1]))["throughput"])' "$work/offline.json")
WORKERS=1 serve resnet-50.mar resnet-50
# warm-up: compiles the plans of every batch size
bench_run_child /dev/null "inferd bench (warm-up)" \
  "$INFERD" bench --mode server --url "http://127.0.0.1:$PORT/predictions/resnet-50" --file "$work/chelsea.jpg" \
  --requests 32 --concurrency 32
bench_run_child "$work/served.json" "inferd bench (resnet50, served)" \
  "$INFERD" bench --mode server --url "http://127.0.0.1:$PORT/predictions/resnet-50" \
  --file "$work/chelsea.jpg" --requests "$REQUESTS" --concurrency 32 --json
bench_serve_stop
read -r served p99 errors < <(/usr/bin/python3 -I -c '
import json, sys
r = json.load(open(sys.argv[1]))
print("%.2f" % r["images_per_second"], "%.1f" % r["latency_ms"]["p99"], r["errors"])' "$work/served.json") \
  || die "inferd bench printed no result"
ratio=$(echo "scale=3; $served / $offline" | bc)
{
  echo "# Serving: start-up and overhead"
  echo
  echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC'); command: \`bench/serve.sh --requests $REQUESTS\`; CPU: ${cpu:-unknown}, $(nproc) cores; inferd $commit"
  echo
  echo "| measure | value |"
  echo "|---|---|"
  echo "| resnet152 start-up to /ping 200 (issue 3 config, 2 workers), 3 runs | ${starts[*]} s |"
  echo "| resnet50 offline, \`inferd run --bench --batch 8 --threads 2\` | $offline images/s |"
  echo "| resnet50 served, 1 worker x 2 threads, batchSize 8, 32 clients, JPEG | $served images/s (p99 $p99 ms, $errors errors) |"
  echo "| served / offline | $ratio |"
} | tee "$ROOT/bench/results/serve.md"
