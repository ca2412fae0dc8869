// Shared by the browser suites: start a `loadshape serve` child on a free loopback port and a headless Chromium.
//
// run.mjs starts ONE agent for the whole suite and passes LOADSHAPE_URL (with `#token=`) to the test files;
// a test that needs its own agent (e.g. a restart) calls startAgent() itself.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

export const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
export const BIN = process.env.LOADSHAPE_BIN || path.join(ROOT, 'target/debug/loadshape');
export const SHOTS = path.join(ROOT, 'artifacts/screenshots');

// docs/simulator.md's fleet example, shorter: 24 conversations of 6 steps on a small linear profile, no fleet, no
// speculation (fleet.test.mjs and spec.test.mjs build on it).
export const TOY_SESSIONS = Object.freeze({
  model: 'engine',
  seed: 5,
  counterfactuals: false,
  workload: {
    kind: 'sessions', sessions: 24, steps: 6, base_tokens: 4000, gen_tokens: 300, tool_tokens: 500, think_s: 3.0,
    stagger_s: 0.25, respawn: true, duration_s: 60.0,
  },
  profile: {
    name: 'toy', block_size: 16, num_kv_blocks: 6000, max_num_seqs: 16, max_num_batched_tokens: 4096,
    step_fixed_ms: 8.0, per_seq_ms: 0.3, per_ctx_token_ms: 0.00005, prefill_tokens_per_ms: 12.0,
    prefill_fixed_ms: 3.0,
  },
  slo: { ttft_ms: 2000.0, tpot_ms: 50.0 },
});

/**
 * Starts `loadshape serve` on 127.0.0.1:<free port>; resolves to { url, origin, token, child, stop }.
 * `dist` null serves the binary's embedded page (no `--dist`); `opts.bin` and `opts.cwd` run another executable
 * from another folder (an installed one, from an empty folder).
 */
export async function startAgent(extraArgs = [], env = {}, dist = path.join(ROOT, 'dist'), opts = {}) {
  const token = randomBytes(32).toString('hex');  // the agent refuses tokens under 128 bits
  const dataDir = mkdtempSync(path.join(tmpdir(), 'loadshape-e2e-'));
  const distArgs = dist === null ? [] : ['--dist', dist];
  const childEnv = { ...process.env, ...env };
  if (dist === null) delete childEnv.LOADSHAPE_DIST;
  const child = spawn(opts.bin || BIN, ['serve', '--port', '0', '--token', token, ...distArgs,
    '--data-dir', dataDir, ...extraArgs], { env: childEnv, cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const url = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`agent did not print its URL in 30 s; stderr:\n${stderr}`)), 30000);
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/(http:\/\/127\.0\.0\.1:\d+\/#token=\S+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    child.on('exit', (code) => { clearTimeout(timer); reject(new Error(`agent exited (${code}); stderr:\n${stderr}`)); });
  });
  const origin = new URL(url).origin;
  const stop = () => new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', resolve);
    child.kill('SIGTERM');  // the exact child PID we spawned, never a process group
  });
  return { url, origin, token, child, dataDir, stop };
}

/** A headless Debian Chromium, flags as TOOLCHAIN.md says for root without a network. */
export async function launchBrowser() {
  // Playwright gives every launch a fresh temporary profile (the `--user-data-dir` TOOLCHAIN.md asks for).
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    headless: true,
  });
}

/** Saves a full-page screenshot under artifacts/screenshots/NAME.png. */
export async function screenshot(page, name) {
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

/** Reads `data-metric` values under `root` (a locator or the page) into { field: number|string }. */
export async function readMetrics(root) {
  return root.locator('[data-metric]').evaluateAll((els) => Object.fromEntries(
    els.map((e) => [e.dataset.metric, e.dataset.value ?? e.textContent.trim()])));
}

// ---- The CLI as the reference: what the page shows must equal what `loadshape` computes natively. ----
const scratch = mkdtempSync(path.join(tmpdir(), 'loadshape-cli-'));

/** Runs `loadshape ARGS...`; resolves to its stdout. */
export function cli(args) {
  return execFileSync(BIN, args, { encoding: 'utf8', maxBuffer: 256 << 20 });
}

/**
 * The scenario in the page's own address, once `accept(scenario)` holds. The page writes its link (`s=`) after the
 * result, with code it loads on demand, so the address may still hold no link or the previous one for a moment.
 */
export async function linkedScenario(page, accept, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  let last = 'no `s=` in the address';
  for (;;) {
    const url = page.url();
    if (/[#&]s=1\./.test(url)) {
      const scenario = JSON.parse(cli(['link', '--decode', url]));
      if (accept(scenario)) return scenario;
      last = `the link holds ${JSON.stringify(scenario.workload)}`;
    }
    if (Date.now() > deadline) throw new Error(`the page's address never held the expected scenario: ${last}`);
    await page.waitForTimeout(100);
  }
}

/** Writes `text` to a scratch file named NAME and returns its path. */
export function scratchFile(name, text) {
  const file = path.join(scratch, name);
  writeFileSync(file, text);
  return file;
}

/** `loadshape simulate --json` of a scenario object, parsed. */
export function simulate(scenario, name) {
  return JSON.parse(cli(['simulate', '--json', scratchFile(`${name}.json`, JSON.stringify(scenario))]));
}

/** The CLI's share link for a scenario object, pointing at `origin`. */
export function shareLink(scenario, name, origin) {
  return cli(['link', scratchFile(`${name}-link.json`, JSON.stringify(scenario)), '--base', `${origin}/`]).trim();
}

/** Numeric fields of a CLI summary (the seed form prints them at the top level; the engine form under `summary`). */
export function numericFields(out) {
  const src = out.summary && typeof out.summary === 'object' ? out.summary : out;
  return Object.fromEntries(Object.entries(src).filter(([, v]) => typeof v === 'number'));
}

/** Opens the explorer's "Advanced" controls (engine, fleet, the rest of the workload), as a user would. */
export async function openAdvanced(page) {
  const box = page.locator('details[data-advanced]').first();
  if (!(await box.evaluate((d) => d.open))) await box.locator('summary').first().click();
}

/** Puts a scenario into the explorer through its "Scenario JSON" box, as a user would paste one. */
export async function applyScenario(page, scenario) {
  const box = page.locator('details.json-box');
  if (!(await box.evaluate((d) => d.open))) await box.locator('summary').click();
  await page.locator('[data-control="scenario-json"]').fill(JSON.stringify(scenario));
  await page.locator('[data-action="apply-json"]').click();
}

/** Every field both sides have is equal (exactly: the page's `data-value` is Rust's round-trip form). */
export function assertSameNumbers(shown, expected, what, atLeast = 8) {
  let compared = 0;
  for (const [field, value] of Object.entries(expected)) {
    if (!(field in shown)) continue;
    assert.equal(Number(shown[field]), value, `${what}: ${field} on the page vs the CLI`);
    compared += 1;
  }
  assert.ok(compared >= atLeast, `${what}: only ${compared} fields compared (${Object.keys(shown).join(', ')})`);
}

/** An engine-model session scenario from examples/, reshaped to a short live run on `sim`. */
export function liveScenario(workload) {
  // The engine-* examples (the README's agents-tour.json is a 4-minute tour, not a test's short run).
  const file = readdirSync(path.join(ROOT, 'examples')).filter((f) => f.startsWith('engine-') && f.endsWith('.json')).sort().find((f) => {
    const s = JSON.parse(readFileSync(path.join(ROOT, 'examples', f), 'utf8'));
    return s.model === 'engine' && s.workload?.kind === 'sessions';
  });
  assert.ok(file, 'an engine-model session scenario in examples/');
  const scenario = JSON.parse(readFileSync(path.join(ROOT, 'examples', file), 'utf8'));
  Object.assign(scenario.workload, { respawn: false, stagger_s: 0.1, base_tokens: 2000, gen_tokens: 64, tool_tokens: 200 },
    workload);
  delete scenario.workload.ladder;
  return scenario;
}
