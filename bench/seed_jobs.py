#!/usr/bin/python3
"""The decentralized baseline in Python, as pipelines run it without a server.

  seed_jobs.py save --model resnet152 --out M.pt      TorchScript of the seeded network
  seed_jobs.py job --model M.pt --image IMG           one job: load, preprocess, classify
  seed_jobs.py run --model M.pt --image IMG --requests N --concurrency C
                                                      N jobs, at most C at once; prints one
                                                      JSON object like `inferd bench --json`

A job is a fresh Python process that imports torch, loads the TorchScript model with one
thread, preprocesses the photo with torchvision (Resize 256, CenterCrop 224, Normalize)
and prints its top-5 class indices. While `run` runs, a thread samples /proc for the
machine's peak CPU % and memory %.
"""
import argparse
import json
import os
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
    ts.save(args.out)


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
    latencies, errors, running, started = [], 0, [], 0
    t0 = time.monotonic()
    while started < args.requests or running:
        while started < args.requests and len(running) < args.concurrency:
            running.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), time.monotonic()))
            started += 1
        time.sleep(0.01)
        for p, ts in list(running):
            if p.poll() is not None:
                running.remove((p, ts))
                latencies.append((time.monotonic() - ts) * 1e3)
                errors += p.returncode != 0
    total = time.monotonic() - t0
    done.set()
    sampler.join()
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * (len(latencies) - 1) + 0.5))]
    print(json.dumps({"mode": "python-jobs", "requests": args.requests, "concurrency": args.concurrency,
                      "errors": errors, "total_seconds": total, "images_per_second": args.requests / total,
                      "latency_ms": {"p50": pick(0.5), "p99": pick(0.99), "max": latencies[-1]},
                      "peak_cpu_percent": peak["cpu"], "peak_memory_percent": peak["mem"]}))


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
    {"save": save, "job": job, "run": run}[args.cmd](args)


if __name__ == "__main__":
    main()
