// serve.mjs - starts the real `adapterd serve` on 127.0.0.1 with a free port for the API checks,
// waits until /readyz says ready, and stops it with SIGTERM (it must exit 0, as after a drain).
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// binary: the adapterd executable (ADAPTERD_TEST_SERVER, when set, names another build of it, as for
// the C integration tests: CI runs them against a ThreadSanitizer server); args: after `serve`
// (--registry etc.). Resolves to { url, stop() } once ready, rejects when the server exits or is
// not ready within 30 s.
export async function startServer(binary, args) {
  binary = process.env.ADAPTERD_TEST_SERVER || binary;
  const port = await freePort();
  const child = spawn(binary, ['serve', '--host', '127.0.0.1', '--port', String(port), '--threads', '1', ...args], {
    stdio: ['ignore', 'inherit', 'pipe'],
  });
  let log = '';
  child.stderr.on('data', (d) => { log += d; });
  let exited = null;
  child.on('exit', (code, sig) => { exited = { code, sig }; });
  const url = `http://127.0.0.1:${port}`;
  const t0 = Date.now();
  for (;;) {
    if (exited) throw new Error(`adapterd serve exited (${exited.code ?? exited.sig}) before it was ready:\n${log}`);
    if (Date.now() - t0 > 30000) {
      child.kill('SIGKILL');
      throw new Error(`adapterd serve was not ready within 30 s:\n${log}`);
    }
    try {
      const r = await fetch(`${url}/readyz`);
      if (r.status === 200) break;
    } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    log: () => log,
    stop: () => new Promise((resolve) => {
      if (exited) return resolve(exited.code);
      child.on('exit', (code) => resolve(code));
      child.kill('SIGTERM');
    }),
  };
}
