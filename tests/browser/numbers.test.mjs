// The live view's numbers and failures (issue #41, items 2 and 3), against the real agent's `sim` target:
// - the numbers table under the live cards equals `loadshape predict --json` of the same scenario and the agent's
//   own records (same window: a run that ran to its end, so the whole simulated run), field by field, exactly;
// - a run whose requests the target refuses (prompts beyond its context: HTTP 400) shows the failed count, the
//   requests never sent (each refused request ended its session) and the first error, and the page warned before
//   the launch.
// - a prefill/decode fleet run live on `sim` shows its per-replica and KV transfer figures beside the simulated ones:
//   the live side equals `loadshape report --json` of the agent's records, the simulated side `report --json` of
//   `loadshape simulate --records` of the same scenario.
// Run through run.mjs (it starts `loadshape serve` and passes LOADSHAPE_URL with #token=).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { SHOTS, cli, launchBrowser, liveScenario, scratchFile, shareLink } from './harness.mjs';

const URL_WITH_TOKEN = process.env.LOADSHAPE_URL;
const TOKEN = process.env.LOADSHAPE_TOKEN;
const ORIGIN = new URL(URL_WITH_TOKEN).origin;
const LIVE = '[data-summary="live"]';

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

async function exported(runId) {
  const res = await fetch(`${ORIGIN}/api/runs/${runId}/records.jsonl?token=${TOKEN}`);
  assert.equal(res.status, 200, `export of ${runId}`);
  return (await res.text()).split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
}

async function newPage() {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.errors = errors;
  return page;
}

const recordsShown = (page) => page.locator(`${LIVE} [data-records]`).first().getAttribute('data-records').then(Number);

/** Opens the scenario in the live view with `sim` picked (not launched). */
async function open(page, scenario, name) {
  await page.goto(shareLink(scenario, name, ORIGIN).replace('#s=', `#token=${TOKEN}&s=`));
  await page.locator('[data-summary="explorer"] [data-metric="ttft_p50_ms"]').first().waitFor({ timeout: 30000 });
  await page.locator('[data-view="live"]').click();
  await page.locator('[data-status="connected"]').first().waitFor({ timeout: 30000 });
  await page.waitForFunction(() => [...document.querySelectorAll('select[data-control="target"] option')]
    .some((o) => o.value === 'sim'), null, { timeout: 20000 });
  await page.locator('select[data-control="target"]').selectOption('sim');
}

/** Launches what is open; resolves to the run id once it has ended, with every record of the agent's on the page. */
async function launchToEnd(page) {
  await page.locator('[data-action="launch"]').click();
  await page.waitForFunction((sel) => Number(document.querySelector(sel)?.getAttribute('data-records') ?? 0) > 0,
    `${LIVE} [data-records]`, { timeout: 60000 });
  const runId = await page.locator(`${LIVE} .status-line .mono`).first().innerText();
  await page.locator(`${LIVE} [data-run-state="finished"], ${LIVE} [data-run-state="failed"], ${LIVE} [data-run-state="stopped"]`)
    .first().waitFor({ timeout: 180000 });
  const records = await exported(runId);
  for (let i = 0; i < 100 && (await recordsShown(page)) !== records.length; i += 1) await page.waitForTimeout(100);
  assert.equal(await recordsShown(page), records.length, 'the page holds the agent\'s records');
  return { runId, records };
}

/** The page's numbers table: { field: { simulated, min, max, live, error } } from the exact `data-*` numbers. */
async function readTable(page) {
  return page.locator(`${LIVE} table[data-numbers] tr[data-row]`).evaluateAll((rows) => Object.fromEntries(rows.map((tr) => {
    const num = (col, attr = 'data-value') => {
      const v = tr.querySelector(`[data-col="${col}"]`)?.getAttribute(attr) ?? '';
      return v === '' ? null : Number(v);
    };
    return [tr.dataset.row, { simulated: num('simulated'), min: num('range', 'data-min'), max: num('range', 'data-max'),
      live: num('live'), error: num('error') }];
  })));
}

test('the numbers table under the live cards equals `loadshape predict --json` of the same scenario and records', async () => {
  const page = await newPage();
  try {
    const scenario = liveScenario({ sessions: 3, steps: 3, think_s: 0.05 });
    await open(page, scenario, 'numbers');
    const { records } = await launchToEnd(page);
    const recFile = scratchFile('numbers.jsonl', records.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const scFile = scratchFile('numbers-scenario.json', JSON.stringify(scenario));
    const predict = JSON.parse(cli(['predict', '--json', scFile, '--against', recFile]));
    assert.equal(predict.window_s, null, 'a run that ran to its end: the whole simulated run');
    await page.locator(`${LIVE} [data-numbers-seeds="${predict.seeds.length}"]`).waitFor({ timeout: 60000 });
    const shown = await readTable(page);
    assert.deepEqual(Object.keys(shown), predict.table.map((r) => r.field), 'the same rows in the same order');
    for (const row of predict.table) {
      const got = shown[row.field];
      const want = { simulated: row.simulated, min: row.simulated_spread?.min ?? null, max: row.simulated_spread?.max ?? null,
        live: row.live, error: row.error };
      assert.deepEqual(got, want, `${row.field}: the page vs predict --json`);
    }
    assert.ok(predict.table.filter((r) => r.error !== null).length >= 10, 'most rows have a live value and an error');
    // No failure: no failures line; the cards count none.
    assert.equal(await page.locator(`${LIVE} [data-failures]`).count(), 0);
    assert.equal(await page.locator(`${LIVE} [data-metric="failed_requests"]`).getAttribute('data-value'), '0');
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});

/** No live request completed: the numbers table's live and error cells read "—" while the live column's data-value
 * keeps the summary's number (at least one of them a number: the zeros the cells would otherwise show). */
async function assertNoLiveNumbers(page) {
  await page.locator(`${LIVE} table[data-numbers] tr[data-row] [data-col="simulated"]`).first().waitFor({ timeout: 60000 });
  const rows = await page.locator(`${LIVE} table[data-numbers] tr[data-row]`).evaluateAll((trs) => trs.map((tr) => ({
    row: tr.dataset.row,
    live: tr.querySelector('[data-col="live"]').innerText.trim(),
    liveValue: tr.querySelector('[data-col="live"]').getAttribute('data-value'),
    error: tr.querySelector('[data-col="error"]').innerText.trim(),
  })));
  assert.ok(rows.length >= 10, `the table's rows: ${rows.length}`);
  for (const r of rows) assert.deepEqual([r.live, r.error], ['—', '—'], `${r.row}: ${JSON.stringify(r)}`);
  assert.ok(rows.some((r) => r.liveValue !== ''), 'the live summary\'s numbers stay in data-value');
}

test('a run whose requests the target refuses shows the failed count, the requests never sent and the first error', async () => {
  const page = await newPage();
  try {
    // Two sessions of three steps whose first prompt is beyond the target's context (the sim target's profile:
    // 27,000 blocks of 16 tokens): the target refuses each at once, and the session ends there.
    const scenario = liveScenario({ sessions: 2, steps: 3, think_s: 0.05, base_tokens: 440000, dist: 'uniform', spread: 0 });
    await open(page, scenario, 'refused');
    // Before the launch: the plan against the context, with counts.
    const warning = page.locator('[data-plan-warning]');
    await warning.waitFor({ timeout: 30000 });
    assert.match(await warning.innerText(), /^2 of 2 simulated requests exceed the context .*432,?000 tokens/);
    const { records } = await launchToEnd(page);
    assert.equal(records.length, 2);
    assert.ok(records.every((r) => !r.ok && r.failure === 'http_status'), JSON.stringify(records.map((r) => r.error)));
    const failures = page.locator(`${LIVE} [data-failures]`);
    await failures.waitFor({ timeout: 20000 });
    assert.equal(await failures.getAttribute('data-failed'), '2');
    assert.equal(await failures.getAttribute('data-never-sent'), '4');
    assert.equal(await failures.getAttribute('data-planned'), '6');
    assert.equal(await page.locator(`${LIVE} [data-never-sent-text]`).innerText(),
      '4 of 6 planned requests never sent (the session ended on an error)');
    const first = await page.locator(`${LIVE} [data-first-error]`).innerText();
    assert.match(first, /maximum context length is 432000 tokens/);
    assert.equal(await page.locator(`${LIVE} [data-metric="failed_requests"]`).getAttribute('data-value'), '2');
    assert.equal(await page.locator(`${LIVE} [data-metric="never_sent"]`).getAttribute('data-value'), '4');
    // No request completed: the latency and throughput cards say "—" and why, not "0 ms" (the summary's number
    // stays in data-value).
    assert.match(await page.locator(`${LIVE} [data-no-completed]`).innerText(), /No request has completed/);
    for (const m of ['ttft_p50_ms', 'request_throughput_rps', 'slo_attainment_ratio']) {
      const card = page.locator(`${LIVE} .stat-grid [data-metric="${m}"]`);
      assert.equal(await card.innerText(), '—', m);
      assert.equal(await card.getAttribute('data-value'), '0', m);
    }
    // "Simulated beside live" says the same: its live column and the errors read "—", not the summary's zeros
    // (which stay in data-value).
    await assertNoLiveNumbers(page);
    // The same counts and error as `loadshape report --json` of the agent's file.
    const rep = JSON.parse(cli(['report', '--json', scratchFile('refused.jsonl', records.map((r) => JSON.stringify(r)).join('\n') + '\n')]));
    assert.equal(rep.failures.failed, 2);
    assert.equal(rep.failures.never_sent, 4);
    assert.equal(rep.failures.first_error, first);
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});

test('the target says its context is tighter than the profile: the live view offers its limit to the explorer', async () => {
  const page = await newPage();
  try {
    // The scenario's profile (twice the sim target's KV cache) takes 800,000 tokens per request; the sim target
    // reports 432,000 (its /v1/models).
    const scenario = liveScenario({ sessions: 2, steps: 3, think_s: 0.05, base_tokens: 440000, dist: 'uniform', spread: 0 });
    scenario.profile.num_kv_blocks *= 2;
    scenario.profile.max_model_len = 800000;
    await open(page, scenario, 'target-limit');
    const limit = page.locator('[data-target-limit]');
    await limit.waitFor({ timeout: 30000 });
    assert.equal(await limit.getAttribute('data-target-limit'), '432000');
    assert.match(await limit.innerText(), /sim takes 432000 tokens per request .*max_model_len/s);
    assert.equal(await page.locator('[data-plan-warning]').count(), 0, 'the profile lets every request through');
    await page.locator('[data-action="take-target-limit"]').click();
    // With the target's limit the simulation refuses what the target will, and says so before launch.
    const warning = page.locator('[data-plan-warning]');
    await warning.waitFor({ timeout: 30000 });
    assert.match(await warning.innerText(), /^2 of 2 simulated requests exceed the context .*432,?000 tokens/);
    assert.equal(await limit.count(), 0, 'the offer goes once taken');
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});

test('screenshot: the live view with the numbers table and a failure', async () => {
  const page = await newPage();
  try {
    // Sessions on a lognormal draw of first prompts: most fit, the longest exceed the context and are refused.
    const scenario = liveScenario({ sessions: 6, steps: 3, think_s: 0.05, base_tokens: 60000, spread: 2.0 });
    await open(page, scenario, 'numbers-shot');
    await launchToEnd(page);
    await page.locator(`${LIVE} table[data-numbers] [data-col="simulated"][data-value]`).first().waitFor({ timeout: 60000 });
    await page.locator(`${LIVE} [data-failures]`).waitFor({ timeout: 20000 });
    await page.waitForTimeout(500);
    // From the top of the live results to the bottom of the numbers card (the charts below are the page's as before).
    await page.evaluate(() => window.scrollTo(0, 0));
    const top = await page.locator(LIVE).boundingBox();
    const card = await page.locator(`${LIVE} [data-numbers-card]`).boundingBox();
    mkdirSync(SHOTS, { recursive: true });
    await page.screenshot({ path: path.join(SHOTS, 'page-live-numbers-1280.png'), fullPage: true,
      clip: { x: top.x, y: top.y, width: top.width, height: card.y + card.height - top.y + 8 } });
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});

/** The page's fleet card: per replica { sim/live requests, cached share, TTFT p50 } and the transfer rows. */
async function readFleet(page) {
  const num = (v) => (v === null || v === '' ? null : Number(v));
  const replicas = await page.locator(`${LIVE} table[data-fleet-replicas] tr[data-replica]`).evaluateAll((rows) => rows.map((tr) => {
    const v = (col) => tr.querySelector(`[data-col="${col}"]`)?.getAttribute('data-value') ?? '';
    return { replica: Number(tr.dataset.replica), cols: Object.fromEntries(['sim-requests', 'live-requests', 'sim-cached',
      'live-cached', 'sim-ttft-p50', 'live-ttft-p50'].map((c) => [c, v(c)])) };
  }));
  const transfer = await page.locator(`${LIVE} table[data-fleet-transfer] tr[data-row]`).evaluateAll((rows) => Object.fromEntries(
    rows.map((tr) => [tr.dataset.row, {
      simulated: tr.querySelector('[data-col="simulated"]')?.getAttribute('data-value') ?? '',
      live: tr.querySelector('[data-col="live"]')?.getAttribute('data-value') ?? '',
    }])));
  return {
    replicas: replicas.map((r) => ({ replica: r.replica, ...Object.fromEntries(Object.entries(r.cols).map(([k, v]) => [k, num(v)])) })),
    transfer: Object.fromEntries(Object.entries(transfer).map(([k, v]) => [k, { simulated: num(v.simulated), live: num(v.live) }])),
  };
}

test('a prefill/decode fleet run live on sim shows its per-replica and transfer figures beside the simulated ones', async () => {
  const page = await newPage();
  try {
    // Three sessions over two prefill instances and one decode instance, behind session affinity, staggered 50 ms
    // apart: simulated, the first steps go 0, 1, 0 by least outstanding. Live they do too on a quiet machine, but
    // the margin is tens of milliseconds of the emulated engine's timing, so a loaded machine may route one otherwise:
    // that live routing equals simulate's is asserted where timing cannot move it (serve_ws.rs,
    // the_sim_target_routes_a_fleet_by_session_like_simulate); here, that the page shows each side as it is.
    const scenario = liveScenario({ sessions: 3, steps: 3, think_s: 0.05, stagger_s: 0.05 });
    scenario.fleet = {
      replicas: 3, router: 'session_affinity', load_cap: 1.5,
      disaggregation: { prefill_instances: 2, decode_instances: 1, link_bytes_per_s: 5e9, link_latency_ms: 2,
        kv_bytes_per_token: 131072 },
    };
    await open(page, scenario, 'pd-fleet');
    const { records } = await launchToEnd(page);
    assert.ok(records.every((r) => r.replica !== undefined && r.kv_transfer_ms !== undefined), 'records name replica and transfer');
    const recFile = scratchFile('pd-fleet.jsonl', records.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const live = JSON.parse(cli(['report', '--json', recFile]));
    const scFile = scratchFile('pd-fleet-scenario.json', JSON.stringify(scenario));
    const simRecs = scratchFile('pd-fleet-sim.jsonl', '');
    cli(['simulate', '--json', scFile, '--records', simRecs]);
    const sim = JSON.parse(cli(['report', '--json', simRecs]));
    assert.ok(live.replicas?.length >= 1 && sim.replicas?.length >= 2, 'both sides name replicas');
    assert.ok(live.kv_transfer && sim.kv_transfer, 'both sides carry transfers');
    // The simulated side arrives from the worker.
    await page.locator(`${LIVE} [data-fleet-card] table[data-fleet-transfer] tr[data-row="mean_ms"] [data-col="simulated"][data-value]:not([data-value=""])`)
      .waitFor({ timeout: 60000 });
    const shown = await readFleet(page);
    const ids = [...new Set([...live.replicas, ...sim.replicas].map((r) => r.replica))].sort((a, b) => a - b);
    assert.deepEqual(shown.replicas.map((r) => r.replica), ids, 'a row per replica of either side');
    for (const row of shown.replicas) {
      const l = live.replicas.find((r) => r.replica === row.replica);
      const s = sim.replicas.find((r) => r.replica === row.replica);
      assert.deepEqual([row['live-requests'], row['live-cached'], row['live-ttft-p50']],
        l ? [l.requests, l.cached_share, l.ttft_p50_ms] : [null, null, null], `replica ${row.replica}: live vs report --json`);
      assert.deepEqual([row['sim-requests'], row['sim-cached'], row['sim-ttft-p50']],
        s ? [s.requests, s.cached_share, s.ttft_p50_ms] : [null, null, null], `replica ${row.replica}: simulated vs report --json`);
    }
    for (const [key, field] of [['mean_ms', 'mean_ms'], ['p50_ms', 'p50_ms'], ['p99_ms', 'p99_ms'], ['transfers', 'transfers']]) {
      assert.deepEqual(shown.transfer[key], { simulated: sim.kv_transfer[field], live: live.kv_transfer[field] }, `transfer ${key}`);
    }
    assert.equal(live.kv_transfer.transfers, records.length, 'every request crossed the link');
    await page.locator(`${LIVE} [data-fleet-card]`).scrollIntoViewIfNeeded();
    mkdirSync(SHOTS, { recursive: true });
    await page.locator(`${LIVE} [data-fleet-card]`).screenshot({ path: path.join(SHOTS, 'page-live-fleet-card.png') });
    await page.screenshot({ path: path.join(SHOTS, 'page-live-fleet-1280x800.png'), fullPage: true });
    // On a phone the numbers and fleet tables stack their rows (each value under its column's name): none runs past
    // its card, and the page does not scroll sideways.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.waitForTimeout(300);
    const wide = await page.locator(`${LIVE} [data-numbers-card] table, ${LIVE} [data-fleet-card] table`).evaluateAll((ts) => ts
      .map((t) => ({ t: Object.keys(t.dataset).join(), over: t.getBoundingClientRect().right - t.closest('.card').getBoundingClientRect().right }))
      .filter((x) => x.over > 1));
    assert.deepEqual(wide, [], 'tables wider than their card at 390 px');
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), 'the page scrolls sideways');
    assert.equal(await page.locator(`${LIVE} table[data-fleet-replicas] tr[data-replica] [data-col="live-cached"]`).first()
      .evaluate((td) => getComputedStyle(td, '::before').content), '"cached, live"');
    await page.locator(`${LIVE} [data-fleet-card]`).scrollIntoViewIfNeeded();
    await page.locator(`${LIVE} [data-fleet-card]`).screenshot({ path: path.join(SHOTS, 'page-live-fleet-card-390.png') });
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
  }
});
