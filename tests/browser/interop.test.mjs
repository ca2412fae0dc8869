// Other tools' results imported on the page (#46 item 4): the live view's import reads an AIPerf, GuideLLM,
// inference-perf or vllm bench file with the same reader as `loadshape import`, labels the source tool, shows what
// the file lacks or defines differently, and scores the records as `loadshape report` scores the imported file.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { cli, launchBrowser, liveScenario, numericFields, readMetrics, ROOT, scratchFile, screenshot, shareLink } from './harness.mjs';

const URL_WITH_TOKEN = process.env.LOADSHAPE_URL;
const TOKEN = process.env.LOADSHAPE_TOKEN;
const ORIGIN = new URL(URL_WITH_TOKEN).origin;
const LIVE = '[data-summary="live"]';
const FIXTURES = path.join(ROOT, 'agent/tests/fixtures/interop');
let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

async function openLive(scenario) {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  page.errors = [];
  page.on('pageerror', (e) => page.errors.push(String(e)));
  await page.goto(shareLink(scenario, 'interop', ORIGIN).replace('#s=', `#token=${TOKEN}&s=`));
  await page.locator('[data-summary="explorer"] [data-metric="ttft_p50_ms"]').first().waitFor({ timeout: 30000 });
  await page.locator('[data-view="live"]').click();
  return page;
}

for (const [tool, file, label] of [
  ['aiperf', 'aiperf/profile_export.jsonl', 'AIPerf'],
  ['guidellm', 'guidellm/benchmarks.json', 'GuideLLM'],
  ['inference-perf', 'inference-perf/per_request_lifecycle_metrics.json', 'inference-perf'],
  ['vllm-bench', 'vllm-bench/detailed.json', 'vllm bench serve'],
]) {
  test(`a ${tool} result file is imported, labelled, and scored as loadshape report scores it`, async () => {
    const scenario = liveScenario({ sessions: 2, steps: 3 });
    const source = path.join(FIXTURES, file);
    const out = scratchFile(`${tool}.jsonl`, '');
    cli(['import', source, '--out', out]);
    const expected = numericFields(JSON.parse(cli(['report', '--json', '--ttft-slo-ms', String(scenario.slo.ttft_ms),
      '--tpot-slo-ms', String(scenario.slo.tpot_ms), out])));
    const page = await openLive(scenario);
    await page.locator('input[data-control="import"]').setInputFiles(source);
    const from = page.locator(`${LIVE} [data-import-from]`);
    await from.waitFor({ timeout: 20000 });
    assert.match(await from.getAttribute('data-import-from'), new RegExp(`^${label}`));
    const lines = readFileSync(out, 'utf8').split('\n').filter((l) => l.trim()).length;
    assert.equal(Number(await page.locator(`${LIVE} [data-records]`).first().getAttribute('data-records')), lines);
    assert.ok(Number(await page.locator(`${LIVE} [data-import-notes]`).getAttribute('data-import-notes')) >= 1,
      'the notes of what the file lacks are shown');
    const shown = await readMetrics(page.locator(LIVE));
    let compared = 0;
    for (const [field, value] of Object.entries(expected)) {
      if (!(field in shown)) continue;
      assert.equal(Number(shown[field]), value, `${tool}: ${field} on the page vs report`);
      compared += 1;
    }
    assert.ok(compared >= 6, `${tool}: only ${compared} fields compared`);
    if (tool === 'aiperf') await screenshot(page, 'page-live-import-aiperf-1440x900');
    assert.deepEqual(page.errors, []);
    await page.close();
  });
}

test('a summary-only file shows its own figures, and a broken one names the file, the tool and the field', async () => {
  const page = await openLive(liveScenario({ sessions: 2, steps: 3 }));
  await page.locator('input[data-control="import"]').setInputFiles(path.join(FIXTURES, 'aiperf/profile_export_aiperf.json'));
  await page.locator(`${LIVE} [data-import-summary]`).waitFor({ timeout: 20000 });
  assert.match(await page.locator(`${LIVE} [data-import-summary]`).innerText(), /summary only/);
  const text = readFileSync(path.join(FIXTURES, 'guidellm/benchmarks.json'), 'utf8');
  // A version whose schema changed: a per-request field renamed.
  const broken = scratchFile('benchmarks.json', text.replaceAll('"request_start_time"', '"request_start"'));
  await page.locator('input[data-control="import"]').setInputFiles(broken);
  const message = page.locator('[data-live-error]').filter({ hasText: 'benchmarks.json' }).first();
  await message.waitFor({ timeout: 20000 });
  assert.match(await message.innerText(), /guidellm: field `benchmarks\[0\]\.requests\.successful\[0\]\.request_start_time`/);
  assert.deepEqual(page.errors, []);
  await page.close();
});
