// Speculative decoding in the page's controls (issue 43): a user turns speculation on in the explorer's "Engine
// profile" group, sets its method, draft tokens and acceptance, and sees the acceptance card and a lower TPOT; the
// page's summary is exactly what `loadshape simulate --json` computes for the copied link's scenario; "Turn off"
// removes it again. A deployment, which cannot carry speculation, says so. A fleet's disaggregation is set and
// turned off the same way.
// Run through run.mjs (it starts `loadshape serve` and passes LOADSHAPE_URL with #token=).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import {
  assertSameNumbers, cli, launchBrowser, numericFields, openAdvanced, readMetrics, ROOT, screenshot, shareLink, SHOTS, simulate,
  TOY_SESSIONS,
} from './harness.mjs';

const URL_WITH_TOKEN = process.env.LOADSHAPE_URL;
const TOKEN = new URL(URL_WITH_TOKEN).hash.replace(/^#/, '').split('&').find((p) => p.startsWith('token='))?.slice(6);
const ORIGIN = new URL(URL_WITH_TOKEN).origin;
const EXPLORER = '[data-summary="explorer"]';

// A small agent-sessions scenario without speculation (the harness's).
const SESSIONS = TOY_SESSIONS;

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

/** The explorer's current scenario, through "Copy link" and `loadshape link --decode`. */
async function copiedScenario(page) {
  await page.locator('[data-action="copy-link"]').click();
  const link = await page.locator('[data-share-link]').inputValue();
  return JSON.parse(cli(['link', '--decode', link]));
}

async function setNumber(page, pointer, value) {
  const input = page.locator(`input[type=number][data-pointer="${pointer}"]`);
  await input.fill(String(value));
  await input.dispatchEvent('change');
}

/** Waits until the explorer shows `expected`'s TPOT and TTFT p50 (the result of the latest edit), then reads its summary. */
async function shownFor(page, expected) {
  await page.waitForFunction(([tpot, ttft]) => {
    const got = (m) => Number(document.querySelector(`[data-summary="explorer"] [data-metric="${m}"]`)?.dataset.value);
    return got('tpot_p50_ms') === tpot && got('ttft_p50_ms') === ttft;
  }, [expected.tpot_p50_ms, expected.ttft_p50_ms], { timeout: 60000 });
  return readMetrics(page.locator(EXPLORER));
}

test('speculation turned on in the page: the acceptance card, a lower TPOT, the CLI\'s numbers for the link', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(shareLink(SESSIONS, 'spec-sessions', ORIGIN).replace('#s=', `#token=${TOKEN}&s=`));
  const off = numericFields(simulate(SESSIONS, 'spec-off'));
  assert.equal(off.spec_acceptance, undefined, 'no speculation, no acceptance');
  let shown = await shownFor(page, off);
  assertSameNumbers(shown, off, 'without speculation');
  assert.equal(await page.locator(`${EXPLORER} [data-metric="spec_acceptance"]`).count(), 0);

  // "Speculative decoding" is an unset field of the engine profile under Advanced; "set" turns on the default.
  await openAdvanced(page);
  const offer = page.locator('[data-group="speculative"] [data-field="/profile/speculative"]');
  await offer.waitFor({ timeout: 20000 });
  await offer.locator('button').click();
  const method = page.locator('select[data-pointer="/profile/speculative/method"]');
  await method.waitFor({ timeout: 20000 });
  assert.equal(await method.inputValue(), 'mtp');
  assert.equal(await page.locator('input[type=number][data-pointer="/profile/speculative/draft_tokens"]').inputValue(), '1');
  assert.equal(await page.locator('input[type=number][data-pointer="/profile/speculative/acceptance"]').inputValue(), '0.72');
  let scenario = await copiedScenario(page);
  assert.deepEqual(scenario.profile.speculative, { method: 'mtp', draft_tokens: 1, acceptance: 0.72, draft_cost_ms: 0 });
  let on = numericFields(simulate(scenario, 'spec-default'));
  shown = await shownFor(page, on);
  assertSameNumbers(shown, on, 'the default speculation');

  // Set from the controls: an EAGLE head drafting 3 tokens, accepted at 0.8, 0.05 ms per drafted token.
  await method.selectOption('eagle');
  await setNumber(page, '/profile/speculative/draft_tokens', 3);
  await setNumber(page, '/profile/speculative/acceptance', 0.8);
  await setNumber(page, '/profile/speculative/draft_cost_ms', 0.05);
  scenario = await copiedScenario(page);
  assert.deepEqual(scenario.profile.speculative, { method: 'eagle', draft_tokens: 3, acceptance: 0.8, draft_cost_ms: 0.05 });
  on = numericFields(simulate(scenario, 'spec-eagle3'));
  shown = await shownFor(page, on);
  assertSameNumbers(shown, on, 'EAGLE, 3 draft tokens');
  // The acceptance card is shown (a share, as the CLI computes it) and TPOT fell below the run without speculation.
  const card = page.locator(`${EXPLORER} [data-metric="spec_acceptance"]`).first();
  assert.ok(await card.isVisible(), 'the acceptance card');
  assert.equal(Number(await card.getAttribute('data-value')), on.spec_acceptance);
  assert.ok(on.spec_acceptance > 0 && on.spec_acceptance < 1, `acceptance ${on.spec_acceptance}`);
  assert.ok(on.spec_accepted_per_step > 0, `accepted per step ${on.spec_accepted_per_step}`);
  assert.ok(Number(shown.tpot_p50_ms) < off.tpot_p50_ms, `TPOT p50 ${shown.tpot_p50_ms} with speculation vs ${off.tpot_p50_ms}`);
  await screenshot(page, 'page-speculative-1280x800');
  await card.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, 'page-speculative-cards.png') });
  await page.locator('[data-group="speculative"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, 'page-speculative-controls.png') });

  // "Turn off" removes the field: the scenario is the one without speculation again, "set" is offered again, and
  // the summary is the CLI's for the copied link (the numbers without speculation, bit for bit).
  await page.locator('[data-group="speculative"] button[data-turn-off="speculative"]').click();
  await offer.waitFor({ timeout: 20000 });
  assert.equal(await method.count(), 0, 'its knobs are gone');
  scenario = await copiedScenario(page);
  assert.equal(scenario.profile.speculative, undefined, 'no speculative field');
  const again = numericFields(simulate(scenario, 'spec-turned-off'));
  assert.deepEqual(again, off, 'the same numbers as before it was set');
  shown = await shownFor(page, again);
  assertSameNumbers(shown, again, 'speculation turned off');
  assert.equal(await page.locator(`${EXPLORER} [data-metric="spec_acceptance"]`).count(), 0, 'no acceptance card');
  assert.deepEqual(errors, []);
  await page.close();
});

test('a deployment offers no speculation and says where it is set', async () => {
  const scenario = JSON.parse(readFileSync(path.join(ROOT, 'examples/deployment-h100-llama8b.json'), 'utf8'));
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(shareLink(scenario, 'spec-deployment', ORIGIN).replace('#s=', `#token=${TOKEN}&s=`));
  await page.locator(`${EXPLORER} [data-metric="ttft_p50_ms"]`).first().waitFor({ timeout: 30000 });
  const note = page.locator('[data-group="engine-source"] [data-note="speculative"]');
  await note.waitFor({ timeout: 20000 });
  assert.match(await note.textContent(), /Speculative decoding is set on raw coefficients/);
  await openAdvanced(page);
  assert.equal(await page.locator('[data-field^="/profile/speculative"]').count(), 0);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a fleet offers prefill/decode disaggregation; set in the page it computes as the CLI does on the link', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(shareLink(SESSIONS, 'pd-sessions', ORIGIN).replace('#s=', `#token=${TOKEN}&s=`));
  await page.locator(`${EXPLORER} [data-metric="ttft_p50_ms"]`).first().waitFor({ timeout: 30000 });
  await openAdvanced(page);
  assert.equal(await page.locator('[data-field="/fleet/disaggregation"]').count(), 0, 'no fleet, no disaggregation');
  await page.locator('[data-field="/fleet"] button').click();
  const offer = page.locator('[data-group="disaggregation"] [data-field="/fleet/disaggregation"]');
  await offer.waitFor({ timeout: 20000 });
  let scenario = await copiedScenario(page);
  const colocated = numericFields(simulate(scenario, 'pd-colocated'));
  await shownFor(page, colocated);
  await offer.locator('button').click();
  await page.locator('input[type=number][data-pointer="/fleet/disaggregation/decode_instances"]').waitFor({ timeout: 20000 });
  // The default splits the fleet's two replicas 1 + 1 over the link "P/D vs co-located" assumes.
  scenario = await copiedScenario(page);
  assert.deepEqual(scenario.fleet.disaggregation, {
    prefill_instances: 1, decode_instances: 1, link_bytes_per_s: 5e10, link_latency_ms: 0.5, kv_bytes_per_token: 131072,
  });
  // Its controls read prefill, decode, then the link; every box shows its whole value (not a cut-off one).
  const fields = await page.locator('[data-group="disaggregation"] [data-field]').evaluateAll((els) => els.map((e) => e.dataset.field));
  assert.deepEqual(fields, ['/fleet/disaggregation/prefill_instances', '/fleet/disaggregation/decode_instances',
    '/fleet/disaggregation/link_bytes_per_s', '/fleet/disaggregation/link_latency_ms',
    '/fleet/disaggregation/kv_bytes_per_token']);
  const cut = await page.locator('[data-group="disaggregation"] input[type=number]').evaluateAll((els) => els
    .filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => `${e.dataset.pointer}: ${e.value}`));
  assert.deepEqual(cut, [], 'number boxes too narrow for their value');
  // The link's bandwidth reads in GB/s (the scenario holds bytes per second): 50, not 50000000000.
  const link = '/fleet/disaggregation/link_bytes_per_s';
  const linkField = page.locator(`[data-field="${link}"]`);
  assert.equal(await linkField.locator('.field-unit').innerText(), 'GB/s');
  assert.equal(await page.locator(`input[type=number][data-pointer="${link}"]`).inputValue(), '50');
  assert.match(await page.locator(`input[type=number][data-pointer="${link}"]`).getAttribute('aria-label'), /\(GB\/s\)$/);
  // What is typed is taken exactly: 1.001 GB/s is 1,001,000,000 B/s (1.001 × 1e9 in floating point would be
  // 1000999999.9999999), and the copied link opens with the box reading 1.001 again.
  await setNumber(page, link, '1.001');
  scenario = await copiedScenario(page);
  assert.equal(scenario.fleet.disaggregation.link_bytes_per_s, 1001000000);
  const reopen = async (sc, name) => {
    const p = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    p.on('pageerror', (e) => errors.push(String(e)));
    await p.goto(shareLink(sc, name, ORIGIN));
    await p.locator(`${EXPLORER} [data-metric="ttft_p50_ms"]`).first().waitFor({ timeout: 30000 });
    await openAdvanced(p);
    return p;
  };
  const reopened = await reopen(scenario, 'pd-link-gbps');
  assert.equal(await reopened.locator(`input[type=number][data-pointer="${link}"]`).inputValue(), '1.001');
  await reopened.close();
  // A value no one would type (from a scenario file) shows its exact digits and, typed back, stays exactly itself.
  const odd = await reopen({ ...scenario, fleet: { ...scenario.fleet,
    disaggregation: { ...scenario.fleet.disaggregation, link_bytes_per_s: 4197530.826 } } }, 'pd-link-odd');
  const box = odd.locator(`input[type=number][data-pointer="${link}"]`);
  assert.equal(await box.inputValue(), '0.004197530826');
  await setNumber(odd, link, await box.inputValue());
  assert.equal((await copiedScenario(odd)).fleet.disaggregation.link_bytes_per_s, 4197530.826);
  await odd.close();
  await setNumber(page, link, '50');
  scenario = await copiedScenario(page);
  assert.equal(scenario.fleet.disaggregation.link_bytes_per_s, 5e10);
  // A slower link, typed in: the page's summary is the CLI's for the copied link.
  await setNumber(page, '/fleet/disaggregation/link_latency_ms', 20);
  scenario = await copiedScenario(page);
  assert.equal(scenario.fleet.disaggregation.link_latency_ms, 20);
  const pd = numericFields(simulate(scenario, 'pd-slow-link'));
  assert.notEqual(pd.ttft_p50_ms, colocated.ttft_p50_ms, 'disaggregation changes TTFT');
  const shown = await shownFor(page, pd);
  assertSameNumbers(shown, pd, 'P/D 1 + 1');
  await page.locator('[data-group="disaggregation"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, 'page-disaggregation-controls.png') });

  // "Turn off" removes it: the fleet is co-located again (its two replicas kept), and the summary is the CLI's for
  // the copied link, the co-located numbers bit for bit.
  await page.locator('[data-group="disaggregation"] button[data-turn-off="disaggregation"]').click();
  await offer.waitFor({ timeout: 20000 });
  scenario = await copiedScenario(page);
  assert.equal(scenario.fleet.disaggregation, undefined, 'no disaggregation field');
  assert.equal(scenario.fleet.replicas, 2);
  const again = numericFields(simulate(scenario, 'pd-turned-off'));
  assert.deepEqual(again, colocated, 'the co-located numbers again');
  const back = await shownFor(page, again);
  assertSameNumbers(back, again, 'disaggregation turned off');
  assert.deepEqual(errors, []);
  await page.close();
});
