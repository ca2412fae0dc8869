// The page's Fleet group (issue 20): a user sets a fleet on an agent-sessions scenario, picks the replica count and
// the router in the page's controls, and the page's per-replica figures (its "Fleet" diagnostic) and summary are
// exactly what `loadshape simulate --json` computes natively for the same scenario.
// Run through run.mjs (it starts `loadshape serve` and passes LOADSHAPE_URL with #token=).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import {
  assertSameNumbers, launchBrowser, numericFields, openAdvanced, readMetrics, screenshot, shareLink as cliLink, simulate,
  TOY_SESSIONS,
} from './harness.mjs';

const URL_WITH_TOKEN = process.env.LOADSHAPE_URL;
const TOKEN = new URL(URL_WITH_TOKEN).hash.replace(/^#/, '').split('&').find((p) => p.startsWith('token='))?.slice(6);
const ORIGIN = new URL(URL_WITH_TOKEN).origin;
const EXPLORER = '[data-summary="explorer"]';

// A small agent-sessions scenario, no fleet yet (the harness's).
const SESSIONS = TOY_SESSIONS;

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

/** `pct` of app/src/ui/fmt.rs: one decimal and a space before the sign. */
const pct = (v) => `${(v * 100).toFixed(1)} %`;

/** The rows the page writes per replica, from the native fleet report. */
const replicaRows = (fleet) => fleet.replicas.map((x) => `replica ${x.replica}: ${x.requests} requests, cached ${pct(x.cached_share)}`);

async function fleetText(page, replicas, router) {
  const d = page.locator('[data-diagnostic="fleet"]');
  await page.waitForFunction(([r, n]) => {
    const t = document.querySelector('[data-diagnostic="fleet"]')?.textContent ?? '';
    return t.includes(`Fleet: ${n} replicas, router ${r}`);
  }, [router, replicas], { timeout: 60000 });
  return d.innerText();
}

async function setControl(page, selector, value) {
  const input = page.locator(selector);
  await input.fill(String(value));
  await input.dispatchEvent('change');
}

test('the Fleet group: replicas and router set in the page give the native per-replica figures', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const link = cliLink(SESSIONS, 'fleet-sessions', ORIGIN);
  await page.goto(link.replace('#s=', `#token=${TOKEN}&s=`));
  await page.locator(`${EXPLORER} [data-metric="ttft_p50_ms"]`).first().waitFor({ timeout: 30000 });
  // The fleet is an unset optional group under "Advanced": "set" puts the default fleet there (2 replicas, round
  // robin).
  await openAdvanced(page);
  await page.locator('[data-field="/fleet"] button').click();
  let text = await fleetText(page, 2, 'round_robin');
  let native = simulate({ ...SESSIONS, fleet: { replicas: 2, router: 'round_robin', load_cap: 1.5 } }, 'fleet-rr2');
  for (const row of replicaRows(native.fleet)) assert.ok(text.includes(row), `${row} in ${text}`);

  // Three replicas behind session affinity, typed into the group's controls.
  await setControl(page, 'input[type=number][data-pointer="/fleet/replicas"]', 3);
  await fleetText(page, 3, 'round_robin');
  await page.locator('select[data-pointer="/fleet/router"]').selectOption('session_affinity');
  text = await fleetText(page, 3, 'session_affinity');
  native = simulate({ ...SESSIONS, fleet: { replicas: 3, router: 'session_affinity', load_cap: 1.5 } }, 'fleet-aff3');
  assert.equal(native.fleet.replicas.length, 3);
  for (const row of replicaRows(native.fleet)) assert.ok(text.includes(row), `${row} in ${text}`);
  // And the page's summary (the same outcome as the diagnostic) is the native one for the same fleet, to the bit.
  const shown = await readMetrics(page.locator(EXPLORER));
  assertSameNumbers(shown, numericFields(native), 'fleet of 3, session_affinity');
  await screenshot(page, 'page-fleet-1280x800');
  assert.deepEqual(errors, []);
  await page.close();
});
