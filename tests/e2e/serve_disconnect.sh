#!/usr/bin/env bash
# serve_disconnect.sh - a client that gives up does not keep the model busy: its request
# is cancelled (skipped if no batch took it yet) and the server answers 499, which nobody
# reads, so that the connection is closed.
#
# resnet-152.mar with batchSize 1 and one worker: 60 clients post the photo at once over
# HTTP/1.1, then again over HTTP/2, and each gives up after 0.5 s (curl --max-time). A worker runs one image in
# tens of milliseconds here, so most of the 60 are still queued when their client leaves.
# Then one more request, which must be 200 with 5 labels: the queue is first-in first-out
# with one worker, so once it is answered every earlier request has run or been skipped.
# What ran is the server's own account (/metrics counts a request once its batch has
# ended), not a clock:
#   - fewer than half of the 60 ran (all 60 did while h2o could not see HTTP/1 clients
#     leave; half leaves room for a machine 3x faster than this one);
#   - every one that did not run was answered 499 (inferd_requests_total{code="499"}).
#
#   serve_disconnect.sh INFERD SOURCE_DIR FIXTURES_DIR WORK_DIR
set -euo pipefail
INFERD=$1 SRC=$2 FIX=$3 WORK=$4
. "$SRC/tests/e2e/serve_lib.sh"
trap serve_cleanup EXIT
rm -rf "$WORK"
mkdir -p "$WORK/model_store"
PY=${INFERD_PYTHON:-/usr/bin/python3}
N=60

serve_jpeg chelsea "$WORK/cat.jpg"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
serve_resnet152_mar "$FIX" "$WORK/model_store"

# metric PREFIX [LABEL]: the value of the resnet-152 series that starts with PREFIX (and
# holds LABEL), 0 when there is none yet
metric() {
  curl -s --max-time 60 "http://127.0.0.1:$METRICS_PORT/metrics" |
    awk -v want="$1" -v label="${2:-}" 'index($0, want) == 1 && index($0, label) && index($0, "model_name=\"resnet-152\"") {
      v = $NF } END { print v + 0 }'
}
ran() { metric 'inferd_inference_latency_milliseconds_count{'; }
answered_499() { metric 'inferd_requests_total{' 'code="499"'; }

run_case() { # run_case TIMEOUT_S CURL_PROTOCOL_FLAG [https]
  local timeout=$1 protocol=$2 scheme=${3:-http} i tls=()
  serve_ports
  if [ "$scheme" = https ]; then # the inference API over TLS, with a certificate made here
    tls=(--cacert "$WORK/cert.pem")
    protocol="$protocol over TLS"
  fi
  serve_config "$WORK/config.properties" \
    "model_store=model_store" \
    "load_models=resnet-152.mar" \
    "models={\"resnet-152\": {\"1.0\": {\"marName\": \"resnet-152.mar\", \"batchSize\": 1, \"responseTimeout\": $timeout}}}" \
    "default_workers_per_model=1" \
    "job_queue_size=100" \
    "max_request_size=67108864" \
    "inference_address=$scheme://127.0.0.1:$INFERENCE_PORT" \
    "certificate_file=$WORK/cert.pem" "private_key_file=$WORK/key.pem"
  serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground --disable-token-auth
  INFERENCE_SCHEME=$scheme serve_wait_ready 180 "${tls[@]}"
  local url="$scheme://127.0.0.1:$INFERENCE_PORT/predictions/resnet-152"
  call "$protocol: warm-up request" 200 'len(r) == 5' "${tls[@]}" -X POST --data-binary "@$WORK/cat.jpg" "$url"

  local ran0 gone0 pids=()
  ran0=$(ran)
  gone0=$(answered_499)
  for i in $(seq 1 "$N"); do
    curl -s "${protocol%% *}" "${tls[@]}" --max-time 0.5 -o /dev/null -w '%{http_code}\n' -X POST \
      --data-binary "@$WORK/cat.jpg" "$url" >"$WORK/client.$i" 2>/dev/null &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || true; done
  call "$protocol: a request after the $N clients left" 200 'len(r) == 5' \
    "${tls[@]}" -X POST --data-binary "@$WORK/cat.jpg" "$url"

  local answered ran_n gone_n
  answered=$(cat "$WORK"/client.* | grep -c '^200$' || true)
  ran_n=$(($(ran) - ran0 - 1))
  gone_n=$(($(answered_499) - gone0))
  echo "     $N clients gave up after 0.5 s: $answered answered 200 in time, $ran_n ran, $gone_n answered 499"
  if [ "$ran_n" -lt $((N / 2)) ]; then
    echo "ok   $protocol: fewer than half of the $N requests ran ($ran_n)"
  else
    fail "$protocol: $ran_n of the $N requests ran after their clients had left"
  fi
  if [ "$gone_n" -ge $((N - ran_n)) ] && [ "$gone_n" -le "$N" ]; then
    echo "ok   $protocol: each request that did not run was answered 499 ($gone_n)"
  else
    fail "$protocol: $gone_n answered 499, want $((N - ran_n)) to $N"
  fi
  serve_stop 60
  [ "$SERVER_STATUS" = 0 ] && echo "ok   $protocol: SIGTERM: exit 0" ||
    fail "$protocol: SIGTERM: exit status $SERVER_STATUS"
  rm -f "$WORK"/client.*
}

run_case 120 --http1.1
# HTTP/2 (cleartext, prior knowledge): a client that leaves resets its streams, h2o
# disposes their requests, and the dispose hook cancels them and counts the 499
run_case 120 --http2-prior-knowledge
# HTTP/1.1 over TLS: a closing client's close_notify record comes before its end of
# stream, so the server asks the socket for the end of stream itself (POLLRDHUP)
run_case 120 --http1.1 https

if [ "$failures" != 0 ]; then
  echo "$failures failure(s); server log:" >&2
  tail -30 "$WORK/server.log" >&2
  exit 1
fi
echo "serve_disconnect: all passed"
