// Time to the page's first computed result, for one or more builds of the page side by side (not a test: a benchmark).
//   LOADSHAPE_BIN=target/debug/loadshape node tests/browser/measure_first_result.mjs [--runs N] [--token] DIST...
// Starts one `loadshape serve --dist DIST` per build and loads each page N times (default 10), the builds
// alternated load by load, each load in a fresh browser context (an empty cache: the wasm is fetched and compiled
// anew). Prints, per build, the page's own `data-first-result-ms` (performance.now() when the explorer's first
// result was shown, from navigation start) as median, minimum and maximum.
// `--token` opens the page with the agent's token (as `loadshape serve` prints it: the live views and the agent link
// load too); without it, the page as a static host serves it.
import { launchBrowser, startAgent } from './harness.mjs';

const args = process.argv.slice(2);
const runsAt = args.indexOf('--runs');
const runs = runsAt >= 0 ? Number(args.splice(runsAt, 2)[1]) : 10;
const tokenAt = args.indexOf('--token');
const withToken = tokenAt >= 0 && args.splice(tokenAt, 1).length > 0;
if (!args.length) throw new Error('usage: measure_first_result.mjs [--runs N] [--token] DIST...');
const agents = [];
for (const dist of args) agents.push(await startAgent([], {}, dist));
const browser = await launchBrowser();
const results = args.map(() => []);
try {
  for (let i = 0; i < runs; i += 1) {
    for (const [k, agent] of agents.entries()) {
      const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
      const page = await context.newPage();
      await page.goto(`${agent.origin}/?fresh=${i}${withToken ? `#token=${agent.token}` : ''}`);
      const cell = page.locator('[data-summary="explorer"][data-first-result-ms]').first();
      await cell.waitFor({ timeout: 60000 });
      results[k].push(Number(await cell.getAttribute('data-first-result-ms')));
      await context.close();
    }
  }
} finally {
  await browser.close();
  for (const agent of agents) await agent.stop();
}
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
for (const [k, dist] of args.entries()) {
  const ms = results[k];
  console.log(`${dist}: first result median ${median(ms).toFixed(0)} ms (min ${Math.min(...ms).toFixed(0)}, `
    + `max ${Math.max(...ms).toFixed(0)}; ${ms.map((v) => v.toFixed(0)).join(' ')})`);
}
