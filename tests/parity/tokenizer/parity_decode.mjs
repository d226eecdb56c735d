// parity_decode.mjs - adapterd's eng_tok_decode (what TEI's POST /decode answers) against transformers.js's
// decode, local files only, for one tokenizer of each kind the shared data has as tokenizer.json:
// bert-base-uncased (WordPiece), roberta-base and modernbert-base (byte-level BPE), t5-v1_1 (Unigram,
// Metaspace). Ids come from two sources:
//   * transformers.js's encodings (special tokens added) of the shared datasets' first sentences and the
//     hard cases of hard_cases.json;
//   * random id sequences (seeded), which cut multi-byte characters in the middle (byte-level: invalid
//     UTF-8 becomes U+FFFD) and put special tokens anywhere;
// each decoded with special tokens kept and skipped. transformers.js cleans up tokenization spaces for
// WordPiece (as adapterd's WordPiece decode does, transformers' clean_up_tokenization) and not for the
// others (the decoders alone, as Hugging Face's Rust tokenizers - TEI - answer).
// Exit 0 on full agreement, 1 on any difference (the first ones printed), 77 when transformers.js, the
// tokenizers or the datasets are missing.
import fs from 'node:fs';
import path from 'node:path';
import { AutoTokenizer, fail, failures, fixtures, readJson, runDriver, sentences } from './common.mjs';

const t0 = Date.now();
const hard = readJson('hard_cases.json');
const texts = [...sentences.slice(0, 1500), ...hard.single];

// a small seeded generator (xorshift32): the same random ids on every run
let seed = 0x9e3779b9;
const rand = (n) => {
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed % n;
};

for (const [name, wordpiece] of [['bert-base-uncased', true], ['roberta-base', false], ['modernbert-base', false],
  ['t5-v1_1', false]]) {
  if (!fs.existsSync(path.join(fixtures, name, 'tokenizer.json'))) {
    console.log(`SKIP: ${path.join(fixtures, name, 'tokenizer.json')} is absent`);
    process.exit(77);
  }
  const tok = await AutoTokenizer.from_pretrained(name);
  const seqs = texts.map((t) => tok.encode(t));
  // random ids over the ids that have a token (the model's vocabulary and the added tokens)
  const vocab = tok.get_vocab();
  const known = [...new Set(vocab instanceof Map ? vocab.values() : Object.values(vocab))].sort((a, b) => a - b);
  for (let k = 0; k < 400; k++) {
    const n = 1 + rand(12);
    seqs.push(Array.from({ length: n }, () => known[rand(known.length)]));
  }
  const lines = [];
  const want = [];
  for (const ids of seqs) {
    for (const skip of [true, false]) {
      lines.push(`D\t${skip ? 1 : 0}\t${ids.join(',')}`);
      want.push(tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: wordpiece }));
    }
  }
  const got = runDriver(path.join(fixtures, name), lines);
  let same = 0;
  got.forEach((g, i) => {
    const text = g.text !== undefined ? Buffer.from(g.text, 'hex').toString('utf8') : `(error ${g.error})`;
    if (text === want[i]) same++;
    else fail(`${name}: ${lines[i]}\n  adapterd        ${JSON.stringify(text)}\n  transformers.js ${JSON.stringify(want[i])}`);
  });
  console.log(`${name}: ${same}/${lines.length} decodes identical (${texts.length} encoded texts, 400 random id sequences, ` +
    'special tokens kept and skipped)');
}
console.log(`${failures ? 'FAILED' : 'OK'}: ${failures} differences; ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(failures ? 1 : 0);
