#!/bin/bash
# free_ports_test.sh SRC - the e2e scripts' port picking under INFERD_TEST_PORTS
# (tests/e2e/free_ports.py, through serve_lib.sh's free_ports and as serve_concurrency.py
# imports it): ports in the range, distinct;
# two pickers do not both take the range's lowest free ports (they did: every pick
# scanned up from the low end, so two tests starting at once got the same three); a
# range with too few free ports is a clear failure, not a traceback or empty ports.
set -uo pipefail
SRC=$1
PYTHON=${INFERD_PYTHON:-/usr/bin/python3}
. "$SRC/tests/e2e/serve_lib.sh" # fail, free_ports, serve_ports
failures=0
# 20 ports of the caller's range when it has them, else 18600-18619
given=${INFERD_TEST_PORTS:-} low=18600
if [[ $given =~ ^([0-9]+)-([0-9]+)$ ]] && [ "${BASH_REMATCH[2]}" -ge $((BASH_REMATCH[1] + 19)) ]; then
  low=${BASH_REMATCH[1]}
fi
range="$low-$((low + 19))"

# the same checks of both copies
py_free_ports() {
  "$PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); from serve_concurrency import free_ports; print(" ".join(map(str, free_ports(int(sys.argv[2])))))' \
    "$SRC/tests/e2e" "$1"
}
for picker in free_ports py_free_ports; do
  picks=()
  for _ in 1 2 3 4 5 6; do
    got=$(INFERD_TEST_PORTS=$range $picker 3) || fail "$picker 3 in $range failed"
    set -- $got
    [ $# -eq 3 ] && [ "$1" != "$2" ] && [ "$1" != "$3" ] && [ "$2" != "$3" ] || fail "$picker: '$got' are not 3 distinct ports"
    for p in "$@"; do [ "$p" -ge "$low" ] && [ "$p" -le $((low + 19)) ] || fail "$picker: $p is outside $range"; done
    picks+=("$got")
  done
  [ "$(printf '%s\n' "${picks[@]}" | sort -u | wc -l)" -gt 1 ] || fail "$picker: six picks in $range all got ${picks[0]}"

  err=$(INFERD_TEST_PORTS=$low-$((low + 1)) $picker 3 2>&1 >/dev/null)
  status=$?
  [ $status -ne 0 ] || fail "$picker: 3 ports from a range of 2: status $status"
  case $err in
  *Traceback*) fail "$picker: 3 ports from a range of 2: a traceback: $err" ;;
  *"free_ports: "*) echo "ok   $picker: 3 ports from a range of 2 fail: ${err##*$'\n'}" ;;
  *) fail "$picker: 3 ports from a range of 2: '$err'" ;;
  esac
done
(INFERD_TEST_PORTS=$low-$((low + 1)) serve_ports 2>/dev/null) && fail "serve_ports in a range of 2 went on"

[ $failures -eq 0 ] && echo "all ok" || echo "$failures failure(s)"
exit $((failures > 0))
