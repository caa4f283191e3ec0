// A cluster never makes an approved call twice, and takes over from a dead server: three
// `tidepool mcp --http` servers (A, B, C) share one redis-server through a small TCP proxy
// of this file's own, which reads the Redis commands the servers send and, at one chosen
// step of a resume, stops (SIGSTOP) or kills (SIGKILL) the redis-server before that command
// reaches it. The approved call is count.bump (spec/mcp/cluster_plugins/count.lua), which
// appends its tag to a file: a side effect outside the store, counted at the end.
//   - every step of a resume (the record read, the claim, the "running" mark, the log
//     append at the next pause, the record's removal at the end) x SIGSTOP and SIGKILL x
//     a run restored from the store and one held in memory by the server that paused it:
//     the resume is refused with state.unavailable or goes on; sent again until it goes
//     through, every approved call is made exactly once, and the same decisions sent to
//     the other servers are refused;
//   - the server that resumed a run dies while the run goes on: the others answer
//     run.interrupted naming it (once its lease lapses), never run it again;
//   - a killed server's session: session.moved naming it while its lease holds, then
//     taken over by another server, which says so (its globals are gone).
// Run by scripts/cluster-test.sh (make test-cluster) after cluster.mjs.
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { test, run, assert, eq, sleep, tidepool, root } from './harness.mjs';

const LEASE_MS = 6000;       // --lease of the three servers: longer than any stop below (3 s at most) plus a renewal period
const STORE_TIMEOUT = 1000;  // timeout_ms of the Redis URL: a stopped Redis fails ops after it
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-faults-'));
const countFile = path.join(tmp, 'count.txt');
fs.writeFileSync(countFile, '');
const procs = [];

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

async function waitPort(port, what, ms = 10000, proc = null) {
  const until = Date.now() + ms;
  for (;;) {
    if (proc && proc.exitCode !== null) throw new Error(`${what} exited (status ${proc.exitCode}): ${proc.stderrText.slice(0, 500)}`);
    const ok = await new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1', () => { c.end(); resolve(true); });
      c.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > until) throw new Error(`${what} did not listen on 127.0.0.1:${port} within ${ms} ms`);
    await sleep(50);
  }
}

function start(cmd, args, name, env = {}) {
  const p = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  p.stderrText = '';
  p.stderr.on('data', (d) => { p.stderrText += d; });
  p.name = name;
  p.exited = new Promise((r) => p.on('exit', (code, sig) => r({ code, sig })));
  procs.push(p);
  return p;
}

// ---- redis-server and the proxy ---------------------------------------------------------

let redisPort, redis;
const redisDir = path.join(tmp, 'redis');
fs.mkdirSync(redisDir);

async function startRedis() {
  redis = start('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '',
    '--appendonly', 'yes', '--appendfsync', 'always', '--dir', redisDir], 'redis-server');
  await waitPort(redisPort, 'redis-server', 10000, redis);
}

function procState(pid) {
  try { return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1][0]; } catch { return null; }
}

// The commands of one connection, parsed from RESP (hiredis sends arrays of bulk strings):
// [{args: [string...], bytes: Buffer}] and what is left of buf.
function commands(buf) {
  const out = [];
  let at = 0;
  for (;;) {
    const start = at;
    if (at >= buf.length) break;
    if (buf[at] !== 0x2a) return { out, rest: Buffer.alloc(0), raw: buf.subarray(at) };  // not RESP
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

// The proxy: forwards every connection to redis-server; once armed with (match, signal),
// the first command that matches stops or kills redis-server before it is forwarded.
const proxy = { armed: null, seen: [] };
function startProxy(port) {
  const srv = net.createServer((client) => {
    const up = net.connect(redisPort, '127.0.0.1');
    let buf = Buffer.alloc(0), held = [], open = false, busy = false;
    up.on('connect', () => { open = true; for (const b of held) up.write(b); held = []; });
    up.on('data', (d) => client.write(d));
    const end = () => { client.destroy(); up.destroy(); };
    up.on('error', end); up.on('close', end);
    client.on('error', end); client.on('close', end);
    const send = (b) => { if (open) up.write(b); else held.push(b); };
    async function pump() {
      if (busy) return;
      busy = true;
      const { out, rest, raw } = commands(buf);
      buf = Buffer.from(rest);
      for (const c of out) {
        const a = proxy.armed;
        if (a && a.match(c.args)) {
          proxy.armed = null;
          proxy.seen.push(c.args);
          if (a.signal === 'SIGKILL') {
            redis.kill('SIGKILL');
            await redis.exited;
            end();
            a.fired();
            busy = false;
            return;
          }
          redis.kill('SIGSTOP');
          for (let i = 0; i < 1000 && procState(redis.pid) !== 'T'; i++) await sleep(1);
          a.fired();
        }
        send(c.bytes);
      }
      if (raw) send(raw);
      busy = false;
      if (buf.length && commands(buf).out.length) pump();
    }
    client.on('data', (d) => { buf = Buffer.concat([buf, d]); pump(); });
  });
  return new Promise((resolve) => srv.listen(port, '127.0.0.1', () => resolve(srv)));
}

function arm(match, signal) {
  return new Promise((fired) => { proxy.armed = { match, signal, fired }; });
}

// Brings redis-server back after a fault: a new process (its AOF kept every write) after
// SIGKILL; after SIGSTOP, SIGCONT once the resume was answered (which, with Redis
// stopped, only comes once the server gave up on it: timeout_ms, noticed within a second)
// or, when nothing waits for Redis, past that time.
async function heal(signal, answered) {
  if (signal === 'SIGKILL') { await startRedis(); return; }
  await Promise.race([answered || new Promise(() => {}), sleep(STORE_TIMEOUT + 2000)]);
  redis.kill('SIGCONT');
}

// ---- the servers --------------------------------------------------------------------------

const servers = {};
let state;
const config = {
  policy: { default: 'allow', rules: [{ tools: 'count.bump', effect: 'ask', reason: 'bumps need a person' }] },
};

async function startServer(name) {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}/mcp`;
  const proc = start(tidepool, ['mcp', '--http', `127.0.0.1:${port}`, '--state', state,
    '--config', path.join(tmp, 'faults.json'), '--workers', '2', '--tools', path.join(root, 'spec/mcp/cluster_plugins'),
    '--secret-file', path.join(tmp, 'secret'), '--lease', `${LEASE_MS}ms`], `tidepool ${name}`,
  { TP_COUNT_FILE: countFile });
  await waitPort(port, `tidepool ${name}`, 10000, proc);
  const c = new Client({ name: 'tidepool-faults', version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(new URL(url)));
  servers[name] = { url, proc, c };
}

const lua = (name, code, extra = {}) =>
  servers[name].c.callTool({ name: 'run_lua', arguments: { code, ...extra } });
const resumeRun = (name, run, seq, binding) =>
  servers[name].c.callTool({ name: 'resume_run', arguments: { run, decisions: [{ seq, approve: true, binding }] } });

function counts() {
  const m = {};
  for (const l of fs.readFileSync(countFile, 'utf8').split('\n')) if (l) m[l] = (m[l] || 0) + 1;
  return m;
}

// resume_run through name until the store lets it through (a client retrying
// state.unavailable, as the message asks); the answer.
async function resumeUntil(name, run, seq, binding, first) {
  let r = first ? await first : await resumeRun(name, run, seq, binding);
  const seen = [];
  for (let i = 0; i < 60 && r.isError && r.structuredContent.error.code === 'state.unavailable'; i++) {
    seen.push(r.structuredContent.error.message);
    await sleep(250);
    r = await resumeRun(name, run, seq, binding);
  }
  return { r, seen };
}

test('redis behind the proxy and three tidepool servers with --lease start', async () => {
  redisPort = await freePort();
  await startRedis();
  const proxyPort = await freePort();
  await startProxy(proxyPort);
  state = `redis://127.0.0.1:${proxyPort}/0?prefix=f:&timeout_ms=${STORE_TIMEOUT}`;
  fs.writeFileSync(path.join(tmp, 'faults.json'), JSON.stringify(config));
  fs.writeFileSync(path.join(tmp, 'secret'), crypto.randomBytes(32).toString('hex'), { mode: 0o600 });
  for (const n of ['A', 'B', 'C']) await startServer(n);
  const r = await lua('A', 'return 1 + 1');
  eq(r.structuredContent.result, 2, 'a first run');
}, 40000);

// The steps of a resume, as the commands the resuming server sends for run id.
const steps = {
  'record read': (id) => (a) => a[0] === 'GET' && a[1].endsWith(`run:${id}`),
  claim: (id) => (a) => a[0] === 'EVALSHA' && a[3] && a[3].endsWith(`\x1frun:${id}`),
  'running mark': (id) => (a) => a[0] === 'EVALSHA' && a[3] && a[3].endsWith(`run:${id}`) &&
    !a[3].endsWith(`\x1frun:${id}`) && a[5] && a[5].includes('"running"'),
  'log append': (id) => (a) => a[0] === 'EVALSHA' && a[3] && a[3].endsWith(`log:${id}`),
  result: (id) => (a) => a[0] === 'DEL' && a[1] && a[1].endsWith(`run:${id}`),
};

// What the first answer of a resume says when the fault hit its step.
const firstSays = {
  'record read': 'the state store failed to read the run\'s record',
  claim: 'the state store failed to claim the run for this server',
  'running mark': 'the state store failed to mark the run as running',
  'log append': 'It could not be kept in the state store',
};

let scenario = 0;
for (const via of ['B', 'A']) for (const step of Object.keys(steps)) {
  if (via === 'A' && step === 'record read') continue;  // A holds the pause in memory
  const others = via === 'A' ? ['B', 'C'] : ['A', 'C'];
  for (const signal of ['SIGSTOP', 'SIGKILL']) {
    test(`${signal} of redis at the ${step} of a resume ${via === 'B' ? 'restored from the store' : 'held in memory'}: every approved call is made exactly once`, async () => {
      const tag = `s${++scenario}`;
      const p = await lua('A', `local a = tools.count.bump{tag = "${tag}-a"}
        local b = tools.count.bump{tag = "${tag}-b"}
        return {a = a.n, b = b.n}`);
      const v = p.structuredContent;
      eq([v.status, v.pending.map((x) => [x.seq, x.tool])], ['paused', [[1, 'count.bump']]], 'paused on A');
      const match = steps[step](v.run);
      // resumed through via (B restores it from the store, A holds it): the fault hits the
      // first approval's resume, or for the result the second's
      let r1, fired, seen = [];
      if (step !== 'result') {
        fired = arm(match, signal);
        const first = resumeRun(via, v.run, 1, v.pending[0].binding);
        await fired;
        await heal(signal, first);
        ({ r: r1, seen } = await resumeUntil(via, v.run, 1, v.pending[0].binding, first));
      }
      else ({ r: r1 } = await resumeUntil(via, v.run, 1, v.pending[0].binding));
      const v1 = r1.structuredContent;
      eq([r1.isError, v1.status, v1.pending && v1.pending.map((x) => x.seq)], [false, 'paused', [2]],
        `the first approval went through on ${via} (${JSON.stringify(v1).slice(0, 400)})`);
      if (step === 'log append') assert(v1.message.includes(firstSays[step]), v1.message);
      else if (step !== 'result') {
        assert(seen.length > 0 && seen[0].includes(firstSays[step]),
          `the first resume was refused with state.unavailable: ${seen[0]}`);
        assert(seen[0].includes('nothing of it ran'), seen[0]);
      }
      let r2;
      if (step === 'result') {
        fired = arm(match, signal);
        const second = resumeRun(via, v.run, 2, v1.pending[0].binding);
        await fired;
        await heal(signal);
        r2 = await second;
      }
      else ({ r: r2 } = await resumeUntil(via, v.run, 2, v1.pending[0].binding));
      eq([r2.isError, r2.structuredContent.result], [false, { a: 1, b: 1 }],
        `the run ended (${JSON.stringify(r2.structuredContent).slice(0, 400)})`);
      // the first decisions again, through the two other servers (A still holds the pause
      // in memory when B restored it)
      for (const n of others) {
        const { r: again } = await resumeUntil(n, v.run, 1, v.pending[0].binding);
        assert(again.isError && ['run.not_paused', 'run.interrupted', 'run.unknown'].includes(again.structuredContent.error.code),
          `the same decisions through ${n} are refused: ${JSON.stringify(again.structuredContent).slice(0, 400)}`);
      }
      const c = counts();
      eq([c[`${tag}-a`], c[`${tag}-b`]], [1, 1], 'each approved call was made once');
      assert(proxy.seen.length === scenario, 'the fault was injected at that step');
    }, 60000);
  }
}

test('the server that resumed a run dies while it runs: the others answer run.interrupted naming it, and never run it again', async () => {
  const p = await lua('A', `local a = tools.count.bump{tag = "dies-a"}
    tools.time.sleep{ms = 60000}
    return a.n`);
  const v = p.structuredContent;
  eq(v.status, 'paused', 'paused on A');
  resumeRun('B', v.run, 1, v.pending[0].binding).catch(() => {});  // B dies before it answers
  for (let i = 0; i < 200 && !counts()['dies-a']; i++) await sleep(50);
  eq(counts()['dies-a'], 1, 'B made the approved call');
  servers.B.proc.kill('SIGKILL');
  await servers.B.proc.exited;
  const t0 = Date.now();
  let r, codes = [];
  for (;;) {
    r = await resumeRun('C', v.run, 1, v.pending[0].binding);
    codes.push(r.structuredContent.error && r.structuredContent.error.code);
    if (!r.isError || r.structuredContent.error.code !== 'run.not_paused' || Date.now() - t0 > LEASE_MS * 4) break;
    await sleep(300);
  }
  eq([r.isError, r.structuredContent.error.code], [true, 'run.interrupted'], `C, after B's lease lapsed (${codes})`);
  assert(r.structuredContent.error.message.includes(servers.B.url), r.structuredContent.error.message);
  const a = await resumeRun('A', v.run, 1, v.pending[0].binding);
  eq([a.isError, a.structuredContent.error.code], [true, 'run.interrupted'], 'A, which holds the pause in memory');
  eq(counts()['dies-a'], 1, 'the approved call was made once');
}, 60000);

test('a killed server\'s session: session.moved naming it while its lease holds, then another server takes it over and says so', async () => {
  const a = await lua('A', 'x = 41; return x', { session: 'doomed' });
  eq(a.structuredContent.result, 41, 'the session lives on A');
  servers.A.proc.kill('SIGKILL');
  await servers.A.proc.exited;
  const t0 = Date.now();
  const moved = await lua('C', 'return x', { session: 'doomed' });
  assert(Date.now() - t0 < LEASE_MS / 2, 'answered well within the lease');
  eq(moved.structuredContent.error && moved.structuredContent.error.code, 'session.moved', 'while A\'s lease holds');
  assert(moved.structuredContent.error.message.includes(servers.A.url), moved.structuredContent.error.message);
  let r;
  for (;;) {
    await sleep(300);
    r = await lua('C', 'return x == nil', { session: 'doomed' });
    if (!r.isError || Date.now() - t0 > LEASE_MS * 4) break;
  }
  eq([r.isError, r.structuredContent.result, r.structuredContent.session.state], [false, true, 'new'],
    'C took the session over: it starts afresh');
  assert(r.structuredContent.session.message.includes(servers.A.url) &&
    r.structuredContent.session.message.includes('took the session over'), r.structuredContent.session.message);
  assert(Date.now() - t0 >= LEASE_MS / 2, 'not before A\'s lease lapsed');
  const again = await lua('C', 'return x == nil', { session: 'doomed' });
  eq([again.structuredContent.result, again.structuredContent.session.state], [true, 'continued'], 'C holds it now');
}, 60000);

process.on('exit', () => {
  for (const p of procs) { try { p.kill('SIGCONT'); p.kill('SIGKILL'); } catch { /* gone */ } }
  fs.rmSync(tmp, { recursive: true, force: true });
});
await run();
