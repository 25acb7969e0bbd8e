#!/usr/bin/env bash
# bench/engine.sh: inferd's engine against PyTorch's best on the same CPU, same run.
#
# For resnet50 and resnet152 (torchvision, seeded random weights, the identical network
# on both sides) x batch {1, 8}, with 2 threads, it runs one after another (never two at
# once):
#   build/inferd run MODEL.onnx --bench --batch N --threads 2 --seconds S --json
#   /usr/bin/python3 bench/engine_torch.py --model MODEL --batch N --threads 2 --seconds S --json
# and prints a Markdown table of throughputs, their ratio, inferd's GFLOP/s and its share of
# the machine's fp32 peak. The table also goes to bench/results/engine.md (or --out), with
# the date, the CPU and the command. Only the ratios mean something: both sides are measured in the
# same run on the same machine; absolute numbers move with the machine and its load.
#
# Usage: bench/engine.sh [--seconds S] [--rounds R] [--build DIR] [--no-build] [--profile]
#                        [--models a,b] [--batches 1,8] [--threads T] [--peak GFLOPS] [--out FILE]
#   --seconds S   timed seconds of each measurement (default 10). inferd runs once and PyTorch
#                 three variants per row and round, so 4 rows take ~16*S*R s plus warm-ups
#                 and model loading: about 8-10 minutes at the defaults on an idle 2-core
#                 machine, plus the first build and ONNX exports (~1 minute). --seconds 1
#                 --rounds 1 is a quick smoke test.
#   --rounds R    measure each row R times, the sides alternating (default 2); the table
#                 takes each side's best round. This machine's speed drifts by 10% and more
#                 over minutes (other tenants of the host); alternating rounds let each side
#                 meet the same drift, and the best round is what each reaches when left alone.
#   --build DIR   inferd's CMake build directory (default build/ in the repository). If it has
#                 no CMakeCache.txt and no inferd, it is configured (Release) and built; if it
#                 has a CMakeCache.txt, `cmake --build` brings it up to date; a bare DIR/inferd
#                 without CMake files is used as it is.
#   --no-build    never run cmake; DIR/inferd must exist
#   --profile     afterwards, run resnet50 batch 8 with `--profile` and print inferd's per-op
#                 breakdown (also appended to the table's file)
#   --models, --batches, --threads   override the default grid (resnet50,resnet152 / 1,8 / 2)
#   --peak GFLOPS fp32 peak used for "% of fp32 peak" (default: measured in the run, the best of
#                 bench/peak.py before and after the measurements: oneDNN's sgemm, same threads)
#   --out FILE    where the Markdown goes (default bench/results/engine.md, the committed table;
#                 a smoke run writes its own file instead of replacing it)
#
# Needs: the packages of scripts/install-deps.sh (cmake, libdnnl-dev, ..., python3-torch,
# python3-torchvision, python3-onnx). No network: weights are never downloaded.
# The exported models are cached in bench/results/tmp/ (ignored by git through its own
# .gitignore) and remade when missing or older than bench/engine_torch.py.
# Exit status: 0 when the table is written, 2 for a bad option or value (one line on
# stderr), 1 when the run fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
TORCH_BENCH="$ROOT/bench/engine_torch.py"
RESULTS="$ROOT/bench/results"
TMP="$RESULTS/tmp"
RUN="$TMP/last"          # this run's raw JSON and logs

SECS=10
ROUNDS=2
BUILD="$ROOT/build"
NO_BUILD=0
PROFILE=0
MODELS=resnet50,resnet152
BATCHES=1,8
THREADS=2
# fp32 peak: empty = measured by bench/peak.py (oneDNN's sgemm with the same threads) before
# and after the measurements, the better of the two; --peak gives a number instead
# (cores x FMA pipes x lanes x 2 x GHz: 434 on the AMD EPYC, Zen 5, this was first run on).
PEAK=
OUT="$RESULTS/engine.md"

. "$ROOT/bench/lib.sh" # die, bad_usage, usage and the bench_ functions

COMMAND="bench/engine.sh${*:+ $*}"
BENCH_OPTIONS="--seconds --rounds --build --no-build --models --batches --threads --out"
while [ $# -gt 0 ]; do
  bench_option "$@"
  if [ "$BENCH_TOOK" -gt 0 ]; then shift "$BENCH_TOOK"; continue; fi
  case "$1" in
    --profile) PROFILE=1; shift ;;
    --peak)    [ $# -ge 2 ] || bad_usage "--peak needs a value"; PEAK=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) bad_usage "unknown argument '$1' (see --help)" ;;
  esac
done
bench_check_options
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || bad_usage "--threads must be a positive integer, not '$THREADS'"
[ -z "$PEAK" ] || [[ $PEAK =~ ^[0-9]+([.][0-9]+)?$ ]] || bad_usage "--peak must be a number, not '$PEAK'"

# ---- prerequisites -------------------------------------------------------------------
[ -x "$PY" ] || die "$PY not found: run scripts/install-deps.sh"
"$PY" -I -c 'import torch, torchvision, onnx' 2>/dev/null \
  || die "$PY cannot import torch, torchvision and onnx: run scripts/install-deps.sh"

bench_build

bench_load_warning

# ---- models: exported once from the same seeded torchvision network -------------------
bench_workdirs
for m in "${MODEL_LIST[@]}"; do bench_export_model "$m"; done
if [ "$PROFILE" = 1 ]; then bench_export_model resnet50; fi

# ---- measurements: strictly one after another ----------------------------------------

check_json() {  # check_json FILE WHAT: exactly one JSON object with a positive "throughput"
  "$PY" -I - "$1" "$2" <<'EOF'
import json, sys
text = open(sys.argv[1]).read().strip()
try:
    obj = json.loads(text)
    ok = isinstance(obj, dict) and float(obj["throughput"]) > 0
except (ValueError, KeyError, TypeError):
    ok = False
if not ok:
    sys.exit("engine.sh: %s did not print one JSON object with a positive \"throughput\"; "
             "it printed:\n%s" % (sys.argv[2], text[:600] or "(nothing)"))
EOF
}

measure_peak() { # FILE: bench/peak.py's JSON, unless --peak gave the number
  [ -n "$PEAK" ] && return 0
  echo "engine.sh: the fp32 peak (bench/peak.py, $THREADS threads)" >&2
  bench_run_logged "$1" "$1.log" "bench/peak.py" "$PY" "$ROOT/bench/peak.py" --threads "$THREADS" --json
}

measure_peak "$RUN/peak.r1.json"
n=$(( ${#MODEL_LIST[@]} * ${#BATCH_LIST[@]} ))
i=0
for m in "${MODEL_LIST[@]}"; do
  for b in "${BATCH_LIST[@]}"; do
    i=$((i + 1))
    for r in $(seq 1 "$ROUNDS"); do  # the sides alternate, round after round
      base="$RUN/$m.b$b"
      echo "engine.sh: [$i/$n] $m batch $b, round $r/$ROUNDS: inferd" >&2
      bench_run_logged "$base.inferd.r$r.json" "$base.inferd.r$r.log" "inferd ($m, batch $b)" \
        "$INFERD" run "$TMP/$m.onnx" --bench --batch "$b" --threads "$THREADS" --seconds "$SECS" --json
      check_json "$base.inferd.r$r.json" "inferd run $m.onnx --batch $b --json" || exit 1
      echo "engine.sh: [$i/$n] $m batch $b, round $r/$ROUNDS: PyTorch" >&2
      bench_run_logged "$base.torch.r$r.json" "$base.torch.r$r.log" "engine_torch.py ($m, batch $b)" \
        "$PY" "$TORCH_BENCH" --model "$m" --batch "$b" --threads "$THREADS" --seconds "$SECS" --json
    done
  done
done

measure_peak "$RUN/peak.r2.json"

# ---- table ---------------------------------------------------------------------------
bench_describe
if [ -z "$PEAK" ]; then
  PEAK=$("$PY" -I - "$RUN" "$ROOT/bench" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
import bench_json
what = "bench/peak.py --json"
best = bench_json.best_round(sys.argv[1] + "/peak", 2, what, "engine.sh",
                             lambda o: bench_json.number(o, "gflops", what, "engine.sh"))
print("%.0f" % best["gflops"])
EOF
) || exit 1
  peak_text="fp32 peak ${PEAK} GFLOP/s (measured: oneDNN's sgemm, 4096 x 4096, ${THREADS} threads, the better of bench/peak.py before and after)"
else
  peak_text="fp32 peak ${PEAK} GFLOP/s (--peak)"
fi

table=$("$PY" -I - "$RUN" "$MODELS" "$BATCHES" "$PEAK" "$ROUNDS" "$ROOT/bench" <<'EOF'
import json, sys

run, models, batches, peak = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), float(sys.argv[4])
rounds = int(sys.argv[5])

sys.path.insert(0, sys.argv[-1])  # bench/, for bench_json
import bench_json

def number(obj, key, what):
    return bench_json.number(obj, key, what, "engine.sh")

rows, variants, notes = [], [], []
for m in models:
    for b in batches:
        what_i = "inferd run %s --batch %s --json" % (m, b)
        what_t = "engine_torch.py --model %s --batch %s --json" % (m, b)
        inf = bench_json.best_round("%s/%s.b%s.inferd" % (run, m, b), rounds, what_i, "engine.sh",
                                    lambda o: number(o, "throughput", what_i))
        tor = bench_json.best_round("%s/%s.b%s.torch" % (run, m, b), rounds, what_t, "engine.sh",
                                    lambda o: number(o.get("best", {}), "throughput", what_t))
        if inf.get("batch") is not None and int(inf["batch"]) != int(b):
            sys.exit("engine.sh: %s reports batch %r" % (what_i, inf["batch"]))
        ti = number(inf, "throughput", what_i)
        gflop = number(tor, "gflop_per_image", what_t)  # counted with hooks on the torch model
        g_inf = inf.get("gflop_per_image")
        if isinstance(g_inf, (int, float)) and abs(g_inf - gflop) > 0.02 * gflop:
            notes.append("%s: inferd counts %.2f GFLOP/image, PyTorch hooks %.2f; the table uses %.2f"
                         % (m, g_inf, gflop, gflop))
        best = tor["best"]["variant"]
        tt = number(tor["best"], "throughput", what_t)
        label = best + (" (frozen only)" if best in tor.get("notes", {}) else "")
        gfs = ti * gflop
        rows.append("| %s | %s | %.2f | %.2f (%s) | %.2f | %.0f | %.0f%% |"
                    % (m, b, ti, tt, label, ti / tt, gfs, 100.0 * gfs / peak))
        v = tor["variants"]
        cell = lambda k: "%.2f" % v[k]["throughput"] if k in v else "failed"
        variants.append("| %s | %s | %s | %s | %s | %.0f |"
                        % (m, b, cell("eager"), cell("channels_last"), cell("torchscript"),
                           tt * gflop))
        for k, msg in sorted(tor.get("notes", {}).items()):
            notes.append("%s batch %s, PyTorch %s: %s" % (m, b, k, msg))
        for k, msg in sorted(tor.get("errors", {}).items()):
            notes.append("%s batch %s, PyTorch %s failed: %s" % (m, b, k, msg))

print("| model | batch | inferd img/s | PyTorch best img/s (variant) | ratio inferd/PyTorch "
      "| inferd GFLOP/s | % of fp32 peak |")
print("|---|---:|---:|---|---:|---:|---:|")
print("\n".join(rows))
print()
print("PyTorch variants (img/s; the best of them is the table's PyTorch column):")
print()
print("| model | batch | eager NCHW | eager channels_last | TorchScript frozen+optimized | best GFLOP/s |")
print("|---|---:|---:|---:|---:|---:|")
print("\n".join(variants))
if notes:
    print()
    for n in notes:
        print("- " + n)
EOF
) || exit 1

torch_version=$("$PY" -I -c 'import torch; print(torch.__version__)')
header="CPU: ${cpu:-unknown} ($(nproc) logical CPUs); ${THREADS} threads; ${SECS} s per measurement, \
best of ${ROUNDS} alternating rounds per side; \
${peak_text}; GFLOP/image counted on the PyTorch model (2 x MACs of Conv2d + Linear); \
PyTorch ${torch_version}; inferd ${commit}."

echo
echo "$header"
echo
echo "$table"

{
  echo "# inferd engine vs PyTorch, CPU fp32"
  echo
  echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Command: \`$COMMAND\`"
  echo
  echo "$header"
  echo "Only the ratios are meant to be compared: both sides ran one after another in the same run,"
  echo "their rounds alternating."
  echo
  echo "$table"
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo
echo "engine.sh: wrote ${OUT#"$ROOT"/}" >&2

# ---- optional per-op profile ---------------------------------------------------------
if [ "$PROFILE" = 1 ]; then
  echo
  echo "inferd per-op profile: resnet50, batch 8, $THREADS threads, $SECS s"
  echo
  prof="$RUN/resnet50.b8.profile.txt"
  if ! "$INFERD" run "$TMP/resnet50.onnx" --bench --batch 8 --threads "$THREADS" \
      --seconds "$SECS" --profile >"$prof" 2>&1; then
    cat "$prof" >&2
    die "inferd --profile run failed"
  fi
  cat "$prof"
  {
    echo
    echo "## inferd per-op profile (resnet50, batch 8, $THREADS threads, $SECS s)"
    echo
    echo '```'
    cat "$prof"
    echo '```'
  } >>"$OUT"
fi
