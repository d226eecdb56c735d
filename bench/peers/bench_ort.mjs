// bench_ort.mjs - ONNX Runtime peer of bench_encoder.c (run by bench/encoder/run.sh, same machine, same run).
//
//   node bench_ort.mjs --model model.onnx [--threads 2] [--seq 128] [--batch 32] [--iters 20] [--vocab 30522]
//                      [--batch-iters N (default --iters)] [--warmup 3] [--workloads latency,batch]
//                      [--check ref.onnx [--min-cosine 0.99]]   (--workloads none: the check alone)
//
// Runs the ONNX export of the PyTorch reference (tools/reference/export_onnx.py) with onnxruntime-node's
// CPU execution provider: --threads intra-op threads, one inter-op thread, sequential execution, all graph
// optimizations (so attention and LayerNorm/GELU are fused as ORT does for BERT). Inputs are random ids
// with an all-ones mask (equal lengths: no padding wasted). Prints one JSON line with the medians and
// minimums in ms. --check runs one 4x128 batch through both --model and ref.onnx (the float32 export, when
// --model is its int8 rewrite: tools/reference/quantize_onnx_int8.py) before timing and adds their agreement
// (cosine of the whole last hidden state, the lowest per-token cosine, max |diff|); below --min-cosine it exits 3
// without timing: a broken rewrite is not measured. ORT's matrix products are its own MLAS kernels, chosen by CPU feature detection: it
// does not load OpenBLAS, so OPENBLAS_CORETYPE does not apply to it.
import os from 'node:os';
import ort from 'onnxruntime-node';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
if (!args.model) {
  console.error('usage: node bench_ort.mjs --model model.onnx [--threads N] [--iters N] [--warmup N]');
  process.exit(2);
}
const threads = Number(args.threads ?? 2), seq = Number(args.seq ?? 128), batchN = Number(args.batch ?? 32);
const iters = Number(args.iters ?? 20), batchIters = Number(args['batch-iters'] ?? iters);
const warmup = Number(args.warmup ?? 3), vocab = Number(args.vocab ?? 30522);
const workloads = (args.workloads ?? 'latency,batch').split(',').filter((w) => w && w !== 'none');

const session = await ort.InferenceSession.create(args.model, {
  executionProviders: ['cpu'],
  graphOptimizationLevel: 'all',
  executionMode: 'sequential',
  intraOpNumThreads: threads,
  interOpNumThreads: 1,
});

// Deterministic ids in [103, vocab) as the reference bench draws them (bert's 30522), LCG like bench_encoder.c.
let s = 42;
function feeds(b) {
  const n = b * seq, ids = new BigInt64Array(n), mask = new BigInt64Array(n), tt = new BigInt64Array(n);
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    ids[i] = BigInt(103 + ((s >>> 8) % (vocab - 103)));
    mask[i] = 1n;
  }
  const dims = [b, seq];
  return {
    input_ids: new ort.Tensor('int64', ids, dims),
    attention_mask: new ort.Tensor('int64', mask, dims),
    token_type_ids: new ort.Tensor('int64', tt, dims),
  };
}

let check; // --check's agreement, in the JSON line
if (args.check) {
  const ref = await ort.InferenceSession.create(args.check, { executionProviders: ['cpu'], graphOptimizationLevel: 'all',
    executionMode: 'sequential', intraOpNumThreads: threads, interOpNumThreads: 1 });
  const f = feeds(4), a = (await session.run(f)).last_hidden_state.data, b = (await ref.run(f)).last_hidden_state.data;
  const h = a.length / (4 * seq);
  let dot = 0, na = 0, nb = 0, maxd = 0, minTok = 1;
  for (let t = 0; t < 4 * seq; t++) {
    let d = 0, x = 0, y = 0;
    for (let i = t * h; i < (t + 1) * h; i++) {
      d += a[i] * b[i], x += a[i] * a[i], y += b[i] * b[i];
      maxd = Math.max(maxd, Math.abs(a[i] - b[i]));
    }
    dot += d, na += x, nb += y;
    minTok = Math.min(minTok, d / Math.sqrt(x * y));
  }
  const cos = dot / Math.sqrt(na * nb), min = Number(args['min-cosine'] ?? 0.99);
  check = { reference: args.check, cosine: Number(cos.toFixed(6)), min_token_cosine: Number(minTok.toFixed(6)),
    max_abs_diff: Number(maxd.toFixed(5)), min_cosine: min };
  if (!(cos >= min)) {
    console.error(`bench_ort: ${args.model} against ${args.check}: cosine ${cos} below ${min}: not timed`);
    console.log(JSON.stringify({ peer: 'onnxruntime-node', check }));
    process.exit(3);
  }
}

const median = (v) => {
  const a = [...v].sort((x, y) => x - y), m = a.length >> 1;
  return a.length % 2 ? a[m] : 0.5 * (a[m - 1] + a[m]);
};
const out = { peer: 'onnxruntime-node', ort: ort.env.versions?.common ?? 'unknown', threads, seq,
  execution_provider: 'cpu', graph_optimization: 'all', cpu: os.cpus()[0]?.model };
if (args.check) out.check = check;
for (const wl of workloads) {
  const b = wl === 'latency' ? 1 : batchN, f = feeds(b), times = [];
  const n = wl === 'latency' ? iters : batchIters;
  for (let i = 0; i < warmup + n; i++) {
    const t0 = process.hrtime.bigint();
    await session.run(f);
    const dt = Number(process.hrtime.bigint() - t0) / 1e6;
    if (i >= warmup) times.push(dt);
  }
  const key = wl === 'latency' ? `latency_1x${seq}` : `batch_${b}x${seq}`;
  out[`${key}_ms`] = Number(median(times).toFixed(3));
  out[`${key}_min_ms`] = Number(Math.min(...times).toFixed(3));
}
console.log(JSON.stringify(out));
