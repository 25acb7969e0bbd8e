#!/usr/bin/env bash
# serve_signals.sh - starting and stopping `inferd serve` as TorchServe users do:
#   - `serve --stop` with no server running says so and exits 0 (torchserve --stop does);
#     with a stale pid file naming another program's live process it leaves that
#     process alone, removes the file and exits 0, also when that program is named
#     inferd (a pid reused by `inferd bench`, say): only the server that holds the pid
#     file's lock is signalled;
#   - `serve --stop` of a --start server whose parent never reaps it (a container's
#     PID 1 that is no init) returns as soon as the server has exited, not after its
#     3-minute bound (the zombie keeps its pid alive);
#   - `serve --start --foreground` (a container's entry point) stays in the foreground
#     and writes the pid file: the process the shell started is the server, and
#     `serve --stop` stops it (exit 0, pid file gone);
#   - SIGHUP drains and exits 0, as SIGTERM does; under nohup (SIGHUP ignored) it changes
#     nothing: a SIGTERM sent after it is the first signal the server takes;
#   - a register waiting behind another on the management thread when the drain starts
#     is refused (503) and its model never loaded;
#   - predictions taken in before the drain but still waiting for their image decode
#     are answered (200), as queued ones are;
#   - a second signal during the drain exits at once with 128 + signal: resnet-152 with
#     batchSize 64 and 64 clients (all 64 received: the drain has at least one long batch
#     to wait for), SIGTERM starts the drain (its log line), and SIGINT then ends the
#     server (130) with requests still unanswered, removing key_file.json (token auth is
#     on there). Should every request be answered before the server exits (the drain
#     outran the second signal), the attempt does not count: again, at most 3 times.
# Nothing here waits a fixed time: each step waits (bounded) for what the server logs or
# reports.
#
#   serve_signals.sh INFERD SOURCE_DIR FIXTURES_DIR WORK_DIR
set -euo pipefail
INFERD=$1 SRC=$2 FIX=$3 WORK=$4
. "$SRC/tests/e2e/serve_lib.sh"
# on every way out: the server, a server that went to the background after all (--stop
# by the pid file), the stranger process
trap 'serve_cleanup; "$INFERD" serve --stop >/dev/null 2>&1 || true
      [ -z "${STRANGER:-}" ] || kill "$STRANGER" 2>/dev/null || true' EXIT
export INFERD_PID_FILE="$WORK/inferd.pid"
rm -rf "$WORK"
mkdir -p "$WORK/model_store"

# ---- --stop with nothing running, and with a stale pid file ----
status=0
"$INFERD" serve --stop >"$WORK/stop.out" 2>&1 || status=$?
[ "$status" = 0 ] && grep -q "not currently running" "$WORK/stop.out" &&
  echo "ok   --stop with no server: exit 0, $(cat "$WORK/stop.out")" ||
  fail "--stop with no server: exit $status, $(cat "$WORK/stop.out")"
sleep 3600 & # alive until killed below, however slow the steps in between
STRANGER=$!
echo "$STRANGER" >"$INFERD_PID_FILE"
status=0
"$INFERD" serve --stop >"$WORK/stop.out" 2>&1 || status=$?
if [ "$status" = 0 ] && grep -q "is not an inferd server" "$WORK/stop.out" && kill -0 "$STRANGER" 2>/dev/null &&
  [ ! -e "$INFERD_PID_FILE" ]; then
  echo "ok   --stop leaves a stale pid file's process alone and removes the file"
else
  fail "--stop with a stale pid file: exit $status, $(cat "$WORK/stop.out"); the process $(kill -0 "$STRANGER" 2>/dev/null && echo lives || echo was killed)"
fi
kill "$STRANGER" && wait "$STRANGER" 2>/dev/null || true
mkdir -p "$WORK/bin"
cp "$(command -v sleep)" "$WORK/bin/inferd" # another process named inferd, on a reused pid
"$WORK/bin/inferd" 3600 &
STRANGER=$!
echo "$STRANGER" >"$INFERD_PID_FILE"
status=0
"$INFERD" serve --stop >"$WORK/stop.out" 2>&1 || status=$?
if [ "$status" = 0 ] && kill -0 "$STRANGER" 2>/dev/null && [ ! -e "$INFERD_PID_FILE" ]; then
  echo "ok   --stop leaves a stale pid file's process named inferd alone and removes the file"
else
  fail "--stop with a stale pid file naming a process called inferd: exit $status, $(cat "$WORK/stop.out"); the process $(kill -0 "$STRANGER" 2>/dev/null && echo lives || echo was killed)"
fi
kill "$STRANGER" && wait "$STRANGER" 2>/dev/null || true
STRANGER=

# ---- --stop of a server whose parent does not reap it ----
serve_ports
serve_config "$WORK/config.properties" "number_of_netty_threads=1"
(cd "$WORK" && exec /usr/bin/python3 -c '
import ctypes, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the --start server is ours, never reaped
subprocess.run(sys.argv[1:])
time.sleep(3600)' "$INFERD" serve --ts-config "$WORK/config.properties" --start --disable-token-auth >"$WORK/reaper.log" 2>&1) &
STRANGER=$!
for i in $(seq 1 600); do [ -s "$INFERD_PID_FILE" ] && break; sleep 0.1; done
start=$(date +%s)
status=0
timeout 60 "$INFERD" serve --stop >"$WORK/stop.out" 2>&1 || status=$?
took=$(($(date +%s) - start))
[ "$status" = 0 ] && [ "$took" -lt 30 ] && grep -q "has stopped" "$WORK/stop.out" &&
  echo "ok   --stop of an unreaped server: exit 0 after $took s" ||
  fail "--stop of an unreaped server: exit $status after $took s, $(cat "$WORK/stop.out"; cat "$WORK/reaper.log")"
kill "$STRANGER" && wait "$STRANGER" 2>/dev/null || true
STRANGER=

# ---- --start --foreground: the foreground process is the server, --stop stops it ----
serve_ports
serve_config "$WORK/config.properties" \
  "model_store=$SRC/models" \
  "load_models=mobilenet=mobilenet_v2_imagenet.onnx" \
  "number_of_netty_threads=1"
serve_start "$WORK" --ts-config "$WORK/config.properties" --start --foreground --disable-token-auth
serve_wait_ready 120
kill -0 "$SERVER_PID" 2>/dev/null && [ "$(cat "$INFERD_PID_FILE" 2>/dev/null)" = "$SERVER_PID" ] &&
  echo "ok   --start --foreground: pid $SERVER_PID stays in the foreground and is in the pid file" ||
  fail "--start --foreground: the pid file says '$(cat "$INFERD_PID_FILE" 2>/dev/null)', the foreground pid was $SERVER_PID ($(kill -0 "$SERVER_PID" 2>/dev/null && echo alive || echo gone))"
status=0
"$INFERD" serve --stop >"$WORK/stop.out" 2>&1 || status=$?
[ "$status" = 0 ] || fail "--stop of the foreground server: exit $status, $(cat "$WORK/stop.out")"
serve_wait_exit 60 "--stop"
[ "$SERVER_STATUS" = 0 ] && [ ! -e "$INFERD_PID_FILE" ] &&
  echo "ok   --stop ended it: exit 0, pid file removed" ||
  fail "after --stop: server exit $SERVER_STATUS, pid file $([ -e "$INFERD_PID_FILE" ] && echo left || echo removed)"

# ---- SIGHUP drains like SIGTERM ----
serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground --disable-token-auth
serve_wait_ready 120
kill -HUP "$SERVER_PID" 2>/dev/null || true
serve_wait_exit 60 SIGHUP
[ "$SERVER_STATUS" = 0 ] && grep -q "SIGHUP: draining" "$WORK/server.log" &&
  echo "ok   SIGHUP: drained, exit 0" || fail "SIGHUP: exit $SERVER_STATUS; log: $(tail -3 "$WORK/server.log")"

# ---- under nohup (SIGHUP ignored) a SIGHUP changes nothing ----
(cd "$WORK" && exec nohup "$INFERD" serve --ts-config config.properties --foreground --disable-token-auth \
  >server.log 2>&1) &
SERVER_PID=$!
serve_wait_ready 120
kill -HUP "$SERVER_PID" 2>/dev/null || true
code=$(curl -s --max-time 60 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$INFERENCE_PORT/ping") || code=000
# A SIGHUP the server took would be taken before the SIGTERM sent after it (sigwait
# returns the lowest pending signal first): it would drain on SIGHUP and exit 143 on
# SIGTERM. So the SIGTERM must be the first and only signal the log shows, exit 0.
kill -TERM "$SERVER_PID" 2>/dev/null || true
serve_wait_exit 60 SIGTERM
[ "$code" = 200 ] && [ "$SERVER_STATUS" = 0 ] && grep -q "SIGTERM: draining" "$WORK/server.log" &&
  ! grep -q "SIGHUP" "$WORK/server.log" &&
  echo "ok   nohup: SIGHUP ignored, still serving; SIGTERM after it is the first signal taken" ||
  fail "nohup: after SIGHUP /ping $code, after SIGTERM exit $SERVER_STATUS; log: $(tail -3 "$WORK/server.log")"

# ---- a second signal ends the drain ----
serve_jpeg chelsea "$WORK/cat.jpg"
serve_resnet152_mar "$FIX" "$WORK/model_store"
serve_config "$WORK/config.properties" \
  "model_store=model_store" \
  "load_models=resnet-152.mar" \
  'models={"resnet-152": {"1.0": {"marName": "resnet-152.mar", "batchSize": 64, "maxBatchDelay": 2000, "responseTimeout": 120}}}' \
  "default_workers_per_model=1" \
  "number_of_netty_threads=1"
# log_wait PATTERN SECONDS: until the server log has a line matching PATTERN (bounded).
log_wait() {
  local i
  for i in $(seq 1 $(($2 * 20))); do
    grep -q "$1" "$WORK/server.log" && return 0
    sleep 0.05
  done
  return 1
}
# received: HTTP inference requests the server has taken in (decoded, about to be queued).
received() {
  curl -s --max-time 60 "http://127.0.0.1:$METRICS_PORT/metrics" |
    sed -n 's/^ts_inference_requests_total{[^}]*} \([0-9]*\)$/\1/p'
}
counted=0 failed_before=$failures
for attempt in 1 2 3; do
  serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground
  serve_wait_ready 180 || { fail "resnet-152 server not ready"; break; }
  serve_keys "$WORK"
  clients=()
  rm -f "$WORK"/client.*
  for i in $(seq 1 64); do
    curl -s -o /dev/null -w '%{http_code}\n' --max-time 300 -H "Authorization: Bearer $INFERENCE_KEY" -T "$WORK/cat.jpg" \
      "http://127.0.0.1:$INFERENCE_PORT/predictions/resnet-152" >"$WORK/client.$i" &
    clients+=($!)
  done
  # all 64 taken in: one batch runs, the rest wait for it (the drain must answer them)
  for i in $(seq 1 1200); do
    [ "$(received)" = 64 ] && break
    sleep 0.1
  done
  [ "$(received)" = 64 ] || fail "attempt $attempt: the server did not take in the 64 requests within 120 s"
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  log_wait "SIGTERM: draining" 60 || fail "attempt $attempt: no 'SIGTERM: draining' in the log within 60 s"
  kill -INT "$SERVER_PID" 2>/dev/null || true
  serve_wait_exit 60 "SIGTERM and SIGINT"
  for pid in "${clients[@]}"; do wait "$pid" || true; done
  # no final answer (000, or 100 after 100-continue): the server was gone first
  unanswered=$(cat "$WORK"/client.* | grep -cvE '^[2-5][0-9][0-9]$' || true)
  [ "$failures" = "$failed_before" ] || break
  if [ "$unanswered" = 0 ]; then
    echo "     attempt $attempt does not count: every request was answered before the server exited (exit $SERVER_STATUS)"
    continue
  fi
  counted=1
  [ "$SERVER_STATUS" = 130 ] && grep -q "SIGINT again: exiting" "$WORK/server.log" && [ ! -e "$WORK/key_file.json" ] &&
    echo "ok   a second signal during the drain: exit 130 with $unanswered of 64 requests unanswered, key file removed" ||
    fail "SIGTERM then SIGINT during a long batch: exit $SERVER_STATUS, key file $([ -e "$WORK/key_file.json" ] && echo left || echo removed); log: $(tail -3 "$WORK/server.log")"
  break
done
[ "$counted" = 1 ] || [ "$failures" != "$failed_before" ] ||
  fail "3 attempts: the server answered every request before it exited; a second signal never ended a drain"

# ---- a register queued when the drain starts is refused, not loaded ----
# One register loads resnet-152 (a second or more); a second register waits behind it on
# the management thread; SIGTERM then. The queued one must get 503 and never load (a
# drain that loaded it would only delay the exit). Should the first register end and the
# second start loading before the SIGTERM (the log says so), the attempt does not count.
serve_config "$WORK/config.properties" "model_store=model_store" "enable_model_api=true" "number_of_netty_threads=2"
counted=0 failed_before=$failures
for attempt in 1 2 3; do
  rm -f "$WORK/server.log"
  serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground --disable-token-auth
  serve_wait_ready 60 || { fail "the server without models is not ready"; break; }
  M="http://127.0.0.1:$MANAGEMENT_PORT"
  curl -s -o /dev/null -w '%{http_code}\n' --max-time 300 -X POST \
    "$M/models?url=resnet-152.mar&model_name=first&initial_workers=1&synchronous=true" >"$WORK/first.code" &
  first=$!
  log_wait "loading resnet-152.mar as model first" 60 || fail "attempt $attempt: the first register never started loading"
  curl -s -o "$WORK/queued.body" -w '%{http_code}\n' --max-time 300 -X POST \
    "$M/models?url=resnet-152.mar&model_name=queued&initial_workers=1&synchronous=true" >"$WORK/queued.code" &
  queued=$!
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$first" "$queued" || true
  serve_wait_exit 120 SIGTERM
  [ "$failures" = "$failed_before" ] || break
  if sed -n '/loading resnet-152.mar as model queued/,$p' "$WORK/server.log" | grep -q "SIGTERM: draining"; then
    echo "     attempt $attempt does not count: the queued register started before the SIGTERM"
    continue
  fi
  counted=1
  [ "$(cat "$WORK/queued.code")" = 503 ] && grep -q "shutting down" "$WORK/queued.body" &&
    ! grep -q "as model queued" "$WORK/server.log" && [ "$SERVER_STATUS" = 0 ] &&
    echo "ok   a register queued when the drain began: 503, never loaded; exit 0" ||
    fail "a register queued when the drain began: HTTP $(cat "$WORK/queued.code") $(head -c 200 "$WORK/queued.body"); loaded: $(grep -c "as model queued" "$WORK/server.log"); exit $SERVER_STATUS"
  break
done
[ "$counted" = 1 ] || [ "$failures" != "$failed_before" ] ||
  fail "3 attempts: the queued register always started before the SIGTERM"

# ---- predictions still waiting for their image decode when the drain starts ----
# They were taken in before the signal: the drain answers them (DESIGN: finish queued
# work), as it does those in the scheduler's queue. One HTTP thread, so one
# preprocessing thread, and 4 JPEGs of 120 megapixels (about half a second each to
# decode): SIGTERM as soon as the first is decoded and queued (the metric counts it
# then), while the other three wait behind it for the decoder. Should all four be
# decoded before the signal (the log's drain line comes after the 4th count), the
# attempt does not count.
/usr/bin/python3 - "$WORK/huge.jpg" <<'PY'
import sys
import numpy as np
from PIL import Image
x = np.linspace(0, 255, 12000, dtype=np.float32)[None, :]
y = np.linspace(0, 255, 10000, dtype=np.float32)[:, None]
Image.fromarray(np.stack([x + 0 * y, 0 * x + y, (x + y) / 2], axis=2).astype(np.uint8)).save(sys.argv[1], quality=90)
PY
serve_config "$WORK/config.properties" "model_store=$SRC/models" "load_models=mobilenet=mobilenet_v2_imagenet.onnx" \
  "number_of_netty_threads=1"
counted=0 failed_before=$failures
for attempt in 1 2 3; do
  rm -f "$WORK/server.log" "$WORK"/huge.*.code
  serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground --disable-token-auth
  serve_wait_ready 60 || { fail "the MobileNetV2 server is not ready"; break; }
  clients=()
  for i in 1 2 3 4; do
    curl -s -o "$WORK/huge.$i.body" -w '%{http_code}\n' --max-time 120 -T "$WORK/huge.jpg" \
      "http://127.0.0.1:$INFERENCE_PORT/predictions/mobilenet" >"$WORK/huge.$i.code" &
    clients+=($!)
  done
  for i in $(seq 1 600); do
    taken=$(received)
    [ "${taken:-0}" -ge 1 ] && break
    sleep 0.05
  done
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  for pid in "${clients[@]}"; do wait "$pid" || true; done
  serve_wait_exit 120 SIGTERM
  [ "$failures" = "$failed_before" ] || break
  if [ "${taken:-0}" -ge 4 ]; then
    echo "     attempt $attempt does not count: all 4 images were decoded before the SIGTERM"
    continue
  fi
  counted=1
  codes=$(cat "$WORK"/huge.*.code | tr '\n' ' ')
  [ "$codes" = "200 200 200 200 " ] && [ "$SERVER_STATUS" = 0 ] &&
    echo "ok   $((4 - ${taken:-0})) predictions waiting for their decode at SIGTERM answered 200; exit 0" ||
    fail "predictions waiting for their decode at SIGTERM ($taken of 4 decoded): HTTP $codes$(grep -h -m1 message "$WORK"/huge.*.body | head -1); exit $SERVER_STATUS"
  break
done
[ "$counted" = 1 ] || [ "$failures" != "$failed_before" ] ||
  fail "3 attempts: all 4 images were always decoded before the SIGTERM"

if [ "$failures" != 0 ]; then
  echo "$failures failure(s); server log:" >&2
  tail -30 "$WORK/server.log" >&2
  exit 1
fi
echo "serve_signals: all passed"
