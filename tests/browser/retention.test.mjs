// Retention across tool calls on the page (#42 item 3): the curve of the summary's `retention` bands for a simulated
// result and for a run's records in the live view, and the what-if "how much host memory keeps 95 % of prefixes
// alive across a 60 s tool call", whose answer, applied to the profile, brings the 60 s band to 95 % in the re-run
// result (checked on the page and by `loadshape simulate` on the copied link).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { cli, launchBrowser, scratchFile, shareLink, SHOTS } from './harness.mjs';

const ORIGIN = new URL(process.env.LOADSHAPE_URL).origin;
const TOKEN = new URL(process.env.LOADSHAPE_URL).hash.match(/token=([^&]+)/)?.[1] ?? '';
const CARD = '[data-retention-card=""]';
let browser;

/** What the viewport shows (the card scrolled into it), under artifacts/screenshots. */
async function screenshot(page, name) {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: false });
}

before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

// Twelve agent sessions on a GPU cache far smaller than their contexts, each step after a 70 s tool call (the
// 60–120 s band): without a host tier their prefixes are evicted before they come back.
const SCENARIO = {
  model: 'engine',
  workload: { kind: 'sessions', sessions: 12, steps: 4, base_tokens: 6000, gen_tokens: 40, tool_tokens: 300,
    think_s: 70.0, spread: 0.0, stagger_s: 1.0 },
  profile: { name: 'small', basis: 'a GPU cache of 16,000 tokens', block_size: 16, num_kv_blocks: 1000,
    max_num_seqs: 8, max_num_batched_tokens: 8192, step_fixed_ms: 10.0, per_seq_ms: 0.2, per_ctx_token_ms: 0.0,
    prefill_tokens_per_ms: 20.0, prefill_fixed_ms: 2.0 },
  slo: { ttft_ms: 2000.0, tpot_ms: 50.0 },
  seed: 5,
  counterfactuals: false,
};

/** `loadshape simulate --json` of a scenario: its summary's retention bands. */
function cliBands(scenario, name) {
  const out = JSON.parse(cli(['simulate', '--json', scratchFile(`${name}.json`, JSON.stringify(scenario))]));
  return out.summary.retention ?? [];
}

/** The bands the card's table shows. */
async function shownBands(root) {
  return root.locator('tr[data-band]').evaluateAll((rs) => rs.map((r) => ({
    min: Number(r.dataset.band), steps: Number(r.dataset.steps), share: r.dataset.share === '' ? null : Number(r.dataset.share),
  })));
}

function assertSameBands(shown, want, what) {
  assert.ok(want.length >= 2, `${what}: the CLI gives several bands (${JSON.stringify(want)})`);
  assert.deepEqual(shown, want.map((b) => ({ min: b.think_s_min, steps: b.steps, share: b.cached_share ?? null })), what);
}

async function openExplorer(scenario, name) {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(shareLink(scenario, name, ORIGIN).replace('#s=', `#token=${TOKEN}&s=`));
  await page.locator(`${CARD} tr[data-band]`).first().waitFor({ timeout: 60000 });
  return { page, errors };
}

test('the explorer draws the retention curve of a simulated result, one point per band with a share', async () => {
  const want = cliBands(SCENARIO, 'retention');
  const { page, errors } = await openExplorer(SCENARIO, 'retention');
  const card = page.locator(CARD);
  assertSameBands(await shownBands(card), want, 'the bands');
  const line = card.locator('figure[data-chart="retention"] path[data-series="cached share"]');
  const withShare = want.filter((b) => b.cached_share !== null && b.cached_share !== undefined).length;
  assert.equal(Number(await line.getAttribute('data-points')), withShare, 'a point per band with a share');
  assert.equal(Number(await card.locator('figure[data-chart="retention"] path[data-series="one dot per band"]')
    .getAttribute('data-points')), withShare);
  // The 60 s band is there and short of 95 % without a host tier.
  const b60 = want.find((b) => b.think_s_min === 60);
  assert.ok(b60 && b60.cached_share < 0.95, `the 60–120 s band: ${JSON.stringify(b60)}`);
  // Alone on its row, the chart is no wider than the charts that sit two to a row (its text their size), and its
  // marks' labels stay inside the plot.
  const sizes = await page.evaluate(() => {
    const width = (id) => document.querySelector(`figure[data-chart="${id}"]`)?.getBoundingClientRect().width;
    const svg = document.querySelector('[data-retention-card=""] figure[data-chart="retention"] svg').getBoundingClientRect();
    const out = [...document.querySelectorAll('[data-retention-card=""] figure[data-chart="retention"] .threshold-label')]
      .map((t) => t.getBoundingClientRect())
      .filter((r) => r.left < svg.left - 1 || r.right > svg.right + 1 || r.top < svg.top - 1 || r.bottom > svg.bottom + 1);
    return { retention: width('retention'), ttft: width('ttft-cdf'), labelsOutside: out.length };
  });
  assert.ok(sizes.ttft > 0 && sizes.retention <= 1.5 * sizes.ttft, `retention ${sizes.retention}px against TTFT ${sizes.ttft}px`);
  assert.equal(sizes.labelsOutside, 0, 'threshold labels outside the chart');
  await card.evaluate((e) => { e.scrollIntoView({ block: 'start' }); window.scrollBy(0, -120); });
  await screenshot(page, 'page-retention-curve-1440x900');
  assert.deepEqual(errors, []);
  await page.close();
});

test("the what-if's host tier, applied to the profile, brings the 60 s band to 95 % in the re-run result", async () => {
  const { page, errors } = await openExplorer(SCENARIO, 'retention-whatif');
  const card = page.locator(CARD);
  assert.equal(await card.locator('input[data-control="retention-think-s"]').inputValue(), '60');
  assert.equal(await card.locator('input[data-control="retention-target-pct"]').inputValue(), '95');
  await card.locator('button[data-action="host-tier-search"]').click();
  const answer = card.locator('[data-host-tier-answer]');
  await answer.waitFor({ timeout: 60000 });
  assert.equal(await answer.getAttribute('data-reachable'), 'true', await answer.innerText());
  assert.equal(await answer.getAttribute('data-band-min'), '60');
  const tokens = Number(await answer.getAttribute('data-tokens'));
  assert.ok(tokens > 0 && tokens % 16 === 0, `a capacity in whole blocks: ${tokens}`);
  assert.equal(await answer.getAttribute('data-bytes'), '', 'no deployment: no bytes per token to say it in');
  assert.match(await answer.innerText(), /tokens of host memory keep 95\.0 % of the 60–120 s band/);
  await answer.evaluate((e) => e.scrollIntoView({ block: 'center' }));
  await screenshot(page, 'page-retention-whatif-1440x900');

  await card.locator('button[data-action="apply-host-tier"]').click();
  // The explorer re-runs with the tier; the card shows the new bands.
  await page.waitForFunction(() => Number(document.querySelector('[data-retention-card=""] tr[data-band="60"]')?.dataset.share) >= 0.95,
    null, { timeout: 60000 });
  // What the page now holds, read back through its share link by the CLI: the tier is in the profile and the band
  // reaches 95 % there too.
  await page.locator('[data-action="copy-link"]').click();
  const link = await page.locator('[data-share-link]').inputValue();
  const applied = JSON.parse(cli(['link', '--decode', link]));
  assert.equal(applied.profile.kv_tiers.length, 1);
  assert.equal(applied.profile.kv_tiers[0].name, 'host');
  assert.equal(applied.profile.kv_tiers[0].capacity_tokens, tokens);
  const after = cliBands(applied, 'retention-applied');
  assertSameBands(await shownBands(card), after, 'the bands after the tier');
  assert.ok(after.find((b) => b.think_s_min === 60).cached_share >= 0.95);
  await card.evaluate((e) => { e.scrollIntoView({ block: 'start' }); window.scrollBy(0, -120); });
  await screenshot(page, 'page-retention-applied-1440x900');
  assert.deepEqual(errors, []);
  await page.close();
});

test('the what-if says "not reachable" when even a huge tier misses the share, and names a bad input', async () => {
  const { page, errors } = await openExplorer(SCENARIO, 'retention-unreachable');
  const card = page.locator(CARD);
  // Each step's new tool output is never cached beforehand: 100 % cannot be reached by any tier.
  await card.locator('input[data-control="retention-target-pct"]').fill('100');
  await card.locator('input[data-control="retention-target-pct"]').dispatchEvent('change');
  await card.locator('button[data-action="host-tier-search"]').click();
  const answer = card.locator('[data-host-tier-answer]');
  await answer.waitFor({ timeout: 60000 });
  assert.equal(await answer.getAttribute('data-reachable'), 'false');
  assert.equal(await answer.getAttribute('data-tokens'), '');
  assert.match(await answer.innerText(), /Not reachable: even a huge tier/);
  assert.equal(await card.locator('button[data-action="apply-host-tier"]').count(), 0, 'nothing to apply');
  // A tool call of 4,000 s: no step of this run waits that long.
  await card.locator('input[data-control="retention-think-s"]').fill('4000');
  await card.locator('input[data-control="retention-think-s"]').dispatchEvent('change');
  await card.locator('button[data-action="host-tier-search"]').click();
  const error = card.locator('[data-host-tier-error]');
  await error.waitFor({ timeout: 60000 });
  assert.match(await error.innerText(), /no session step comes after a think time in the band holding 4000 s/);
  await card.locator('input[data-control="retention-target-pct"]').fill('150');
  await card.locator('input[data-control="retention-target-pct"]').dispatchEvent('change');
  assert.match(await card.innerText(), /the cached share must be a number from 1 to 100/);
  assert.ok(await card.locator('button[data-action="host-tier-search"]').isDisabled());
  assert.deepEqual(errors, []);
  await page.close();
});

test("the live view draws a run's retention curve beside the simulation's", async () => {
  const records = scratchFile('retention-records.jsonl', '');
  const want = JSON.parse(cli(['simulate', '--json', '--records', records,
    scratchFile('retention-live.json', JSON.stringify(SCENARIO))])).summary.retention;
  const { page, errors } = await openExplorer(SCENARIO, 'retention-live');
  await page.locator('[data-view="live"]').click();
  await page.locator('input[data-control="import"]').setInputFiles(records);
  const card = page.locator('[data-retention-card="live"]');
  await card.locator('tr[data-band]').first().waitFor({ timeout: 60000 });
  assertSameBands(await shownBands(card), want, 'the imported records\' bands');
  const withShare = want.filter((b) => b.cached_share !== null && b.cached_share !== undefined).length;
  assert.equal(Number(await card.locator('figure[data-chart="retention"] path[data-series="live"]').getAttribute('data-points')), withShare);
  // The simulation of the same scenario, dashed beside it: the same run, so the same points.
  const sim = card.locator('figure[data-chart="retention"] path[data-series="simulated"]');
  await sim.waitFor({ state: 'attached', timeout: 60000 });
  assert.equal(Number(await sim.getAttribute('data-points')), withShare);
  await card.evaluate((e) => { e.scrollIntoView({ block: 'start' }); window.scrollBy(0, -64); });
  await screenshot(page, 'page-retention-live-1440x900');
  assert.deepEqual(errors, []);
  await page.close();
});
