#!/usr/bin/python3
"""Write the seed corpus of the libFuzzer targets (tests/fuzz/fuzz_onnx.c, fuzz_npy.c).

What it makes, in OUT (the only argument):
  OUT/onnx/NAME.onnx           tiny valid models, built with onnx.helper, each checked
                               by onnx.checker, float32 input 'x' with a dynamic batch
                               axis:
                                 conv_relu      Conv(3->4, 3x3, pad 1) + bias, Relu
                                 gemm           Gemm(16 -> 8, transB) with a bias row
                                 reshape_chain  Flatten, then the Shape -> Gather ->
                                                Unsqueeze -> Concat -> Reshape chain
                                                torch.onnx.export emits, Transpose
                                 concat         Relu and Sigmoid branches, Concat(axis 1)
                                                and a Concat of constants
                                 residual       Conv, BatchNormalization, Add (residual),
                                                Clip, GlobalAveragePool, Flatten, MatMul,
                                                Softmax, typed float_data initializers
                                                and a Constant node
                                 attention_bits Slice with steps, Pad (reflect), Einsum,
                                                a ScatterND of constants, Add
                                 densenet_16_32 DenseNet's pattern: Conv, then
                                                BatchNormalization -> Relu -> Conv
                                                (no Conv before the BN: it keeps the
                                                Relu), Concat of both Convs' outputs
                                                (16 + 16), a Pad by zeros (int64
                                                pads [0]*8) -> AveragePool, BN ->
                                                Relu -> Conv, another Concat (32 + 16)
                                 densenet_8_24  the same with 8 + 16 channels (24: no
                                                whole channel block of 16 for the
                                                first input) and a fixed batch of 4,
                                                the batch from which Convs write
                                                nChw16c: its plan mixes layouts at
                                                each Concat (compiled at load, run by
                                                the fuzzer's batch-4 run)
                               plus, when torch imports, torch_cnn.onnx: a small CNN
                               exported by torch.onnx.export (opset 13), so that the
                               corpus holds an exporter's own framing and names
  OUT/onnx/NAME.cutK.onnx      each model cut at a quarter, half, three quarters and
                               one byte short (the loader must refuse them cleanly)
  OUT/npy/*.npy                small .npy files: every dtype inferd reads, format
                               versions 1.0, 2.0 and 3.0, rank 0 to 4, and files it must
                               refuse: float64, big-endian, Fortran order, truncated
                               data, truncated header, bad magic

Why: libFuzzer mutates from these. A corpus of valid models gets the fuzzer past the
protobuf parse straight into graph validation, the passes and plan compilation.
Seeds are kept tiny (a few hundred bytes) because libFuzzer's default -max_len is
the largest seed. Everything is seeded/deterministic; a rerun writes the same bytes.

Usage: make_corpus.py OUT      (run with /usr/bin/python3; needs onnx and numpy)
The onnx/ and npy/ subdirectories are emptied first. Prints one summary line.
"""

import io
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
RNG = np.random.default_rng(20240601)


def weights(*shape, rng=None):
    return ((rng or RNG).standard_normal(shape) * 0.5).astype(np.float32)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(name, nodes, inputs, outputs, initializers, opset=OPSET):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializers)
    m = helper.make_model(graph, producer_name="inferd-fuzz-corpus",
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    onnx.checker.check_model(m, full_check=True)
    return m.SerializeToString()


def x_input(*dims):
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *dims])


def y_output(*dims, name="y"):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", *dims])


def conv_relu():
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    return model("conv_relu", nodes, [x_input(3, 8, 8)], [y_output(4, 8, 8)],
                 [init("w", weights(4, 3, 3, 3)), init("b", weights(4))])


def gemm():
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)]
    return model("gemm", nodes, [x_input(16)], [y_output(8)], [init("w", weights(8, 16)), init("b", weights(8))])


def reshape_chain():
    nodes = [
        helper.make_node("Flatten", ["x"], ["flat"], name="flatten", axis=1),
        helper.make_node("Shape", ["flat"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"], name="unsqueeze"),
        helper.make_node("Concat", ["batch1", "rest"], ["target"], name="concat_shape", axis=0),
        helper.make_node("Reshape", ["flat", "target"], ["r"], name="reshape"),
        helper.make_node("Transpose", ["r"], ["y"], name="transpose", perm=[0, 2, 1]),
    ]
    inits = [init("zero", np.array(0, np.int64)), init("axes0", np.array([0], np.int64)),
             init("rest", np.array([4, 8], np.int64))]
    return model("reshape_chain", nodes, [x_input(2, 4, 4)], [y_output(8, 4)], inits)


def concat():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"),
        helper.make_node("Concat", ["a", "s"], ["y"], name="concat", axis=1),
        helper.make_node("Concat", ["k1", "k2"], ["k"], name="concat_consts", axis=0),
        helper.make_node("Reshape", ["x", "k"], ["z"], name="reshape"),
    ]
    inits = [init("k1", np.array([-1], np.int64)), init("k2", np.array([48], np.int64))]
    return model("concat", nodes, [x_input(3, 4, 4)], [y_output(6, 4, 4), y_output(48, name="z")], inits)


def attention_bits():
    """Slice with steps, Pad in reflect mode, an Einsum, and a ScatterND folded at load."""
    nodes = [
        helper.make_node("Slice", ["x", "s0", "s1", "ax2", "step2"], ["s"], name="slice_steps"),
        helper.make_node("Pad", ["s", "pads"], ["p"], name="pad_reflect", mode="reflect"),
        helper.make_node("Einsum", ["p", "p"], ["e"], name="einsum", equation="nid,njd->nij"),
        helper.make_node("ScatterND", ["mask", "rows", "fill"], ["m"], name="scatter"),
        helper.make_node("Add", ["e", "m"], ["y"], name="add_mask"),
    ]
    inits = [init("s0", np.array([0], np.int64)), init("s1", np.array([6], np.int64)),
             init("ax2", np.array([2], np.int64)), init("step2", np.array([2], np.int64)),
             init("pads", np.array([0, 0, 1, 0, 0, 1], np.int64)), init("mask", np.zeros((4, 4), np.float32)),
             init("rows", np.array([[1], [3]], np.int64)), init("fill", np.full((2, 4), -100.0, np.float32))]
    return model("attention_bits", nodes, [x_input(4, 6)], [y_output(4, 4)], inits)


def densenet(name, c0, growth, batch="N"):
    """Conv, BN -> Relu -> Conv, Concat, Pad by zeros -> AveragePool, BN -> Relu -> Conv,
    Concat: the dense block and transition of torchvision's DenseNet, 1x1 convolutions
    to keep the seed small. Its own generator, so that the other seeds keep their bytes."""
    cin, c1 = 4, c0 + growth
    rng = np.random.default_rng(c0 * 1000 + growth)

    def w(*shape):
        return weights(*shape, rng=rng)

    def bn(tag, src, c, out):
        return helper.make_node("BatchNormalization", [src, tag + "_s", tag + "_b", tag + "_m", tag + "_v"], [out],
                                name=tag, epsilon=1e-5)

    def bn_inits(tag, c):
        return [init(tag + "_s", w(c) + 1), init(tag + "_b", w(c)), init(tag + "_m", w(c)),
                init(tag + "_v", np.abs(w(c)) + 0.5)]

    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", kernel_shape=[1, 1]),
        bn("bn1", "c0", c0, "b1"),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w1"], ["c1"], name="conv1", kernel_shape=[1, 1]),
        helper.make_node("Concat", ["c0", "c1"], ["cat1"], name="concat1", axis=1),
        helper.make_node("Pad", ["cat1", "pads"], ["p"], name="pad_zeros", mode="constant"),
        helper.make_node("AveragePool", ["p"], ["pool"], name="avgpool", kernel_shape=[2, 2], strides=[2, 2]),
        bn("bn2", "pool", c1, "b2"),
        helper.make_node("Relu", ["b2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w2", "bias2"], ["c2"], name="conv2", kernel_shape=[1, 1]),
        helper.make_node("Concat", ["pool", "c2"], ["y"], name="concat2", axis=1),
    ]
    inits = [init("w0", w(c0, cin, 1, 1)), *bn_inits("bn1", c0), init("w1", w(growth, c0, 1, 1)),
             init("pads", np.zeros(8, np.int64)), *bn_inits("bn2", c1), init("w2", w(growth, c1, 1, 1)),
             init("bias2", w(growth))]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, cin, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, c1 + growth, 2, 2])
    return model(name, nodes, [x], [y], inits)


def residual():
    def typed(name, array):  # float_data instead of raw_data
        return helper.make_tensor(name, TensorProto.FLOAT, array.shape, array.flatten().tolist())

    c = 4
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "scale", "shift", "mean", "var"], ["bn"], name="bn",
                         epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", kernel_shape=[1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["sum"], name="add"),
        helper.make_node("Constant", [], ["lo"], name="lo", value=numpy_helper.from_array(np.array(0, np.float32))),
        helper.make_node("Clip", ["sum", "lo", "hi"], ["clip"], name="clip"),
        helper.make_node("GlobalAveragePool", ["clip"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "m"], ["mm"], name="matmul"),
        helper.make_node("Softmax", ["mm"], ["y"], name="softmax", axis=-1),
    ]
    inits = [typed("w1", weights(c, c, 3, 3)), init("scale", weights(c) + 1), init("shift", weights(c)),
             init("mean", weights(c)), init("var", np.abs(weights(c)) + 0.5), typed("w2", weights(c, c, 1, 1)),
             init("b2", weights(c)), init("hi", np.array(6, np.float32)), init("m", weights(c, 3))]
    return model("residual", nodes, [x_input(c, 6, 6)], [y_output(3)], inits)


def torch_cnn():
    """A tiny CNN exported by torch itself; None when torch is not importable."""
    try:
        import contextlib
        import warnings

        import torch
    except ImportError:
        return None

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)
            self.fc = torch.nn.Linear(4 * 4 * 4, 5)

        def forward(self, x):
            x = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
            return self.fc(x.view(x.size(0), -1))

    torch.manual_seed(0)
    net = Net().eval()
    buf = io.BytesIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(net, torch.zeros(1, 3, 8, 8), buf, opset_version=OPSET, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    return buf.getvalue()


def npy_bytes(array, version=None):
    buf = io.BytesIO()
    if version is None:
        np.save(buf, array)
    else:
        np.lib.format.write_array(buf, array, version=version)
    return buf.getvalue()


def npy_seeds():
    img = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    good = {
        "f32_nchw": npy_bytes(img),
        "f32_v2": npy_bytes(img[:, :1, :2, :2], (2, 0)),
        "f32_v3": npy_bytes(img[0, 0, :3, :3], (3, 0)),
        "f32_rank0": npy_bytes(np.float32(1.5)),
        "f32_empty": npy_bytes(np.zeros((0, 3), np.float32)),
        "i64": npy_bytes(np.arange(6, dtype=np.int64).reshape(2, 3)),
        "i32": npy_bytes(np.arange(4, dtype=np.int32)),
        "u8": npy_bytes(np.arange(5, dtype=np.uint8)),
        "i8": npy_bytes(np.array([-1, 2], np.int8)),
        "bool": npy_bytes(np.array([[True, False], [False, True]])),
        "f32_rank8": npy_bytes(np.zeros((1,) * 8, np.float32)),
    }
    bad = {
        "f64": npy_bytes(img.astype(np.float64)[0, 0, :2, :2]),
        "f32_big_endian": npy_bytes(img[0, 0, :2, :2].astype(">f4")),
        "fortran": npy_bytes(np.asfortranarray(img[0, 0, :2, :3])),
        "rank9": npy_bytes(np.zeros((1,) * 9, np.float32)),
        "truncated_data": npy_bytes(img)[:-7],
        "truncated_header": npy_bytes(img)[:40],
        "bad_magic": b"\x93NUMPX" + npy_bytes(img)[6:],
        "version9": npy_bytes(img[0, 0, 0])[:6] + b"\x09\x00" + npy_bytes(img[0, 0, 0])[8:],
        "not_npy": b"just some text, not an array\n",
    }
    return good, bad


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    onnx_dir, npy_dir = os.path.join(out, "onnx"), os.path.join(out, "npy")
    for d in (onnx_dir, npy_dir):
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))

    models = {"conv_relu": conv_relu(), "gemm": gemm(), "reshape_chain": reshape_chain(), "concat": concat(),
              "residual": residual(), "attention_bits": attention_bits(),
              "densenet_16_32": densenet("densenet_16_32", 16, 16),
              "densenet_8_24": densenet("densenet_8_24", 8, 16, 4)}
    exported = torch_cnn()
    if exported is not None:
        models["torch_cnn"] = exported
    n_onnx = 0
    for name, data in models.items():
        write(os.path.join(onnx_dir, name + ".onnx"), data)
        for k, cut in enumerate(sorted({len(data) // 4, len(data) // 2, 3 * len(data) // 4, len(data) - 1})):
            write(os.path.join(onnx_dir, "%s.cut%d.onnx" % (name, k)), data[:cut])
            n_onnx += 1
        n_onnx += 1
    good, bad = npy_seeds()
    for name, data in {**good, **bad}.items():
        write(os.path.join(npy_dir, name + ".npy"), data)
    print("make_corpus: %d onnx seeds (%d models%s), %d npy seeds in %s"
          % (n_onnx, len(models), "" if exported is not None else ", torch not importable", len(good) + len(bad), out))


if __name__ == "__main__":
    main()
