// Caller tools over MCP (docs/caller-tools.md; engine/front/mcp.c): tools a run_lua call
// declares in _meta["tidepool/callerTools"], answered by the client. Live: the server sends
// the client a tidepool/callTool request on the same connection (stdio here in raw JSON
// lines; HTTP on the request's SSE stream, through the official SDK client's request
// handlers), and the answer resumes the run. Paused: the run returns status "paused" with
// the pending calls, and resume_run's results resume it, bound to run, id and arguments.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { z } from 'zod';
import { test, run, assert, eq, sleep, tidepool, mcpServer, root } from './harness.mjs';

const WEATHER = {
  name: 'weather', description: 'Current weather for a city.',
  inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  outputSchema: { type: 'object', properties: { temp_c: { type: 'number' } }, required: ['temp_c'] },
};
const SLOW = { name: 'slow', timeoutMs: 600 };
const meta = (tools, extra = {}) => ({ _meta: { 'tidepool/callerTools': { version: 1, tools, ...extra } } });

// A stdio server with a reader that sorts its messages: responses by id, requests and
// notifications in order of arrival.
function server({ callers = true, args = [] } = {}) {
  const s = mcpServer(['mcp', '--no-builtin-tools', '--workers', '1', ...args]);
  s.callRequest = (ms) => s.other((m) => m.method === 'tidepool/callTool', ms);
  s.answer = (req, body) => s.send({ jsonrpc: '2.0', id: req.id, ...body });
  s.runLua = (code, extra = {}) => s.start('tools/call', { name: 'run_lua', arguments: { code }, ...extra });
  s.ready = s.initialize({ name: 'caller-spec',
    capabilities: callers ? { experimental: { 'tidepool/callerTools': { version: 1 } } } : {} });
  return s;
}

const view = (m) => {
  assert(m.result, `a result: ${JSON.stringify(m)}`);
  eq(m.result.content[0].text, JSON.stringify(m.result.structuredContent), 'text block = structuredContent');
  return m.result.structuredContent;
};

let s;
test('the capability is answered to a client that declared it, to no other', async () => {
  s = server();
  const init = await s.ready;
  eq(init.result.capabilities.experimental, { 'tidepool/callerTools': { modes: ['live', 'paused'], version: 1, versions: [1] } },
    'the server\'s caller-tools capability');
  const plain = server({ callers: false });
  const i2 = await plain.ready;
  eq(i2.result.capabilities, { logging: {}, tools: { listChanged: true } }, 'an ordinary client sees nothing of it');
  await plain.close();
});

test('live over stdio: the call comes as tidepool/callTool and the answer resumes the run', async () => {
  const id = s.runLua('local w = tools.weather{city = "Paris"} return w.temp_c + 1', meta([WEATHER]));
  const req = await s.callRequest();
  eq(Object.keys(req.params).sort(), ['args', 'id', 'request', 'run', 'tool'], 'the params');
  eq([req.params.request, req.params.id, req.params.tool, req.params.args], [id, 1, 'weather', { city: 'Paris' }], 'the call');
  assert(/^0-[0-9a-f]{32}$/.test(req.params.run), `run id ${req.params.run}`);
  assert(req.id.startsWith('tidepool-call-'), `request id ${req.id}`);
  s.answer(req, { result: { result: { temp_c: 20.5 } } });
  const v = view(await s.response(id));
  eq([v.ok, v.result, v.calls], [true, 21.5, { weather: 1 }], 'the run\'s result');
});

test('live: parallel() calls come out together and may be answered in any order', async () => {
  const id = s.runLua(`local a, b = parallel(function() return tools.weather{city = "A"} end,
    function() return tools.weather{city = "B"} end) return {a.temp_c, b.temp_c}`, meta([WEATHER]));
  const r1 = await s.callRequest(), r2 = await s.callRequest();
  eq([r1.params.args.city, r2.params.args.city], ['A', 'B'], 'both calls before any answer');
  s.answer(r2, { result: { result: { temp_c: 2 } } });
  s.answer(r1, { result: { result: { temp_c: 1 } } });
  eq(view(await s.response(id)).result, [1, 2], 'each answer to its call');
});

test('live: an error answer reaches the script with its code; a JSON-RPC error is tool.failed', async () => {
  const id = s.runLua(`local ok1, e1 = pcall(tools.weather, {city = "X"})
    local ok2, e2 = pcall(tools.weather, {city = "Y"})
    local ok3, e3 = pcall(tools.weather, {city = "Z"})
    return {e1.code, e1.message, e2.code, e2.message, e3.code}`, meta([WEATHER]));
  s.answer(await s.callRequest(), { result: { error: { message: 'the user said no', code: 'tool.denied' } } });
  s.answer(await s.callRequest(), { error: { code: -32000, message: 'handler crashed' } });
  s.answer(await s.callRequest(), { result: { result: { temp_c: 'warm' } } });
  eq(view(await s.response(id)).result, ['tool.denied', 'tools.weather was denied: the user said no',
    'tool.failed', 'tools.weather failed: handler crashed', 'tool.invalid_output'], 'the errors the script saw');
});

test('live: arguments are checked before the client sees them', async () => {
  const id = s.runLua('local ok, e = pcall(tools.weather, {town = "x"}) return e.code', meta([WEATHER]));
  eq(view(await s.response(id)).result, 'tool.invalid_input', 'refused before the client');
  await sleep(100);
  assert(!s.has((m) => m.method === 'tidepool/callTool'), 'no request went out');
});

test('live: a call not answered in its timeout fails with tool.timeout and is withdrawn', async () => {
  const id = s.runLua('local ok, e = pcall(tools.slow, {}) return e.code', meta([SLOW]));
  const req = await s.callRequest();
  const c = await s.other((m) => m.method === 'notifications/cancelled', 5000);
  eq(c.params.requestId, req.id, 'the cancelled request');
  eq(view(await s.response(id)).result, 'tool.timeout', 'the script saw the timeout');
  s.answer(req, { result: { result: {} } });  // late: ignored
});

test('live: cancelling the run withdraws the calls in flight', async () => {
  const id = s.runLua('return tools.weather{city = "Paris"}', meta([WEATHER]));
  const req = await s.callRequest();
  s.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id, reason: 'stop' } });
  const c = await s.other((m) => m.method === 'notifications/cancelled', 5000);
  eq(c.params.requestId, req.id, 'the call withdrawn');
});

test('paused: the run returns its pending calls; resume_run\'s results resume it', async () => {
  const id = s.runLua(`local a, b = parallel(function() return tools.weather{city = "A"} end,
    function() return tools.weather{city = "B"} end) return a.temp_c * b.temp_c`, meta([WEATHER], { mode: 'paused' }));
  const v = view(await s.response(id));
  eq([v.ok, v.status], [false, 'paused'], 'paused');
  eq(v.pending.map((p) => [p.kind, p.id, p.tool, p.args]), [['call', 1, 'weather', { city: 'A' }],
    ['call', 2, 'weather', { city: 'B' }]], 'both calls pending together');
  assert(v.pending.every((p) => /^[0-9a-f]{64}$/.test(p.binding)), 'bindings');
  assert(v.message.startsWith('The run is paused: it waits on the caller tools'), v.message);
  const bad = view(await s.request('tools/call', { name: 'resume_run', arguments: { run: v.run,
    results: [{ id: 1, binding: v.pending[1].binding, result: { temp_c: 6 } }] } }));
  eq(bad.error.code, 'caller.binding', 'a binding of another call');
  const unknown = view(await s.request('tools/call', { name: 'resume_run', arguments: { run: v.run,
    results: [{ id: 9, binding: v.pending[0].binding, result: { temp_c: 6 } }] } }));
  eq(unknown.error.code, 'caller.not_pending', 'an id the run does not wait on');
  const half = view(await s.request('tools/call', { name: 'resume_run', arguments: { run: v.run,
    results: [{ id: 1, binding: v.pending[0].binding, result: { temp_c: 6 } }] } }));
  eq([half.status, half.pending.map((p) => p.id)], ['paused', [2]], 'paused again on what is left');
  const done = view(await s.request('tools/call', { name: 'resume_run', arguments: { run: v.run,
    results: [{ id: 2, binding: v.pending[1].binding, result: { temp_c: 7 } }] } }));
  eq([done.ok, done.result], [true, 42], 'the run finished');
});

test('paused: an error result, and a run that is not paused', async () => {
  const id = s.runLua('local ok, e = pcall(tools.weather, {city = "A"}) return e.code',
    meta([WEATHER], { mode: 'paused' }));
  const v = view(await s.response(id));
  const done = view(await s.request('tools/call', { name: 'resume_run', arguments: { run: v.run,
    results: [{ id: 1, binding: v.pending[0].binding, error: { message: 'nope', code: 'tool.rate_limited' } }] } }));
  eq(done.result, 'tool.rate_limited', 'the caller\'s code');
  const again = view(await s.request('tools/call', { name: 'resume_run', arguments: { run: v.run,
    results: [{ id: 1, binding: v.pending[0].binding, result: 1 }] } }));
  eq(again.error.code, 'run.unknown', 'a finished run cannot be resumed');
});

test('a session keeps its declarations for its later runs', async () => {
  const id1 = s.runLua('return 1', { ...meta([WEATHER], { session: true }), arguments: { code: 'x = 5 return x', session: 'sess-a' } });
  eq(view(await s.response(id1)).result, 5, 'first run');
  const id2 = s.start('tools/call', { name: 'run_lua', arguments: { code: 'return tools.weather{city = "P"}.temp_c + x', session: 'sess-a' } });
  s.answer(await s.callRequest(), { result: { result: { temp_c: 10 } } });
  eq(view(await s.response(id2)).result, 15, 'the session\'s tool, in a run that declared none');
  const id3 = s.runLua('local n = "weather" local ok, e = pcall(function() return tools[n]{city = "P"} end) return e.code');
  eq(view(await s.response(id3)).result, 'tool.unknown', 'no other run sees it');
});

test('a 2026-07-28 request: paused (no server requests in that era); live is refused', async () => {
  const M26 = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientCapabilities': {}, 'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' } };
  const ct = { version: 1, tools: [WEATHER] };
  const r = view(await s.request('tools/call', { _meta: { ...M26, 'tidepool/callerTools': ct }, name: 'run_lua',
    arguments: { code: 'return tools.weather{city = "Lima"}.temp_c' } }));
  eq([r.status, r.pending[0].kind, r.pending[0].args], ['paused', 'call', { city: 'Lima' }], 'paused in 2026-07-28');
  const done = await s.request('tools/call', { _meta: M26, name: 'resume_run', arguments: { run: r.run,
    results: [{ id: 1, binding: r.pending[0].binding, result: { temp_c: 19 } }] } });
  eq([done.result.resultType, done.result.structuredContent.result], ['complete', 19], 'resumed in 2026-07-28');
  const live = await s.request('tools/call', { _meta: { ...M26, 'tidepool/callerTools': { ...ct, mode: 'live' } },
    name: 'run_lua', arguments: { code: 'return 1' } });
  eq(live.error.code, -32602, 'live in 2026-07-28');
  assert(/a 2026-07-28 request has none/.test(live.error.message), live.error.message);
});

test('_meta["tidepool/limits"] lowers the limits of one run, never raises them', async () => {
  const lim = (l) => ({ _meta: { 'tidepool/limits': l } });
  const a = view(await s.response(s.runLua('while true do end', lim({ timeout: '300ms', cpu: 0.3 }))));
  eq(a.error.code, 'limit.time', 'a lower time limit');
  const bid = s.runLua('for i = 1, 3 do tools.weather{city = "x"} end',
    { _meta: { ...meta([WEATHER])._meta, 'tidepool/limits': { tool_calls: 2 } } });
  for (let i = 0; i < 2; i++) s.answer(await s.callRequest(), { result: { result: { temp_c: 1 } } });
  eq(view(await s.response(bid)).error.code, 'limit.tool_calls', 'caller tools count against a lower tool_calls');
  const up = await s.response(s.runLua('return 1', lim({ timeout: '60m' })));
  eq(up.error.code, -32602, 'a higher limit');
  assert(/timeout: 60m is above the server's 10s/.test(up.error.message), up.error.message);
  const bad = await s.response(s.runLua('return 1', lim({ speed: 3 })));
  assert(/unknown limit 'speed'/.test(bad.error.message), bad.error.message);
  const sess = await s.response(s.runLua('return 1', { ...lim({ memory: '8M' }), arguments: { code: 'return 1', session: 'x' } }));
  assert(/a run in a session has the session's limits/.test(sess.error.message), sess.error.message);
  const ok = view(await s.response(s.runLua('return 6 * 7', lim({ memory: '8M', instructions: 100000 }))));
  eq(ok.result, 42, 'a run within its lower limits');
});

test('bad declarations are refused with -32602 or a tool error naming the problem', async () => {
  const m = await s.response(s.runLua('return 1', { _meta: { 'tidepool/callerTools': { version: 2, tools: [] } } }));
  eq(m.error.code, -32602, 'a version the server does not know');
  assert(/version must be 1/.test(m.error.message), m.error.message);
  const m2 = await s.response(s.runLua('return 1', meta([{ name: 'bad-name' }])));
  const v2 = view(m2);
  eq(v2.error.code, 'tool.invalid_input', 'a bad name');
  assert(/bad name/.test(v2.error.message), v2.error.message);
  await s.close();
});

test('the policy holds a caller tool for approval before the client sees the call', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-caller-'));
  const cfg = path.join(tmp, 'policy.json');
  fs.writeFileSync(cfg, JSON.stringify({ policy: { default: 'allow', rules: [
    { tools: 'weather', effect: 'deny', where: 'city == "Moscow"', reason: 'not there' },
    { tools: 'weather', effect: 'ask', reason: 'weather costs money' }] } }));
  const a = server({ args: ['--config', cfg] });
  try {
    await a.ready;
    const id = a.runLua(`local ok, e = pcall(tools.weather, {city = "Moscow"})
      return {e.code, tools.weather{city = "Oslo"}.temp_c}`, meta([WEATHER]));
    const v = view(await a.response(id));
    eq([v.status, v.pending.length, v.pending[0].seq, v.pending[0].tool, v.pending[0].kind],
      ['paused', 1, 2, 'weather', undefined], 'held for a person: an approval, not yet a call');
    assert(!a.has((m) => m.method === 'tidepool/callTool'), 'the client saw no call yet');
    const rid = a.start('tools/call', { name: 'resume_run', arguments: { run: v.run,
      decisions: [{ seq: 2, approve: true, binding: v.pending[0].binding }] } });
    const req = await a.callRequest();
    eq([req.params.id, req.params.args, req.params.request], [2, { city: 'Oslo' }, rid], 'approved: now the call');
    a.answer(req, { result: { result: { temp_c: -4 } } });
    const fin = view(await a.response(rid));
    eq(fin.result, ['tool.denied', -4], `denied by a rule; approved and answered: ${JSON.stringify(fin)}`);
    await a.close();
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test('paused with --state: the run survives kill -9 and a new server resumes it by replay', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-caller-'));
  const secret = path.join(tmp, 'secret');
  fs.writeFileSync(secret, 'k'.repeat(48));
  const args = ['--state', tmp, '--secret-file', secret];
  try {
    const a = server({ args });
    await a.ready;
    const id = a.runLua(`local x = tools.weather{city = "A"}
      local y = tools.weather{city = "B"}
      return {x.temp_c, y.temp_c, math.random(1000)}`, meta([WEATHER], { mode: 'paused' }));
    const v1 = view(await a.response(id));
    eq(v1.pending.map((p) => p.args.city), ['A'], 'the first call');
    const v2 = view(await a.request('tools/call', { name: 'resume_run', arguments: { run: v1.run,
      results: [{ id: 1, binding: v1.pending[0].binding, result: { temp_c: 1 } }] } }));
    eq([v2.status, v2.pending.map((p) => [p.id, p.args.city])], ['paused', [[2, 'B']]], 'paused at the second');
    await a.kill();
    const b = server({ args });
    await b.ready;
    const done = view(await b.request('tools/call', { name: 'resume_run', arguments: { run: v1.run,
      results: [{ id: 2, binding: v2.pending[0].binding, result: { temp_c: 2 } }] } }));
    eq([done.ok, done.result?.[0], done.result?.[1]], [true, 1, 2], `the first answer from the log, the second from the resume: ${JSON.stringify(done)}`);
    await b.close();
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test('live with --state: killed -9 while the client has a call, the run comes back paused at it; resume_run with the call\'s binding finishes it', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-caller-'));
  const secret = path.join(tmp, 'secret');
  fs.writeFileSync(secret, 'k'.repeat(48));
  const args = ['--state', tmp, '--secret-file', secret];
  try {
    const a = server({ args });
    await a.ready;
    const id = a.runLua(`local x = tools.weather{city = "A"}
      local y = tools.weather{city = "B"}
      return {x.temp_c, y.temp_c, math.random(1000)}`, meta([WEATHER]));
    const r1 = await a.callRequest();
    eq(Object.keys(r1.params).sort(), ['args', 'binding', 'id', 'request', 'run', 'tool'], 'a stored run\'s call carries its binding');
    eq([r1.params.request, r1.params.id, r1.params.args.city], [id, 1, 'A'], 'the first call');
    assert(/^[0-9a-f]{64}$/.test(r1.params.binding), `binding ${r1.params.binding}`);
    a.answer(r1, { result: { result: { temp_c: 1 } } });
    const r2 = await a.callRequest();
    eq([r2.params.run, r2.params.id, r2.params.args.city], [r1.params.run, 2, 'B'], 'the second call');
    eq(await a.kill(), 'SIGKILL', 'killed while the client has the second call');
    const b = server({ args });
    await b.ready;
    const stale = await b.request('tools/call', { name: 'resume_run', arguments: { run: r1.params.run,
      results: [{ id: 1, binding: r1.params.binding, result: { temp_c: 9 } }] } });
    eq([stale.result.isError, stale.result.structuredContent.error.code], [true, 'caller.not_pending'], 'the answered call is not pending');
    const done = view(await b.request('tools/call', { name: 'resume_run', arguments: { run: r1.params.run,
      results: [{ id: 2, binding: r2.params.binding, result: { temp_c: 2 } }] } }));
    eq([done.ok, done.result?.[0], done.result?.[1]], [true, 1, 2], `the first answer from the log, the second from the resume: ${JSON.stringify(done)}`);
    await b.close();
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

// ---- a live call and a save under way (Redis: its writes answer later) ------------------

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => { const { port } = srv.address(); srv.close(() => resolve(port)); });
  });
}

async function waitPort(port, proc) {
  for (let i = 0; i < 200; i++) {
    if (proc.exitCode !== null) throw new Error(`redis-server exited (status ${proc.exitCode})`);
    const ok = await new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1', () => { c.end(); resolve(true); });
      c.once('error', () => resolve(false));
    });
    if (ok) return;
    await sleep(50);
  }
  throw new Error(`redis-server did not listen on 127.0.0.1:${port}`);
}

// RESP commands (arrays of bulk strings, as hiredis sends them) at the front of buf:
// [{args, bytes}] and the bytes left over.
function respCommands(buf) {
  const out = [];
  let at = 0;
  for (;;) {
    const start = at;
    if (at >= buf.length || buf[at] !== 0x2a) break;
    let nl = buf.indexOf('\r\n', at);
    if (nl < 0) break;
    const n = Number(buf.toString('latin1', at + 1, nl));
    at = nl + 2;
    const args = [];
    let whole = true;
    for (let i = 0; i < n; i++) {
      nl = buf.indexOf('\r\n', at);
      if (nl < 0) { whole = false; break; }
      const len = Number(buf.toString('latin1', at + 1, nl));
      if (nl + 2 + len + 2 > buf.length) { whole = false; break; }
      args.push(buf.toString('latin1', nl + 2, nl + 2 + len));
      at = nl + 2 + len + 2;
    }
    if (!whole) { at = start; break; }
    out.push({ args, bytes: buf.subarray(start, at) });
  }
  return { out, rest: buf.subarray(at) };
}

// A TCP proxy in front of redis-server that can hold a connection's commands: once armed
// with match, the first command that matches, and every later one of its connection (a
// connection's order is kept), waits in the proxy until release(). held resolves when the
// first one is held. A connection that closes drops what it held.
function gateProxy(port, redisPort) {
  const g = { match: null, held: null, releases: [] };
  g.arm = (match) => new Promise((held) => { g.match = match; g.held = held; });
  g.release = () => { for (const r of g.releases.splice(0)) r(); };
  g.server = net.createServer((client) => {
    const up = net.connect(redisPort, '127.0.0.1');
    let buf = Buffer.alloc(0), queue = [], holding = false, open = false, early = [];
    up.on('connect', () => { open = true; for (const b of early) up.write(b); early = []; });
    const send = (b) => { if (open) up.write(b); else early.push(b); };
    up.on('data', (d) => client.write(d));
    const end = () => { queue = []; client.destroy(); up.destroy(); };
    up.on('error', end); up.on('close', end);
    client.on('error', end); client.on('close', end);
    client.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      const { out, rest } = respCommands(buf);
      buf = Buffer.from(rest);
      for (const c of out) {
        if (!holding && g.match && g.match(c.args)) {
          g.match = null;
          holding = true;
          g.releases.push(() => { holding = false; for (const b of queue.splice(0)) send(b); });
          g.held(c.args);
        }
        if (holding) queue.push(c.bytes);
        else send(c.bytes);
      }
    });
  });
  return new Promise((resolve) => g.server.listen(port, '127.0.0.1', () => resolve(g)));
}

// The approval's save is held in the proxy at its record (the record was made before the
// call: a server that sent the call at the end of that save left it out of the store) or
// at its first log entry (the call comes before the record is made: a server that made
// the record then put the call in it without the log entries before it, so a restart made
// count.bump again). holdAt null: nothing is held, and branch 2 goes on once the run was
// answered paused at the approval (a server that left the call unsent while its run was
// parked kept the client waiting); then the store may be SQLite (whose writes answer at
// once, from inside the call's own dispatch there).
async function saveUnderWay(holdAt, store = 'redis') {
  if (store === 'redis' && spawnSync('redis-server', ['--version']).status !== 0)
    throw new Error('redis-server is not installed (sh scripts/deps.sh installs it)');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-caller-'));
  const secret = path.join(tmp, 'secret'), cfg = path.join(tmp, 'policy.json');
  const countFile = path.join(tmp, 'count.txt'), gateFile = path.join(tmp, 'gate');
  fs.writeFileSync(secret, 'k'.repeat(48));
  fs.writeFileSync(countFile, '');
  fs.writeFileSync(cfg, JSON.stringify({ policy: { default: 'allow', rules: [
    { tools: 'test.echo', effect: 'ask', reason: 'echo needs a person' }] } }));
  const redisPort = await freePort(), proxyPort = await freePort();
  const redis = store === 'redis' && spawn('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1',
    '--save', '', '--appendonly', 'no', '--dir', tmp], { stdio: 'ignore' });
  const redisGone = redis && new Promise((r) => redis.on('exit', r));
  const gate = redis && await gateProxy(proxyPort, redisPort);
  const where = redis ? `redis://127.0.0.1:${proxyPort}/0?prefix=race:` : path.join(tmp, 'state');
  const args = ['--state', where, '--secret-file', secret,
    '--config', cfg, '--test-tools', '--tools', path.join(root, 'spec/mcp/cluster_plugins'),
    '--tools', path.join(root, 'spec/mcp/caller_plugins')];
  const env = { TP_COUNT_FILE: countFile };
  const servers = [];
  const start = () => {
    const srv = mcpServer(['mcp', '--no-builtin-tools', '--workers', '1', ...args], { env });
    srv.callRequest = (ms) => srv.other((m) => m.method === 'tidepool/callTool', ms);
    srv.ready = srv.initialize({ name: 'caller-spec',
      capabilities: { experimental: { 'tidepool/callerTools': { version: 1 } } } });
    servers.push(srv);
    return srv;
  };
  try {
    if (redis) await waitPort(redisPort, redis);
    const a = start();
    await a.ready;
    // the first save is the approval's (branch 1 is held at once); its record is held in
    // the proxy, and only then does branch 2 go on (the gate file) to its caller call
    const held = holdAt && gate.arm((c) => c[0] === 'EVALSHA' && (c[3] || '').startsWith(`race:${holdAt}:`));
    const id = a.start('tools/call', { name: 'run_lua', arguments: { code: `
      local e, t = parallel(
        function() return tools.test.echo{x = 1} end,
        function()
          tools.gate.wait{path = ${JSON.stringify(gateFile)}}
          local n = tools.count.bump{tag = "b"}.n
          return tools.weather{city = "C"}.temp_c + 100 * n
        end)
      return {e.x, t}` },
    _meta: { progressToken: 'race', ...meta([WEATHER])._meta } });
    if (holdAt) await held;
    else {
      const v = view(await a.response(id));
      eq([v.status, v.pending.map((p) => p.seq)], ['paused', [1]], 'answered paused at the approval');
    }
    fs.writeFileSync(gateFile, '');
    await a.other((m) => m.method === 'notifications/progress' && m.params.message === 'tools.weather called');
    assert(!holdAt || !a.has((m) => m.method === 'tidepool/callTool'), 'no call went out while the save was held');
    if (gate) gate.release();
    const req = await a.callRequest();
    eq([req.params.id, req.params.tool, req.params.args], [4, 'weather', { city: 'C' }], 'the caller call');
    eq(await a.kill(), 'SIGKILL', 'killed as soon as the client has the call');
    const got = redis
      ? spawnSync('redis-cli', ['-p', String(redisPort), '--raw', 'GET', `race:run:${req.params.run}`], { encoding: 'utf8' })
      : spawnSync('sqlite3', [path.join(tmp, 'state', 'tidepool.db'), `SELECT rec FROM runs WHERE id = '${req.params.run}'`], { encoding: 'utf8' });
    const stored = JSON.parse(got.stdout || 'null');
    eq([stored?.state ?? 'paused', stored?.pending?.map((p) => [p.seq, p.kind || 'approval']).sort()],
      ['paused', [[1, 'approval'], [4, 'call']]], 'the store has the run paused at the approval and at the call the client has');
    // so a new server resumes it with the call's binding, without calling count.bump again
    const b = start();
    await b.ready;
    const r1 = view(await b.request('tools/call', { name: 'resume_run', arguments: { run: req.params.run,
      results: [{ id: req.params.id, binding: req.params.binding, result: { temp_c: 7 } }] } }));
    eq([r1.status, r1.pending?.map((p) => [p.seq, p.tool])], ['paused', [[1, 'test.echo']]],
      `the answer is taken; the run waits on the approval: ${JSON.stringify(r1)}`);
    const done = view(await b.request('tools/call', { name: 'resume_run', arguments: { run: req.params.run,
      decisions: [{ seq: 1, approve: true, binding: r1.pending[0].binding }] } }));
    eq([done.ok, done.result], [true, [1, 107]], `finished: ${JSON.stringify(done)}`);
    eq(fs.readFileSync(countFile, 'utf8'), 'b\n', 'count.bump was made once');
    await b.close();
  } finally {
    for (const srv of servers) await srv.kill();
    if (redis) {
      gate.release();
      gate.server.close();
      redis.kill('SIGKILL');
      await redisGone;
    }
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

for (const holdAt of ['run', 'log']) {
  test(`live with --state: a call made while an approval's save is under way (held at its ${holdAt === 'run' ? 'record' : 'log'}) goes out only once a save that has it is done; after kill -9 it is resumed, nothing made twice`,
    () => saveUnderWay(holdAt), 30000);
}
for (const store of ['redis', 'sqlite']) {
  test(`live with --state (${store}): a call made by another branch of a run parked at an approval goes out once a save has it; after kill -9 it is resumed`,
    () => saveUnderWay(null, store), 30000);
}

test('with --state: a run saved while another branch\'s call was running is not replayed after kill -9 (run.interrupted): that call may have been made', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-caller-'));
  const secret = path.join(tmp, 'secret'), cfg = path.join(tmp, 'policy.json');
  const countFile = path.join(tmp, 'count.txt'), gateFile = path.join(tmp, 'gate');
  fs.writeFileSync(secret, 'k'.repeat(48));
  fs.writeFileSync(countFile, '');
  fs.writeFileSync(cfg, JSON.stringify({ policy: { default: 'allow', rules: [
    { tools: 'test.echo', effect: 'ask', reason: 'echo needs a person' }] } }));
  const args = ['--state', tmp, '--secret-file', secret, '--config', cfg, '--test-tools',
    '--tools', path.join(root, 'spec/mcp/cluster_plugins'), '--tools', path.join(root, 'spec/mcp/caller_plugins')];
  const env = { TP_COUNT_FILE: countFile };
  const start = () => {
    const srv = mcpServer(['mcp', '--no-builtin-tools', '--workers', '1', ...args], { env });
    srv.ready = srv.initialize({ name: 'caller-spec' });
    return srv;
  };
  try {
    const a = start();
    await a.ready;
    const id = a.start('tools/call', { name: 'run_lua', arguments: { code: `
      local e, n = parallel(
        function() return tools.test.echo{x = 1} end,
        function()
          tools.gate.wait{path = ${JSON.stringify(gateFile)}}
          return tools.count.bump{tag = "b"}.n
        end)
      return {e.x, n}` } });
    const v = view(await a.response(id));
    eq([v.status, v.pending.map((p) => p.seq)], ['paused', [1]], 'paused at the approval while gate.wait runs');
    eq(await a.kill(), 'SIGKILL', 'killed');
    const b = start();
    await b.ready;
    const r = await b.request('tools/call', { name: 'resume_run', arguments: { run: v.run,
      decisions: [{ seq: 1, approve: true, binding: v.pending[0].binding }] } });
    const err = r.result.structuredContent.error;
    eq([r.result.isError, err.code], [true, 'run.interrupted'], JSON.stringify(r.result.structuredContent));
    assert(/its call 2 \(tools\.gate\.wait\) was running in another branch/.test(err.message), err.message);
    eq(fs.readFileSync(countFile, 'utf8'), '', 'count.bump was not made');
    await b.close();
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

test('paused with --state: answering one of two calls keeps the run paused (stored) at the other', async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-caller-'));
  const secret = path.join(tmp, 'secret');
  fs.writeFileSync(secret, 'k'.repeat(48));
  const args = ['--state', tmp, '--secret-file', secret];
  try {
    const a = server({ args });
    await a.ready;
    const id = a.runLua(`local x, y = parallel(function() return tools.weather{city = "A"} end,
        function() return tools.weather{city = "B"} end)
      return {x.temp_c, y.temp_c}`, meta([WEATHER], { mode: 'paused' }));
    const v1 = view(await a.response(id));
    eq(v1.pending.map((p) => [p.id, p.args.city]), [[1, 'A'], [2, 'B']], 'both calls');
    const v2 = view(await a.request('tools/call', { name: 'resume_run', arguments: { run: v1.run,
      results: [{ id: 1, binding: v1.pending[0].binding, result: { temp_c: 1 } }] } }));
    eq([v2.status, v2.pending.map((p) => p.id)], ['paused', [2]], 'paused at the other');
    eq(await a.kill(), 'SIGKILL', 'killed');
    const b = server({ args });
    await b.ready;
    const done = view(await b.request('tools/call', { name: 'resume_run', arguments: { run: v1.run,
      results: [{ id: 2, binding: v2.pending[0].binding, result: { temp_c: 2 } }] } }));
    eq([done.ok, done.result], [true, [1, 2]], `the first answer from the log: ${JSON.stringify(done)}`);
    await b.close();
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

// ---- HTTP: the official SDK client, the call on the run request's SSE stream ----------

function startHttp() {
  return new Promise((resolve, reject) => {
    const p = spawn(tidepool, ['mcp', '--no-builtin-tools', '--http', '127.0.0.1:0'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    const srv = { proc: p, exited: new Promise((r) => p.on('exit', () => r())) };
    p.stderr.setEncoding('utf8');
    p.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/serving on (http:\/\/127\.0\.0\.1:\d+\/mcp)/);
      if (m && !srv.url) { srv.url = m[1]; resolve(srv); }
    });
    p.on('exit', (code) => { if (!srv.url) reject(new Error(`exited ${code}: ${err}`)); });
  });
}

const CallToolRequest = z.object({ method: z.literal('tidepool/callTool'), params: z.object({}).passthrough() });

test('live over HTTP: the SDK client answers tidepool/callTool from its request handler', async () => {
  const srv = await startHttp();
  try {
    const client = new Client({ name: 'caller-http', version: '1.0.0' },
      { capabilities: { experimental: { 'tidepool/callerTools': { version: 1 } } } });
    const seen = [];
    client.setRequestHandler(CallToolRequest, async (req) => {
      seen.push(req.params);
      if (req.params.args.city === 'Nowhere') return { error: { message: 'unknown city', code: 'tool.failed' } };
      return { result: { temp_c: req.params.args.city.length } };
    });
    await client.connect(new StreamableHTTPClientTransport(new URL(srv.url)));
    eq(client.getServerCapabilities().experimental['tidepool/callerTools'].version, 1, 'capability');
    const r = await client.callTool({ name: 'run_lua', arguments: { code: `
      local a = tools.weather{city = "Paris"}
      local ok, e = pcall(tools.weather, {city = "Nowhere"})
      return {a.temp_c, e.message}` }, _meta: { 'tidepool/callerTools': { version: 1, tools: [WEATHER] } } });
    eq(r.structuredContent?.result, [5, 'tools.weather failed: unknown city'], `the run's result: ${JSON.stringify(r)}`);
    eq(seen.map((p) => [p.tool, p.args.city]), [['weather', 'Paris'], ['weather', 'Nowhere']], 'the calls the client ran');
    // paused over the same server: a stateless-style run, then resume_run
    const p = await client.callTool({ name: 'run_lua', arguments: { code: 'return tools.weather{city = "Rome"}.temp_c' },
      _meta: { 'tidepool/callerTools': { version: 1, mode: 'paused', tools: [WEATHER] } } });
    eq(p.structuredContent.status, 'paused', 'paused over HTTP');
    const pend = p.structuredContent.pending[0];
    const done = await client.callTool({ name: 'resume_run', arguments: { run: p.structuredContent.run,
      results: [{ id: pend.id, binding: pend.binding, result: { temp_c: 30 } }] } });
    eq(done.structuredContent.result, 30, 'resumed over HTTP');
    await client.close();
  } finally {
    srv.proc.kill('SIGTERM');
    await srv.exited;
  }
});

await run();
