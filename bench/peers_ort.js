#!/usr/bin/env node
// bench/peers_ort.js: ONNX Runtime (npm package onnxruntime-node, CPU execution provider) on one
// ONNX file, timed the way bench/engine_torch.py times PyTorch: warm-up runs, then timed runs
// until at least 3 runs and S seconds (engine_torch.py's
// MIN_ITERATIONS); prints one JSON line:
//   {"engine":"onnxruntime-node","ort":"1.30.0","model":...,"batch":B,"threads":T,
//    "iterations":N,"seconds":S,"throughput":img/s,"latency_ms":{"mean","p50","p99"}}
//
// Usage (bench/peers.sh runs it with NODE_PATH set to where it installed onnxruntime-node):
//   NODE_PATH=DIR/node_modules node bench/peers_ort.js --model M.onnx [--batch 8] [--threads 2]
//        [--seconds 5] [--warmup 3]
// Session: intraOpNumThreads T, interOpNumThreads 1, graphOptimizationLevel 'all',
// executionMode 'sequential', CPU execution provider. The input is the model's first input,
// [B,3,224,224] float32 filled with a fixed pseudo-random pattern (the numbers do not matter
// for the timing of dense CNNs).
'use strict';

function die(msg) {
  process.stderr.write('peers_ort.js: ' + msg + '\n');
  process.exit(1);
}

function parseArgs(argv) {
  const a = { model: null, batch: 8, threads: 2, seconds: 5, warmup: 3, size: 224 };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const v = argv[i + 1];
    const need = () => { if (v === undefined) die(k + ' needs a value'); i++; return v; };
    switch (k) {
      case '--model': a.model = need(); break;
      case '--batch': a.batch = Number(need()); break;
      case '--threads': a.threads = Number(need()); break;
      case '--seconds': a.seconds = Number(need()); break;
      case '--warmup': a.warmup = Number(need()); break;
      case '--size': a.size = Number(need()); break;
      case '-h': case '--help':
        process.stdout.write('usage: peers_ort.js --model M.onnx [--batch B] [--threads T] [--seconds S] [--warmup W]\n');
        process.exit(0);
      default: die("unknown argument '" + k + "'");
    }
  }
  if (!a.model) die('--model is required');
  for (const k of ['batch', 'threads', 'size']) {
    if (!Number.isInteger(a[k]) || a[k] < 1) die('--' + k + ' must be a positive integer');
  }
  if (!Number.isInteger(a.warmup) || a.warmup < 0) die('--warmup must be an integer >= 0');
  if (!(a.seconds > 0)) die('--seconds must be a positive number');
  return a;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  let ort;
  try {
    ort = require('onnxruntime-node');
  } catch (e) {
    die('cannot load onnxruntime-node (set NODE_PATH to its node_modules): ' + e.message);
  }
  const session = await ort.InferenceSession.create(args.model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: args.threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
  });
  const name = session.inputNames[0];
  const n = args.batch * 3 * args.size * args.size;
  const data = new Float32Array(n);
  let s = 12345;
  for (let i = 0; i < n; i++) {  // LCG in [-1, 1): deterministic, not all zeros
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    data[i] = (s / 4294967296) * 2 - 1;
  }
  const feeds = { [name]: new ort.Tensor('float32', data, [args.batch, 3, args.size, args.size]) };

  for (let i = 0; i < args.warmup; i++) await session.run(feeds);
  const times = [];
  const start = process.hrtime.bigint();
  for (;;) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    const t1 = process.hrtime.bigint();
    times.push(Number(t1 - t0) / 1e6);
    if (times.length >= 3 && Number(t1 - start) / 1e9 >= args.seconds) break;
  }
  const total = times.reduce((x, y) => x + y, 0);
  const ms = times.slice().sort((x, y) => x - y);
  const mid = ms.length >> 1;
  const p50 = ms.length % 2 ? ms[mid] : (ms[mid - 1] + ms[mid]) / 2;
  const p99 = ms[Math.min(ms.length - 1, Math.round(0.99 * (ms.length - 1)))];
  const out = {
    engine: 'onnxruntime-node',
    ort: (ort.env && ort.env.versions && ort.env.versions.node) || 'unknown',
    model: args.model,
    batch: args.batch,
    threads: args.threads,
    iterations: times.length,
    seconds: total / 1e3,
    throughput: (args.batch * times.length) / (total / 1e3),
    latency_ms: { mean: total / times.length, p50, p99 },
  };
  process.stdout.write(JSON.stringify(out) + '\n');
  if (typeof session.release === 'function') await session.release();
}

main().catch((e) => die(e && e.stack ? e.stack : String(e)));
