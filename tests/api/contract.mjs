// contract.mjs - the contract test: dredd (a tool nobody here wrote) sends the examples of
// proto/openapi.yaml to a live `adapterd serve` on the bundled example registry (the examples name
// its tasks) and checks each answer's status, media type and body against the document.
// dredd_hooks.js says what is left out and how bodies are checked. The server runs on a temporary
// copy of the registry, since the admin routes write its state file.
//     node contract.mjs <adapterd> <openapi.yaml> <openapi.json> <registry>
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer } from './serve.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const [binary, yaml, json, registry] = process.argv.slice(2);
const token = 'contract-test-token';
// a copy: the admin routes write the registry's state file
const copy = mkdtempSync(join(tmpdir(), 'adapterd-contract-'));
cpSync(registry, copy, { recursive: true });
const srv = await startServer(binary, ['--registry', copy, '--admin-token', token]);
let status = 1;
try {
  const r = spawnSync(process.execPath, [join(here, 'node_modules', 'dredd', 'bin', 'dredd'), yaml, srv.url,
    `--hookfiles=${join(here, 'dredd_hooks.js')}`, '--header', `Authorization: Bearer ${token}`, '--loglevel=warning',
    '--reporter=dot'], { encoding: 'utf8', env: { ...process.env, ADAPTERD_OPENAPI_JSON: json } });
  // the parser's notes on OpenAPI 3.1 keywords it does not model are noise here
  const out = `${r.stdout}\n${r.stderr}`.split('\n').filter((l) => !/parser warning|padLevels|trace-warnings/.test(l));
  console.log(out.join('\n'));
  const m = out.join('\n').match(/(\d+) passing, (\d+) failing, (\d+) errors/);
  if (r.status === 0 && m && Number(m[1]) > 0 && m[2] === '0' && m[3] === '0') status = 0;
  if (m) console.log(`${m[1]} passed, ${Number(m[2]) + Number(m[3])} failed`);
} finally {
  const code = await srv.stop();
  if (code !== 0) {
    console.error(`adapterd serve exited ${code} after SIGTERM:\n${srv.log()}`);
    status = 1;
  }
  rmSync(copy, { recursive: true, force: true });
}
process.exit(status);
