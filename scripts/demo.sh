#!/usr/bin/env bash
# The main job on the default model: install, build, start `inferd serve` on the
# pretrained MobileNetV2 in models/, classify a real photo through HTTP as a TorchServe
# client does (curl -T photo /predictions/mobilenet with the key from key_file.json),
# print the answer, stop the server. The photo is Debian's python3-skimage "chelsea"
# (a cat); the server decodes and preprocesses it itself (Resize 256, CenterCrop 224,
# normalize, as torchvision does). Ports are picked free; the server runs in build/demo
# and is stopped on every exit path.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target inferd >/dev/null
work=build/demo
rm -rf "$work"
mkdir -p "$work"
photo=/usr/lib/python3/dist-packages/skimage/data/chelsea.png

read -r port mport xport < <(/usr/bin/python3 -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
cat >"$work/config.properties" <<EOF
inference_address=http://127.0.0.1:$port
management_address=http://127.0.0.1:$mport
metrics_address=http://127.0.0.1:$xport
model_store=$PWD/models
load_models=mobilenet=mobilenet_v2_imagenet.onnx
EOF
(cd "$work" && exec ../inferd serve --ts-config config.properties --foreground >server.log 2>&1) &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 600); do # up to 60 s
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/ping")" = 200 ] && break
  kill -0 $server 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.1
done
key=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["inference"]["key"])' "$work/key_file.json")
curl -sS --fail-with-body -H "Authorization: Bearer $key" -T "$photo" \
  "http://127.0.0.1:$port/predictions/mobilenet" >"$work/answer.json"
/usr/bin/python3 - "$work/answer.json" <<'PY'
import json, sys
answer = json.load(open(sys.argv[1]))
print("chelsea.png via POST /predictions/mobilenet (inferd serve, MobileNetV2):")
for label, p in answer.items():
    print("  %-14s %.3f" % (label, p))
PY
kill -TERM $server
wait $server
trap - EXIT
