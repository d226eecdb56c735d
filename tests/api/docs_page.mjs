// docs_page.mjs - GET /docs in a real browser: Debian's chromium, headless, driven by
// playwright-core. The page must render the document's operations (Redoc draws them from
// /openapi.json with the bundle compiled into the server, with no network) and is saved as a
// screenshot.
//     node docs_page.mjs <adapterd> <registry> <screenshot.png>
import { chromium } from 'playwright-core';
import { startServer } from './serve.mjs';

const [binary, registry, shot] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const srv = await startServer(binary, ['--registry', registry]);
let failed = 0, passed = 0;
const check = (ok, what) => {
  if (ok) passed++;
  else { failed++; console.error(`FAIL: ${what}`); }
};
let browser;
try {
  browser = await chromium.launch({
    executablePath, headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run'],
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  // as on a machine with no network: anything outside the server is refused, and the page must
  // render all the same (Redoc's footer asks its CDN for a logo, and hides it when that fails)
  const refused = [];
  await page.route('**/*', (route) => {
    const u = route.request().url();
    if (u.startsWith(srv.url) || u.startsWith('data:') || u.startsWith('blob:')) return route.continue();
    refused.push(u);
    return route.abort();
  });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const resp = await page.goto(`${srv.url}/docs`, { waitUntil: 'load' });
  check(resp && resp.status() === 200, `GET /docs answered ${resp && resp.status()}`);
  // Redoc renders asynchronously: wait for an operation's path to appear
  await page.waitForFunction(() => document.body.innerText.includes('/v1/predict'), null, { timeout: 30000 });
  const text = await page.evaluate(() => document.body.innerText);
  for (const want of ['/v1/predict', '/v1/embed', '/v1/tokenize', '/v2/models/{task}/infer', 'Run tasks on inputs',
    'Embeddings of inputs', 'adapterd'])
    check(text.includes(want), `the page does not show "${want}"`);
  check(errors.length === 0, `script errors: ${errors.join('; ')}`);
  if (refused.length) console.log(`refused (no network): ${refused.join(', ')}`);
  await page.screenshot({ path: shot, fullPage: false });
  console.log(`screenshot: ${shot}`);
} catch (e) {
  failed++;
  console.error(`FAIL: ${e.stack || e}`);
} finally {
  if (browser) await browser.close();
  const code = await srv.stop();
  check(code === 0, `adapterd serve exited ${code} after SIGTERM`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
