#!/bin/sh
# Check that `inferd run` refuses bad model and input files cleanly.
#
# Why: a model file or an input array comes from outside; the engine must validate it
# at the border and answer with a status, never crash or abort (STYLE.md, "Errors").
# For `inferd run` that means: exit status exactly 2 (bad input), exactly one line on
# stderr that names the problem, and no output file. A status >= 128 (a signal: a
# segfault, an ASan/UBSan abort) is always a failure, and is reported as such.
#
# The bad files come from make_malformed.py (next to this script): truncated and
# random-byte .onnx files, an empty file, a Conv weight whose raw_data is shorter than
# its dims, a model whose int64 zeros unpack far larger than they are in the file (the
# loader's page dropper once ran past the file), unsupported ops (NonMaxSuppression, a
# custom domain), .npy inputs of the
# wrong rank, channel count and dtype, a truncated .npy, a text file named .npy, and
# missing paths. It also writes cases.tsv: name, model, input, and the regex
# (grep -Ei) the stderr line must match.
#
# Usage: malformed_test.sh INFERD_BIN WORKDIR
#   WORKDIR is created if needed and holds the generated files and each case's logs.
# Environment: INFERD_PYTHON (default /usr/bin/python3), the Python with onnx + numpy.
# Prints one line per case and "N passed, N failed"; exits 1 on any failure, 2 on bad
# usage or when the inputs cannot be made.
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 INFERD_BIN WORKDIR" >&2
    exit 2
fi
inferd=$1 work=$2
python=${INFERD_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)

[ -x "$inferd" ] || { echo "malformed_test: $inferd is not an executable" >&2; exit 2; }
mkdir -p "$work" || exit 2
"$python" "$here/make_malformed.py" "$work" || { echo "malformed_test: make_malformed.py failed" >&2; exit 2; }
[ -s "$work/cases.tsv" ] || { echo "malformed_test: no cases.tsv in $work" >&2; exit 2; }

# a hung inferd fails its case instead of the whole test (when timeout(1) exists)
limit=
command -v timeout >/dev/null 2>&1 && limit="timeout 60"

passed=0 failed=0 n=0
tab=$(printf '\t')
while IFS=$tab read -r name model input regex; do
    n=$((n + 1))
    out="$work/case$n.out.npy" err="$work/case$n.stderr" log="$work/case$n.stdout"
    rm -f "$out"
    status=0
    $limit "$inferd" run "$work/$model" --input "$work/$input" --output "$out" >"$log" 2>"$err" || status=$?
    lines=$(awk 'END { print NR }' "$err")
    why=
    if [ "$status" -eq 124 ] && [ -n "$limit" ]; then
        why="timed out after 60 s"
    elif [ "$status" -ge 128 ]; then
        why="killed by signal $((status - 128)) (exit status $status)"
    elif [ "$status" -ne 2 ]; then
        why="exit status $status, want 2"
    elif [ "$lines" -ne 1 ]; then
        why="$lines lines on stderr, want 1"
    elif ! grep -Eiq -- "$regex" "$err"; then
        why="message does not match /$regex/"
    elif [ -e "$out" ]; then
        why="wrote $out anyway"
    fi
    if [ -z "$why" ]; then
        passed=$((passed + 1))
        echo "ok   $name: $(cat "$err")"
    else
        failed=$((failed + 1))
        echo "FAIL $name ($model, $input): $why"
        sed -n '1,20s/^/  stderr: /p' "$err"
    fi
done <"$work/cases.tsv"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$n" -gt 0 ]
