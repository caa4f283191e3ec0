// MCP of every era over stdio: `tidepool mcp` with the TypeScript SDK 2.x client
// (@modelcontextprotocol/client) in its 'legacy', 'auto' and { pin: '2026-07-28' } modes,
// the SDK 1.x client, and raw JSON-RPC lines for server/discover, per-request _meta,
// version errors and subscriptions/listen. What each SDK client sent is recorded by
// spec/mcp/tap.mjs, a relay between the client and the server.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client as Client2 } from '@modelcontextprotocol/client';
import { StdioClientTransport as Stdio2 } from '@modelcontextprotocol/client/stdio';
import { Client as Client1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as Stdio1 } from '@modelcontextprotocol/sdk/client/stdio.js';
import { test, run, assert, eq, sleep, tidepool, mcpServer } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const tap = path.join(here, 'tap.mjs');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-era-'));
const pkgVersion = (name) =>
  JSON.parse(fs.readFileSync(path.join(here, 'node_modules', name, 'package.json'), 'utf8')).version;
console.log(`# @modelcontextprotocol/client ${pkgVersion('@modelcontextprotocol/client')}, ` +
  `@modelcontextprotocol/sdk ${pkgVersion('@modelcontextprotocol/sdk')}`);

const MODERN = '2026-07-28';
const SUPPORTED = [MODERN, '2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'];
const V = 'io.modelcontextprotocol/protocolVersion';
const CAPS = 'io.modelcontextprotocol/clientCapabilities';
const INFO = 'io.modelcontextprotocol/clientInfo';
const SERVER_INFO = 'io.modelcontextprotocol/serverInfo';
const SUB = 'io.modelcontextprotocol/subscriptionId';
const META = { [V]: MODERN, [CAPS]: {}, [INFO]: { name: 'raw', version: '1' } };

// JSON with sorted keys, for comparing whole objects whatever their key order.
const canon = (v) => JSON.stringify(v, (k, x) => (x && typeof x === 'object' && !Array.isArray(x)
  ? Object.fromEntries(Object.keys(x).sort().map((key) => [key, x[key]])) : x));
const same = (got, want, msg) => {
  if (canon(got) !== canon(want)) throw new Error(`${msg}: got ${canon(got)}, want ${canon(want)}`);
};

// ---- SDK clients -------------------------------------------------------------------------
const clients = [];
let nlog = 0;
// A 2.x client; mode undefined: no versionNegotiation option at all.
async function connect2(mode, args = [], options = {}) {
  const log = path.join(tmp, `wire-${nlog++}.jsonl`);
  const transport = new Stdio2({
    command: process.execPath, args: [tap, log, tidepool, 'mcp', '--test-tools', ...args], stderr: 'pipe',
  });
  const client = new Client2({ name: 'tidepool-era', version: '2.0.0' },
    { ...(mode === undefined ? {} : { versionNegotiation: { mode } }), ...options });
  await client.connect(transport);
  transport.stderr?.resume();
  clients.push(client);
  const wire = () => (fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '').split('\n')
    .filter(Boolean).map((l) => { const r = JSON.parse(l); return { pid: r.pid, msg: JSON.parse(r.msg) }; });
  return { client, wire };
}
const runLua = (c, code, extra = {}) => c.callTool({ name: 'run_lua', arguments: { code, ...extra } });

let legacyInfo, legacyInstructions;

// What every client must be able to do in its era: list the tools, run a script, keep a
// session's globals across calls, and get a script's error as a tool error.
async function worksInEveryEra(c, session) {
  const { tools } = await c.listTools();
  eq(tools.map((t) => t.name), ['run_lua'], 'the tools listed');
  eq(tools[0].inputSchema.required, ['code'], 'run_lua needs code');
  eq(Object.keys(tools[0].inputSchema.properties), ['code', 'session'], 'run_lua takes code and session');
  const a = await runLua(c, 'x = 41 return tools.test.echo{n = x}.n', { session });
  eq(a.isError, false, 'not an error');
  eq(a.structuredContent.result, 41, 'the result');
  eq(a.structuredContent.session, { id: session, state: 'new' }, 'a new session');
  const b = await runLua(c, 'return x + 1', { session });
  eq(b.structuredContent.result, 42, 'the global kept by the session');
  eq(b.structuredContent.session, { id: session, state: 'continued' }, 'the session continued');
  const n = await runLua(c, 'return x');
  eq([n.structuredContent.ok, n.structuredContent.result], [true, null], 'no global without the session');
  const e = await runLua(c, 'error("boom")', { session });
  eq(e.isError, true, 'a script error is a tool error');
  eq([e.structuredContent.ok, e.structuredContent.error.code, e.structuredContent.error.message],
    [false, 'runtime', 'boom'], 'the error');
}

test('SDK 2.x, no versionNegotiation (legacy by default): initialize 2025-11-25, no server/discover', async () => {
  const { client, wire } = await connect2(undefined);
  eq(client.getProtocolEra(), 'legacy', 'era');
  eq(client.getNegotiatedProtocolVersion(), '2025-11-25', 'version');
  legacyInfo = client.getServerVersion();
  legacyInstructions = client.getInstructions();
  eq(legacyInfo.name, 'tidepool', 'serverInfo.name');
  await worksInEveryEra(client, 'legacy-default');
  // read after the calls: what the relay recorded of them was recorded before their answers
  const w = wire();
  eq(new Set(w.map((x) => x.pid)).size, 1, 'one process: no probe');
  eq(w[0].msg.method, 'initialize', 'first message');
  eq(w[0].msg.params.protocolVersion, '2025-11-25', 'the version offered');
  eq(w[1].msg.method, 'notifications/initialized', 'second message');
  assert(!w.some((x) => x.msg.params?._meta?.[V] !== undefined), 'no per-request version in the legacy era');
});

test("SDK 2.x, mode 'legacy': the same handshake, and it works", async () => {
  const { client, wire } = await connect2('legacy');
  eq([client.getProtocolEra(), client.getNegotiatedProtocolVersion()], ['legacy', '2025-11-25'], 'era and version');
  await worksInEveryEra(client, 'legacy');
  eq(wire().filter((x) => x.msg.method === 'server/discover').length, 0, 'no server/discover');
  eq(wire()[0].msg.method, 'initialize', 'initialize first');
});

// The wire of a modern connect: the probe on a sibling process, then the session process
// without initialize, every request of it with the per-request _meta.
function checkModernWire(w, what) {
  const pids = [...new Set(w.map((x) => x.pid))];
  eq(pids.length, 2, `${what}: two processes (the SDK probes on a sibling it spawns)`);
  const probe = w.filter((x) => x.pid === pids[0]).map((x) => x.msg);
  eq(probe.map((m) => m.method), ['server/discover'], `${what}: the probe process got server/discover only`);
  same(probe[0].params._meta, { [V]: MODERN, [CAPS]: {}, [INFO]: { name: 'tidepool-era', version: '2.0.0' } },
    `${what}: the probe's _meta`);
  const session = w.filter((x) => x.pid === pids[1]).map((x) => x.msg);
  eq(session.filter((m) => m.method === 'initialize').length, 0, `${what}: no initialize`);
  const requests = session.filter((m) => m.id !== undefined);
  assert(requests.length >= 5, `${what}: the requests were recorded`);
  for (const m of requests) {
    eq([m.params._meta[V], m.params._meta[INFO]?.name], [MODERN, 'tidepool-era'], `${what}: _meta of ${m.method}`);
    eq(typeof m.params._meta[CAPS], 'object', `${what}: clientCapabilities of ${m.method}`);
  }
}

for (const [label, mode] of [["mode 'auto'", 'auto'], ["{ pin: '2026-07-28' }", { pin: MODERN }]]) {
  test(`SDK 2.x, ${label}: server/discover, then 2026-07-28 with no handshake`, async () => {
    const { client, wire } = await connect2(mode);
    eq(client.getProtocolEra(), 'modern', 'era');
    eq(client.getNegotiatedProtocolVersion(), MODERN, 'version');
    same(client.getServerVersion(), legacyInfo, 'serverInfo (from the discover result\'s _meta)');
    eq(client.getInstructions(), legacyInstructions, 'the instructions initialize gives');
    same(client.getServerCapabilities(), { tools: { listChanged: true }, logging: {} }, 'capabilities');
    eq(client.getDiscoverResult().supportedVersions, SUPPORTED, 'supportedVersions');
    await worksInEveryEra(client, `modern-${typeof mode === 'string' ? mode : 'pin'}`);
    checkModernWire(wire(), label);
  });
}

test('SDK 2.x pinned: listen() for toolsListChanged gets list_changed on a plugin reload, close() ends it', async () => {
  const dir = fs.mkdtempSync(path.join(tmp, 'tools-'));
  const { client, wire } = await connect2({ pin: MODERN }, ['--tools', dir, '--expose-tools']);
  let changed = 0;
  client.setNotificationHandler('notifications/tools/list_changed', () => { changed++; });
  const sub = await client.listen({ toolsListChanged: true, promptsListChanged: true });
  eq(sub.honoredFilter, { toolsListChanged: true }, 'the honored part of the filter');
  fs.writeFileSync(path.join(dir, 'hello.lua'), 'return { name = "hello.say", description = "Says hello.", '
    + 'handler = function() return { text = "hello" } end }\n');
  for (let i = 0; i < 500 && !changed; i++) await sleep(10);
  eq(changed, 1, 'one list_changed');
  assert((await client.listTools({}, { cacheMode: 'refresh' })).tools.some((t) => t.name === 'hello_say'), 'the new tool is listed');
  await sub.close();
  fs.writeFileSync(path.join(dir, 'bye.lua'), 'return { name = "bye.say", description = "Says bye.", '
    + 'handler = function() return { text = "bye" } end }\n');
  let listed = false;
  for (let i = 0; i < 500 && !listed; i++) {
    await sleep(10);
    listed = (await client.listTools({}, { cacheMode: 'refresh' })).tools.some((t) => t.name === 'bye_say');
  }
  assert(listed, 'the second plugin was loaded');
  eq(changed, 1, 'no list_changed after the subscription closed');
  const listen = wire().map((x) => x.msg).filter((m) => m.method === 'subscriptions/listen');
  eq(listen.map((m) => [m.id, m.params.notifications]),
    [['listen:0', { toolsListChanged: true, promptsListChanged: true }]], 'one listen request');
  const cancel = wire().map((x) => x.msg).filter((m) => m.method === 'notifications/cancelled');
  eq(cancel.map((m) => m.params.requestId), ['listen:0'], 'close() cancels the listen request');
}, 30000);

test('SDK 1.x still connects (2025-11-25) and works', async () => {
  const transport = new Stdio1({ command: tidepool, args: ['mcp', '--test-tools'], stderr: 'pipe' });
  const client = new Client1({ name: 'tidepool-era-1x', version: '1.0.0' });
  await client.connect(transport);
  transport.stderr.resume();
  clients.push(client);
  eq(client.getServerVersion().name, 'tidepool', 'serverInfo');
  await worksInEveryEra(client, 'sdk1');
});

test("tidepool's own upstream client (lua/upstream.lua) reaches tidepool mcp in the 2026 era", async () => {
  const log = path.join(tmp, 'wire-upstream.jsonl');
  const cfg = path.join(tmp, 'upstream.json');
  fs.writeFileSync(cfg, JSON.stringify({ mcpServers: { inner: {
    command: process.execPath, args: [tap, log, tidepool, 'mcp', '--test-tools', '--workers', '1'] } } }));
  const p = spawn(tidepool, ['run', '--config', cfg, '--json', '-'], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  p.stdout.setEncoding('utf8');
  p.stdout.on('data', (d) => { out += d; });
  p.stderr.resume();
  p.stdin.end('local a = tools.inner.run_lua{code = "x = 5 return x * 2", session = "u"}\n'
    + 'local b = tools.inner.run_lua{code = "return x + 1", session = "u"}\n'
    + 'return {a.result, b.result, b.session.state}');
  eq(await new Promise((r) => p.on('exit', r)), 0, 'exit status');
  const env = JSON.parse(out);
  eq([env.ok, env.result], [true, [10, 6, 'continued']], 'the results, the session kept');
  const msgs = fs.readFileSync(log, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(JSON.parse(l).msg));
  eq(msgs[0].method, 'server/discover', 'discover first');
  eq(msgs.filter((m) => m.method === 'initialize').length, 0, 'no initialize');
  const calls = msgs.filter((m) => m.method === 'tools/call');
  eq(calls.map((m) => m.params._meta[V]), [MODERN, MODERN], 'each call names 2026-07-28');
}, 30000);

// ---- raw JSON-RPC lines -------------------------------------------------------------------
const server = (args = []) => mcpServer(['mcp', '--test-tools', ...args]);
const req = (id, method, params) => ({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) });
const modern = (id, method, params = {}) => req(id, method, { _meta: META, ...params });
const versionError = (id, requested, message) => ({
  jsonrpc: '2.0', id,
  error: { code: -32022, message, data: { supported: SUPPORTED, ...(requested ? { requested } : {}) } },
});

test('raw: server/discover without initialize; the same serverInfo, capabilities and instructions as initialize', async () => {
  const s = server();
  const d = await s.ask(modern(1, 'server/discover'));
  const i = await s.ask(req(2, 'initialize', { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } }));
  same(d, {
    jsonrpc: '2.0', id: 1,
    result: {
      resultType: 'complete', supportedVersions: SUPPORTED, capabilities: i.result.capabilities,
      serverInfo: i.result.serverInfo, instructions: i.result.instructions, ttlMs: 0, cacheScope: 'private',
      _meta: { [SERVER_INFO]: i.result.serverInfo },
    },
  }, 'the discover result');
  same(i.result.capabilities, { tools: { listChanged: true }, logging: {} }, 'capabilities');
  eq(await s.close(), 0, 'exit status');
});

test('raw: every handshake version server/discover lists is one initialize accepts', async () => {
  const s = server();
  for (const v of SUPPORTED.slice(1)) {
    const r = await s.ask(req(v, 'initialize', { protocolVersion: v, capabilities: {}, clientInfo: { name: 'raw', version: '1' } }));
    eq(r.result.protocolVersion, v, `initialize ${v}`);
  }
  const r = await s.ask(req(9, 'initialize', { protocolVersion: MODERN, capabilities: {}, clientInfo: { name: 'raw', version: '1' } }));
  eq(r.result.protocolVersion, '2025-11-25', 'initialize never negotiates 2026-07-28 (it has no handshake)');
  await s.close();
});

test('raw: 2026 tools/list and tools/call with no initialize: resultType, cache fields, a session kept', async () => {
  const s = server();
  const l = await s.ask(modern(1, 'tools/list'));
  eq([l.result.resultType, l.result.ttlMs, l.result.cacheScope], ['complete', 0, 'private'], 'the 2026 fields');
  eq(l.result.tools.map((t) => t.name), ['run_lua'], 'tools');
  eq(l.result._meta[SERVER_INFO].name, 'tidepool', 'serverInfo in _meta');
  s.send(modern(2, 'tools/call', { name: 'run_lua', arguments: { code: 'y = 6 return y', session: 'r' } }));
  const line = await s.line();
  assert(line.startsWith('{"id":2,"jsonrpc":"2.0","result":{"resultType":"complete","content":'), `the line: ${line.slice(0, 120)}`);
  const a = JSON.parse(line);
  eq([a.result.isError, a.result.structuredContent.result], [false, 6], 'the result');
  const b = await s.ask(modern(3, 'tools/call', { name: 'run_lua', arguments: { code: 'return y * 7', session: 'r' } }));
  eq([b.result.resultType, b.result.structuredContent.result, b.result.structuredContent.session.state],
    ['complete', 42, 'continued'], 'the session kept');
  const refused = await s.ask(modern(4, 'tools/call', { name: 'run_lua', arguments: {} }));
  eq([refused.result.resultType, refused.result.isError, refused.result.structuredContent.error.code],
    ['complete', true, 'tool.invalid_input'], 'a refused call');
  // an id made of the text the splice looks for stays intact
  const tricky = ',"jsonrpc":"2.0","result":{';
  const t = await s.ask(modern(tricky, 'tools/call', { name: 'run_lua', arguments: { code: 'return 1' } }));
  eq([t.id, t.result.resultType, t.result.structuredContent.result], [tricky, 'complete', 1], 'a tricky id');
  const p = await s.ask(modern(5, 'ping'));
  eq(p.result.resultType, 'complete', 'ping');
  await s.close();
});

test('raw: 2026 calls of an exposed tool, and progress of a run_lua call by its progressToken', async () => {
  const s = server(['--expose-tools']);
  const e = await s.ask(modern(1, 'tools/call', { name: 'test_echo', arguments: { a: 1 } }));
  same(e, { jsonrpc: '2.0', id: 1, result: { resultType: 'complete', content: [{ type: 'text', text: '{"a":1}' }],
    isError: false, structuredContent: { a: 1 } } }, 'an exposed tool');
  s.send(modern(2, 'tools/call', { _meta: { ...META, progressToken: 'p' }, name: 'run_lua',
    arguments: { code: 'tools.test.echo{} return 3' } }));
  const got = [await s.msg(), await s.msg(), await s.msg(), await s.msg()];
  eq(got.slice(0, 3).map((m) => [m.method, m.params.progressToken, m.params.progress, m.params.message]), [
    ['notifications/progress', 'p', 1, 'script started'],
    ['notifications/progress', 'p', 2, 'tools.test.echo called'],
    ['notifications/progress', 'p', 3, 'tools.test.echo returned']], 'the progress');
  eq([got[3].id, got[3].result.resultType, got[3].result.structuredContent.result], [2, 'complete', 3], 'then the result');
  await s.close();
});

test('raw: a request without the 2026 envelope is served as before (no resultType)', async () => {
  const s = server();
  const l = await s.ask(req(1, 'tools/list'));
  eq(Object.keys(l.result), ['tools'], 'the legacy tools/list result');
  const c = await s.ask(req(2, 'tools/call', { name: 'run_lua', arguments: { code: 'return 2' } }));
  eq(c.result.resultType, undefined, 'no resultType');
  eq(c.result.structuredContent.result, 2, 'the result');
  const v = await s.ask(req(3, 'tools/list', { _meta: { [V]: '2025-06-18' } }));
  eq(Object.keys(v.result), ['tools'], 'a handshake-era version in _meta is that era');
  await s.close();
});

test('raw: version errors: -32022 with the supported list (and the version requested)', async () => {
  const s = server();
  same(await s.ask(req(1, 'server/discover')), versionError(1, undefined,
    'Unsupported protocol version: the request names none. A server/discover request carries its '
    + 'version in params._meta["io.modelcontextprotocol/protocolVersion"] (this server speaks '
    + '2026-07-28; error.data.supported lists every version), or the client opens with initialize'),
  'server/discover without a version');
  same(await s.ask(req(2, 'tools/list', { _meta: { [CAPS]: {} } })), versionError(2, undefined,
    'Unsupported protocol version: the request names none. A 2026-07-28 request carries its '
    + 'version in params._meta["io.modelcontextprotocol/protocolVersion"] (this server speaks '
    + '2026-07-28; error.data.supported lists every version), or the client opens with initialize'),
  'an envelope without its version');
  same(await s.ask(req(3, 'tools/call', { _meta: { ...META, [V]: '2099-01-01' }, name: 'run_lua', arguments: { code: 'return 1' } })),
    versionError(3, '2099-01-01', 'Unsupported protocol version: "2099-01-01". This server speaks '
      + '2026-07-28 per request, and the versions of error.data.supported (those before 2026 open with initialize)'),
    'an unknown version');
  same(await s.ask(req(4, 'subscriptions/listen', { _meta: { ...META, [V]: 20260728 }, notifications: {} })),
    versionError(4, undefined, 'Unsupported protocol version: a non-string value. This server speaks '
      + '2026-07-28 per request, and the versions of error.data.supported (those before 2026 open with initialize)'),
    'a version that is no string');
  same(await s.ask(req(5, 'tools/list', { _meta: { [V]: MODERN } })), {
    jsonrpc: '2.0', id: 5, error: { code: -32602, message: 'Invalid params: params._meta["io.modelcontextprotocol/clientCapabilities"] '
      + 'is missing: every 2026-07-28 request carries the client\'s capabilities (an object, {} for none)' },
  }, 'a version without the client capabilities');
  const init = await s.ask(modern(6, 'initialize', { protocolVersion: '2025-11-25' }));
  eq(init.error.code, -32601, 'initialize is no 2026-07-28 method');
  const lvl = await s.ask(modern(7, 'logging/setLevel', { level: 'debug' }));
  eq(lvl.error.code, -32601, 'logging/setLevel is no 2026-07-28 method');
  eq((await s.ask(req(8, 'ping'))).result, {}, 'the server still serves');
  await s.close();
});

test('raw: a 2026 request in a batch (of a 2025-03-26 connection) is refused, the rest answered', async () => {
  const s = server();
  await s.ask(req(1, 'initialize', { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'raw', version: '1' } }));
  s.send([req(2, 'ping'), modern(3, 'tools/list')]);
  const b = await s.msg();
  eq(b.map((m) => [m.id, m.error ? m.error.code : 'ok']), [[2, 'ok'], [3, -32600]], 'the batch');
  await s.close();
});

test('raw: subscriptions/listen: acknowledged first, list_changed with the subscriptionId, cancelled ends it', async () => {
  const dir = fs.mkdtempSync(path.join(tmp, 'tools-'));
  const s = server(['--tools', dir, '--expose-tools']);
  // a 2025 client on the same server gets its unsolicited notification as before
  await s.ask(req(1, 'initialize', { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } }));
  await s.ask(req(2, 'logging/setLevel', { level: 'error' }));  // no log notifications in between
  same(await s.ask(modern('L1', 'subscriptions/listen', {
    notifications: { toolsListChanged: true, promptsListChanged: true, resourceSubscriptions: ['file:///x'] },
  })), {
    jsonrpc: '2.0', method: 'notifications/subscriptions/acknowledged',
    params: { _meta: { [SUB]: 'L1' }, notifications: { toolsListChanged: true } },
  }, 'the acknowledgment: only what the server honors');
  same(await s.ask(modern(7, 'subscriptions/listen', { notifications: { promptsListChanged: true } })), {
    jsonrpc: '2.0', method: 'notifications/subscriptions/acknowledged',
    params: { _meta: { [SUB]: 7 }, notifications: {} },
  }, 'a filter the server honors nothing of');
  eq((await s.ask(modern('L1', 'subscriptions/listen', { notifications: { toolsListChanged: true } }))).error.code,
    -32602, 'an id in use');
  eq((await s.ask(modern(8, 'subscriptions/listen'))).error.code, -32602, 'no filter');
  eq((await s.ask(modern(9, 'subscriptions/listen', { notifications: { toolsListChanged: 'yes' } }))).error.code,
    -32602, 'a filter of the wrong type');
  fs.writeFileSync(path.join(dir, 'a.lua'), 'return { name = "a.x", description = "A.", '
    + 'handler = function() return {} end }\n');
  same(await s.msg(), { jsonrpc: '2.0', method: 'notifications/tools/list_changed', params: {} },
    'the initialized client\'s notification');
  same(await s.msg(), { jsonrpc: '2.0', method: 'notifications/tools/list_changed', params: { _meta: { [SUB]: 'L1' } } },
    'the subscription\'s notification, and none for the one that did not ask');
  s.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { _meta: META, requestId: 'L1' } });
  eq((await s.ask(req(11, 'ping'))).result, {}, 'the cancel was read');
  fs.writeFileSync(path.join(dir, 'b.lua'), 'return { name = "b.x", description = "B.", '
    + 'handler = function() return {} end }\n');
  // only the initialized client hears of it now
  same(await s.msg(), { jsonrpc: '2.0', method: 'notifications/tools/list_changed', params: {} }, 'after the cancel');
  const l = await s.ask(modern(10, 'tools/list'));
  eq(l.result.tools.map((t) => t.name).filter((n) => /^[ab]_x$/.test(n)), ['a_x', 'b_x'], 'both plugins listed');
  await sleep(300);
  eq(s.pending(), 0, 'no notification for the cancelled subscription');
  eq(await s.close(), 0, 'the server exits 0 with a subscription open');
}, 30000);

await run().finally(async () => {
  await Promise.all(clients.map((x) => x.close().catch(() => {})));
  fs.rmSync(tmp, { recursive: true, force: true });
});
