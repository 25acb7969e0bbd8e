#!/bin/sh
# Check `inferd run` on the real MobileNet v2 and real photos against PyTorch.
#
# Why: random-weight models check the arithmetic; this checks that a real model on real
# pixels (skimage's chelsea.png and coffee.png, preprocessed with torchvision transforms)
# gives PyTorch's logits and top-5. Inputs and references come from
# tests/fixtures/make_cat_input.py (ctest fixture "cat").
#
# Usage: cat_test.sh INFERD_BIN FIXDIR MODEL
# Environment: INFERD_PYTHON (default /usr/bin/python3); INFERD_RUN_FLAGS, more options
#   for `inferd run` (--precision bf16); INFERD_RTOL, the error bound (default 1e-4).
# Prints one line per photo; exits 1 at the first failure, 2 on bad usage or missing files.
set -u

if [ $# -ne 3 ]; then
    echo "usage: $0 INFERD_BIN FIXDIR MODEL" >&2
    exit 2
fi
inferd=$1 fixdir=$2 model=$3
python=${INFERD_PYTHON:-/usr/bin/python3}
flags=${INFERD_RUN_FLAGS:-}
rtol=${INFERD_RTOL:-1e-4}
compare="$(cd "$(dirname "$0")/../../fixtures" && pwd)/compare.py"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/inferd-cat-test.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

for image in chelsea coffee; do
    for f in "$inferd" "$model" "$fixdir/$image.input.npy" "$fixdir/$image.output.npy"; do
        [ -e "$f" ] || { echo "missing $f (run make_cat_input.py)" >&2; exit 2; }
    done
    got="$tmp/$image.npy"
    status=0
    # shellcheck disable=SC2086 # flags: words
    "$inferd" run "$model" --input "$fixdir/$image.input.npy" --output "$got" --threads 2 $flags \
            >"$tmp/run.log" 2>&1 || status=$?
    if [ "$status" -ne 0 ]; then
        echo "FAIL $image: inferd run exited with status $status:"
        sed 's/^/  /' "$tmp/run.log"
        exit 1
    fi
    if ! line=$("$python" "$compare" "$fixdir/$image.output.npy" "$got" --rtol "$rtol" --top5); then
        echo "FAIL $image: ${line#FAIL: }"
        exit 1
    fi
    top1=$("$python" -c '
import json, sys, numpy
i = int(numpy.load(sys.argv[1])[0].argmax())
print(dict((c, name) for c, name, p in json.load(open(sys.argv[2]))).get(i, "class %d" % i))
' "$got" "$fixdir/$image.top5.json" 2>/dev/null)
    echo "$image: $line top1=${top1:-?}"
done
