// dredd_hooks.js - the contract test's hooks (run by contract.mjs through dredd).
//
// What is left out, and why. Dredd sends every operation's documented example once, in document
// order, to one live server. These would change what later operations see, or need a tar archive
// the document cannot carry as an example: PUT /v1/tasks/{name}/versions/{version} (upload),
// DELETE /v1/tasks/{name}/versions/{version} and DELETE /v1/tasks/{name}; tests/server/test_admin.c
// covers them. So would a rollout (POST /v1/tasks/{name}:rollout needs a second version to
// roll out, :promote and :abort a rollout to end); tests/server/test_rollout.c covers them and checks
// their bodies against this document. Dredd also makes a transaction of every documented error response of an OpenAPI 3
// document, which the success examples cannot produce: only 2xx responses are sent (the error
// paths are the integration tests' work).
//
// What is checked. For OpenAPI 3, dredd's parser gives no JSON Schema for response bodies and falls
// back to comparing keys with an example it generates from the schema, where every optional
// property appears as if it were required. Each transaction therefore gets its response's schema
// from the document itself (the generated openapi.json, $refs resolved), so bodies are validated
// against exactly what the document says.
const fs = require('fs');
const hooks = require('hooks');

const doc = JSON.parse(fs.readFileSync(process.env.ADAPTERD_OPENAPI_JSON, 'utf8'));

function resolve(node, seen = new Set()) {
  if (Array.isArray(node)) return node.map((n) => resolve(n, seen));
  if (!node || typeof node !== 'object') return node;
  if (node.$ref) {
    if (seen.has(node.$ref)) throw new Error(`cyclic $ref ${node.$ref}`);
    const target = node.$ref.replace(/^#\//, '').split('/').reduce((o, k) => o[k], doc);
    return resolve(target, new Set([...seen, node.$ref]));
  }
  const out = {};
  for (const [k, v] of Object.entries(node)) if (k !== 'example' && k !== 'examples') out[k] = resolve(v, seen);
  return out;
}

// The document's operation for a request: its path template matched segment by segment.
function operation(method, uri) {
  const path = uri.split('?')[0];
  for (const [tmpl, item] of Object.entries(doc.paths)) {
    const re = new RegExp('^' + tmpl.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/:]+') + '$');
    if (re.test(path) && item[method.toLowerCase()]) return item[method.toLowerCase()];
  }
  return null;
}

hooks.beforeEach((t, done) => {
  const m = t.request.method, status = String(t.expected.statusCode);
  const rollout = /:(rollout|promote|abort)$/.test(t.request.uri.split('?')[0]);
  if (m === 'PUT' || m === 'DELETE' || rollout || !status.startsWith('2')) {
    t.skip = true;
    return done();
  }
  const op = operation(m, t.request.uri);
  const media = op && op.responses[status] && resolve(op.responses[status]).content;
  const json = media && media['application/json'];
  if (json && json.schema) {
    t.expected.bodySchema = JSON.stringify({ $schema: 'http://json-schema.org/draft-07/schema#', ...json.schema });
    delete t.expected.body;
  }
  // the document names the media type; parameters after it (charset, version) are the server's
  if (media && t.expected.headers && t.expected.headers['Content-Type']) delete t.expected.headers['Content-Type'];
  done();
});

hooks.beforeEachValidation((t, done) => {
  // a media type the document lists for this response, parameters aside
  const op = operation(t.request.method, t.request.uri);
  const media = op && op.responses[String(t.expected.statusCode)] && resolve(op.responses[String(t.expected.statusCode)]).content;
  const got = String(t.real.headers['content-type'] || '').split(';')[0].trim();
  if (media && !Object.keys(media).includes(got)) t.fail = `Content-Type ${got} is not one the document lists (${Object.keys(media).join(', ')})`;
  done();
});
