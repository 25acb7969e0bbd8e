#!/usr/bin/python3
"""The decentralized baseline in Python, as pipelines run it without a server.

  seed_jobs.py save --model resnet152 --out M.pt      TorchScript of the seeded network
  seed_jobs.py job --model M.pt --image IMG           one job: load, preprocess, classify
  seed_jobs.py run --model M.pt --image IMG --requests N --concurrency C
                                                      N jobs, at most C at once; prints one
                                                      JSON object like `inferd bench --json`:
                                                      images/s and latency count the jobs
                                                      that exited 0, errors the others

A job is a fresh Python process that imports torch, loads the TorchScript model with one
thread, preprocesses the photo with torchvision (Resize 256, CenterCrop 224, Normalize)
and prints its top-5 class indices. While `run` runs, a thread samples /proc for the
machine's peak CPU % and memory %.
"""
import argparse
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time


def save(args):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    import engine_torch  # the same seeded network as the ONNX files of bench/
    model = engine_torch.build_model(args.model, 0)
    with torch.no_grad():
        ts = torch.jit.freeze(torch.jit.trace(model, torch.randn(1, 3, 224, 224)))
    # a temporary name, then a rename: an interrupted save leaves no half-written model
    # under the name that bench/seed-experiment.sh takes for a finished one
    tmp = "%s.tmp%d" % (args.out, os.getpid())
    try:
        ts.save(tmp)
        os.replace(tmp, args.out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def job(args):
    import torch
    from PIL import Image
    from torchvision import transforms
    torch.set_num_threads(1)
    model = torch.jit.load(args.model).eval()
    tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    x = tf(Image.open(args.image).convert("RGB")).unsqueeze(0)
    with torch.no_grad():
        y = model(x)
    print(json.dumps(torch.topk(y[0], 5).indices.tolist()))


def cpu_times():
    with open("/proc/stat") as f:
        v = [int(t) for t in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]


def mem_used_percent():
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":")
            info[k] = int(v.split()[0])
    return 100.0 * (info["MemTotal"] - info["MemAvailable"]) / info["MemTotal"]


def run(args):
    peak = {"cpu": 0.0, "mem": 0.0}
    done = threading.Event()

    def sample():
        last = cpu_times()
        while not done.wait(0.1):
            now = cpu_times()
            total, idle = now[0] - last[0], now[1] - last[1]
            if total > 0:
                peak["cpu"] = max(peak["cpu"], 100.0 * (total - idle) / total)
            peak["mem"] = max(peak["mem"], mem_used_percent())
            last = now

    sampler = threading.Thread(target=sample)
    sampler.start()
    cmd = [sys.executable, os.path.abspath(__file__), "job", "--model", args.model, "--image", args.image]
    latencies, failed_latencies, running, started = [], [], [], 0
    t0 = time.monotonic()
    try:
        while started < args.requests or running:
            while started < args.requests and len(running) < args.concurrency:
                running.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                                time.monotonic()))
                started += 1
            time.sleep(0.01)
            for p, ts in list(running):
                if p.poll() is not None:
                    running.remove((p, ts))
                    ms = (time.monotonic() - ts) * 1e3
                    (latencies if p.returncode == 0 else failed_latencies).append(ms)
    finally:  # also on a signal (see main): no job outlives the run
        for p, _ in running:
            p.kill()
            p.wait()
        done.set()
        sampler.join()
    total = time.monotonic() - t0

    def summary(samples):  # zeros when there are none, as inferd bench reports them
        samples = sorted(samples)
        # nearest rank, as inferd bench computes them: the ceil(q * n)-th smallest
        pick = lambda q: samples[max(0, math.ceil(q * len(samples)) - 1)] if samples else 0.0
        return {"p50": pick(0.5), "p99": pick(0.99), "max": samples[-1] if samples else 0.0}

    # As `inferd bench` counts them: an image is a job that exited 0, and latency is of those
    # jobs; a job that failed (a missing model, say) is an error, never an image.
    ok, errors = len(latencies), len(failed_latencies)
    report = {"mode": "python-jobs", "requests": args.requests, "concurrency": args.concurrency,
              "completed": ok + errors, "ok": ok, "errors": errors, "total_seconds": total,
              "requests_per_second": (ok + errors) / total, "images_per_second": ok / total,
              "latency_ms": summary(latencies),
              "peak_cpu_percent": peak["cpu"], "peak_memory_percent": peak["mem"]}
    if errors:
        report["failed_latency_ms"] = summary(failed_latencies)
    print(json.dumps(report))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("--model", default="resnet152")
    s.add_argument("--out", required=True)
    j = sub.add_parser("job")
    j.add_argument("--model", required=True)
    j.add_argument("--image", required=True)
    r = sub.add_parser("run")
    r.add_argument("--model", required=True)
    r.add_argument("--image", required=True)
    r.add_argument("--requests", type=int, required=True)
    r.add_argument("--concurrency", type=int, required=True)
    args = ap.parse_args()
    # SIGTERM (bench/seed-experiment.sh stopping) unwinds like an exception, so that `run`
    # kills its jobs and `save` removes its temporary file
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    {"save": save, "job": job, "run": run}[args.cmd](args)


if __name__ == "__main__":
    main()
