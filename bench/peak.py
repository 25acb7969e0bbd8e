#!/usr/bin/python3
"""This machine's practical fp32 peak: the GFLOP/s of oneDNN's sgemm on square matrices.

A theoretical peak (cores x FMA pipes x lanes x 2 x clock) needs the clock the cores
really run at under AVX-512, which a virtual machine does not show (no cycle counters,
and /proc/cpuinfo gives the nominal frequency). The rate of a large single-precision
matrix product is the measured stand-in: the same oneDNN library that inferd links
(libdnnl.so.2, called through ctypes), the same thread count, on the same minute of
the shared machine. bench/engine.sh divides inferd's GFLOP/s by it for its
"% of fp32 peak" column, and bench/seed-experiment.sh reports it beside its ceiling.

C = A x B with N x N float32 matrices (default 4096: 137 GFLOP per product, far beyond
the caches, so the kernel runs at its steady rate). One untimed product, then
--windows windows of at least --seconds each; the result is the best window's
2 * N^3 * products / seconds. OMP_NUM_THREADS is set to --threads before the library
loads, since OpenMP reads it once.

Usage: /usr/bin/python3 bench/peak.py [--threads T] [--seconds S] [--windows W] [--size N] [--json]
Exit status: 0 with the rate printed, 2 for a bad option, 1 when oneDNN cannot be loaded or fails.
"""
import argparse
import ctypes
import ctypes.util
import json
import os
import sys
import time


def positive_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not an integer: %r" % text)
    if v <= 0:
        raise argparse.ArgumentTypeError("must be positive: %r" % text)
    return v


def positive_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % text)
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number: %r" % text)
    return v


class Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]


def load_dnnl():
    name = ctypes.util.find_library("dnnl") or "libdnnl.so.2"
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        sys.exit("peak.py: cannot load oneDNN (%s): run scripts/install-deps.sh" % e)
    i64, f32, fp = ctypes.c_int64, ctypes.c_float, ctypes.POINTER(ctypes.c_float)
    lib.dnnl_sgemm.restype = ctypes.c_int
    lib.dnnl_sgemm.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, f32, fp, i64, fp, i64, f32, fp, i64]
    lib.dnnl_version.restype = ctypes.POINTER(Version)
    lib.dnnl_version.argtypes = []
    return lib


def main():
    ap = argparse.ArgumentParser(description="fp32 GFLOP/s of oneDNN's sgemm (the machine's practical peak)")
    ap.add_argument("--threads", type=positive_int, default=os.cpu_count() or 1)
    ap.add_argument("--seconds", type=positive_float, default=1.0, help="length of each window (default 1)")
    ap.add_argument("--windows", type=positive_int, default=3, help="timed windows, the best counts (default 3)")
    ap.add_argument("--size", type=positive_int, default=4096, help="N of the N x N matrices (default 4096)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before libdnnl (and its OpenMP) loads
    lib = load_dnnl()
    n = args.size
    floats = ctypes.c_float * (n * n)
    try:
        a, b, c = floats(), floats(), floats()
    except MemoryError:
        sys.exit("peak.py: no memory for three %d x %d float matrices" % (n, n))
    for i in range(0, n * n, 997):  # values that are not all zero; the rate does not depend on them
        a[i] = 0.5
        b[i] = 0.25

    def product():
        st = lib.dnnl_sgemm(b"N", b"N", n, n, n, 1.0, a, n, b, n, 0.0, c, n)
        if st != 0:
            sys.exit("peak.py: dnnl_sgemm failed with status %d" % st)

    product()
    best = 0.0
    for _ in range(args.windows):
        count, t0 = 0, time.perf_counter()
        while True:
            product()
            count += 1
            dt = time.perf_counter() - t0
            if dt >= args.seconds:
                break
        best = max(best, 2.0 * n ** 3 * count / dt / 1e9)

    v = lib.dnnl_version().contents
    version = "%d.%d.%d" % (v.major, v.minor, v.patch)
    if args.json:
        print(json.dumps({"gflops": round(best, 1), "threads": args.threads, "size": n,
                          "library": "oneDNN %s dnnl_sgemm" % version}))
    else:
        print("fp32 sgemm peak: %.1f GFLOP/s (%d threads, %d x %d, oneDNN %s)" % (best, args.threads, n, n, version))


if __name__ == "__main__":
    main()
