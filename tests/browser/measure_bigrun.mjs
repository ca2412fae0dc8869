// Diagnostic: opens the page on a large Poisson scenario (share link) and reports what happens, stage by stage.
//   LOADSHAPE_BIN=... node tests/browser/measure_bigrun.mjs N [--cf] [--apply] [--wait S]
import path from 'node:path';
import { readFileSync } from 'node:fs';
import { ROOT, launchBrowser, shareLink, startAgent } from './harness.mjs';

const args = process.argv.slice(2);
const n = Number(args[0] || 150000);
const cf = args.includes('--cf');
const waitAt = args.indexOf('--wait');
const waitS = waitAt >= 0 ? Number(args[waitAt + 1]) : 120;
const base = JSON.parse(readFileSync(path.join(ROOT, 'examples/engine-10k.json'), 'utf8'));
const sc = { ...base, counterfactuals: cf, workload: { ...base.workload, num_requests: n } };
const agent = await startAgent();
const browser = await launchBrowser();
const t0 = Date.now();
const log = (...a) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)} s]`, ...a);
try {
  const link = shareLink(sc, `big-${n}`, agent.origin);
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on('console', (m) => log(`console.${m.type()}: ${m.text().slice(0, 500)}`));
  page.on('pageerror', (e) => log(`pageerror: ${e}`));
  page.on('worker', (w) => { log(`worker started ${w.url().slice(0, 60)}`); w.on('close', () => log('worker closed')); });
  page.on('crash', () => log('PAGE CRASHED'));
  await page.addInitScript(() => {
    window.__long = [];
    new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push([Math.round(e.startTime), Math.round(e.duration)]); })
      .observe({ type: 'longtask', buffered: true });
  });
  await page.goto(link.replace('#s=', `#token=${agent.token}&s=`));
  const deadline = Date.now() + waitS * 1000;
  let last = '';
  while (Date.now() < deadline) {
    const st = await page.evaluate(() => {
      const q = (s) => document.querySelector(s);
      const c = q('[data-summary="explorer"] [data-computing]');
      return JSON.stringify({
        computing: c ? !c.classList.contains('hidden') : null,
        computingText: c?.textContent,
        computedIn: q('[data-computed-in]')?.dataset.computedIn,
        ms: q('[data-compute-ms]')?.dataset.computeMs,
        mb: q('[data-memory-mb]')?.dataset.memoryMb,
        cerr: q('[data-compute-error]')?.textContent,
        p50: q('[data-summary="explorer"] [data-metric="ttft_p50_ms"]')?.dataset.value,
        run: [...document.querySelectorAll('button')].some((b) => b.textContent === 'Run'),
        err: q('[data-scenario-error]')?.textContent,
        sweep: q('[data-sweep-progress]')?.dataset.sweepProgress,
      });
    }).catch((e) => `evaluate failed: ${e}`);
    if (st !== last) { log(st); last = st; }
    if (args.includes('--click-run') && st.includes('"run":true')) {
      log('clicking Run');
      await page.getByRole('button', { name: 'Run', exact: true }).click();
    }
    const settled = args.includes('--no-sweep') || !st.includes('"sweep":"');
    if ((st.includes('"p50":"') || st.includes('"cerr":"')) && st.includes('"computing":false') && settled) {
      log('long tasks (start ms, duration ms):', JSON.stringify(await page.evaluate(() => window.__long)));
      break;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
} finally {
  await browser.close();
  await agent.stop();
}
