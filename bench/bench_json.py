"""Reading the one-JSON-object results that benchmark runs print (inferd run --json,
engine_torch.py --json, peers_ort.js), with a clear exit when a run printed something
else, and picking the best of a measurement's rounds. Imported by the table code of
bench/engine.sh and bench/peers.sh."""
import json
import sys


def load(path, what, me):
    """The JSON object in `path`; exits naming `what` when it is not one object."""
    with open(path) as f:
        text = f.read().strip()
    try:
        obj = json.loads(text)
    except ValueError as e:
        sys.exit("%s: %s did not print exactly one JSON object (%s); it printed:\n%s" % (me, what, e, text[:400]))
    if not isinstance(obj, dict):
        sys.exit("%s: %s printed JSON that is not an object: %s" % (me, what, text[:400]))
    return obj


def number(obj, key, what, me):
    """obj[key] as a positive float; exits naming `what` and the key otherwise."""
    v = obj.get(key)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
        sys.exit("%s: %s: field '%s' missing or not a positive number (got %r)" % (me, what, key, v))
    return float(v)


def rounds_of(stem, rounds, what, me, throughput):
    """The objects of the rounds STEM.r1.json .. STEM.rN.json of one measurement, in
    order; exits naming `what` when a round lacks its number (throughput(obj))."""
    objs = [load("%s.r%d.json" % (stem, r), "%s (round %d)" % (what, r), me) for r in range(1, rounds + 1)]
    for o in objs:
        throughput(o)
    return objs


def best_round(stem, rounds, what, me, throughput):
    """Of the rounds of one measurement (rounds_of), the object whose throughput(obj) is
    highest: the rounds of every side alternate in time, so the best of each is what
    each reaches when the shared machine lets it."""
    return max(rounds_of(stem, rounds, what, me, throughput), key=throughput)


def paired_ratios(a, b):
    """Round by round ratios a[r] / b[r] of two sides' throughputs measured in alternating
    rounds, as (median, lowest, highest). Round r of both sides ran seconds apart, so
    each ratio meets one state of the machine; the best rounds of two sides (best_round)
    may come from different minutes, and one lucky round moves them."""
    r = sorted(x / y for x, y in zip(a, b))
    n = len(r)
    median = r[n // 2] if n % 2 else (r[n // 2 - 1] + r[n // 2]) / 2
    return median, r[0], r[-1]
