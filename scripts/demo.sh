#!/usr/bin/env bash
# The main job on the default model: install, build, classify a real photo with the
# pretrained MobileNetV2 in models/ through `inferd run`, print the top-5 classes.
# The photo is Debian's python3-skimage "chelsea" (a cat), preprocessed exactly as
# torchvision does (Resize 256, CenterCrop 224, normalize) by tests/fixtures/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target inferd >/dev/null
work=build/demo
mkdir -p "$work"
/usr/bin/python3 tests/fixtures/make_cat_input.py --out "$work" \
  --model models/mobilenet_v2_imagenet.onnx --labels models/index_to_name.json >/dev/null
build/inferd run models/mobilenet_v2_imagenet.onnx --input "$work/chelsea.input.npy" \
  --output "$work/chelsea.logits.npy"
/usr/bin/python3 - "$work/chelsea.logits.npy" models/index_to_name.json <<'PY'
import json, sys
import numpy as np
logits = np.load(sys.argv[1])[0].astype(np.float64)
labels = json.load(open(sys.argv[2]))
p = np.exp(logits - logits.max())
p /= p.sum()
print("chelsea.png (inferd, MobileNetV2):")
for i in np.argsort(-p)[:5]:
    print("  %-14s %.3f" % (labels.get(str(i), str(i)), p[i]))
PY
