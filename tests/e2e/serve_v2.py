#!/usr/bin/python3
"""KServe v2 infer checks against a running `inferd serve` (started by serve_v2.sh).

Usage: serve_v2.py BASE_URL INFERENCE_KEY WORK_DIR

WORK_DIR holds x1.npy / x3.npy (inputs, [n,3,224,224]) and y1.npy / y3.npy (what
`inferd run` answered for them). The model is "small" (input "input", output "logits"
[N,10]) with job_queue_size=8. Prints one line per check; exits 1 if any failed.
"""
import json
import os
import socket
import struct
import sys
from urllib.parse import urlparse

import numpy as np
import requests

BASE, KEY, WORK = sys.argv[1:4]
AUTH = {"Authorization": "Bearer " + KEY}
URL = BASE + "/v2/models/small/infer"
failures = 0


def check(ok, name, detail=""):
    global failures
    if ok:
        print("ok   " + name)
    else:
        failures += 1
        print("FAIL " + name + (": " + detail if detail else ""), file=sys.stderr)


def close(got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return False, "shape %s, expected %s" % (got.shape, want.shape)
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    scale = max(float(np.max(np.abs(want))), 1e-30)
    return err <= 1e-5 * scale, "max abs error %g (max magnitude %g)" % (err, scale)


def request(x, **extra):
    body = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.reshape(-1).tolist()}]}
    body.update(extra)
    return body


def post(body, headers=None, url=URL, data=None):
    h = dict(AUTH)
    h.update(headers or {})
    if data is None:
        data = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    return requests.post(url, data=data, headers=h, timeout=60)


def json_infer(name, x, want, nested=False, **extra):
    body = request(x, **extra)
    if nested:
        body["inputs"][0]["data"] = x.tolist()
    r = post(body)
    if r.status_code != 200:
        check(False, name, "HTTP %d: %s" % (r.status_code, r.text[:300]))
        return None
    j = r.json()
    out = j["outputs"][0]
    ok, detail = close(np.array(out["data"]).reshape(out["shape"]), want)
    check(out["name"] == "logits" and out["datatype"] == "FP32" and out["shape"] == list(want.shape) and ok, name,
          "%s %s %s; %s" % (out["name"], out["datatype"], out["shape"], detail))
    return j


def binary_body(x, out_binary=True, size=None, header_len=None, extra_bytes=b""):
    raw = x.astype("<f4").tobytes()
    body = {
        "id": "bin-1",
        "inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": len(raw) if size is None else size}}],
        "outputs": [{"name": "logits", "parameters": {"binary_data": out_binary}}],
    }
    js = json.dumps(body).encode()
    headers = {"Inference-Header-Content-Length": str(len(js) if header_len is None else header_len),
               "Content-Type": "application/octet-stream"}
    return js + raw + extra_bytes, headers


def expect_error(name, status, r, words=()):
    """Under /v2 the Open Inference Protocol's {"error": "..."}; elsewhere TorchServe's
    {"code", "type", "message"}."""
    v2 = urlparse(r.url).path.startswith("/v2")
    try:
        j = r.json()
        if v2:
            message = j.get("error", "")
            body_ok = set(j) == {"error"} and bool(message)
        else:
            message = j.get("message", "")
            body_ok = j.get("code") == status and bool(message)
    except ValueError:
        message, body_ok = r.text, False
    missing = [w for w in words if w.lower() not in message.lower()]
    check(r.status_code == status and body_ok and not missing, "%s -> %d" % (name, status),
          "HTTP %d %s%s" % (r.status_code, r.text[:300], "; message lacks %s" % missing if missing else ""))


x1, x3 = np.load(os.path.join(WORK, "x1.npy")), np.load(os.path.join(WORK, "x3.npy"))
y1, y3 = np.load(os.path.join(WORK, "y1.npy")), np.load(os.path.join(WORK, "y3.npy"))

# ---- good requests -------------------------------------------------------------------------
j = json_infer("JSON infer batch 1 equals inferd run", x1, y1, id="req-42")
if j:
    check(j.get("id") == "req-42" and j.get("model_name") == "small" and "model_version" in j,
          "id echoed, model_name and model_version given", json.dumps({k: j[k] for k in j if k != "outputs"}))
j = json_infer("JSON infer batch 3 equals inferd run (each row its own scheduler request)", x3, y3)
if j:
    check("id" not in j, "no id in the answer when the request has none", str(list(j)))
json_infer("nested data equals flat", x3, y3, nested=True)
r = post(request(x1), url=BASE + "/v2/models/small/versions/1.0/infer")
check(r.status_code == 200, "versioned path /versions/1.0/infer", "HTTP %d %s" % (r.status_code, r.text[:200]))
r = post(request(x1), url=BASE + "/v2/models/small_ext/infer")
ok, detail = close(np.array(r.json()["outputs"][0]["data"]).reshape(1, 10), y1) if r.status_code == 200 else \
    (False, "HTTP %d %s" % (r.status_code, r.text[:300]))
check(ok, "small_ext (small's weights in small_ext.weights beside it: ONNX external data) equals inferd run", detail)
json_infer("outputs named, binary_data false: inline", x1, y1, outputs=[{"name": "logits"}])

# Binary input and binary output.
data, headers = binary_body(x3)
r = post(None, headers, data=data)
if r.status_code == 200:
    hlen = int(r.headers.get("Inference-Header-Content-Length", "-1"))
    head = json.loads(r.content[:hlen])
    out = head["outputs"][0]
    size = out.get("parameters", {}).get("binary_data_size")
    got = np.frombuffer(r.content[hlen:], dtype="<f4")
    ok, detail = close(got.reshape(out["shape"]), y3)
    check(r.headers.get("Content-Type", "").startswith("application/octet-stream") and head.get("id") == "bin-1" and
          "data" not in out and size == y3.size * 4 and len(r.content) == hlen + size and ok,
          "binary input + binary output equal inferd run", "%s %s; %s" % (r.headers, head, detail))
else:
    check(False, "binary input + binary output", "HTTP %d %s" % (r.status_code, r.text[:300]))
# Binary input, JSON output.
data, headers = binary_body(x1, out_binary=False)
r = post(None, headers, data=data)
if r.status_code == 200:
    out = r.json()["outputs"][0]
    ok, detail = close(np.array(out["data"]).reshape(out["shape"]), y1)
    check(ok, "binary input, JSON output", detail)
else:
    check(False, "binary input, JSON output", "HTTP %d %s" % (r.status_code, r.text[:300]))
# JSON input, binary output asked for request-wide.
r = post(request(x1, parameters={"binary_data_output": True}))
hlen = int(r.headers.get("Inference-Header-Content-Length", "-1"))
if r.status_code == 200 and hlen > 0:
    ok, detail = close(np.frombuffer(r.content[hlen:], dtype="<f4").reshape(1, 10), y1)
    check(ok, "request-level binary_data_output", detail)
else:
    check(False, "request-level binary_data_output", "HTTP %d %s" % (r.status_code, r.text[:300]))

# ---- bad requests -----------------------------------------------------------------------------
small = np.zeros((1, 3, 224, 224), dtype=np.float32)
b = request(small)
b["inputs"][0]["datatype"] = "INT32"
expect_error("wrong datatype", 400, post(b), ["datatype", "INT32"])
b = request(small)
b["inputs"][0]["shape"] = [1, 3, 224, 225]
expect_error("wrong shape", 400, post(b), ["shape"])
b = request(small)
b["inputs"][0]["shape"] = [3, 224, 224]
expect_error("wrong rank", 400, post(b), ["rank"])
b = request(small)
b["inputs"][0]["data"] = b["inputs"][0]["data"][:-1]
expect_error("one value short", 400, post(b), ["values"])
b = request(small)
b["inputs"][0]["data"].append(1.0)
expect_error("one value too many", 400, post(b), ["values"])
b = request(small)
b["inputs"][0]["name"] = "image"
expect_error("wrong input name", 400, post(b), ["image", "input"])
b = request(small)
b["inputs"][0]["data"][5] = "x"
expect_error("a string in FP32 data", 400, post(b), ["number"])
b = request(small)
b["inputs"].append(dict(b["inputs"][0]))
expect_error("two inputs", 400, post(b), ["1 input"])
expect_error("unknown output", 400, post(request(small, outputs=[{"name": "probabilities"}])), ["probabilities"])
b = request(small)
b["inputs"][0]["shape"] = [9, 3, 224, 224]
b["inputs"][0]["data"] = []
expect_error("batch above job_queue_size", 400, post(b), ["job_queue_size"])
b = request(small)
b["inputs"][0]["shape"] = [0, 3, 224, 224]
b["inputs"][0]["data"] = []
expect_error("batch 0", 400, post(b), ["batch"])
expect_error("malformed JSON", 400, post(None, data=b'{"inputs": [{"name": "input", '), ["JSON"])
expect_error("JSON that is not an object", 400, post(None, data=b"[1, 2]"), ["object"])
expect_error("empty body", 400, post(None, data=b""))
data, headers = binary_body(small)
headers["Inference-Header-Content-Length"] = str(len(data) + 1)
expect_error("Inference-Header-Content-Length larger than the body", 400, post(None, headers, data=data),
             ["Inference-Header-Content-Length"])
headers["Inference-Header-Content-Length"] = "12abc"
expect_error("Inference-Header-Content-Length not a number", 400, post(None, headers, data=data),
             ["Inference-Header-Content-Length"])
data, headers = binary_body(small, size=small.size * 4 - 4)
expect_error("binary_data_size not matching the shape", 400, post(None, headers, data=data), ["binary_data_size"])
data, headers = binary_body(small, extra_bytes=b"\0\0\0\0")
expect_error("binary data longer than binary_data_size", 400, post(None, headers, data=data), ["binary"])
raw = small.tobytes()
js = json.dumps({"inputs": [{"name": "input", "shape": [1, 3, 224, 224], "datatype": "FP32",
                             "parameters": {"binary_data_size": len(raw)}}]}).encode()
expect_error("binary_data_size without the header", 400, post(None, data=js + raw), ["Inference-Header-Content-Length"])


class Answer:
    """What expect_error reads of a requests.Response, for an answer read with http.client."""

    def __init__(self, status, body, url):
        self.status_code, self.content, self.url = status, body, url
        self.text = body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.text)


def post_headers(header_list, data):
    """POST to URL with these (name, value) headers in this order, a name twice if listed
    twice (requests takes a dict)."""
    import http.client
    u = urlparse(URL)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.putrequest("POST", u.path)
    for name, value in list(AUTH.items()) + [("Content-Length", str(len(data)))] + header_list:
        c.putheader(name, value)
    c.endheaders(data)
    r = c.getresponse()
    answer = Answer(r.status, r.read(), URL)
    c.close()
    return answer


data, headers = binary_body(small)
length = headers["Inference-Header-Content-Length"]
r = post_headers([("Inference-Header-Content-Length", length)] * 2, data)
check(r.status_code == 200, "Inference-Header-Content-Length twice, the same value", "HTTP %d %s" % (r.status_code, r.text[:200]))
r = post_headers([("Inference-Header-Content-Length", length), ("Inference-Header-Content-Length", str(int(length) + 4))],
                 data)
expect_error("Inference-Header-Content-Length twice, two values", 400, r, ["Inference-Header-Content-Length", "twice"])
expect_error("unknown model", 404, post(request(small), url=BASE + "/v2/models/nosuch/infer"))
expect_error("unknown version", 404, post(request(small), url=BASE + "/v2/models/small/versions/9/infer"))
r = requests.post(URL, data=json.dumps(request(small)), timeout=60)
expect_error("no token", 401, r)
r = requests.get(URL, headers=AUTH, timeout=60)
expect_error("GET infer", 405, r)

# A client that goes away with its rows queued: the server must carry on.
u = urlparse(BASE)
body = json.dumps(request(x3)).encode()
for _ in range(3):
    s = socket.create_connection((u.hostname, u.port))
    s.sendall(("POST /v2/models/small/infer HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
               "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (KEY, len(body))).encode() + body)
    s.close()
json_infer("infer still right after clients went away mid-request", x3, y3)

# ---- a model that takes tensors, not images: the tensor handler ------------------------------
m5, mlp5 = np.load(os.path.join(WORK, "m5.npy")), np.load(os.path.join(WORK, "mlp5.npy"))
# mlp1 is the same MLP declaring a fixed batch of 1: five rows, five runs of one, the same answer
for model, what in (("mlp", "tensor model"), ("mlp1", "fixed-batch model")):
    name = "%s: v2 infer of 5 rows equals inferd run" % what
    r = post({"inputs": [{"name": "input", "shape": [5, 4], "datatype": "FP32", "data": m5.reshape(-1).tolist()}]},
             url=BASE + "/v2/models/%s/infer" % model)
    if r.status_code == 200:
        out = r.json()["outputs"][0]
        ok, detail = close(np.array(out["data"]).reshape(out["shape"]), mlp5)
        check(ok and out["shape"] == [5, 4], name, detail)
    else:
        check(False, name, "HTTP %d: %s" % (r.status_code, r.text[:300]))
r = requests.post(BASE + "/predictions/mlp", data=b"\xff\xd8\xff", headers=AUTH, timeout=60)
expect_error("tensor model: /predictions points at v2", 400, r, ["/v2/models/mlp/infer"])

# ---- metadata and health ----------------------------------------------------------------------
r = requests.get(BASE + "/v2", headers=AUTH, timeout=60)
check(r.status_code == 200 and "binary_tensor_data" in r.json().get("extensions", []),
      "server metadata lists binary_tensor_data", r.text[:200])
r = requests.get(BASE + "/v2/models/small", headers=AUTH, timeout=60)
check(r.status_code == 200 and r.json()["inputs"][0]["name"] == "input", "model metadata", r.text[:300])

# ---- a model with two outputs: a [N,4] and b [N,3] ----------------------------------------------
r = requests.get(BASE + "/v2/models/two", headers=AUTH, timeout=60)
check(r.status_code == 200 and [(o["name"], o["shape"]) for o in r.json()["outputs"]] == [("a", [-1, 4]), ("b", [-1, 3])],
      "two-output model: metadata lists both outputs", r.text[:300])
t5 = np.load(os.path.join(WORK, "t5.npy"))
want = {"a": np.load(os.path.join(WORK, "t5.a.npy")), "b": np.load(os.path.join(WORK, "t5.b.npy"))}
TWO = BASE + "/v2/models/two/infer"


def two_infer(name, outputs, names, binary=(), **extra):
    """5 rows; the answer must list `names` in that order, equal to PyTorch's; the ones
    in `binary` as binary tensor data after the JSON, in the order of the JSON."""
    body = request(t5, **extra)
    if outputs is not None:
        body["outputs"] = outputs
    r = post(body, url=TWO)
    if r.status_code != 200:
        check(False, name, "HTTP %d: %s" % (r.status_code, r.text[:300]))
        return
    hlen = int(r.headers.get("Inference-Header-Content-Length", len(r.content)))
    head = json.loads(r.content[:hlen])
    rest, problems = r.content[hlen:], []
    if [o["name"] for o in head["outputs"]] != names:
        problems.append("outputs %s" % [o["name"] for o in head["outputs"]])
    for o in head["outputs"]:
        if o["name"] not in names:
            continue
        if o["name"] in binary:
            size = o.get("parameters", {}).get("binary_data_size", -1)
            got, rest = np.frombuffer(rest[:size], dtype="<f4"), rest[size:]
            if "data" in o or size != want[o["name"]].size * 4:
                problems.append("%s: not binary as asked (%s)" % (o["name"], o))
                continue
        else:
            got = np.array(o.get("data", []))
        ok, detail = close(got.reshape(o["shape"]), want[o["name"]])
        if not ok or o["shape"] != list(want[o["name"]].shape):
            problems.append("%s: shape %s, %s" % (o["name"], o["shape"], detail))
    if rest:
        problems.append("%d bytes left after the binary outputs" % len(rest))
    check(not problems, name, "; ".join(problems))


two_infer("two-output model: infer answers both, in the model's order", None, ["a", "b"])
two_infer("two-output model: an empty \"outputs\" is all of them", [], ["a", "b"])
two_infer("two-output model: the outputs asked for, in the order asked", [{"name": "b"}, {"name": "a"}], ["b", "a"])
two_infer("two-output model: only b", [{"name": "b"}], ["b"])
two_infer("two-output model: b binary, a inline", [{"name": "b", "parameters": {"binary_data": True}}, {"name": "a"}],
          ["b", "a"], binary=("b",))
two_infer("two-output model: both binary, b first", [{"name": n, "parameters": {"binary_data": True}} for n in "ba"],
          ["b", "a"], binary=("a", "b"))
# binary_data_output is for outputs not named, as Triton reads it
two_infer("two-output model: binary_data_output, none named: both binary", None, ["a", "b"], binary=("a", "b"),
          parameters={"binary_data_output": True})
two_infer("two-output model: binary_data_output does not make a named output binary", [{"name": "b"}], ["b"],
          parameters={"binary_data_output": True})
expect_error("two-output model: an output asked for twice", 400,
             post(request(t5, outputs=[{"name": "a"}, {"name": "a"}]), url=TWO), ["twice"])
expect_error("two-output model: an unknown output names both", 400,
             post(request(t5, outputs=[{"name": "c"}]), url=TWO), ["'c'", "'a', 'b'"])
r = requests.get(BASE + "/v2/models/small/ready", headers=AUTH, timeout=60)
check(r.status_code == 200 and r.json().get("ready") is True, "model ready", r.text[:200])
r = requests.get(BASE + "/ping", timeout=60)
check(r.status_code == 200, "/ping 200 after all of it", r.text[:200])

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
