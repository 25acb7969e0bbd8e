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
# custom domain, a GELU chain whose last Mul is a custom domain's), .npy inputs of the
# wrong rank, channel count and dtype, a truncated .npy, a text file named .npy, and
# missing paths, a model with two inputs, external data that is wrong (a missing file,
# a location out of the directory, wrong sizes, offsets and keys, a directory or a FIFO
# as the file). It also writes cases.tsv: name, model, input,
# and the regex (grep -Ei) the stderr line must match. Then bad arguments, by the same
# rule: --bench on a model with two inputs (it crashed), --batch or --json without
# --bench, --bench with --input, an unknown option, a missing value, --no-winograd with
# --transformed-winograd, an unknown --precision, another option as the value of --output or --input, and an
# unknown command (`inferd` itself) with a newline in its name. Last, the good
# model's --bench, which must run for the seconds asked (it stopped at 65536 runs, 0.8 s
# on this model) and end with its throughput line.
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

# Bad arguments: the same rule (exit 2, one line naming the problem, nothing written).
cmd_case() { # NAME REGEX ARGS...: `inferd ARGS...`
    name=$1 regex=$2
    shift 2
    status=0
    $limit "$inferd" "$@" >"$work/args.stdout" 2>"$work/args.stderr" || status=$?
    lines=$(awk 'END { print NR }' "$work/args.stderr")
    if [ "$status" -eq 2 ] && [ "$lines" -eq 1 ] && grep -Eiq -- "$regex" "$work/args.stderr"; then
        passed=$((passed + 1))
        echo "ok   $name: $(cat "$work/args.stderr")"
    else
        failed=$((failed + 1))
        echo "FAIL $name: exit status $status, $lines lines on stderr, want 2 and one line matching /$regex/"
        sed -n '1,20s/^/  stderr: /p' "$work/args.stderr"
    fi
}
arg_case() { # NAME REGEX ARGS...: `inferd run ARGS...`
    case_name=$1 case_regex=$2
    shift 2
    cmd_case "$case_name" "$case_regex" run "$@"
}
arg_case "--bench on a model with two inputs" "2 inputs" "$work/two_inputs.onnx" --bench --seconds 0.1
arg_case "--batch without --bench" "go with --bench" "$work/good.onnx" --input "$work/good.npy" --output "$work/x.npy" --batch 4
arg_case "--json without --bench" "go with --bench" "$work/good.onnx" --input "$work/good.npy" --output "$work/x.npy" --json
arg_case "--bench with --input" "--input and --output go without" "$work/good.onnx" --bench --input "$work/good.npy"
arg_case "an unknown option" "unknown option.*--frobnicate" "$work/good.onnx" --bench --frobnicate
arg_case "two Winograd modes" "--no-winograd and --transformed-winograd" "$work/good.onnx" --bench --no-winograd \
    --transformed-winograd
arg_case "an unknown precision" "--precision wants fp32 or bf16" "$work/good.onnx" --bench --precision fp16
arg_case "a missing value" "missing value.*--threads" "$work/good.onnx" --bench --threads
# another option is not a value (it wrote the output to a file named --profile, exit 0)
arg_case "an option as --output's value" "missing value for --output" "$work/good.onnx" --input "$work/good.npy" \
    --output --profile
arg_case "an option as --input's value" "missing value for --input" "$work/good.onnx" --input --bench

# The dispatcher's refusal, by the same rule: an unknown command named with a newline is
# one line too (it was printed as given: two lines).
cmd_case "an unknown command with a newline" "^inferd: unknown command 'frob nicate'" "$(printf 'frob\nnicate')"

# --seconds is a lower bound of the timed loop: the reported time may only exceed it
"$inferd" run "$work/good.onnx" --bench --seconds 1.5 --json >"$work/bench.json" 2>"$work/bench.stderr"
status=$?
if [ "$status" -eq 0 ] && "$python" -c 'import json, sys; r = json.load(open(sys.argv[1]))
sys.exit(0 if r["seconds"] >= 1.5 and r["iterations"] >= 3 and r["throughput"] > 0 else 1)' "$work/bench.json"; then
    passed=$((passed + 1))
    echo "ok   --bench --seconds 1.5 ran for the time asked: $(cat "$work/bench.json")"
else
    failed=$((failed + 1))
    echo "FAIL --bench --seconds 1.5: exit status $status, $(cat "$work/bench.json" "$work/bench.stderr")"
fi
"$inferd" run "$work/good.onnx" --bench --seconds 0.2 >"$work/bench.txt" 2>"$work/bench.stderr"
if [ $? -eq 0 ] && tail -n 1 "$work/bench.txt" | grep -Eq '^throughput: [0-9]+\.[0-9]+ images/s$'; then
    passed=$((passed + 1))
    echo "ok   --bench ends with '$(tail -n 1 "$work/bench.txt")'"
else
    failed=$((failed + 1))
    echo "FAIL --bench's last line: '$(tail -n 1 "$work/bench.txt")'"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$n" -gt 0 ]
