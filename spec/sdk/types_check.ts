// Compiled by spec/sdk/ai_sdk.mjs with tsc --strict against the SDK's index.d.ts and the
// installed ai and zod: an AI SDK tool() fits `tools` as it is, and the code tools fit
// generateText's. Never run.
import { Tidepool, createCodeTool, codeModeTool, modelView, TidepoolError, type Envelope } from 'tidepool';
import { tool, generateText } from 'ai';
import { z } from 'zod';
const tp = new Tidepool({ binary: '/x', limits: { timeout: '5s', toolCalls: 10 } });
const weather = tool({ description: 'w', inputSchema: z.object({ city: z.string() }), execute: async ({ city }) => ({ city, t: 1 }) });
async function main() {
  const env: Envelope = await tp.run('return 1', { tools: { weather, plain: { inputSchema: { type: 'object' }, execute: async (a: { x: number }, { signal }) => signal.aborted } }, signal: new AbortController().signal });
  const v = modelView(env);
  const ct = createCodeTool({ tools: { weather }, tidepool: tp });
  const r = await generateText({ model: 'x' as any, tools: { run_lua: ct, code: codeModeTool() }, prompt: 'p' });
  const d = tp.describe({ weather });
  const paused = await tp.run('return tools.weather{city = "a"}', { tools: { weather }, mode: 'paused' });
  const resumed: Envelope = await tp.resume(paused, [{ id: 1, result: { t: 1 } }, { id: 2, error: new Error('x') }]);
  if (env.error) console.log(env.error.code, v, r.text, d.description, resumed.status);
  try { await tp.close(); } catch (e) { if (e instanceof TidepoolError) console.log(e.code); }
}
main();
