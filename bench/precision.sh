#!/usr/bin/env bash
# bench/precision.sh: inferd's bf16 mode against its own float32 and against PyTorch's
# bfloat16, speed and accuracy, in one run.
#
# For each model (torchvision, seeded random weights, the network bench/engine.sh and
# bench/peers.sh export) x batch, with T threads, the sides alternate round after round,
# never two at once:
#   inferd run MODEL.onnx --bench --json                      (float32)
#   inferd run MODEL.onnx --bench --json --precision bf16
#   bench/engine_torch.py --variants bf16                     (the model in bfloat16,
#                                                              traced and frozen)
# and the table gives each side's best round, inferd bf16 / inferd fp32 and inferd bf16 /
# PyTorch bf16. Then, per model, the accuracy on one seeded batch of 8: the error of
# inferd fp32, inferd bf16 and PyTorch bf16 against PyTorch's float32 output (max|diff|
# / max|ref|), and how many rows keep PyTorch float32's top class. Only the ratios mean
# something: every side is measured in the same run on the same machine.
#
# Usage: bench/precision.sh [--seconds S] [--rounds R] [--models a,b] [--batches 1,8]
#                           [--threads T] [--build DIR] [--no-build] [--out FILE]
#   --seconds S   timed seconds of each measurement (default 5); 3 sides x models x
#                 batches x rounds: the defaults (3 models, 2 batches, 2 rounds) take
#                 about 8 minutes on the 2-core machine, plus the exports (~1 minute)
#   --rounds R    rounds per row, the sides alternating (default 2)
#   --models      default resnet50,resnet152,mobilenet_v2
#   --batches     default 1,8
#   --threads T   default 2
#   --build DIR, --no-build   as bench/engine.sh
#   --out FILE    where the Markdown goes (default bench/results/precision.md)
# Needs what scripts/install-deps.sh installs and a CPU with AVX-512 (inferd's bf16 mode
# refuses others). Exit status: 0 when the table is written, 2 for a bad option, 1 when a
# run fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
TORCH_BENCH="$ROOT/bench/engine_torch.py"
RESULTS="$ROOT/bench/results"
TMP="$RESULTS/tmp"
RUN="$TMP/precision-last"

SECS=5
ROUNDS=2
BUILD="$ROOT/build"
NO_BUILD=0
MODELS=resnet50,resnet152,mobilenet_v2
BATCHES=1,8
THREADS=2
OUT="$RESULTS/precision.md"

. "$ROOT/bench/lib.sh" # die, bad_usage, usage and the bench_ functions

COMMAND="bench/precision.sh${*:+ $*}"
BENCH_OPTIONS="--seconds --rounds --build --no-build --models --batches --threads --out"
while [ $# -gt 0 ]; do
  bench_option "$@"
  if [ "$BENCH_TOOK" -gt 0 ]; then shift "$BENCH_TOOK"; continue; fi
  case "$1" in
    -h|--help) usage; exit 0 ;;
    *) bad_usage "unknown argument '$1' (see --help)" ;;
  esac
done
bench_check_options
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || bad_usage "--threads must be a positive integer, not '$THREADS'"

[ -x "$PY" ] || die "$PY not found: run scripts/install-deps.sh"
"$PY" -I -c 'import torch, torchvision, onnx' 2>/dev/null \
  || die "$PY cannot import torch, torchvision and onnx: run scripts/install-deps.sh"
bench_build
bench_load_warning

bench_workdirs
for m in "${MODEL_LIST[@]}"; do bench_export_model "$m"; done


# ---- speed ---------------------------------------------------------------------------
for m in "${MODEL_LIST[@]}"; do
  for b in "${BATCH_LIST[@]}"; do
    base="$RUN/$m.b$b"
    for r in $(seq 1 "$ROUNDS"); do
      echo "precision.sh: $m batch $b, round $r/$ROUNDS" >&2
      for p in fp32 bf16; do
        bench_run_logged "$base.$p.r$r.json" "$base.$p.r$r.log" "inferd $p ($m, batch $b)" \
          "$INFERD" run "$TMP/$m.onnx" --bench --batch "$b" --threads "$THREADS" --seconds "$SECS" --json \
          --precision "$p"
      done
      bench_run_logged "$base.torch.r$r.json" "$base.torch.r$r.log" "engine_torch.py bf16 ($m, batch $b)" \
        "$PY" "$TORCH_BENCH" --model "$m" --batch "$b" --threads "$THREADS" --seconds "$SECS" --json --variants bf16
    done
  done
done

# ---- accuracy: one seeded batch of 8 per model ----------------------------------------
for m in "${MODEL_LIST[@]}"; do
  bench_run_logged "$RUN/$m.acc.log" "$RUN/$m.acc.err" "the PyTorch references of $m" \
    "$PY" -I - "$ROOT/bench" "$m" "$RUN" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import torch
import engine_torch as et
name, run = sys.argv[2], sys.argv[3]
torch.set_num_threads(2)
model = et.build_model(name, 0)  # the seed the exports use
x = et.make_input(8, et.IMAGE_SIZE.get(name, 224), 12345)
with torch.no_grad():
    ref = model(x)
    m16, x16 = et.bf16_module(model, x)
    b16 = m16(x16)
np.save("%s/%s.acc.input.npy" % (run, name), x.numpy())
np.save("%s/%s.acc.fp32.npy" % (run, name), ref.numpy())
np.save("%s/%s.acc.torch-bf16.npy" % (run, name), b16.float().numpy())
EOF
  for p in fp32 bf16; do
    bench_run_logged "$RUN/$m.acc.$p.log" "$RUN/$m.acc.$p.err" "inferd $p on $m's accuracy batch" \
      "$INFERD" run "$TMP/$m.onnx" --input "$RUN/$m.acc.input.npy" --output "$RUN/$m.acc.inferd-$p.npy" \
      --threads "$THREADS" --precision "$p"
  done
done

# ---- table ---------------------------------------------------------------------------
bench_describe
table=$("$PY" -I - "$RUN" "$MODELS" "$BATCHES" "$ROUNDS" <<'EOF'
import json, sys
import numpy as np
run, models, batches, rounds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), int(sys.argv[4])
def best(path_fmt, key):
    return max(key(json.load(open(path_fmt % r))) for r in range(1, rounds + 1))
print("| model | batch | inferd fp32 img/s | inferd bf16 img/s | PyTorch bf16 img/s | bf16 / fp32 "
      "| inferd bf16 / PyTorch bf16 |")
print("|---|---:|---:|---:|---:|---:|---:|")
for m in models:
    for b in batches:
        base = "%s/%s.b%s" % (run, m, b)
        f32 = best(base + ".fp32.r%d.json", lambda j: j["throughput"])
        b16 = best(base + ".bf16.r%d.json", lambda j: j["throughput"])
        tb16 = best(base + ".torch.r%d.json", lambda j: j["variants"]["bf16"]["throughput"])
        print("| %s | %s | %.2f | %.2f | %.2f | %.2fx | %.2fx |" % (m, b, f32, b16, tb16, b16 / f32, b16 / tb16))
print()
print("Accuracy on one seeded batch of 8 (N(0,1) pixels), against PyTorch's float32 output: "
      "max\\|diff\\| / max\\|ref\\|, and the rows whose top class is PyTorch float32's.")
print()
print("| model | inferd fp32 | inferd bf16 | PyTorch bf16 | top-1 kept: inferd bf16 | PyTorch bf16 |")
print("|---|---:|---:|---:|---:|---:|")
for m in models:
    ref = np.load("%s/%s.acc.fp32.npy" % (run, m)).astype(np.float64)
    scale = np.abs(ref).max()
    out = {}
    for side in ("inferd-fp32", "inferd-bf16", "torch-bf16"):
        y = np.load("%s/%s.acc.%s.npy" % (run, m, side)).astype(np.float64)
        out[side] = (np.abs(y - ref).max() / scale, int((y.argmax(1) == ref.argmax(1)).sum()))
    print("| %s | %.1e | %.1e | %.1e | %d/8 | %d/8 |" % (m, out["inferd-fp32"][0], out["inferd-bf16"][0],
          out["torch-bf16"][0], out["inferd-bf16"][1], out["torch-bf16"][1]))
EOF
) || die "making the table failed"

{
  echo "# inferd bf16: speed and accuracy against float32 and PyTorch's bfloat16"
  echo
  echo "$(date -u +%Y-%m-%d\ %H:%M) UTC, $cpu, $THREADS threads, commit $commit."
  echo "Command: \`$COMMAND\` (best of $ROUNDS rounds per side, the sides alternating)."
  echo
  echo "$table"
} >"$OUT"
echo "$table"
echo "precision.sh: table written to ${OUT#"$ROOT"/}" >&2
