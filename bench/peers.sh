#!/usr/bin/env bash
# bench/peers.sh: inferd's engine against what users would pick instead, same run, same ONNX
# file, same thread count: Debian's PyTorch (best of eager NCHW / eager channels_last / frozen
# TorchScript, measured by bench/engine_torch.py) and ONNX Runtime (the npm package
# onnxruntime-node, CPU execution provider, run by bench/peers_ort.js).
#
# For each model x batch x threads (default resnet50,resnet152,mobilenet_v2 x 1,8 x 1,2) it
# runs, one after another (never two at once):
#   build/inferd run MODEL.onnx --bench --batch B --threads T --seconds S --json
#   /usr/bin/python3 bench/engine_torch.py --model MODEL --batch B --threads T --seconds S --json
#   node bench/peers_ort.js --model MODEL.onnx --batch B --threads T --seconds S
# (and inferd once more per --inferd variant) and prints a Markdown table of images/s with the
# ratios inferd/PyTorch and inferd/ORT per row.
# The table also goes to bench/results/peers.md (or --out) with the date, the CPU and the command. Only
# the ratios mean something: absolute numbers move with the machine and its load.
#
# Usage: bench/peers.sh [--seconds S] [--rounds R] [--build DIR] [--no-build]
#                       [--models a,b] [--batches 1,8] [--threads 1,2] [--ort-version V]
#                       [--inferd default,transformed-winograd] [--out FILE]
#   --rounds R    measure each row R times, the sides alternating (default 2); the table
#                 takes each side's best round (see bench/engine.sh: the machine's speed
#                 drifts over minutes), and also gives the ratios round by round (each
#                 round's inferd against the same round's peer, seconds apart): their
#                 median and range, which one lucky round cannot move. The time below is
#                 per round.
#   --seconds S   timed seconds of each measurement (default 10). A row is inferd once,
#                 PyTorch three variants and ORT once, ~5*S s plus warm-ups and loading;
#                 one round of the 12 default rows took 17 minutes at --seconds 6 on an
#                 idle 2-core machine, two rounds at --seconds 4 took 38, three 42 to 44; expect ~25 per
#                 round at the default S (plus a first build, ONNX exports
#                 and the npm install, ~1-2 minutes; the timings of the slow rows are not
#                 S: warm-ups and PyTorch eager at batch 8 make resnet152's rows take ~3
#                 minutes each). --seconds 1 --rounds 1 is a smoke test, ~8 minutes: every measurement
#                 still makes its warm-up and at least 3 timed runs, which for resnet152 at
#                 batch 8 (~1 s each, PyTorch eager far slower) outlast S.
#   --build DIR   inferd's CMake build directory (default build/); built as bench/engine.sh does
#   --no-build    never run cmake; DIR/inferd must exist
#   --models, --batches, --threads   override the grid (torchvision model names; lists)
#   --inferd V,W  inferd's variants, each its own row against the same PyTorch and ORT
#                 rounds: `default`, or an `inferd run` option without its dashes
#                 (transformed-winograd, no-winograd). Default: default. Each variant
#                 adds one inferd measurement per round, run right after the others.
#   --out FILE    where the Markdown goes (default bench/results/peers.md, the full grid's
#                 table; a run of a few rows writes its own file instead of replacing it)
#   --ort-version V   onnxruntime-node version (default 1.30.0; its npm package carries the
#                 prebuilt linux-x64 CPU library, and it loads on Node 20)
#
# ONNX Runtime is installed once with npm, outside the source tree, into
#   ${XDG_CACHE_HOME:-$HOME/.cache}/inferd-bench/ort-V
# with ONNXRUNTIME_NODE_INSTALL=skip, so its install script downloads no GPU add-ons (the CPU
# binary is inside the npm package). This is the only network access (the npm registry).
# Needs: the packages of scripts/install-deps.sh (python3-torch, python3-torchvision,
# python3-onnx, ...; Debian's nodejs and npm when the machine has no node of its own: Node 20
# here, NodeSource's, which bundles npm; Debian 12's is 18). The exported models are shared with
# bench/engine.sh in bench/results/tmp/ (ignored by git); this run's raw JSON and logs go to
# bench/results/tmp/peers-last/.
# Exit status: 0 when the table is written, 2 for a bad option or value (one line on
# stderr), 1 when the run fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=/usr/bin/python3
TORCH_BENCH="$ROOT/bench/engine_torch.py"
ORT_BENCH="$ROOT/bench/peers_ort.js"
RESULTS="$ROOT/bench/results"
TMP="$RESULTS/tmp"
RUN="$TMP/peers-last"

SECS=10
ROUNDS=2
BUILD="$ROOT/build"
NO_BUILD=0
MODELS=resnet50,resnet152,mobilenet_v2
BATCHES=1,8
THREADS=1,2
ORT_VERSION=1.30.0
OUT="$RESULTS/peers.md"
VARIANTS=default

. "$ROOT/bench/lib.sh" # die, bad_usage, usage and the bench_ functions

COMMAND="bench/peers.sh${*:+ $*}"
BENCH_OPTIONS="--seconds --rounds --build --no-build --models --batches --threads --out"
while [ $# -gt 0 ]; do
  bench_option "$@"
  if [ "$BENCH_TOOK" -gt 0 ]; then shift "$BENCH_TOOK"; continue; fi
  case "$1" in
    --ort-version) [ $# -ge 2 ] || bad_usage "--ort-version needs a value"; ORT_VERSION=$2; shift 2 ;;
    --inferd)  [ $# -ge 2 ] || bad_usage "--inferd needs a value"; VARIANTS=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) bad_usage "unknown argument '$1' (see --help)" ;;
  esac
done
bench_check_options
[[ $THREADS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || bad_usage "--threads must be like 1,2, not '$THREADS'"
[[ $ORT_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || bad_usage "--ort-version must be like 1.30.0, not '$ORT_VERSION'"
[[ $VARIANTS =~ ^(default|transformed-winograd|no-winograd)(,(default|transformed-winograd|no-winograd))*$ ]] \
  || bad_usage "--inferd must list default, transformed-winograd or no-winograd, not '$VARIANTS'"
IFS=, read -r -a THREAD_LIST <<<"$THREADS"
IFS=, read -r -a VARIANT_LIST <<<"$VARIANTS"
[ "$(printf '%s\n' "${VARIANT_LIST[@]}" | sort -u | wc -l)" -eq "${#VARIANT_LIST[@]}" ] \
  || bad_usage "--inferd lists a variant twice: '$VARIANTS'"

# ---- prerequisites -------------------------------------------------------------------
[ -x "$PY" ] || die "$PY not found: run scripts/install-deps.sh"
"$PY" -I -c 'import torch, torchvision, onnx' 2>/dev/null \
  || die "$PY cannot import torch, torchvision and onnx: run scripts/install-deps.sh"
command -v node >/dev/null || die "node not found: apt-get install nodejs npm"
command -v npm >/dev/null || die "npm not found: apt-get install npm"

bench_build

# ONNX Runtime: onnxruntime-node from npm, once, outside the source tree.
ORT_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/inferd-bench/ort-$ORT_VERSION"
ort_ok() {
  NODE_PATH="$ORT_DIR/node_modules" node -e 'require("onnxruntime-node")' >/dev/null 2>&1
}
if ! ort_ok; then
  echo "peers.sh: installing onnxruntime-node@$ORT_VERSION into $ORT_DIR" >&2
  mkdir -p "$ORT_DIR"
  [ -f "$ORT_DIR/package.json" ] || echo '{ "private": true, "description": "inferd bench/peers.sh: ONNX Runtime peer" }' >"$ORT_DIR/package.json"
  # ONNXRUNTIME_NODE_INSTALL=skip: the install script fetches no GPU (CUDA/TensorRT) add-ons.
  (cd "$ORT_DIR" && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund \
      "onnxruntime-node@$ORT_VERSION" >&2) || die "npm install onnxruntime-node@$ORT_VERSION failed"
  ort_ok || die "onnxruntime-node@$ORT_VERSION installed in $ORT_DIR but does not load in $(node --version)"
fi
export NODE_PATH="$ORT_DIR/node_modules"

# Other work on these cores distorts every side (OpenMP teams spin on a shared core).
bench_load_warning

# ---- models: exported once from the same seeded torchvision network -------------------
bench_workdirs
for m in "${MODEL_LIST[@]}"; do bench_export_model "$m"; done

# ---- measurements: strictly one after another ----------------------------------------

n=$(( ${#MODEL_LIST[@]} * ${#BATCH_LIST[@]} * ${#THREAD_LIST[@]} ))
i=0
for m in "${MODEL_LIST[@]}"; do
  for b in "${BATCH_LIST[@]}"; do
    for t in "${THREAD_LIST[@]}"; do
      i=$((i + 1))
      base="$RUN/$m.b$b.t$t"
      for r in $(seq 1 "$ROUNDS"); do  # the sides alternate, round after round
        what="[$i/$n] $m batch $b threads $t, round $r/$ROUNDS"
        for v in "${VARIANT_LIST[@]}"; do
          side=inferd flags=()
          [ "$v" = default ] || side=inferd-$v flags=("--$v")
          echo "peers.sh: $what: $side" >&2
          bench_run_logged "$base.$side.r$r.json" "$base.$side.r$r.log" "$side ($m, batch $b, $t threads)" \
            "$INFERD" run "$TMP/$m.onnx" --bench --batch "$b" --threads "$t" --seconds "$SECS" --json "${flags[@]}"
        done
        echo "peers.sh: $what: PyTorch" >&2
        bench_run_logged "$base.torch.r$r.json" "$base.torch.r$r.log" "engine_torch.py ($m, batch $b, $t threads)" \
          "$PY" "$TORCH_BENCH" --model "$m" --batch "$b" --threads "$t" --seconds "$SECS" --json
        echo "peers.sh: $what: ONNX Runtime" >&2
        bench_run_logged "$base.ort.r$r.json" "$base.ort.r$r.log" "peers_ort.js ($m, batch $b, $t threads)" \
          node "$ORT_BENCH" --model "$TMP/$m.onnx" --batch "$b" --threads "$t" --seconds "$SECS"
      done
    done
  done
done

# ---- table ---------------------------------------------------------------------------
bench_describe

table=$("$PY" -I - "$RUN" "$MODELS" "$BATCHES" "$THREADS" "$ROUNDS" "$VARIANTS" "$ROOT/bench" <<'EOF'
import json, sys

run, models, batches, threads = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), sys.argv[4].split(",")
rounds, variants = int(sys.argv[5]), sys.argv[6].split(",")
# `default` alone: the table as it always was; otherwise a column names each row's
# variant (a table of --inferd transformed-winograd alone must not pass for the default)
many = variants != ["default"]

sys.path.insert(0, sys.argv[-1])  # bench/, for bench_json
import bench_json

def number(obj, key, what):
    return bench_json.number(obj, key, what, "peers.sh")

rows, notes, best = [], [], {}
for m in models:
    for b in batches:
        for t in threads:
            base = "%s/%s.b%s.t%s" % (run, m, b, t)
            wt = "engine_torch.py --model %s --batch %s --threads %s --json" % (m, b, t)
            wo = "peers_ort.js --model %s --batch %s --threads %s" % (m, b, t)
            get_t = lambda o: number(o.get("best", {}), "throughput", wt)
            get_o = lambda o: number(o, "throughput", wo)
            all_t, all_o = (bench_json.rounds_of(base + "." + side, rounds, what, "peers.sh", get)
                            for side, what, get in (("torch", wt, get_t), ("ort", wo, get_o)))
            tor, ort = max(all_t, key=get_t), max(all_o, key=get_o)
            if ort.get("batch") is not None and int(ort["batch"]) != int(b):
                sys.exit("peers.sh: %s reports batch %r" % (wo, ort["batch"]))
            tt = number(tor["best"], "throughput", wt)
            to = number(ort, "throughput", wo)
            for v in variants:
                side = "inferd" if v == "default" else "inferd-" + v
                wi = "inferd run %s --batch %s --threads %s --json%s" % (
                    m, b, t, "" if v == "default" else " --" + v)
                get_i = lambda o: number(o, "throughput", wi)
                all_i = bench_json.rounds_of(base + "." + side, rounds, wi, "peers.sh", get_i)
                inf = max(all_i, key=get_i)
                if inf.get("batch") is not None and int(inf["batch"]) != int(b):
                    sys.exit("peers.sh: %s reports batch %r" % (wi, inf["batch"]))
                paired = [bench_json.paired_ratios([get_i(o) for o in all_i], [get(o) for o in peer])
                          for get, peer in ((get_t, all_t), (get_o, all_o))]
                ti = number(inf, "throughput", wi)
                rows.append("| %s | %s | %s | %s%.2f | %.2f (%s) | %.2f | %.2f | %.2f | %s | %s |"
                            % ((m, b, t, v + " | " if many else "", ti, tt, tor["best"]["variant"], to,
                                ti / tt, ti / to) + tuple("%.2f (%.2f-%.2f)" % p for p in paired)))
                cur = best.setdefault((m, t, v), [0.0, 0.0, 0.0])
                cur[0], cur[1], cur[2] = max(cur[0], ti), max(cur[1], tt), max(cur[2], to)
            for key, msg in sorted(tor.get("errors", {}).items()):
                notes.append("%s batch %s threads %s, PyTorch %s failed: %s" % (m, b, t, key, msg))

inferd_col = "| inferd " if many else ""
print("| model | batch | threads %s| inferd img/s | PyTorch best img/s (variant) | ORT img/s "
      "| inferd/PyTorch | inferd/ORT | inferd/PyTorch per round | inferd/ORT per round |" % inferd_col)
print("|---|---:|---:|%s---:|---|---:|---:|---:|---:|---:|" % ("---|" if many else ""))
print("\n".join(rows))
if len(batches) > 1:
    print()
    print("Best of batch %s on each side:" % " and ".join(batches))
    print()
    print("| model | threads %s| inferd img/s | PyTorch img/s | ORT img/s | inferd/PyTorch | inferd/ORT |" % inferd_col)
    print("|---|---:|%s---:|---:|---:|---:|---:|" % ("---|" if many else ""))
    for m in models:
        for t in threads:
            for v in variants:
                ti, tt, to = best[(m, t, v)]
                print("| %s | %s | %s%.2f | %.2f | %.2f | %.2f | %.2f |"
                      % (m, t, v + " | " if many else "", ti, tt, to, ti / tt, ti / to))
if notes:
    print()
    for n in notes:
        print("- " + n)
EOF
) || exit 1

torch_version=$("$PY" -I -c 'import torch; print(torch.__version__)')
header="CPU: ${cpu:-unknown} ($(nproc) logical CPUs); ${SECS} s per measurement, \
best of ${ROUNDS} alternating rounds per side (per round: median and range of the \
${ROUNDS} round-by-round ratios); \
PyTorch ${torch_version} (best of eager, channels_last, frozen TorchScript); \
ONNX Runtime ${ORT_VERSION} (onnxruntime-node, CPU EP, graph optimization 'all', sequential, \
inter-op 1 thread); Node $(node --version); inferd ${commit}."

echo
echo "$header"
echo
echo "$table"

{
  echo "# inferd engine vs PyTorch vs ONNX Runtime, CPU fp32"
  echo
  echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Command: \`$COMMAND\`"
  echo
  echo "$header"
  echo "Same ONNX file and thread count on every side; only the ratios are meant to be compared:"
  echo "all sides ran one after another in the same run, their rounds alternating."
  echo
  echo "$table"
} >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo
echo "peers.sh: wrote ${OUT#"$ROOT"/}" >&2
