#!/usr/bin/python3
"""serve_concurrency.py - `inferd serve` under many concurrent clients.

Starts the real server on 127.0.0.1 (free ports) with the MobileNetV2 of models/ and
talks to it with Python requests from many threads:

  1. batching: batchSize 8, 100 concurrent clients send 1000 requests in all, spread
     over 12 distinct photos; every request gets exactly one response, all 200, each
     the answer for its own image (top-5 labels equal to the image's answer served
     alone, probabilities within 1e-4); the batch-size histogram in /metrics shows
     batches larger than 1: that is owed once /metrics, scraped meanwhile, saw 2 or
     more requests queued (a worker takes what is queued, up to batchSize); a run where
     it never did (clients slower than the server) leaves it unjudged.
  2. overload: job_queue_size=4, one worker on one core, 64 clients at once; the
     overflow gets 503 TorchServe errors with Retry-After at once, the rest 200; no
     request hangs (each has a timeout, the whole part a deadline). A burst the server
     kept up with (no 503) does not count: again, at most 3 times.
  3. drain: requests queued when SIGTERM arrives are answered 200, the server exits 0.
  4. the decode bound is per model: job_queue_size=2, one HTTP thread (so one
     preprocessing thread) and two models; 4 JPEGs of 120 megapixels (about half a
     second each to decode) to the first fill its 2 places, the overflow gets 503
     "waiting for their images to be decoded", and a prediction of the second model
     sent then is answered 200 (the bound counted the thread's whole decode queue, so
     one model's burst got the other's predictions refused). Afterwards 3 predictions
     in a row to the first get 200: the count went back down. A burst the thread kept
     up with (no 503) does not count: again, at most 3 times.
No check depends on how fast the machine is: bounds on time are only for hangs.

    serve_concurrency.py INFERD SOURCE_DIR WORK_DIR
"""
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import requests
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from free_ports import free_ports  # noqa: E402

DATA = "/usr/lib/python3/dist-packages/skimage/data"
REQUEST_TIMEOUT = 120  # seconds, per request
failures = []


def check(cond, what):
    if cond:
        print("ok   " + what, flush=True)
    else:
        print("FAIL " + what, flush=True)
        failures.append(what)


class Server:
    """`inferd serve` in its own directory; stop() sends SIGTERM and returns the status."""

    def __init__(self, inferd, src, work, extra, models="mobilenet=mobilenet_v2_imagenet.onnx"):
        self.work = work
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        self.ports = free_ports(3)
        i, m, x = self.ports
        self.url = "http://127.0.0.1:%d" % i
        self.management = "http://127.0.0.1:%d" % m
        self.metrics = "http://127.0.0.1:%d/metrics" % x
        config = [
            "inference_address=" + self.url,
            "management_address=" + self.management,
            "metrics_address=http://127.0.0.1:%d" % x,
            "model_store=" + os.path.join(src, "models"),
            "load_models=" + models,
        ] + extra + (["number_of_netty_threads=2"] if not any(e.startswith("number_of_netty_threads=") for e in extra)
                     else [])
        with open(os.path.join(work, "config.properties"), "w") as f:
            f.write("\n".join(config) + "\n")
        self.log = open(os.path.join(work, "server.log"), "w")
        self.proc = subprocess.Popen([inferd, "serve", "--ts-config", "config.properties", "--foreground"],
                                     cwd=work, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:  # the caller never gets the object: stop the process here
            self.kill()
            raise

    def _wait_ready(self):
        work = self.work
        deadline = time.time() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited with %d before it was ready" % self.proc.returncode)
            try:
                if requests.get(self.url + "/ping", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.time() > deadline:
                raise RuntimeError("/ping not 200 after 120 s")
            time.sleep(0.05)
        keys = json.load(open(os.path.join(work, "key_file.json")))
        self.headers = {"Authorization": "Bearer " + keys["inference"]["key"],
                        "Content-Type": "application/octet-stream"}
        self.management_headers = {"Authorization": "Bearer " + keys["management"]["key"]}

    def predict(self, session, image, model="mobilenet"):
        return session.post(self.url + "/predictions/" + model, data=image, headers=self.headers,
                            timeout=REQUEST_TIMEOUT)

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode

    def stop_checked(self):
        """stop(), which must give exit status 0."""
        status = self.stop()
        check(status == 0, "SIGTERM: exit status %s" % status)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        """Whatever happened: the log's tail when anything failed, and no process left."""
        if failures:
            print(self.tail(), file=sys.stderr)
        self.kill()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def tail(self):
        self.log.flush()
        with open(os.path.join(self.work, "server.log")) as f:
            return "".join(f.readlines()[-30:])


def photos():
    """12 distinct JPEGs: 4 photos, each as is, mirrored and rotated."""
    out = []
    for name in ("chelsea.png", "coffee.png", "astronaut.png", "motorcycle_left.png"):
        img = Image.open(os.path.join(DATA, name)).convert("RGB")
        for variant in (img, img.transpose(Image.FLIP_LEFT_RIGHT), img.transpose(Image.ROTATE_90)):
            buf = io.BytesIO()
            variant.save(buf, "JPEG", quality=90)
            out.append(buf.getvalue())
    return out


def run_clients(clients, total, work_fn, deadline_s):
    """`clients` threads take request numbers 0..total-1 until none is left; returns
    {k: result} and whether every thread finished before the deadline."""
    results, lock = {}, threading.Lock()
    counter = iter(range(total))

    def client():
        session = requests.Session()
        while True:
            with lock:
                k = next(counter, None)
            if k is None:
                return
            try:
                r = work_fn(session, k)
            except requests.RequestException as e:  # a hang ends here (timeout), as a failure
                r = e
            with lock:
                results.setdefault(k, []).append(r)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline_s - (time.time() - start)))
    return results, all(not t.is_alive() for t in threads), time.time() - start


def same_answer(a, b):
    return list(a) == list(b) and all(abs(a[k] - b[k]) < 1e-4 for k in a)


def queue_depth(metrics_text):
    for line in metrics_text.splitlines():
        if line.startswith('inferd_queue_depth{model_name="mobilenet"'):
            return int(float(line.split()[-1]))
    return 0


class DepthWatch:
    """Scrapes /metrics until stopped; `most` is the deepest queue it saw."""

    def __init__(self, url):
        self.url, self.most, self.done = url, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        session = requests.Session()
        while not self.done.is_set():
            try:
                self.most = max(self.most, queue_depth(session.get(self.url, timeout=30).text))
            except requests.RequestException:
                pass
            self.done.wait(0.02)

    def stop(self):
        self.done.set()
        self.thread.join(60)
        return self.most


def batch_histogram(metrics_text):
    count = le1 = None
    for line in metrics_text.splitlines():
        if line.startswith('inferd_batch_size_count{model_name="mobilenet"'):
            count = float(line.split()[-1])
        if line.startswith('inferd_batch_size_bucket{model_name="mobilenet"') and 'le="1"' in line:
            le1 = float(line.split()[-1])
    return count, le1


def part_batching(inferd, src, work):
    images = photos()
    with Server(inferd, src, os.path.join(work, "batching"), [
        'models={"mobilenet": {"1.0": {"batchSize": 8, "maxBatchDelay": 50, "responseTimeout": 120}}}',
        "job_queue_size=1000",
    ]) as server:
        session = requests.Session()
        expected = []
        for img in images:
            r = server.predict(session, img)
            assert r.status_code == 200, (r.status_code, r.text)
            expected.append(json.loads(r.text))
        check(len({tuple(e) for e in expected}) > 4, "the 12 photos have distinct answers served alone")

        watch = DepthWatch(server.metrics)
        results, finished, seconds = run_clients(
            100, 1000, lambda s, k: server.predict(s, images[k % len(images)]), deadline_s=600)
        deepest = watch.stop()
        check(finished, "100 clients x 1000 requests finished in %.1f s" % seconds)
        check(len(results) == 1000 and all(len(v) == 1 for v in results.values()),
              "every one of the 1000 requests got exactly one response")
        statuses = {}
        for v in results.values():
            key = v[0].status_code if isinstance(v[0], requests.Response) else type(v[0]).__name__
            statuses[key] = statuses.get(key, 0) + 1
        check(statuses == {200: 1000}, "all 200 (got %s)" % statuses)
        wrong = [k for k, v in results.items() if isinstance(v[0], requests.Response) and v[0].status_code == 200
                 and not same_answer(json.loads(v[0].text), expected[k % len(images)])]
        check(not wrong, "each client got its own image's answer (%d mismatches)" % len(wrong))
        count, le1 = batch_histogram(requests.get(server.metrics, timeout=30).text)
        if deepest >= 2:
            check(count is not None and le1 is not None and count > le1,
                  "/metrics batch-size histogram shows batches larger than 1 (%s of %s batches had 1; up to %d "
                  "requests were queued)" % (le1, count, deepest))
        else:
            print("     inconclusive: /metrics never saw 2 requests queued; batches of 1 are all it owes (%s of %s)"
                  % (le1, count), flush=True)
        server.stop_checked()


def part_overload(inferd, src, work):
    image = photos()[0]
    with Server(inferd, src, os.path.join(work, "overload"), [
        "job_queue_size=4", "batch_size=1", "default_workers_per_model=1",
        "cpu_launcher_enable=true", "cpu_launcher_args=--ncores_per_instance 1",
    ]) as server:
        base = len(failures)
        for attempt in range(1, 4):
            barrier = threading.Barrier(64, timeout=120)

            def burst(session, k):
                if k < 64:
                    barrier.wait()  # the first 64 requests leave together
                return server.predict(session, image)

            results, finished, seconds = run_clients(64, 256, burst, deadline_s=300)
            check(finished, "64 clients x 256 requests against job_queue_size=4 finished in %.1f s (no hang)" % seconds)
            responses = [v[0] for v in results.values()]
            check(len(results) == 256 and all(len(v) == 1 for v in results.values()),
                  "every one of the 256 requests got exactly one response")
            codes = {}
            for r in responses:
                key = r.status_code if isinstance(r, requests.Response) else type(r).__name__
                codes[key] = codes.get(key, 0) + 1
            check(set(codes) <= {200, 503} and codes.get(200, 0) > 0, "each answered 200 or 503 (%s)" % codes)
            if len(failures) > base:
                break
            if not codes.get(503):
                print("     attempt %d does not count: the worker kept up, the queue never overflowed" % attempt,
                      flush=True)
                continue
            busy = [r for r in responses if isinstance(r, requests.Response) and r.status_code == 503]
            ok = all(r.headers.get("Retry-After") == "1" and r.json()["code"] == 503 and
                     r.json()["type"] == "ServiceUnavailableException" for r in busy)
            check(ok, "the overflow got 503, each a TorchServe error with Retry-After: 1 (%s)" % codes)
            break
        else:
            check(False, "3 bursts: the queue never overflowed, no 503 to check")
        check(requests.get(server.url + "/ping", timeout=30).status_code == 200, "/ping still 200 after the overload")
        server.stop_checked()


def part_drain(inferd, src, work):
    image = photos()[1]
    with Server(inferd, src, os.path.join(work, "drain"), [
        "job_queue_size=100", "batch_size=1", "default_workers_per_model=1",
        "cpu_launcher_enable=true", "cpu_launcher_args=--ncores_per_instance 1",
    ]) as server:
        results = []
        lock = threading.Lock()

        def client():
            try:
                r = server.predict(requests.Session(), image)
            except requests.RequestException as e:
                r = e
            with lock:
                results.append(r)

        threads = [threading.Thread(target=client, daemon=True) for _ in range(48)]
        for t in threads:
            t.start()
        pending, deadline = 0, time.time() + 120
        while pending < 6 and time.time() < deadline:  # wait until requests are queued
            described = requests.get(server.management + "/models/mobilenet", headers=server.management_headers,
                                     timeout=30).json()
            pending = described[0]["jobQueueStatus"]["pendingRequests"]
            time.sleep(0.01)
        check(pending >= 6, "%d requests queued before SIGTERM" % pending)
        server.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(120)
        status = server.proc.wait(120)
        codes = [r.status_code if isinstance(r, requests.Response) else type(r).__name__ for r in results]
        check(len(results) == 48 and set(codes) <= {200, 503} and codes.count(200) >= pending,
              "drain: queued requests answered 200, late ones 503 (%s)" % sorted(codes, key=str))
        check(status == 0, "drain: exit status %s" % status)


def huge_jpeg():
    """12000x10000 (120 megapixels) of smooth gradients: 2.4 MB, about half a second to decode."""
    import numpy as np
    x = np.linspace(0, 255, 12000, dtype=np.float32)[None, :]
    y = np.linspace(0, 255, 10000, dtype=np.float32)[:, None]
    buf = io.BytesIO()
    Image.fromarray(np.stack([x + 0 * y, 0 * x + y, (x + y) / 2], axis=2).astype(np.uint8)).save(buf, "JPEG",
                                                                                                 quality=90)
    return buf.getvalue()


def part_decode_bound(inferd, src, work):
    huge, small = huge_jpeg(), photos()[0]
    with Server(inferd, src, os.path.join(work, "decode"), [
        "job_queue_size=2", "number_of_netty_threads=1", "max_request_size=10000000",
    ], models="mobilenet=mobilenet_v2_imagenet.onnx,other=mobilenet_v2_imagenet.onnx") as server:
        base = len(failures)
        for attempt in range(1, 4):
            refused = threading.Event()
            codes, lock = [], threading.Lock()

            def burst():
                try:
                    r = server.predict(requests.Session(), huge)
                    code, message = r.status_code, r.json().get("message", "") if r.status_code != 200 else ""
                except (requests.RequestException, ValueError) as e:
                    code, message = type(e).__name__, str(e)
                with lock:
                    codes.append((code, message))
                if code == 503:
                    refused.set()

            threads = [threading.Thread(target=burst, daemon=True) for _ in range(4)]
            for t in threads:
                t.start()
            refused.wait(60)
            other = server.predict(requests.Session(), small, "other") if refused.is_set() else None
            for t in threads:
                t.join(REQUEST_TIMEOUT)
            statuses = sorted(str(c) for c, _ in codes)
            check(len(codes) == 4 and set(statuses) <= {"200", "503"} and "200" in statuses,
                  "4 huge JPEGs to one model: each answered 200 or 503 (%s)" % statuses)
            if len(failures) > base:
                break
            if other is None:
                print("     attempt %d does not count: the decoder kept up, no 503" % attempt, flush=True)
                continue
            check(all("waiting for their images to be decoded" in m for c, m in codes if c == 503),
                  "the overflow's 503 says its requests wait for their decode (%s)" % [m for c, m in codes if m])
            check(other.status_code == 200,
                  "the other model's prediction while the first's decode places were full: %d%s" %
                  (other.status_code, "" if other.status_code == 200 else " " + other.text[:200]))
            break
        else:
            check(False, "3 bursts: the decoder always kept up, no 503 to check")
        session = requests.Session()
        after = [server.predict(session, small).status_code for _ in range(3)]
        check(after == [200, 200, 200], "3 predictions in a row after the burst: %s" % after)
        server.stop_checked()


def main():
    inferd, src, work = sys.argv[1:4]
    inferd = os.path.abspath(inferd)
    start = time.time()
    for part in (part_batching, part_overload, part_drain, part_decode_bound):
        try:
            part(inferd, src, work)
        except Exception as e:  # a failed start-up, a protocol surprise: a failure, not a crash
            failures.append("%s: %r" % (part.__name__, e))
            print("FAIL %s: %r" % (part.__name__, e), flush=True)
    print("serve_concurrency: %s in %.1f s" % ("%d failure(s)" % len(failures) if failures else "all passed",
                                               time.time() - start))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
