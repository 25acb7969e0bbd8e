#!/usr/bin/python3
"""Make the bad inputs of tests/e2e/malformed_test.sh, and the list of cases.

What it makes, in OUT (the only argument):
  good.onnx, good.npy       a small valid model (Conv 3->4 3x3 + Relu, input 'input'
                            [N,3,8,8], checked by onnx.checker) and a valid batch for it
  trunc_K.onnx              good.onnx cut at several points inside its bytes; only cuts
                            that Python's protobuf also refuses to parse are kept, so each
                            one is a truncated message, never a shorter valid one
  garbage.onnx              4096 seeded random bytes (checked not to parse as ONNX)
  empty.onnx                0 bytes
  short_raw_data.onnx       the Conv weight initializer declares [4,3,3,3] float32 (432
                            bytes) but its raw_data holds 100
  unsupported_nms.onnx      a NonMaxSuppression node (an ONNX op inferd does not run)
  unsupported_custom.onnx   an op in a custom domain (com.example.Frobnicate)
  zeros_int64.onnx          good.onnx's Conv, then three initializers: 40000 int64 zeros as
                            packed int64_data (40 KB in the file, 320 KB unpacked) and two
                            70000-byte raw_data floats, the last declared [4] (so the load
                            fails there): the loader's file-page dropper must not take the
                            unpacked size of the zeros for their size in the file
  rank3.npy                 float32 [3,8,8]: batch axis missing
  channels4.npy             float32 [1,4,8,8]: wrong channel count
  float64.npy, int64.npy    right shape, wrong dtype
  truncated.npy             good.npy minus its last 10 bytes
  not_npy.npy               a text file with an .npy name
  hidden_fortran.npy        a Fortran-order [1,3,8,8] whose header has an extra key 'note'
                            holding the text "'fortran_order': False" before the real key
  after_dict.npy            good.npy's header with text after the dict's '}'
  two_inputs.onnx           Add(a, b): two inputs, where `inferd run` feeds one
  ext_*.onnx, ext/          good.onnx with its Conv weight as external data that is wrong:
                            a missing file, a location outside the model's directory
                            (absolute, or through ".."), a file of 100 bytes for the
                            432 the weight needs, an offset past its end, a length past
                            it, an offset that is not a number, an unknown key, no
                            location, a directory or a FIFO with no writer as the
                            location (it must not wait for one), raw data as well
  cases.tsv                 one case a line: NAME <tab> MODEL <tab> INPUT <tab> REGEX, where
                            REGEX (grep -Ei) must match inferd's one-line message; MODEL
                            or INPUT may name a file that does not exist on purpose

Why: `inferd run` must answer every bad file with exit status 2 and one line that
names the problem (STYLE.md: validate at the border, never abort on outside input).
Everything is deterministic (fixed seeds); a rerun writes the same bytes.

Usage: make_malformed.py OUT      (run with /usr/bin/python3; needs onnx and numpy)
"""

import os
import sys

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
RNG = np.random.default_rng(7)


def make_model(nodes, inputs, outputs, initializers, check=True, domains=()):
    graph = helper.make_graph(nodes, "malformed", inputs, outputs, initializers)
    opsets = [helper.make_opsetid("", OPSET)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(graph, producer_name="inferd-malformed-test", opset_imports=opsets)
    m.ir_version = 7
    if check:
        onnx.checker.check_model(m, full_check=True)
    return m


def conv_model(weight=None):
    w = numpy_helper.from_array((RNG.standard_normal((4, 3, 3, 3)) * 0.5).astype(np.float32), "w")
    if weight is not None:
        weight(w)
    b = numpy_helper.from_array(np.zeros(4, np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["input", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["output"], name="relu"),
    ]
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 8, 8])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 4, 8, 8])
    return make_model(nodes, [x], [y], [w, b], check=weight is None)


def parses(data):
    try:
        onnx.ModelProto().ParseFromString(data)
        return True
    except DecodeError:
        return False


def write(out, name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


def main():
    if len(sys.argv) != 2:
        print("usage: make_malformed.py OUT", file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    cases = []  # (name, model, input, regex)

    good = conv_model().SerializeToString()
    write(out, "good.onnx", good)
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(os.path.join(out, "good.npy"), x)

    # Truncations: early (inside the header), in the graph's framing, inside the weight
    # bytes, and one byte short. Cuts that happen to end on a field boundary would be
    # a valid, smaller message (a different test); they are skipped.
    kept = 0
    for frac in (0.02, 0.1, 0.25, 0.5, 0.75, 0.9):
        for cut in range(int(len(good) * frac), len(good)):
            if not parses(good[:cut]):
                break
        name = "trunc_%d.onnx" % kept
        write(out, name, good[:cut])
        cases.append(("truncated onnx (%d of %d bytes)" % (cut, len(good)), name, "good.npy", "protobuf"))
        kept += 1
    assert not parses(good[:-1])
    write(out, "trunc_last.onnx", good[:-1])
    cases.append(("truncated onnx (one byte short)", "trunc_last.onnx", "good.npy", "protobuf"))

    garbage = RNG.integers(0, 256, 4096, dtype=np.uint8).tobytes()
    assert not parses(garbage)
    write(out, "garbage.onnx", garbage)
    cases.append(("random bytes as .onnx", "garbage.onnx", "good.npy", "protobuf"))

    write(out, "empty.onnx", b"")
    cases.append(("empty model file", "empty.onnx", "good.npy", "empty"))
    cases.append(("missing model file", "no_such_model.onnx", "good.npy", "no such file"))

    def shorten(w):
        w.raw_data = w.raw_data[:100]

    write(out, "short_raw_data.onnx", conv_model(shorten).SerializeToString())
    cases.append(("Conv weight raw_data shorter than its dims", "short_raw_data.onnx", "good.npy",
                  "raw data is 100 bytes.*432"))

    def add_zeros(m):
        zeros = helper.make_tensor("zeros", TensorProto.INT64, [40000], [0] * 40000)
        big = helper.make_tensor("big", TensorProto.FLOAT, [17500], RNG.bytes(70000), raw=True)
        lying = helper.make_tensor("lying", TensorProto.FLOAT, [4], RNG.bytes(16), raw=True)
        lying.raw_data = RNG.bytes(70000)
        m.graph.initializer.extend([zeros, big, lying])
        return m

    write(out, "zeros_int64.onnx", add_zeros(conv_model()).SerializeToString())
    cases.append(("int64 zeros, then a raw_data longer than its dims", "zeros_int64.onnx", "good.npy",
                  "raw data is 70000 bytes.*16"))

    boxes = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 16, 4])
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 1, 16])
    sel = helper.make_tensor_value_info("selected", TensorProto.INT64, [None, 3])
    nms = helper.make_node("NonMaxSuppression", ["input", "scores"], ["selected"], name="nms")
    write(out, "unsupported_nms.onnx", make_model([nms], [boxes, scores], [sel], []).SerializeToString())
    cases.append(("unsupported op NonMaxSuppression", "unsupported_nms.onnx", "good.npy",
                  "NonMaxSuppression.*not supported"))

    x_info = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 8, 8])
    y_info = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3, 8, 8])
    custom = helper.make_node("Frobnicate", ["input"], ["output"], name="frob", domain="com.example")
    m = make_model([custom], [x_info], [y_info], [], check=False, domains=["com.example"])
    write(out, "unsupported_custom.onnx", m.SerializeToString())
    cases.append(("op in a custom domain", "unsupported_custom.onnx", "good.npy",
                  "com\\.example.*Frobnicate.*not supported"))

    # nn.GELU as torch.onnx.export writes it before opset 20, but its last Mul is some
    # other op of a custom domain: the chain must not be fused into a Gelu (it was, and
    # ran); unfused, its Erf is the first op the engine refuses.
    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
              (("sqrt2", 1.41421356), ("one", 1.0), ("half", 0.5))]
    gelu = [
        helper.make_node("Div", ["input", "sqrt2"], ["d"], name="div"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "one"], ["a"], name="add"),
        helper.make_node("Mul", ["input", "a"], ["m"], name="mul"),
        helper.make_node("Mul", ["m", "half"], ["output"], name="mul_custom", domain="com.example"),
    ]
    m = make_model(gelu, [x_info], [y_info], consts, check=False, domains=["com.example"])
    write(out, "gelu_custom_mul.onnx", m.SerializeToString())
    cases.append(("GELU chain ending in a custom-domain Mul", "gelu_custom_mul.onnx", "good.npy",
                  "(Erf|com\\.example\\.Mul).*not supported"))

    np.save(os.path.join(out, "rank3.npy"), x[0])
    cases.append(("input of rank 3", "good.onnx", "rank3.npy", "expected rank 4"))
    np.save(os.path.join(out, "channels4.npy"), RNG.standard_normal((1, 4, 8, 8)).astype(np.float32))
    cases.append(("input with 4 channels, model wants 3", "good.onnx", "channels4.npy", "expected shape"))
    np.save(os.path.join(out, "float64.npy"), x.astype(np.float64))
    cases.append(("float64 input", "good.onnx", "float64.npy", "float32"))
    np.save(os.path.join(out, "int64.npy"), np.zeros((1, 3, 8, 8), np.int64))
    cases.append(("int64 input", "good.onnx", "int64.npy", "expected float32.*int64"))
    with open(os.path.join(out, "good.npy"), "rb") as f:
        good_npy = f.read()
    write(out, "truncated.npy", good_npy[:-10])
    cases.append(("truncated .npy", "good.onnx", "truncated.npy", "npy.*bytes"))
    write(out, "not_npy.npy", b"this is not a NumPy file\n" * 8)
    cases.append(("text file named .npy", "good.onnx", "not_npy.npy", "npy.*magic"))
    # Headers numpy.load refuses must be refused here too, not searched for their keys:
    # an extra key whose string holds "'fortran_order': False" in front of the real
    # 'fortran_order': True (a search took the first, read Fortran-order data as C order
    # and exited 0), and text after the dict's '}'.
    def npy_v1(header, data):
        header += " " * (-(10 + len(header) + 1) % 64) + "\n"
        return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1") + data
    fortran = np.asfortranarray(x)
    write(out, "hidden_fortran.npy",
          npy_v1("{'note': \"'fortran_order': False\", 'descr': '<f4', 'fortran_order': True, 'shape': (1, 3, 8, 8), }",
                 fortran.tobytes(order="F")))
    cases.append(("extra key hiding fortran_order: True", "good.onnx", "hidden_fortran.npy", "npy.*key 'note'"))
    write(out, "after_dict.npy",
          npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 8, 8), } junk", x.tobytes()))
    cases.append(("text after the header dict", "good.onnx", "after_dict.npy", "npy.*after the header"))
    cases.append(("missing input file", "good.onnx", "no_such_input.npy", "no such file"))

    # two inputs: `inferd run` feeds one (with --input, and with --bench)
    a_info = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 3])
    b_info = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", 3])
    s_info = helper.make_tensor_value_info("s", TensorProto.FLOAT, ["N", 3])
    m = make_model([helper.make_node("Add", ["a", "b"], ["s"], name="add")], [a_info, b_info], [s_info], [])
    write(out, "two_inputs.onnx", m.SerializeToString())
    np.save(os.path.join(out, "two_rows.npy"), np.zeros((2, 3), np.float32))
    cases.append(("a model with two inputs", "two_inputs.onnx", "two_rows.npy", "2 inputs"))

    # External data (the weight's bytes in a file beside the model) that is wrong
    os.makedirs(os.path.join(out, "ext"), exist_ok=True)
    write(out, "ext/short.bin", RNG.bytes(100))
    if not os.path.exists(os.path.join(out, "ext/fifo")):
        os.mkfifo(os.path.join(out, "ext/fifo"))

    def external(name, entries, keep_raw=False):
        def make(w):
            if not keep_raw:
                w.ClearField("raw_data")
            w.data_location = TensorProto.EXTERNAL
            for key, value in entries:
                e = w.external_data.add()
                e.key, e.value = key, value
        write(out, name, conv_model(make).SerializeToString())

    ext_cases = [
        ("ext_missing.onnx", [("location", "ext/no_such.bin")], False, "external data 'ext/no_such.bin'.*no such file"),
        ("ext_absolute.onnx", [("location", "/etc/hostname")], False, "'/etc/hostname' is not a relative path inside"),
        ("ext_dotdot.onnx", [("location", "ext/../../good.npy")], False, "not a relative path inside"),
        ("ext_short.onnx", [("location", "ext/short.bin")], False, "'ext/short.bin' is 100 bytes.*need 432"),
        ("ext_offset.onnx", [("location", "ext/short.bin"), ("offset", "1000")], False, "offset 1000 is past the end"),
        ("ext_length.onnx", [("location", "ext/short.bin"), ("offset", "4"), ("length", "432")], False,
         "has 96 bytes from offset 4, not the 432 of its length"),
        ("ext_bad_offset.onnx", [("location", "ext/short.bin"), ("offset", "-4")], False,
         "offset '-4' is not a byte count"),
        ("ext_unknown_key.onnx", [("location", "ext/short.bin"), ("frob", "1")], False, "unknown external data key 'frob'"),
        ("ext_no_location.onnx", [("offset", "0")], False, "external data without a location"),
        ("ext_directory.onnx", [("location", "ext")], False, "'ext' is not a regular file \\(a directory\\)"),
        ("ext_fifo.onnx", [("location", "ext/fifo")], False, "'ext/fifo' is not a regular file \\(a FIFO\\)"),
        ("ext_and_raw.onnx", [("location", "ext/short.bin")], True, "both raw data and external data"),
    ]
    for name, entries, keep_raw, regex in ext_cases:
        external(name, entries, keep_raw)
        cases.append(("external data: " + name[4:-5].replace("_", " "), name, "good.npy", "initializer 'w': .*" + regex))

    with open(os.path.join(out, "cases.tsv"), "w") as f:
        for case in cases:
            assert all("\t" not in field and "\n" not in field for field in case)
            f.write("\t".join(case) + "\n")


if __name__ == "__main__":
    main()
