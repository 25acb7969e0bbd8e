#!/bin/sh
# Peak memory of running resnet152 at batch 8: loading the model and running a batch
# must add about the weights' size plus the plan's scratch to the process's peak RSS,
# never a second copy of the weights (DESIGN.md §4: one read-only copy).
#
# Baseline: the same binary and input running a weightless model (make_tiny.py), so
# that libraries, the .npy input and the process itself cancel out. Peak RSS comes
# from /usr/bin/time -v; the weight and scratch sizes from `inferd run --profile`.
# The check allows 5% of the weights for what is neither: compiled kernels (oneDNN's
# JIT code, its primitives, the pages of libdnnl.so's code they touch) and the graph's
# metadata; a second copy of the weights, even of a twentieth of them, fails it
# (measured: 3.5-3.6% since the stride-2 layers run in nhwc; 2.9-3.0% before).
#
# Usage: memory_test.sh INFERD_BIN FIXDIR WORKDIR
set -eu
inferd=$1 fix=$2 work=$3
py=${INFERD_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
"$py" "$here/../fixtures/make_tiny.py" "$work/tiny.onnx"
input="$fix/resnet152.b8.s0.input.npy"

peak_kb() { sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): //p' "$1"; }

/usr/bin/time -v "$inferd" run "$work/tiny.onnx" --input "$input" --output "$work/tiny.out.npy" \
  2>"$work/tiny.time" >/dev/null
/usr/bin/time -v "$inferd" run "$fix/resnet152.onnx" --input "$input" --output "$work/r152.out.npy" \
  --profile 2>"$work/r152.time" >/dev/null
base=$(peak_kb "$work/tiny.time")
peak=$(peak_kb "$work/r152.time")
line=$(grep '^memory: ' "$work/r152.time")
weights=$(echo "$line" | sed -n 's/.*weights \([0-9.]*\) MB.*/\1/p')
scratch=$(echo "$line" | sed -n 's/.*scratch \([0-9.]*\) MB.*/\1/p')
awk -v base="$base" -v peak="$peak" -v w="$weights" -v s="$scratch" 'BEGIN {
  added = (peak - base) / 1024
  bound = w + s
  printf "peak RSS %.1f MB, baseline %.1f MB: loading + batch 8 added %.1f MB\n", peak / 1024, base / 1024, added
  printf "weights %.1f MB + scratch %.1f MB = %.1f MB; other %.1f MB (%.1f%% of the weights)\n", w, s, bound, added - bound, 100 * (added - bound) / w
  if (w < 200) { print "FAIL: resnet152 weights should be about 230 MB"; exit 1 }
  if (added > bound + 0.05 * w) { print "FAIL: more than weights + scratch + 5% of the weights"; exit 1 }
  print "ok"
}'
