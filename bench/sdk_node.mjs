// make bench: the Node SDK (sdk/node) against `tidepool mcp`, the process already started.
//   caller_tool_call_us  one caller tool call's round trip from a script through the SDK
//                        (the tool returns at once: its own work is excluded), median of
//                        rounds of N calls in one run, less a run without calls
//   sdk_run_ms_node      tp.run('return 1'), median
// Usage: node bench/sdk_node.mjs BINARY [ROUNDS]
import { Tidepool } from '../sdk/node/index.js';

const [bin, roundsArg] = process.argv.slice(2);
const rounds = Number(roundsArg) || 200;
const N = 200;
const tp = new Tidepool({ binary: bin, builtinTools: false });
const tools = { noop: { inputSchema: { type: 'object' }, execute: () => ({}) } };
const loop = `for i = 1, ${N} do tools.noop{} end return 1`;
const empty = `for i = 1, ${N} do end return 1`;
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]; };
try {
  for (let i = 0; i < 20; i++) { await tp.run(loop, { tools }); await tp.run('return 1'); }
  const runs = [], per = [];
  for (let r = 0; r < rounds; r++) {
    let t0 = performance.now();
    await tp.run('return 1');
    runs.push(performance.now() - t0);
    t0 = performance.now();
    await tp.run(empty, { tools });
    const base = performance.now() - t0;
    if (r % 4 === 0) {
      t0 = performance.now();
      await tp.run(loop, { tools });
      per.push(((performance.now() - t0) - base) * 1000 / N);
    }
  }
  console.log(`caller_tool_call_us: ${median(per).toFixed(1)} us (Node SDK, median of ${per.length} runs of ${N} calls)`);
  console.log(`sdk_run_ms_node: ${median(runs).toFixed(3)} ms (Node SDK, return 1, median of ${rounds})`);
} finally {
  await tp.close();
}
