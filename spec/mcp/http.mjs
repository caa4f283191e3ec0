// `tidepool mcp --http`: Streamable HTTP (engine/front/mcp/http.c). The official SDK's
// StreamableHTTPClientTransport end to end; raw requests for every status the transport
// answers (exact codes and JSON-RPC errors); a slowloris client; a client that hangs up
// mid-run (the run's tool sees the cancellation: spec/mcp/http_plugins/probe.lua); the
// per-client stream limit; SSE keep-alives; SIGTERM. Every server listens on 127.0.0.1
// at a port the kernel picks (--http 127.0.0.1:0), read from its "serving on" line.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { test, run, assert, eq, sleep, tidepool, root } from './harness.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-http-'));
const probeFile = path.join(tmp, 'probe.txt');
const servers = [];

// Starts `tidepool mcp --http 127.0.0.1:0 --test-tools ...args`; resolves once it serves.
function start(args = [], env = {}) {
  return new Promise((resolve, reject) => {
    const p = spawn(tidepool, ['mcp', '--no-builtin-tools', '--test-tools', '--http',
      '127.0.0.1:0', ...args], { stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, TP_PROBE_FILE: probeFile, ...env } });
    let err = '';
    const srv = { proc: p, stderr: () => err, exited: new Promise((r) => p.on('exit', (code, sig) => r({ code, sig }))) };
    servers.push(srv);
    p.stderr.setEncoding('utf8');
    p.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/serving on (http:\/\/127\.0\.0\.1:(\d+)\/mcp)/);
      if (m && !srv.url) {
        srv.url = m[1];
        srv.port = Number(m[2]);
        resolve(srv);
      }
    });
    p.on('exit', (code) => { if (!srv.url) reject(new Error(`exited ${code}: ${err}`)); });
  });
}

// One request on its own connection: {status, headers, body, json}.
function request(srv, { method = 'POST', headers = {}, body, pathName = '/mcp', host } = {}) {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    if (body !== undefined && !('content-type' in h)) h['content-type'] = 'application/json';
    if (body !== undefined) h['content-length'] = Buffer.byteLength(body);
    const req = http.request({ host: '127.0.0.1', port: srv.port, method, path: pathName,
      headers: { host: host || `127.0.0.1:${srv.port}`, ...h }, agent: false }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { data += d; });
      res.on('end', () => {
        let json;
        try { json = JSON.parse(data); } catch { json = undefined; }
        resolve({ status: res.statusCode, headers: res.headers, body: data, json });
      });
    });
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

const msg = (id, method, params) => JSON.stringify({ jsonrpc: '2.0', id, method, params });
const initBody = msg(1, 'initialize', { protocolVersion: '2025-11-25', capabilities: {},
  clientInfo: { name: 'http-spec', version: '1' } });
const call = (id, code, extra = {}) => msg(id, 'tools/call', { name: 'run_lua', arguments: { code }, ...extra });
// the headers of a 2026-07-28 tools/call of run_lua
const h2026 = { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'run_lua' };

async function session(srv) {
  const r = await request(srv, { body: initBody, headers: { accept: 'application/json, text/event-stream' } });
  eq(r.status, 200, 'initialize status');
  return r.headers['mcp-session-id'];
}

function expectError(r, status, code, prefix, id = null) {
  eq(r.status, status, `status (body ${r.body})`);
  eq(r.headers['content-type'], 'application/json', 'content-type');
  eq(r.json.jsonrpc, '2.0', 'jsonrpc');
  eq(r.json.id, id, 'id');
  eq(r.json.error.code, code, 'JSON-RPC error code');
  assert(r.json.error.message.startsWith(prefix), `message "${r.json.error.message}" starts with "${prefix}"`);
}

let srv;

// ---- the SDK client ------------------------------------------------------------------

test('the SDK StreamableHTTPClientTransport: initialize, tools/list, run_lua, the session kept', async () => {
  srv = await start(['--http-max-body', '1K']);
  const transport = new StreamableHTTPClientTransport(new URL(srv.url));
  const client = new Client({ name: 'http-e2e', version: '1.0.0' });
  await client.connect(transport);
  eq(client.getServerVersion().name, 'tidepool', 'serverInfo.name');
  assert(/^[0-9a-f]{32}$/.test(transport.sessionId), `session id ${transport.sessionId}`);
  const { tools } = await client.listTools();
  eq(tools.map((t) => t.name), ['run_lua'], 'tools');
  const r = await client.callTool({ name: 'run_lua', arguments: { code: 'x = 41 return x + 1', session: 's' } });
  eq(r.structuredContent.result, 42, 'result');
  eq(r.structuredContent.session.state, 'new', 'tidepool session new');
  const r2 = await client.callTool({ name: 'run_lua', arguments: { code: 'return x', session: 's' } });
  eq(r2.structuredContent.result, 41, 'the session kept its global');
  eq(r2.structuredContent.session.state, 'continued', 'tidepool session continued');
  const sid = transport.sessionId;
  await transport.terminateSession();  // DELETE
  const after = await request(srv, { body: msg(5, 'tools/list'), headers: { 'mcp-session-id': sid } });
  expectError(after, 404, -32001, 'Session not found', 5);
  await client.close();
});

test('the SDK client gets progress notifications on the SSE stream of its call', async () => {
  const transport = new StreamableHTTPClientTransport(new URL(srv.url));
  const client = new Client({ name: 'http-e2e', version: '1.0.0' });
  await client.connect(transport);
  const progress = [];
  const r = await client.callTool({ name: 'run_lua', arguments: {
    code: 'tools.test.sleep{ms = 30} return "done"' } }, undefined,
  { onprogress: (p) => progress.push(p.message) });
  eq(r.structuredContent.result, 'done', 'result');
  eq(progress, ['script started', 'tools.test.sleep called', 'tools.test.sleep returned'], 'progress messages');
  await client.close();
});

// ---- raw requests --------------------------------------------------------------------

test('POST initialize: 200 JSON with Mcp-Session-Id; a notification or a response: 202, no body', async () => {
  const r = await request(srv, { body: initBody, headers: { accept: 'application/json, text/event-stream' } });
  eq(r.status, 200, 'status');
  eq(r.headers['content-type'], 'application/json', 'content-type');
  eq(r.json.result.protocolVersion, '2025-11-25', 'protocolVersion');
  const sid = r.headers['mcp-session-id'];
  assert(/^[0-9a-f]{32}$/.test(sid), `session id ${sid}`);
  const n = await request(srv, { body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
    headers: { 'mcp-session-id': sid } });
  eq([n.status, n.body], [202, ''], 'notification');
  const resp = await request(srv, { body: JSON.stringify({ jsonrpc: '2.0', id: 9, result: {} }),
    headers: { 'mcp-session-id': sid } });
  eq([resp.status, resp.body], [202, ''], 'response');
  const c = await request(srv, { body: call(2, 'return 1'), headers: { 'mcp-session-id': sid } });
  eq(c.status, 200, 'tools/call status');
  eq(c.headers['content-type'], 'application/json', 'a call without progressToken is JSON');
  eq(c.json.result.structuredContent.result, 1, 'result');
});

test('a session is required after initialize (400), an unknown one is 404, DELETE ends one', async () => {
  expectError(await request(srv, { body: msg(3, 'tools/list') }), 400, -32000,
    'Bad Request: the Mcp-Session-Id header is required', 3);
  expectError(await request(srv, { body: msg(4, 'tools/list'), headers: { 'mcp-session-id': 'f'.repeat(32) } }),
    404, -32001, 'Session not found', 4);
  const sid = await session(srv);
  const d = await request(srv, { method: 'DELETE', headers: { 'mcp-session-id': sid } });
  eq([d.status, d.body], [200, ''], 'DELETE');
  expectError(await request(srv, { method: 'DELETE', headers: { 'mcp-session-id': sid } }), 404, -32001,
    'Session not found');
  expectError(await request(srv, { method: 'DELETE' }), 400, -32000, 'Bad Request: DELETE ends');
});

test('GET and PUT: 405 with Allow; another path: 404', async () => {
  const g = await request(srv, { method: 'GET', headers: { accept: 'text/event-stream' } });
  expectError(g, 405, -32000, 'Method Not Allowed');
  eq(g.headers.allow, 'POST, DELETE', 'Allow');
  expectError(await request(srv, { method: 'PUT', body: '{}' }), 405, -32000, 'Method Not Allowed');
  expectError(await request(srv, { pathName: '/other', body: initBody }), 404, -32000, 'Not Found: /other');
});

test('Host and Origin not allowed: 403; the localhost forms are', async () => {
  expectError(await request(srv, { body: initBody, host: 'evil.example' }), 403, -32000,
    "Forbidden: Host 'evil.example'");
  expectError(await request(srv, { body: initBody, host: `evil.example:${srv.port}` }), 403, -32000,
    'Forbidden: Host');
  expectError(await request(srv, { body: initBody, headers: { origin: 'http://evil.example' } }), 403,
    -32000, "Forbidden: Origin 'http://evil.example'");
  const ok = await request(srv, { body: initBody, host: `localhost:${srv.port}`,
    headers: { origin: `http://localhost:${srv.port}` } });
  eq(ok.status, 200, 'localhost Host and Origin');
});

test('413 past --http-max-body, 431 past the header limit, 415, parse errors and batches: 400', async () => {
  const sid = await session(srv);
  const big = call(6, `return "${'x'.repeat(2000)}"`);
  expectError(await request(srv, { body: big, headers: { 'mcp-session-id': sid } }), 413, -32600,
    'Request Entity Too Large: the body is over the 1024 bytes');
  const h = await request(srv, { body: msg(7, 'ping'), headers: { 'mcp-session-id': sid, 'x-big': 'b'.repeat(40000) } });
  eq(h.status, 431, 'header too large');
  expectError(await request(srv, { body: msg(8, 'ping'), headers: { 'mcp-session-id': sid, 'content-type': 'text/plain' } }),
    415, -32000, 'Unsupported Media Type');
  expectError(await request(srv, { body: '{"jsonrpc":', headers: { 'mcp-session-id': sid } }), 400, -32700,
    'Parse error');
  expectError(await request(srv, { body: `[${msg(9, 'ping')}]`, headers: { 'mcp-session-id': sid } }), 400,
    -32600, 'Invalid Request: JSON-RPC batches are not supported over HTTP');
  expectError(await request(srv, { body: msg(10, 'ping'), headers: { 'mcp-session-id': sid, 'mcp-protocol-version': '1999-01-01' } }),
    400, -32600, "Bad Request: unsupported MCP-Protocol-Version '1999-01-01'");
  const ok = await request(srv, { body: call(11, 'return 2'), headers: { 'mcp-session-id': sid } });
  eq(ok.json.result.structuredContent.result, 2, 'the server still serves');
});

test('2026-07-28: no session; Mcp-Method and Mcp-Name must match the body (400, -32020)', async () => {
  const ok = await request(srv, { body: call(1, 'return 3'), headers: h2026 });
  eq(ok.status, 200, 'status');
  eq(ok.json.result.structuredContent.result, 3, 'result');
  expectError(await request(srv, { body: call(2, 'return 3'), headers: { ...h2026, 'mcp-method': 'tools/list' } }),
    400, -32020, 'Bad Request: the Mcp-Method header (tools/list) does not match the body\'s method (tools/call)', 2);
  expectError(await request(srv, { body: call(3, 'return 3'), headers: { ...h2026, 'mcp-name': 'other' } }),
    400, -32020, 'Bad Request: the Mcp-Name header (other) does not match', 3);
  const { 'mcp-method': _m, ...noMethod } = h2026;
  expectError(await request(srv, { body: call(4, 'return 3'), headers: noMethod }), 400, -32020,
    'Bad Request: the Mcp-Method header is required', 4);
});

// ---- slow and vanishing clients ---------------------------------------------------------

test('a slowloris client that trickles its headers is dropped; others are served meanwhile', async () => {
  const s2 = await start(['--http-request-timeout', '1s']);
  const sock = net.connect(s2.port, '127.0.0.1');
  await new Promise((r) => sock.on('connect', r));
  let closedAt = 0;
  const t0 = Date.now();
  sock.on('close', () => { closedAt = Date.now() - t0; });
  sock.on('error', () => {});
  const line = `POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${s2.port}\r\nX-Slow: ${'a'.repeat(200)}`;
  let served = false;
  for (let i = 0; i < line.length && !closedAt; i++) {
    sock.write(line[i]);
    await sleep(50);
    if (i === 5) {  // another client meanwhile
      const r = await request(s2, { body: call(1, 'return 5'), headers: h2026 });
      served = r.status === 200 && r.json.result.structuredContent.result === 5;
    }
  }
  assert(served, 'another client was served while the slow one trickled');
  assert(closedAt > 900 && closedAt < 4000, `the slow connection was closed after ${closedAt} ms (limit 1 s)`);
  const r = await request(s2, { body: call(2, 'return 6'), headers: h2026 });
  eq(r.json.result.structuredContent.result, 6, 'the server still serves');
  s2.proc.kill('SIGTERM');
  eq(await s2.exited, { code: 0, sig: null }, 'exit');
}, 20000);

test('2026-07-28: a client closing its connection mid-run cancels the run (its tool sees it)', async () => {
  fs.rmSync(probeFile, { force: true });
  const s3 = await start(['--tools', path.join(root, 'spec/mcp/http_plugins')]);
  const req = http.request({ host: '127.0.0.1', port: s3.port, method: 'POST', path: '/mcp', agent: false,
    headers: { ...h2026, 'content-type': 'application/json', accept: 'application/json, text/event-stream' } });
  req.on('error', () => {});
  req.end(call(1, 'tools.probe.wait{ms = 10000, tag = "gone"} return 1'));
  await sleep(400);
  req.destroy();
  let text = '';
  for (let i = 0; i < 40 && !text; i++) {
    await sleep(100);
    text = fs.existsSync(probeFile) ? fs.readFileSync(probeFile, 'utf8') : '';
  }
  eq(text, 'gone cancelled\n', 'the tool call was cancelled');
  // a run left alone finishes, and records nothing
  const r = await request(s3, { body: call(2, 'return tools.probe.wait{ms = 50, tag = "stays"}'), headers: h2026 });
  eq(r.json.result.structuredContent.result, { slept: true }, 'result');
  eq(fs.readFileSync(probeFile, 'utf8'), 'gone cancelled\n', 'no other cancellation');
  s3.proc.kill('SIGTERM');
  eq(await s3.exited, { code: 0, sig: null }, 'exit');
});

test('a client has at most --http-max-streams calls waiting (429 past it); SSE keep-alive comments', async () => {
  const s4 = await start(['--http-max-streams', '2', '--http-keepalive', '100ms']);
  const slow = (id) => request(s4, { body: call(id, 'return tools.test.sleep{ms = 600}', { _meta: { progressToken: id } }),
    headers: { ...h2026, accept: 'application/json, text/event-stream' } });
  const a = slow(1), b = slow(2);
  await sleep(200);
  const c = await request(s4, { body: call(3, 'return 1'), headers: h2026 });
  expectError(c, 429, -32000, 'Too Many Requests: this client (address 127.0.0.1) has 2 requests waiting', 3);
  eq(c.headers['retry-after'], '1', 'Retry-After');
  const [ra, rb] = await Promise.all([a, b]);
  for (const r of [ra, rb]) {
    eq(r.status, 200, 'a stream');
    eq(r.headers['content-type'], 'text/event-stream', 'SSE');
    eq(r.headers['x-accel-buffering'], 'no', 'X-Accel-Buffering');
    assert(r.body.includes(': keep-alive\n\n'), 'a keep-alive comment');
    const events = r.body.split('\n\n').filter((e) => e.startsWith('event: message'));
    const last = JSON.parse(events[events.length - 1].split('data: ')[1]);
    eq(last.result.structuredContent.result, { slept: true }, 'the response is the last event');
  }
  const d = await request(s4, { body: call(4, 'return 1'), headers: h2026 });
  eq(d.status, 200, 'served again once the streams ended');
  s4.proc.kill('SIGTERM');
  eq(await s4.exited, { code: 0, sig: null }, 'exit');
});

test('with auth, --http-max-streams counts per principal: one principal at its limit does not hold up another', async () => {
  const cfg = path.join(tmp, 'fair-auth.json');
  fs.writeFileSync(cfg, JSON.stringify({
    auth: { resource: 'http://127.0.0.1/mcp', tokens: [
      { token: 'alice-token-0123456789', principal: 'alice', scopes: ['mcp'] },
      { token: 'bob-token-0123456789ab', principal: 'bob', scopes: ['mcp'] }] } }));
  const s = await start(['--config', cfg, '--http-max-streams', '2']);
  const as = (who) => ({ ...h2026, authorization: `Bearer ${who}-token-0123456789${who === 'bob' ? 'ab' : ''}` });
  const slow = (id) => request(s, { body: call(id, 'return tools.test.sleep{ms = 800}'), headers: as('alice') });
  const a = slow(1), b = slow(2);
  await sleep(250);
  const c = await request(s, { body: call(3, 'return 1'), headers: as('alice') });
  expectError(c, 429, -32000, 'Too Many Requests: this client (principal alice) has 2 requests waiting', 3);
  const d = await request(s, { body: call(4, 'return 2'), headers: as('bob') });
  eq(d.status, 200, 'bob is served while alice waits');
  eq(d.json.result.structuredContent.result, 2, 'bob\'s result');
  for (const r of await Promise.all([a, b])) eq(r.status, 200, 'alice\'s slow calls');
  s.proc.kill('SIGTERM');
  eq(await s.exited, { code: 0, sig: null }, 'exit');
});

test('without auth, --http-max-streams counts per address: X-Forwarded-For names it only when the peer is a trusted proxy', async () => {
  const cfg = path.join(tmp, 'fair-proxy.json');
  fs.writeFileSync(cfg, JSON.stringify({ server: { trusted_proxies: ['127.0.0.1'] } }));
  const s = await start(['--config', cfg, '--http-max-streams', '1']);
  const from = (xff, id, code = 'return 1') => request(s, { body: call(id, code), headers: { ...h2026, 'x-forwarded-for': xff } });
  const slow = from('203.0.113.5', 1, 'return tools.test.sleep{ms = 800}');
  await sleep(250);
  const other = await from('203.0.113.6', 2);
  eq(other.status, 200, 'another address behind the proxy is served');
  const same = await from('198.51.100.1, 203.0.113.5', 3);  // the proxy appended .5
  expectError(same, 429, -32000, 'Too Many Requests: this client (address 203.0.113.5) has 1 requests waiting', 3);
  const chain = await from('203.0.113.5, 127.0.0.1', 4);    // a second trusted hop
  expectError(chain, 429, -32000, 'Too Many Requests: this client (address 203.0.113.5) has 1 requests waiting', 4);
  eq((await slow).status, 200, 'the slow call');
  s.proc.kill('SIGTERM');
  eq(await s.exited, { code: 0, sig: null }, 'exit');
  // no trusted proxy: the header is the client's own word, and ignored
  const s2 = await start(['--http-max-streams', '1']);
  const slow2 = request(s2, { body: call(1, 'return tools.test.sleep{ms = 800}'), headers: { ...h2026, 'x-forwarded-for': '203.0.113.5' } });
  await sleep(250);
  const forged = await request(s2, { body: call(2, 'return 1'), headers: { ...h2026, 'x-forwarded-for': '203.0.113.6' } });
  expectError(forged, 429, -32000, 'Too Many Requests: this client (address 127.0.0.1) has 1 requests waiting', 2);
  eq((await slow2).status, 200, 'the slow call');
  s2.proc.kill('SIGTERM');
  eq(await s2.exited, { code: 0, sig: null }, 'exit');
  const bad = path.join(tmp, 'fair-bad.json');
  fs.writeFileSync(bad, JSON.stringify({ server: { trusted_proxies: ['nginx.local'] } }));
  let refused = '';
  try { await start(['--config', bad]); } catch (e) { refused = e.message; }
  assert(refused.includes("tidepool mcp: config: /server/trusted_proxies/0: 'nginx.local' is not an IP address (127.0.0.1, ::1)"),
    `a trusted proxy that is not an address is refused: ${refused}`);
});

test('past --http-max-connections a new connection is answered 503 with Retry-After at once, not left waiting', async () => {
  const s = await start(['--http-max-connections', '3']);
  const idle = [];
  for (let i = 0; i < 3; i++) {
    const sock = net.connect(s.port, '127.0.0.1');
    sock.on('error', () => {});
    await new Promise((r) => sock.on('connect', r));
    idle.push(sock);
  }
  await sleep(200);
  const t0 = Date.now();
  const r = await request(s, { body: call(1, 'return 1'), headers: h2026 });
  const waited = Date.now() - t0;
  expectError(r, 503, -32000, 'Service Unavailable: the server has 3 connections open, the most it takes (server.max_connections): retry shortly');
  eq(r.headers['retry-after'], '1', 'Retry-After');
  assert(waited < 5000, `answered at once, not after the 10 s request timeout (${waited} ms)`);
  for (const sock of idle) sock.destroy();
  await sleep(300);
  const ok = await request(s, { body: call(2, 'return 2'), headers: h2026 });
  eq(ok.status, 200, 'served once the connections closed');
  s.proc.kill('SIGTERM');
  eq(await s.exited, { code: 0, sig: null }, 'exit');
});

test('SIGTERM: the call in flight finishes, new connections are refused, exit status 0', async () => {
  const s5 = await start();
  const inflight = request(s5, { body: call(1, 'return tools.test.sleep{ms = 500}'), headers: h2026 });
  await sleep(150);
  s5.proc.kill('SIGTERM');
  const r = await inflight;
  eq(r.json.result.structuredContent.result, { slept: true }, 'the call in flight finished');
  eq(await s5.exited, { code: 0, sig: null }, 'exit');
  let refused = false;
  try { await request(s5, { body: call(2, 'return 1'), headers: h2026 }); } catch { refused = true; }
  assert(refused, 'a new connection is refused');
});

// ---- auth (engine/front/mcp/auth.c) ----------------------------------------------------------

test('auth: 401 with WWW-Authenticate, 403 insufficient_scope, the RFC 9728 document; the principal reaches the policy and the audit log, never a session of another', async () => {
  const cfg = path.join(tmp, 'auth.json'), audit = path.join(tmp, 'audit.log');
  fs.writeFileSync(cfg, JSON.stringify({
    auth: { resource: 'http://127.0.0.1/mcp', required_scopes: ['mcp'], tokens: [
      { token: 'alice-token-0123456789', principal: 'alice', scopes: ['mcp', 'echo:use'] },
      { token: 'bob-token-0123456789ab', principal: 'bob', scopes: ['mcp'] },
      { token: 'carol-token-0123456789', principal: 'carol', scopes: ['other'] }] },
    policy: { default: 'allow', rules: [{ tools: 'test.echo', effect: 'allow', requires: ['echo:use'] }] },
  }));
  const s6 = await start(['--config', cfg, '--audit', audit]);
  const meta = 'Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource/mcp"';
  const echo = call(1, 'return tools.test.echo{a = 1}');
  const as = (who) => ({ ...h2026, authorization: `Bearer ${who}` });
  const none = await request(s6, { body: echo, headers: h2026 });
  expectError(none, 401, -32000, 'Unauthorized: no credential');
  eq(none.headers['www-authenticate'], `${meta}, scope="mcp"`, 'challenge without a token');
  const bad = await request(s6, { body: echo, headers: as('nope-nope-nope-nope-nope') });
  expectError(bad, 401, -32000, 'Unauthorized: unknown token');
  assert(bad.headers['www-authenticate'].startsWith(`${meta}, error="invalid_token"`), bad.headers['www-authenticate']);
  const carol = await request(s6, { body: echo, headers: as('carol-token-0123456789') });
  expectError(carol, 403, -32000, 'Forbidden: carol lacks the scope mcp');
  assert(carol.headers['www-authenticate'].startsWith(`${meta}, error="insufficient_scope"`), carol.headers['www-authenticate']);
  assert(carol.headers['www-authenticate'].endsWith('scope="mcp"'), 'the challenge names the scope');
  for (const p of ['/.well-known/oauth-protected-resource', '/.well-known/oauth-protected-resource/mcp']) {
    const d = await request(s6, { method: 'GET', pathName: p });
    eq(d.status, 200, `GET ${p}`);
    eq(d.json, { resource: 'http://127.0.0.1/mcp', bearer_methods_supported: ['header'] }, 'metadata');
  }
  const alice = await request(s6, { body: echo, headers: as('alice-token-0123456789') });
  eq(alice.json.result.structuredContent.result, { a: 1 }, 'alice holds echo:use');
  const bob = await request(s6, { body: echo, headers: as('bob-token-0123456789ab') });
  eq(bob.json.result.structuredContent.error.code, 'tool.denied', 'bob does not');
  assert(bob.json.result.structuredContent.error.message.includes('which the caller bob does not hold'),
    bob.json.result.structuredContent.error.message);
  // a session made by alice is not bob's
  const init = await request(s6, { body: initBody, headers: { authorization: 'Bearer alice-token-0123456789' } });
  const sid = init.headers['mcp-session-id'];
  const mine = await request(s6, { body: msg(2, 'ping'), headers: { authorization: 'Bearer alice-token-0123456789', 'mcp-session-id': sid } });
  eq(mine.status, 200, 'alice uses her session');
  expectError(await request(s6, { body: msg(3, 'ping'), headers: { authorization: 'Bearer bob-token-0123456789ab', 'mcp-session-id': sid } }),
    404, -32001, 'Session not found', 3);
  s6.proc.kill('SIGTERM');
  eq(await s6.exited, { code: 0, sig: null }, 'exit');
  const lines = fs.readFileSync(audit, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  eq(lines.filter((l) => l.tool === 'run_lua').map((l) => [l.principal, l.ok]), [['alice', true], ['bob', false]],
    'the audit log names the principal of each run');
  eq(lines.filter((l) => l.event === 'decision').map((l) => [l.principal, l.effect]), [['alice', 'allow'], ['bob', 'deny']],
    'and of each decision');
  assert(!fs.readFileSync(audit, 'utf8').includes('token-0123'), 'no token in the audit log');
});

test('auth + a 2026-07-28 approval: the requestState is sealed for its principal; another principal\'s retry is refused, the owner\'s resumes', async () => {
  const cfg = path.join(tmp, 'auth-ask.json');
  fs.writeFileSync(cfg, JSON.stringify({
    auth: { resource: 'http://127.0.0.1/mcp', tokens: [
      { token: 'alice-token-0123456789', principal: 'alice', scopes: ['mcp'] },
      { token: 'bob-token-0123456789ab', principal: 'bob', scopes: ['mcp'] }] },
    policy: { default: 'allow', rules: [{ tools: 'test.echo', effect: 'ask', reason: 'echo needs a person' }] },
  }));
  const s7 = await start(['--config', cfg]);
  const meta = { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientCapabilities': { elicitation: {} } } };
  const code = 'return tools.test.echo{n = 5}.n';
  const as = (who) => ({ ...h2026, authorization: `Bearer ${who}` });
  const alice = as('alice-token-0123456789'), bob = as('bob-token-0123456789ab');
  const first = await request(s7, { body: call(1, code, meta), headers: alice });
  eq(first.status, 200, `status (body ${first.body})`);
  eq([first.json.result.resultType, Object.keys(first.json.result.inputRequests)],
    ['input_required', ['approve-1']], 'an approval asked of alice');
  const state = first.json.result.requestState;
  const answer = { requestState: state,
    inputResponses: { 'approve-1': { action: 'accept', content: { approve: true } } } };
  const stolen = await request(s7, { body: call(2, code, { ...meta, ...answer }), headers: bob });
  eq([stolen.status, stolen.json.error && stolen.json.error.code], [200, -32602],
    `bob cannot answer alice's approval (body ${stolen.body})`);
  const mine = await request(s7, { body: call(3, code, { ...meta, ...answer }), headers: alice });
  eq([mine.json.result.resultType, mine.json.result.structuredContent.ok,
    mine.json.result.structuredContent.result], ['complete', true, 5], 'alice resumes her run');
  s7.proc.kill('SIGTERM');
  eq(await s7.exited, { code: 0, sig: null }, 'exit');
});

test('a client that declares elicitation but takes a JSON answer (no SSE stream) gets a paused run: an elicitation/create has nothing to ride on', async () => {
  const cfg = path.join(tmp, 'ask.json');
  fs.writeFileSync(cfg, JSON.stringify({
    policy: { default: 'allow', rules: [{ tools: 'test.echo', effect: 'ask', reason: 'echo needs a person' }] } }));
  const s8 = await start(['--config', cfg]);
  const init = await request(s8, { body: msg(1, 'initialize', { protocolVersion: '2025-11-25',
    capabilities: { elicitation: {} }, clientInfo: { name: 'http-spec', version: '1' } }) });
  const sid = init.headers['mcp-session-id'];
  const r = await request(s8, { body: call(2, 'return tools.test.echo{n = 5}.n'),
    headers: { 'mcp-session-id': sid } });
  eq([r.status, r.headers['content-type']], [200, 'application/json'], 'a JSON answer');
  const v = r.json.result.structuredContent;
  eq([v.status, v.pending.map((p) => [p.seq, p.tool, p.reason])],
    ['paused', [[1, 'test.echo', 'echo needs a person (policy rule 0)']]], 'paused, with the call pending');
  const done = await request(s8, { body: msg(3, 'tools/call', { name: 'resume_run', arguments: {
    run: v.run, decisions: [{ seq: 1, approve: true, binding: v.pending[0].binding }] } }),
  headers: { 'mcp-session-id': sid } });
  eq([done.json.result.structuredContent.ok, done.json.result.structuredContent.result], [true, 5],
    'resume_run over HTTP answers with the run\'s result');
  s8.proc.kill('SIGTERM');
  eq(await s8.exited, { code: 0, sig: null }, 'exit');
});

test('a second server on a taken port exits 1 and says why', async () => {
  const p = spawn(tidepool, ['mcp', '--no-builtin-tools', '--http', `127.0.0.1:${srv.port}`],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  p.stderr.on('data', (d) => { err += d; });
  const code = await new Promise((r) => p.on('exit', r));
  eq(code, 1, 'exit status');
  assert(err.includes(`tidepool mcp: --http: cannot listen on 127.0.0.1:${srv.port} (Address already in use)`), err);
});

test('SIGINT stops the first server with status 0', async () => {
  srv.proc.kill('SIGINT');
  eq(await srv.exited, { code: 0, sig: null }, 'exit');
});

process.on('exit', () => {
  for (const s of servers) if (s.proc.exitCode === null) s.proc.kill('SIGKILL');
  fs.rmSync(tmp, { recursive: true, force: true });
});
await run();
