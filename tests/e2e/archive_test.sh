#!/bin/sh
# archive_test.sh - `inferd archive` end to end: the .mar it writes must be what
# torch-model-archiver writes, as Python's zipfile (what torch-model-archiver and most
# tools use) reads it; an existing archive is kept without --force and replaced with
# it; bad input is exit status 2 with one line on stderr. A model with its weights in a
# file beside it (ONNX external data) gets no .mar, and runs from a model directory
# that holds the file.
#
#   sh tests/e2e/archive_test.sh path/to/inferd WORKDIR
#
# Runs from the repository root so that the paths are the ones a user types
# (models/mobilenet_v2_imagenet.onnx). Python: $INFERD_PYTHON, else /usr/bin/python3.
set -eu
INFERD=$1
TMP=$2
PYTHON=${INFERD_PYTHON:-/usr/bin/python3}
case $INFERD in /*) ;; */*) INFERD=$(pwd)/$INFERD ;; esac
case $TMP in /*) ;; *) TMP=$(pwd)/$TMP ;; esac
cd "$(dirname "$0")/../.."
rm -rf "$TMP"
mkdir -p "$TMP"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect_error STATUS WANT CMD...: the command exits with STATUS and says WANT in one line
expect_error() {
  want_status=$1
  want=$2
  shift 2
  set +e
  "$@" >"$TMP/stdout" 2>"$TMP/stderr"
  status=$?
  set -e
  [ "$status" -eq "$want_status" ] || fail "$*: exit status $status, want $want_status ($(cat "$TMP/stderr"))"
  [ "$(wc -l <"$TMP/stderr")" -eq 1 ] || fail "$*: stderr is not one line: $(cat "$TMP/stderr")"
  grep -q -- "$want" "$TMP/stderr" || fail "$*: stderr lacks '$want': $(cat "$TMP/stderr")"
}

# check_mar MAR VERSION: the archive's entries, manifest fields and bytes
check_mar() {
  "$PYTHON" - "$1" "$2" <<'EOF'
import json, re, sys, zipfile
path, version = sys.argv[1], sys.argv[2]
z = zipfile.ZipFile(path)
assert z.testzip() is None, "a corrupt entry"
names = z.namelist()
assert names == ["mobilenet_v2_imagenet.onnx", "index_to_name.json", "MAR-INF/MANIFEST.json"], names
manifest = json.loads(z.read("MAR-INF/MANIFEST.json"))
assert list(manifest) == ["createdOn", "runtime", "model", "archiverVersion"], list(manifest)
assert re.fullmatch(r"\d\d/\d\d/\d{4} \d\d:\d\d:\d\d", manifest["createdOn"]), manifest["createdOn"]
assert manifest["runtime"] == "python", manifest["runtime"]
assert manifest["archiverVersion"], manifest
assert manifest["model"] == {
    "modelName": "m",
    "serializedFile": "mobilenet_v2_imagenet.onnx",
    "handler": "image_classifier",
    "modelVersion": version,
}, manifest["model"]
for name, source, method in [("mobilenet_v2_imagenet.onnx", "models/mobilenet_v2_imagenet.onnx", zipfile.ZIP_STORED),
                             ("index_to_name.json", "models/index_to_name.json", zipfile.ZIP_DEFLATED)]:
    assert z.read(name) == open(source, "rb").read(), name + " differs from " + source
    assert z.getinfo(name).compress_type == method, (name, z.getinfo(name).compress_type)
print("ok", path, manifest["model"])
EOF
}

# 1. the command from the issue
"$INFERD" archive --model-name m --serialized-file models/mobilenet_v2_imagenet.onnx --handler image_classifier \
  --extra-files models/index_to_name.json --export-path "$TMP" >"$TMP/stdout" 2>"$TMP/stderr" ||
  fail "inferd archive failed"
[ "$(cat "$TMP/stdout")" = "$TMP/m.mar" ] || fail "printed '$(cat "$TMP/stdout")', want $TMP/m.mar"
[ ! -s "$TMP/stderr" ] || fail "an image_classifier archive got a word on stderr: $(cat "$TMP/stderr")"
check_mar "$TMP/m.mar" 1.0

# 1b. a handler inferd does not serve (TorchServe's object_detector) is archived, for
# TorchServe, with one line of warning: the server would refuse the archive
"$INFERD" archive --model-name od --serialized-file models/mobilenet_v2_imagenet.onnx --handler object_detector \
  --export-path "$TMP" >"$TMP/stdout" 2>"$TMP/stderr" || fail "an object_detector archive failed"
[ "$(cat "$TMP/stdout")" = "$TMP/od.mar" ] && [ "$(wc -l <"$TMP/stderr")" = 1 ] &&
  grep -q "warning: inferd serves the handlers image_classifier, tensor, not 'object_detector'" "$TMP/stderr" ||
  fail "an object_detector archive: stdout '$(cat "$TMP/stdout")', stderr '$(cat "$TMP/stderr")'"
rm -f "$TMP/od.mar"

# 2. without --force an existing archive stays as it is
cp "$TMP/m.mar" "$TMP/m.mar.before"
expect_error 2 "already exists" "$INFERD" archive --model-name m --serialized-file models/mobilenet_v2_imagenet.onnx \
  --handler image_classifier --extra-files models/index_to_name.json --export-path "$TMP" --version 2.0
cmp -s "$TMP/m.mar" "$TMP/m.mar.before" || fail "the archive changed without --force"

# 3. with --force it is replaced
"$INFERD" archive --model-name m --serialized-file models/mobilenet_v2_imagenet.onnx --handler image_classifier \
  --extra-files models/index_to_name.json --export-path "$TMP" --version 2.0 --force >/dev/null || fail "--force failed"
check_mar "$TMP/m.mar" 2.0
ls "$TMP" | grep -v -e '^m.mar$' -e '^m.mar.before$' -e '^std' && fail "temporary files left in $TMP"

# 4. the directory form
"$INFERD" archive --model-name m --serialized-file models/mobilenet_v2_imagenet.onnx --handler image_classifier \
  --extra-files models/index_to_name.json --export-path "$TMP" --archive-format no-archive >/dev/null
"$PYTHON" -c "
import json, sys
m = json.load(open(sys.argv[1] + '/MAR-INF/MANIFEST.json'))['model']
assert m['serializedFile'] == 'mobilenet_v2_imagenet.onnx' and m['modelVersion'] == '1.0', m
assert open(sys.argv[1] + '/index_to_name.json', 'rb').read() == open('models/index_to_name.json', 'rb').read()
" "$TMP/m" || fail "no-archive directory"

# 4b. a model with its weights in weights.bin beside it (ONNX external data): no .mar
# (the server cannot read them from one), but a model directory with weights.bin as an
# extra file, where the model runs
mkdir -p "$TMP/src"
"$PYTHON" - "$TMP/src/mnet.onnx" <<'PY'
import sys
import onnx
from onnx import external_data_helper
m = onnx.load("models/mobilenet_v2_imagenet.onnx")
external_data_helper.convert_model_to_external_data(m, all_tensors_to_one_file=True, location="weights.bin",
                                                    size_threshold=1024)
onnx.save(m, sys.argv[1])
PY
expect_error 2 "mnet.onnx keeps [0-9]* tensors in files beside it (ONNX external data, the first in 'weights.bin')" \
  "$INFERD" archive --model-name ext --serialized-file "$TMP/src/mnet.onnx" --handler image_classifier \
  --export-path "$TMP"
[ ! -e "$TMP/ext.mar" ] || fail "a .mar of a model with external data was written"
"$INFERD" archive --model-name ext --serialized-file "$TMP/src/mnet.onnx" --handler image_classifier \
  --extra-files "$TMP/src/weights.bin" --export-path "$TMP" --archive-format no-archive >/dev/null ||
  fail "no-archive directory of a model with external data"
rm "$TMP/src/weights.bin"
"$INFERD" run "$TMP/ext/mnet.onnx" --bench --seconds 0.2 >"$TMP/stdout" 2>"$TMP/stderr" ||
  fail "the model directory's mnet.onnx with its weights.bin: $(cat "$TMP/stderr")"

# 5. bad input: exit status 2 and one line
expect_error 2 "nope.onnx" "$INFERD" archive --model-name x --serialized-file "$TMP/nope.onnx" --handler image_classifier \
  --export-path "$TMP"
expect_error 2 "not an .onnx file" "$INFERD" archive --model-name x --serialized-file models/index_to_name.json \
  --handler image_classifier --export-path "$TMP"
expect_error 2 "labels.json" "$INFERD" archive --model-name x --serialized-file models/mobilenet_v2_imagenet.onnx \
  --handler image_classifier --extra-files "$TMP/labels.json" --export-path "$TMP"
expect_error 2 "--handler is required" "$INFERD" archive --model-name x \
  --serialized-file models/mobilenet_v2_imagenet.onnx --export-path "$TMP"
expect_error 2 "model name 'a b'" "$INFERD" archive --model-name "a b" \
  --serialized-file models/mobilenet_v2_imagenet.onnx --handler image_classifier --export-path "$TMP"
expect_error 2 "export path" "$INFERD" archive --model-name x --serialized-file models/mobilenet_v2_imagenet.onnx \
  --handler image_classifier --export-path "$TMP/missing"
# names the archive reader refuses (a backslash, a control character): refused before
# anything is written, the name shown on one line
printf '{}' >"$TMP/back\\slash.json"
expect_error 2 "'back\\\\slash.json' cannot be an entry name" "$INFERD" archive --model-name x \
  --serialized-file models/mobilenet_v2_imagenet.onnx --handler image_classifier --extra-files "$TMP/back\\slash.json" \
  --export-path "$TMP"
mkdir -p "$TMP/odd"
printf 'x' >"$TMP/odd/$(printf 'new\nline.txt')"
expect_error 2 "'new\\\\x0aline.txt' cannot be an entry name" "$INFERD" archive --model-name x \
  --serialized-file models/mobilenet_v2_imagenet.onnx --handler image_classifier --extra-files "$TMP/odd" \
  --archive-format no-archive --export-path "$TMP"
[ ! -e "$TMP/x" ] || fail "a refused no-archive directory was written"
# --config-file: read as the server reads it, so a broken model-config.yaml is refused here
printf 'batchSize: 8\nmaxWorkers: many\n' >"$TMP/model-config.yaml"
expect_error 2 "model-config.yaml: line 2: maxWorkers: expected an integer" "$INFERD" archive --model-name x \
  --serialized-file models/mobilenet_v2_imagenet.onnx --handler image_classifier --config-file "$TMP/model-config.yaml" \
  --export-path "$TMP"
expect_error 2 "nothing.yaml" "$INFERD" archive --model-name x --serialized-file models/mobilenet_v2_imagenet.onnx \
  --handler image_classifier --config-file "$TMP/nothing.yaml" --export-path "$TMP"
printf 'batchSize: 8\nmaxWorkers: 2\n' >"$TMP/model-config.yaml"
"$INFERD" archive --model-name y --serialized-file models/mobilenet_v2_imagenet.onnx --handler image_classifier \
  --config-file "$TMP/model-config.yaml" --export-path "$TMP" >/dev/null
"$PYTHON" - "$TMP/y.mar" "$TMP/model-config.yaml" <<'EOF2' || fail "--config-file: the archive lacks it or its configFile"
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
assert json.loads(z.read("MAR-INF/MANIFEST.json"))["model"]["configFile"] == "model-config.yaml"
assert z.read("model-config.yaml") == open(sys.argv[2], "rb").read()
EOF2
expect_error 2 "unknown option" "$INFERD" archive --model-name x --model-file model.py
expect_error 2 "tgz" "$INFERD" archive --model-name x --archive-format tgz
[ ! -e "$TMP/x.mar" ] || fail "a refused archive was written"
echo "archive_test: all passed"
