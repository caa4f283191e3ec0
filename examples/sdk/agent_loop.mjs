// An agent loop with the Node SDK and the Vercel AI SDK: your AI SDK tools stay as they
// are; the model gets one code tool and writes Lua that calls them.
//   npm install ai zod /path/to/tidepool/sdk/node   (and @ai-sdk/anthropic for a real model)
//   ANTHROPIC_API_KEY=... node examples/sdk/agent_loop.mjs "Which city is warmest?"
// Without ANTHROPIC_API_KEY the AI SDK's mock model (ai/test) plays the two steps.
// On ai 7, the drop-in for @ai-sdk/code-mode is codeModeTool() with experimental_toolCallers:
//   tools: { code: codeModeTool(), weather, cities },
//   experimental_toolCallers: { weather: ['code'], cities: ['code'] },
import { generateText, tool } from 'ai';
import * as ai from 'ai';
import { z } from 'zod';
import { Tidepool, createCodeTool } from 'tidepool';

const CITIES = { Paris: 21, Oslo: 9, Lima: 17 };
const weather = tool({
  description: 'Current temperature of a city, in Celsius.',
  inputSchema: z.object({ city: z.string().describe('the city, e.g. Paris') }),
  execute: async ({ city }) => {
    if (!(city in CITIES)) throw new Error(`no weather for ${city}; known: ${Object.keys(CITIES).join(', ')}`);
    return { city, temp: CITIES[city] };
  },
});
const cities = tool({ description: 'The cities weather knows.', inputSchema: z.object({}),
  execute: async () => Object.keys(CITIES) });

const SCRIPT = `
local temps = {}
for _, c in ipairs(tools.cities{}) do temps[#temps + 1] = tools.weather{ city = c } end
table.sort(temps, function(a, b) return a.temp > b.temp end)
return { warmest = temps[1].city, temp = temps[1].temp }`;

async function pickModel() {
  if (process.env.ANTHROPIC_API_KEY) {
    const { anthropic } = await import('@ai-sdk/anthropic');
    return anthropic(process.env.ANTHROPIC_MODEL || 'claude-sonnet-4-5');
  }
  const t = await import('ai/test');
  const Mock = t.MockLanguageModelV4 || t.MockLanguageModelV3;
  const usage = { inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: 1, text: 1 } };
  let step = 0;
  return new Mock({
    doGenerate: async ({ prompt }) => {
      if (step++ === 0) {
        return { content: [{ type: 'tool-call', toolCallId: 'c1', toolName: 'run_lua',
          input: JSON.stringify({ code: SCRIPT }) }], finishReason: { unified: 'tool-calls', raw: undefined },
        usage, warnings: [] };
      }
      const view = prompt.at(-1).content[0].output.value;
      return { content: [{ type: 'text', text: `${view.result.warmest} is warmest, at ${view.result.temp} C.` }],
        finishReason: { unified: 'stop', raw: undefined }, usage, warnings: [] };
    },
  });
}

const tp = new Tidepool({ builtinTools: false, limits: { timeout: '10s' } });
try {
  const result = await generateText({
    model: await pickModel(),
    tools: { run_lua: createCodeTool({ tools: { weather, cities }, tidepool: tp }) },
    stopWhen: (ai.isStepCount || ai.stepCountIs)(8),
    prompt: process.argv[2] || 'Which city is warmest?',
  });
  for (const s of result.steps) {
    for (const r of s.toolResults) console.error(`[script] ok=${r.output.ok} calls=${JSON.stringify(r.output.calls)}`);
  }
  console.log(result.text);
} finally {
  await tp.close();
}
