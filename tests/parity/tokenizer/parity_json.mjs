// parity_json.mjs - adapterd's tokenizer.json loaders for newer models against transformers.js.
//
// modernbert-base (byte-level BPE behind an NFC normalizer, 116 added tokens, [CLS] A [SEP] B [SEP])
// and t5-v1_1 (Unigram: Precompiled + Strip + Replace normalizers, Metaspace, A </s> B </s>), both
// from their real tokenizer.json, and t5-wssplit, T5's with the pre-tokenizer Sequence
// [WhitespaceSplit, Metaspace] written here. Every sentence of the shared datasets (SST-2 train/dev, AG News
// test), the hard cases of hard_cases.json and hard_cases_spm.json, and 1,000 text pairs go through
// transformers.js and the C driver (tok_driver); required:
//   * identical ids for every input (an empty pair text is a pair, as in the Python library:
//     transformers.js drops it, so that expectation is built from its encodings without specials);
//   * all-zero type ids (both templates give type 0 everywhere);
//   * offsets consistent with the text (transformers.js has no offsets): ordered, inside the text,
//     and each token reproduced by its span - byte-level: the bytes of the NFC-normalized span give
//     the token, spaces included (ModernBERT's TemplateProcessing trims no offsets, as in the Python
//     library), or contain it, for a fragment of a multi-byte character;
//     Unigram: transformers.js's own normalizer applied to the span, spaces as U+2581, gives the
//     token without its leading U+2581 (or contains it, when several tokens share one character's
//     span); the unknown token spans something.
// Known difference, reported and not counted: transformers.js approximates T5's Precompiled charsmap
// by NFKC plus a fixed list of control/space characters; adapterd applies the charsmap itself, as
// SentencePiece and the Python library do. Inputs where only that approximation differs are listed
// separately (checked against the SentencePiece library instead by spm_parity.py's T5 model).
// Exit 0 on agreement, 1 on any difference, 77 when transformers.js or the shared data are missing.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  AutoTokenizer, BYTES_TO_UNICODE, agnews, byteLevel, env, eq, fail, failures, fixtures, hex, readJson, runDriver,
  sentences, sst2dev, utf8Fatal,
} from './common.mjs';

const MODELS = ['modernbert-base', 't5-v1_1'];
for (const m of MODELS) {
  if (!fs.existsSync(path.join(fixtures, m, 'tokenizer.json'))) {
    console.log(`SKIP: ${path.join(fixtures, m, 'tokenizer.json')} is absent (the shared tokenizers; set ADAPTERD_DATA_DIR)`);
    process.exit(77);
  }
}
const hard = readJson('hard_cases.json');
const hardSpm = readJson('hard_cases_spm.json');
const singles = [...sentences.map((s, i) => ['sentence ' + i, s]), ...[...hard.single, ...hardSpm.single].map((s, i) => ['hard ' + i, s])];
const pairs = [...hard.pairs, ...hardSpm.pairs];
for (let i = 0; i < 1000; i++) pairs.push([sst2dev[i % sst2dev.length], agnews[(i * 7) % agnews.length]]);

const INV = new Map(BYTES_TO_UNICODE.map((c, b) => [c, b]));

// transformers.js's Precompiled stand-in differs from the charsmap on these characters (SentencePiece
// and the Python library apply the charsmap): a text containing one is compared by spm_parity.py
const PRECOMPILED_APPROX = /[\u0080-\u009f\u00ad\u200b-\u200f\u2028\u2029\u2060-\u206f\ufeff\ufff0-\uffff\ue000-\uf8ff\u1680\u3000\u00a0\u2000-\u200a\u202f\u205f\u0300-\u036f\u2581]/u;

// A third tokenizer derived here from T5's: the pre-tokenizer DeBERTa-v3's and XLM-R-style conversions
// use, Sequence [WhitespaceSplit, Metaspace (split false)] (no such real file is obtainable here).
const derivedRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'tok-json-'));
{
  const d = path.join(derivedRoot, 't5-wssplit');
  fs.mkdirSync(d);
  const j = JSON.parse(fs.readFileSync(path.join(fixtures, 't5-v1_1', 'tokenizer.json'), 'utf8'));
  j.pre_tokenizer = { type: 'Sequence', pretokenizers: [{ type: 'WhitespaceSplit' },
    { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: false }] };
  fs.writeFileSync(path.join(d, 'tokenizer.json'), JSON.stringify(j));
  fs.copyFileSync(path.join(fixtures, 't5-v1_1', 'tokenizer_config.json'), path.join(d, 'tokenizer_config.json'));
}
const t0 = Date.now();
for (const name of [...MODELS, 't5-wssplit']) {
  const root = name === 't5-wssplit' ? derivedRoot : fixtures;
  env.localModelPath = root + path.sep;
  const tok = await AutoTokenizer.from_pretrained(name);
  const unigram = name.startsWith('t5');
  const added = new Map(JSON.parse(fs.readFileSync(path.join(root, name, 'tokenizer.json'), 'utf8')).added_tokens
    .map((t) => [t.id, t]));
  const enc = (text, opts = {}) => tok(text, { return_tensor: false, ...opts }).input_ids.map(Number);
  const specials = unigram ? [[], [1]] : [[50281], [50282]];
  const cases = [];
  for (const [label, s] of singles) cases.push({ label, line: hex(s), ids: enc(s), text: s });
  for (const [i, [a, b]] of pairs.entries()) {
    let ids = enc(a, { text_pair: b });
    if (b === '') {
      const A = enc(a, { add_special_tokens: false });
      ids = [...specials[0], ...A, ...specials[1], ...specials[1]];
    }
    cases.push({ label: 'pair ' + i, line: hex(a) + '\t' + hex(b), ids });
  }
  const got = runDriver(path.join(root, name), cases.map((c) => c.line));
  let nIds = 0, nOffsets = 0, nTok = 0, nApprox = 0;
  cases.forEach((c, i) => {
    const g = got[i];
    const where = `${name} [tokenizer.json] ${c.label} ${JSON.stringify(c.text ?? '').slice(0, 80)}`;
    if (g.error) return fail(`${where}: error ${g.error}`);
    if (!eq(g.ids, c.ids)) {
      if (unigram && c.text !== undefined && PRECOMPILED_APPROX.test(c.text)) {
        nApprox++;
        console.log(`NOTE ${where}: transformers.js's Precompiled approximation differs:\n  transformers.js ${c.ids.join(' ')}\n  adapterd        ${g.ids.join(' ')}`);
        return;
      }
      return fail(`${where}:\n  transformers.js ${c.ids.join(' ')}\n  adapterd        ${g.ids.join(' ')}`);
    }
    nIds++;
    if (!g.type_ids.every((t) => t === 0)) return fail(`${where}: type ids ${g.type_ids}`);
    if (c.text === undefined) return;
    const cps = Array.from(c.text);
    let prevStart = 0, ok = true;
    for (let k = 0; k < g.ids.length; k++) {
      const s = g.offsets[2 * k], e = g.offsets[2 * k + 1], id = g.ids[k];
      const special = (k === 0 && specials[0].includes(id)) || (k === g.ids.length - 1 && specials[1].includes(id));
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
      const addedTok = added.get(id);
      if (unigram && id === 2) { // <unk>: an added token, and the model's unknown piece
        if (slice.length === 0) ok = fail(`${where}: <unk> spans nothing`);
        continue;
      }
      if (addedTok) {
        if (slice !== addedTok.content) ok = fail(`${where}: added token ${addedTok.content} spans "${slice}"`);
        continue;
      }
      // a character that normalizes to several pieces gives each its span (½ -> ▁1 ⁄ 2)
      const shared = (k > 0 && g.offsets[2 * k - 1] === e) || (k + 1 < g.ids.length && g.offsets[2 * k + 3] === e);
      if (unigram) {
        const norm = tok._tokenizer.normalizer(slice);
        const n2 = norm.replaceAll(' ', '\u2581').replace(/^\u2581+/, '');
        const bare = token.replace(/^\u2581+/, '');
        if (!(n2 === bare || ((shared || bare === '') && n2.includes(bare)))) ok = fail(`${where}: token ${k} "${token}" spans "${slice}" (normalized "${n2}")`);
      } else {
        const bl = byteLevel(slice.normalize('NFC'));
        const bare = token; // no trim_offsets: TemplateProcessing keeps the spaces in the spans, as Python
        let whole = true;
        try { utf8Fatal.decode(Buffer.from(Array.from(token, (ch) => INV.get(ch)))); } catch { whole = false; }
        if (whole ? !(bl === bare || (shared && bl.includes(bare))) : !bl.includes(bare)) ok = fail(`${where}: token ${k} "${token}" spans "${slice}" ("${bl}")`);
      }
    }
    if (ok !== false) nOffsets++;
  });
  console.log(`${name} [tokenizer.json]: ${cases.length} inputs (${singles.length} single texts, ${pairs.length} pairs): ` +
    `ids identical ${nIds}/${cases.length}${nApprox ? ` (+${nApprox} where transformers.js approximates the charsmap)` : ''}, ` +
    `offsets consistent for ${nOffsets} texts (${nTok} tokens)`);
}
fs.rmSync(derivedRoot, { recursive: true, force: true });
console.log(`${failures ? 'FAILED' : 'OK'}: ${failures} differences; ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(failures ? 1 : 0);
