// common.mjs - what parity.mjs and parity_json.mjs share: the command line (--driver, --fixtures, --data),
// transformers.js on local files only, the shared datasets' sentences, the C driver, byte-level helpers
// and the failure count. Loading it exits 2 on a missing --driver and 77 when transformers.js or the
// datasets are missing.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const here = path.dirname(fileURLToPath(import.meta.url));
const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith('--') ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
export const driver = args.driver;
const sharedData = process.env.ADAPTERD_DATA_DIR ?? path.resolve(here, '../../../../shared/data');
export const fixtures = args.fixtures ?? path.join(sharedData, 'tokenizers');
export const dataDir = args.data ?? path.join(sharedData, 'datasets');
if (!driver) {
  console.error(`usage: node ${path.basename(process.argv[1])} --driver PATH/tok_driver [--fixtures DIR] [--data DIR]`);
  process.exit(2);
}

let transformers;
try {
  transformers = await import('@huggingface/transformers');
} catch (e) {
  console.log(`SKIP: @huggingface/transformers is not installed (run \`npm ci --ignore-scripts\` in ${here}): ${e.message}`);
  process.exit(77);
}
export const { env, AutoTokenizer } = transformers;
env.allowRemoteModels = false; // local files only: never reach the Hub
env.allowLocalModels = true;
env.localModelPath = fixtures + path.sep;

// ---- inputs: the shared datasets (SST-2 train/dev, AG News test) ----
export function readColumn(file, header) {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  if (header) lines.shift();
  return lines.filter((l) => l.length > 0).map((l) => l.slice(0, l.lastIndexOf('\t')));
}
const dsFiles = [['sst2_train.tsv', true], ['sst2_dev.tsv', true], ['agnews_test.tsv', false]];
for (const [f] of dsFiles) {
  if (!fs.existsSync(path.join(dataDir, f))) {
    console.log(`SKIP: dataset ${path.join(dataDir, f)} not found (set ADAPTERD_DATA_DIR or --data)`);
    process.exit(77);
  }
}
export const sentences = dsFiles.flatMap(([f, h]) => readColumn(path.join(dataDir, f), h));
export const agnews = readColumn(path.join(dataDir, 'agnews_test.tsv'), false);
export const sst2dev = readColumn(path.join(dataDir, 'sst2_dev.tsv'), true);
export const readJson = (name) => JSON.parse(fs.readFileSync(path.join(here, name), 'utf8'));

// ---- byte-level BPE's alphabet (GPT-2's bytes_to_unicode) ----
export const hex = (s) => Buffer.from(s, 'utf8').toString('hex');
export const BYTES_TO_UNICODE = (() => {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const map = new Array(256);
  bs.forEach((b) => (map[b] = String.fromCharCode(b)));
  let n = 0;
  for (let b = 0; b < 256; b++) if (map[b] === undefined) map[b] = String.fromCharCode(256 + n++);
  return map;
})();
export const byteLevel = (s) => Array.from(Buffer.from(s, 'utf8'), (b) => BYTES_TO_UNICODE[b]).join('');
export const utf8Fatal = new TextDecoder('utf-8', { fatal: true });
export const eq = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

// The C driver on one model folder: one JSON line out per input line.
export function runDriver(modelDir, lines) {
  const r = spawnSync(driver, [modelDir], { input: lines.join('\n') + '\n', maxBuffer: 1 << 30, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`tok_driver ${modelDir} exited ${r.status}: ${r.stderr}`);
  return r.stdout.trimEnd().split('\n').map((l) => JSON.parse(l));
}

// Differences: the first 60 printed, all counted.
export let failures = 0;
export function fail(msg) {
  if (failures < 60) console.log('FAIL ' + msg);
  failures++;
  return false;
}
