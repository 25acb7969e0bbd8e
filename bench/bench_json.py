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


def best_round(stem, rounds, what, me, throughput):
    """Of the rounds STEM.r1.json .. STEM.rN.json of one measurement, the object whose
    throughput(obj) is highest: the rounds of every side alternate in time, so the best
    of each is what each reaches when the shared machine lets it."""
    objs = [load("%s.r%d.json" % (stem, r), "%s (round %d)" % (what, r), me) for r in range(1, rounds + 1)]
    for o in objs:
        throughput(o)  # exits naming `what` when a round lacks its number
    return max(objs, key=throughput)
