#!/usr/bin/env bash
# bench_test.sh - `inferd bench` end to end:
#   --mode server against the real `inferd serve` (MobileNetV2 of models/, 127.0.0.1, free
#   ports, the token from key_file.json): 200 requests x concurrency 16 with --json, then
#   the same over 2 processes; all 200 OK, no errors, p50 <= p99 <= max;
#   --mode local: 4 jobs x concurrency 2 on the chelsea photo, each top-5 starting with
#   "Egyptian cat", each job one thread (strace sees no clone); refused connections and a server that never answers are counted
#   (status 0), not hung on; a job past --timeout is killed (137), and jobs die with a
#   killed run (frozen with SIGSTOP first, so that only SIGKILL can end them); keep-alive (16
#   connections for 16 clients); bad flags exit 2 with one line (a malformed or non-http
#   URL, a directory or FIFO as a file, a file name with a newline, more clients than open
#   files are allowed);
#   latency is of the requests answered with success, failures' apart. Open loop (--request-rate):
#   every request sent, none before its due time, and a request that waited for a busy
#   client has the wait in its latency and is counted as delayed; --concurrency-range runs
#   each level and reports them together. Ctrl-C or SIGTERM mid-run (server, processes,
#   sweep, local) reports what finished, exit 128 + signal, no process left.
#   The server is stopped in every path.
# Nothing waits a fixed time or asserts an upper bound on one: helper servers say when
# they listen, and durations are checked from below (a timeout does not end a request
# early, a request due later is not sent sooner); `timeout` bounds are only for hangs.
#
#   bench_test.sh INFERD SOURCE_DIR WORK_DIR
set -euo pipefail
INFERD=$1 SRC=$2 WORK=$3
. "$SRC/tests/e2e/serve_lib.sh"
SILENT_PID=
cleanup() {
  [ -z "$SILENT_PID" ] || kill -KILL "$SILENT_PID" 2>/dev/null || true
  serve_cleanup
}
trap cleanup EXIT

rm -rf "$WORK"
mkdir -p "$WORK"
PHOTO=/usr/lib/python3/dist-packages/skimage/data/chelsea.png
MODEL=$SRC/models/mobilenet_v2_imagenet.onnx
PY=${INFERD_PYTHON:-/usr/bin/python3}

# ---- bad flags: exit 2 and one line -------------------------------------------------
bad_flags() {
  local name=$1 status
  shift
  status=0
  "$INFERD" bench "$@" >"$WORK/out" 2>"$WORK/err" || status=$?
  if [ "$status" != 2 ] || [ "$(wc -l <"$WORK/err")" != 1 ]; then
    fail "bad flags ($name): exit $status, stderr: $(cat "$WORK/err")"
  else
    echo "ok   bad flags ($name) exit 2: $(cat "$WORK/err")"
  fi
}
bad_flags "no mode"
bad_flags "unknown mode" --mode cluster --file "$PHOTO" --requests 1 --concurrency 1
bad_flags "unknown option" --mode server --bogus
bad_flags "no url" --mode server --file "$PHOTO" --requests 1 --concurrency 1
bad_flags "zero requests" --mode server --url http://127.0.0.1:1/ --file "$PHOTO" --requests 0 --concurrency 1
bad_flags "bad concurrency" --mode server --url http://127.0.0.1:1/ --file "$PHOTO" --requests 1 --concurrency x
bad_flags "missing file" --mode server --url http://127.0.0.1:1/ --file "$WORK/none.png" --requests 1 --concurrency 1
bad_flags "bad timeout" --mode server --url http://127.0.0.1:1/ --file "$PHOTO" --requests 1 --concurrency 1 --timeout -1
bad_flags "local without model" --mode local --file "$PHOTO" --requests 1 --concurrency 1
bad_flags "missing value" --mode server --url
bad_flags "zero request rate" --mode server --url http://127.0.0.1:1/ --file "$PHOTO" --requests 1 --concurrency 1 --request-rate 0
bad_flags "backward range" --mode server --url http://127.0.0.1:1/ --file "$PHOTO" --requests 1 --concurrency-range 4:2
bad_flags "range and concurrency" --mode server --url http://127.0.0.1:1/ --file "$PHOTO" --requests 1 --concurrency 1 --concurrency-range 1:2
bad_flags "range above requests" --mode server --url http://127.0.0.1:1/ --file "$PHOTO" --requests 3 --concurrency-range 1:5:2
bad_flags "range and rate" --mode server --url http://127.0.0.1:1/ --file "$PHOTO" --requests 1 --concurrency-range 1:2 --request-rate 5
bad_flags "rate in local mode" --mode local --model "$MODEL" --file "$PHOTO" --requests 1 --concurrency 1 --request-rate 5
bad_flags "a rate that lasts past a day" --mode server --url http://127.0.0.1:1/ --file "$PHOTO" --requests 3 --concurrency 1 --request-rate 0.00001
bad_flags "malformed url" --mode server --url 'http://[bad' --file "$PHOTO" --requests 1 --concurrency 1
bad_flags "a Content-Length header" --mode server --url http://127.0.0.1:1/ --file "$PHOTO" --requests 1 --concurrency 1 \
  --header "content-length: 5"
bad_flags "not http" --mode server --url ftp://127.0.0.1/x --file "$PHOTO" --requests 1 --concurrency 1
bad_flags "a directory as --file" --mode server --url http://127.0.0.1:1/ --file "$SRC/models" --requests 1 --concurrency 1
bad_flags "a directory as --model" --mode local --model "$SRC/models" --file "$PHOTO" --requests 1 --concurrency 1
# a name with a newline is still one line (it was printed as given: two lines)
bad_flags "a missing --file named with a newline" --mode server --url http://127.0.0.1:1/ --file "$WORK/no
such.png" --requests 1 --concurrency 1
bad_flags "too many local jobs" --mode local --model "$MODEL" --file "$PHOTO" --requests 100000000 --concurrency 1
mkfifo "$WORK/fifo"
bad_flags "a FIFO as --file" --mode server --url http://127.0.0.1:1/ --file "$WORK/fifo" --requests 1 --concurrency 1
# more clients than open files allowed (hard limit): refused, not counted as server errors
status=0
(ulimit -n 64 && "$INFERD" bench --mode server --url http://127.0.0.1:1/ --file "$PHOTO" --requests 1 \
  --concurrency 100 >"$WORK/out" 2>"$WORK/err") || status=$?
[ "$status" = 2 ] && grep -q "open files" "$WORK/err" && echo "ok   bad flags (concurrency above ulimit -n) exit 2" ||
  fail "concurrency above ulimit -n: exit $status, stderr: $(cat "$WORK/err")"

# ---- connection failures are errors with status 0, quickly ---------------------------
serve_ports # free ports: nothing listens on METRICS_PORT yet
timeout 120 "$INFERD" bench --mode server --url "http://127.0.0.1:$METRICS_PORT/predictions/x" --file "$PHOTO" \
  --requests 10 --concurrency 2 --timeout 5 --json >"$WORK/refused.json" || fail "bench against a closed port: exit $?"
check_json "$WORK/refused.json" 'r["completed"] == 10 and r["errors"] == 10 and r["status"] == {"0": 10}' \
  "refused connections counted as status 0"
# ... and said why, in libcurl's words (status 0 alone does not tell a refused
# connection from a timeout or a reset)
check_json "$WORK/refused.json" 'list(r["no_answer"].values()) == [10] and "connect" in list(r["no_answer"])[0]' \
  "refused connections: no answer because the connection was refused"
# With no success there is no latency: the text says so rather than "p50 0.00 ms".
timeout 120 "$INFERD" bench --mode server --url "http://127.0.0.1:$METRICS_PORT/predictions/x" --file "$PHOTO" \
  --requests 4 --concurrency 2 --timeout 5 >"$WORK/refused.txt" || fail "bench against a closed port (text): exit $?"
grep -q '^latency: *none: no request succeeded$' "$WORK/refused.txt" && echo "ok   no success: no latency printed as 0.00 ms" ||
  fail "no success: latency line: $(grep '^latency' "$WORK/refused.txt")"
grep -Eq "^no answer: +Couldn't connect to server x 4$" "$WORK/refused.txt" && echo "ok   text: why there was no answer" ||
  fail "no answer line: $(cat "$WORK/refused.txt")"

# wait_file FILE: until a helper server has written FILE (it listens), at most 120 s.
wait_file() {
  local end=$((SECONDS + 120))
  until [ -e "$1" ]; do
    [ "$SECONDS" -lt "$end" ] || { fail "$1 not written within 120 s"; return 1; }
    sleep 0.05
  done
}

# A server that accepts connections and never answers: every request times out
# (--timeout 1: none ends before it, but for curl's millisecond rounding: 999.86 ms was
# seen) and is counted as status 0; the run ends, it does not hang (the bound of
# `timeout` is only for a hang).
serve_ports
"$PY" -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
open(sys.argv[2], "w").close()  # listening
conns = []
while True: conns.append(s.accept())
' "$INFERENCE_PORT" "$WORK/silent.listening" &
SILENT_PID=$!
wait_file "$WORK/silent.listening"
timeout 120 "$INFERD" bench --mode server --url "http://127.0.0.1:$INFERENCE_PORT/predictions/x" --file "$PHOTO" \
  --requests 4 --concurrency 4 --timeout 1 --json >"$WORK/silent.json" || fail "bench against a silent server: exit $?"
check_json "$WORK/silent.json" 'r["status"] == {"0": 4} and r["failed_latency_ms"]["p50"] >= 990' \
  "a silent server: requests time out (after 1 s) as status 0"
check_json "$WORK/silent.json" 'list(r["no_answer"].values()) == [4] and "Timeout" in list(r["no_answer"])[0]' \
  "a silent server: no answer because of the timeout"
# Open loop against it: 8 requests due within 80 ms, 2 clients each busy for the 1 s
# timeout. The 6 that find both busy are delayed; the last pair is sent after two
# rounds of timeouts, so its latency, counted from when it was due, is about 3 s (a
# latency counted from the send would be 1 s).
timeout 120 "$INFERD" bench --mode server --url "http://127.0.0.1:$INFERENCE_PORT/predictions/x" --file "$PHOTO" \
  --requests 8 --concurrency 2 --request-rate 100 --timeout 1 --json >"$WORK/silent_open.json" ||
  fail "open loop against a silent server: exit $?"
check_json "$WORK/silent_open.json" 'r["status"] == {"0": 8} and r["delayed"] == 6 and r["request_rate"] == 100' \
  "open loop: requests that wait for a busy client are counted as delayed"
check_json "$WORK/silent_open.json" 'r["failed_latency_ms"]["max"] >= 2900 and r["failed_latency_ms"]["p50"] >= 1000' \
  "open loop: the wait for a client is in the latency (of the failed requests here)"
check_json "$WORK/silent_open.json" 'r["latency_ms"]["max"] == 0 and r["ok"] == 0' \
  "open loop: failed requests are not in the latency of the answered ones"
{ kill -KILL "$SILENT_PID" && wait "$SILENT_PID"; } 2>/dev/null || true
SILENT_PID=

# A --header 'Content-Type: ...' replaces the default one, and 'X-Empty:' is sent with an
# empty value (libcurl would drop it as written) (a server that records what it got).
serve_ports
"$PY" -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/odd":  # an answer all the same
            self.send_response(999); self.send_header("Content-Length", "0"); self.end_headers(); return
        open(sys.argv[2], "a").write(repr(self.headers.get_all("Content-Type")) + " " +
                                     repr(self.headers.get_all("X-Empty")) + "\n")
        self.send_response(202); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
open(sys.argv[3], "w").close()  # listening
server.serve_forever()
' "$INFERENCE_PORT" "$WORK/types.txt" "$WORK/typed.listening" &
SILENT_PID=$!
wait_file "$WORK/typed.listening"
timeout 120 "$INFERD" bench --mode server --url "http://127.0.0.1:$INFERENCE_PORT/x" --file "$PHOTO" --requests 2 \
  --concurrency 1 --header "Content-Type: image/png" --header "X-Empty:" --json >"$WORK/typed.json" ||
  fail "bench with a Content-Type header: exit $?"
[ "$(sort -u "$WORK/types.txt")" = "['image/png'] ['']" ] &&
  echo "ok   --header Content-Type replaces the default; an empty value is sent empty" ||
  fail "Content-Type headers sent: $(cat "$WORK/types.txt")"
# A status past 599 is the server's answer, not "no answer" (status 0, as it was counted).
timeout 120 "$INFERD" bench --mode server --url "http://127.0.0.1:$INFERENCE_PORT/odd" --file "$PHOTO" --requests 3 \
  --concurrency 2 --processes 2 --json >"$WORK/odd.json" || fail "bench against a server answering 999: exit $?"
check_json "$WORK/odd.json" 'r["status"] == {"999": 3} and r["errors"] == 3 and r["no_answer"] == {}' \
  "a server answering 999: counted as 999, not as no answer"
# More clients or processes than requests: the report says what ran (3 clients, 3 processes).
# The server answers 202: a success (any 2xx) in the counts as in the latencies.
timeout 120 "$INFERD" bench --mode server --url "http://127.0.0.1:$INFERENCE_PORT/x" --file "$PHOTO" --requests 3 \
  --concurrency 50 --processes 8 --json >"$WORK/capped.json" || fail "bench with 50 clients for 3 requests: exit $?"
check_json "$WORK/capped.json" 'r["concurrency"] == 3 and r["processes"] == 3' \
  "50 clients over 8 processes for 3 requests: reported as the 3 clients and 3 processes that ran"
check_json "$WORK/capped.json" 'r["ok"] == 3 and r["errors"] == 0 and r["status"] == {"202": 3} and r["latency_ms"]["max"] > 0' \
  "202 answers are successes, in the counts as in the latencies"
# --processes with --concurrency-range: each level runs over min(P, its clients)
# processes (the flag was dropped: every level ran in one process, reported as 0).
timeout 120 "$INFERD" bench --mode server --url "http://127.0.0.1:$INFERENCE_PORT/x" --file "$PHOTO" --requests 4 \
  --concurrency-range 1:3:2 --processes 2 --json >"$WORK/sweep_processes.json" || fail "sweep with --processes: exit $?"
check_json "$WORK/sweep_processes.json" '[(x["concurrency"], x["processes"], x["ok"]) for x in r["sweep"]] == [(1, 1, 4), (3, 2, 4)]' \
  "a sweep with --processes 2: level 1 on 1 process, level 3 on 2"
# strace is one of scripts/install-deps.sh's test packages: where it cannot trace, the
# two checks below fail rather than pass unchecked
strace_ok=0
strace -f -o /dev/null true 2>/dev/null && strace_ok=1
if [ "$strace_ok" = 1 ]; then
  strace -f -e trace=clone,clone3 -e signal=none -o "$WORK/sweep.strace" "$INFERD" bench --mode server \
    --url "http://127.0.0.1:$INFERENCE_PORT/x" --file "$PHOTO" --requests 4 --concurrency-range 3:3 --processes 2 \
    >/dev/null || fail "sweep with --processes under strace: exit $?"
  forks=$(grep -E 'clone3?\(.*SIGCHLD' "$WORK/sweep.strace" | grep -vc CLONE_THREAD || true)
  [ "$forks" = 2 ] && echo "ok   a sweep with --processes 2 forks 2 client processes" ||
    fail "a sweep with --processes 2 forked $forks processes"
else
  fail "a sweep with --processes 2 forks 2 client processes: not checked, strace cannot trace here ($(command -v strace || echo 'not installed'))"
fi
{ kill -KILL "$SILENT_PID" && wait "$SILENT_PID"; } 2>/dev/null || true
SILENT_PID=

# ---- server mode against inferd serve ------------------------------------------------
serve_ports
serve_config "$WORK/config.properties" \
  "model_store=$SRC/models" \
  "load_models=mobilenet=mobilenet_v2_imagenet.onnx"
serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground
serve_wait_ready 120
serve_keys "$WORK"
URL="http://127.0.0.1:$INFERENCE_PORT/predictions/mobilenet"

timeout 240 "$INFERD" bench --mode server --url "$URL" --file "$PHOTO" --requests 200 --concurrency 16 \
  --header "Authorization: Bearer $INFERENCE_KEY" --json >"$WORK/server.json" || fail "bench --mode server: exit $?"
check_json "$WORK/server.json" 'r["status"] == {"200": 200} and r["ok"] == 200 and r["errors"] == 0 and r["completed"] == 200' \
  "server mode: 200 x 200 OK, no errors"
check_json "$WORK/server.json" '0 < r["latency_ms"]["p50"] <= r["latency_ms"]["p90"] <= r["latency_ms"]["p99"] <= r["latency_ms"]["max"]' \
  "server mode: p50 <= p90 <= p99 <= max"
check_json "$WORK/server.json" '1 <= r["connections"] <= 16' "server mode: keep-alive (at most one connection per client)"
check_json "$WORK/server.json" 'r["images_per_second"] > 0 and 0 < r["peak_cpu_percent"] <= 100 and 0 < r["peak_memory_percent"] <= 100' \
  "server mode: throughput, peak CPU % and memory %"
"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("     %.1f images/s, p50 %.1f ms, p99 %.1f ms" % (r["images_per_second"], r["latency_ms"]["p50"], r["latency_ms"]["p99"]))' "$WORK/server.json"

timeout 240 "$INFERD" bench --mode server --url "$URL" --file "$PHOTO" --requests 60 --concurrency 8 --processes 2 \
  --header "Authorization: Bearer $INFERENCE_KEY" --json >"$WORK/server2.json" || fail "bench --processes 2: exit $?"
check_json "$WORK/server2.json" 'r["status"] == {"200": 60} and r["errors"] == 0 and r["latency_ms"]["p50"] <= r["latency_ms"]["max"]' \
  "server mode over 2 processes: 60 x 200 OK"

# Open loop: 20 requests due every 50 ms; none is sent early, so the run lasts at least
# until the last one is due (0.95 s).
timeout 120 "$INFERD" bench --mode server --url "$URL" --file "$PHOTO" --requests 20 --concurrency 4 --request-rate 20 \
  --header "Authorization: Bearer $INFERENCE_KEY" --json >"$WORK/open.json" || fail "bench --request-rate: exit $?"
check_json "$WORK/open.json" 'r["status"] == {"200": 20} and r["request_rate"] == 20 and r["total_seconds"] >= 0.95 and 0 <= r["delayed"] <= 20' \
  "open loop: 20 x 200 OK on schedule"
timeout 120 "$INFERD" bench --mode server --url "$URL" --file "$PHOTO" --requests 12 --concurrency 4 --request-rate 40 \
  --processes 2 --header "Authorization: Bearer $INFERENCE_KEY" --json >"$WORK/open2.json" ||
  fail "bench --request-rate --processes 2: exit $?"
check_json "$WORK/open2.json" 'r["status"] == {"200": 12} and r["total_seconds"] >= 0.25' \
  "open loop over 2 processes: 12 x 200 OK, not before the last is due"

# A concurrency sweep: every level runs all its requests; the table has a row per level.
timeout 240 "$INFERD" bench --mode server --url "$URL" --file "$PHOTO" --requests 16 --concurrency-range 1:4:3 \
  --header "Authorization: Bearer $INFERENCE_KEY" --json >"$WORK/sweep.json" || fail "bench --concurrency-range: exit $?"
check_json "$WORK/sweep.json" '[x["concurrency"] for x in r["sweep"]] == [1, 4] and all(x["status"] == {"200": 16} for x in r["sweep"])' \
  "concurrency sweep: levels 1 and 4, 16 x 200 OK each"
timeout 240 "$INFERD" bench --mode server --url "$URL" --file "$PHOTO" --requests 8 --concurrency-range 2:3 \
  --header "Authorization: Bearer $INFERENCE_KEY" >"$WORK/sweep.txt" || fail "bench --concurrency-range (text): exit $?"
if [ "$(grep -c '^== concurrency' "$WORK/sweep.txt")" = 2 ] && grep -Eq '^ +2 +[0-9.]+ +[0-9.]+ ' "$WORK/sweep.txt" &&
  grep -Eq '^ +3 +[0-9.]+ +[0-9.]+ ' "$WORK/sweep.txt"; then
  echo "ok   concurrency sweep: a report per level and a table row each"
else
  fail "concurrency sweep text: $(cat "$WORK/sweep.txt")"
fi

# Without the token: every request is counted as 401, none as OK.
timeout 120 "$INFERD" bench --mode server --url "$URL" --file "$PHOTO" --requests 8 --concurrency 4 \
  >"$WORK/noauth.txt" || fail "bench without a token: exit $?"
grep -q '401 x 8' "$WORK/noauth.txt" && echo "ok   errors by status: 401 x 8 without the token" ||
  fail "no token: expected '401 x 8': $(cat "$WORK/noauth.txt")"

# Ctrl-C (SIGINT to the whole process group) or SIGTERM stops a run early and reports what
# finished, marked interrupted, with exit status 128 + the signal, as perf_analyzer, wrk
# and hey report on Ctrl-C (it died without a word); --processes children send back
# theirs and none is left. interrupt_check MODE ARGS... runs `inferd bench ARGS` in a
# session of its own, waits until it runs (its sockets, children or jobs exist), signals
# it and checks the report. 100000 requests cannot finish before that.
interrupt_check() {
  "$PY" - "$INFERD" "$@" <<'PY'
import json, os, signal, subprocess, sys, time

inferd, how, *args = sys.argv[1:]


def procs():
    """pid -> (ppid, pgid, cmdline) of every process."""
    out = {}
    for name in os.listdir("/proc"):
        try:
            fields = open("/proc/%s/stat" % name).read().rsplit(")", 1)[1].split()
            out[int(name)] = (int(fields[1]), int(fields[2]), open("/proc/%s/cmdline" % name, "rb").read())
        except (OSError, ValueError, IndexError):
            pass
    return out


def running(pid):
    """The run has begun: clients' sockets open, or its children (processes, jobs) forked."""
    try:
        if any(os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:") for fd in os.listdir("/proc/%d/fd" % pid)):
            return True
    except OSError:
        pass
    return sum(1 for ppid, _, cmd in procs().values() if ppid == pid) >= 2


# SIGINT as a terminal sends it (SIG_DFL: a background job of this script would ignore it)
run = subprocess.Popen([inferd, "bench"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
end = time.monotonic() + 120
while not running(run.pid) and run.poll() is None and time.monotonic() < end:
    time.sleep(0.01)
signo = signal.SIGTERM if how == "term" else signal.SIGINT
if how == "term":
    os.kill(run.pid, signo)  # the parent alone: it tells its children
else:
    os.killpg(run.pid, signo)  # Ctrl-C: the whole group
try:
    out, err = run.communicate(timeout=120)
except subprocess.TimeoutExpired:
    os.killpg(run.pid, signal.SIGKILL)
    sys.exit("still running 120 s after the signal")
left = [pid for pid, (_, pgid, _) in procs().items() if pgid == run.pid]
if run.returncode != 128 + signo or left:
    sys.exit("exit status %s (want %d), processes left %s, stderr %r" % (run.returncode, 128 + signo, left, err[-300:]))
text = out.decode()
if "--json" not in args:
    name = signal.Signals(signo).name
    if "interrupted: by %s after " % name not in text:
        sys.exit("no 'interrupted: by %s' line: %r" % (name, text[:600]))
    sys.exit(0)
r = json.loads(text)
runs = r.get("sweep", [r])
last = runs[-1]
if not (last["interrupted"] and last["completed"] < last["requests"] and all(not x["interrupted"] for x in runs[:-1])):
    sys.exit("not marked interrupted: %r" % text[:600])
codes = last.get("status", last.get("exit_status"))
if set(codes) - {"200", "0"} or sum(codes.values()) != last["completed"]:
    sys.exit("what finished is not all successes (a job killed by the Ctrl-C counted?): %r" % codes)
if "jobs" in last and (len(last["jobs"]) != last["completed"] or not all(j["top5"] for j in last["jobs"])):
    sys.exit("jobs reported are not the ones that finished: %r" % last["jobs"][:3])
PY
}
BIG=(--file "$PHOTO" --requests 100000 --header "Authorization: Bearer $INFERENCE_KEY")
interrupt_check int --mode server --url "$URL" "${BIG[@]}" --concurrency 4 --processes 2 --json &&
  echo "ok   Ctrl-C over 2 processes: what finished is reported, exit 130, no process left" ||
  fail "Ctrl-C over 2 processes"
interrupt_check term --mode server --url "$URL" "${BIG[@]}" --concurrency 4 --processes 2 --json &&
  echo "ok   SIGTERM to the parent of 2 processes: it tells them, reports, exit 143" || fail "SIGTERM over 2 processes"
interrupt_check term --mode server --url "$URL" "${BIG[@]}" --concurrency 2 &&
  echo "ok   SIGTERM, one process: 'interrupted: by SIGTERM' in the text" || fail "SIGTERM, one process (text)"
# A client process that dies mid-run (here SIGKILL): the run stops at once, exit 1, and
# the one line says which and how (it said 'a client process failed (2 of 2 ran)', after
# the other process had run all its requests for nothing).
"$PY" - "$INFERD" "$URL" "$PHOTO" "$INFERENCE_KEY" <<'PY' && echo "ok   a client process killed mid-run: the run stops, and says which and how" ||
import os, signal, subprocess, sys, time
inferd, url, photo, key = sys.argv[1:]
run = subprocess.Popen([inferd, "bench", "--mode", "server", "--url", url, "--file", photo, "--requests", "100000",
                        "--concurrency", "4", "--processes", "2", "--header", "Authorization: Bearer " + key],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
end = time.monotonic() + 120
kids = []
while len(kids) < 2 and run.poll() is None and time.monotonic() < end:
    kids = [int(d) for d in os.listdir("/proc") if d.isdigit() and os.path.exists("/proc/%s/stat" % d)
            and open("/proc/%s/stat" % d).read().rsplit(")", 1)[1].split()[1] == str(run.pid)]
    time.sleep(0.01)
os.kill(max(kids), signal.SIGKILL)
try:
    err = run.communicate(timeout=60)[1].decode()
except subprocess.TimeoutExpired:
    run.kill()
    sys.exit("still running 60 s after one of its client processes was killed")
if run.returncode != 1 or "was killed by signal 9" not in err or err.count("\n") != 1:
    sys.exit("exit %s, stderr %r" % (run.returncode, err))
PY
  fail "a client process killed mid-run"
interrupt_check int --mode server --url "$URL" "${BIG[@]}" --concurrency-range 1:3 --json &&
  echo "ok   Ctrl-C in a sweep: the levels so far, the last marked" || fail "Ctrl-C in a sweep"

serve_stop
[ "$SERVER_STATUS" = 0 ] || fail "server exit status $SERVER_STATUS after SIGTERM"

# ---- local mode: the decentralized baseline ------------------------------------------
timeout 240 "$INFERD" bench --mode local --model "$MODEL" --file "$PHOTO" --requests 4 --concurrency 2 --json \
  >"$WORK/local.json" || fail "bench --mode local: exit $?"
check_json "$WORK/local.json" 'r["exit_status"] == {"0": 4} and r["ok"] == 4 and len(r["jobs"]) == 4' \
  "local mode: 4 jobs succeeded"
check_json "$WORK/local.json" 'all(list(j["top5"])[0] == "Egyptian cat" and len(j["top5"]) == 5 for j in r["jobs"])' \
  "local mode: every top-5 starts with Egyptian cat"
check_json "$WORK/local.json" 'r["latency_ms"]["p50"] <= r["latency_ms"]["p99"] <= r["latency_ms"]["max"]' \
  "local mode: p50 <= p99 <= max"

# A job runs on one thread, loading included, as the experiment's PyTorch jobs do
# (torch.set_num_threads(1) before they load): it starts no thread (strace sees no clone;
# with the machine's default it started an OpenMP thread for the load).
if [ "$strace_ok" = 1 ]; then
  strace -f -e trace=clone,clone3 -o "$WORK/job.strace" "$INFERD" bench --mode job --model "$MODEL" --file "$PHOTO" \
    >"$WORK/job.json" || fail "bench --mode job: exit $?"
  clones=$(grep -c 'clone' "$WORK/job.strace" || true)
  [ "$clones" = 0 ] && echo "ok   local mode: a job starts no thread" ||
    fail "local mode: a job started $clones thread(s): $(grep clone "$WORK/job.strace" | head -3)"
else
  fail "local mode: a job starts no thread: not checked, strace cannot trace here"
fi

# Ctrl-C in local mode: the running jobs are killed and not counted (not as 130 either)
interrupt_check int --mode local --model "$MODEL" --file "$PHOTO" --requests 100000 --concurrency 2 --json &&
  echo "ok   Ctrl-C in local mode: the jobs that ended are reported, exit 130" || fail "Ctrl-C in local mode"

# A job that fails (not an image) is counted by its exit status, 2.
timeout 120 "$INFERD" bench --mode local --model "$MODEL" --file "$SRC/README.md" --requests 2 --concurrency 2 --json \
  >"$WORK/local_bad.json" 2>"$WORK/local_bad.err" || fail "bench --mode local on a bad image: exit $?"
check_json "$WORK/local_bad.json" 'r["exit_status"] == {"2": 2} and r["errors"] == 2' "local mode: failed jobs counted by exit status"
# ... each with its reason in the report (it was only on stderr, once per job, into the
# progress bar, and --json had no word of it)
check_json "$WORK/local_bad.json" 'all("not a JPEG or PNG" in j["error"] for j in r["jobs"])' \
  "local mode: a failed job's reason is in the report"
# a reason that quotes a file name that is not UTF-8 is kept too (its odd bytes as '?')
head -c 1000 /dev/urandom >"$WORK/not-a-model"$'\xff'".onnx"
timeout 120 "$INFERD" bench --mode local --model "$WORK/not-a-model"$'\xff'".onnx" --file "$PHOTO" --requests 1 \
  --concurrency 1 --json >"$WORK/local_badname.json" || fail "bench --mode local on a corrupt model: exit $?"
check_json "$WORK/local_badname.json" '"not-a-model?.onnx: not a valid ONNX model" in r["jobs"][0]["error"]' \
  "local mode: a reason naming a file that is not UTF-8"
[ ! -s "$WORK/local_bad.err" ] && echo "ok   local mode: the jobs' errors are not printed once each on stderr" ||
  fail "local mode: stderr has $(wc -l <"$WORK/local_bad.err") lines: $(head -2 "$WORK/local_bad.err")"

# A model with two outputs (the image_classifier classifies the first, as the server's
# does): each job gave the run a buffer for the first only and crashed (exit 139).
"$PY" - "$WORK/two_outputs.onnx" <<'PY' || fail "could not write the two-output model"
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper
w = numpy_helper.from_array(np.arange(30, dtype=np.float32).reshape(10, 3) / 30, "w")
nodes = [helper.make_node("GlobalAveragePool", ["input"], ["pooled"]), helper.make_node("Flatten", ["pooled"], ["flat"]),
         helper.make_node("Gemm", ["flat", "w"], ["logits"], transB=1), helper.make_node("Relu", ["logits"], ["second"])]
image = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 3, 224, 224])
outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", 10]) for name in ("logits", "second")]
graph = helper.make_graph(nodes, "two_outputs", [image], outputs, [w])
open(sys.argv[1], "wb").write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
PY
timeout 120 "$INFERD" bench --mode local --model "$WORK/two_outputs.onnx" --file "$PHOTO" --requests 2 --concurrency 2 \
  --json >"$WORK/local_two.json" || fail "bench --mode local on a two-output model: exit $?"
check_json "$WORK/local_two.json" 'r["exit_status"] == {"0": 2} and all(len(j["top5"]) == 5 for j in r["jobs"])' \
  "local mode: a model with two outputs is classified by its first"

# A job longer than --timeout is killed and counted with exit status 128 + SIGKILL (1 ms:
# no job loads a model that fast, however fast the machine).
timeout 120 "$INFERD" bench --mode local --model "$MODEL" --file "$PHOTO" --requests 2 --concurrency 2 --timeout 0.001 \
  --json >"$WORK/local_timeout.json" || fail "bench --mode local --timeout: exit $?"
check_json "$WORK/local_timeout.json" 'r["exit_status"] == {"137": 2} and all("--timeout" in j["error"] for j in r["jobs"])' \
  "local mode: jobs past --timeout are killed (137), and the report says so"

# Jobs die with the run: SIGKILL to `inferd bench --mode local` while its jobs run leaves
# none behind (they would go on loading the model and classifying). The jobs are frozen
# with SIGSTOP first, so that they cannot finish by themselves: the test becomes their
# subreaper, and each must end killed by SIGKILL (PR_SET_PDEATHSIG), never exit or live on.
# A job that finished before it could be frozen makes the attempt not count (again, at
# most 3 times).
"$PY" - "$INFERD" "$MODEL" "$PHOTO" <<'PY' || fail "local mode: jobs do not die with a killed run"
import ctypes, os, signal, subprocess, sys, time

inferd, model, photo = sys.argv[1:4]
PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER): errno %d" % ctypes.get_errno())


def stat(pid):
    """(state, ppid) of a process, or None when it is gone."""
    try:
        fields = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, IndexError):
        return None


def jobs_of(run):
    """The run's children that are jobs (exec'd: their command line says --mode job)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = open("/proc/%s/cmdline" % name, "rb").read().split(b"\0")
        except OSError:
            continue
        s = stat(int(name))
        if s and s[1] == run and b"--mode" in argv and argv[argv.index(b"--mode") + 1:][:1] == [b"job"]:
            found.append(int(name))
    return found


def wait_status(pid, limit):
    """The exit status of a child (ours, as subreaper), or None if it lives on."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    return None


for attempt in range(1, 4):
    run = subprocess.Popen([inferd, "bench", "--mode", "local", "--model", model, "--file", photo, "--requests", "2",
                            "--concurrency", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 120
    while len(jobs_of(run.pid)) < 2 and run.poll() is None and time.monotonic() < end:
        time.sleep(0.005)
    jobs = jobs_of(run.pid)
    for pid in jobs:
        os.kill(pid, signal.SIGSTOP)
    states = {}
    for pid in jobs:  # stopped, or it had finished (a zombie) before the SIGSTOP
        while (s := stat(pid)) and s[0] not in "TZX" and time.monotonic() < end:
            time.sleep(0.005)
        states[pid] = s[0] if s else "gone"
    run.kill()
    run.wait()
    statuses = {pid: wait_status(pid, 60) for pid in jobs}  # reparented to us
    for pid, status in statuses.items():
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    if len(jobs) < 2 or any(state != "T" for state in states.values()):
        print("     attempt %d does not count: jobs %s, states %s" % (attempt, jobs, states))
        continue
    killed = [pid for pid, status in statuses.items() if status is not None and os.WIFSIGNALED(status)
              and os.WTERMSIG(status) == signal.SIGKILL]
    if len(killed) != len(jobs):
        sys.exit("jobs after the run was killed: %s (None: still alive 60 s later)" % statuses)
    print("ok   local mode: jobs die with a killed run (both frozen jobs ended by SIGKILL)")
    sys.exit(0)
sys.exit("3 attempts: a job always finished before it could be frozen")
PY

if [ "$failures" != 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "bench_test: all passed"
