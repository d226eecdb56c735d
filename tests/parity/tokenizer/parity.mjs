// parity.mjs - adapterd's tokenizer against transformers.js, local files only.
//
// For bert-base-uncased and roberta-base (the shared data's tokenizers/) this tokenizes with
// transformers.js every sentence of the shared datasets (SST-2 train/dev, AG News test), the hard
// cases of hard_cases.json, text pairs, and truncated pairs; runs the C driver (tok_driver) on the
// same inputs - once from tokenizer.json and once from the vocab files alone - and requires:
//   * identical ids for every input;
//   * identical type ids for BERT; all-zero type ids for RoBERTa (the Python library's
//     RobertaProcessing; transformers.js returns 0/1 there, which RoBERTa's one-row token type
//     embedding cannot take);
//   * truncation as the Python library does it (sequences cut before special tokens are added,
//     longest_first / only_first) - computed here from transformers.js's encodings without special
//     tokens, because transformers.js itself truncates the final ids and so drops the last [SEP];
//   * offsets consistent with the text: transformers.js has no offsets, so every token's span
//     [s, e) (code points) is checked to reproduce the token - for WordPiece, transformers.js's own
//     normalizer applied to text[s:e) gives the token without "##"; for byte-level BPE, the bytes of
//     text[s:e) give the token without its leading space (or contain it, when the token is a
//     fragment of a multi-byte character) - and spans must be ordered and inside the text.
// Exit 0 on full agreement, 1 on any difference (the first ones are printed), 77 when
// transformers.js is not installed or the datasets are missing.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  AutoTokenizer, BYTES_TO_UNICODE, agnews, byteLevel, eq, fail, failures, fixtures, hex, readJson, runDriver,
  sentences, sst2dev, utf8Fatal,
} from './common.mjs';

// ---- inputs ----
const hard = readJson('hard_cases.json');
const pairs = [...hard.pairs];
for (let i = 0; i < 1000; i++) pairs.push([sst2dev[i % sst2dev.length], agnews[(i * 7) % agnews.length]]);
const truncPairs = pairs.slice(0, 300);
const truncLens = [8, 16, 33, 64];

// The Python library's truncate_encodings, applied to the sequences before special tokens.
function truncate(strategy, max, n1, n2, hasPair) {
  if (n1 + n2 <= max) return [n1, n2];
  const toRemove = n1 + n2 - max;
  if (strategy === 'longest_first') {
    if (!hasPair) return [max, 0];
    let [a, b] = n1 > n2 ? [n2, n1] : [n1, n2];
    const swap = n1 > n2;
    b = a > max ? a : Math.max(a, max - a);
    if (a + b > max) {
      a = Math.floor(max / 2);
      b = a + (max % 2);
    }
    if (swap) [a, b] = [b, a];
    return [Math.min(a, n1), Math.min(b, n2)];
  }
  if (n1 <= toRemove) return null; // only_first cannot fit: an error
  return [n1 - toRemove, n2];
}

const fromByteLevel = (t) => {
  const inv = new Map(BYTES_TO_UNICODE.map((c, b) => [c, b]));
  return Buffer.from(Array.from(t, (c) => inv.get(c)));
};

// Directory with only the pre-tokenizer.json files, to test the fallback loader.
function vocabOnlyDir(name) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), `tok-${name}-`));
  for (const f of ['vocab.txt', 'vocab.json', 'merges.txt', 'tokenizer_config.json', 'special_tokens_map.json']) {
    const src = path.join(fixtures, name, f);
    if (fs.existsSync(src)) fs.copyFileSync(src, path.join(d, f));
  }
  return d;
}

const t0 = Date.now();
for (const name of ['bert-base-uncased', 'roberta-base']) {
  const tok = await AutoTokenizer.from_pretrained(name);
  const isBert = name.startsWith('bert');
  const [cls, sep] = isBert ? [101, 102] : [0, 2];
  const enc = (text, opts = {}) => {
    const r = tok(text, { return_tensor: false, return_token_type_ids: true, ...opts });
    return { ids: r.input_ids.map(Number), type_ids: (r.token_type_ids ?? []).map(Number) };
  };
  const cases = []; // {label, line, ids, type_ids|null, text|null (offset check), error?}
  const singles = [...sentences.map((s, i) => ['sentence ' + i, s]), ...hard.single.map((s, i) => ['hard ' + i, s])];
  for (const [label, s] of singles) {
    const e = enc(s);
    cases.push({ label, line: hex(s), ids: e.ids, type_ids: isBert ? e.type_ids : null, text: s });
  }
  for (const [i, [a, b]] of pairs.entries()) {
    let e = enc(a, { text_pair: b });
    if (b === '') {
      // transformers.js treats an empty pair as no pair (`text_pair || null`); the Python library
      // keeps the pair template: [CLS] A [SEP] [SEP] / <s> A </s></s></s>. We follow Python.
      const A = enc(a, { add_special_tokens: false }).ids;
      e = isBert
        ? { ids: [cls, ...A, sep, sep], type_ids: [...Array(A.length + 2).fill(0), 1] }
        : { ids: [cls, ...A, sep, sep, sep], type_ids: null };
    }
    cases.push({ label: 'pair ' + i, line: hex(a) + '\t' + hex(b), ids: e.ids, type_ids: isBert ? e.type_ids : null });
  }
  // truncation: expected from the encodings without special tokens
  const noSpecial = (s) => enc(s, { add_special_tokens: false }).ids;
  for (const [i, [a, b]] of truncPairs.entries()) {
    const A = noSpecial(a), B = noSpecial(b);
    for (const max of truncLens) {
      for (const strategy of ['longest_first', 'only_first']) {
        const nSpecial = isBert ? 3 : 4;
        const cut = truncate(strategy, max - nSpecial, A.length, B.length, true);
        const line = `${hex(a)}\t${hex(b)}\t${max}\t${strategy}`;
        const label = `trunc pair ${i} max ${max} ${strategy}`;
        if (!cut) {
          cases.push({ label, line, error: true });
          continue;
        }
        const a2 = A.slice(0, cut[0]), b2 = B.slice(0, cut[1]);
        const ids = isBert ? [cls, ...a2, sep, ...b2, sep] : [cls, ...a2, sep, sep, ...b2, sep];
        const type_ids = isBert ? [...Array(a2.length + 2).fill(0), ...Array(b2.length + 1).fill(1)] : null;
        cases.push({ label, line, ids, type_ids });
      }
      const cut = truncate('longest_first', max - 2, A.length, 0, false);
      cases.push({ label: `trunc single ${i} max ${max}`, line: `${hex(a)}\t-\t${max}\tlongest_first`,
        ids: [cls, ...A.slice(0, cut[0]), sep], type_ids: null });
    }
  }

  const lines = cases.map((c) => c.line);
  for (const [variant, dir] of [['tokenizer.json', path.join(fixtures, name)], ['vocab files', vocabOnlyDir(name)]]) {
    const got = runDriver(dir, lines);
    let nIds = 0, nTypes = 0, nOffsets = 0, nTok = 0;
    cases.forEach((c, i) => {
      const g = got[i];
      const where = `${name} [${variant}] ${c.label} ${JSON.stringify(c.text ?? '').slice(0, 80)}`;
      if (c.error) {
        if (!g.error) fail(`${where}: expected an error, got ids ${g.ids}`);
        else nIds++;
        return;
      }
      if (g.error) return fail(`${where}: error ${g.error}`);
      if (!eq(g.ids, c.ids)) return fail(`${where}:\n  transformers.js ${c.ids.join(' ')}\n  adapterd        ${g.ids.join(' ')}`);
      nIds++;
      const wantTypes = c.type_ids ?? (isBert ? null : new Array(c.ids.length).fill(0));
      if (wantTypes) {
        if (!eq(g.type_ids, wantTypes)) return fail(`${where}: type ids ${g.type_ids} != ${wantTypes}`);
        nTypes++;
      }
      if (c.text === undefined || c.text === null) return;
      // offsets: ordered, inside the text, and reproducing each token
      const cps = Array.from(c.text);
      let prevStart = 0, ok = true;
      for (let k = 0; k < g.ids.length; k++) {
        const s = g.offsets[2 * k], e = g.offsets[2 * k + 1];
        const id = g.ids[k];
        const special = (k === 0 || k === g.ids.length - 1) && (id === cls || id === sep);
        if (special) {
          if (s !== 0 || e !== 0) ok = fail(`${where}: special token ${k} has offsets ${s},${e}`);
          continue;
        }
        nTok++;
        if (!(s <= e && e <= cps.length && s >= prevStart)) {
          ok = fail(`${where}: token ${k} offsets ${s},${e} out of order or range (${cps.length} chars)`);
          continue;
        }
        prevStart = s;
        const slice = cps.slice(s, e).join('');
        const token = tok._tokenizer.id_to_token(id);
        if (isBert) {
          if (id === 100 || ['[MASK]', '[CLS]', '[SEP]', '[PAD]'].includes(token)) {
            if (id !== 100 && slice !== token) ok = fail(`${where}: added token ${token} spans "${slice}"`);
            if (id === 100 && slice.trim().length === 0) ok = fail(`${where}: [UNK] spans nothing`);
            continue;
          }
          // a character that normalizes to several pieces (Hangul syllables decompose to jamo) gives
          // each piece its whole span; a lone final sigma lowercases without its context
          const norm = tok._tokenizer.normalizer(slice).trim();
          const bare = token.replace(/^##/, '');
          const shared = (k > 0 && g.offsets[2 * k - 2] === s && g.offsets[2 * k - 1] === e) ||
            (k + 1 < g.ids.length && g.offsets[2 * k + 2] === s && g.offsets[2 * k + 3] === e);
          const sigma = (x) => x.replace(/ς/g, 'σ');
          if (!(sigma(norm) === sigma(bare) || (shared && norm.includes(bare)))) ok = fail(`${where}: token ${k} "${token}" spans "${slice}" (normalized "${norm}")`);
        } else {
          if (['<s>', '</s>', '<pad>', '<unk>', '<mask>'].includes(token)) {
            if (slice !== token) ok = fail(`${where}: added token ${token} spans "${slice}"`);
            continue;
          }
          const bl = byteLevel(slice);
          const bare = token.replace(/^Ġ+/, '').replace(/Ġ+$/, '');
          let whole = true;
          try { utf8Fatal.decode(fromByteLevel(token)); } catch { whole = false; }
          if (whole ? bl !== bare : !bl.includes(bare)) ok = fail(`${where}: token ${k} "${token}" spans "${slice}" ("${bl}")`);
        }
      }
      if (ok !== false) nOffsets++;
    });
    console.log(`${name} [${variant}]: ${cases.length} inputs (${singles.length} single texts, ${pairs.length} pairs, ` +
      `${cases.length - singles.length - pairs.length} truncation cases): ids identical ${nIds}/${cases.length}, ` +
      `type ids checked ${nTypes}, offsets consistent for ${nOffsets} texts (${nTok} tokens)`);
  }
}
console.log(`${failures ? 'FAILED' : 'OK'}: ${failures} differences; ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(failures ? 1 : 0);
