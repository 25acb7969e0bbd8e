#!/usr/bin/env bash
# serve_signals.sh - starting and stopping `inferd serve` as TorchServe users do:
#   - `serve --stop` with no server running says so and exits 0 (torchserve --stop does);
#     with a stale pid file naming another program's live process it leaves that
#     process alone, removes the file and exits 0;
#   - `serve --start --foreground` (a container's entry point) stays in the foreground
#     and writes the pid file: the process the shell started is the server, and
#     `serve --stop` stops it (exit 0, pid file gone);
#   - SIGHUP drains and exits 0, as SIGTERM does; under nohup (SIGHUP ignored) it changes
#     nothing;
#   - a second signal during the drain exits at once with 128 + signal: resnet-152 with
#     batchSize 64 and 64 clients runs one batch of several seconds, SIGTERM starts the
#     drain that waits for it, and SIGINT then ends the server (130) with the batch
#     still running, removing key_file.json (token auth is on there).
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
sleep 60 &
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
sleep 0.5
code=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$INFERENCE_PORT/ping") || code=000
[ "$code" = 200 ] && kill -0 "$SERVER_PID" 2>/dev/null && ! grep -q "SIGHUP" "$WORK/server.log" &&
  echo "ok   nohup: SIGHUP ignored, still serving" || fail "nohup: after SIGHUP /ping $code; log: $(tail -3 "$WORK/server.log")"
kill -TERM "$SERVER_PID" 2>/dev/null || true
serve_wait_exit 60 SIGTERM
[ "$SERVER_STATUS" = 0 ] || fail "nohup: SIGTERM then exit $SERVER_STATUS"

# ---- a second signal ends the drain ----
serve_jpeg chelsea "$WORK/cat.jpg"
serve_resnet152_mar "$FIX" "$WORK/model_store"
serve_config "$WORK/config.properties" \
  "model_store=model_store" \
  "load_models=resnet-152.mar" \
  'models={"resnet-152": {"1.0": {"marName": "resnet-152.mar", "batchSize": 64, "maxBatchDelay": 2000, "responseTimeout": 120}}}' \
  "default_workers_per_model=1" \
  "number_of_netty_threads=1"
serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground
serve_wait_ready 180
serve_keys "$WORK"
clients=()
for i in $(seq 1 64); do
  curl -s -o /dev/null --max-time 100 -H "Authorization: Bearer $INFERENCE_KEY" -T "$WORK/cat.jpg" \
    "http://127.0.0.1:$INFERENCE_PORT/predictions/resnet-152" &
  clients+=($!)
done
sleep 1 # all 64 queued: the worker runs them as one batch (several seconds at 2 threads)
kill -TERM "$SERVER_PID" 2>/dev/null || true
sleep 0.3
kill -INT "$SERVER_PID" 2>/dev/null || true
serve_wait_exit 10 "SIGTERM and SIGINT"
for pid in "${clients[@]}"; do wait "$pid" || true; done
[ "$SERVER_STATUS" = 130 ] && grep -q "SIGINT again: exiting" "$WORK/server.log" && [ ! -e "$WORK/key_file.json" ] &&
  echo "ok   a second signal during the drain: exit 130 at once, key file removed" ||
  fail "SIGTERM then SIGINT during a long batch: exit $SERVER_STATUS, key file $([ -e "$WORK/key_file.json" ] && echo left || echo removed); log: $(tail -3 "$WORK/server.log")"

if [ "$failures" != 0 ]; then
  echo "$failures failure(s); server log:" >&2
  tail -30 "$WORK/server.log" >&2
  exit 1
fi
echo "serve_signals: all passed"
