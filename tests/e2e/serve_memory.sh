#!/usr/bin/env bash
# serve_memory.sh - a model or workers that do not fit in memory are refused with 507,
# and the server lives on.
#
# `inferd serve` runs in a memory cgroup of its own limited to 200 MB, as a container's
# or a systemd unit's MemoryMax= would limit it. Loading past the limit got the whole
# server killed by the cgroup's OOM killer, with every model it served. Now:
#   - registering resnet152 (230 MB of weights) answers 507 OutOfMemoryError naming the
#     memory left and the cgroup file that bounds it; /ping still answers 200;
#   - so does resnet152 in a .mar deflated as torch-model-archiver writes it, before its
#     .onnx is inflated into memory (inflating it got the server killed);
#   - MobileNetV2 (14 MB) registers with one worker and classifies a photo;
#   - MobileNetV2 again with batch_size 64 (its batch-64 scratch, about 300 MB, is more
#     than is left) answers 507 for its worker's scratch, and no model of that name stays;
#   - scaling the first MobileNetV2 to 60 workers (their scratch past the limit) answers
#     507 and leaves it at 1 worker, still serving; asynchronously (202 at once) the
#     refusal is in the server's log;
#   - MobileNetV2 with batch_size 16 registers with one worker; a second worker is
#     refused (507): the first, idle, will still take its batches' scratch;
#   - SIGTERM exits 0, and the cgroup saw no OOM kill.
# Needs root (to make the cgroup), as CI runs it; otherwise it is skipped.
#
#   serve_memory.sh INFERD SOURCE_DIR FIXTURES_DIR WORK_DIR
set -euo pipefail
INFERD=$1 SRC=$2 FIX=$3 WORK=$4
PY=${INFERD_PYTHON:-/usr/bin/python3}
. "$SRC/tests/e2e/serve_lib.sh"
cgroup=
cleanup() {
  serve_cleanup
  [ -n "$cgroup" ] && rmdir "$cgroup" 2>/dev/null || true
}
trap cleanup EXIT
rm -rf "$WORK"
mkdir -p "$WORK/store"

if [ "$(id -u)" != 0 ]; then
  echo "skip: making a memory cgroup needs root"
  exit 77
fi
LIMIT=$((200 << 20))
if [ -w /sys/fs/cgroup/memory/memory.limit_in_bytes ] 2>/dev/null; then # cgroup v1
  cgroup=/sys/fs/cgroup/memory/inferd_memory_test_$$
  mkdir "$cgroup" && echo "$LIMIT" >"$cgroup/memory.limit_in_bytes"
  limit_file=$cgroup/memory.limit_in_bytes
elif grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then # cgroup v2
  cgroup=/sys/fs/cgroup/inferd_memory_test_$$
  mkdir "$cgroup" && echo "$LIMIT" >"$cgroup/memory.max"
  limit_file=$cgroup/memory.max
else
  echo "FAIL: no memory cgroup can be made here (as root it must be)"
  exit 1
fi
oom_kills() { # the cgroup's OOM kills so far
  if [ -f "$cgroup/memory.oom_control" ]; then awk '/^oom_kill / {print $2}' "$cgroup/memory.oom_control"
  else awk '/^oom_kill / {print $2}' "$cgroup/memory.events"; fi
}

ln -s "$FIX/resnet152.onnx" "$WORK/store/resnet152.onnx"
"$PY" - "$FIX/resnet152.onnx" "$WORK/store/resnet152-deflated.mar" <<'EOF'
import json, sys, zipfile
manifest = {"runtime": "python", "archiverVersion": "0.12.0",
            "model": {"modelName": "resnet152", "serializedFile": "resnet152.onnx",
                      "handler": "image_classifier", "modelVersion": "1.0"}}
with zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
    z.write(sys.argv[1], "resnet152.onnx")
    z.writestr("MAR-INF/MANIFEST.json", json.dumps(manifest))
EOF
ln -s "$SRC/models/mobilenet_v2_imagenet.onnx" "$WORK/store/mobilenet_v2.onnx"
serve_ports
serve_config "$WORK/config.properties" "disable_token_authorization=true" "enable_model_api=true" \
  "model_store=$WORK/store" "default_workers_per_model=1"
(cd "$WORK" && echo $BASHPID >"$cgroup/cgroup.procs" &&
  exec "$INFERD" serve --ts-config "$WORK/config.properties" --foreground >server.log 2>&1) &
SERVER_PID=$!
serve_wait_ready 60 || { fail "the server did not start"; serve_finish serve_memory "$WORK"; }
M=http://127.0.0.1:$MANAGEMENT_PORT
I=http://127.0.0.1:$INFERENCE_PORT

call "resnet152 (230 MB) in 200 MB" 507 \
  "r['code'] == 507 and r['type'] == 'OutOfMemoryError' and 'its weights need' in r['message'] and '$limit_file' in r['message']" \
  -X POST "$M/models?url=resnet152.onnx&initial_workers=1&synchronous=true"
call "ping after the refusal" 200 "r['status'] == 'Healthy'" "$I/ping"
call "resnet152 as a deflated .mar: refused before it is inflated" 507 \
  "r['code'] == 507 and 'inflated from the archive' in r['message'] and '$limit_file' in r['message']" \
  -X POST "$M/models?url=resnet152-deflated.mar&initial_workers=1&synchronous=true"
call "ping after that refusal" 200 "r['status'] == 'Healthy'" "$I/ping"

call "mobilenet_v2 registers" 200 "" -X POST "$M/models?url=mobilenet_v2.onnx&model_name=mnv2&initial_workers=1"
serve_jpeg chelsea "$WORK/cat.jpg"
call "mobilenet_v2 classifies" 200 "len(r) == 5" -T "$WORK/cat.jpg" "$I/predictions/mnv2"

call "batch_size 64: its worker's scratch" 507 \
  "r['code'] == 507 and \"workers' scratch need\" in r['message']" \
  -X POST "$M/models?url=mobilenet_v2.onnx&model_name=mnv2big&batch_size=64&initial_workers=1&synchronous=true"
call "the refused model is not registered" 404 "" "$M/models/mnv2big"

call "60 workers: the new workers' scratch" 507 \
  "r['code'] == 507 and \"new workers' scratch need\" in r['message']" \
  -X PUT "$M/models/mnv2?min_worker=60&synchronous=true"
call "60 workers, asynchronously: answered before the check" 202 "" -X PUT "$M/models/mnv2?min_worker=60"
for _ in $(seq 50); do grep -q "scale to 60 workers (answered 202) failed" "$WORK/server.log" && break; sleep 0.2; done
grep -q "scale to 60 workers (answered 202) failed: model mnv2: the new workers' scratch need" "$WORK/server.log" &&
  echo "ok   the asynchronous scale's refusal is logged" || fail "the asynchronous scale's refusal left no trace"
call "still 1 worker" 200 "r[0]['minWorkers'] == 1 and len(r[0]['workers']) == 1" "$M/models/mnv2"
call "still classifies" 200 "len(r) == 5" -T "$WORK/cat.jpg" "$I/predictions/mnv2"

# An idle worker has not taken the scratch of its full batches yet (its arena is mapped
# for them as it starts, its pages taken by its first batch of batch_size): a second worker of batch_size 16 (about 90 MB each)
# passed the check on the memory left, and the two under load got the server killed.
call "batch_size 16, one worker" 200 "" \
  -X POST "$M/models?url=mobilenet_v2.onnx&model_name=mnv16&batch_size=16&initial_workers=1&synchronous=true"
call "a second one: the first's full batches counted" 507 \
  "r['code'] == 507 and \"new workers' scratch need\" in r['message'] and 'will still take' in r['message']" \
  -X PUT "$M/models/mnv16?min_worker=2&synchronous=true"
call "batch_size 16: still 1 worker" 200 "r[0]['minWorkers'] == 1 and len(r[0]['workers']) == 1" "$M/models/mnv16"

kills=$(oom_kills)
[ "${kills:-0}" = 0 ] && echo "ok   no OOM kill in the cgroup" || fail "the cgroup's OOM killer ran $kills time(s)"
serve_finish serve_memory "$WORK"
