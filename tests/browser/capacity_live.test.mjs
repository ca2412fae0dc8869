// The live panel's "find capacity live" (issue 19): the page asks the agent for a live capacity search on a target
// the operator configured (here a `loadshape sim-server` emulating the scenario's own profile, in real time), the
// levels stream into the card while it runs, and the live capacity is shown beside the simulated one (which equals
// `loadshape capacity --simulate --json` for the same scenario). The sim-server exports vLLM's KV-use and
// preemption metrics, so every live level shows its KV peak and preemptions.
//
// The knee is sharp (at most 4 sequences, ≈ 0.65 s a request, TTFT ≤ 300 ms: a 5th user waits a whole request),
// the same engine as agent/tests/capacity_cli.rs, so the live capacity is 4 give or take one step on a busy machine.
// Starts its own agent (with `--target knee=…`) and sim-server; run through run.mjs like the other suites.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { BIN, cli, launchBrowser, scratchFile, screenshot, shareLink, startAgent } from './harness.mjs';

let browser;
let agent;
let sim;
const CARD = '[data-live-capacity-card]';

const profile = {
  name: 'knee', basis: 'test', block_size: 16, num_kv_blocks: 20000, max_num_seqs: 4,
  max_num_batched_tokens: 8192, step_fixed_ms: 15.0, per_seq_ms: 0.5,
  per_ctx_token_ms: 0.0, prefill_tokens_per_ms: 20.0, prefill_fixed_ms: 5.0,
};
const scenario = {
  model: 'engine',
  workload: { kind: 'closed_loop', users: 2, num_requests: 40,
    prompt: { dist: 'fixed', tokens: 256 }, output: { dist: 'fixed', tokens: 40 } },
  profile,
  slo: { ttft_ms: 300.0, tpot_ms: 35.0 },
  seed: 3,
  counterfactuals: false,
};

/** `loadshape sim-server` on a free loopback port; resolves to its child and its `/v1` URL. */
function startSim() {
  const child = spawn(BIN, ['sim-server', '--port', '0', '--profile-file',
    scratchFile('knee-profile.json', JSON.stringify(profile))], { stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('sim-server did not print its address in 30 s')), 30000);
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/OpenAI base URL (http:\/\/127\.0\.0\.1:\d+\/v1)/);
      if (m) { clearTimeout(timer); resolve({ child, url: m[1] }); }
    });
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`sim-server exited (${code})`)); });
  });
}

before(async () => {
  sim = await startSim();
  agent = await startAgent(['--target', `knee=${sim.url}`]);
  browser = await launchBrowser();
});
after(async () => {
  await browser?.close();
  await agent?.stop();
  if (sim && sim.child.exitCode === null) sim.child.kill('SIGTERM');  // the exact child PID we spawned
});

test('find capacity live: levels stream in, the live capacity is shown beside the simulated one', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const want = JSON.parse(cli(['capacity', '--scenario', scratchFile('knee.json', JSON.stringify(scenario)), '--simulate', '--json']));
  assert.equal(want.capacity, 4, 'the simulated knee');
  await page.goto(shareLink(scenario, 'knee', agent.origin).replace('#s=', `#token=${agent.token}&s=`));
  await page.locator('[data-summary="explorer"] [data-metric="ttft_p50_ms"]').first().waitFor({ timeout: 60000 });
  await page.locator('[data-view="live"]').click();
  await page.locator('[data-status="connected"]').first().waitFor({ timeout: 30000 });
  await page.waitForFunction(() => [...document.querySelectorAll('select[data-control="target"] option')]
    .some((o) => o.value === 'knee'), null, { timeout: 20000 });
  await page.locator('select[data-control="target"]').selectOption('knee');
  await page.locator('[data-action="find-capacity"]').click();

  // Running: the simulated side at once, then the first live level while the search goes on.
  await page.locator(`${CARD}[data-live-capacity-state="running"]`).waitFor({ timeout: 30000 });
  assert.equal(await page.locator('[data-sim-capacity]').getAttribute('data-sim-capacity'), String(want.capacity));
  assert.equal(await page.locator('tr[data-sim-level]').count(), want.levels.length);
  await page.waitForFunction((card) => {
    const c = document.querySelector(card);
    return c && Number(c.querySelector('[data-live-capacity-levels]')?.dataset.liveCapacityLevels) >= 1;
  }, CARD, { timeout: 120000 });
  const streamed = await page.locator(CARD).getAttribute('data-live-capacity-state');
  assert.equal(streamed, 'running', 'a level arrived while the search was still running');
  assert.equal(await page.locator('[data-action="find-capacity"]').isDisabled(), true, 'one search at a time');
  await screenshot(page, 'page-live-capacity-running');

  // Done: the live capacity, every level with its KV peak and preemptions from the server's /metrics.
  await page.locator(`${CARD}[data-live-capacity-state="done"]`).waitFor({ timeout: 240000 });
  const shown = await page.evaluate(() => ({
    capacity: document.querySelector('[data-live-capacity]').dataset.liveCapacity,
    levels: [...document.querySelectorAll('tr[data-live-level]')].map((tr) => ({
      load: Number(tr.dataset.load), pass: tr.dataset.pass === 'true',
      kv: tr.querySelector('[data-kv]').dataset.kv, preemptions: tr.querySelector('[data-preemptions]').dataset.preemptions,
    })),
  }));
  const live = Number(shown.capacity);
  assert.ok(shown.capacity !== '' && Math.abs(live - want.capacity) <= 1, `live capacity ${shown.capacity} vs simulated ${want.capacity}`);
  assert.ok(shown.levels.length >= 2, `levels: ${JSON.stringify(shown.levels)}`);
  assert.equal(shown.levels[0].load, want.capacity, 'guided: the first live level is the simulated capacity');
  // The capacity shown is the highest passing load below the lowest failing one of the levels shown.
  const lowestFail = Math.min(...shown.levels.filter((l) => !l.pass).map((l) => l.load));
  const best = Math.max(...shown.levels.filter((l) => l.pass && l.load < lowestFail).map((l) => l.load));
  assert.equal(live, best);
  for (const l of shown.levels) {
    assert.ok(l.kv !== '' && Number(l.kv) > 0 && Number(l.kv) <= 1, `KV peak reported: ${JSON.stringify(l)}`);
    assert.ok(l.preemptions !== '', `preemptions reported: ${JSON.stringify(l)}`);
  }
  await page.locator('figure[data-chart="live-capacity"] path[data-series="live goodput"]').waitFor({ timeout: 10000 });
  await screenshot(page, 'page-live-capacity-done');
  assert.deepEqual(errors, []);
  await page.close();
});
