// Raw protocol tests of `tidepool mcp`: bad input of every kind gets the JSON-RPC error
// the specification names, and the next good request is still answered.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, run, assert, eq, sleep, tidepool, mcpServer } from './harness.mjs';

// A server process with a line reader over its standard output (harness.mjs).
const server = (args = []) => mcpServer(['mcp', '--test-tools', ...args]);

let s, nextId = 1000;
async function stillServes() {
  const id = nextId++;
  s.send(JSON.stringify({ jsonrpc: '2.0', id, method: 'ping' }) + '\n');
  const m = await s.msg();
  eq(m, { id, jsonrpc: '2.0', result: {} }, 'ping after the bad input');
}
async function expectError(input, code, id = null) {
  s.send(input);
  const m = await s.msg();
  eq(m.jsonrpc, '2.0', 'jsonrpc');
  eq(m.id, id, 'id');
  assert(m.error && typeof m.error.message === 'string', `an error: ${JSON.stringify(m)}`);
  eq(m.error.code, code, `error code for ${String(input).slice(0, 60)}`);
  await stillServes();
  return m;
}

test('initialize answers with the client\'s supported version, else the latest', async () => {
  // 60 s a script: the batch of 64 below queues its runs behind two workers, and a run's
  // wall clock starts when it is queued (slow under the sanitizers on a loaded machine)
  s = server(['--timeout', '60s']);
  for (const [asked, got] of [['2025-06-18', '2025-06-18'], ['2025-11-25', '2025-11-25'],
    ['1999-01-01', '2025-11-25']]) {
    s.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: {
      protocolVersion: asked, capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }) + '\n');
    const m = await s.msg();
    eq(m.result.protocolVersion, got, `asked ${asked}`);
    eq(m.result.serverInfo.name, 'tidepool', 'serverInfo');
    eq(m.result.capabilities.tools, { listChanged: true }, 'tools capability');
  }
  s.send('{"jsonrpc":"2.0","method":"notifications/initialized"}\n');
  await stillServes();
});

test('not JSON: -32700 with id null', () => expectError('{"jsonrpc": "2.0", "id": 1,\n', -32700));
test('invalid UTF-8: -32700', () =>
  expectError(Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":1,"method":"ping","x":"'),
    Buffer.from([0xff, 0xfe]), Buffer.from('"}\n')]), -32700));
test('a string, a number, null: -32600', async () => {
  await expectError('"hello"\n', -32600);
  await expectError('42\n', -32600);
  await expectError('null\n', -32600);
});
test('an empty batch: -32600', () => expectError('[]\n', -32600));
const batchOfPings = (n) => JSON.stringify(Array.from({ length: n }, (_, i) => ({ jsonrpc: '2.0', id: `b${i}`, method: 'ping' }))) + '\n';
async function initialize(version) {
  s.send(JSON.stringify({ jsonrpc: '2.0', id: 'init', method: 'initialize', params: {
    protocolVersion: version, capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }) + '\n');
  eq((await s.msg()).result.protocolVersion, version, 'negotiated');
}
test('a batch on protocol 2025-06-18 or later: -32600, batching was removed there', async () => {
  for (const version of ['2025-06-18', '2025-11-25']) {
    await initialize(version);
    const m = await expectError(batchOfPings(2), -32600);
    eq(m.error.message, 'Invalid Request: JSON-RPC batches are not supported: batching was ' +
      `removed from MCP in protocol version 2025-06-18, and this connection uses ${version}. ` +
      'Send each message on a line of its own', 'message');
  }
});
test('a batch before initialize: -32600, no version was negotiated', async () => {
  const t = server();
  t.send(batchOfPings(1));
  const m = await t.msg();
  eq(m.error.code, -32600, 'code');
  assert(/no version was negotiated yet \(initialize first\)/.test(m.error.message), m.error.message);
  eq(await t.close(), 0, 'exit status');
});
test('initialize inside a batch: -32600 (protocol 2025-03-26)', async () => {
  await initialize('2025-03-26');
  s.send(JSON.stringify([{ jsonrpc: '2.0', id: 'i', method: 'initialize', params: { protocolVersion: '2025-03-26' } }]) + '\n');
  const m = await s.msg();
  eq(m.map((x) => x.error.code), [-32600], 'code');
  eq(m[0].error.message, 'Invalid Request: initialize must not be part of a batch', 'message');
  await stillServes();
});
test('a batch of 65 messages: -32600, a batch holds at most 64 (protocol 2025-03-26)', async () => {
  const m = await expectError(batchOfPings(65), -32600);
  eq(m.error.message, 'Invalid Request: a batch holds at most 64 messages; this one has 65. Send fewer at once', 'message');
  s.send(batchOfPings(64));
  eq((await s.msg()).length, 64, 'a batch of 64 is answered');
  await stillServes();
});
test('a batch of 64 calls with large results stays one line under 10 MiB, each result cut', async () => {
  const call = (i) => ({ jsonrpc: '2.0', id: i, method: 'tools/call', params: { name: 'run_lua',
    arguments: { code: 'tools.test.echo{} return string.rep("y", 200000)' } } });
  const b = server(['--timeout', '60s', '--max-result', '256K']);  /* results past the default */
  b.send(JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: {
    protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }) + '\n');
  await b.msg();
  b.send(JSON.stringify(Array.from({ length: 64 }, (_, i) => call(i))) + '\n');
  const line = await b.line(60000);
  eq(await b.close(), 0, 'exit status');
  assert(line.length < 10 * 1024 * 1024, `line of ${line.length} bytes`);
  const m = JSON.parse(line);
  eq(m.length, 64, 'every call answered');
  for (const r of m) {
    const env = r.result.structuredContent;
    eq(env.ok, true, 'ok kept');
    eq(env.calls, { 'test.echo': 1 }, 'calls kept');
    eq(typeof env.truncated.result_bytes, 'number', 'says the result was cut');
  }
  await stillServes();
}, 60000);
test('a batch of non-objects: an array of -32600 errors', async () => {
  s.send('[1, "x"]\n');
  const m = await s.msg();
  assert(Array.isArray(m) && m.length === 2, 'two answers');
  eq(m.map((x) => x.error.code), [-32600, -32600], 'codes');
  await stillServes();
});
test('a batch: requests answered in one array, notifications not at all', async () => {
  s.send(JSON.stringify([
    { jsonrpc: '2.0', id: 'a', method: 'ping' },
    { jsonrpc: '2.0', method: 'notifications/initialized' },
    { jsonrpc: '2.0', id: 'b', method: 'tools/call', params: { name: 'run_lua', arguments: { code: 'return tools.test.sleep{ms = 30}.slept' } } },
    { jsonrpc: '2.0', id: 'c', method: 'nope' },
  ]) + '\n');
  const m = await s.msg();
  assert(Array.isArray(m), 'an array');
  eq(m.map((x) => x.id).sort(), ['a', 'b', 'c'], 'three answers');
  eq(m.find((x) => x.id === 'b').result.structuredContent.result, true, 'the script ran');
  eq(m.find((x) => x.id === 'c').error.code, -32601, 'unknown method');
  await stillServes();
});
test('a batch of notifications only: no answer', async () => {
  s.send('[{"jsonrpc":"2.0","method":"notifications/initialized"}]\n');
  await stillServes();
});
test('missing or wrong jsonrpc: -32600 with the id', async () => {
  await expectError('{"id":7,"method":"ping"}\n', -32600, 7);
  await expectError('{"jsonrpc":"1.0","id":8,"method":"ping"}\n', -32600, 8);
});
test('an id of the wrong type (null, true, object, array, 1.5): -32600 with id null', async () => {
  for (const id of ['null', 'true', '{}', '[1]', '1.5'])
    await expectError(`{"jsonrpc":"2.0","id":${id},"method":"ping"}\n`, -32600);
});
test('a missing or non-string method: -32600', async () => {
  await expectError('{"jsonrpc":"2.0","id":9}\n', -32600, 9);
  await expectError('{"jsonrpc":"2.0","id":10,"method":42}\n', -32600, 10);
});
test('unknown methods: -32601; server/discover without a version: -32022 (era.mjs has the rest)', async () => {
  await expectError('{"jsonrpc":"2.0","id":11,"method":"server/discover"}\n', -32022, 11);
  await expectError('{"jsonrpc":"2.0","id":"x","method":"resources/list"}\n', -32601, 'x');
});
test('params that are not an object: -32602', () =>
  expectError('{"jsonrpc":"2.0","id":12,"method":"tools/list","params":[1]}\n', -32602, 12));
test('tools/call of an unknown tool or without a name: -32602', async () => {
  await expectError('{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"nope"}}\n', -32602, 13);
  await expectError('{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{}}\n', -32602, 14);
});
test('logging/setLevel: a bad level is -32602, a good one is answered', async () => {
  await expectError('{"jsonrpc":"2.0","id":15,"method":"logging/setLevel","params":{"level":"loud"}}\n', -32602, 15);
  s.send('{"jsonrpc":"2.0","id":16,"method":"logging/setLevel","params":{"level":"error"}}\n');
  eq((await s.msg()).result, {}, 'setLevel');
});
test('unknown notifications and cancellations of unknown ids get no answer', async () => {
  s.send('{"jsonrpc":"2.0","method":"notifications/whatever","params":{}}\n');
  s.send('{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"never"}}\n');
  s.send('{"jsonrpc":"2.0","method":"notifications/cancelled"}\n');
  s.send('{"jsonrpc":"2.0","id":99,"result":{}}\n');  // a response: this server sends no requests
  await stillServes();
});
test('blank lines are skipped', async () => {
  s.send('\n   \n\r\n');
  await stillServes();
});
test('a line over 16 MiB: -32600, and the rest of the stream is served', async () => {
  const big = '{"jsonrpc":"2.0","id":1,"method":"ping","pad":"' + 'x'.repeat(17 * 1024 * 1024) + '"}\n';
  s.send(big + JSON.stringify({ jsonrpc: '2.0', id: 'after', method: 'ping' }) + '\n');
  const m = await s.msg(20000);
  eq(m.error.code, -32600, 'too long');
  assert(/16 MiB/.test(m.error.message), 'says why');
  eq((await s.msg()).id, 'after', 'the next line is answered');
}, 30000);
test('a flood of 3000 requests in one write is answered in full', async () => {
  let text = '';
  for (let i = 0; i < 3000; i++) {
    text += i % 3 === 0
      ? JSON.stringify({ jsonrpc: '2.0', id: i, method: 'tools/call', params: { name: 'run_lua', arguments: { code: `return ${i}` } } }) + '\n'
      : JSON.stringify({ jsonrpc: '2.0', id: i, method: 'ping' }) + '\n';
  }
  s.send(text);
  const ids = new Set();
  for (let i = 0; i < 3000; i++) {
    const m = await s.msg(20000);
    if (i % 3 === 0 && m.result && m.result.structuredContent) eq(m.result.structuredContent.result, m.id, 'result');
    ids.add(m.id);
  }
  eq(ids.size, 3000, 'every request answered once');
  await stillServes();
}, 60000);
test('cancelling a running script: no answer for it, the server goes on', async () => {
  s.send(JSON.stringify({ jsonrpc: '2.0', id: 'long', method: 'tools/call', params: { name: 'run_lua', arguments: { code: 'while true do end' } } }) + '\n');
  await sleep(100);
  s.send('{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"long","reason":"test"}}\n');
  await stillServes();
  await sleep(200);
  eq(s.pending(), 0, 'no response for the cancelled request');
});
// --- a script that never stops answering: ping, tools/list, other sessions, cancellation ---
const call = (id, code, extra = {}) => JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call',
  params: { name: 'run_lua', arguments: { code, ...extra } } }) + '\n';
// 20 s of CPU: the tests end (and stop it) long before it could finish
const busy20s = 'local t = os.clock() while os.clock() - t < 20 do end';
test('a script stuck in a CPU loop: ping, tools/list and another session are answered before it', async () => {
  const t = server(['--workers', '2']);
  t.send(call('stuck', `${busy20s} return "stuck done"`, { session: 'A' }));
  await sleep(200);  // the script is in its loop
  t.send(JSON.stringify({ jsonrpc: '2.0', id: 'p', method: 'ping' }) + '\n');
  t.send(JSON.stringify({ jsonrpc: '2.0', id: 'l', method: 'tools/list' }) + '\n');
  t.send(call('other', 'return "other done"', { session: 'B' }));
  t.send(call('nosession', 'return 7'));
  const order = [];
  for (let i = 0; i < 4; i++) order.push((await t.msg(10000)).id);
  eq(order.slice(0, 2), ['p', 'l'], 'the protocol is answered first, in order');
  eq(order.slice(2).sort(), ['nosession', 'other'], 'then the other calls, while the script still runs');
  eq(t.pending(), 0, 'no answer for the stuck script yet');
  eq(await t.close(), 0, 'exit status (the stuck script is stopped)');
}, 20000);
test('one worker: ping and a call in another session are still answered before a stuck script', async () => {
  const t = server(['--workers', '1']);
  t.send(call('stuck', `${busy20s} return "stuck done"`, { session: 'A' }));
  await sleep(200);
  t.send(JSON.stringify({ jsonrpc: '2.0', id: 'p', method: 'ping' }) + '\n');
  t.send(call('other', 'return "other done"', { session: 'B' }));
  const order = [];
  for (let i = 0; i < 2; i++) order.push((await t.msg(10000)).id);
  eq(order, ['p', 'other'], 'the order of the answers');
  eq(t.pending(), 0, 'no answer for the stuck script yet');
  eq(await t.close(), 0, 'exit status (the stuck script is stopped)');
}, 20000);
test('--workers takes 1 to 64', async () => {
  for (const n of ['0', '65', 'x', '-1']) {
    const p = spawn(tidepool, ['mcp', '--workers', n], { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d) => { err += d; });
    eq(await new Promise((r) => p.on('exit', r)), 2, `--workers ${n}: usage error`);
    assert(err.includes(`tidepool: --workers: bad count '${n}' (1 to 64)`), err);
  }
});
test('cancelling a script stuck in a CPU loop stops it: its session is free again before the loop could end', async () => {
  const t = server(['--workers', '2']);
  // 20 s of CPU: far longer than the polling below can take
  t.send(call('stuck', 'local t = os.clock() while os.clock() - t < 20 do end tools.kv.set{key = "after", value = true}', { session: 'A' }));
  await sleep(200);
  t.send('{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"stuck"}}\n');
  // the session is busy until its worker has stopped the run; poll it (each try is refused at once while busy)
  let env;
  for (let i = 0; i < 150; i++) {
    t.send(call(`try${i}`, 'return tools.kv.get{key = "after"}.found', { session: 'A' }));
    const m = await t.msg(10000);
    eq(m.id, `try${i}`, 'no answer for the cancelled request');
    env = m.result.structuredContent;
    if (env.ok || env.error.code !== 'session.busy') break;
    await sleep(20);
  }
  eq(env.ok, true, `the session runs again: ${JSON.stringify(env)}`);
  eq(env.result, false, 'the cancelled script never reached its side effect');
  eq(await t.close(), 0, 'exit status');
}, 20000);
test('--tool-calls 3: a script making 4 calls ends with limit.tool_calls; a bad value is a usage error', async () => {
  const t = server(['--tool-calls', '3']);
  t.send(call('four', 'for i = 1, 4 do tools.test.echo{i = i} end return true'));
  const env = (await t.msg()).result.structuredContent;
  eq(env.ok, false, 'ok');
  eq(env.error.code, 'limit.tool_calls', 'code');
  eq(env.error.message, 'the script made more than its limit of 3 tool calls', 'message');
  t.send(call('three', 'for i = 1, 3 do tools.test.echo{i = i} end return true'));
  eq((await t.msg()).result.structuredContent.ok, true, 'three calls are fine');
  eq(await t.close(), 0, 'exit status');
  const p = spawn(tidepool, ['mcp', '--tool-calls', '4294967296'], { stdio: ['pipe', 'ignore', 'pipe'] });
  let err = '';
  p.stderr.on('data', (d) => { err += d; });
  eq(await new Promise((r) => p.on('exit', r)), 2, 'usage error');
  eq(err, "tidepool: --tool-calls: bad count '4294967296' (too large: at most 4294967295)\nTry 'tidepool --help'.\n", 'message');
});
test('kv is one store for the whole server: two sessions on different workers see the same keys', async () => {
  const t = server(['--workers', '2']);
  // A is made first and goes to one worker; B, made while A exists, to the other
  t.send(call('a', 'tools.kv.set{key = "shared", value = {n = 42}} return true', { session: 'A' }));
  eq((await t.msg()).result.structuredContent.ok, true, 'set');
  t.send(call('b', 'return tools.kv.get{key = "shared"}', { session: 'B' }));
  eq((await t.msg()).result.structuredContent.result, { found: true, value: { n: 42 } }, 'read by B');
  t.send(call('c', 'tools.kv.delete{key = "shared"} return tools.kv.list{}.keys', { session: 'B' }));
  eq((await t.msg()).result.structuredContent.result, [], 'deleted by B');
  t.send(call('d', 'return tools.kv.get{key = "shared"}.found', { session: 'A' }));
  eq((await t.msg()).result.structuredContent.result, false, 'gone for A');
  eq(await t.close(), 0, 'exit status');
});

// --- session ids ---
async function sessionRefused(sid, message) {
  s.send(call('sid', 'return 1', { session: sid }));
  const m = await s.msg();
  eq(m.id, 'sid', 'id');
  eq(m.result.isError, true, 'isError');
  eq(m.result.structuredContent.error, { code: 'tool.invalid_input', message }, `session ${JSON.stringify(sid).slice(0, 40)}`);
}
test('a session id with NUL or a control character is refused: tool.invalid_input', async () => {
  await sessionRefused('a\u0000b', 'arguments.session holds a control character (byte 0x00 at offset 1); a session id may not contain NUL or control characters: use letters, digits and punctuation');
  await sessionRefused('main\n', 'arguments.session holds a control character (byte 0x0a at offset 4); a session id may not contain NUL or control characters: use letters, digits and punctuation');
  await sessionRefused('\u007f', 'arguments.session holds a control character (byte 0x7f at offset 0); a session id may not contain NUL or control characters: use letters, digits and punctuation');
  await stillServes();
});
test('a session id over 128 bytes is refused; 128 bytes are accepted', async () => {
  await sessionRefused('x'.repeat(129), 'arguments.session is 129 bytes long; a session id has at most 128 bytes: use a short name such as "main"');
  await sessionRefused('é'.repeat(65), 'arguments.session is 130 bytes long; a session id has at most 128 bytes: use a short name such as "main"');
  await sessionRefused('', 'arguments.session must not be empty: pass a name such as "main", or leave it out');
  await sessionRefused(7, 'arguments.session must be a string (1 to 128 bytes), or left out');
  s.send(call('ok128', 'return 1', { session: 'x'.repeat(128) }));
  const m = await s.msg();
  eq(m.result.structuredContent.session, { id: 'x'.repeat(128), state: 'new' }, '128 bytes');
});
test('session ids are matched byte for byte (case, composed and decomposed accents)', async () => {
  s.send(call('s1', 'x = "set" return x', { session: 'caf\u00e9' }));
  eq((await s.msg()).result.structuredContent.session.state, 'new', 'first');
  for (const other of ['cafe\u0301', 'CAF\u00c9', 'caf\u00e9 ']) {
    s.send(call('s2', 'return x', { session: other }));
    const env = (await s.msg()).result.structuredContent;
    eq([env.session.state, env.result], ['new', null], `${JSON.stringify(other)} is another session`);
  }
  s.send(call('s3', 'return x', { session: 'caf\u00e9' }));
  const env = (await s.msg()).result.structuredContent;
  eq([env.session.state, env.result], ['continued', 'set'], 'the same bytes: the same session');
});
test('an id over 1 KiB is refused (-32600): it would be echoed into every response', async () => {
  const m = await expectError(JSON.stringify({ jsonrpc: '2.0', id: 'i'.repeat(2000), method: 'ping' }) + '\n', -32600);
  eq(m.error.message, 'Invalid Request: the id is 2000 bytes long; an id may have at most 1022', 'message');
});

// --- responses over 10 MiB ---
test('an oversized result is cut: ok, the calls record and a note stay, the line is under 10 MiB', async () => {
  const t = server(['--max-result', '0', '--memory', '512M', '--timeout', '30s']);
  t.send(call('big', 'tools.test.echo{n = 1} tools.test.echo{n = 2} return string.rep("ab\\"", 4000000)'));
  const line = await t.line(30000);
  assert(line.length < 10 * 1024 * 1024, `line of ${line.length} bytes`);
  const env = JSON.parse(line).result.structuredContent;
  eq(env.ok, true, 'ok');
  eq(env.calls, { 'test.echo': 2 }, 'calls');
  eq(env.truncated.result_bytes, 16000002, 'the result\'s size');
  assert(/truncated by tidepool/.test(env.result), 'a marker');
  eq(await t.close(), 0, 'exit status');
}, 40000);
test('an oversized failure is cut: the error, the calls record and a note stay', async () => {
  const t = server(['--max-output', '0', '--memory', '512M', '--timeout', '30s']);
  t.send(call('bigerr', 'tools.test.echo{n = 1} local l = string.rep("\\"", 100000) ' +
    'for i = 1, 150 do print(l) end error("boom")'));
  const line = await t.line(30000);
  assert(line.length < 10 * 1024 * 1024, `line of ${line.length} bytes`);
  const r = JSON.parse(line).result;
  eq(r.isError, true, 'isError');
  const env = r.structuredContent;
  eq([env.ok, env.error.code], [false, 'runtime'], 'the error');
  assert(/boom/.test(env.error.message), env.error.message);
  eq(env.calls, { 'test.echo': 1 }, 'calls');
  assert(env.truncated.logs_dropped > 0, 'says logs were dropped');
  eq(await t.close(), 0, 'exit status');
}, 40000);

test('--max-result defaults to 80K (about 25,000 tokens, Claude Code\'s limit): a larger result is limit.result with a hint to return less', async () => {
  const t = server();
  t.send(call('r1', 'return string.rep("y", 81920 - 2)'));
  const ok = (await t.msg()).result.structuredContent;
  eq([ok.ok, ok.result.length], [true, 81918], '80 KiB of JSON is within the limit');
  t.send(call('r2', 'return string.rep("y", 81920 - 1)'));
  const m = (await t.msg()).result;
  eq(m.isError, true, 'isError');
  eq(m.structuredContent.error.code, 'limit.result', 'code');
  eq(m.structuredContent.error.message, 'the script\'s return value is larger than its result limit of 80 KiB of JSON (at $)', 'message');
  eq(m.structuredContent.error.hint, 'Return less: a summary, the first items, or only the fields that are needed.', 'hint');
  eq(await t.close(), 0, 'exit status');
});
test('--audit FILE: one JSON line per run with time, session, tool, the full calls record and stats', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-audit-'));
  const file = path.join(dir, 'audit.jsonl');
  try {
    const t = server(['--audit', file]);
    t.send(call('a1', 'tools.test.echo{n = 1} pcall(tools.test.echo, 5) return 1', { session: 'S' }));
    const r = (await t.msg()).result;
    eq(r.structuredContent.calls, { 'test.echo': 2 }, 'the model sees counts');
    t.send(call('a2', 'error("x")'));
    eq((await t.msg()).result.isError, true, 'second run fails');
    eq(await t.close(), 0, 'exit status');
    const all = fs.readFileSync(file, 'utf8').split('\n');
    eq(all[all.length - 1], '', 'ends with a newline');
    // the engines' call journal (lines with "ev", spec/mcp/wire.mjs) shares the file
    const journal = all.slice(0, -1).filter((l) => JSON.parse(l).ev !== undefined);
    eq(journal.map((l) => JSON.parse(l).ev).filter((e) => e === 'run').length, 2, 'the journal ends both runs');
    const lines = all.filter((l) => l === '' || JSON.parse(l).ev === undefined);
    eq(lines.length, 3, 'two lines and the final newline');
    const a = JSON.parse(lines[0]), b = JSON.parse(lines[1]);
    assert(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(a.time), a.time);
    eq([a.session, a.tool, a.ok, a.error], ['S', 'run_lua', true, undefined], 'first run');
    eq(a.calls.map((c) => [c.tool, c.ok, c.error, c.line]),
      [['test.echo', true, undefined, 1], ['test.echo', false, 'tool.invalid_input', 1]], 'calls');
    eq(typeof a.stats.wall_ms, 'number', 'stats');
    eq([b.session, b.tool, b.ok, b.error, b.calls], [null, 'run_lua', false, 'runtime', []], 'second run');
    const p = spawn(tidepool, ['mcp', '--audit', path.join(dir, 'no', 'such', 'file')], { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d) => { err += d; });
    eq(await new Promise((res) => p.on('exit', res)), 2, 'an unwritable audit file: a usage error');
    assert(/--audit: cannot open .*no\/such\/file: No such file or directory/.test(err), err);
  } finally { fs.rmSync(dir, { recursive: true, force: true }); }
});

test('--audit FILE with a policy: one line per decision (rule, effect, clause, a hash of the arguments, never their values)', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-audit-pol-'));
  const file = path.join(dir, 'audit.jsonl'), config = path.join(dir, 'config.json');
  fs.writeFileSync(config, JSON.stringify({ policy: { rules: [
    { tools: 'test.echo', effect: 'allow', where: 'n <= 10', reason: 'small numbers only' }] } }));
  try {
    const t = server(['--audit', file, '--config', config]);
    t.send(call('p1', 'tools.test.echo{n = 1} local ok, e = pcall(tools.test.echo, {n = 4242}) '
      + 'local ok2, e2 = pcall(tools.test.sleep, {ms = 1}) return {e.code, e2.code}', { session: 'S' }));
    const r = (await t.msg()).result;
    eq(r.structuredContent.result, ['tool.denied', 'tool.denied'], 'the second and third calls are denied');
    eq(await t.close(), 0, 'exit status');
    const text = fs.readFileSync(file, 'utf8');
    const lines = text.trim().split('\n').map((l) => JSON.parse(l)).filter((l) => l.ev === undefined);
    assert(!text.split('\n').filter((l) => l.includes('"ev":')).some((l) => l.includes('4242')),
      'no argument value in the journal\'s lines');
    assert(!lines.slice(0, 3).some((l) => JSON.stringify(l).includes('4242')),
      'no argument value in the decision lines');
    eq(lines.length, 4, 'three decisions and the run');
    const d = lines.slice(0, 3).map((l) => [l.event, l.session, l.worker, l.run, l.seq, l.tool,
      l.principal, l.rule, l.effect, l.clause]);
    eq(d, [
      ['decision', 'S', 0, 1, 1, 'test.echo', '', 0, 'allow', 'n <= 10'],
      ['decision', 'S', 0, 1, 2, 'test.echo', '', 0, 'deny', 'n <= 10'],
      ['decision', 'S', 0, 1, 3, 'test.sleep', '', null, 'deny', ''],
    ], 'decisions');
    // {"n":1} in the engine's JSON form
    eq(lines[0].args_sha256, '2bfd14f43d17fc7cea24e0917a8879b4b2f880b8baeec1b9d90fbaad655e71bd',
      'the SHA-256 of {"n":1}');
    assert(/^[0-9a-f]{64}$/.test(lines[1].args_sha256) && lines[1].args_sha256 !== lines[0].args_sha256,
      'another hash for other arguments');
    eq([lines[3].tool, lines[3].ok], ['run_lua', true], 'the run line follows its decisions');
  } finally { fs.rmSync(dir, { recursive: true, force: true }); }
});

test('--describe: run_lua\'s description fits in 2,048 characters (auto: full when it fits, else one line a tool), in full with --describe full; a recursive schema is named', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-desc-'));
  try {
    const write = (n) => {
      for (const f of fs.readdirSync(dir)) fs.rmSync(path.join(dir, f));
      for (let k = 0; k < n; k++)
        fs.writeFileSync(path.join(dir, `t${k}.lua`), `return { name = "d.t${k}", description = "Tool ${k}.", ` +
          'input = {type = "object", required = {"path"}, properties = {path = {type = "string", ' +
          'description = "Where."}, n = {type = "integer", minimum = 1}, tree = {["$ref"] = "#/$defs/node"}}, ' +
          '["$defs"] = {node = {type = "object", properties = {name = {type = "string"}, ' +
          'children = {type = "array", items = {["$ref"] = "#/$defs/node"}}}}}}, handler = function() return {} end }\n');
    };
    const describe = async (args) => {
      const t = server(['--tools', dir, '--no-builtin-tools', ...args]);
      t.send('{"jsonrpc":"2.0","id":"l","method":"tools/list"}\n');
      const m = JSON.parse(await t.line(20000));
      eq(await t.close(), 0, 'exit status');
      return m.result.tools.find((x) => x.name === 'run_lua').description;
    };
    write(3);
    const few = await describe([]);
    assert(few.includes('\nd.t0{ -- Tool 0.\n path: string -- Where.\n n?: integer >=1\n tree?: node\n}\n' +
      'node = {children?: node[], name?: string}\n'), few);
    assert(few.length <= 2048, `${few.length} characters`);
    eq(await describe(['--describe', 'full']), few, 'auto is the full text when it fits');
    assert(few.includes('tools.describe(name)') && few.includes('tools.search(words)'), few);
    write(30);
    const auto = await describe([]);
    assert(auto.includes('\nd.t0{path, ...}\n'), auto);
    assert(!auto.includes('Where.'), 'no field descriptions in compact mode');
    assert(auto.length <= 2048, `${auto.length} characters`);
    assert(auto.startsWith('Write one Lua 5.4 script'), 'the checklist comes first');
    const full = await describe(['--describe', 'full']);
    assert(full.length > 2048 && full.includes('Where.') && full.includes('d.t29{'), full);
    eq(await describe(['--describe', 'compact']), auto, 'compact: one line a tool, as auto here');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}, 60000);
test('--expose-tools: names match ^[a-zA-Z0-9_-]{1,64}$, collisions get a suffix and are logged, calls reach the real tool', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-names-'));
  try {
    const tool = (name, extra = '') => `{ name = "${name}", description = "${name}.", ` +
      `handler = function(a) return { tool = "${name}", got = a } end${extra} }`;
    fs.writeFileSync(path.join(dir, 'n.lua'), `return { ${tool('x.get')}, ${tool('x_get')}, ` +
      `${tool('run_lua')}, ${tool('a.' + 'b'.repeat(70))}, ` +
      `${tool('o.obj', ', output = { type = "object", properties = { tool = { type = "string" } } }')}, ` +
      `${tool('o.arr', ', output = { type = "array" }')} }\n`);
    const t = server(['--tools', dir, '--no-builtin-tools', '--expose-tools']);
    t.send('{"jsonrpc":"2.0","id":"l","method":"tools/list"}\n');
    const tools = (await t.msg(20000)).result.tools;
    eq(tools.map((x) => [x.name, x.title]), [
      ['run_lua', 'Run a Lua script'],
      ['a_' + 'b'.repeat(62), 'a.' + 'b'.repeat(70)],
      ['o_arr', 'o.arr'], ['o_obj', 'o.obj'], ['run_lua_2', 'run_lua'],
      ['test_echo', 'test.echo'], ['test_sleep', 'test.sleep'],
      ['x_get', 'x.get'], ['x_get_2', 'x_get']], 'names and titles');
    for (const x of tools) assert(/^[a-zA-Z0-9_-]{1,64}$/.test(x.name), x.name);
    eq(tools.find((x) => x.name === 'o_obj').outputSchema,
      { properties: { tool: { type: 'string' } }, type: 'object' }, 'an object output schema is published');
    eq(tools.find((x) => x.name === 'o_arr').outputSchema, undefined, 'a non-object one is not');
    const callTool = async (name, args) => {
      t.send(JSON.stringify({ jsonrpc: '2.0', id: name, method: 'tools/call', params: { name, arguments: args } }) + '\n');
      return (await t.msg()).result;
    };
    eq((await callTool('x_get_2', { n: 1 })).structuredContent, { got: { n: 1 }, tool: 'x_get' }, 'x_get_2 is x_get');
    eq((await callTool('x_get', {})).structuredContent, { got: {}, tool: 'x.get' }, 'x_get is x.get');
    eq((await callTool('run_lua_2', {})).structuredContent, { got: {}, tool: 'run_lua' }, 'the plugin run_lua');
    t.send(JSON.stringify({ jsonrpc: '2.0', id: 'u', method: 'tools/call', params: { name: 'x.get', arguments: {} } }) + '\n');
    eq((await t.msg()).error.code, -32602, 'the dotted name is not a tool of the MCP list');
    eq(await t.close(), 0, 'exit status');
    assert(t.stderr().includes('--expose-tools: tool x_get is listed as x_get_2: x_get was taken'), t.stderr());
    assert(t.stderr().includes('--expose-tools: tool run_lua is listed as run_lua_2: run_lua was taken'), t.stderr());
  } finally { fs.rmSync(dir, { recursive: true, force: true }); }
}, 30000);
test('--expose-tools: a failed call shows the tool\'s name and arguments, not the Lua that ran it', async () => {
  const t = server(['--expose-tools']);
  t.send(JSON.stringify({ jsonrpc: '2.0', id: 'k', method: 'tools/call', params: { name: 'kv_get', arguments: { nokey: 1 } } }) + '\n');
  const r = (await t.msg()).result;
  eq(r.isError, true, 'isError');
  eq(r.structuredContent, undefined, 'no structuredContent: it would not match kv_get\'s outputSchema');
  eq(JSON.parse(r.content[0].text), { arguments: { nokey: 1 }, error: { code: 'tool.invalid_input',
    hint: 'Fix the arguments: the message gives the JSON path of the wrong value and what was expected; the tool\'s inputSchema (tools/list) shows what it takes.',
    message: 'kv_get: invalid arguments: $: missing required property "key"; $.nokey: unexpected property "nokey" (allowed: "key")' },
  ok: false, tool: 'kv_get' }, 'the failure, in the text block');
  assert(!r.content[0].text.includes('json.decode'), 'no generated Lua');
  eq(r._meta['tidepool/calls'].map((c) => [c.tool, c.error]), [['kv.get', 'tool.invalid_input']], '_meta');
  eq(await t.close(), 0, 'exit status');
});
test('every refused plugin is a warning the client gets (notifications/message), sent after initialize', async () => {
  const t = server(['--tools', 'spec/fixtures/plugins/broken', '--no-builtin-tools']);
  t.send(JSON.stringify({ jsonrpc: '2.0', id: 'i', method: 'initialize', params: {
    protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }) + '\n');
  eq((await t.msg(20000)).id, 'i', 'the initialize response first');
  const warnings = [];
  for (let k = 0; k < 9; k++) warnings.push((await t.msg()).params);
  eq(warnings.map((w) => [w.level, w.logger]), Array(9).fill(['warning', 'tidepool']), 'levels');
  eq(warnings.map((w) => w.data.replace(/:\d+: .*/s, '')), ['b_syntax', 'c_runtime', 'd_schema',
    'e_nohandler', 'f_duplicate', 'g_badname', 'h_unknown_field', 'i_nothing', 'j_errorobj'].map((f) =>
    `tools from spec/fixtures/plugins/broken: refused: spec/fixtures/plugins/broken/${f}.lua`), 'one per refused file');
  eq(warnings[4].data, 'tools from spec/fixtures/plugins/broken: refused: spec/fixtures/plugins/broken/' +
    'f_duplicate.lua:3: tool ok.one is defined already (at spec/fixtures/plugins/broken/a_good.lua:2)', 'a whole one');
  t.send('{"jsonrpc":"2.0","id":"p","method":"ping"}\n');
  eq(await t.msg(), { id: 'p', jsonrpc: '2.0', result: {} }, 'nothing more before the ping');
  eq(await t.close(), 0, 'exit status');
}, 30000);
test('a tools/list over 10 MiB (huge exposed descriptions): -32603 with the id, not an oversized line', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-bigtools-'));
  try {
    for (let k = 0; k < 12; k++)
      fs.writeFileSync(path.join(dir, `t${k}.lua`), `return { name = "big.t${k}", ` +
        'description = string.rep("d", 1000000), handler = function() return {} end }\n');
    const t = server(['--tools', dir, '--expose-tools']);
    t.send('{"jsonrpc":"2.0","id":"list","method":"tools/list"}\n');
    const line = await t.line(20000);
    assert(line.length < 10 * 1024 * 1024, `line of ${line.length} bytes`);
    const m = JSON.parse(line);
    eq([m.id, m.error.code], ['list', -32603], 'the error');
    assert(/^the response would be \d+ bytes, over the 10 MiB a message may have$/.test(m.error.message), m.error.message);
    eq(await t.close(), 0, 'exit status');
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}, 30000);
test('standard output carries only JSON-RPC messages, even when scripts print', async () => {
  s.send(JSON.stringify({ jsonrpc: '2.0', id: 'p', method: 'tools/call', params: { name: 'run_lua', arguments: { code: 'print("to logs") return 1' } } }) + '\n');
  eq((await s.msg()).id, 'p', 'answered');
  for (const l of s.raw().split('\n').filter(Boolean)) {
    const m = JSON.parse(l);
    assert((Array.isArray(m) ? m : [m]).every((x) => x.jsonrpc === '2.0'), `a JSON-RPC line: ${l.slice(0, 80)}`);
  }
});
test('the server exits 0 when standard input closes, after answering the script still running', async () => {
  s.send(JSON.stringify({ jsonrpc: '2.0', id: 'x', method: 'tools/call', params: { name: 'run_lua', arguments: { code: 'tools.test.sleep{ms = 300} return "done"' } } }) + '\n');
  await sleep(100);
  eq(await s.close(), 0, 'exit status');
  const m = await s.msg();
  eq([m.id, m.result.structuredContent.result], ['x', 'done'], 'answered (spec/mcp/eof.mjs)');
});
test('standard input may be a file: requests are read, then the server exits 0', async () => {
  const f = path.join(os.tmpdir(), `tp-mcp-${process.pid}.jsonl`);
  fs.writeFileSync(f, '{"jsonrpc":"2.0","id":1,"method":"ping"}\nnot json\n{"jsonrpc":"2.0","id":2,"method":"tools/list"}');
  try {
    const fd = fs.openSync(f, 'r');
    const p = spawn(tidepool, ['mcp'], { stdio: [fd, 'pipe', 'ignore'] });
    fs.closeSync(fd);
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    const code = await new Promise((r) => p.on('exit', r));
    eq(code, 0, 'exit status');
    const lines = out.trim().split('\n').map((l) => JSON.parse(l));
    eq(lines.map((m) => m.id), [1, null, 2], 'answers in order');
    eq(lines[1].error.code, -32700, 'parse error');
  } finally {
    fs.rmSync(f, { force: true });
  }
});

await run();
