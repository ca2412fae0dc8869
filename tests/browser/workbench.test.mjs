// The page as a workbench (issue 41, items 4 and 6): the explorer's actions stay in view, the primary knobs come
// first and the rest under "Advanced", counts slide on a log scale, an applied preset stays shown ("(modified)"),
// the live view says what Launch will send, and Compare lists the headline metrics first in the explorer's words.
// Takes the screenshots of the explorer, compare, capacity and live views at 1440×900 and 390×844
// (to LOADSHAPE_SHOTS_DIR, default artifacts/screenshots; docs/screenshots/ holds the committed ones).
// Run through run.mjs (it starts `loadshape serve` and passes LOADSHAPE_URL with #token=).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { ROOT, launchBrowser, liveScenario, shareLink } from './harness.mjs';

const URL_WITH_TOKEN = process.env.LOADSHAPE_URL;
const TOKEN = new URL(URL_WITH_TOKEN).hash.replace(/^#/, '').split('&').find((p) => p.startsWith('token='))?.slice(6);
const ORIGIN = new URL(URL_WITH_TOKEN).origin;
const EXPLORER = '[data-summary="explorer"]';
const LIVE = '[data-summary="live"]';
const SHOTS = process.env.LOADSHAPE_SHOTS_DIR ? path.resolve(process.env.LOADSHAPE_SHOTS_DIR)
  : path.join(ROOT, 'artifacts/screenshots');

let browser;
before(async () => { browser = await launchBrowser(); mkdirSync(SHOTS, { recursive: true }); });
after(async () => { await browser?.close(); });

async function newPage(viewport) {
  const page = await browser.newPage({ viewport });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.errors = errors;
  return page;
}

async function settled(page) {
  await page.locator(`${EXPLORER} [data-metric="ttft_p50_ms"]`).first().waitFor({ timeout: 30000 });
  await page.waitForFunction(() => !document.querySelector('[data-sweep-progress]')
    && !document.querySelector('[data-computing]:not(.hidden)'), null, { timeout: 60000 });
}

const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`) });

/** Nothing on the view shown makes the page scroll sideways, and no table runs past its card or the window; a table
 * that scrolls inside its own box (`.table-scroll`) keeps its first column in sight when scrolled to its end. */
async function assertNothingSideways(page, where) {
  const r = await page.evaluate(() => {
    const cut = [];
    const kept = [];
    for (const t of document.querySelectorAll('table')) {
      if (!t.checkVisibility()) continue;
      const own = t.closest('.table-scroll');
      if (own) {
        own.scrollLeft = own.scrollWidth;
        const first = t.querySelector('tbody tr td, tbody tr th')?.getBoundingClientRect();
        const box = own.getBoundingClientRect();
        if (first && own.scrollWidth > own.clientWidth + 1 && first.left < box.left - 1) kept.push(`${t.className}: first column at ${first.left} < ${box.left}`);
        own.scrollLeft = 0;
        continue;
      }
      const right = t.getBoundingClientRect().right;
      const card = (t.closest('.card') ?? document.body).getBoundingClientRect().right;
      if (right > Math.min(card, window.innerWidth) + 1) cut.push(`${t.className} ${Object.keys(t.dataset)}: ${Math.round(right - Math.min(card, window.innerWidth))}px`);
    }
    return { page: document.documentElement.scrollWidth - window.innerWidth, cut, kept };
  });
  assert.ok(r.page <= 0, `${where}: the page scrolls sideways by ${r.page}px`);
  assert.deepEqual(r.cut, [], `${where}: tables cut at the right`);
  assert.deepEqual(r.kept, [], `${where}: a scrolled table lost its first column`);
}

test('the explorer: actions in view, primary knobs first, log sliders, the preset stays shown', async () => {
  const page = await newPage({ width: 1440, height: 900 });
  await page.goto(URL_WITH_TOKEN);
  await settled(page);
  // Primary knobs first, then the SLOs; the engine under "Advanced", closed.
  const groups = await page.locator('.explorer .controls-groups > fieldset.group').evaluateAll((els) => els.map((e) => e.dataset.group));
  assert.deepEqual(groups, ['workload', 'engine-source', 'slo'],
    'outside "Advanced": the workload\'s primary knobs, the engine switch (coefficients or a deployment) and the SLOs');
  const first = await page.locator('fieldset[data-group="workload"] [data-field]').evaluateAll(
    (els) => els.map((e) => e.dataset.field));
  assert.deepEqual(first.slice(0, 5), ['/workload/sessions', '/workload/think_s', '/workload/steps',
    '/workload/base_tokens', '/workload/tool_tokens']);
  assert.equal(await page.locator('details[data-advanced]').evaluate((d) => d.open), false);
  assert.equal(await page.locator('details[data-advanced] [data-field="/profile/max_num_seqs"]').count(), 1);
  // Sessions on a log scale: half the track is already past the useful 1–32 no more.
  const sessions = page.locator('input[type=range][data-pointer="/workload/sessions"]');
  assert.equal(await sessions.getAttribute('data-scale'), 'log');
  await sessions.evaluate((el) => { el.value = String(Math.round(0.5 * Number(el.max))); el.dispatchEvent(new Event('input', { bubbles: true })); });
  const half = Number(await page.locator('input[type=number][data-pointer="/workload/sessions"]').inputValue());
  assert.ok(half >= 8 && half <= 32, `half the sessions track is ${half}`);

  // An applied preset stays shown, "(modified)" once a knob moves.
  const preset = page.locator('select[data-control="preset"]');
  const id = await preset.locator('option').nth(1).getAttribute('value');
  await preset.selectOption(id);
  await settled(page);
  assert.equal(await preset.inputValue(), id);
  assert.equal(await preset.getAttribute('data-preset-state'), id);
  await page.locator('input[type=number][data-pointer="/slo/ttft_ms"]').fill('1234');
  await page.locator('input[type=number][data-pointer="/slo/ttft_ms"]').dispatchEvent('change');
  await page.waitForFunction((want) => document.querySelector('select[data-control="preset"]')
    ?.getAttribute('data-preset-state') === want, `${id} modified`, { timeout: 10000 });
  assert.match(await preset.locator('option:checked').innerText(), /\(modified\)$/);

  // The action bar stays in view at the bottom of the results.
  await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
  await page.waitForTimeout(200);
  const bar = await page.locator('[data-action-bar]').boundingBox();
  assert.ok(bar && bar.y >= 0 && bar.y + bar.height <= 900, `the action bar in view: ${JSON.stringify(bar)}`);
  for (const action of ['copy-link', 'pin', 'go-compare', 'reset', 'go-live']) {
    assert.ok(await page.locator(`[data-action-bar] [data-action="${action}"]`).isVisible(), action);
  }
  assert.deepEqual(page.errors, []);
  await page.close();
});

for (const [w, h] of [[1440, 900], [390, 844]]) {
  test(`screenshots at ${w}×${h}: explorer, compare, capacity, live`, async () => {
    const size = `${w}x${h}`;
    const page = await newPage({ width: w, height: h });
    const scenario = liveScenario({ sessions: 4, steps: 4 });
    await page.goto(shareLink(scenario, `shots-${size}`, ORIGIN).replace('#s=', `#token=${TOKEN}&s=`));
    await settled(page);
    await page.locator('[data-status="connected"]').first().waitFor({ timeout: 20000 });
    await page.evaluate(() => window.scrollTo(0, 0));
    await shot(page, `page-explorer-${size}`);
    // Every action in sight: the bar's five buttons inside the window, on a phone too ("Launch live…" not scrolled
    // out of the bar).
    await page.locator('[data-action-bar] [data-action="go-live"]').waitFor({ timeout: 20000 });
    const barFits = async (when) => {
      const bar = await page.locator('[data-action-bar] [data-action]').evaluateAll((els) => els.map((e) => {
        const r = e.getBoundingClientRect();
        return { action: e.dataset.action, left: r.left, right: r.right };
      }));
      assert.equal(bar.length, 5);
      for (const b of bar) assert.ok(b.left >= 0 && b.right <= w, `${when}: ${b.action} in the window at ${w}px: ${JSON.stringify(b)}`);
    };
    await barFits('first load');
    // Editing the controls (below the results on a phone), the actions are still in sight.
    await page.locator('input[type=number][data-pointer="/slo/ttft_ms"]').scrollIntoViewIfNeeded();
    const live = await page.locator('[data-action-bar] [data-action="go-live"]').boundingBox();
    assert.ok(live && live.y >= 0 && live.y + live.height <= h, `"Launch live…" in sight beside the SLOs at ${w}px: ${JSON.stringify(live)}`);
    await page.evaluate(() => window.scrollTo(0, 0));

    // Compare: A pinned, B with twice the sessions; headline metrics first, in the explorer's labels.
    await page.locator('[data-action="pin"]').click();
    const box = page.locator('input[type=number][data-pointer="/workload/sessions"]');
    await box.fill('8');
    await box.dispatchEvent('change');
    await settled(page);
    await page.locator('[data-action="go-compare"]').click();
    await page.locator('[data-compare="ttft_p50_ms"]').waitFor({ timeout: 20000 });
    const rows = await page.locator('[data-compare]').evaluateAll((els) => els.map((e) => e.dataset.compare));
    assert.deepEqual(rows.slice(0, 2), ['ttft_p50_ms', 'ttft_p99_ms'], 'TTFT first');
    assert.equal(await page.locator('[data-compare="ttft_p50_ms"] td').first().innerText(), 'TTFT p50 ms');
    // The header says what A and B are: each side's value of what differs, in the explorer's label and unit.
    assert.equal(await page.locator('[data-compare-head="a"]').innerText(), 'Sessions 4 slots');
    assert.equal(await page.locator('[data-compare-head="b"]').innerText(), 'Sessions 8 slots');
    assert.deepEqual(await page.locator('.compare-sides dt').allInnerTexts(), ['A (pinned)', 'B (the explorer)']);
    await page.waitForTimeout(300);
    // The change column is in view without scrolling the table sideways.
    const cut = await page.locator('[data-compare="ttft_p50_ms"] td[data-delta]').evaluate((td) => {
      const box = td.closest('.table-scroll').getBoundingClientRect();
      return td.getBoundingClientRect().right - Math.min(box.right, window.innerWidth);
    });
    assert.ok(cut <= 1, `the change column is cut by ${cut}px at ${w}px`);
    await shot(page, `page-compare-${size}`);
    await assertNothingSideways(page, `compare at ${size}`);

    // Capacity: the explorer's card, its levels said to exclude the warm-up.
    await page.locator('[data-view="explorer"]').click();
    const card = page.locator('[data-capacity-card]');
    await card.locator('[data-capacity]').waitFor({ timeout: 60000 });
    assert.match(await card.innerText(), /warm-up/);
    await card.scrollIntoViewIfNeeded();
    await page.evaluate(() => window.scrollBy(0, -80));  // below the action bar that stays in view
    await shot(page, `page-capacity-${size}`);
    await page.locator('details.all-metrics > summary').click();
    await assertNothingSideways(page, `explorer with the capacity card and every summary field at ${size}`);
    await barFits('with A pinned ("Pin again as A")');

    // Live: what Launch will send, then a short run on `sim`.
    await page.locator('[data-view="live"]').click();
    await page.waitForFunction(() => [...document.querySelectorAll('select[data-control="target"] option')]
      .some((o) => o.value === 'sim'), null, { timeout: 20000 });
    await page.locator('select[data-control="target"]').selectOption('sim');
    // On a phone (one column), before any run, Launch comes before the empty live results, not under them.
    if (w < 900) {
      const above = await page.evaluate(() => document.querySelector('[data-action="launch"]').getBoundingClientRect().top
        < document.querySelector('[data-summary="live"]').getBoundingClientRect().top);
      assert.ok(above, `Launch above the empty live results at ${w}px`);
    }
    const plan = await page.locator('[data-launch-plan]').innerText();
    assert.match(plan, /^Launch sends 8 sessions × ~4 steps, ≈ \d+ requests, ≈ \d+ (s|min) on sim/);
    await page.locator('[data-action="launch"]').click();
    await page.locator(`${LIVE} [data-run-state="finished"], ${LIVE} [data-run-state="stopped"], ${LIVE} [data-run-state="failed"]`)
      .first().waitFor({ timeout: 180000 });
    await page.waitForTimeout(500);
    await page.evaluate(() => window.scrollTo(0, 0));
    await shot(page, `page-live-${size}`);
    // The numbers table under the live cards (simulated, seed range, live, error) reads without scrolling sideways.
    await page.locator(`${LIVE} table[data-numbers] [data-col="simulated"][data-value]`).first().waitFor({ timeout: 60000 });
    await assertNothingSideways(page, `live at ${size}`);
    if (w < 900) {
      await page.locator(`${LIVE} [data-numbers-card]`).scrollIntoViewIfNeeded();
      await shot(page, `page-live-numbers-${size}`);
    }
    // The ladder's solved rungs (one long line of text) wrap rather than widen the page.
    await page.locator('[data-view="ladder"]').click();
    await page.locator('[data-action="solve"]').click();
    await page.locator('[data-ladder] [data-metric="ladder"]').waitFor({ timeout: 60000 });
    await assertNothingSideways(page, `ladder at ${size}`);
    assert.deepEqual(page.errors, []);
    await page.close();
  });
}

test('a bad value typed into a box: the box is marked, the banner names it; Launch says why, under its button', async () => {
  const page = await newPage({ width: 1280, height: 800 });
  await page.goto(URL_WITH_TOKEN);
  await settled(page);
  const box = page.locator('input[type=number][data-pointer="/workload/sessions"]');
  await box.fill('-5');
  await box.dispatchEvent('change');
  const banner = page.locator('[data-scenario-error]');
  await banner.waitFor({ timeout: 10000 });
  assert.equal(await banner.getAttribute('data-error-at'), '/workload/sessions');
  assert.match(await banner.innerText(), /\/workload\/sessions/, 'the banner names the field');
  assert.equal(await box.getAttribute('aria-invalid'), 'true', 'the box is marked');
  assert.equal(await page.locator('input[aria-invalid="true"]').count(), 1, 'only that box');

  // The live view says so before Launch, and a press of Launch answers under its buttons, not under the
  // calibration card below them.
  await page.locator('[data-view="live"]').click();
  await page.locator('[data-status="connected"]').first().waitFor({ timeout: 20000 });
  await page.waitForFunction(() => [...document.querySelectorAll('select[data-control="target"] option')]
    .some((o) => o.value === 'sim'), null, { timeout: 20000 });
  await page.locator('select[data-control="target"]').selectOption('sim');
  assert.match(await page.locator('[data-scenario-invalid]').innerText(), /invalid/);
  assert.equal(await page.locator('[data-launch-plan]').count(), 0, 'no plan for an invalid scenario');
  await page.locator('[data-action="launch"]').click();
  const said = page.locator('[data-launch-error]');
  await said.waitFor({ timeout: 10000 });
  assert.match(await said.innerText(), /^Nothing sent: fix the scenario in the explorer first \(.*-5/);
  const order = await page.evaluate(() => {
    const [launch, error, calibrate] = ['[data-action="launch"]', '[data-launch-error]', '[data-calibrate]']
      .map((s) => document.querySelector(s));
    const follows = (a, b) => Boolean(a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING);
    return { afterLaunch: follows(launch, error), beforeCalibrate: follows(error, calibrate) };
  });
  assert.deepEqual(order, { afterLaunch: true, beforeCalibrate: true });

  // Fixed in the explorer: the marks go.
  await page.locator('[data-view="explorer"]').click();
  await box.fill('4');
  await box.dispatchEvent('change');
  await page.locator('[data-scenario-error]').waitFor({ state: 'detached', timeout: 10000 });
  assert.equal(await page.locator('input[aria-invalid="true"]').count(), 0);
  assert.deepEqual(page.errors, []);
  await page.close();
});

test('a reload re-attaches to the running run, on the live view, with its target; history says when and how long', async () => {
  const page = await newPage({ width: 1280, height: 800 });
  // Long enough to reload in the middle: two sessions of 30 steps with their think time.
  const scenario = liveScenario({ sessions: 2, steps: 30 });
  await page.goto(shareLink(scenario, 'reattach', ORIGIN).replace('#s=', `#token=${TOKEN}&s=`));
  await settled(page);
  await page.locator('[data-view="live"]').click();
  await page.waitForFunction(() => [...document.querySelectorAll('select[data-control="target"] option')]
    .some((o) => o.value === 'sim'), null, { timeout: 20000 });
  await page.locator('select[data-control="target"]').selectOption('sim');
  await page.locator('input[data-control="run-name"]').fill('reload check');
  await page.locator('[data-action="launch"]').click();
  await page.waitForFunction((sel) => Number(document.querySelector(sel)?.getAttribute('data-records') ?? 0) > 0,
    `${LIVE} [data-records]`, { timeout: 60000 });
  const runId = await page.locator(`${LIVE} .status-line .mono`).first().innerText();
  const before = Number(await page.locator(`${LIVE} [data-records]`).first().getAttribute('data-records'));

  await page.reload();
  await page.locator(`${LIVE} [data-run-state="running"]`).first().waitFor({ timeout: 30000 });
  assert.equal(await page.locator('[data-view="live"]').getAttribute('aria-selected'), 'true', 'the live view again');
  assert.equal(await page.locator(`${LIVE} .status-line .mono`).first().innerText(), runId, 'the same run');
  assert.equal(await page.locator('select[data-control="target"]').inputValue(), 'sim');
  await page.waitForFunction(([sel, n]) => Number(document.querySelector(sel)?.getAttribute('data-records') ?? 0) > n,
    [`${LIVE} [data-records]`, before], { timeout: 60000 });
  const detail = await page.locator(`[data-run="${runId}"] [data-run-detail]`).innerText();
  // The name given at launch, then what the run sends (the agent's words for the scenario at launch), where, when
  // and how long.
  assert.equal(await page.locator(`[data-run="${runId}"] [data-run-name]`).innerText(), 'reload check');
  assert.match(detail, /^2 sessions × ~30 steps · sim · started \w{3} \d+, \d\d:\d\d · \d+ s so far · \d+ records$/);

  await page.locator('[data-action="stop"]').click();
  await page.locator(`${LIVE} [data-run-state="stopped"], ${LIVE} [data-run-state="finished"]`).first()
    .waitFor({ timeout: 60000 });
  assert.doesNotMatch(await page.locator(`[data-run="${runId}"] [data-run-detail]`).innerText(), /so far/);
  assert.deepEqual(page.errors, []);
  await page.close();
});
