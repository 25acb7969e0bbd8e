#!/usr/bin/env bash
# bench/seed-experiment.sh: decentralized vs centralized inference, in one run on this
# machine. ResNet-152 (torchvision, seeded random weights), one real photo (skimage's
# chelsea), N jobs:
#   1. decentralized, Debian's PyTorch: each job a Python process that loads a frozen
#      TorchScript resnet152 with one thread and classifies the photo; concurrency = cores
#   2. decentralized, inferd: `inferd bench --mode local`, same jobs and concurrency
#   3. inferd server, 1 worker, no batching (batchSize 1), 100 concurrent clients
#   4. + batchSize 8, maxBatchDelay 100 ms
#   5. + workers and threads per worker from the pinning plan (default_workers_per_model
#      = nproc, the CPUs this process may use, one thread each)
# Columns: total time, images/s, ratio to row 1, p99 latency, peak CPU %, peak memory %.
# Then row 5's ceiling: the engine alone (`inferd run --bench`, batch 8, all cores, 10 s)
# and oneDNN's sgemm rate (bench/peak.py), measured right after row 5.
# Writes bench/results/seed-experiment.md and bench/results/seed-experiment.png (gnuplot;
# --out FILE writes elsewhere), and prints the table. Default N=100, so that rows 3-5
# really have 100 clients at once (inferd bench runs no more clients than requests):
# 7-8 minutes on 2 idle cores, most of it row 1.
#
# Usage: bench/seed-experiment.sh [--jobs N] [--out FILE]
#   --jobs N      jobs (images) per row, a positive integer (default 100)
#   --out FILE    where the Markdown goes (default bench/results/seed-experiment.md, the
#                 committed table); the plot goes beside it (FILE without .md, + .png). A smoke
#                 run (--jobs 4 --out /tmp/seed.md) then replaces neither committed file.
#   -h, --help    this text
# Exit status: 0 when the table is written, 2 for a bad option or value (one line on
# stderr), 1 when the run fails.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
INFERD="$BUILD/inferd"
NO_BUILD=0
PY=/usr/bin/python3
RESULTS="$ROOT/bench/results"
TMPM="$RESULTS/tmp"
N=100
OUT="$RESULTS/seed-experiment.md"
. "$ROOT/bench/lib.sh" # die, bad_usage, usage and the bench_ functions
COMMAND="bench/seed-experiment.sh${*:+ $*}"
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) [ $# -ge 2 ] || bad_usage "--jobs needs a value"; N=$2; shift 2 ;;
    --out)  [ $# -ge 2 ] || bad_usage "--out needs a file"; OUT=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) bad_usage "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $N =~ ^[1-9][0-9]*$ ]] || bad_usage "--jobs must be a positive integer, not '$N'"
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
[ -d "$(dirname "$OUT")" ] || bad_usage "--out: no directory $(dirname "$OUT")"
PLOT="${OUT%.md}.png"  # the plot, beside the table
IMAGE=/usr/lib/python3/dist-packages/skimage/data/chelsea.png
[ -f "$IMAGE" ] || die "the photo $IMAGE is missing: apt-get install python3-skimage (scripts/install-deps.sh)"
command -v gnuplot >/dev/null || die "gnuplot not found: run scripts/install-deps.sh"
bench_build
bench_load_warning
bench_describe  # cpu and commit (copes without git), for the table's header

CORES=$(nproc)
bench_scaffold # $work, $pid, $child; cleaned up on exit, a signal ends the run

# The models, cached in bench/results/tmp/ (ignored by git): resnet152.onnx is made by
# engine_torch.py, resnet152.pt by seed_jobs.py from engine_torch.py's network. When either
# is missing or older than a script that makes it (bench/engine.sh's rule for its ONNX
# files), both are remade, so that rows 1 and 2 always run the same weights.
ONNX="$TMPM/resnet152.onnx"
TS="$TMPM/resnet152.pt"
if ! { [ -s "$ONNX" ] && [ "$ONNX" -nt "$ROOT/bench/engine_torch.py" ] &&
       [ -s "$TS" ] && [ "$TS" -nt "$ROOT/bench/engine_torch.py" ] && [ "$TS" -nt "$ROOT/bench/seed_jobs.py" ]; }; then
  mkdir -p "$TMPM"
  echo "seed-experiment.sh: exporting resnet152 to ${ONNX#"$ROOT"/} and ${TS#"$ROOT"/}" >&2
  bench_run_child - "exporting resnet152 to ONNX" \
    "$PY" "$ROOT/bench/engine_torch.py" --model resnet152 --export-onnx "$ONNX"
  bench_run_child - "saving resnet152 as TorchScript" "$PY" "$ROOT/bench/seed_jobs.py" save --model resnet152 --out "$TS"
fi

cp "$ROOT/models/index_to_name.json" "$work/"
mkdir -p "$work/model_store"
"$INFERD" archive --model-name resnet-152 --serialized-file "$ONNX" --handler image_classifier \
  --extra-files "$ROOT/models/index_to_name.json" --export-path "$work/model_store" >/dev/null
serve() { # BATCH WORKERS: start inferd serve on resnet-152.mar; sets pid and PORT
  bench_serve_start "batchSize $1, workers $2" "model_store=$work/model_store" "load_models=resnet-152.mar" \
    "models={\"resnet-152\": {\"1.0\": {\"marName\": \"resnet-152.mar\", \"batchSize\": $1, \"maxBatchDelay\": 100, \"responseTimeout\": 600}}}" \
    "default_workers_per_model=$2" "job_queue_size=1000" "number_of_netty_threads=2"
}
server_row() { # BATCH WORKERS OUT
  serve "$1" "$2"
  bench_run_child "$3" "inferd bench --mode server" \
    "$INFERD" bench --mode server --url "http://127.0.0.1:$PORT/predictions/resnet-152" --file "$IMAGE" \
    --requests "$N" --concurrency 100 --json
  bench_serve_stop
}

echo "seed-experiment.sh: [1/5] $N Python jobs, $CORES at once" >&2
bench_run_child "$work/row1.json" "seed_jobs.py run" \
  "$PY" "$ROOT/bench/seed_jobs.py" run --model "$TS" --image "$IMAGE" --requests "$N" \
  --concurrency "$CORES"
echo "seed-experiment.sh: [2/5] $N inferd jobs, $CORES at once" >&2
bench_run_child "$work/row2.json" "inferd bench --mode local" \
  "$INFERD" bench --mode local --model "$ONNX" --labels "$ROOT/models/index_to_name.json" \
  --file "$IMAGE" --requests "$N" --concurrency "$CORES" --json
echo "seed-experiment.sh: [3/5] server, 1 worker, no batching" >&2
server_row 1 1 "$work/row3.json"
echo "seed-experiment.sh: [4/5] server, 1 worker, batchSize 8" >&2
server_row 8 1 "$work/row4.json"
echo "seed-experiment.sh: [5/5] server, $CORES workers x 1 thread (the pinning plan), batchSize 8" >&2
server_row 8 "$CORES" "$work/row5.json"
# Row 5's ceiling: the engine alone on the same model and batch with every core, and
# oneDNN's sgemm rate with as many threads (bench/peak.py), right after row 5.
echo "seed-experiment.sh: row 5's ceiling: the engine alone (batch 8, $CORES threads) and the fp32 peak" >&2
bench_run_child "$work/engine.json" "inferd run --bench" \
  "$INFERD" run "$ONNX" --bench --batch 8 --threads "$CORES" --seconds 10 --json
bench_run_child "$work/peak.json" "bench/peak.py" "$PY" "$ROOT/bench/peak.py" --threads "$CORES" --json

"$PY" -I - "$work" "$OUT.tmp" "$(basename "$PLOT")" "$N" "$CORES" "$commit" "${cpu:-unknown CPU}" "$COMMAND" "$ROOT/bench" <<'PY'
import json, sys, time
work, out, plot, n, cores, commit, cpu, command = sys.argv[1:9]
sys.path.insert(0, sys.argv[9])  # bench/, for bench_json
import bench_json
names = ["1. decentralized, PyTorch jobs (Python, TorchScript, 1 thread)",
         "2. decentralized, inferd jobs (inferd bench --mode local)",
         "3. inferd server, 1 worker, no batching",
         "4. + batchSize 8, maxBatchDelay 100 ms",
         "5. + %s workers x 1 thread (pinning plan)" % cores]
rows = [json.load(open("%s/row%d.json" % (work, i))) for i in range(1, 6)]
# Every ratio divides by row 1: a row with failed jobs or requests would make them up.
failed = ["%s: %d of %s failed%s" % (name, r["errors"], n, " %r" % r["status"] if "status" in r else "")
          for name, r in zip(names, rows) if r["errors"]]
if failed:
    sys.exit("seed-experiment.sh: no table, since rows had errors:\n  " + "\n  ".join(failed))
base = rows[0]["images_per_second"]
lines = ["# Decentralized vs centralized: ResNet-152, %s jobs, one photo" % n, "",
         "Date: %s; command: `%s`; %s, %s cores; inferd %s. Rows run one after another."
         % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), command, cpu, cores, commit), "",
         "| row | total s | images/s | ratio to row 1 | p99 latency ms | peak CPU % | peak memory % | errors |",
         "|---|---:|---:|---:|---:|---:|---:|---:|"]
for name, r in zip(names, rows):
    lines.append("| %s | %.1f | %.2f | %.1fx | %.0f | %.0f | %.1f | %d |" % (
        name, r["total_seconds"], r["images_per_second"], r["images_per_second"] / base,
        r["latency_ms"]["p99"], r["peak_cpu_percent"], r["peak_memory_percent"], r["errors"]))
me, what_e, what_p = "seed-experiment.sh", "inferd run --bench --json", "bench/peak.py --json"
engine = bench_json.load(work + "/engine.json", what_e, me)
eng = bench_json.number(engine, "throughput", what_e, me)
gflop = bench_json.number(engine, "gflop_per_image", what_e, me)
sgemm = bench_json.number(bench_json.load(work + "/peak.json", what_p, me), "gflops", what_p, me)
row2, row5 = rows[1]["images_per_second"], rows[4]["images_per_second"]
lines += ["", "Row 5 / row 2: %.1fx; row 5 / row 1: %.1fx." % (row5 / row2, row5 / base), "",
          "Row 5's ceiling: the engine alone on the same model at batch 8 with %s threads "
          "(`inferd run --bench --seconds 10`, right after row 5) ran %.2f images/s, %.0f GFLOP/s of "
          "direct-convolution work (%.2f GFLOP per image), %.2fx oneDNN's fp32 sgemm rate on %s threads "
          "(%.0f GFLOP/s, `bench/peak.py`; Winograd does fewer FLOPs than the direct count). "
          "Row 5 ran at %.0f%% of the engine alone; the engine alone / row 2 is %.1fx, "
          "what row 5 / row 2 would be if serving added nothing to the engine's time."
          % (cores, eng, eng * gflop, gflop, eng * gflop / sgemm, cores, sgemm, 100.0 * row5 / eng, eng / row2),
          "", "![images/s per row](%s)" % plot]
open(out, "w").write("\n".join(lines) + "\n")
with open("%s/plot.dat" % work, "w") as f:
    for i, r in enumerate(rows, 1):
        f.write("%d \"row %d\" %.3f\n" % (i, i, r["images_per_second"]))
print("\n".join(lines[4:-2]))
PY
gnuplot <<GP || { rm -f "$OUT.tmp" "$PLOT.tmp"; die "gnuplot failed"; }
set terminal png size 800,450
set output "$PLOT.tmp"
set title "ResNet-152, $N jobs, $CORES cores: images/s"
set style fill solid 0.6
set boxwidth 0.6

set logscale y
set yrange [0.1:*]
unset key
plot "$work/plot.dat" using 1:3:xtic(2) with boxes
GP
mv "$PLOT.tmp" "$PLOT"
mv "$OUT.tmp" "$OUT"
echo "seed-experiment.sh: wrote ${OUT#"$ROOT"/} and ${PLOT#"$ROOT"/}" >&2
