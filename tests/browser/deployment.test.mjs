// The page speaks deployments (#40 item 5, in part): a deployment scenario opens on its model, GPU, TP and
// precision as menus of the catalog; picking another GPU recomputes the scenario as `loadshape simulate` does.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { cli, launchBrowser, numericFields, readMetrics, ROOT, screenshot, shareLink, simulate } from './harness.mjs';

const ORIGIN = new URL(process.env.LOADSHAPE_URL).origin;
let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

test('a deployment opens on model and GPU menus, and another GPU computes as the CLI does', async () => {
  const scenario = JSON.parse(readFileSync(path.join(ROOT, 'examples/deployment-h100-llama8b.json'), 'utf8'));
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(shareLink(scenario, 'deployment', ORIGIN));
  await page.locator('[data-summary="explorer"] [data-metric="ttft_p50_ms"]').first().waitFor({ timeout: 30000 });
  const gpu = page.locator('select[data-pointer="/deployment/gpu"]');
  const model = page.locator('select[data-pointer="/deployment/model"]');
  await gpu.waitFor({ timeout: 20000 });
  assert.ok(await gpu.isVisible(), 'the GPU menu is among the first controls, not under Advanced');
  assert.equal(await gpu.inputValue(), 'h100-sxm');
  assert.equal(await model.inputValue(), 'llama-3.1-8b');
  const gpus = await gpu.locator('option').evaluateAll((os) => os.map((o) => o.value));
  assert.ok(gpus.includes('h200') && gpus.includes('mi300x'), `the catalog's GPUs: ${gpus}`);
  const before = Number(await page.locator('[data-summary="explorer"] [data-metric="ttft_p50_ms"]').first().getAttribute('data-value'));
  await gpu.selectOption('h200');
  const expected = numericFields(simulate({ ...scenario, deployment: { ...scenario.deployment, gpu: 'h200' } }, 'deployment-h200'));
  assert.notEqual(expected.ttft_p50_ms, before, 'the GPU changes the result');
  await page.waitForFunction((v) => {
    const got = Number(document.querySelector('[data-summary="explorer"] [data-metric="ttft_p50_ms"]')?.dataset.value);
    return Math.abs(got - v) <= 1e-6 * Math.abs(v);
  }, expected.ttft_p50_ms, { timeout: 30000 });
  const shown = await readMetrics(page.locator('[data-summary="explorer"]'));
  let compared = 0;
  for (const [field, value] of Object.entries(expected)) {
    if (!(field in shown)) continue;
    // The roofline's logarithms in wasm can differ from native in the last bit (docs/page.md): a relative 1e-6.
    const got = Number(shown[field]);
    assert.ok(Math.abs(got - value) <= 1e-6 * Math.max(1, Math.abs(value)), `${field}: page ${got} vs CLI ${value}`);
    compared += 1;
  }
  assert.ok(compared >= 8, `only ${compared} fields compared`);
  await screenshot(page, 'page-deployment-1440x900');
  assert.deepEqual(errors, []);
  await page.close();
});
