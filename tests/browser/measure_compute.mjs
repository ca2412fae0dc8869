// Measures the page's own "computed in your browser in X ms" figure for scenario files (not a test: a benchmark).
//   LOADSHAPE_BIN=target/debug/loadshape node tests/browser/measure_compute.mjs [FILE...] [--runs N] [--dist DIR]
// For each file: opens the CLI's share link in headless Chromium, then moves the TTFT-SLO slider N times (default
// 15; an SLO edit recomputes the whole scenario) and prints the page's data-compute-ms for the first computation
// (a cold page: V8 runs new wasm in its baseline tier first) and the median and minimum of the recomputations
// (what a user dragging a slider sees). With `--settle`, each move waits until the load sweep that follows a result
// has finished and the page is idle, so the figure is the computation alone, not the computation competing with
// the page drawing the previous result and running the sweep (on a 2-core machine that doubles the median).
// Needs dist/ built (trunk build --release); `--dist DIR` serves another build of the page.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { BIN, ROOT, launchBrowser, startAgent } from './harness.mjs';

const args = process.argv.slice(2);
const runsAt = args.indexOf('--runs');
const runs = runsAt >= 0 ? Number(args.splice(runsAt, 2)[1]) : 15;
const settleAt = args.indexOf('--settle');
const settle = settleAt >= 0 && args.splice(settleAt, 1).length > 0;
const distAt = args.indexOf('--dist');
const dist = distAt >= 0 ? args.splice(distAt, 2)[1] : path.join(ROOT, 'dist');
const files = args.length ? args : [path.join(ROOT, 'examples/engine-sessions-10k.json')];
const agent = await startAgent([], {}, dist);
const browser = await launchBrowser();
try {
  for (const file of files) {
    const link = execFileSync(BIN, ['link', file], { encoding: 'utf8' }).trim();
    const fragment = link.slice(link.indexOf('#') + 1);
    const times = [];
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    await page.goto(`${agent.origin}/#token=${agent.token}&${fragment}`);
    const run = page.getByRole('button', { name: 'Run', exact: true });
    const cell = page.locator('[data-compute-ms]:not([data-compute-ms=""])').first();
    await Promise.race([cell.waitFor({ timeout: 120000 }), run.waitFor({ timeout: 120000 }).then(() => run.click())]);
    await cell.waitFor({ timeout: 120000 });
    const first = Number(await cell.getAttribute('data-compute-ms'));
    const slider = page.locator('input[type=range][data-pointer="/slo/ttft_ms"]');
    for (let i = 0; i < runs; i += 1) {
      if (settle) {
        await page.waitForFunction(() => {
          const p = document.querySelector('[data-sweep-progress]');
          if (!p) return true;
          const [done, total] = p.getAttribute('data-sweep-progress').split('/').map(Number);
          return done >= total;
        }, null, { timeout: 120000 });
        await page.waitForTimeout(200);
      }
      // Done when the "computing" mark has been shown and hidden again: waiting for another figure would hang
      // when two computations take the same time (the worker's clock counts in steps of 0.1 ms).
      await slider.evaluate((el, v) => {
        window.__computed = false;
        const mark = document.querySelector('[data-computing]');
        const watch = new MutationObserver(() => {
          if (mark.classList.contains('hidden')) {
            window.__computed = true;
            watch.disconnect();
          }
        });
        watch.observe(mark, { attributes: true, attributeFilter: ['class'] });
        el.value = String(v);
        el.dispatchEvent(new Event('input', { bubbles: true }));
      }, 400 + 10 * (i % 2 ? i : -i));
      await page.waitForFunction(() => window.__computed === true, null, { timeout: 120000 });
      times.push(Number(await cell.getAttribute('data-compute-ms')));
    }
    const where = await page.locator('[data-computed-in]').first().getAttribute('data-computed-in').catch(() => '?');
    await page.close();
    times.sort((a, b) => a - b);
    console.log(`${path.basename(file)} (in the ${where}${settle ? ', settled' : ''}): first ${first.toFixed(1)} ms; recomputations median ${times[runs >> 1].toFixed(1)} ms, min ${times[0].toFixed(1)} ms (${times.map((t) => t.toFixed(1)).join(', ')})`);
  }
} finally {
  await browser.close();
  await agent.stop();
}
