// The page takes a production trace from a file (issue 18, item 2): parsed in wasm, never uploaded; its own
// statistics beside the simulated result; the result equals the native CLI's for the same trace; the share link
// names the trace by its SHA-256 without its requests, and opening it asks for the file.
// Run through run.mjs (it starts `loadshape serve` and passes LOADSHAPE_URL with #token=). The public trace is read
// from $LOADSHAPE_TRACE_DIR or ../shared/traces beside the repository.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ROOT, assertSameNumbers, launchBrowser, linkedScenario, numericFields, readMetrics, scratchFile, simulate } from './harness.mjs';

const URL_WITH_TOKEN = process.env.LOADSHAPE_URL;
const EXPLORER = '[data-summary="explorer"]';
const TRACE_DIR = process.env.LOADSHAPE_TRACE_DIR || path.join(ROOT, '../shared/traces');

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

/** Reuse the hash ids imply with a never-evicting cache, at block size 512 (as shared::workload::mooncake). */
function impliedReuse(rows) {
  const held = new Map();
  let reused = 0;
  let total = 0;
  for (const r of rows) {
    const len = r.input_length;
    total += len;
    let key = '';
    const keys = r.hash_ids.map((h) => (key += `${h},`));
    let shared = 0;
    for (const [i, k] of keys.entries()) {
      const mine = Math.min(512, len - i * 512);
      const have = held.get(k) ?? 0;
      shared += Math.min(have, mine);
      if (have < mine) break;
    }
    for (const [i, k] of keys.entries()) held.set(k, Math.max(held.get(k) ?? 0, Math.min(512, len - i * 512)));
    reused += Math.min(Math.floor(shared / 512), Math.floor((len - 1) / 512)) * 512;
  }
  return reused / total;
}

test('a trace file is parsed in the page, simulated as the CLI does, and linked by its hash', async () => {
  const text = readFileSync(path.join(TRACE_DIR, 'mooncake_conversation_trace.jsonl'), 'utf8')
    .split('\n').slice(0, 300).join('\n') + '\n';
  const file = scratchFile('head300.jsonl', text);
  const rows = text.trim().split('\n').map((l) => JSON.parse(l));
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(URL_WITH_TOKEN);
  const p50 = `${EXPLORER} [data-metric="ttft_p50_ms"]`;
  await page.locator(p50).first().waitFor({ timeout: 30000 });
  assert.match(await page.locator('[data-trace-local]').innerText(), /never uploaded/);
  const before = await page.locator(p50).first().getAttribute('data-value');

  await page.locator('[data-control="trace-file"]').setInputFiles(file);
  const panel = page.locator('[data-trace-panel]');
  await panel.locator('[data-metric="trace_requests"]').waitFor({ timeout: 30000 });
  const stats = await readMetrics(panel);
  assert.equal(Number(stats.trace_requests), 300);
  const prompts = rows.map((r) => r.input_length).sort((a, b) => a - b);
  assert.equal(Number(stats.trace_prompt_median_tokens), prompts[Math.ceil(0.5 * 300) - 1]);
  assert.equal(Number(stats.trace_prompt_p90_tokens), prompts[Math.ceil(0.9 * 300) - 1]);
  assert.ok(Math.abs(Number(stats.trace_reuse_share) - impliedReuse(rows)) < 1e-12, `${stats.trace_reuse_share}`);
  assert.equal(await panel.locator('[data-trace-rate]').getAttribute('data-trace-rate'), '60');

  await page.waitForFunction(([sel, prev]) => {
    const v = document.querySelector(sel)?.dataset.value;
    return v && v !== prev && document.querySelector('[data-summary="explorer"] [data-computing]')?.classList.contains('hidden');
  }, [p50, before], { timeout: 120000 });

  // The page's link: the trace by its hash, no requests.
  const scenario = await linkedScenario(page, (s) => s.workload?.kind === 'trace');
  assert.equal(scenario.workload.kind, 'trace');
  assert.equal(scenario.workload.sha256, createHash('sha256').update(text).digest('hex'));
  assert.equal((scenario.workload.requests ?? []).length, 0, 'the link carries no requests');
  // The CLI, given the same file beside the scenario, computes the numbers the page shows.
  scenario.workload.path = 'head300.jsonl';
  assertSameNumbers(await readMetrics(page.locator(EXPLORER)), numericFields(simulate(scenario, 'trace-page')),
    'the trace simulated in the page');

  // Opening the link asks for the file.
  const other = await browser.newPage();
  await other.goto(page.url());
  const wanted = other.locator('[data-trace-wanted]');
  await wanted.waitFor({ timeout: 30000 });
  assert.equal(await wanted.getAttribute('data-trace-wanted'), scenario.workload.sha256);
  assert.deepEqual(errors, []);
  await other.close();
  await page.close();
});
