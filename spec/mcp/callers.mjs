// Who may call a tool (the config's tool_settings: callers), through `tidepool mcp
// --expose-tools` with the official SDK client: a tool kept for direct calls is exposed
// and refused in a script; a tool kept for scripts is not exposed, refused when called
// directly anyway, and callable from run_lua; a tool with both is both.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { test, run, assert, eq, tidepool } from './harness.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-callers-'));
const config = path.join(dir, 'config.json');
fs.writeFileSync(config, JSON.stringify({
  tool_settings: {
    'kv.set': { callers: ['direct'] },
    'time.*': { callers: ['script'] },
    'test.**': { callers: ['script', 'direct'] },
  },
}));

const clients = [];
async function connect(args = []) {
  const transport = new StdioClientTransport({
    command: tidepool, args: ['mcp', '--test-tools', '--config', config, ...args], stderr: 'pipe',
  });
  const client = new Client({ name: 'tidepool-callers', version: '1.0.0' });
  await client.connect(transport);
  transport.stderr.resume();
  clients.push(client);
  return client;
}
const runLua = (c, code) => c.callTool({ name: 'run_lua', arguments: { code } });

let c;

test('tools/list exposes the tools whose callers include direct, and no other', async () => {
  c = await connect(['--expose-tools']);
  const { tools } = await c.listTools();
  eq(tools.map((t) => t.name), ['run_lua', 'kv_delete', 'kv_get', 'kv_list', 'kv_set',
    'test_echo', 'test_sleep'], 'time.now and time.sleep (script only) are not listed');
});

test('a tool kept for direct calls: called directly it runs, from a script it is tool.denied', async () => {
  const r = await c.callTool({ name: 'kv_set', arguments: { key: 'callers', value: 7 } });
  assert(!r.isError, `direct call: ${JSON.stringify(r.structuredContent)}`);
  eq(r.structuredContent.bytes, 1, 'its own result');
  const s = await runLua(c, 'return tools.kv.set{key = "callers", value = 8}');
  eq(s.isError, true, 'a script cannot');
  const env = s.structuredContent;
  eq(env.error.code, 'tool.denied', 'code');
  eq(env.error.message, 'tools.kv.set may only be called directly, not from a script (the '
    + 'config\'s tool_settings give it callers ["direct"]): call it as a tool of its own, '
    + 'outside the script, and pass its result to the script if the script needs it', 'message');
  const g = await runLua(c, 'return tools.kv.get{key = "callers"}.value');
  eq(g.structuredContent.result, 7, 'the direct call stored it, the script did not');
});

test('a tool kept for scripts: not exposed, refused when called directly, fine in run_lua', async () => {
  const r = await c.callTool({ name: 'time_now', arguments: {} });
  eq(r.isError, true, 'a direct call is refused');
  eq(r.structuredContent, undefined, 'an error result carries no structuredContent');
  const err = JSON.parse(r.content[0].text).error;
  eq(err.code, 'tool.denied', 'code');
  eq(err.message, 'time_now may only be called from a script, not '
    + 'directly (the config\'s tool_settings give it callers ["script"]): call '
    + 'tools.time.now{...} in a run_lua script', 'message, named as the client calls it');
  const s = await runLua(c, 'return math.type(tools.time.now{}.unix_ms)');
  assert(!s.isError, `from a script: ${JSON.stringify(s.structuredContent)}`);
  eq(s.structuredContent.result, 'integer', 'it runs');
});

test('a tool with both callers works both ways; scripts do not see direct-only tools', async () => {
  const r = await c.callTool({ name: 'test_echo', arguments: { n: 1 } });
  eq(r.structuredContent, { n: 1 }, 'directly');
  const s = await runLua(c, `
    local listed = {}
    for _, n in ipairs(tools.list()) do listed[n] = true end
    local found = {}
    for _, h in ipairs(tools.search("set store")) do found[h.name] = true end
    return { echo = tools.test.echo{n = 2}.n, set_listed = listed["kv.set"] or false,
             get_listed = listed["kv.get"] or false, set_found = found["kv.set"] or false,
             described = tools.describe("kv.set") }`);
  eq(s.structuredContent.result, { described: '-- tools.kv.set may only be called directly, '
    + 'not from a script (the config\'s tool_settings)\n', echo: 2, get_listed: true,
  set_found: false, set_listed: false }, 'from a script');
  const { tools } = await c.listTools();
  const desc = tools.find((t) => t.name === 'run_lua').description;
  assert(!desc.includes('kv.set'), 'run_lua\'s description leaves kv.set out');
  assert(desc.includes('kv.get'), 'and keeps kv.get');
});

test('without --expose-tools nothing is called directly: only run_lua is listed', async () => {
  const m = await connect();
  const { tools } = await m.listTools();
  eq(tools.map((t) => t.name), ['run_lua'], 'names');
  let failed = null;
  await m.callTool({ name: 'kv_set', arguments: { key: 'x', value: 1 } }).catch((e) => { failed = e; });
  assert(failed && /Unknown tool: kv_set/.test(failed.message), `unknown: ${failed && failed.message}`);
});

// run() ends the process: the folder goes in an exit handler (synchronous), and the
// servers end when their standard input closes with it
process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
await run();
