// Times the engine model alone in headless Chromium (not a test: a benchmark), to tell the engine's cost in the
// browser's V8 apart from the page around it (tests/browser/measure_compute.mjs times the page's own figure).
//   bash scripts/bench_wasm.sh             # builds the wasm this loads (and prints node's figures)
//   node tests/browser/measure_engine.mjs [FILE...]      # RUNS=N: N runs per file and mode (default 31)
// Loads scripts/bench_wasm's module (wasm-bindgen --target web) in a page served from 127.0.0.1 and runs
// `simulate(json, full)` 31 times per file and mode in a dedicated Web Worker (as the page computes) and on the
// main thread, printing the median and minimum of each.
//   source scripts/env.sh; PAGE_BUILD=1 node tests/browser/measure_engine.mjs
// times the engine as the page ships it instead: scripts/bench_wasm built with the page's profile (root
// Cargo.toml's [profile.wasm-release]: opt-level "z", `shared` at 3, LTO, one codegen unit, panic abort) and
// passed through wasm-opt with the page's level and flags (scripts/page_split.sh's WASM_OPT_FLAGS);
// WASM_OPT_PARAMS="..." replaces the flags after the level (e.g.
// `WASM_OPT_PARAMS=--converge`, the flags before the bundle work, to alternate old and new).
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ROOT, launchBrowser } from './harness.mjs';

const target = process.env.WASM_BENCH_TARGET || path.join(process.env.HOME, '.cache/loadshape-wasm-bench');
const wasm = path.join(target, 'wasm32-unknown-unknown/release/loadshape_wasm_bench.wasm');
const files = process.argv.slice(2);
if (!files.length) files.push(path.join(ROOT, 'examples/engine-sessions-10k.json'));

const dir = mkdtempSync(path.join(tmpdir(), 'loadshape-engine-bench-'));
if (process.env.PAGE_BUILD === '1') {
  const crate = path.join(ROOT, 'scripts/bench_wasm');
  const pageTarget = `${target}-page`;
  copyFileSync(path.join(ROOT, 'Cargo.lock'), path.join(crate, 'Cargo.lock'));
  const profile = ['opt-level="z"', 'lto=true', 'codegen-units=1', 'panic="abort"', 'debug=false',
    'package.loadshape-shared.opt-level=3'].flatMap((p) => ['--config', `profile.release.${p}`]);
  execFileSync('cargo', ['build', '--release', '--offline', '--target', 'wasm32-unknown-unknown', '-q', ...profile],
    { cwd: crate, env: { ...process.env, CARGO_TARGET_DIR: pageTarget }, stdio: 'inherit' });
  execFileSync('wasm-bindgen', ['--target', 'web', '--no-typescript', '--out-dir', dir,
    path.join(pageTarget, 'wasm32-unknown-unknown/release/loadshape_wasm_bench.wasm')], { stdio: 'inherit' });
  const split = readFileSync(path.join(ROOT, 'scripts/page_split.sh'), 'utf8');
  const flags = split.match(/^WASM_OPT_FLAGS=\(([^)]*)\)/m)?.[1].split(/\s+/).filter(Boolean);
  if (!flags) throw new Error('scripts/page_split.sh has no WASM_OPT_FLAGS=(...)');
  const level = flags.find((f) => /^-O/.test(f)) ?? '-Oz';
  const params = process.env.WASM_OPT_PARAMS === undefined
    ? flags.filter((f) => f !== level) : process.env.WASM_OPT_PARAMS.split(/\s+/).filter(Boolean);
  const bg = path.join(dir, 'loadshape_wasm_bench_bg.wasm');
  execFileSync('wasm-opt', [level, bg, '-o', bg, ...params], { stdio: 'inherit' });
  console.log(`page build: wasm-opt ${level} ${params.join(' ')}`);
} else {
  execFileSync('wasm-bindgen', ['--target', 'web', '--no-typescript', '--out-dir', dir, wasm], { stdio: 'inherit' });
}
// One runner for both places: `run(json)` returns the timings of both modes.
const runs = Math.max(1, Number.parseInt(process.env.RUNS ?? '31', 10) || 31);
writeFileSync(path.join(dir, 'runner.js'), `
import init, { simulate } from './loadshape_wasm_bench.js';
const RUNS = ${runs};
export async function run(json) {
  await init();
  const out = {};
  for (const [mode, full] of [['page', false], ['full', true]]) {
    const t = [];
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      simulate(json, full);
      t.push(performance.now() - t0);
    }
    t.sort((a, b) => a - b);
    out[mode] = { median: t[Math.floor(RUNS / 2)], min: t[0] };
  }
  return out;
}
`);
writeFileSync(path.join(dir, 'worker.js'), `
import { run } from './runner.js';
onmessage = async (e) => postMessage(await run(e.data));
`);
writeFileSync(path.join(dir, 'index.html'), `<!doctype html><meta charset="utf-8"><title>engine bench</title>
<script type="module">
import { run } from './runner.js';
window.inWorker = (json) => new Promise((resolve) => {
  const w = new Worker('./worker.js', { type: 'module' });
  w.onmessage = (e) => { resolve(e.data); w.terminate(); };
  w.postMessage(json);
});
window.onMain = (json) => run(json);
window.ready = true;
</script>`);
const types = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm' };
const server = http.createServer((req, res) => {
  try {
    const file = path.join(dir, path.basename(new URL(req.url, 'http://x').pathname) || 'index.html');
    const body = readFileSync(file);
    res.writeHead(200, { 'content-type': types[path.extname(file)] || 'application/octet-stream' });
    res.end(body);
  } catch {
    res.writeHead(404).end();
  }
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const browser = await launchBrowser();
try {
  const page = await browser.newPage();
  await page.goto(`http://127.0.0.1:${server.address().port}/index.html`);
  await page.waitForFunction(() => window.ready === true);
  for (const file of files) {
    const json = readFileSync(file, 'utf8');
    for (const where of ['inWorker', 'onMain']) {
      const r = await page.evaluate(([fn, j]) => window[fn](j), [where, json]);
      const place = where === 'inWorker' ? 'worker' : 'main thread';
      for (const mode of ['page', 'full']) {
        console.log(`${path.basename(file)} (${mode}, Chromium ${place}): median ${r[mode].median.toFixed(1)} ms, `
          + `min ${r[mode].min.toFixed(1)} ms`);
      }
    }
  }
} finally {
  await browser.close();
  server.close();
}
