// bench_transformers.mjs - transformers.js peer of bench_tokenizer.c (run by it, same machine, same run).
//
// Tokenizes every AG News text with transformers.js (local files only), `reps` times after one
// warm-up pass, and prints one JSON line: {"times_s":[...],"bytes":N,"sentences":N,"tokens":N}.
// transformers.js is loaded from the parity test's node_modules (--modules DIR, the directory
// holding package.json; install with `npm ci --ignore-scripts` there).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const require = createRequire(path.join(path.resolve(args.modules), 'package.json'));
const { env, AutoTokenizer } = require('@huggingface/transformers');
env.allowRemoteModels = false;
env.localModelPath = path.resolve(args.fixtures) + path.sep;

const texts = fs.readFileSync(args.data, 'utf8').split('\n').filter((l) => l.length > 0)
  .map((l) => l.slice(0, l.lastIndexOf('\t')));
const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, 'utf8'), 0);
const tok = await AutoTokenizer.from_pretrained(args.model);
const reps = Number(args.reps ?? 5);
let tokens = 0;
for (const t of texts) tokens += tok.encode(t).length; // warm-up (JIT, BPE cache) and token count
const times = [];
for (let r = 0; r < reps; r++) {
  const t0 = process.hrtime.bigint();
  let sink = 0;
  for (const t of texts) sink += tok.encode(t).length;
  times.push(Number(process.hrtime.bigint() - t0) / 1e9);
  if (sink !== tokens) throw new Error('non-deterministic token count');
}
console.log(JSON.stringify({ times_s: times, bytes, sentences: texts.length, tokens }));
