# shellcheck shell=bash
# bench/lib.sh: what every benchmark script does before it measures. Sourced, not run.
# Expects ROOT (the repository), BUILD (inferd's CMake build directory), INFERD
# ($BUILD/inferd) and NO_BUILD (1: never run cmake).

# Messages name the script; its --help is its header comment, line 2 to `set -euo`.
BENCH_NAME=$(basename "$0")
die() { echo "$BENCH_NAME: $*" >&2; exit 1; }
bad_usage() { echo "$BENCH_NAME: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

# ---- the options the scripts share ----------------------------------------------------
# A script lists the ones it takes in BENCH_OPTIONS (of --seconds --rounds --build
# --no-build --models --batches --threads --out) and sets their variables' defaults (SECS
# ROUNDS BUILD NO_BUILD MODELS BATCHES THREADS OUT); a bad value exits 2 (bad_usage above).

# bench_option ARGS...: takes the option ARGS starts with, when the script lists it: sets
# its variable and BENCH_TOOK to the words it used (1 or 2); else BENCH_TOOK=0, and the
# script's own loop goes on with ARGS.
bench_option() {
  BENCH_TOOK=0
  case " $BENCH_OPTIONS " in *" $1 "*) ;; *) return 0 ;; esac
  if [ "$1" = --no-build ]; then
    NO_BUILD=1 BENCH_TOOK=1
    return 0
  fi
  case "$1" in
    --build) [ $# -ge 2 ] || bad_usage "--build needs a directory" ;;
    --out) [ $# -ge 2 ] || bad_usage "--out needs a file" ;;
    *) [ $# -ge 2 ] || bad_usage "$1 needs a value" ;;
  esac
  case "$1" in
    --seconds) SECS=$2 ;;
    --rounds) ROUNDS=$2 ;;
    --build) BUILD=$2 ;;
    --models) MODELS=$2 ;;
    --batches) BATCHES=$2 ;;
    --threads) THREADS=$2 ;;
    --out) OUT=$2 ;;
  esac
  BENCH_TOOK=2
}

# After the loop: refuses (exit 2, one line) a bad value of a listed option (--threads is
# the script's to check: a count or a list), makes BUILD and OUT absolute, sets INFERD and
# MODEL_LIST / BATCH_LIST.
bench_check_options() {
  local o
  for o in $BENCH_OPTIONS; do
    case "$o" in
      --seconds)
        if ! [[ $SECS =~ ^[0-9]+([.][0-9]+)?$ ]] || ! awk "BEGIN { exit !($SECS > 0) }"; then
          bad_usage "--seconds must be a positive number, not '$SECS'"
        fi ;;
      --rounds) [[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || bad_usage "--rounds must be a positive integer, not '$ROUNDS'" ;;
      --batches)
        [[ $BATCHES =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || bad_usage "--batches must be like 1,8, not '$BATCHES'"
        IFS=, read -r -a BATCH_LIST <<<"$BATCHES" ;;
      --models)
        [[ $MODELS =~ ^[a-z0-9_]+(,[a-z0-9_]+)*$ ]] \
          || bad_usage "--models must be like resnet50,mobilenet_v2, not '$MODELS'"
        IFS=, read -r -a MODEL_LIST <<<"$MODELS" ;;
      --build) case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac ;;
      --out)
        case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
        [ -d "$(dirname "$OUT")" ] || bad_usage "--out: no directory $(dirname "$OUT")" ;;
    esac
  done
  INFERD="$BUILD/inferd"
}

# Brings $INFERD up to date: configures a Release build when $BUILD has none, warns
# when it is a Debug build (its numbers say little), rebuilds only the inferd target.
bench_build() {
  local type
  if [ "$NO_BUILD" = 1 ]; then
    [ -x "$INFERD" ] || die "--no-build: $INFERD does not exist"
  elif [ -f "$BUILD/CMakeCache.txt" ]; then
    type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
    case "$type" in
      Release|RelWithDebInfo|"") ;;
      *) echo "$BENCH_NAME: warning: $BUILD is a '$type' build; numbers from it say little" >&2 ;;
    esac
    echo "$BENCH_NAME: bringing $BUILD up to date" >&2
    cmake --build "$BUILD" -j2 --target inferd >&2 || die "building inferd in $BUILD failed"
  elif [ ! -e "$INFERD" ]; then
    command -v cmake >/dev/null || die "cmake not found: run scripts/install-deps.sh"
    echo "$BENCH_NAME: building inferd (Release) in $BUILD" >&2
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >&2 || die "configuring $BUILD failed"
    cmake --build "$BUILD" -j2 --target inferd >&2 || die "building inferd in $BUILD failed"
  fi
  [ -x "$INFERD" ] || die "$INFERD is missing or not executable after the build"
}

# Other work on these cores distorts every side (OpenMP teams spin on a shared core).
bench_load_warning() {
  local load
  load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
  if awk "BEGIN { exit !($load > 0.5) }"; then
    echo "$BENCH_NAME: warning: load average $load; other work is running, the numbers will be noisy" >&2
  fi
}

# Sets cpu (lscpu's model name) and commit (the checkout's short hash, with "+ local
# changes" when the tree differs from it) for the header of a results table. The
# committed results under bench/results/ do not count as local changes: every run
# rewrites one of them.
bench_describe() {
  cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
  if commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null); then
    git -C "$ROOT" diff --quiet HEAD -- . ':!bench/results' 2>/dev/null || commit="$commit + local changes"
  else
    commit="(no commit yet)"
  fi
}

# ---- scripts that run `inferd serve` (seed-experiment.sh, serve.sh) ----

# Sets up $work (a temporary directory), $pid (the server, see bench_serve_start) and
# $child (the measurement running now, see bench_run_child); on exit the two are
# stopped and $work removed. INT and TERM end the script (130, 143) instead of letting
# it go on with the next step.
bench_scaffold() {
  work=$(mktemp -d)
  pid=""
  child=""
  trap bench__cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

bench__cleanup() {
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null || true; wait "$child" 2>/dev/null || true; fi
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}

# bench_run_child OUT WHAT cmd...: cmd with stdout to OUT (- for stderr), in the
# background while the script waits for it, so that a signal is acted on at once
# rather than when cmd ends; dies naming WHAT when cmd fails.
bench_run_child() {
  local out=$1 what=$2
  shift 2
  if [ "$out" = - ]; then "$@" >&2 & else "$@" >"$out" & fi
  child=$!
  wait "$child" || die "$what failed (exit status $?)"
  child=""
}

BENCH_PING_TIMEOUT=60 # seconds; resnet152's server answers /ping after ~1.5 s here

# bench_serve_start WHAT LINE...: writes $work/config.properties (three free ports of
# 127.0.0.1, all bound at once so that they differ, then the LINEs), starts `inferd
# serve` on it in $work and waits until /ping answers 200; sets pid and PORT. Dies,
# naming WHAT, when the server exits first or does not answer within
# BENCH_PING_TIMEOUT seconds. BENCH_SERVE_LAUNCHED: when the server was launched
# (date +%s.%N), for timing its start-up.
bench_serve_start() {
  local what=$1 p1 p2 p3 deadline
  shift
  read -r p1 p2 p3 < <(/usr/bin/python3 -I -c 'import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))') || die "could not pick free ports on 127.0.0.1"
  {
    echo "inference_address=http://127.0.0.1:$p1"
    echo "management_address=http://127.0.0.1:$p2"
    echo "metrics_address=http://127.0.0.1:$p3"
    printf '%s\n' "$@"
  } >"$work/config.properties"
  BENCH_SERVE_LAUNCHED=$(date +%s.%N) # start-up is timed from here, not from the port picking
  (cd "$work" && exec "$INFERD" serve --ts-config config.properties --foreground --disable-token-auth) >"$work/serve.log" 2>&1 &
  pid=$!
  deadline=$((SECONDS + BENCH_PING_TIMEOUT))
  until curl -sf --max-time 2 "http://127.0.0.1:$p1/ping" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; die "inferd serve ($what) exited before /ping answered"; }
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 20 "$work/serve.log" >&2
      die "inferd serve ($what) did not answer /ping on port $p1 within $BENCH_PING_TIMEOUT s"
    fi
    sleep 0.02
  done
  PORT=$p1
}

bench_serve_stop() {
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}

# ---- scripts that measure the exported torchvision models (engine.sh, peers.sh,
# precision.sh). These also expect PY, TORCH_BENCH (bench/engine_torch.py), TMP (the
# model cache, bench/results/tmp) and RUN (this run's raw results under it).

# Makes the cache (ignored by git through its own .gitignore) and an empty RUN.
bench_workdirs() {
  mkdir -p "$TMP"
  [ -f "$TMP/.gitignore" ] || printf '# made by bench/engine.sh: cached models and raw results\n*\n' >"$TMP/.gitignore"
  rm -rf "$RUN"
  mkdir -p "$RUN"
}

# bench_export_model NAME: $TMP/NAME.onnx from the seeded torchvision NAME, remade
# when missing or older than engine_torch.py.
bench_export_model() {
  local m=$1 onnx="$TMP/$1.onnx"
  if [ -s "$onnx" ] && [ "$onnx" -nt "$TORCH_BENCH" ]; then
    return 0
  fi
  echo "$BENCH_NAME: exporting $m to ${onnx#"$ROOT"/}" >&2
  "$PY" "$TORCH_BENCH" --model "$m" --export-onnx "$onnx" >&2 || die "exporting $m failed"
}

# bench_run_logged OUT LOG WHAT cmd...: stdout to OUT, stderr to LOG; on failure a line
# naming WHAT and the log's tail, and the script exits 1.
bench_run_logged() {
  local out=$1 log=$2 what=$3; shift 3
  if ! "$@" >"$out" 2>"$log"; then
    echo "$BENCH_NAME: $what failed: $*" >&2
    tail -n 20 "$log" | sed 's/^/  | /' >&2
    exit 1
  fi
}
