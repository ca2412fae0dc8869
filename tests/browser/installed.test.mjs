// The page as an installed loadshape serves it: the executable `pip install` put in a fresh virtualenv
// (scripts/build_wheel.sh), started from an empty folder with no `--dist`, serves its embedded page, and the page
// computes and connects as the checkout's does. LOADSHAPE_INSTALLED_BIN names that executable; scripts/test.sh sets
// it after building and installing the wheel.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { launchBrowser, readMetrics, screenshot, SHOTS, startAgent } from './harness.mjs';

const INSTALLED = process.env.LOADSHAPE_INSTALLED_BIN;
const skip = INSTALLED ? false : 'LOADSHAPE_INSTALLED_BIN is not set (scripts/build_wheel.sh prints it)';
let browser;
let agent;
before(async () => {
  if (skip) return;
  browser = await launchBrowser();
  const empty = mkdtempSync(path.join(tmpdir(), 'loadshape-installed-'));
  agent = await startAgent([], {}, null, { bin: INSTALLED, cwd: empty });
});
after(async () => {
  await browser?.close();
  await agent?.stop();
});

test('the installed executable serves its embedded page, which computes and connects', { skip }, async () => {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const responses = [];
  page.on('response', (r) => responses.push(r));
  await page.goto(agent.url);
  await page.locator('[data-status="connected"]').first().waitFor({ state: 'attached', timeout: 30000 });
  // The first simulated number: the explorer's headline metrics are computed in the page's wasm.
  await page.locator('[data-metric]').first().waitFor({ state: 'attached', timeout: 30000 });
  const shown = await readMetrics(page);
  assert.ok(Object.keys(shown).length >= 10, `the page shows ${Object.keys(shown).length} metrics`);
  const wasm = responses.find((r) => /_bg\.wasm$/.test(new URL(r.url()).pathname));
  assert.ok(wasm, 'the page loaded its wasm module');
  const headers = await wasm.allHeaders();
  assert.equal(headers['content-type'], 'application/wasm');
  assert.match(headers['content-encoding'] ?? '', /^(br|gzip)$/, 'the module is sent compressed');
  assert.match(headers['cache-control'] ?? '', /immutable/, 'a content-hashed file is cached as immutable');
  assert.ok(headers.etag, 'an ETag to revalidate against');
  await screenshot(page, 'installed-1440x900');
  // The README's picture (docs/page.png is a copy): what a newcomer sees first, one screen.
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, 'readme-1440x900.png') });
  assert.deepEqual(errors, [], 'no uncaught errors on the page');
  await page.close();
});

test('the embedded files revalidate: index.html is no-cache, and a matching ETag gets 304', { skip }, async () => {
  const first = await fetch(`${agent.origin}/`);
  assert.equal(first.status, 200);
  assert.equal(first.headers.get('cache-control'), 'no-cache');
  assert.match(first.headers.get('content-type'), /^text\/html/);
  const etag = first.headers.get('etag');
  assert.ok(etag, 'index.html has an ETag');
  const again = await fetch(`${agent.origin}/`, { headers: { 'If-None-Match': etag } });
  assert.equal(again.status, 304);
  const missing = await fetch(`${agent.origin}/no-such-module.wasm`);
  assert.equal(missing.status, 404, 'a missing asset is a 404, not the page under a wrong type');
});
