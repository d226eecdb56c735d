// clients.mjs - the real npm clients of other servers, configured only with the base URL as their
// docs say, against a live `adapterd serve` on the fixture registry (bert-tiny): Hugging Face's
// @huggingface/inference (featureExtraction with endpointUrl = the base URL, TEI's usual setup),
// LangChain's HuggingFaceInferenceEmbeddings (@langchain/community, endpointUrl = the base URL) and
// openai (embeddings.create with baseURL = .../v1; it asks for base64 by default and decodes it; and
// models.list / models.retrieve against a second server started with --served-model-name, whose
// alias must embed exactly as the registry's model does).
// Their answers must equal POST /v1/embed's (which tests/server/test_embed.c checks against
// PyTorch): the same numbers (OpenAI's base64 float32s equal the JSON floats rounded to float32),
// and their errors must reach the caller with the server's status and message.
//     node clients.mjs <adapterd> <registry>
import assert from 'node:assert/strict';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { InferenceClient } from '@huggingface/inference';
import { HuggingFaceInferenceEmbeddings } from '@langchain/community/embeddings/hf';
import OpenAI from 'openai';

const here = dirname(fileURLToPath(import.meta.url));
const { startServer } = await import(join(here, '..', 'api', 'serve.mjs'));
const [binary, registry] = process.argv.slice(2);
const srv = await startServer(binary, ['--registry', registry]);
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
async function v1embed(body) {
  const r = await fetch(`${srv.url}/v1/embed`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  assert.equal(r.status, 200);
  return r.json();
}

try {
  const hf = new InferenceClient();
  await check('@huggingface/inference featureExtraction, endpointUrl = base URL', async () => {
    const got = await hf.featureExtraction({ endpointUrl: srv.url, inputs: 'the match was great' });
    assert.deepEqual(got, await v1embed({ inputs: 'the match was great' }));
  });
  await check('@huggingface/inference featureExtraction, a batch, normalize false', async () => {
    const inputs = ['a cat', 'the dog sat down'];
    const got = await hf.featureExtraction({ endpointUrl: srv.url, inputs, normalize: false });
    assert.deepEqual(got, await v1embed({ inputs, normalize: false }));
  });
  await check('@huggingface/inference featureExtraction, endpointUrl = .../embed', async () => {
    const got = await hf.featureExtraction({ endpointUrl: `${srv.url}/embed`, inputs: 'hello' });
    assert.deepEqual(got, await v1embed({ inputs: 'hello' }));
  });
  await check('@huggingface/inference: a refused request reaches the caller with the server message', async () => {
    await assert.rejects(hf.featureExtraction({ endpointUrl: srv.url, inputs: 'x', prompt_name: 'nope' }),
      (e) => /prompt/.test(String(e.message) + JSON.stringify(e.httpResponse?.body ?? '')));
  });

  // LangChain's TEI embeddings: @huggingface/inference underneath, endpointUrl = the base URL (its docs'
  // setup for a self-hosted endpoint); no model given (LangChain warns and picks a default name; the
  // endpoint client posts to the URL, where the registry's one model answers)
  const lc = new HuggingFaceInferenceEmbeddings({ endpointUrl: srv.url });
  await check('LangChain HuggingFaceInferenceEmbeddings embedDocuments, endpointUrl = base URL', async () => {
    const docs = ['the match was great', 'a cat', 'line one\nline two'];
    const got = await lc.embedDocuments(docs);
    // LangChain replaces newlines by spaces before sending
    assert.deepEqual(got, await v1embed({ inputs: docs.map((d) => d.replace(/\n/g, ' ')) }));
  });
  await check('LangChain HuggingFaceInferenceEmbeddings embedQuery', async () => {
    const got = await lc.embedQuery('where is the cat?');
    assert.deepEqual(got, (await v1embed({ inputs: ['where is the cat?'] }))[0]);
  });

  const openai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused' });
  await check('openai embeddings.create (base64 by default), baseURL = .../v1', async () => {
    const input = ['the match was great', 'a cat'];
    const got = await openai.embeddings.create({ model: 'bert-tiny', input });
    const want = await v1embed({ inputs: input });
    assert.equal(got.object, 'list');
    assert.equal(got.data.length, 2);
    got.data.forEach((d, i) => {
      assert.equal(d.index, i);
      assert.deepEqual(d.embedding, want[i].map(Math.fround));
    });
    assert.ok(got.usage.prompt_tokens > 0 && got.usage.total_tokens === got.usage.prompt_tokens);
  });
  await check('openai embeddings.create encoding_format float, dimensions', async () => {
    const got = await openai.embeddings.create({ model: 'bert-tiny', input: 'hello world', encoding_format: 'float', dimensions: 8 });
    const raw = (await v1embed({ inputs: 'hello world', normalize: false }))[0].slice(0, 8);
    const norm = Math.sqrt(raw.reduce((s, x) => s + x * x, 0));
    got.data[0].embedding.forEach((x, k) => assert.ok(Math.abs(x - raw[k] / norm) < 1e-6, `value ${k}: ${x} vs ${raw[k] / norm}`));
  });
  await check('openai embeddings.create with token ids', async () => {
    const got = await openai.embeddings.create({ model: 'bert-tiny', input: [[2, 135, 3]], encoding_format: 'float' });
    assert.deepEqual(got.data[0].embedding, (await v1embed({ inputs: [[2, 135, 3]] }))[0]);
  });
  await check('openai: an unknown model is a NotFoundError carrying the server message', async () => {
    await assert.rejects(openai.embeddings.create({ model: 'gpt-9', input: 'x' }), (e) => {
      assert.equal(e.status, 404);
      assert.equal(e.type, 'not_found_error');
      assert.match(e.message, /unknown model/);
      return true;
    });
  });
  await check('openai models.list on the registry alone: its model by its registry name', async () => {
    const ids = [];
    for await (const m of openai.models.list()) ids.push(m.id);
    assert.deepEqual(ids, ['bert-tiny']);
  });

  // vLLM's --served-model-name: the name an OpenAI client already sends, served by the registry's model
  const alias = 'text-embedding-ada-002';
  const named = await startServer(binary, ['--registry', registry, '--served-model-name', `${alias},ada`]);
  try {
    const client = new OpenAI({ baseURL: `${named.url}/v1`, apiKey: 'unused' });
    await check('openai models.list with --served-model-name: the first name is the id', async () => {
      const page = await client.models.list();
      assert.equal(page.data.length, 1);
      const m = page.data[0];
      assert.equal(m.id, alias);
      assert.equal(m.object, 'model');
      assert.equal(m.owned_by, 'adapterd');
      assert.ok(Number.isInteger(m.created) && m.created > 1.6e9, `created ${m.created}`);
    });
    await check('openai models.retrieve by each name; an unknown one is a NotFoundError naming the served names', async () => {
      for (const id of [alias, 'ada', 'bert-tiny']) assert.equal((await client.models.retrieve(id)).id, id);
      await assert.rejects(client.models.retrieve('gpt-9'), (e) => {
        assert.equal(e.status, 404);
        assert.match(e.message, new RegExp(`unknown model.*${alias}`));
        return true;
      });
    });
    await check('openai embeddings.create with the alias equals /v1/embed on the registry model', async () => {
      const input = ['the match was great', 'a cat'];
      const got = await client.embeddings.create({ model: alias, input });
      assert.equal(got.model, alias);
      const want = await v1embed({ inputs: input });
      got.data.forEach((d, i) => assert.deepEqual(d.embedding, want[i].map(Math.fround)));
      const floats = await client.embeddings.create({ model: 'ada', input: input[0], encoding_format: 'float' });
      assert.deepEqual(floats.data[0].embedding, want[0]);
    });
    await check('openai embeddings.create with a name not served: 404 naming the served names', async () => {
      await assert.rejects(client.embeddings.create({ model: 'text-embedding-3-small', input: 'x' }), (e) => {
        assert.equal(e.status, 404);
        assert.match(e.message, new RegExp(`text-embedding-3-small.*"${alias}", "ada", "bert-tiny"`));
        return true;
      });
    });
  } finally {
    const code = await named.stop();
    if (code !== 0) {
      console.log(`adapterd serve --served-model-name exited ${code} after SIGTERM:\n${named.log()}`);
      failed++;
    }
  }

  // a body over --max-body-bytes (1 MiB by default) from Node's own fetch, which the npm clients use:
  // the client must read the 413, not a reset connection. 7 MiB: answered on the headers, a body this
  // size was reset 7 times of 9 here (2 MiB bodies were not, on this machine's loopback)
  await check("Node's fetch: a 7 MiB predict body gets its 413, three times", async () => {
    for (let i = 0; i < 3; i++) {
      const body = JSON.stringify({ inputs: ['x'.repeat(7 << 20)] });
      const r = await fetch(`${srv.url}/v1/predict`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
      assert.equal(r.status, 413);
      assert.equal((await r.json()).error.code, 'too_large');
    }
  });
} finally {
  const code = await srv.stop();
  if (code !== 0) {
    console.log(`adapterd serve exited ${code} after SIGTERM:\n${srv.log()}`);
    failed++;
  }
}
console.log(failed ? `${failed} failed` : 'all passed');
process.exit(failed ? 1 : 0);
