#!/bin/sh
# One model of the opt-in torchvision sweep (ctest -L classifiers_all): export it with
# tests/fixtures/make_models.py into a directory of its own, check it with
# classifier_test.sh (runs and matches PyTorch, or is refused cleanly), then delete the
# fixtures. One model at a time because all of them together would take ~8 GB of disk
# (vgg19's ONNX file alone is 550 MB).
#
# Usage: classifier_sweep_test.sh INFERD_BIN WORKDIR NAME [EXPECT]
#   EXPECT as classifier_test.sh's: run, or refused:OP
# Environment: INFERD_PYTHON (default /usr/bin/python3; torch, torchvision, onnx, numpy).
set -u
if [ $# -lt 3 ] || [ $# -gt 4 ]; then
    echo "usage: $0 INFERD_BIN WORKDIR NAME [EXPECT]" >&2
    exit 2
fi
inferd=$1 work=$2/$3 name=$3 expect=${4:-}
python=${INFERD_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work" || exit 2
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
"$python" "$here/../../fixtures/make_models.py" --out "$work" --models "$name" --batches 1,4 --seeds 2 || {
    echo "$name: make_models.py failed" >&2
    exit 1
}
sh "$here/classifier_test.sh" "$inferd" "$work" "$name" $expect
