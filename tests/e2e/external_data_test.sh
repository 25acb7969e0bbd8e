#!/bin/sh
# Models whose weights lie outside the .onnx (ONNX external data) run as the same model
# with its weights inside does.
#
# Why: a protobuf message cannot pass 2 GB, so torch.onnx.export writes any bigger
# model (torchvision's vit_h_14, regnet_y_128gf) with each weight in a file beside the
# .onnx, and the onnx package can put them all in one file with offsets. inferd reads
# both (src/onnx/onnx_external.c). tests/fixtures/make_external.py writes resnet18 in
# the two layouts; each must give PyTorch's output (compare.py, top-5 too) at batch 1
# and 8, byte for byte what the inline model gives, whether it is named by an absolute
# path, by one relative to another directory, or by its bare name from its own
# directory (the weights are found beside the model, never beside the caller). A copy
# of the .onnx without its weight files must be refused (exit 2, one line naming the
# tensor and the missing file). The malformed cases (a location outside the model's
# directory, wrong sizes and keys) are in malformed_test.sh.
#
# Usage: external_data_test.sh INFERD_BIN FIXDIR WORKDIR
set -u
if [ $# -ne 3 ]; then
    echo "usage: $0 INFERD_BIN FIXDIR WORKDIR" >&2
    exit 2
fi
inferd=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") fix=$2 work=$3
python=${INFERD_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
compare=$here/../fixtures/compare.py
rm -rf "$work"
mkdir -p "$work" || exit 2
"$python" "$here/../fixtures/make_external.py" "$fix/resnet18.onnx" "$work" || {
    echo "external_data_test: make_external.py failed" >&2
    exit 2
}

failed=0
fail() {
    echo "FAIL $*"
    failed=$((failed + 1))
}

for b in 1 8; do
    stem=$fix/resnet18.b$b.s0
    "$inferd" run "$fix/resnet18.onnx" --input "$stem.input.npy" --output "$work/inline.b$b.npy" --threads 2 ||
        { fail "the inline resnet18 at batch $b"; continue; }
    for layout in per_tensor one_file; do
        got=$work/$layout.b$b.npy
        if ! "$inferd" run "$work/$layout/resnet18.onnx" --input "$stem.input.npy" --output "$got" --threads 2 \
            2>"$work/stderr"; then
            fail "$layout at batch $b: $(cat "$work/stderr")"
        elif ! line=$("$python" "$compare" "$stem.output.npy" "$got" --top5); then
            fail "$layout at batch $b against PyTorch: $line"
        elif ! cmp -s "$work/inline.b$b.npy" "$got"; then
            fail "$layout at batch $b: not the inline model's output byte for byte ($line)"
        else
            echo "ok   $layout at batch $b: $line, the inline model's output"
        fi
    done
done

# The weights are found beside the model, whatever the working directory.
input=$(cd "$fix" && pwd)/resnet18.b1.s0.input.npy
(cd "$work" && "$inferd" run per_tensor/resnet18.onnx --input "$input" --output "$work/rel.npy") &&
    cmp -s "$work/inline.b1.npy" "$work/rel.npy" && echo "ok   by a path relative to another directory" ||
    fail "per_tensor/resnet18.onnx from $work"
(cd "$work/one_file" && "$inferd" run resnet18.onnx --input "$input" --output "$work/bare.npy") &&
    cmp -s "$work/inline.b1.npy" "$work/bare.npy" && echo "ok   by its bare name from its own directory" ||
    fail "resnet18.onnx from $work/one_file"

# The .onnx alone: refused, naming the first external tensor and its missing file.
mkdir -p "$work/alone"
cp "$work/per_tensor/resnet18.onnx" "$work/alone/"
status=0
"$inferd" run "$work/alone/resnet18.onnx" --input "$input" --output "$work/alone.npy" 2>"$work/stderr" || status=$?
if [ "$status" -eq 2 ] && [ "$(awk 'END { print NR }' "$work/stderr")" -eq 1 ] &&
    grep -Eq "initializer '[^']+': external data '[^']+': No such file" "$work/stderr" && [ ! -e "$work/alone.npy" ]; then
    echo "ok   the .onnx without its weights: $(cat "$work/stderr")"
else
    fail "the .onnx without its weights: exit status $status, $(cat "$work/stderr")"
fi

[ "$failed" -eq 0 ] && echo "all passed"
[ "$failed" -eq 0 ]
