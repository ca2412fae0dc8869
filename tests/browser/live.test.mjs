// The live panel's remaining features against the real agent (issue 7, items 6 and 8): a forced network drop
// during a live run (the page reconnects, resumes, and ends with every record exactly once), export of a run,
// import of a JSONL record file (bad lines reported by number), delete of a run.
//
// The drop is real: the page is served through a small TCP proxy in this test (it forwards bytes and rewrites
// Host/Origin to the agent's address, which the agent checks). Cutting the proxy closes the page's websocket the
// way a lost network does, and refuses reconnects until it is restored. (Chromium's offline emulation, CDP
// `Network.emulateNetworkConditions`, leaves open websockets connected: checked, so it cannot be used here.)
// Run through run.mjs (it starts `loadshape serve` and passes LOADSHAPE_URL with #token=).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { cli, launchBrowser, liveScenario, numericFields, readMetrics, scratchFile, screenshot, shareLink } from './harness.mjs';

const URL_WITH_TOKEN = process.env.LOADSHAPE_URL;
const TOKEN = process.env.LOADSHAPE_TOKEN;
const ORIGIN = new URL(URL_WITH_TOKEN).origin;
const LIVE = '[data-summary="live"]';

let browser;
before(async () => { browser = await launchBrowser(); });
after(async () => { await browser?.close(); });

/** A TCP proxy in front of the agent: `cut()` drops every open connection and refuses new ones until
 * `restore()`. Host and Origin are rewritten to the agent's address (its DNS-rebinding guard checks them). */
async function startProxy(agentOrigin) {
  const agent = new URL(agentOrigin);
  const sockets = new Set();
  let refusing = false;
  const server = net.createServer((client) => {
    if (refusing) { client.destroy(); return; }
    const upstream = net.connect(Number(agent.port), agent.hostname);
    sockets.add(client);
    sockets.add(upstream);
    const mine = `${agent.hostname}:${server.address().port}`;
    client.on('data', (d) => upstream.write(Buffer.from(d.toString('latin1').split(mine).join(agent.host), 'latin1')));
    upstream.on('data', (d) => client.write(d));
    const close = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    for (const s of [client, upstream]) { s.on('close', close); s.on('error', close); }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${server.address().port}`,
    cut() { refusing = true; for (const s of sockets) s.destroy(); sockets.clear(); },
    restore() { refusing = false; },
    close() { this.cut(); return new Promise((resolve) => server.close(resolve)); },
  };
}

/** The agent's own copy of a run's records (its export API), one parsed record per line. */
async function exported(runId) {
  const res = await fetch(`${ORIGIN}/api/runs/${runId}/records.jsonl?token=${TOKEN}`);
  if (res.status === 404) return null;
  assert.equal(res.status, 200, `export of ${runId}`);
  return (await res.text()).split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
}

async function newPage() {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 }, acceptDownloads: true });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.errors = errors;
  return page;
}

const recordsShown = (page) => page.locator(`${LIVE} [data-records]`).first().getAttribute('data-records').then(Number);

/** Opens the scenario through `origin`, launches it on `sim`; resolves to the run id once records arrive. */
async function launch(page, scenario, name, origin = ORIGIN) {
  await page.goto(shareLink(scenario, name, origin).replace('#s=', `#token=${TOKEN}&s=`));
  await page.locator('[data-summary="explorer"] [data-metric="ttft_p50_ms"]').first().waitFor({ timeout: 30000 });
  await page.locator('[data-view="live"]').click();
  await page.locator('[data-status="connected"]').first().waitFor({ timeout: 30000 });
  await page.waitForFunction(() => [...document.querySelectorAll('select[data-control="target"] option')]
    .some((o) => o.value === 'sim'), null, { timeout: 20000 });
  await page.locator('select[data-control="target"]').selectOption('sim');
  await page.locator('[data-action="launch"]').click();
  await page.waitForFunction((sel) => Number(document.querySelector(sel)?.getAttribute('data-records') ?? 0) > 0,
    `${LIVE} [data-records]`, { timeout: 60000 });
  return page.locator(`${LIVE} .status-line .mono`).first().innerText();
}

async function waitEnded(page) {
  await page.locator(`${LIVE} [data-run-state="finished"], ${LIVE} [data-run-state="stopped"], ${LIVE} [data-run-state="failed"]`)
    .first().waitFor({ timeout: 180000 });
  return page.locator(`${LIVE} [data-run-state]`).first().getAttribute('data-run-state');
}

/** `loadshape report --json` of records with the scenario's SLOs: numeric summary fields. */
function report(file, scenario) {
  return numericFields(JSON.parse(cli(['report', '--json', '--ttft-slo-ms', String(scenario.slo.ttft_ms),
    '--tpot-slo-ms', String(scenario.slo.tpot_ms), file])));
}

function assertSameSummary(shown, expected, what) {
  let compared = 0;
  for (const [field, value] of Object.entries(expected)) {
    if (!(field in shown)) continue;
    assert.equal(Number(shown[field]), value, `${what}: ${field}`);
    compared += 1;
  }
  assert.ok(compared >= 6, `${what}: only ${compared} fields compared`);
}

test('a network drop during a live run: the page reconnects, resumes, and ends with every record exactly once', async () => {
  const proxy = await startProxy(ORIGIN);
  const page = await newPage();
  try {
    const scenario = liveScenario({ sessions: 4, steps: 16, think_s: 0.5 });
    const runId = await launch(page, scenario, 'reconnect', proxy.origin);
    const before = await recordsShown(page);
    proxy.cut();
    await page.waitForFunction(() => ['disconnected', 'error'].includes(document.querySelector('[data-status]')?.dataset.status),
      null, { timeout: 20000 });
    // Stay cut off until the run has produced records the page has not seen (a real gap to fill).
    let held = [];
    for (let i = 0; i < 100 && held.length < before + 3; i += 1) {
      await new Promise((r) => setTimeout(r, 200));
      held = (await exported(runId)) ?? [];
    }
    assert.ok(held.length >= before + 3, `records made while the page was cut off (${before} → ${held.length})`);
    assert.equal(await recordsShown(page), before, 'nothing arrives while cut off');
    proxy.restore();
    await page.locator('[data-status="connected"]').first().waitFor({ timeout: 30000 });
    const state = await waitEnded(page);
    assert.equal(state, 'finished');
    const all = await exported(runId);
    // Records reach the charts in 250 ms batches: wait until the count reaches the agent's (or settles short).
    for (let i = 0, last = -1, same = 0; i < 100 && same < 8; i += 1) {
      const n = await recordsShown(page);
      if (n >= all.length && i > 3) break;
      same = n === last ? same + 1 : 0;
      last = n;
      await page.waitForTimeout(250);
    }
    assert.equal(await recordsShown(page), all.length, 'the page holds exactly the agent\'s records');
    assert.ok(Number(await page.locator(`${LIVE} [data-resumes]`).first().getAttribute('data-resumes')) >= 1, 'resumed');
    // Same records, same order: the page's live summary equals the CLI's report of the agent's file.
    const file = scratchFile('reconnect.jsonl', all.map((r) => JSON.stringify(r)).join('\n') + '\n');
    assertSameSummary(await readMetrics(page.locator(LIVE)), report(file, scenario), 'after the resume');
    assert.deepEqual(page.errors, []);
  } finally {
    await page.close();
    await proxy.close();
  }
});

test('run history: export a run, import the file (bad lines reported), reopen the run, delete it', async () => {
  const page = await newPage();
  const scenario = liveScenario({ sessions: 3, steps: 3, think_s: 0.05 });
  const runId = await launch(page, scenario, 'history');
  assert.equal(await waitEnded(page), 'finished');
  const agentRecords = await exported(runId);
  assert.ok(agentRecords.length > 0);
  const item = page.locator(`ul.runs li[data-run="${runId}"]`);
  await item.waitFor({ timeout: 20000 });

  // Export: the downloaded file is the agent's record file, byte for byte.
  const [download] = await Promise.all([
    page.waitForEvent('download', { timeout: 20000 }),
    item.locator('[data-action="export-run"]').click(),
  ]);
  assert.equal(download.suggestedFilename(), `${runId}.jsonl`);
  const file = scratchFile(`${runId}.jsonl`, '');
  await download.saveAs(file);
  const text = readFileSync(file, 'utf8');
  const agentText = await (await fetch(`${ORIGIN}/api/runs/${runId}/records.jsonl?token=${TOKEN}`)).text();
  assert.equal(text, agentText, 'the download is the agent\'s file');
  assert.equal(text.split('\n').filter((l) => l.trim()).length, agentRecords.length);

  // Import: the page scores the file like `loadshape report` with the explorer's SLOs.
  await page.locator('input[data-control="import"]').setInputFiles(file);
  await page.locator(`${LIVE} .status-line .pill`, { hasText: 'file' }).waitFor({ timeout: 20000 });
  assert.equal(await recordsShown(page), agentRecords.length);
  assertSameSummary(await readMetrics(page.locator(LIVE)), report(file, scenario), 'imported file');
  await page.locator(`figure[data-chart="live-ttft"] path[data-series="live"]`).waitFor({ timeout: 20000 });
  await screenshot(page, 'page-live-import-1280x800');

  // A file with a bad line: the rest is imported and the line is named.
  const lines = text.split('\n').filter((l) => l.trim());
  const bad = scratchFile('with-bad-line.jsonl', [lines[0], '{"not": "a record"}', ...lines.slice(1)].join('\n') + '\n');
  await page.locator('input[data-control="import"]').setInputFiles(bad);
  await page.locator('[data-import-skipped]').waitFor({ timeout: 20000 });
  assert.match(await page.locator('[data-import-skipped]').innerText(), /line 2:/);
  assert.equal(await recordsShown(page), agentRecords.length);

  // Several files (the shards of one run, issue #20): scored together as the one file they were cut from.
  const shardA = scratchFile('run.shard-0-of-2.jsonl', lines.filter((_, i) => i % 2 === 0).join('\n') + '\n');
  const shardB = scratchFile('run.shard-1-of-2.jsonl', lines.filter((_, i) => i % 2 === 1).join('\n'));
  await page.locator('input[data-control="import"]').setInputFiles([shardA, shardB]);
  await page.locator(`${LIVE} .status-line .mono`, { hasText: '2 files (merged)' }).waitFor({ timeout: 20000 });
  assert.equal(await recordsShown(page), agentRecords.length);
  assertSameSummary(await readMetrics(page.locator(LIVE)), report(file, scenario), 'two shard files');

  // Reopen: the run from the history replaces the imported file, with every record, scored as `report` does.
  await item.locator('[data-action="open-run"]').click();
  await page.locator(`${LIVE} .status-line .mono`, { hasText: runId }).waitFor({ timeout: 20000 });
  await page.locator(`${LIVE} .status-line [data-run-state="finished"]`).waitFor({ timeout: 20000 });
  for (let i = 0; i < 100 && (await recordsShown(page)) !== agentRecords.length; i += 1) await page.waitForTimeout(100);
  assert.equal(await recordsShown(page), agentRecords.length, 'the reopened run shows every record');
  assertSameSummary(await readMetrics(page.locator(LIVE)), report(file, scenario), 'reopened run');

  // Delete: gone from the history, from the agent's store, and after a reload.
  await item.locator('[data-action="delete-run"]').click();
  await item.waitFor({ state: 'detached', timeout: 20000 });
  assert.equal(await exported(runId), null, 'the agent no longer has the run');
  await page.reload();
  await page.locator('[data-view="live"]').click();
  await page.locator('[data-status="connected"]').first().waitFor({ timeout: 30000 });
  await page.locator('[data-action="refresh-runs"]').click();
  await page.waitForTimeout(500);
  assert.equal(await page.locator(`ul.runs li[data-run="${runId}"]`).count(), 0, 'not listed after a reload');
  assert.deepEqual(page.errors, []);
  await page.close();
});
