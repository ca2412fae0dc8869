// Issue 2's walking skeleton, end to end: the agent serves the page, the page computes the seed's three profile
// comparisons in wasm and they equal what the native binary computes; the page shakes hands over the websocket.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { BIN, launchBrowser, readMetrics, screenshot } from './harness.mjs';

const URL_WITH_TOKEN = process.env.LOADSHAPE_URL;
let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

test('page computes the seed comparisons in wasm exactly as the native binary does', async () => {
  const native = JSON.parse(execFileSync(BIN, ['simulate', '--seed-report'], { encoding: 'utf8' }));
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(URL_WITH_TOKEN);
  for (const [name, expected] of Object.entries(native.scenario_comparisons)) {
    const card = page.locator(`[data-profile="${name}"]`).first();
    await card.waitFor({ state: 'attached', timeout: 20000 });
    const shown = await readMetrics(card);
    let compared = 0;
    for (const [field, value] of Object.entries(expected)) {
      if (typeof value !== 'number') continue;
      assert.ok(field in shown, `profile ${name}: page shows no data-metric="${field}"`);
      assert.equal(Number(shown[field]), value, `profile ${name}: ${field} in wasm vs native`);
      compared += 1;
    }
    assert.ok(compared >= 10, `profile ${name}: compared only ${compared} fields`);
  }
  await screenshot(page, 'skeleton-1280x800');
  assert.deepEqual(errors, [], 'no uncaught errors on the page');
  await page.close();
});

test('page shakes hands with the agent over the websocket', async () => {
  const version = execFileSync(BIN, ['--version'], { encoding: 'utf8' }).trim().split(/\s+/)[1];
  const page = await browser.newPage();
  await page.goto(URL_WITH_TOKEN);
  await page.locator('[data-status="connected"]').first().waitFor({ state: 'attached', timeout: 20000 });
  const m = await readMetrics(page);
  assert.equal(m.agent_version, version);
  assert.equal(Number(m.agent_protocol), Number(m.page_protocol));
  await page.close();
});

test('without the token the page says it cannot connect, and does not crash', async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(URL_WITH_TOKEN.replace(/#token=.*/, '#token=wrong'));
  await page.locator('[data-status="error"], [data-status="disconnected"]').first().waitFor({ state: 'attached', timeout: 20000 });
  assert.deepEqual(errors, []);
  await page.close();
});
