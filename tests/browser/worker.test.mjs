// Never freeze (issue 7, item 3): a large run is computed in the page's Web Worker while the main thread stays
// responsive; its numbers equal the native CLI's; an edit during a run supersedes it (the stale result is never
// shown). The same measurement with the worker switched off (`?worker=off`, the main-thread fallback) must see
// the freeze: that is what shows the measurement can fail.
// Run through run.mjs (it starts `loadshape serve` and passes LOADSHAPE_URL with #token=).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT, applyScenario, assertSameNumbers, launchBrowser, numericFields, readMetrics, screenshot, shareLink,
  simulate }
  from './harness.mjs';

const URL_WITH_TOKEN = process.env.LOADSHAPE_URL;
const TOKEN = process.env.LOADSHAPE_TOKEN;
const EXPLORER = '[data-summary="explorer"]';
// 300,000 Poisson requests plus the two counterfactual runs. The engine keeps getting faster and the
// preconditions below catch it: 30,000 took 0.5 s once it advanced decoders as a group, 60,000 took 0.45 s after a
// later round, 100,000 0.7–1.0 s after the next, and 150,000 took 0.70 s on the CI machine (the first test needs
// over 0.5 s). Its size (600,000 with the counterfactual runs) is above the page's auto-run limit without the
// worker, so the control with the worker off presses Run.
const BASE = JSON.parse(readFileSync(path.join(ROOT, 'examples/engine-10k.json'), 'utf8'));
const LARGE = { ...BASE, counterfactuals: true, workload: { ...BASE.workload, num_requests: 300000 } };
// The page starts on the same engine scenario, small, so applying LARGE changes values, not the whole form.
const SMALL = { ...BASE, workload: { ...BASE.workload, num_requests: 500 } };
// The run an edit supersedes: twice LARGE, still computing when the edit lands ("computing… (in the
// background)" shows only after 0.5 s; with 150,000 requests the CI machine finished 0.2 s later and the test
// missed that window).
const HUGE = { ...LARGE, workload: { ...LARGE.workload, num_requests: 600000 } };
let largeExpected;
/** The CLI's numbers for LARGE, computed once for the whole file. */
const expectedLarge = () => (largeExpected ??= numericFields(simulate(LARGE, 'large')));
// A frame gap above this while a run computes is a visible freeze.
const MAX_GAP_MS = 250;

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

/** Installed in the page before the large run: timer ticks (every 5 ms asked) and animation frames while the
 * explorer shows "computing…", and (when `click`) one click on the Ladder tab 30 ms after "computing…" appears. */
function installMonitor(click) {
  const m = { gaps: [], frames: 0, sawComputing: false, click: null, values: [] };
  const computingEl = () => document.querySelector('[data-summary="explorer"] [data-computing]');
  const computing = () => { const el = computingEl(); return !!el && !el.classList.contains('hidden'); };
  let last = performance.now();
  let lastComputing = computing();
  const tick = () => {
    const now = performance.now();
    const c = computing();
    // [gap, still computing at its end]: the gap that ends with "computing…" gone includes showing the result.
    if (lastComputing) m.gaps.push([now - last, c]);
    last = now;
    lastComputing = c;
    setTimeout(tick, 5);
  };
  setTimeout(tick, 5);
  const frame = () => { if (computing()) m.frames += 1; requestAnimationFrame(frame); };
  requestAnimationFrame(frame);
  const ladder = document.getElementById('view-ladder');
  new MutationObserver(() => {
    if (m.click && m.click.handledAt === undefined && !ladder.classList.contains('hidden')) {
      m.click.handledAt = performance.now();
      m.click.whileComputing = computing();
    }
  }).observe(ladder, { attributes: true, attributeFilter: ['class'] });
  new MutationObserver(() => {
    if (!computing() || m.sawComputing) return;
    m.sawComputing = true;
    if (click) setTimeout(() => {
      m.click = { at: performance.now() };
      document.querySelector('[data-view="ladder"]').click();
    }, 30);
  }).observe(computingEl(), { attributes: true, attributeFilter: ['class'] });
  // Every TTFT p50 and every completed count the explorer ever shows from now on.
  m.completed = [];
  const shown = (metric) => document.querySelector(`[data-summary="explorer"] [data-metric="${metric}"]`)?.dataset.value;
  new MutationObserver(() => {
    for (const [metric, list] of [['ttft_p50_ms', m.values], ['completed', m.completed]]) {
      const v = shown(metric);
      if (v && list[list.length - 1] !== v) list.push(v);
    }
  }).observe(document.querySelector('[data-summary="explorer"]'), { attributes: true, subtree: true, childList: true });
  window.__monitor = m;
}

async function openPage(url) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.errors = errors;
  await page.goto(url);
  await page.locator(`${EXPLORER} [data-metric="ttft_p50_ms"]`).first().waitFor({ timeout: 30000 });
  await page.waitForFunction(() => !document.querySelector('[data-sweep-progress]'), null, { timeout: 60000 });
  return page;
}


/** Waits for the explorer to show `expectedP50` as TTFT p50, then reads where and how long it computed. */
async function waitResult(page, expectedP50) {
  await page.waitForFunction(([sel, v]) => document.querySelector(sel)?.dataset.value === v
    && document.querySelector('[data-summary="explorer"] [data-computing]')?.classList.contains('hidden'),
  [`${EXPLORER} [data-metric="ttft_p50_ms"]`, String(expectedP50)], { timeout: 120000 });
  const status = page.locator(`${EXPLORER} [data-computed-in]`);
  return { where: await status.getAttribute('data-computed-in'), ms: Number(await status.getAttribute('data-compute-ms')) };
}

/** The page opened on SMALL (with `query`, e.g. `?worker=off`). */
function smallUrl(query = '') {
  const link = new URL(shareLink(SMALL, 'small', new URL(URL_WITH_TOKEN).origin));
  link.search = query;
  link.hash = link.hash.replace('#s=', `#token=${TOKEN}&s=`);
  return link.toString();
}

async function largeRun(query) {
  const page = await openPage(smallUrl(query));
  const expected = expectedLarge();
  // The compare, ladder and live views load once the explorer has settled (a module of their own): the monitor
  // watches the ladder view's section.
  await page.waitForSelector('#view-ladder', { state: 'attached', timeout: 60000 });
  await page.evaluate(installMonitor, true);
  await applyScenario(page, LARGE);
  // Without the worker a run this large waits for Run (it freezes the tab); with it, it starts on its own.
  if (query.includes('worker=off')) await page.getByRole('button', { name: 'Run', exact: true }).click();
  const result = await waitResult(page, expected.ttft_p50_ms);
  await page.locator('[data-view="explorer"]').click();
  assertSameNumbers(await readMetrics(page.locator(EXPLORER)), expected, `large run (${result.where})`);
  const m = await page.evaluate(() => window.__monitor);
  const stats = {
    where: result.where,
    compute_ms: Math.round(result.ms),
    max_gap_ms: Math.round(Math.max(0, ...m.gaps.filter(([, c]) => c).map(([g]) => g))),
    result_gap_ms: Math.round(Math.max(0, ...m.gaps.filter(([, c]) => !c).map(([g]) => g))),
    ticks_while_computing: m.gaps.length,
    frames_while_computing: m.frames,
    click_latency_ms: m.click?.handledAt === undefined ? null : Math.round(m.click.handledAt - m.click.at),
    click_while_computing: m.click?.whileComputing ?? null,
  };
  assert.deepEqual(page.errors, []);
  await page.close();
  return stats;
}

const measured = {};

test('a large run computes in the Web Worker: the page stays responsive and shows exactly the CLI numbers', async () => {
  const s = await largeRun('');
  measured.worker = s;
  console.log(`worker: ${JSON.stringify(s)}`);
  assert.equal(s.where, 'worker', 'computed in the background worker');
  assert.ok(s.compute_ms > 2 * MAX_GAP_MS,
    `the run must take well over ${MAX_GAP_MS} ms for this measurement to mean anything (took ${s.compute_ms} ms)`);
  assert.equal(s.click_while_computing, true, 'a click on a tab was handled while the run was computing');
  assert.ok(s.click_latency_ms < MAX_GAP_MS, `the click was handled within ${s.click_latency_ms} ms`);
  assert.ok(s.max_gap_ms < MAX_GAP_MS, `longest main-thread stall while computing: ${s.max_gap_ms} ms`);
  // Receiving and drawing the result (CDFs of 150,000 requests) is main-thread work too: reported, and far below
  // the run itself.
  assert.ok(s.result_gap_ms < s.compute_ms / 2, `showing the result stalled ${s.result_gap_ms} ms`);
  assert.ok(s.frames_while_computing >= 5, `frames painted while computing: ${s.frames_while_computing}`);
});

test('control: with the worker off (main-thread fallback) the same measurement sees the freeze', async () => {
  const s = await largeRun('?worker=off');
  measured.main_thread = s;
  console.log(`main thread: ${JSON.stringify(s)}`);
  assert.equal(s.where, 'main', 'computed on the main thread');
  // On the main thread the run and the result arrive in one task: the stall covers the whole run.
  const stall = Math.max(s.max_gap_ms, s.result_gap_ms);
  assert.ok(stall >= 0.8 * s.compute_ms, `the stall (${stall} ms) covers the run (${s.compute_ms} ms)`);
  assert.notEqual(s.click_while_computing, true, 'the click could only be handled after the run');
  mkdirSync(path.join(ROOT, 'artifacts'), { recursive: true });
  writeFileSync(path.join(ROOT, 'artifacts/page-responsiveness.json'), JSON.stringify(measured, null, 2));
});

test('an edit during a large run supersedes it: the stale result is never shown', async () => {
  const page = await openPage(smallUrl());
  const newer = { ...LARGE, counterfactuals: false, workload: { ...LARGE.workload, rate_rps: 10 } };
  const expected = numericFields(simulate(newer, 'newer'));
  // SMALL's result (before the edit) and newer's (after it) are the only results the page may ever show: HUGE's,
  // superseded, must never appear. It would differ from both in its completed count (it asks more requests than
  // either, and this scenario fails none), so no CLI run of HUGE is needed to recognise it.
  const small = await readMetrics(page.locator(EXPLORER));
  assert.ok(HUGE.workload.num_requests > newer.workload.num_requests && Number(small.completed) < expected.completed);
  const only = (list, a, b) => list.every((v) => v === String(a) || v === String(b));
  await page.evaluate(installMonitor, false);
  await applyScenario(page, HUGE);
  await page.waitForFunction(() => window.__monitor.sawComputing, null, { timeout: 30000 });
  // "computing… N s (in the background…)" shows once a run takes over half a second.
  await page.locator(`${EXPLORER} [data-computing]`, { hasText: 'background' }).waitFor({ timeout: 5000 });
  // Edit at once: the huge run must still be going (≈ 3 s on the CI machine, 6–12 s here).
  const beforeEdit = await page.evaluate(() => window.__monitor.completed.slice());
  assert.ok(only(beforeEdit, small.completed, small.completed),
    `precondition: the huge run ended before the edit could supersede it (make HUGE larger): ${beforeEdit}`);
  await applyScenario(page, newer);
  await screenshot(page, 'page-computing-1280x800');
  const result = await waitResult(page, expected.ttft_p50_ms);
  assert.equal(result.where, 'worker');
  assertSameNumbers(await readMetrics(page.locator(EXPLORER)), expected, 'the newer scenario');
  // Let the sweep of the newer scenario run too: nothing of the superseded run may appear later either.
  await page.waitForFunction(() => !document.querySelector('[data-sweep-progress]'), null, { timeout: 120000 });
  const { values, completed } = await page.evaluate(() => window.__monitor);
  assert.ok(only(completed, small.completed, expected.completed), `a superseded run's result was shown: completed ${completed}`);
  assert.ok(only(values, small.ttft_p50_ms, expected.ttft_p50_ms), `a superseded run's TTFT p50 was shown: ${values}`);
  assert.equal(completed[completed.length - 1], String(expected.completed));
  assert.equal(values[values.length - 1], String(expected.ttft_p50_ms));
  assert.deepEqual(page.errors, []);
  await page.close();
});
