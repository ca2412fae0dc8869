// Runs every browser suite (*.test.mjs here) against ONE `loadshape serve` started for the run.
// Usage: LOADSHAPE_BIN=target/debug/loadshape node tests/browser/run.mjs [NAME...]
// (with NAMEs, only the *.test.mjs files whose names contain one of them, e.g. `run.mjs bigrun`).
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { startAgent } from './harness.mjs';

const here = path.dirname(new URL(import.meta.url).pathname);
const only = process.argv.slice(2);
const files = readdirSync(here).filter((f) => f.endsWith('.test.mjs'))
  .filter((f) => only.length === 0 || only.some((n) => f.includes(n))).sort().map((f) => path.join(here, f));
const agent = await startAgent();
console.log(`agent at ${agent.url}`);
let status = 1;
try {
  const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...files], {
    stdio: 'inherit',
    env: { ...process.env, LOADSHAPE_URL: agent.url, LOADSHAPE_TOKEN: agent.token },
  });
  status = r.status ?? 1;
} finally {
  await agent.stop();
}
process.exit(status);
