#!/usr/bin/env bash
# serve_fd_limit.sh - out of file descriptors, the server waits instead of spinning.
#
# `inferd serve` (no models, one HTTP thread) runs with `ulimit -n 64`; a client opens 80
# connections, so accept() fails with EMFILE while the rest wait in the listen backlog.
# The listener then stays readable: an HTTP thread that read it again at once spun at
# full speed (about 220 of 300 possible CPU ticks in 3 s, measured before the fix) until
# a descriptor freed up. Now it pauses accepting and retries every 100 ms:
#   - (first, a server started with a soft limit of 100 runs with the hard limit);
#   - the server uses less than 0.3 s of CPU in 3 s while the descriptors are exhausted;
#   - the connections it did accept are still served (/ping 200 on one of them);
#   - once the client closes 40 connections, the waiting ones are accepted and a
#     connection that was in the backlog gets /ping 200;
#   - a fresh curl /ping is 200 and SIGTERM exits 0.
#
#   serve_fd_limit.sh INFERD SOURCE_DIR WORK_DIR
set -euo pipefail
INFERD=$1 SRC=$2 WORK=$3
PY=${INFERD_PYTHON:-/usr/bin/python3}
. "$SRC/tests/e2e/serve_lib.sh"
trap serve_cleanup EXIT
rm -rf "$WORK"
mkdir -p "$WORK"

serve_ports
serve_config "$WORK/config.properties" "disable_token_authorization=true" "number_of_netty_threads=1"

# A soft limit below the hard one is raised to it at start (as the JVM does for
# TorchServe), so a flood of clients meets the hard limit, not the usual soft 1024.
hard=$(ulimit -H -n)
(cd "$WORK" && ulimit -S -n 100 && exec "$INFERD" serve --ts-config "$WORK/config.properties" --foreground \
  >raise.log 2>&1) &
SERVER_PID=$!
serve_wait_ready 60 || fail "the server did not start with a soft limit of 100"
soft=$(awk '/^Max open files/ {print $4}' "/proc/$SERVER_PID/limits")
[ "$soft" = "$hard" ] && echo "ok   soft limit on open files raised from 100 to the hard $hard" ||
  fail "soft limit on open files is $soft, want the hard $hard"
serve_stop 60
[ "$SERVER_STATUS" = 0 ] || fail "SIGTERM: exit status $SERVER_STATUS"

# Now both limits at 64.
(cd "$WORK" && ulimit -n 64 && exec "$INFERD" serve --ts-config "$WORK/config.properties" --foreground \
  >server.log 2>&1) &
SERVER_PID=$!
serve_wait_ready 60 || { fail "the server did not start"; serve_finish serve_fd_limit "$WORK"; }

"$PY" - "$SERVER_PID" "$INFERENCE_PORT" <<'PY' || fail "out of descriptors (see above)"
import socket, sys, time

pid, port = int(sys.argv[1]), int(sys.argv[2])
PING = b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def cpu_ticks():
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(") ", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def ping(s):
    s.settimeout(10)
    s.sendall(PING)
    got = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except socket.timeout:
        pass
    return got.split(b"\r\n", 1)[0].decode(errors="replace")


socks = []
for _ in range(80):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    socks.append(s)
time.sleep(1)  # the server has taken what it can
before = cpu_ticks()
time.sleep(3)
used = cpu_ticks() - before
bad = 0
ok = used < 30
print("%s  CPU while out of descriptors: %d ticks in 3 s (at most 29)" % ("ok  " if ok else "FAIL", used))
bad += not ok
line = ping(socks[0])
ok = line.startswith("HTTP/1.1 200")
print("%s  /ping on an accepted connection meanwhile: %s" % ("ok  " if ok else "FAIL", line))
bad += not ok
for s in socks[1:41]:
    s.close()
line = ping(socks[-1])  # the last one waited in the backlog
ok = line.startswith("HTTP/1.1 200")
print("%s  /ping on a connection accepted once descriptors were free: %s" % ("ok  " if ok else "FAIL", line))
bad += not ok
for s in socks:
    s.close()
sys.exit(1 if bad else 0)
PY
call "/ping after the flood" 200 "r['status'] == 'Healthy'" "http://127.0.0.1:$INFERENCE_PORT/ping"
grep -q "cannot accept connections: Too many open files" "$WORK/server.log" &&
  echo "ok   the log says why connections wait" || fail "no warning about the descriptors in the log"
serve_finish serve_fd_limit "$WORK"
