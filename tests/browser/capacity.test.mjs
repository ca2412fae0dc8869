// The explorer's capacity card (issue 19): the simulated capacity search runs in the page's worker and equals what
// `loadshape capacity --simulate --json` finds natively for the same scenario: the capacity, and every level's load,
// pass and saturation class in the order run. Also prints the search's own time in the worker for the 10k-request
// example (the figure docs/capacity.md quotes; never asserted).
// Run through run.mjs (it starts `loadshape serve` and passes LOADSHAPE_URL with #token=).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT, applyScenario, cli, launchBrowser, scratchFile, screenshot } from './harness.mjs';

const URL_WITH_TOKEN = process.env.LOADSHAPE_URL;

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

async function cardFor(page, scenario) {
  await applyScenario(page, scenario);
  const want = JSON.parse(cli(['capacity', '--scenario', scratchFile('capacity.json', JSON.stringify(scenario)), '--simulate', '--json']));
  // The card is recomputed after the explorer's result: wait for one with as many levels as the CLI ran.
  await page.waitForFunction(([n, first]) => {
    const el = document.querySelector('[data-capacity-levels]');
    const row = document.querySelector('tr[data-level="1"]');
    return el && Number(el.dataset.capacityLevels) === n && row && Number(row.dataset.load) === first
      && document.querySelector('[data-capacity-ms]')?.dataset.capacityMs;
  }, [want.levels.length, want.levels[0].load], { timeout: 180000 });
  const shown = await page.evaluate(() => ({
    capacity: document.querySelector('[data-capacity]').dataset.capacity,
    knob: document.querySelector('[data-capacity-knob]').dataset.capacityKnob,
    ms: Number(document.querySelector('[data-capacity-ms]').dataset.capacityMs),
    levels: [...document.querySelectorAll('tr[data-level]')].map((tr) => ({
      load: Number(tr.dataset.load), pass: tr.dataset.pass === 'true', saturation: tr.dataset.saturation,
    })),
  }));
  return { shown, want };
}

test('the capacity card equals the CLI\'s simulated search, knee marked on the chart', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(URL_WITH_TOKEN);
  await page.locator('[data-summary="explorer"] [data-metric]').first().waitFor({ timeout: 60000 });
  const scenario = JSON.parse(readFileSync(path.join(ROOT, 'examples/engine-10k.json'), 'utf8'));
  const { shown, want } = await cardFor(page, scenario);
  assert.equal(shown.knob, want.knob);
  assert.equal(shown.capacity, want.capacity === null ? '' : String(want.capacity));
  assert.deepEqual(shown.levels, want.levels.map((l) => ({ load: l.load, pass: l.pass, saturation: l.saturation })));
  // The knee: a vertical marker at the capacity on the chart, and one point per distinct load.
  const chart = page.locator('figure[data-chart="capacity-knee"]');
  assert.match(await chart.evaluate((e) => e.textContent), /capacity/);
  const points = Number(await chart.locator('path[data-series="goodput"]').getAttribute('data-points'));
  assert.equal(points, new Set(want.levels.map((l) => l.load)).size);
  console.log(`capacity search, examples/engine-10k.json (${want.levels.length} levels of 10,000 requests): ${shown.ms.toFixed(0)} ms in the page`);
  await screenshot(page, 'capacity-card');
  assert.deepEqual(errors, []);
});
