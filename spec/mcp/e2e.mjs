// End-to-end tests of `tidepool mcp` with the official MCP TypeScript SDK client.
// The server runs with --test-tools: test.echo (returns its arguments) and test.sleep{ms}.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
  LoggingMessageNotificationSchema, ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { test, run, assert, eq, sleep, tidepool } from './harness.mjs';

const clients = [];
async function connect(args = [], onStderr) {
  const transport = new StdioClientTransport({
    command: tidepool, args: ['mcp', '--test-tools', ...args], stderr: 'pipe',
  });
  const client = new Client({ name: 'tidepool-e2e', version: '1.0.0' });
  await client.connect(transport);
  if (onStderr) transport.stderr.on('data', onStderr);
  else transport.stderr.resume();
  clients.push(client);
  return client;
}
const runLua = (c, code, extra = {}, opts) =>
  c.callTool({ name: 'run_lua', arguments: { code, ...extra } }, undefined, opts);

let c;

test('the SDK client connects: server info and capabilities', async () => {
  c = await connect();
  eq(c.getServerVersion().name, 'tidepool', 'serverInfo.name');
  assert(c.getServerCapabilities().tools.listChanged === true, 'tools.listChanged');
  assert(c.getServerCapabilities().logging, 'logging capability');
});

test('tools/list: run_lua with input and output schemas, no $schema anywhere', async () => {
  const { tools } = await c.listTools();
  const t = tools.find((x) => x.name === 'run_lua');
  assert(t, 'run_lua listed');
  assert(t.description.length > 20, 'a description');
  eq(t.inputSchema.required, ['code'], 'code is required');
  eq(t.outputSchema.type, 'object', 'outputSchema is an object schema');
  assert(!JSON.stringify(tools).includes('"$schema"'), 'no $schema keyword');
  assert(!tools.find((x) => x.name === 'test.echo'), 'tools are not exposed without --expose-tools');
});

test('a script calls several tools and parallel; structuredContent is the model view, the calls record is in _meta', async () => {
  const r = await runLua(c, `
    local a = tools.test.echo{n = 1}
    local b, d = parallel(function() return tools.test.echo{n = 2} end,
                          function() return tools.test.sleep{ms = 20} end)
    print("sum", a.n + b.n)
    return { a = a.n, b = b.n, slept = d.slept }`);
  assert(!r.isError, 'not an error');
  const env = r.structuredContent;
  eq(env.ok, true, 'ok');
  eq(env.result, { a: 1, b: 2, slept: true }, 'result');
  eq(env.logs, ['sum\t3'], 'logs');
  eq(env.calls, { 'test.echo': 2, 'test.sleep': 1 }, 'calls counted by tool');
  eq(env.failed_calls, undefined, 'no failed calls listed');
  eq(env.stats, undefined, 'no stats for the model');
  eq(JSON.parse(r.content[0].text), env, 'the text block holds the same JSON');
  eq(r._meta['tidepool/calls'].map((x) => [x.tool, x.ok]),
    [['test.echo', true], ['test.echo', true], ['test.sleep', true]], 'the full record in _meta');
  eq(typeof r._meta['tidepool/stats'].wall_ms, 'number', 'stats in _meta');
});

test('100 kv.set and 100 kv.get returning 5050: 71 bytes of text, the calls counted', async () => {
  const r = await runLua(c, `for i = 1, 100 do tools.kv.set{key = "m" .. i, value = i} end
local s = 0
for i = 1, 100 do s = s + tools.kv.get{key = "m" .. i}.value end
return s`);
  eq(r.content.length, 1, 'one text block');
  eq(r.content[0].text, '{"calls":{"kv.get":100,"kv.set":100},"logs":[],"ok":true,"result":5050}', 'the text');
  eq(Buffer.byteLength(r.content[0].text), 71, 'bytes of text (issue 9: at most 600)');
  eq(r._meta['tidepool/calls'].length, 101, '100 records and the summary of the rest');
  eq(r._meta['tidepool/calls'][100], { by_tool: { 'kv.get': 100 }, calls: 100, failed: 0, summary: true }, 'summary');
});

test('failed and refused calls are listed in full: tool, line, code, message', async () => {
  const r = await runLua(c, `local ok = pcall(tools.kv.get, {nokey = 1})
pcall(tools.nope)
return tools.test.echo{n = 1}.n`);
  eq(r.isError, false, 'the script succeeded');
  eq(r.structuredContent.calls, { 'kv.get': 1, nope: 1, 'test.echo': 1 }, 'counts');
  eq(r.structuredContent.failed_calls, [
    { code: 'tool.invalid_input', line: 1, message: 'tools.kv.get: invalid arguments: $: missing required property "key"; $.nokey: unexpected property "nokey" (allowed: "key") (tools.describe("kv.get") shows what it takes)', tool: 'kv.get' },
    { code: 'tool.unknown', line: 2, message: 'there is no tool tools.nope; did you mean tools.kv.get, tools.kv.set? (tools.list() lists them all)', tool: 'nope' },
  ], 'failed calls');
});

test('progress notifications arrive for each tool call, increasing', async () => {
  const seen = [];
  const r = await runLua(c, 'for i = 1, 3 do tools.test.echo{i = i} end return 1', {},
    { onprogress: (p) => seen.push(p) });
  eq(r.structuredContent.result, 1, 'result');
  assert(seen.length >= 3, `at least one per call, got ${seen.length}`);
  for (let i = 1; i < seen.length; i++) assert(seen[i].progress > seen[i - 1].progress, 'increasing');
  assert(seen.some((p) => /test\.echo/.test(p.message || '')), 'messages name the tool');
});

test('a failing script comes back as isError with the envelope', async () => {
  const r = await runLua(c, 'local x = nil\nreturn x.y');
  eq(r.isError, true, 'isError');
  eq(r.structuredContent.ok, false, 'ok false');
  eq(r.structuredContent.error.code, 'runtime', 'code');
  eq(r.structuredContent.error.line, 2, 'line');
  const s = await runLua(c, 'return (');
  eq(s.structuredContent.error.code, 'syntax', 'syntax error');
  const t = await runLua(c, 'return tools.test.nope{}');
  eq(t.structuredContent.error.code, 'tool.unknown', 'unknown tool');
});

test('bad arguments of run_lua are a tool error the model can read', async () => {
  const r = await c.callTool({ name: 'run_lua', arguments: { script: 'return 1' } });
  eq(r.isError, true, 'isError');
  assert(/code/.test(r.content[0].text), 'says what is missing');
});

test('cancelling a long script stops it at once; the server goes on', async () => {
  const logs = [];
  c.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(String(n.params.data)));
  await c.setLoggingLevel('debug');
  for (const code of ['tools.test.sleep{ms = 30000} return 1', 'while true do end']) {
    const ac = new AbortController();
    const t0 = Date.now();
    const p = runLua(c, code, {}, { signal: ac.signal });
    await sleep(150);
    ac.abort('test');
    let rejected = false;
    try { await p; } catch { rejected = true; }
    assert(rejected, 'the call is aborted');
    for (let i = 0; i < 100 && !logs.some((l) => /cancelled/.test(l)); i++) await sleep(10);
    assert(logs.some((l) => /cancelled/.test(l)), 'the server logged the run as cancelled');
    assert(Date.now() - t0 < 3000, 'stopped quickly');
    logs.length = 0;
    const r = await runLua(c, 'return 42');
    eq(r.structuredContent.result, 42, 'the next call is served');
  }
  await c.setLoggingLevel('info');
});

test('requests are concurrent: ping and a short script while a long one runs', async () => {
  const t0 = Date.now();
  const long = runLua(c, 'tools.test.sleep{ms = 800} return "long"');
  const spin = runLua(c, 'local t = os.clock() while os.clock() - t < 0.5 do end return "spin"');
  await c.ping();
  const short = await runLua(c, 'return "short"');
  eq(short.structuredContent.result, 'short', 'short result');
  assert(Date.now() - t0 < 400, `short answered before the long ones (${Date.now() - t0} ms)`);
  eq((await long).structuredContent.result, 'long', 'long result');
  eq((await spin).structuredContent.result, 'spin', 'spin result');
});

test('a session keeps globals across calls; calls without one do not', async () => {
  const code = 'counter = (counter or 0) + 1 return counter';
  const a = await runLua(c, code, { session: 'e2e' });
  const b = await runLua(c, code, { session: 'e2e' });
  eq([a.structuredContent.result, b.structuredContent.result], [1, 2], 'counter');
  eq(a.structuredContent.session.state, 'new', 'first call');
  eq(b.structuredContent.session.state, 'continued', 'second call');
  const d = await runLua(c, code);
  eq(d.structuredContent.result, 1, 'no session: fresh globals');
});

test('a busy session refuses a second concurrent call', async () => {
  const p = runLua(c, 'tools.test.sleep{ms = 300} return 1', { session: 'busy' });
  await sleep(50);
  const r = await runLua(c, 'return 2', { session: 'busy' });
  eq(r.isError, true, 'isError');
  eq(r.structuredContent.error.code, 'session.busy', 'code');
  eq((await p).structuredContent.result, 1, 'the first call finishes');
});

test('a session over its memory limit is dropped and the model is told', async () => {
  const m = await connect(['--memory', '2M']);
  const r = await runLua(m, 'keep = {} for i = 1, 1e7 do keep[i] = ("x"):rep(100) .. i end',
    { session: 'big' });
  eq(r.structuredContent.error.code, 'limit.memory', 'limit.memory');
  eq(r.structuredContent.session.state, 'dropped', 'dropped');
  const n = await runLua(m, 'return keep == nil', { session: 'big' });
  eq(n.structuredContent.result, true, 'fresh globals');
  eq(n.structuredContent.session.state, 'new', 'new');
  assert(/memory/.test(n.structuredContent.session.message), 'the message says why');
});

test('sessions: the least recently used is evicted past --max-sessions; idle ones expire', async () => {
  const m = await connect(['--max-sessions', '2', '--session-idle', '400ms']);
  const code = 'x = (x or 0) + 1 return x';
  await runLua(m, code, { session: 'a' });
  await runLua(m, code, { session: 'b' });
  await runLua(m, code, { session: 'a' });
  await runLua(m, code, { session: 'c' });  // evicts b
  const b = await runLua(m, code, { session: 'b' });
  eq(b.structuredContent.result, 1, 'b starts afresh');
  assert(/least recently used/.test(b.structuredContent.session.message), 'eviction is explained');
  await sleep(900);
  const d = await runLua(m, code, { session: 'c' });
  eq(d.structuredContent.result, 1, 'c expired');
  assert(/idle/.test(d.structuredContent.session.message), 'expiry is explained');
});

test('--expose-tools lists each tool under a name every client accepts and calls it directly', async () => {
  const m = await connect(['--expose-tools', '--name', 'lua']);
  const { tools } = await m.listTools();
  eq(tools.map((t) => t.name), ['lua', 'kv_delete', 'kv_get', 'kv_list', 'kv_set', 'test_echo',
    'test_sleep', 'time_now', 'time_sleep'], 'names');
  eq(tools.find((t) => t.name === 'test_sleep').inputSchema.required, ['ms'], 'its input schema');
  eq(tools.find((t) => t.name === 'kv_get').outputSchema.type, 'object', 'its output schema');
  const r = await m.callTool({ name: 'test_echo', arguments: { q: 'a"b\\c]]' } });
  eq(r.structuredContent, { q: 'a"b\\c]]' }, 'the tool result itself');
  const g = await m.callTool({ name: 'kv_get', arguments: { key: 'e2e-none' } });
  eq(g.structuredContent, { found: false, value: null }, 'a result checked against its outputSchema by the SDK');
  const bad = await m.callTool({ name: 'test_sleep', arguments: { ms: 'x' } });
  eq(bad.isError, true, 'invalid input is a tool error');
  eq(bad.structuredContent, undefined, 'an error result has no structuredContent (spec/mcp/exposed.mjs)');
  const badv = JSON.parse(bad.content[0].text);
  eq(badv.error.message, 'test_sleep: invalid arguments: $.ms: expected integer, got string "x"', 'named as listed');
  eq(badv.arguments, { ms: 'x' }, 'with the arguments given');
  const l = await m.callTool({ name: 'lua', arguments: { code: 'return 7' } });
  eq(l.structuredContent.result, 7, 'run_lua under its --name');
});

test('a changed --tools directory sends notifications/tools/list_changed', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-mcp-'));
  try {
    const m = await connect(['--tools', dir, '--expose-tools']);
    let changed = 0;
    m.setNotificationHandler(ToolListChangedNotificationSchema, () => { changed++; });
    assert(!(await m.listTools()).tools.some((t) => t.name === 'hello_say'), 'not there yet');
    fs.writeFileSync(path.join(dir, 'hello.lua'), 'return { name = "hello.say", description = "Says hello.", '
      + 'handler = function() return { text = "hello" } end }\n');
    for (let i = 0; i < 300 && !changed; i++) await sleep(10);
    assert(changed >= 1, 'list_changed received');
    assert((await m.listTools()).tools.some((t) => t.name === 'hello_say'), 'the new tool is listed');
    const r = await runLua(m, 'return tools.hello.say{}.text');
    eq(r.structuredContent.result, 'hello', 'and callable');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a result over the 10 MiB message limit is truncated with a marker', async () => {
  const m = await connect(['--max-result', '0', '--memory', '512M', '--timeout', '30s']);
  const r = await runLua(m, 'return string.rep("ab\\"", 4000000)');
  const env = r.structuredContent;
  assert(env.truncated, 'the envelope says it was truncated');
  assert(/truncated by tidepool/.test(env.result), 'the result carries a marker');
  assert(r.content[0].text.length < 10 * 1024 * 1024, 'the text fits');
}, 30000);

test('the server exits when the client closes', async () => {
  // At end of input the server answers what is in flight, within the run's --timeout
  // (spec/mcp/eof.mjs); the SDK's close() stops waiting after 2 s and signals it.
  const m = await connect(['--timeout', '1s']);
  const p = runLua(m, 'tools.test.sleep{ms = 20000}').catch(() => 'closed');
  await sleep(100);
  const t0 = Date.now();
  await m.close();
  const v = await p;  // answered (limit.time) before the client stopped reading, or not
  assert(v === 'closed' || v.structuredContent.error.code === 'limit.time', JSON.stringify(v));
  assert(Date.now() - t0 < 5000, 'closed within the bound');
});

await run().finally(() => Promise.all(clients.map((x) => x.close().catch(() => {}))));
