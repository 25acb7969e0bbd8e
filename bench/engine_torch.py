#!/usr/bin/python3
"""PyTorch's best CPU throughput for a torchvision model: the peer of `inferd run --bench`.

The model is torchvision.models.NAME(weights=None) with weights drawn from
torch.manual_seed(--seed): no download, and the same seed gives the same network
everywhere. It is measured in eval mode, without autograd, with
torch.set_num_threads(--threads), in these variants (--variants picks some):

  eager          model(x), NCHW (contiguous) input, under torch.inference_mode()
  channels_last  model and input converted to torch.channels_last, inference_mode
  torchscript    torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model, x))),
                 NCHW input, under torch.no_grad(). optimize_for_inference folds BN into
                 Conv, fuses Conv+Add+ReLU and moves the convolutions to oneDNN (MKLDNN)
                 tensors. If it raises, the frozen module alone is measured and the variant
                 is reported as "torchscript (frozen only)".
  bf16           the model in bfloat16 (model.to(torch.bfloat16)), channels_last, traced and
                 frozen (BN folded into the convolutions), bfloat16 input, under no_grad:
                 PyTorch's fastest bfloat16 inference here (oneDNN's bf16 kernels; resnet50
                 batch 8: 60 images/s, where eager bf16 ran 18.5 and torch.autocast 21), the
                 peer of `inferd run --precision bf16`. Only when asked: not one of the
                 default float32 variants, so "the best" of those never includes it.

Each variant runs WARMUP iterations untimed, then timed iterations until --seconds
have passed (at least 3). Throughput = batch * iterations / (sum of the timed
iterations' wall times). The best variant is the one with the highest throughput.

Other modes (no benchmark):
  --export-onnx PATH  write the same seeded network as ONNX (opset 13, input 'input',
                      output 'output', dynamic batch axis 'batch'), so that inferd runs the
                      identical network. Written to PATH.tmpPID and renamed into place.
  --flops             print the GFLOP per image: 2 * multiply-accumulates of every Conv2d
                      and Linear, counted with forward hooks on one image (BN, ReLU, pooling
                      and additions are not counted: the usual convention). resnet50 ~8.2,
                      resnet152 ~23.1.
Both can be given together; with --json the result is one JSON object either way.

Examples:
  /usr/bin/python3 bench/engine_torch.py --model resnet50 --batch 8 --threads 2 --seconds 5
  /usr/bin/python3 bench/engine_torch.py --model resnet50 --batch 8 --threads 2 --seconds 5 --json
  /usr/bin/python3 bench/engine_torch.py --model resnet152 --export-onnx /tmp/resnet152.onnx
  /usr/bin/python3 bench/engine_torch.py --model resnet50 --flops
"""

import argparse
import contextlib
import copy
import io
import json
import os
import statistics
import sys
import time
import warnings

import torch
import torchvision

VARIANTS = ("eager", "channels_last", "torchscript")
OPT_IN_VARIANTS = ("bf16",)
IMAGE_SIZE = {"inception_v3": 299}  # every other torchvision classifier takes 224x224
OPSET = 13
MIN_ITERATIONS = 3


def die(msg):
    sys.stderr.write("engine_torch.py: %s\n" % msg)
    sys.exit(2)


def build_model(name, seed):
    constructor = getattr(torchvision.models, name, None)
    if constructor is None or not callable(constructor):
        die("torchvision %s has no model '%s'" % (torchvision.__version__, name))
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weights=None init notices (googlenet, inception)
        model = constructor(weights=None)
    return model.eval()


def make_input(batch, size, seed):
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def count_gflop_per_image(model, size):
    """2 * MACs of every Conv2d and Linear for one image, via forward hooks."""
    macs = [0]

    def conv_hook(m, inputs, out):
        k = 1
        for d in m.kernel_size:
            k *= d
        macs[0] += out.numel() * (m.in_channels // m.groups) * k

    def linear_hook(m, inputs, out):
        macs[0] += out.numel() * m.in_features

    hooks = []
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            hooks.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, torch.nn.Linear):
            hooks.append(m.register_forward_hook(linear_hook))
    try:
        with torch.inference_mode():
            model(torch.zeros(1, 3, size, size))
    finally:
        for h in hooks:
            h.remove()
    return 2.0 * macs[0] / 1e9


def export_onnx(model, path, size):
    dummy = make_input(1, size, 0)
    tmp = "%s.tmp%d" % (path, os.getpid())
    log = io.StringIO()  # the exporter chats; show it only if it fails
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(log), \
                contextlib.redirect_stderr(log):
            warnings.simplefilter("ignore")
            torch.onnx.export(model, dummy, tmp, opset_version=OPSET,
                              input_names=["input"], output_names=["output"],
                              dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                              do_constant_folding=True)
        os.replace(tmp, path)
    except Exception:
        sys.stderr.write(log.getvalue())
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def time_runs(fn, x, batch, seconds, warmup):
    for _ in range(warmup):
        fn(x)
    times = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn(x)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        if len(times) >= MIN_ITERATIONS and t1 - start >= seconds:
            break
    ms = sorted(t * 1e3 for t in times)
    p99 = ms[min(len(ms) - 1, int(round(0.99 * (len(ms) - 1))))]
    return {
        "throughput": batch * len(times) / sum(times),
        "iterations": len(times),
        "seconds": sum(times),
        "latency_ms": {"mean": statistics.fmean(ms), "p50": statistics.median(ms), "p99": p99},
    }


def bf16_module(model, x):
    """The bf16 variant's module and input (bench/precision.sh reads its outputs too)."""
    xb = x.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = copy.deepcopy(model).to(torch.bfloat16).to(memory_format=torch.channels_last)
        return torch.jit.freeze(torch.jit.trace(m, xb)), xb


def run_variant(variant, model, x, args, note):
    """Returns the timing dict for one variant; note(str) records how it was built."""
    if variant == "eager":
        m = model

        def fn(inp):
            with torch.inference_mode():
                return m(inp)
        return time_runs(fn, x, args.batch, args.seconds, warmup=2)

    if variant == "channels_last":
        m = copy.deepcopy(model).to(memory_format=torch.channels_last)
        xc = x.contiguous(memory_format=torch.channels_last)

        def fn(inp):
            with torch.inference_mode():
                return m(inp)
        return time_runs(fn, xc, args.batch, args.seconds, warmup=2)

    if variant == "torchscript":
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(copy.deepcopy(model), x)
            frozen = torch.jit.freeze(traced)
            try:
                m = torch.jit.optimize_for_inference(frozen)
            except Exception as e:  # fall back to the frozen module, and say so
                note("frozen only: optimize_for_inference failed: %s" % str(e).splitlines()[0])
                m = frozen

        def fn(inp):
            with torch.no_grad():
                return m(inp)
        # the profiling executor specializes the graph over its first runs
        return time_runs(fn, x, args.batch, args.seconds, warmup=3)

    if variant == "bf16":
        m, xb = bf16_module(model, x)

        def fn(inp):
            with torch.no_grad():
                return m(inp)
        return time_runs(fn, xb, args.batch, args.seconds, warmup=3)

    raise AssertionError(variant)


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="See the module docstring (head of this file) for what each variant is.")
    ap.add_argument("--model", default="resnet50", help="torchvision model name (default resnet50)")
    ap.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    ap.add_argument("--seconds", type=float, default=5.0,
                    help="timed seconds per variant, after warm-up (default 5)")
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="comma-separated subset of %s" % ",".join(VARIANTS + OPT_IN_VARIANTS))
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed for the weights (default 0)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--export-onnx", metavar="PATH", help="export the seeded model to ONNX and exit")
    ap.add_argument("--flops", action="store_true", help="print GFLOP per image and exit")
    args = ap.parse_args()

    if args.batch < 1 or args.threads < 1 or args.seconds <= 0:
        die("--batch and --threads must be >= 1 and --seconds > 0")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS + OPT_IN_VARIANTS:
            die("unknown variant '%s' (known: %s)" % (v, ", ".join(VARIANTS + OPT_IN_VARIANTS)))
    if not variants:
        die("--variants is empty")

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    size = IMAGE_SIZE.get(args.model, 224)
    model = build_model(args.model, args.seed)

    if args.export_onnx or args.flops:
        out = {"model": args.model, "seed": args.seed, "torch": torch.__version__}
        if args.flops:
            out["gflop_per_image"] = round(count_gflop_per_image(model, size), 4)
        if args.export_onnx:
            export_onnx(model, args.export_onnx, size)
            out["onnx"] = args.export_onnx
        if args.json:
            print(json.dumps(out))
        else:
            if args.flops:
                print("%s: %.3f GFLOP/image (2 x MACs of Conv2d + Linear, %dx%d input)"
                      % (args.model, out["gflop_per_image"], size, size))
            if args.export_onnx:
                print("%s: exported to %s (opset %d, seed %d)"
                      % (args.model, args.export_onnx, OPSET, args.seed))
        return

    gflop = count_gflop_per_image(model, size)
    x = make_input(args.batch, size, args.seed + 1)
    results, notes, errors = {}, {}, {}
    for v in variants:
        try:
            results[v] = run_variant(v, model, x, args, lambda s, v=v: notes.__setitem__(v, s))
        except Exception as e:  # one broken variant must not hide the others
            errors[v] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            sys.stderr.write("engine_torch.py: variant %s failed: %s\n" % (v, errors[v]))
    if not results:
        die("every variant failed")
    best = max(results, key=lambda v: results[v]["throughput"])

    if args.json:
        out = {
            "model": args.model, "batch": args.batch, "threads": args.threads,
            "seconds": args.seconds, "seed": args.seed, "torch": torch.__version__,
            "gflop_per_image": round(gflop, 4),
            "variants": results,
            "best": {"variant": best, "throughput": results[best]["throughput"]},
        }
        if notes:
            out["notes"] = notes
        if errors:
            out["errors"] = errors
        print(json.dumps(out))
        return

    print("PyTorch %s, %s, batch %d, %d threads, %.3g GFLOP/image"
          % (torch.__version__, args.model, args.batch, args.threads, gflop))
    for v in variants:
        if v in results:
            r = results[v]
            print("  %-14s %8.2f img/s  %6.1f GFLOP/s  mean %7.1f ms  (%d iterations)%s"
                  % (v, r["throughput"], r["throughput"] * gflop, r["latency_ms"]["mean"],
                     r["iterations"], ("  [%s]" % notes[v]) if v in notes else ""))
        else:
            print("  %-14s FAILED: %s" % (v, errors[v]))
    print("  best: %s %.2f img/s" % (best, results[best]["throughput"]))


if __name__ == "__main__":
    main()
