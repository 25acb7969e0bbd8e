#!/usr/bin/env bash
# systemd_test.sh - deploy/systemd/inferd.service, with its paths pointed at this build
# and a work directory:
#   - `systemd-analyze verify` accepts it without a word (an unknown key or a missing
#     binary is reported there);
#   - its WorkingDirectory, where key_file.json goes, is its StateDirectory: systemd
#     makes it before the start, owned by User= and writable under ProtectSystem=strict
#     (a ReadWritePaths= or WorkingDirectory= that does not exist fails the start, and
#     one made by root is not the user's to write);
#   - its ExecStart command line, run in its WorkingDirectory, serves: /ping 200 and a
#     prediction of the photo, key_file.json written there, private;
#   - its KillSignal (what `systemctl stop` sends) drains and exits 0 well within
#     TimeoutStopSec.
# (This machine's systemd does not run services here: the command line is run as the
# unit would run it.)
#
#   systemd_test.sh INFERD SOURCE_DIR WORK_DIR
set -euo pipefail
INFERD=$(realpath "$1") SRC=$(realpath "$2") WORK=$3
rm -rf "$WORK"
mkdir -p "$WORK"
WORK=$(realpath "$WORK")
. "$SRC/tests/e2e/serve_lib.sh"
trap serve_cleanup EXIT

unit=$WORK/inferd.service
sed -e "s|/usr/local/bin/inferd|$INFERD|" -e "s|/etc/inferd/config.properties|$WORK/config.properties|" \
  -e "s|/var/lib/inferd|$WORK|g" "$SRC/deploy/systemd/inferd.service" >"$unit"
if out=$(systemd-analyze verify "$unit" 2>&1) && [ -z "$out" ]; then
  echo "ok   systemd-analyze verify: no complaint"
else
  fail "systemd-analyze verify: $out"
fi

key() { sed -n "s/^$1=//p" "$unit"; }
shipped() { sed -n "s/^$1=//p" "$SRC/deploy/systemd/inferd.service"; }
state=$(shipped StateDirectory) workdir=$(shipped WorkingDirectory)
if [ -n "$state" ] && [ "$workdir" = "/var/lib/$state" ] && [ "$(shipped ProtectSystem)" = strict ]; then
  echo "ok   WorkingDirectory $workdir is the StateDirectory: made by systemd for User=$(shipped User)"
else
  fail "WorkingDirectory '$workdir' is not the unit's StateDirectory ('$state'): nothing makes it for User="
fi
serve_ports
serve_config "$WORK/config.properties" "model_store=$SRC/models" \
  "load_models=mobilenet=mobilenet_v2_imagenet.onnx" "default_workers_per_model=1"
read -r -a exec_start <<<"$(key ExecStart)"
(cd "$(key WorkingDirectory)" && exec "${exec_start[@]}" >server.log 2>&1) &
SERVER_PID=$!
serve_wait_ready 120 || { fail "ExecStart did not serve"; serve_finish systemd_test "$WORK"; }
echo "ok   ExecStart (${exec_start[*]:1}) serves: /ping 200"
[ "$(stat -c %a "$WORK/key_file.json" 2>/dev/null)" = 600 ] &&
  echo "ok   key_file.json in the WorkingDirectory, mode 600" || fail "no private key_file.json in $WORK"
serve_keys "$WORK"
serve_jpeg chelsea "$WORK/cat.jpg"
call "a prediction" 200 "'Egyptian cat' in r" -H "Authorization: Bearer $INFERENCE_KEY" -T "$WORK/cat.jpg" \
  "http://127.0.0.1:$INFERENCE_PORT/predictions/mobilenet"

signal=$(key KillSignal) limit=$(key TimeoutStopSec)
kill -s "${signal#SIG}" "$SERVER_PID"
serve_wait_exit "$limit" "$signal"
[ "$SERVER_STATUS" = 0 ] && echo "ok   $signal (KillSignal): exit 0 within TimeoutStopSec=$limit" ||
  fail "$signal: exit status $SERVER_STATUS"
if [ "$failures" != 0 ]; then
  tail -20 "$WORK/server.log" >&2
  exit 1
fi
echo "systemd_test: all passed"
