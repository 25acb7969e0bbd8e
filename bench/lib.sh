# shellcheck shell=bash
# bench/lib.sh: what every benchmark script does before it measures. Sourced, not run.
# Expects ROOT (the repository), BUILD (inferd's CMake build directory), INFERD
# ($BUILD/inferd), NO_BUILD (1: never run cmake) and a die() function of the caller.

# Brings $INFERD up to date: configures a Release build when $BUILD has none, warns
# when it is a Debug build (its numbers say little), rebuilds only the inferd target.
bench_build() {
  local me=$1 type
  if [ "$NO_BUILD" = 1 ]; then
    [ -x "$INFERD" ] || die "--no-build: $INFERD does not exist"
  elif [ -f "$BUILD/CMakeCache.txt" ]; then
    type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
    case "$type" in
      Release|RelWithDebInfo|"") ;;
      *) echo "$me: warning: $BUILD is a '$type' build; numbers from it say little" >&2 ;;
    esac
    echo "$me: bringing $BUILD up to date" >&2
    cmake --build "$BUILD" -j2 --target inferd >&2 || die "building inferd in $BUILD failed"
  elif [ ! -e "$INFERD" ]; then
    command -v cmake >/dev/null || die "cmake not found: run scripts/install-deps.sh"
    echo "$me: building inferd (Release) in $BUILD" >&2
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >&2 || die "configuring $BUILD failed"
    cmake --build "$BUILD" -j2 --target inferd >&2 || die "building inferd in $BUILD failed"
  fi
  [ -x "$INFERD" ] || die "$INFERD is missing or not executable after the build"
}

# Other work on these cores distorts every side (OpenMP teams spin on a shared core).
bench_load_warning() {
  local me=$1 load
  load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
  if awk "BEGIN { exit !($load > 0.5) }"; then
    echo "$me: warning: load average $load; other work is running, the numbers will be noisy" >&2
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
