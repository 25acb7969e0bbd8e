#!/usr/bin/env bash
# serve_v2.sh - KServe v2 / Open Inference Protocol infer against the real `inferd serve`:
# a small image classifier made here with onnx (Conv -> Relu -> GlobalAveragePool ->
# Flatten -> Gemm, [N,3,224,224] -> [N,10], random weights), served with token auth and
# batching on; serve_v2.py then checks with Python requests that JSON infer at batch 1
# and 3, nested data and binary tensor data in and out equal `inferd run` on the same
# input, the id echo, and every 400 / 401 / 404 / 405; /ping must still be 200 after
# all of it, and SIGTERM must exit 0. Beside it, make_tiny.py --mlp's [N,4] model as a
# bare .onnx: it takes no image, so it is served with the tensor handler, answers v2
# infer like `inferd run`, and /predictions on it is a 400 that points at v2. The same
# MLP declaring a fixed batch of 1 (an export without dynamic axes) is served with
# batchSize 1 whatever the config asks, and answers the same; one declaring a fixed
# batch of 2 is refused at registration. A model with two outputs of different sizes
# answers both, or those asked for in the order asked, inline or binary, equal to
# PyTorch's. A batch that fails at run time is an error answer and counts in the batch-
# size histogram, not in the latency ones. ~10 s.
#
#   serve_v2.sh INFERD SOURCE_DIR WORK_DIR
#
# Last, max_response_size: the two models again with a small limit (250, then 100
# bytes); answers below it are sent, larger ones (v2 JSON and binary, /predictions) are
# a 500 that names the size and the limit, and /ping stays 200 (~5 s more).
set -euo pipefail
INFERD=$1 SRC=$2 WORK=$3
PY=${INFERD_PYTHON:-/usr/bin/python3}
. "$SRC/tests/e2e/serve_lib.sh"
trap serve_cleanup EXIT

rm -rf "$WORK"
mkdir -p "$WORK/store"

"$PY" - "$WORK" <<'PY'
import os, sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

work = sys.argv[1]
rng = np.random.default_rng(7)
w = numpy_helper.from_array((rng.standard_normal((8, 3, 7, 7)) * 0.1).astype(np.float32), "w")
b = numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "b")
fc_w = numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32), "fc_w")
fc_b = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fc_b")
nodes = [
    helper.make_node("Conv", ["input", "w", "b"], ["conv"], name="conv", kernel_shape=[7, 7], strides=[4, 4],
                     pads=[3, 3, 3, 3]),
    helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
    helper.make_node("GlobalAveragePool", ["relu"], ["pool"], name="pool"),
    helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1),
    helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
]
graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
                          initializer=[w, b, fc_w, fc_b])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
onnx.checker.check_model(model)
onnx.save(model, os.path.join(work, "store", "small.onnx"))
# The same with its weights outside the .onnx, in small_ext.weights (ONNX external data)
from onnx import external_data_helper
external_data_helper.convert_model_to_external_data(model, all_tensors_to_one_file=True, location="small_ext.weights",
                                                    size_threshold=0)
onnx.save(model, os.path.join(work, "store", "small_ext.onnx"))
# Two outputs of different sizes, a = relu(x) [N,4] and b = sigmoid(x @ wb) [N,3]; the
# reference for 5 rows comes from PyTorch.
wb = (rng.standard_normal((4, 3)) * 0.5).astype(np.float32)
two = helper.make_graph(
    [helper.make_node("Relu", ["input"], ["a"], name="relu"), helper.make_node("MatMul", ["input", "wb"], ["xw"], name="mm"),
     helper.make_node("Sigmoid", ["xw"], ["b"], name="sigmoid")],
    "two", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
    [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]), helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 3])],
    initializer=[numpy_helper.from_array(wb, "wb")])
two = helper.make_model(two, opset_imports=[helper.make_opsetid("", 13)])
onnx.checker.check_model(two)
onnx.save(two, os.path.join(work, "store", "two.onnx"))
# Runs at batch 1 and 4 only (the sizes a worker of batchSize 4 checks at start): it
# reshapes [N,4] to [p(N),-1] with p(N) = N + 2(N-1)(N-4), which is N at 1 and 4 and
# negative at 2 and 3, so a batch of 2 fails at run time.
def i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)
row1 = helper.make_graph(
    [helper.make_node("Shape", ["input"], ["s"], name="shape"),
     helper.make_node("Slice", ["s", "zero", "one"], ["n"], name="n"),
     helper.make_node("Sub", ["n", "one"], ["n1"], name="n1"),
     helper.make_node("Sub", ["n", "four"], ["n4"], name="n4"),
     helper.make_node("Mul", ["n1", "n4"], ["q"], name="q"),
     helper.make_node("Mul", ["q", "two"], ["q2"], name="q2"),
     helper.make_node("Add", ["n", "q2"], ["p"], name="p"),
     helper.make_node("Concat", ["p", "minus1"], ["target"], name="target", axis=0),
     helper.make_node("Reshape", ["input", "target"], ["r"], name="reshape"),
     helper.make_node("Relu", ["r"], ["output"], name="relu")],
    "row1", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
    [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 4])],
    initializer=[i64("zero", [0]), i64("one", [1]), i64("two", [2]), i64("four", [4]), i64("minus1", [-1])])
onnx.save(helper.make_model(row1, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(work, "store", "row1.onnx"))
import torch
t5 = (rng.integers(-16, 16, size=(5, 4)) / 4).astype(np.float32)
np.save(os.path.join(work, "t5.npy"), t5)
np.save(os.path.join(work, "t5.a.npy"), torch.relu(torch.from_numpy(t5)).numpy())
np.save(os.path.join(work, "t5.b.npy"), torch.sigmoid(torch.from_numpy(t5) @ torch.from_numpy(wb)).numpy())
# Multiples of 1/8: exact in FP32, short in JSON.
x = (rng.integers(-512, 512, size=(3, 3, 224, 224)) / 8).astype(np.float32)
np.save(os.path.join(work, "x3.npy"), x)
np.save(os.path.join(work, "x1.npy"), x[:1])
PY

"$PY" "$SRC/tests/fixtures/make_tiny.py" "$WORK/store/mlp.onnx" --mlp
"$PY" "$SRC/tests/fixtures/make_tiny.py" "$WORK/store/mlp1.onnx" --mlp-fixed 1
"$PY" "$SRC/tests/fixtures/make_tiny.py" "$WORK/store/mlp2.onnx" --mlp-fixed 2
"$PY" -c 'import sys, numpy as np; np.save(sys.argv[1], (np.arange(20, dtype=np.float32).reshape(5, 4) - 9) / 4)' \
  "$WORK/m5.npy"
"$INFERD" run "$WORK/store/mlp.onnx" --input "$WORK/m5.npy" --output "$WORK/mlp5.npy" >/dev/null

# The reference: the same model and input through `inferd run`.
"$INFERD" run "$WORK/store/small.onnx" --input "$WORK/x3.npy" --output "$WORK/y3.npy" >/dev/null
"$INFERD" run "$WORK/store/small.onnx" --input "$WORK/x1.npy" --output "$WORK/y1.npy" >/dev/null

serve_ports
serve_config "$WORK/config.properties" \
  "model_store=$WORK/store" \
  "load_models=small=small.onnx,small_ext=small_ext.onnx,mlp=mlp.onnx,mlp1=mlp1.onnx,two=two.onnx,row1=row1.onnx" \
  "default_workers_per_model=1" \
  "number_of_netty_threads=2" \
  "job_queue_size=8" \
  "max_request_size=20000000" \
  "enable_model_api=true" \
  'models={"small": {"1.0": {"batchSize": 4, "maxBatchDelay": 20}}, "mlp1": {"1.0": {"batchSize": 8, "maxBatchDelay": 20}}, "two": {"1.0": {"batchSize": 4, "maxBatchDelay": 20}}, "row1": {"1.0": {"batchSize": 4, "maxBatchDelay": 20}}}'
serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground
serve_wait_ready 60
serve_keys "$WORK"

status=0
"$PY" "$SRC/tests/e2e/serve_v2.py" "http://127.0.0.1:$INFERENCE_PORT" "$INFERENCE_KEY" "$WORK" || status=1

# row1: one row answers, two rows (one batch) fail at run time with a JSON error
row1_infer() { # ROWS: HTTP status of a v2 infer of ROWS rows on row1; the body in $WORK/row1.json
  local data
  data=$(seq -s, 1 $((4 * $1)))
  curl -sS -o "$WORK/row1.json" -w '%{http_code}' -H "Authorization: Bearer $INFERENCE_KEY" \
    -H 'Content-Type: application/json' \
    -d "{\"inputs\": [{\"name\": \"input\", \"datatype\": \"FP32\", \"shape\": [$1, 4], \"data\": [$data]}]}" \
    "http://127.0.0.1:$INFERENCE_PORT/v2/models/row1/infer"
}
code=$(row1_infer 1)
[ "$code" = 200 ] || { echo "FAIL: row1, one row: HTTP $code $(cat "$WORK/row1.json")" >&2; status=1; }
code=$(row1_infer 2)
if [ "${code:0:1}" != 4 ] && [ "${code:0:1}" != 5 ] || ! grep -q "reshape" "$WORK/row1.json"; then
  echo "FAIL: row1, a batch of two rows should fail naming its Reshape: HTTP $code $(cat "$WORK/row1.json")" >&2
  status=1
fi

# TorchServe's counters see requests, inferd's histograms rows: serve_v2.py sent mlp1
# one v2 infer of 5 rows. The latency histograms count rows of batches that succeeded
# (row1: 1 of its 3 rows), the batch-size histogram every batch run (row1: 2).
curl -sS "http://127.0.0.1:$METRICS_PORT/metrics" >"$WORK/metrics.txt"
if ! "$PY" - "$WORK/metrics.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def value(name, model="mlp1"):
    m = re.search(r'^%s\{model_name="%s",[^}]*\} (\S+)$' % (re.escape(name), model), text, re.M)
    return float(m.group(1)) if m else None
requests, rows = value("ts_inference_requests_total"), value("inferd_inference_latency_milliseconds_count")
latency, queue = value("ts_inference_latency_microseconds"), value("ts_queue_latency_microseconds")
ok = requests == 1 and rows == 5 and latency is not None and queue is not None and latency > 0 and 0 <= queue <= latency
print("metrics of mlp1: requests %s, rows %s, latency %s us, queue %s us" % (requests, rows, latency, queue))
row1 = [value(n, "row1") for n in ("inferd_inference_latency_milliseconds_count", "inferd_queue_latency_milliseconds_count",
                                   "inferd_batch_size_count", "ts_inference_requests_total")]
print("metrics of row1: inference rows %s, queue rows %s, batches %s, requests %s" % tuple(row1))
if row1 != [1, 1, 2, 2]:
    print("FAIL: row1's failed batch should count in inferd_batch_size only")
    ok = False
sys.exit(0 if ok else 1)
PY
then
  echo "FAIL: the counters and histograms of mlp1 and row1" >&2
  status=1
fi

# A model whose batch axis is a number: served at that batch size, or refused.
described=$(curl -sS -H "Authorization: Bearer $MANAGEMENT_KEY" "http://127.0.0.1:$MANAGEMENT_PORT/models/mlp1")
if ! echo "$described" | "$PY" -c 'import json,sys; sys.exit(json.load(sys.stdin)[0]["batchSize"] != 1)'; then
  echo "FAIL: mlp1 declares a fixed batch of 1 but is described with: $described" >&2
  status=1
fi
if ! grep -q "mlp1: input 'input' declares a fixed batch size of 1: batchSize 8 lowered to 1" "$WORK/server.log"; then
  echo "FAIL: no warning that mlp1's batchSize was lowered" >&2
  status=1
fi
code=$(curl -sS -o "$WORK/mlp2.json" -w '%{http_code}' -X POST -H "Authorization: Bearer $MANAGEMENT_KEY" \
  "http://127.0.0.1:$MANAGEMENT_PORT/models?url=mlp2.onnx&synchronous=true")
if [ "$code" != 400 ] || ! grep -q "fixed batch size of 2" "$WORK/mlp2.json"; then
  echo "FAIL: registering mlp2 (fixed batch 2): HTTP $code $(cat "$WORK/mlp2.json")" >&2
  status=1
fi
# A .mar of small_ext.onnx alone, as another archiver would make it (`inferd archive`
# refuses to): its weights are not in it, and a .mar's model has no directory to find
# them in. Refused at registration, naming the tensor and file.
"$PY" - "$WORK/store/small_ext.onnx" "$WORK/store/small_mar.mar" <<'PY'
import json, sys, zipfile
with zipfile.ZipFile(sys.argv[2], "w") as z:
    z.writestr("MAR-INF/MANIFEST.json", json.dumps({"model": {"modelName": "small_mar", "modelVersion": "1.0",
                                                              "serializedFile": "small_ext.onnx"}}))
    z.write(sys.argv[1], "small_ext.onnx")
PY
code=$(curl -sS -o "$WORK/small_mar.json" -w '%{http_code}' -X POST -H "Authorization: Bearer $MANAGEMENT_KEY" \
  "http://127.0.0.1:$MANAGEMENT_PORT/models?url=small_mar.mar&synchronous=true")
if [ "$code" != 400 ] || ! grep -q "'small_ext.weights' outside the model file, and the model came without a directory" \
  "$WORK/small_mar.json"; then
  echo "FAIL: registering a .mar whose weights are external data: HTTP $code $(cat "$WORK/small_mar.json")" >&2
  status=1
fi

serve_stop 60
if [ "$SERVER_STATUS" != 0 ]; then
  echo "FAIL: the server exited with status $SERVER_STATUS after SIGTERM; its log:" >&2
  tail -20 "$WORK/server.log" >&2
  status=1
fi
if grep -Ei "AddressSanitizer|runtime error" "$WORK/server.log" >&2; then
  echo "FAIL: sanitizer report in the server log" >&2
  status=1
fi

# ---- max_response_size: a body with model output above it is not sent; 500 says why ----
# (sizes here: mlp's JSON answer 174 bytes for 1 row, ~390 for 8; binary 171 and 284;
# small's top-5 answer to /predictions ~150)
serve_jpeg chelsea "$WORK/chelsea.jpg"
mlp_rows() { # N [binary]: a v2 infer body of N rows for mlp
  "$PY" -c 'import json, sys
n = int(sys.argv[1])
body = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [n, 4], "data": [i / 4 - 3 for i in range(4 * n)]}]}
if len(sys.argv) > 2:
    body["parameters"] = {"binary_data_output": True}
print(json.dumps(body))' "$@"
}
icall() { # serve_lib.sh's call with the inference key ("" condition: a body that need not be JSON)
  call "$1" "$2" "$3" -H "Authorization: Bearer $INFERENCE_KEY" "${@:4}"
}
too_large() { # LIMIT: the condition on a 500 for a body above LIMIT (TorchServe's error JSON)
  echo "r['code'] == 500 and r['type'] == 'InternalServerException' and 'bytes, more than max_response_size ($1 bytes)' in r['message']"
}
too_large_v2() { # LIMIT: the same under /v2 (the Open Inference Protocol's error JSON)
  echo "list(r) == ['error'] and 'bytes, more than max_response_size ($1 bytes)' in r['error']"
}
mlp_ran() { # rows of mlp that have run (/metrics counts a row once its batch has ended)
  curl -s --max-time 60 "http://127.0.0.1:$METRICS_PORT/metrics" |
    awk 'index($0, "inferd_inference_latency_milliseconds_count{model_name=\"mlp\"") == 1 { v = $NF } END { print v + 0 }'
}
I="http://127.0.0.1"
for limit in 250 100; do
  serve_ports
  serve_config "$WORK/config.properties" \
    "model_store=$WORK/store" \
    "load_models=small=small.onnx,mlp=mlp.onnx" \
    "default_workers_per_model=1" \
    "job_queue_size=8" \
    "max_response_size=$limit"
  serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground
  serve_wait_ready 60 || fail "max_response_size=$limit: not ready"
  serve_keys "$WORK"
  V2="$I:$INFERENCE_PORT/v2/models/mlp/infer"
  if [ $limit = 250 ]; then
    icall "limit 250: v2 JSON, 1 row" 200 'r["outputs"][0]["shape"] == [1, 4]' -d "$(mlp_rows 1)" "$V2"
    icall "limit 250: v2 binary, 1 row" 200 '' -d "$(mlp_rows 1 binary)" "$V2"
    icall "limit 250: v2 JSON, 8 rows" 500 "$(too_large_v2 250)" -d "$(mlp_rows 8)" "$V2"
    icall "limit 250: v2 binary, 8 rows" 500 "$(too_large_v2 250)" -d "$(mlp_rows 8 binary)" "$V2"
    icall "limit 250: /predictions" 200 'len(r) == 5' -T "$WORK/chelsea.jpg" "$I:$INFERENCE_PORT/predictions/small"
  else
    icall "limit 100: /predictions" 500 "$(too_large 100)" -T "$WORK/chelsea.jpg" "$I:$INFERENCE_PORT/predictions/small"
    icall "limit 100: v2 JSON, 1 row" 500 "$(too_large_v2 100)" -d "$(mlp_rows 1)" "$V2"
    # 8 x 4 floats binary are 128 bytes: refused before any row runs (the rows mlp has
    # run, as /metrics counts them, do not change)
    ran_before=$(mlp_ran)
    icall "limit 100: v2 binary, 8 rows (at least 128 bytes)" 500 \
      "$(too_large_v2 100) and 'at least 128 bytes' in r['error']" -d "$(mlp_rows 8 binary)" "$V2"
    ran_after=$(mlp_ran)
    [ "$ran_after" = "$ran_before" ] && echo "ok   limit 100: none of the 8 rows ran ($ran_before rows before and after)" ||
      fail "limit 100: the refused request ran rows ($ran_before rows before, $ran_after after)"
  fi
  icall "limit $limit: still healthy" 200 'r["status"] == "Healthy"' "$I:$INFERENCE_PORT/ping"
  serve_stop 60
  [ "$SERVER_STATUS" = 0 ] || fail "limit $limit: the server exited with status $SERVER_STATUS after SIGTERM"
  if grep -Ei "AddressSanitizer|runtime error" "$WORK/server.log" >&2; then fail "limit $limit: sanitizer report"; fi
done
# ---- a v2 infer of a few rows on an idle model is one batch, not held ----
# Its rows are queued together (sched_submit_many). Queued one by one, an idle worker woken
# by the first row could take it alone: the request ran in two or three batches, and when
# that first batch outlasted the other rows' submits, it found them queued as if the model
# were busy and held them open for maxBatchDelay (here 30 s: past curl's 10; a 3-row
# request to MobileNetV2 with maxBatchDelay 500 took 0.52 s instead of 0.03).
serve_ports
serve_config "$WORK/config.properties" \
  "model_store=$WORK/store" \
  "load_models=mlp=mlp.onnx" \
  "default_workers_per_model=1" \
  "job_queue_size=8" \
  'models={"mlp": {"1.0": {"batchSize": 4, "maxBatchDelay": 30000}}}'
serve_start "$WORK" --ts-config "$WORK/config.properties" --foreground
serve_wait_ready 60 || fail "idle batches: not ready"
serve_keys "$WORK"
held=0
for i in $(seq 1 30); do
  n=$((i % 3 + 2))
  code=$(curl -s --max-time 10 -o "$WORK/body" -w '%{http_code}' -H "Authorization: Bearer $INFERENCE_KEY" \
    -d "$(mlp_rows $n)" "$I:$INFERENCE_PORT/v2/models/mlp/infer") || code=000
  [ "$code" = 200 ] || { held=$((held + 1)); echo "     request $i of $n rows: HTTP $code"; break; }
done
[ "$held" = 0 ] && echo "ok   30 v2 infers of 2-4 rows on an idle model answered at once (maxBatchDelay 30 s)" ||
  fail "a v2 infer of a few rows on an idle model waited for maxBatchDelay"
batches=$(curl -s --max-time 60 "http://127.0.0.1:$METRICS_PORT/metrics" |
  awk 'index($0, "inferd_batch_size_count{model_name=\"mlp\"") == 1 { v = $NF } END { print v + 0 }')
[ "$held" != 0 ] || [ "$batches" = 30 ] && echo "ok   one batch per request ($batches batches)" ||
  fail "30 requests of 2-4 rows ran in $batches batches, not 30"
# More rows than batchSize: the rows left over from the full batch, with nothing accepted
# since, run at once too (they were held for maxBatchDelay as if the model were busy).
for i in 1 2 3; do
  icall "a v2 infer of 6 rows, batchSize 4, on an idle model ($i)" 200 'r["outputs"][0]["shape"] == [6, 4]' \
    --max-time 10 -d "$(mlp_rows 6)" "$I:$INFERENCE_PORT/v2/models/mlp/infer"
done
serve_stop 60
[ "$SERVER_STATUS" = 0 ] || fail "idle batches: the server exited with status $SERVER_STATUS after SIGTERM"

[ "$failures" = 0 ] || status=1
[ $status = 0 ] && echo "PASS serve_v2" || echo "FAIL serve_v2" >&2
exit $status
