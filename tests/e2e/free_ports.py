"""free_ports.py - free ports of 127.0.0.1 for the e2e tests (serve_lib.sh's free_ports and
serve_concurrency.py). From INFERD_TEST_PORTS ("18600-18699") when it is set, on a
machine shared with others, else any. The range is tried in a random order, each port
once: two tests picking at once (ctest -j, another run) would otherwise both get its
lowest free ports. Fails with a message when too few are free.

    free_ports.py N     prints N distinct ports, blank-separated
"""
import os
import random
import socket
import sys


def free_ports(n):
    """n distinct ports of 127.0.0.1 that are free now."""
    spec = os.environ.get("INFERD_TEST_PORTS", "")
    low, _, high = spec.partition("-")
    span = range(int(low), int(high or low) + 1) if spec else None
    candidates = random.sample(span, len(span)) if spec else [0] * n
    socks = []
    for port in candidates:
        if len(socks) == n:
            break
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            if not spec:
                raise
            continue
        socks.append(s)
    if len(socks) < n:
        sys.exit("free_ports: %d of the %d ports wanted are free in INFERD_TEST_PORTS=%s" % (len(socks), n, spec))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


if __name__ == "__main__":
    print(" ".join(map(str, free_ports(int(sys.argv[1])))))
