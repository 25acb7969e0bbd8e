#!/bin/sh
# Check that inferd either runs one torchvision classifier correctly or refuses it cleanly.
#
# Why: the promise for any torchvision image classifier exported the usual way (opset 13,
# dynamic batch; tests/fixtures/make_models.py) is "runs correctly, or is refused at load
# with a message naming the unsupported op and node — never a wrong answer, never a
# crash". This checks that promise on one model, for batches 1 and 4 and 2 input seeds
# (from batch 4 up the engine picks blocked layouts and Winograd where they pay, so both
# kinds of plan are checked):
#   - inferd exits 0: its output must match PyTorch's (compare.py --rtol 1e-4 --top5);
#   - inferd refuses: exit status exactly 2, no output file, and stderr exactly one line
#     containing "node '<name>' (<OpType>): ", where a node of that name and op type is
#     in the model; the test then passes and prints "refused: <that line>";
#   - anything else (a crash, a signal, exit 1, a refusal of a kind other than the above,
#     a wrong answer, a model refused for one batch size but run for another) fails.
#
# What is known of a model is asserted too (EXPECT): `run` (it must run and match; a
# refusal fails, so an op that stops being supported cannot pass as a clean refusal) or
# `refused:OP` (it must be refused, naming a node of op type OP). Without EXPECT either
# outcome passes, for models never tried before (the sweep).
#
# Usage: classifier_test.sh INFERD_BIN FIXDIR NAME [EXPECT]
#   FIXDIR holds NAME.onnx and NAME.bB.sK.{input,output}.npy for B in 1,4 and K in 0,1
#   (ctest fixture "classifiers").
# Environment: INFERD_PYTHON (default /usr/bin/python3; needs numpy and onnx).
# Prints one line per run (the error bound reached, or the refusal) and a summary line;
# exits 0 on pass, 1 at the first failure, 2 on bad usage or missing files.
set -u

if [ $# -lt 3 ] || [ $# -gt 4 ]; then
    echo "usage: $0 INFERD_BIN FIXDIR NAME [run | refused:OP]" >&2
    exit 2
fi
inferd=$1 fixdir=$2 name=$3 model=$2/$3.onnx expect=${4:-}
case $expect in
'' | run | refused:?*) ;;
*) echo "$name: EXPECT must be run or refused:OP, not '$expect'" >&2; exit 2 ;;
esac
python=${INFERD_PYTHON:-/usr/bin/python3}
compare="$(cd "$(dirname "$0")/../../fixtures" && pwd)/compare.py"
batches="1 4" seeds=2

for f in "$inferd" "$model" "$compare"; do
    [ -e "$f" ] || { echo "$name: missing $f" >&2; exit 2; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/inferd-classifier-test.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# The refusal line must name a node and its op: node '<name>' (<OpType>): <why>
refusal_re="node '.+' \\([A-Za-z_][A-Za-z0-9_.]*\\): "

# has_node LINE: the node and op type that LINE names are in the model (domain.op too).
has_node() {
    "$python" - "$model" "$1" <<'EOF'
import re, sys
import onnx
line = sys.argv[2]
m = re.search(r"node '(.+)' \(([A-Za-z_][A-Za-z0-9_.]*)\): ", line)
graph = onnx.load(sys.argv[1], load_external_data=False).graph
for n in graph.node:
    if n.name == m.group(1) and m.group(2) in (n.op_type, "%s.%s" % (n.domain, n.op_type)):
        sys.exit(0)
print("the model has no node '%s' of op type %s" % (m.group(1), m.group(2)))
sys.exit(1)
EOF
}

fail_run() {  # fail_run WHAT: print the failure, inferd's output and the command, exit 1
    echo "FAIL $name b$b s$k: $1"
    sed 's/^/  stderr: /' "$tmp/stderr"
    sed 's/^/  stdout: /' "$tmp/stdout"
    echo "  command: $inferd run $model --input $stem.input.npy --output $got --threads 2"
    exit 1
}

worst=0.00e+00 ran=0 refused=0 refusal=
for b in $batches; do
    k=0
    while [ "$k" -lt "$seeds" ]; do
        stem="$fixdir/$name.b$b.s$k"
        for f in "$stem.input.npy" "$stem.output.npy"; do
            [ -e "$f" ] || { echo "$name: missing $f (run make_models.py)" >&2; exit 2; }
        done
        got="$tmp/$name.b$b.s$k.npy"
        status=0
        "$inferd" run "$model" --input "$stem.input.npy" --output "$got" --threads 2 \
                >"$tmp/stdout" 2>"$tmp/stderr" || status=$?
        case $status in
        0)
            [ "$refused" -eq 0 ] || fail_run "ran, but earlier runs were refused ($refusal)"
            if ! line=$("$python" "$compare" "$stem.output.npy" "$got" --rtol 1e-4 --top5); then
                echo "FAIL $name b$b s$k: wrong answer: ${line#FAIL: }"
                exit 1
            fi
            echo "$name b$b s$k: $line"
            err=${line#max_rel_err=}
            err=${err%% *}
            worst=$(awk -v a="$worst" -v b="$err" 'BEGIN { print (b + 0 > a + 0) ? b : a }')
            ran=$((ran + 1))
            ;;
        2)
            [ "$ran" -eq 0 ] || fail_run "refused (exit 2), but earlier runs ran"
            lines=$(awk 'END { print NR }' "$tmp/stderr")
            [ "$lines" -eq 1 ] || fail_run "refused (exit 2) with $lines lines on stderr, not 1"
            line=$(cat "$tmp/stderr")
            printf '%s\n' "$line" | grep -Eq "$refusal_re" ||
                fail_run "refused (exit 2) without naming a node and its op (node '<name>' (<OpType>): )"
            [ ! -e "$got" ] || fail_run "refused (exit 2) but wrote an output file"
            if [ "$refused" -eq 0 ]; then
                why=$(has_node "$line") || fail_run "refused (exit 2): $why"
                refusal=$line
            elif [ "$line" != "$refusal" ]; then
                fail_run "refused with another message than the first run's ($refusal)"
            fi
            echo "$name b$b s$k: refused"
            refused=$((refused + 1))
            ;;
        *)
            if [ "$status" -gt 128 ]; then
                fail_run "inferd died with status $status (signal $((status - 128)))"
            fi
            fail_run "inferd run exited with status $status (only 0, or 2 for a refusal, pass)"
            ;;
        esac
        rm -f "$got"
        k=$((k + 1))
    done
done
if [ "$refused" -gt 0 ] && [ "$expect" = run ]; then
    echo "FAIL $name: refused, but it is known to run: $refusal"
    exit 1
fi
if [ "$refused" -eq 0 ] && [ "${expect#refused:}" != "$expect" ]; then
    echo "FAIL $name: ran, but it is known to be refused (${expect#refused:}); update the expectation"
    exit 1
fi
if [ "$refused" -gt 0 ] && [ "${expect#refused:}" != "$expect" ] &&
    ! printf '%s\n' "$refusal" | grep -q "(${expect#refused:}): "; then
    echo "FAIL $name: refused for another op than ${expect#refused:}: $refusal"
    exit 1
fi
if [ "$refused" -gt 0 ]; then
    echo "refused: $refusal"
else
    echo "$name: ok, worst max_rel_err=$worst over $ran runs"
fi
