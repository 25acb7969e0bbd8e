#!/usr/bin/python3
"""Run the op sweep (tests/fixtures/make_ops.py) through `inferd run` and check each case.

Why: each case is one ONNX op family with attribute values drawn at random; the engine
must either match PyTorch eager on it or refuse the model at load naming the op and the
node, never give a wrong answer or crash. A refusal passes only for a case the generator
marked may_refuse (a known limit, with its reason); any other refusal fails, so an op
that stops running is caught as surely as a wrong number.

Every case runs at each batch size the fixtures hold, alternately with 1 and 2 threads.
Prints one line per failure and per refusal, the worst error of each family, and a summary;
exits 1 if any case failed, 2 on bad usage or missing fixtures.

Usage: ops_sweep_test.py INFERD_BIN OPS_DIR [--rtol 1e-4] [--only NAME,...]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures"))
from compare import Mismatch, compare  # noqa: E402  (the model tests' own check)


def run_case(inferd, ops_dir, case, batch, threads, tmp, rtol):
    """Returns ("ok", detail), ("refused", message) or ("fail", reason)."""
    stem = os.path.join(ops_dir, "%s.b%d" % (case["name"], batch))
    got = os.path.join(tmp, "got.npy")
    if os.path.exists(got):
        os.remove(got)  # an exit 0 that wrote nothing must not pass on the last case's output
    cmd = [inferd, "run", os.path.join(ops_dir, case["name"] + ".onnx"), "--input", stem + ".input.npy",
           "--output", got, "--threads", str(threads)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "fail", "inferd run did not finish in 60 s"
    message = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    if proc.returncode == 2 and len(message) == 1:
        return "refused", message[0]
    if proc.returncode != 0:
        return "fail", "inferd run exited with status %d: %s" % (proc.returncode, " | ".join(message[-3:]))
    try:
        return "ok", compare(np.load(stem + ".output.npy"), np.load(got), rtol)
    except Mismatch as e:
        return "fail", str(e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inferd")
    ap.add_argument("ops_dir")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--only", default="", help="comma-separated case names")
    args = ap.parse_args()
    try:
        with open(os.path.join(args.ops_dir, "cases.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        print("ops_sweep_test.py: cannot read the cases (run make_ops.py): %s" % e, file=sys.stderr)
        return 2
    only = set(filter(None, args.only.split(",")))
    cases = [c for c in manifest["cases"] if not only or c["name"] in only]
    if not cases:
        print("ops_sweep_test.py: no case to run", file=sys.stderr)
        return 2

    failures, refusals, runs = [], [], 0
    worst = {}
    with tempfile.TemporaryDirectory(prefix="inferd-ops.") as tmp:
        for i, case in enumerate(cases):
            for batch in manifest["batches"]:
                threads = 1 + (i + batch) % 2
                status, detail = run_case(args.inferd, args.ops_dir, case, batch, threads, tmp, args.rtol)
                where = "%s b%d t%d %s" % (case["name"], batch, threads, json.dumps(case["params"]))
                if status == "refused" and case["may_refuse"]:
                    refusals.append("refused as expected (%s): %s: %s" % (case["may_refuse"], where, detail))
                elif status == "refused":
                    failures.append("REFUSED %s: %s" % (where, detail))
                elif status == "fail":
                    failures.append("FAIL %s: %s" % (where, detail))
                else:
                    runs += 1
                    err = float(detail.split("=")[1].split()[0])
                    family = case["family"]
                    if err >= worst.get(family, (-1.0, ""))[0]:
                        worst[family] = (err, case["name"])
    for line in refusals + failures:
        print(line)
    for family, (err, name) in sorted(worst.items()):
        print("%-8s worst max_rel_err=%.2e (%s)" % (family, err, name))
    print("%d cases: %d runs matched PyTorch, %d refused as expected, %d failed"
          % (len(cases), runs, len(refusals), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
