// lint.mjs - lints proto/openapi.yaml with Redocly's CLI and its recommended rules (no
// configuration file: the rules are the tool's). Any error or warning fails.
//     node lint.mjs <openapi.yaml>
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const cli = join(here, 'node_modules', '@redocly', 'cli', 'bin', 'cli.js');
const r = spawnSync(process.execPath, [cli, 'lint', process.argv[2], '--format=stylish'], {
  encoding: 'utf8', env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
});
const out = `${r.stdout}\n${r.stderr}`;
process.stdout.write(out.split('\n').filter((l) => !/[║╔╚]/.test(l)).join('\n'));
const problems = out.match(/^\s*\d+:\d+\s+(error|warning)\s/gm) || [];
if (r.status !== 0 || problems.length) {
  console.error(`\nFAIL: ${problems.length} problems (exit ${r.status})`);
  process.exit(1);
}
console.log('\n1 passed, 0 failed');
