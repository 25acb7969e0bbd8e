#!/bin/sh
# Check `inferd run` on one torchvision test model against PyTorch's reference outputs.
#
# Why: every engine pass (BN folding, fusion, layouts, memory planning, plans per batch
# size) must leave a model's numbers where PyTorch eager has them. The model, inputs and
# references come from tests/fixtures/make_models.py (ctest fixture "models"); this runs
# the real binary on each (batch, seed) pair and checks the output with
# tests/fixtures/compare.py --rtol 1e-4 --top5 (bounds that INFERD_RTOL and INFERD_TOP1 change).
#
# Usage: run_model_test.sh INFERD_BIN FIXDIR NAME [BATCHES] [SEEDS] [MODEL]
#   BATCHES  comma-separated batch sizes (default 1,8)
#   SEEDS    number of input seeds per batch size (default 3)
#   MODEL    the ONNX file to run (default FIXDIR/NAME.onnx; e.g. FIXDIR/NAME.keepbn.onnx)
# Environment: INFERD_PYTHON (default /usr/bin/python3); INFERD_TOP5=0 leaves out the
#   top-5 check (for outputs that are not class scores: only the error bound is checked);
#   INFERD_RUN_FLAGS, more options for every `inferd run` (e.g. --transformed-winograd);
#   INFERD_RTOL, the error bound (default 1e-4); INFERD_TOP1=1 checks the top class
#   instead of the top-5 set; INFERD_LIKE=bf16 bounds the error by 1.5x PyTorch's own
#   bfloat16 error (NAME.bB.sK.bf16.npy, make_bf16_refs.py), INFERD_RTOL its floor.
# Prints one line per run and the worst max_rel_err; exits 1 at the first failure
# (after printing inferd's or compare.py's message), 2 on bad usage or missing files.
set -u

if [ $# -lt 3 ] || [ $# -gt 6 ]; then
    echo "usage: $0 INFERD_BIN FIXDIR NAME [BATCHES] [SEEDS] [MODEL]" >&2
    exit 2
fi
inferd=$1 fixdir=$2 name=$3 batches=${4:-1,8} seeds=${5:-3} model=${6:-$2/$3.onnx}
python=${INFERD_PYTHON:-/usr/bin/python3}
top5=--top5
flags=${INFERD_RUN_FLAGS:-}
rtol=${INFERD_RTOL:-1e-4}
[ "${INFERD_TOP5:-1}" = 0 ] && top5=""
[ "${INFERD_TOP1:-0}" = 1 ] && top5=--top1
like=${INFERD_LIKE:-}
compare="$(cd "$(dirname "$0")/../../fixtures" && pwd)/compare.py"

for f in "$inferd" "$model" "$compare"; do
    [ -e "$f" ] || { echo "$name: missing $f" >&2; exit 2; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/inferd-model-test.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

worst=0.00e+00 runs=0
for b in $(echo "$batches" | tr ',' ' '); do
    k=0
    while [ "$k" -lt "$seeds" ]; do
        stem="$fixdir/$name.b$b.s$k"
        for f in "$stem.input.npy" "$stem.output.npy"; do
            [ -e "$f" ] || { echo "$name: missing $f (run make_models.py)" >&2; exit 2; }
        done
        got="$tmp/$name.b$b.s$k.npy"
        status=0
        # shellcheck disable=SC2086 # flags: words
        "$inferd" run "$model" --input "$stem.input.npy" --output "$got" --threads 2 $flags \
                >"$tmp/run.log" 2>&1 || status=$?
        if [ "$status" -ne 0 ]; then
            echo "FAIL $name b$b s$k: inferd run exited with status $status:"
            sed 's/^/  /' "$tmp/run.log"
            echo "  command: $inferd run $model --input $stem.input.npy --output $got --threads 2 $flags"
            exit 1
        fi
        peer=""
        if [ -n "$like" ]; then
            [ -e "$stem.$like.npy" ] || { echo "$name: missing $stem.$like.npy (run make_bf16_refs.py)" >&2; exit 2; }
            peer="--like $stem.$like.npy"
        fi
        # shellcheck disable=SC2086 # top5, peer: words
        if ! line=$("$python" "$compare" "$stem.output.npy" "$got" --rtol "$rtol" $top5 $peer); then
            echo "FAIL $name b$b s$k: ${line#FAIL: }"
            exit 1
        fi
        echo "$name b$b s$k: $line"
        err=${line#max_rel_err=}
        err=${err%% *}
        worst=$(awk -v a="$worst" -v b="$err" 'BEGIN { print (b + 0 > a + 0) ? b : a }')
        runs=$((runs + 1))
        rm -f "$got"
        k=$((k + 1))
    done
done
[ "$runs" -gt 0 ] || { echo "$name: nothing to run (batches '$batches', seeds '$seeds')" >&2; exit 2; }
echo "$name: ok, worst max_rel_err=$worst over $runs runs"
