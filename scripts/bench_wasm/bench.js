// node bench.js FILE... : 31 runs of the engine model in wasm per file and mode; prints median and min (ms).
// "page": as the page runs it (records without their own ITL quantiles); "full": every record field, as the CLI.
const { simulate } = require('./pkg/loadshape_wasm_bench.js');
const fs = require('fs');
for (const f of process.argv.slice(2)) {
  const json = fs.readFileSync(f, 'utf8');
  for (const [mode, full] of [['page', false], ['full', true]]) {
    const t = [];
    let n = 0;
    for (let i = 0; i < 31; i++) {
      const t0 = performance.now();
      n = simulate(json, full);
      t.push(performance.now() - t0);
    }
    t.sort((a, b) => a - b);
    console.log(`${f} (${mode}): ${n} requests, wasm (node ${process.version}) median ${t[15].toFixed(1)} ms, min ${t[0].toFixed(1)} ms`);
  }
}
