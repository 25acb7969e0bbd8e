#!/usr/bin/env bash
# The test suite, as CI runs it (.ci/run calls exactly this):
#   1. Release build with warnings as errors, then every ctest test: unit tests
#      (cmocka), the model tests against PyTorch references made by tests/fixtures/,
#      the malformed-input tests of `inferd run`;
#   2. a build with AddressSanitizer + UndefinedBehaviorSanitizer running the unit tests
#      and the server end to end (requests, v2, management, start-up, TLS, downloads; tests/lsan-h2o.supp
#      names what h2o itself leaves at exit);
#   3. a build with ThreadSanitizer running the unit tests that start threads
#      (tests/tsan.supp: what the uninstrumented libgomp makes it see);
#   4. a clang libFuzzer build running each fuzz target briefly.
# Build trees: build/, build-asan/, build-tsan/, build-fuzz/. Needs scripts/install-deps.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${INFERD_JOBS:-2}

echo "== release build (-Werror) and all tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DINFERD_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure --timeout 900

echo "== AddressSanitizer + UBSan build, unit tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DINFERD_WERROR=ON -DINFERD_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan -L unit --output-on-failure
echo "== the server under ASan + UBSan"
ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$PWD/tests/lsan-h2o.supp \
  ctest --test-dir build-asan -R '^e2e_serve_(basic|v2|management|startup|tls|download)$' --output-on-failure

echo "== ThreadSanitizer build, threaded unit tests"
# ~45 s to build (-j1) and ~25 s to run on the 2-core dev machine. A report fails the test
# (TSan's exit status 66).
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DINFERD_WERROR=ON -DINFERD_TSAN=ON >/dev/null
cmake --build build-tsan -j"$jobs"
TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp second_deadlock_stack=1" \
  ctest --test-dir build-tsan -R '^unit_test_(sched|http|metrics|engine|topo)$' --output-on-failure

echo "== libFuzzer build (clang), short fuzz runs"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DINFERD_FUZZ=ON >/dev/null
cmake --build build-fuzz -j"$jobs"
ctest --test-dir build-fuzz -L fuzz --output-on-failure
