# serve_lib.sh - shared by the tests/e2e/serve_*.sh tests: start the real `inferd serve`
# on 127.0.0.1 with free ports in a work directory, wait until /ping is 200, stop it.
# Source it; it defines:
#   serve_ports                  sets INFERENCE_PORT, MANAGEMENT_PORT, METRICS_PORT (free now)
#   free_ports N                 prints N ports of 127.0.0.1 free now
#   serve_config FILE LINE...    writes a config.properties: the three addresses on those
#                                ports, then each LINE (key=value)
#   serve_start WORK ARGS...     starts `inferd serve ARGS` in WORK (cwd: key_file.json
#                                lands there), log in WORK/server.log; sets SERVER_PID
#   serve_wait_ready [SECONDS [CURL_ARGS...]]  polls /ping until 200 (over
#                                $INFERENCE_SCHEME, http unless set; CURL_ARGS: --cacert) (default 120 s) or the server dies;
#                                every earlier answer must be 503 Unhealthy
#   serve_stop [SECONDS]         SIGTERM, waits (default 60 s), SIGKILL after; sets SERVER_STATUS
#   serve_wait_exit SECONDS WHAT the same wait, after a signal or --stop sent elsewhere
#   serve_keys WORK              sets INFERENCE_KEY, MANAGEMENT_KEY, API_KEY from key_file.json
#   check_json FILE COND NAME    prints "ok   NAME" when the Python condition COND holds for
#                                the JSON in FILE (as r), else calls `fail`
#   serve_jpeg NAME OUT          a photo of skimage's data folder as a JPEG
#   serve_resnet152_mar FIX DIR  resnet-152.mar from the fixtures' resnet152.onnx, into DIR
#   fail MESSAGE                 prints "FAIL: MESSAGE" and counts it in $failures
#   call NAME STATUS COND ARGS...  curl ARGS (body in $WORK/body; at most 120 s): the status must be
#                                STATUS and, when COND is not empty, the Python condition
#                                COND must hold for the JSON body (as r); else `fail`
#   serve_finish NAME WORK       stops the server (SIGTERM must exit 0), then exits: 1 with
#                                the server log's tail when anything failed, else 0
# The caller must `trap serve_cleanup EXIT` so that the server dies in every path, and
# exit non-zero when $failures is not 0 (serve_finish does both).

SERVER_PID=
SERVER_STATUS=
PING_BODY=$(mktemp)
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# free_ports N: N distinct ports of 127.0.0.1 that are free now (tests/e2e/free_ports.py:
# from INFERD_TEST_PORTS, "18600-18699", when it is set, in a random order; a message
# when too few are free).
free_ports() {
  /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/free_ports.py" "$1"
}

serve_ports() {
  set -- $(free_ports 3)
  [ $# -eq 3 ] || { echo "serve_ports: no 3 free ports" >&2; exit 1; }
  INFERENCE_PORT=$1 MANAGEMENT_PORT=$2 METRICS_PORT=$3
}

serve_config() {
  local file=$1
  shift
  {
    echo "inference_address=http://127.0.0.1:$INFERENCE_PORT"
    echo "management_address=http://127.0.0.1:$MANAGEMENT_PORT"
    echo "metrics_address=http://127.0.0.1:$METRICS_PORT"
    printf '%s\n' "$@"
  } >"$file"
}

serve_start() {
  local work=$1
  shift
  (cd "$work" && exec "$INFERD" serve "$@" >server.log 2>&1) &
  SERVER_PID=$!
}

# Also checks that /ping is truthful meanwhile: every answer before the first 200 must
# be 503 {"status": "Unhealthy"}; SAW_UNHEALTHY=1 when one was seen.
serve_wait_ready() {
  local limit=${1:-120} i code
  shift || true # the rest: curl's arguments for /ping (an https server's --cacert)
  SAW_UNHEALTHY=0
  for i in $(seq 1 $((limit * 20))); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "FAIL: the server exited before it was ready" >&2
      return 1
    fi
    code=$(curl -s --max-time 5 -o "$PING_BODY" -w '%{http_code}' "$@" \
      "${INFERENCE_SCHEME:-http}://127.0.0.1:$INFERENCE_PORT/ping") || code=000
    case $code in
    200) return 0 ;;
    503)
      grep -q '"Unhealthy"' "$PING_BODY" || { echo "FAIL: 503 /ping without Unhealthy" >&2; return 1; }
      SAW_UNHEALTHY=1 ;;
    000) ;; # not listening yet
    *) echo "FAIL: /ping answered $code while starting" >&2; return 1 ;;
    esac
    sleep 0.05
  done
  echo "FAIL: /ping not 200 after $limit s" >&2
  return 1
}

call() {
  local name=$1 want=$2 cond=$3 code
  shift 3
  code=$(curl -s --max-time 120 -o "$WORK/body" -w '%{http_code}' "$@") || code=000
  if [ "$code" != "$want" ]; then
    fail "$name: HTTP $code, want $want: $(head -c 400 "$WORK/body")"
  elif [ -n "$cond" ]; then
    check_json "$WORK/body" "$cond" "$name ($code)"
  else
    echo "ok   $name ($code)"
  fi
}

serve_finish() {
  local name=$1 work=$2
  serve_stop 60
  [ "$SERVER_STATUS" = 0 ] && echo "ok   SIGTERM: exit 0" || fail "SIGTERM: exit status $SERVER_STATUS"
  if [ "$failures" != 0 ]; then
    echo "$failures failure(s); server log:" >&2
    tail -30 "$work/server.log" >&2
    exit 1
  fi
  echo "$name: all passed"
  exit 0
}

serve_stop() {
  SERVER_STATUS=
  [ -n "$SERVER_PID" ] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  serve_wait_exit "${1:-60}" SIGTERM
}

# serve_wait_exit SECONDS WHAT: waits for the server to exit after WHAT (a signal, a
# --stop), SIGKILL after SECONDS (saying so); sets SERVER_STATUS, clears SERVER_PID.
serve_wait_exit() {
  local limit=$1 i
  for i in $(seq 1 $((limit * 10))); do
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "FAIL: the server did not exit within $limit s of $2; killing it" >&2
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  wait "$SERVER_PID" 2>/dev/null && SERVER_STATUS=0 || SERVER_STATUS=$?
  SERVER_PID=
}

serve_cleanup() {
  rm -f "$PING_BODY"
  if [ -n "$SERVER_PID" ]; then
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
}

# serve_jpeg NAME OUT: a photo of skimage's data folder (chelsea, coffee, ...) as a JPEG.
serve_jpeg() {
  /usr/bin/python3 -c '
import sys
from PIL import Image
Image.open("/usr/lib/python3/dist-packages/skimage/data/%s.png" % sys.argv[1]).convert("RGB").save(sys.argv[2], quality=90)
' "$1" "$2"
}

# serve_resnet152_mar FIXTURES_DIR MODEL_STORE: resnet-152.mar, made by `inferd archive`
# from the torchvision resnet152 export of tests/fixtures, with the ImageNet labels.
serve_resnet152_mar() {
  "$INFERD" archive --model-name resnet-152 --serialized-file "$1/resnet152.onnx" --handler image_classifier \
    --extra-files "$SRC/models/index_to_name.json" --export-path "$2" >/dev/null
}

serve_keys() {
  local file=$1/key_file.json
  INFERENCE_KEY=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["inference"]["key"])' "$file")
  MANAGEMENT_KEY=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["management"]["key"])' "$file")
  API_KEY=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["API"]["key"])' "$file")
}

check_json() {
  if "${INFERD_PYTHON:-/usr/bin/python3}" - "$1" "$2" <<'PY'; then echo "ok   $3"; else fail "$3: $(head -c 600 "$1")"; fi
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}
