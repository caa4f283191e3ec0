// Tenants stay apart: `tidepool mcp --http` with auth, two principals (alice and bob) who
// both use the session "main", once with static tokens and once with JWTs (HS256, made
// here). Neither sees, changes or learns anything of the other's: globals, a function the
// other's next script calls, kv under the other's scopes, the other's paused run (its id,
// session.busy, resume_run with the other's decisions, the 2025-era binding bound to the
// principal). Then two servers sharing one --state store: the same session name under
// two principals is two claims in the store, never session.moved.
import crypto from 'node:crypto';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { test, run, assert, eq, tidepool } from './harness.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-tenants-'));
const servers = [];
const ISSUER = 'https://issuer.tenants.test';
const RESOURCE = 'http://127.0.0.1/mcp';
const JWT_SECRET = 'tenants-hs256-secret-0123456789abcdef';
const SECRET = crypto.randomBytes(32).toString('hex');
fs.writeFileSync(path.join(tmp, 'secret'), SECRET, { mode: 0o600 });

const b64u = (b) => Buffer.from(b).toString('base64url');
function jwt(sub, scope) {
  const now = Math.floor(Date.now() / 1000);
  const head = b64u(JSON.stringify({ alg: 'HS256', typ: 'JWT' }));
  const body = b64u(JSON.stringify({ iss: ISSUER, aud: RESOURCE, sub, scope, iat: now, exp: now + 3600 }));
  const sig = crypto.createHmac('sha256', JWT_SECRET).update(`${head}.${body}`).digest('base64url');
  return `${head}.${body}.${sig}`;
}

// The 2025-era binding as mcp/approve.c makes it: HMAC-SHA256 under a key derived from the
// secret file's SHA-256, of run, seq, tool, the arguments' SHA-256 and "len:principal".
function binding(run, seq, tool, args, principal) {
  const secret = crypto.createHash('sha256').update(SECRET).digest();
  const key = crypto.createHmac('sha256', secret).update('tidepool approval binding v1').digest();
  const ah = crypto.createHash('sha256').update(args).digest('hex');
  let msg = `${run}\n${seq}\n${tool}\n${ah}`;
  if (principal) msg += `\n${Buffer.byteLength(principal)}:${principal}`;
  return crypto.createHmac('sha256', key).update(msg).digest('hex');
}

const config = {
  auth: {
    resource: RESOURCE, required_scopes: ['mcp'],
    tokens: [
      { token: 'alice-token-0123456789', principal: 'alice', scopes: ['mcp', 'kv:write'] },
      { token: 'bob-token-0123456789ab', principal: 'bob', scopes: ['mcp'] }],
    jwt: { issuer: ISSUER, secret: JWT_SECRET },
  },
  policy: {
    default: 'allow',
    rules: [
      { tools: 'kv.set', effect: 'allow', requires: ['kv:write'] },
      { tools: 'test.echo', effect: 'ask', reason: 'echo needs a person' }],
  },
};
const cfgFile = path.join(tmp, 'tenants.json');
fs.writeFileSync(cfgFile, JSON.stringify(config));

function start(args = []) {
  return new Promise((resolve, reject) => {
    const p = spawn(tidepool, ['mcp', '--test-tools', '--http', '127.0.0.1:0', '--config', cfgFile,
      '--secret-file', path.join(tmp, 'secret'), ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    const srv = { proc: p, stderr: () => err, exited: new Promise((r) => p.on('exit', (code, sig) => r({ code, sig }))) };
    servers.push(srv);
    p.stderr.setEncoding('utf8');
    p.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/serving on (http:\/\/127\.0\.0\.1:(\d+)\/mcp)/);
      if (m && !srv.url) { srv.url = m[1]; resolve(srv); }
    });
    p.on('exit', (code) => { if (!srv.url) reject(new Error(`exited ${code}: ${err}`)); });
  });
}

async function client(srv, bearer) {
  const c = new Client({ name: 'tenants', version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(new URL(srv.url),
    { requestInit: { headers: { authorization: `Bearer ${bearer}` } } }));
  return c;
}

// A 2026-07-28 tools/call of run_lua as one raw POST (the request id is the caller's).
function rawCall(srv, bearer, id, code) {
  const body = JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'run_lua', arguments: { code } } });
  const u = new URL(srv.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body),
        accept: 'application/json, text/event-stream', authorization: `Bearer ${bearer}`,
        'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'run_lua' } }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { data += d; });
      res.on('end', () => { try { resolve(JSON.parse(data)); } catch { resolve({ raw: data, status: res.statusCode }); } });
    });
    req.on('error', reject);
    req.end(body);
  });
}

const lua = (c, code, session = 'main') =>
  c.callTool({ name: 'run_lua', arguments: session ? { code, session } : { code } });

// Everything two principals do to each other in the session "main"; as and bs are their
// bearer credentials.
async function apart(srv, as, bs) {
  const alice = await client(srv, as), bob = await client(srv, bs);
  const a1 = await lua(alice, 'secret = "alice-1"; function greet() return "alice greets" end; return 1');
  eq([a1.structuredContent.result, a1.structuredContent.session.state], [1, 'new'], 'alice makes "main"');

  // bob's "main" is his own: new, without alice's globals
  const b1 = await lua(bob, 'return {secret = secret or "none", greet = type(greet)}');
  eq([b1.structuredContent.result, b1.structuredContent.session], [{ greet: 'nil', secret: 'none' },
    { id: 'main', state: 'new' }], 'bob\'s "main" is new and empty');

  // bob replaces greet in his "main" with one that writes under the caller's scopes
  const b2 = await lua(bob, 'function greet() tools.kv.set{key = "pwned", value = 1}; return "bob greets" end; secret = "bob"; return 2');
  eq(b2.structuredContent.result, 2, 'bob defines greet in his session');
  const a2 = await lua(alice, 'return {secret = secret, greet = greet()}');
  eq([a2.structuredContent.result, a2.structuredContent.session.state],
    [{ greet: 'alice greets', secret: 'alice-1' }, 'continued'], 'alice\'s globals and function are hers');

  // kv under the other's scopes: bob's own kv.set is denied, and nothing wrote "pwned"
  const b3 = await lua(bob, 'return tools.kv.set{key = "bob-key", value = 1}');
  eq(b3.structuredContent.error.code, 'tool.denied', 'bob lacks kv:write');
  const b4 = await lua(bob, 'return greet()');
  eq(b4.structuredContent.error.code, 'tool.denied', 'bob\'s greet runs with bob\'s scopes');
  const a3 = await lua(alice, 'return tools.kv.get{key = "pwned"}.found');
  eq(a3.structuredContent.result, false, 'no kv.set ran under alice\'s scopes');

  // alice's paused run: bob learns nothing of it, and cannot decide it
  const p = await lua(alice, 'return tools.test.echo{n = 7}.n');
  const v = p.structuredContent;
  eq([v.status, v.pending.map((x) => [x.seq, x.tool])], ['paused', [[1, 'test.echo']]], 'alice\'s run pauses');
  eq(v.pending[0].binding, binding(v.run, 1, 'test.echo', '{"n":7}', 'alice'),
    'the binding is bound to alice (the secret, run, seq, tool, arguments and principal)');
  assert(v.pending[0].binding !== binding(v.run, 1, 'test.echo', '{"n":7}', 'bob'), 'not to bob');
  const busy = await lua(alice, 'return 1');
  eq(busy.structuredContent.error.code, 'session.busy', 'alice\'s own "main" is busy');
  assert(busy.structuredContent.error.message.includes(v.run), 'and names her paused run');
  const b5 = await lua(bob, 'return secret');
  eq([b5.structuredContent.ok, b5.structuredContent.result], [true, 'bob'], 'bob\'s "main" is not busy');
  assert(!JSON.stringify(b5).includes(v.run), 'bob\'s answer does not name alice\'s run');
  const decisions = [{ seq: 1, approve: true, binding: v.pending[0].binding }];
  const stolen = await bob.callTool({ name: 'resume_run', arguments: { run: v.run, decisions } });
  const fake = `0-${crypto.randomBytes(16).toString('hex')}`;
  const none = await bob.callTool({ name: 'resume_run', arguments: { run: fake, decisions } });
  eq([stolen.isError, stolen.structuredContent.error.code], [true, 'run.unknown'],
    'bob cannot resume alice\'s run with her own decisions');
  eq(stolen.structuredContent.error.message.replace(v.run, 'X'),
    none.structuredContent.error.message.replace(fake, 'X'),
    'the refusal is the one of a run that does not exist');
  const mine = await alice.callTool({ name: 'resume_run', arguments: { run: v.run, decisions } });
  eq([mine.structuredContent.ok, mine.structuredContent.result], [true, 7], 'alice resumes her run');
  const a4 = await lua(alice, 'return secret');
  eq(a4.structuredContent.result, 'alice-1', 'alice\'s "main" takes calls again');

  // bob's notifications/cancelled with the id of alice's request in flight cancels nothing
  // (mcp/http.c matches a cancellation to the protocol session that sent it)
  const slow = rawCall(srv, as, 'req-1', 'tools.test.sleep{ms = 1500}; return "done"');
  await new Promise((r) => setTimeout(r, 400));
  await bob.notification({ method: 'notifications/cancelled', params: { requestId: 'req-1', reason: 'bob' } });
  const done = await slow;
  eq(done.result && done.result.structuredContent.result, 'done', `alice's call ran to its end (${JSON.stringify(done).slice(0, 300)})`);
  await alice.close();
  await bob.close();
}

test('static tokens: alice and bob each have a session "main", apart in every way', async () => {
  const srv = await start();
  await apart(srv, 'alice-token-0123456789', 'bob-token-0123456789ab');
  srv.proc.kill('SIGTERM');
  eq(await srv.exited, { code: 0, sig: null }, 'exit');
}, 30000);

test('JWTs: alice and bob each have a session "main", apart in every way', async () => {
  const srv = await start();
  await apart(srv, jwt('alice', 'mcp kv:write'), jwt('bob', 'mcp'));
  srv.proc.kill('SIGTERM');
  eq(await srv.exited, { code: 0, sig: null }, 'exit');
}, 30000);

test('two servers sharing --state: "main" of alice on one and of bob on the other are two sessions, never session.moved', async () => {
  const dir = path.join(tmp, 'state');
  fs.mkdirSync(dir);
  // --http 127.0.0.1:0 names no port: each server says who it is with --advertise
  const s1 = await start(['--state', dir, '--advertise', 'http://server-1.test/mcp']);
  const s2 = await start(['--state', dir, '--advertise', 'http://server-2.test/mcp']);
  const alice = await client(s1, 'alice-token-0123456789'), bob = await client(s2, jwt('bob', 'mcp'));
  const a = await lua(alice, 'x = "alice"; return x');
  eq([a.structuredContent.result, a.structuredContent.session.state], ['alice', 'new'], 'alice on server 1');
  const b = await lua(bob, 'return x or "none"');
  eq([b.isError, b.structuredContent.result, b.structuredContent.session.state], [false, 'none', 'new'],
    'bob on server 2: his own "main", claimed under his name');
  // alice's "main" through server 2 is hers, held by server 1
  const alice2 = await client(s2, jwt('alice', 'mcp kv:write'));
  const moved = await lua(alice2, 'return x');
  eq(moved.structuredContent.error.code, 'session.moved', 'alice\'s "main" lives on server 1');
  assert(moved.structuredContent.error.message.includes('http://server-1.test/mcp'),
    moved.structuredContent.error.message);
  for (const c of [alice, bob, alice2]) await c.close();
  for (const s of [s1, s2]) s.proc.kill('SIGTERM');
  for (const s of [s1, s2]) eq(await s.exited, { code: 0, sig: null }, 'exit');
}, 30000);

process.on('exit', () => {
  for (const s of servers) if (s.proc.exitCode === null) s.proc.kill('SIGKILL');
  fs.rmSync(tmp, { recursive: true, force: true });
});
await run();
