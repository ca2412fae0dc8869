// The agent shapes of a session workload on the page (#44 item 5): the explorer offers think-time distributions,
// compaction, hidden reasoning and sub-agents as optional controls; once set, the page computes what the CLI
// computes for the same scenario (TTFT to content and the reasoning share among the summary fields), and the
// share link carries them.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { cli, launchBrowser, numericFields, openAdvanced, readMetrics, ROOT, screenshot, shareLink, simulate } from './harness.mjs';

const ORIGIN = new URL(process.env.LOADSHAPE_URL).origin;
let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

test('reasoning and sub-agents set from the explorer compute as the CLI does, and the link carries them', async () => {
  const scenario = JSON.parse(readFileSync(path.join(ROOT, 'examples/agents-tour.json'), 'utf8'));
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(shareLink(scenario, 'shapes', ORIGIN));
  await page.locator('[data-summary="explorer"] [data-metric="ttft_p50_ms"]').first().waitFor({ timeout: 30000 });
  const cards = page.locator('.stat-grid.summary');
  assert.equal(await cards.locator('[data-metric="reasoning_share"]').count(), 0, 'no reasoning card without reasoning');
  await openAdvanced(page);
  for (const shape of ['Reasoning', 'Sub-agents']) {
    await page.getByRole('button', { name: `Set ${shape}` }).click();
  }
  await page.locator('[data-field="/workload/subagents/count"]').waitFor({ timeout: 20000 });
  await page.locator('[data-metric="reasoning_share"]').first().waitFor({ state: 'attached', timeout: 30000 });
  // What the page now holds, through its own share link, is what the CLI simulates.
  await page.locator('[data-action="copy-link"]').first().click();
  const link = await page.locator('[data-share-link]').inputValue();
  const decoded = JSON.parse(cli(['link', '--decode', link]));
  assert.equal(decoded.workload.reasoning.tokens, 500);
  assert.equal(decoded.workload.subagents.count, 2);
  const expected = numericFields(simulate(decoded, 'shapes-decoded'));
  assert.ok(expected.reasoning_share > 0 && expected.ttft_content_p50_ms > expected.ttft_p50_ms);
  await page.waitForFunction((v) => Number(document.querySelector('[data-metric="reasoning_share"]')?.dataset.value) === v,
    expected.reasoning_share, { timeout: 30000 });
  const shown = await readMetrics(page.locator('[data-summary="explorer"]'));
  for (const field of ['reasoning_share', 'ttft_content_p50_ms', 'ttft_p50_ms', 'cached_share', 'completed']) {
    if (!(field in expected)) continue;
    assert.equal(Number(shown[field]), expected[field], `${field} on the page vs the CLI`);
  }
  // With reasoning the headline cards show TTFT to the first content token and the reasoning share.
  for (const field of ['ttft_content_p50_ms', 'ttft_content_p99_ms', 'reasoning_share']) {
    assert.equal(await cards.locator(`[data-metric="${field}"]`).count(), 1, `${field} card`);
  }
  // The session timeline draws a session and its sub-agents, each on a row of its own.
  const timeline = page.locator('[data-chart="session-timeline"]');
  await timeline.waitFor({ timeout: 30000 });
  const rows = await timeline.locator('text[data-row]').count();
  assert.ok(rows >= 3, `the session and at least two sub-agents: ${rows} rows`);
  assert.ok(await timeline.locator('.tl-bar[data-row="1"]').count() >= 1, 'a sub-agent has bars');
  await screenshot(page, 'page-agent-shapes-1440x900');
  assert.deepEqual(errors, []);
  await page.close();
});
