// The ladder panel's "use in scenario" (issue 7, item 5): the solved ladder becomes the explorer's session
// workload, the numbers recompute, and they equal what the native CLI computes for the resulting scenario.
// Run through run.mjs (it starts `loadshape serve` and passes LOADSHAPE_URL with #token=).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { assertSameNumbers, launchBrowser, linkedScenario, numericFields, readMetrics, screenshot, simulate } from './harness.mjs';

const URL_WITH_TOKEN = process.env.LOADSHAPE_URL;
const EXPLORER = '[data-summary="explorer"]';

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

test('"use in scenario" puts the solved ladder into the explorer, which recomputes to the CLI numbers', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(URL_WITH_TOKEN);
  const p50 = `${EXPLORER} [data-metric="ttft_p50_ms"]`;
  await page.locator(p50).first().waitFor({ timeout: 30000 });
  const before = await page.locator(p50).first().getAttribute('data-value');

  await page.locator('[data-view="ladder"]').click();
  await page.locator('[data-action="solve"]').click();
  const ladder = (await page.locator('[data-ladder] [data-metric="ladder"]').innerText({ timeout: 60000 })).trim();
  assert.match(ladder, /\d/, 'a ladder was solved');
  const slots = Number(await page.locator('input[type=number][data-pointer="/slots"]').inputValue());
  await page.locator('[data-action="use-ladder"]').click();

  await page.locator('[data-view="explorer"]').click();
  await page.waitForFunction(([sel, prev]) => {
    const v = document.querySelector(sel)?.dataset.value;
    return v && v !== prev && document.querySelector('[data-summary="explorer"] [data-computing]')?.classList.contains('hidden');
  }, [p50, before], { timeout: 120000 });

  // The page's scenario, read back from its own URL by the CLI.
  const scenario = await linkedScenario(page, (s) => String(s.workload?.ladder) === ladder);
  assert.equal(scenario.model, 'engine');
  assert.equal(scenario.workload.kind, 'sessions');
  assert.equal(String(scenario.workload.ladder), ladder, 'the workload uses the solved ladder');
  assert.equal(scenario.workload.sessions, slots, 'one session per solver slot');
  assert.equal(await page.locator('[data-pointer="/workload/ladder"]').first().inputValue(), ladder, 'the control shows it');
  assertSameNumbers(await readMetrics(page.locator(EXPLORER)), numericFields(simulate(scenario, 'ladder-used')),
    'scenario with the solved ladder');
  await screenshot(page, 'page-explorer-ladder-1280x800');
  assert.deepEqual(errors, []);
  await page.close();
});
