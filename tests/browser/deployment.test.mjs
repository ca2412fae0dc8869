// The page speaks deployments (#40 item 5, in part): a deployment scenario opens on its model, GPU, TP and
// precision as menus of the catalog; picking another GPU recomputes the scenario as `loadshape simulate` does.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { cli, launchBrowser, numericFields, readMetrics, ROOT, scratchFile, screenshot, shareLink, SHOTS, simulate } from './harness.mjs';

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

// ---- Switching to a deployment, presets, the derived numbers, A/B (#40 items 2 and 5) ----
const SHOTS_DIR = process.env.LOADSHAPE_SHOTS_DIR ? path.resolve(process.env.LOADSHAPE_SHOTS_DIR) : null;
const TOKEN = new URL(process.env.LOADSHAPE_URL).hash.match(/token=([^&]+)/)?.[1] ?? '';

/** Saves what the viewport shows under artifacts/screenshots, and under LOADSHAPE_SHOTS_DIR when set
 * (docs/screenshots holds the committed ones). */
async function shot(page, name) {
  for (const dir of [SHOTS, SHOTS_DIR].filter(Boolean)) {
    mkdirSync(dir, { recursive: true });
    await page.screenshot({ path: path.join(dir, `${name}.png`), fullPage: false });
  }
}

/** The explorer's current scenario, through "Copy link" and `loadshape link --decode` (what a reader of the link gets). */
async function copiedScenario(page) {
  await page.locator('[data-action="copy-link"]').click();
  const link = await page.locator('[data-share-link]').inputValue();
  return { link, scenario: JSON.parse(cli(['link', '--decode', link])) };
}

/** Waits until the explorer shows `expected`'s ttft_p50_ms, then checks every field both have (relative 1e-6). */
async function assertShowsCli(page, expected, what) {
  await page.waitForFunction((v) => {
    const got = Number(document.querySelector('[data-summary="explorer"] [data-metric="ttft_p50_ms"]')?.dataset.value);
    return Math.abs(got - v) <= 1e-6 * Math.abs(v);
  }, expected.ttft_p50_ms, { timeout: 30000 });
  const shown = await readMetrics(page.locator('[data-summary="explorer"]'));
  let compared = 0;
  for (const [field, value] of Object.entries(expected)) {
    if (!(field in shown)) continue;
    const got = Number(shown[field]);
    assert.ok(Math.abs(got - value) <= 1e-6 * Math.max(1, Math.abs(value)), `${what}: ${field}: page ${got} vs CLI ${value}`);
    compared += 1;
  }
  assert.ok(compared >= 8, `${what}: only ${compared} fields compared`);
}

/** The derived card's numbers equal the CLI's `deployment` (simulate --json): KV capacity and every sampled step. */
async function assertDerivedIsCli(page, cliOut, what) {
  const d = cliOut.deployment;
  assert.ok(d, `${what}: the CLI prints the deployment's derived numbers`);
  const card = page.locator('[data-derived]');
  await card.waitFor({ timeout: 20000 });
  assert.equal(Number(await card.locator('[data-kv-blocks]').getAttribute('data-kv-blocks')), d.kv_blocks, `${what}: KV blocks`);
  assert.equal(Number(await card.locator('[data-kv-tokens]').getAttribute('data-kv-tokens')), d.kv_tokens, `${what}: KV tokens`);
  const rows = await card.locator('tr[data-sample]').evaluateAll((rs) => rs.map((r) => ({
    id: r.dataset.sample, stepMs: Number(r.dataset.stepMs), bound: r.dataset.bound })));
  assert.equal(rows.length, d.samples.length, `${what}: one row per sampled step`);
  d.samples.forEach((s, i) => {
    const id = s.kind === 'decode' ? `decode-${s.seqs}` : `prefill-${s.tokens}`;
    assert.equal(rows[i].id, id);
    assert.ok(Math.abs(rows[i].stepMs - s.step_ms) <= 1e-9 * s.step_ms, `${what}: ${id} step ${rows[i].stepMs} vs ${s.step_ms}`);
    assert.equal(rows[i].bound, s.bound, `${what}: ${id} bound`);
  });
  assert.match(await card.locator('[data-derived-title]').textContent(), new RegExp(`${d.model} on ${d.tp} × ${d.gpu}`));
}

test('an engine profile switches to a deployment and back; the deployment computes as the CLI does on the link', async () => {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`${ORIGIN}/#token=${TOKEN}`);
  await page.locator('button[data-model="engine"]').click();
  await page.locator('[data-summary="explorer"] [data-metric="ttft_p50_ms"]').first().waitFor({ timeout: 30000 });
  const toDeployment = page.locator('[data-action="to-deployment"]');
  assert.ok(await toDeployment.isVisible(), '"Describe as a deployment" is among the first controls');
  assert.equal(await page.locator('[data-derived]').count(), 0, 'a profile has no derived numbers');
  const { scenario: asProfile } = await copiedScenario(page);
  assert.ok(asProfile.profile && !asProfile.deployment);
  const before = await readMetrics(page.locator('[data-summary="explorer"]'));

  await toDeployment.click();
  await page.locator('select[data-pointer="/deployment/gpu"]').waitFor({ timeout: 20000 });
  assert.equal(await page.locator('select[data-pointer="/deployment/model"]').inputValue(), 'llama-3.1-8b');
  assert.equal(await page.locator('select[data-pointer="/deployment/gpu"]').inputValue(), 'h100-sxm');
  assert.equal(await page.locator('input[type=number][data-pointer="/deployment/tp"]').inputValue(), '1');
  assert.equal(await page.locator('select[data-pointer="/deployment/weight_dtype"]').inputValue(), 'bf16');
  assert.equal(await page.locator('select[data-pointer="/deployment/kv_dtype"]').inputValue(), 'bf16');
  await page.locator('[data-derived]').waitFor({ timeout: 20000 });
  const { link, scenario } = await copiedScenario(page);
  assert.ok(scenario.deployment && !scenario.profile, 'the link carries the deployment, not coefficients');
  assert.ok(link.length < 700, `the link stays short: ${link.length} characters`);
  const out = simulate(scenario, 'switched-deployment');
  await assertShowsCli(page, numericFields(out), 'switched to a deployment');
  await assertDerivedIsCli(page, out, 'switched to a deployment');
  await shot(page, 'page-deployment-switch-1440x900');

  // Raw coefficients are one click away, and give back the profile (and its result) the page had.
  await page.locator('[data-action="to-profile"]').click();
  await page.locator('[data-derived]').waitFor({ state: 'detached', timeout: 20000 });
  const { scenario: back } = await copiedScenario(page);
  assert.deepEqual(back, asProfile, 'back to the same profile');
  await page.waitForFunction((v) => document.querySelector('[data-summary="explorer"] [data-metric="ttft_p50_ms"]')?.dataset.value === v,
    before.ttft_p50_ms, { timeout: 30000 });
  assert.deepEqual(errors, []);
  await page.close();
});

test('the preset menu offers deployments of the catalog; one computes as the CLI does, with its derived numbers', async () => {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`${ORIGIN}/#token=${TOKEN}`);
  await page.locator('[data-summary="explorer"] [data-metric="ttft_p50_ms"]').first().waitFor({ timeout: 30000 });
  const ids = await page.locator('select[data-control="preset"] option').evaluateAll((os) => os.map((o) => o.value));
  const deployments = ids.filter((id) => id.startsWith('deployment:'));
  assert.ok(deployments.length >= 4, `deployment presets: ${deployments}`);
  assert.ok(deployments.includes('deployment:llama-3.1-70b-fp8-4xh100'), `${deployments}`);
  await page.locator('select[data-control="preset"]').selectOption('deployment:llama-3.1-70b-fp8-4xh100');
  await page.locator('[data-derived]').waitFor({ timeout: 20000 });
  assert.equal(await page.locator('select[data-pointer="/deployment/model"]').inputValue(), 'llama-3.1-70b');
  assert.equal(await page.locator('select[data-pointer="/deployment/weight_dtype"]').inputValue(), 'fp8');
  assert.equal(await page.locator('input[type=number][data-pointer="/deployment/tp"]').inputValue(), '4');
  const { scenario } = await copiedScenario(page);
  assert.deepEqual(scenario.deployment, { model: 'llama-3.1-70b', gpu: 'h100-sxm', tp: 4, weight_dtype: 'fp8', kv_dtype: 'bf16' });
  assert.equal(await page.locator('select[data-control="preset"]').getAttribute('data-preset-state'), 'deployment:llama-3.1-70b-fp8-4xh100', 'not "(modified)"');
  const out = simulate(scenario, 'preset-70b');
  await assertShowsCli(page, numericFields(out), 'the 70B preset');
  await assertDerivedIsCli(page, out, 'the 70B preset');
  assert.deepEqual(errors, []);
  await page.close();
});

test('A/B of two deployments is one click from the result: another GPU, TP2 against two replicas, co-located against P/D', async () => {
  const base = JSON.parse(readFileSync(path.join(ROOT, 'examples/deployment-h100-llama8b.json'), 'utf8'));
  // A short run: the four sides are simulated by the CLI too.
  base.workload.num_requests = 400;
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(shareLink(base, 'ab-base', ORIGIN).replace('#s=', `#token=${TOKEN}&s=`));
  await page.locator('[data-derived]').waitFor({ timeout: 30000 });
  await page.locator('[data-summary="explorer"] [data-metric="ttft_p50_ms"]').first().waitFor({ timeout: 30000 });

  const compareSide = async (field, side) => Number(await page.locator(`tr[data-compare="${field}"] [data-side="${side}"] [data-metric]`).getAttribute('data-value'));
  const assertAb = async (a, b, what) => {
    const [ea, eb] = [numericFields(simulate(a, `${what}-a`)), numericFields(simulate(b, `${what}-b`))];
    await page.locator('#view-compare:not(.hidden) tr[data-compare="ttft_p50_ms"]').waitFor({ timeout: 30000 });
    await page.waitForFunction(([v]) => {
      const got = Number(document.querySelector('tr[data-compare="ttft_p50_ms"] [data-side="b"] [data-metric]')?.dataset.value);
      return Math.abs(got - v) <= 1e-6 * Math.abs(v);
    }, [eb.ttft_p50_ms], { timeout: 30000 });
    for (const field of ['ttft_p50_ms', 'ttft_p99_ms', 'tpot_p50_ms', 'goodput_rps']) {
      for (const [side, e] of [['a', ea], ['b', eb]]) {
        const got = await compareSide(field, side);
        assert.ok(Math.abs(got - e[field]) <= 1e-6 * Math.max(1, Math.abs(e[field])), `${what} ${side}: ${field} ${got} vs CLI ${e[field]}`);
      }
    }
  };

  await page.locator('select[data-control="ab-gpu"]').selectOption('h200');
  await assertAb(base, { ...base, deployment: { ...base.deployment, gpu: 'h200' } }, 'h100-vs-h200');
  assert.match(await page.locator('.changes').textContent(), /deployment\.gpu/);
  await shot(page, 'page-deployment-ab-1440x900');

  // Back in the explorer (now on B, the H200), TP2 against two replicas of the same GPUs.
  await page.locator('button[data-view="explorer"], [data-view="explorer"]').first().click();
  const tp = page.locator('[data-action="ab-tp-replicas"]');
  assert.equal((await tp.textContent()).trim(), 'TP2 vs 2 replicas');
  await tp.click();
  const h200 = { ...base, deployment: { ...base.deployment, gpu: 'h200' } };
  // B: the explorer's default fleet (round robin) of two replicas.
  const bSide = { ...h200, fleet: { replicas: 2, router: 'round_robin', load_cap: 1.5 } };
  await page.waitForFunction(() => /fleet/.test(document.querySelector('#view-compare:not(.hidden) .changes')?.textContent ?? ''), null, { timeout: 30000 });
  await assertAb({ ...h200, deployment: { ...h200.deployment, tp: 2 } }, bSide, 'tp2-vs-2-replicas');
  const { scenario: shownB } = await copiedScenarioOfExplorer(page);
  assert.deepEqual(shownB.fleet, bSide.fleet);
  assert.deepEqual(shownB.deployment, bSide.deployment);

  // Back in the explorer (two H200 replicas), the same two GPUs co-located against one prefill + one decode
  // instance: Compare holds the CLI's numbers for both, and B's fleet is the split one.
  await page.locator('button[data-view="explorer"], [data-view="explorer"]').first().click();
  const pd = page.locator('[data-action="ab-pd"]');
  assert.equal((await pd.textContent()).trim(), '2 replicas vs P/D 1 + 1');
  await pd.click();
  const split = { ...bSide, fleet: { ...bSide.fleet, disaggregation: { prefill_instances: 1, decode_instances: 1, link_bytes_per_s: 5e10, link_latency_ms: 0.5 } } };
  await page.waitForFunction(() => /disaggregation/.test(document.querySelector('#view-compare:not(.hidden) .changes')?.textContent ?? ''), null, { timeout: 30000 });
  await assertAb(bSide, split, 'colocated-vs-pd');
  const { scenario: shownPd } = await copiedScenarioOfExplorer(page);
  assert.deepEqual(shownPd.fleet, split.fleet);
  // The split changes the result: the transfer and the decode step are in B's TTFT.
  assert.notEqual(await compareSide('ttft_p50_ms', 'a'), await compareSide('ttft_p50_ms', 'b'));
  assert.deepEqual(errors, []);
  await page.close();
});

/** The explorer's scenario from the page's own address (the link it keeps in `#s=`). */
async function copiedScenarioOfExplorer(page) {
  const link = await page.evaluate(() => location.href);
  return { link, scenario: JSON.parse(cli(['link', '--decode', link])) };
}

test('the derived numbers and the A/B row fit a phone', async () => {
  const scenario = JSON.parse(readFileSync(path.join(ROOT, 'examples/deployment-h100-llama8b.json'), 'utf8'));
  const page = await browser.newPage({ viewport: { width: 390, height: 844 } });
  await page.goto(shareLink(scenario, 'deployment-phone', ORIGIN).replace('#s=', `#token=${TOKEN}&s=`));
  const card = page.locator('[data-derived]');
  await card.waitFor({ timeout: 30000 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the page scrolls sideways by ${overflow} px`);
  await card.evaluate((e) => e.scrollIntoView({ block: 'start' }));
  await shot(page, 'page-deployment-390x844');
  // The engine switch and the deployment's menus, at the top of the controls below the results on a phone.
  await page.locator('fieldset[data-group="engine-source"]').evaluate((e) => e.scrollIntoView({ block: 'start' }));
  await shot(page, 'page-deployment-controls-390x844');
  await page.close();
});

test("a deployment's capacity card counts GPUs at the scenario's load and prices a session as the CLI does", async () => {
  const base = JSON.parse(readFileSync(path.join(ROOT, 'examples/deployment-h100-llama8b.json'), 'utf8'));
  const scenario = {
    ...base,
    deployment: { ...base.deployment, gpu: 'l40s', tp: 2 },
    workload: { kind: 'sessions', sessions: 12, steps: 4, base_tokens: 4000, gen_tokens: 120, tool_tokens: 400,
      think_s: 1.0, spread: 0.2, stagger_s: 0.5 },
  };
  const price = 2.5;
  const file = scratchFile('gpus-at-slo.json', JSON.stringify(scenario));
  const want = JSON.parse(cli(['capacity', '--scenario', file, '--simulate', '--replicas-for-slo',
    '--gpu-hour-price', String(price), '--json']));
  assert.ok(want.gpus && want.cost_per_session, `the CLI answers: ${JSON.stringify(want).slice(0, 300)}`);
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(shareLink(scenario, 'gpus-at-slo', ORIGIN).replace('#s=', `#token=${TOKEN}&s=`));
  // The search runs in the worker as a job whose code loads on demand.
  const gpus = page.locator('[data-capacity-card] [data-gpus]');
  await gpus.waitFor({ timeout: 90000 });
  assert.equal(Number(await gpus.getAttribute('data-gpus')), want.gpus.median, 'GPUs: the median over the seeds');
  assert.match(await gpus.textContent(), /GPUs? = \d+ replicas? × TP2/);
  await page.locator('[data-control="gpu-hour-price"]').fill(String(price));
  const cost = page.locator('[data-cost-per-session]');
  await cost.waitFor({ timeout: 10000 });
  const got = Number(await cost.getAttribute('data-cost-per-session'));
  // The card scales the worker's costs at a price of 1 by the price: the CLI's figure up to rounding.
  assert.ok(Math.abs(got - want.cost_per_session.median) <= 1e-9 * want.cost_per_session.median,
    `cost per session ${got} vs CLI ${want.cost_per_session.median}`);
  const mtok = Number(await page.locator('[data-cost-per-million-tokens]').getAttribute('data-cost-per-million-tokens'));
  assert.ok(Math.abs(mtok - want.cost_per_million_tokens.median) <= 1e-9 * want.cost_per_million_tokens.median,
    `cost per million tokens ${mtok} vs CLI ${want.cost_per_million_tokens.median}`);
  await page.locator('[data-gpus-card]').evaluate((e) => e.scrollIntoView({ block: 'center' }));
  await shot(page, 'page-deployment-gpus-1440x900');
  assert.deepEqual(errors, []);
  await page.close();
});
