// tls.mjs - the real npm clients over TLS with a tenant key (issue 38's "Done when"): openai and
// @huggingface/inference against `adapterd serve --tls-cert ... --keys ...`, configured as their docs say
// (baseURL / endpointUrl https://..., the key as the API key) and trusting the test's CA through
// NODE_EXTRA_CA_CERTS, as a deployment with a private CA does. Run by tests/tls/test_tls.py, which made the
// certificates and the keys file; prints one "ok"/"FAIL" line per check, exits 1 on a failure.
//     NODE_EXTRA_CA_CERTS=ca.crt node tls.mjs <https base URL> <key>
import assert from 'node:assert/strict';
import { InferenceClient } from '@huggingface/inference';
import OpenAI from 'openai';

const [base, key] = process.argv.slice(2);
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

async function v1embed(inputs) {
  const r = await fetch(`${base}/v1/embed`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
    body: JSON.stringify({ inputs }) });
  assert.equal(r.status, 200);
  return r.json();
}

await check("Node's fetch over TLS: /health, and 401 without the key", async () => {
  assert.equal((await fetch(`${base}/health`)).status, 200);
  const r = await fetch(`${base}/v1/embed`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ inputs: 'x' }) });
  assert.equal(r.status, 401);
  assert.match(r.headers.get('www-authenticate') ?? '', /Bearer/);
});

const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
await check('openai embeddings.create over TLS with the key', async () => {
  const got = await openai.embeddings.create({ model: 'bert-tiny', input: ['the match was great', 'a cat'], encoding_format: 'float' });
  assert.equal(got.data.length, 2);
  const want = await v1embed(['the match was great', 'a cat']);
  for (let i = 0; i < 2; i++)
    got.data[i].embedding.forEach((v, k) => assert.ok(Math.abs(v - want[i][k]) <= 1e-6 * Math.max(1, Math.abs(want[i][k]))));
});
await check('openai over TLS with a wrong key: 401 reaches the caller', async () => {
  const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'not-a-key', maxRetries: 0 });
  await assert.rejects(bad.embeddings.create({ model: 'bert-tiny', input: 'x' }), (e) => e.status === 401);
});

const hf = new InferenceClient(key);
await check('@huggingface/inference featureExtraction over TLS with the key', async () => {
  const got = await hf.featureExtraction({ endpointUrl: base, inputs: 'the match was great' });
  assert.deepEqual(got, await v1embed('the match was great'));
});
await check('@huggingface/inference without a key: refused', async () => {
  await assert.rejects(new InferenceClient().featureExtraction({ endpointUrl: base, inputs: 'x' }));
});
process.exit(failed ? 1 : 0);
