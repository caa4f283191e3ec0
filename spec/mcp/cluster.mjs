// Several `tidepool mcp --http` servers sharing one Redis (--state redis://...) behave as
// one server: this suite starts a redis-server and three tidepool servers on 127.0.0.1
// (free ports, no persistence, a temporary directory), then, with the SDK 1.x client
// over Streamable HTTP:
//   - 1,000 runs spread over the three, each writing a kv key any server reads back;
//   - a rate limit (policy, key "global") shared exactly: 60 calls, capacity 25, 25 pass;
//   - a session claimed by one server: a call for it through another answers session.moved
//     naming the owner;
//   - a run paused for an approval on one server, approved through another (restored from
//     Redis by replay);
//   - one server killed (SIGKILL) while runs are in flight: every run a client saw
//     acknowledged left its key in the store, and the two others keep serving.
// Run by scripts/cluster-test.sh (make test-cluster), which checks what it needs first.
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { test, run, assert, eq, sleep, tidepool } from './harness.mjs';

const RUNS = 1000;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-cluster-'));
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
    if (proc && proc.exitCode !== null) {
      throw new Error(`${what} exited (status ${proc.exitCode}) before listening: ${proc.stderrText.slice(0, 500)}`);
    }
    const ok = await new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1', () => { c.end(); resolve(true); });
      c.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > until) throw new Error(`${what} did not listen on 127.0.0.1:${port} within ${ms} ms`);
    await sleep(50);
  }
}

function start(cmd, args, name) {
  const p = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  p.stderrText = '';
  p.stderr.on('data', (d) => { p.stderrText += d; });
  p.name = name;
  procs.push(p);
  return p;
}

let redisPort, state;
const servers = [];   // { port, url, proc }

const config = {
  policy: {
    default: 'allow',
    rules: [{ tools: 'time.now', effect: 'allow',
              rate: { capacity: 25, per_second: 0.0001, key: 'global' } },
            { tools: 'kv.delete', effect: 'ask', reason: 'deleting needs a person' }],
  },
};

async function startServer(i) {
  const port = await freePort();
  const proc = start(tidepool, ['mcp', '--http', `127.0.0.1:${port}`, '--state', state,
    '--config', path.join(tmp, 'cluster.json'), '--workers', '2',
    '--secret-file', path.join(tmp, 'secret')], `tidepool ${i}`);
  await waitPort(port, `tidepool mcp ${i}`, 10000, proc);
  const s = { port, url: `http://127.0.0.1:${port}/mcp`, proc };
  servers[i] = s;
  return s;
}

async function client(s) {
  const c = new Client({ name: 'tidepool-cluster', version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(new URL(s.url)));
  return c;
}

const runLua = (c, code, extra = {}) =>
  c.callTool({ name: 'run_lua', arguments: { code, ...extra } });

let clients = [];

test('redis and three tidepool servers start, sharing the store', async () => {
  redisPort = await freePort();
  start('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '',
    '--appendonly', 'no', '--dir', tmp], 'redis-server');
  await waitPort(redisPort, 'redis-server');
  state = `redis://127.0.0.1:${redisPort}/0?prefix=cluster:`;
  fs.writeFileSync(path.join(tmp, 'cluster.json'), JSON.stringify(config));
  // one secret for all three: a binding one server made, another accepts
  fs.writeFileSync(path.join(tmp, 'secret'), crypto.randomBytes(32).toString('hex'), { mode: 0o600 });
  for (let i = 0; i < 3; i++) await startServer(i);
  clients = await Promise.all(servers.map(client));
  const r = await runLua(clients[0], 'return 1 + 1');
  eq(r.structuredContent.result, 2, 'a first run');
}, 30000);

test(`${RUNS} runs spread over the three servers, each key readable through any server`, async () => {
  let next = 0, failures = [];
  async function lane() {
    while (next < RUNS) {
      const i = next++;
      const c = clients[i % 3];
      const r = await runLua(c, `tools.kv.set{key = "run:${i}", value = ${i}}; return ${i}`);
      if (r.isError || r.structuredContent.result !== i) failures.push([i, r.structuredContent]);
    }
  }
  await Promise.all(Array.from({ length: 16 }, lane));
  eq(failures.slice(0, 3), [], 'failed runs');
  // read back through another server than the one that wrote each key
  const r = await runLua(clients[1], `
    local missing = {}
    for i = 0, ${RUNS - 1} do
      local v = tools.kv.get{key = "run:" .. i}
      if v.value ~= i then missing[#missing + 1] = i end
    end
    return #missing`);
  eq(r.structuredContent.result, 0, 'keys missing when read back');
}, 120000);

test('a rate limit with key "global" is shared exactly by the three servers', async () => {
  const outcomes = await Promise.all(Array.from({ length: 60 }, (_, i) =>
    runLua(clients[i % 3], 'return tools.time.now().unix_ms > 0')));
  const ok = outcomes.filter((r) => r.structuredContent.ok).length;
  const limited = outcomes.filter((r) => !r.structuredContent.ok &&
    r.structuredContent.error.code === 'tool.rate_limited').length;
  eq([ok, limited], [25, 35], '[passed, rate limited] of 60 calls against capacity 25');
}, 60000);

test('a session owned by one server: a call for it through another answers session.moved naming the owner', async () => {
  const a = await runLua(clients[0], 'x = 41; return x', { session: 'owned-by-0' });
  eq(a.structuredContent.result, 41, 'the first call makes the session on server 0');
  const b = await runLua(clients[1], 'return x + 1', { session: 'owned-by-0' });
  assert(b.isError, 'an error');
  eq(b.structuredContent.error.code, 'session.moved', 'code');
  assert(b.structuredContent.error.message.includes(servers[0].url),
    `the message names the owner ${servers[0].url}: ${b.structuredContent.error.message}`);
  const c = await runLua(clients[0], 'return x + 1', { session: 'owned-by-0' });
  eq(c.structuredContent.result, 42, 'the owner still serves it, globals kept');
}, 30000);

test('a run paused on one server is approved through another: it is restored from Redis and goes on there, and only there', async () => {
  const script = `tools.kv.set{key = "doomed", value = 1}
    local d = tools.kv.delete{key = "doomed"}
    return {deleted = d.deleted, after = tools.kv.get{key = "doomed"}.found}`;
  const p = await runLua(clients[0], script);
  const v = p.structuredContent;
  eq([v.status, v.pending.map((c) => [c.seq, c.tool])], ['paused', [[2, 'kv.delete']]],
    'paused on server 0 at the delete');
  const r = await clients[2].callTool({ name: 'resume_run', arguments: { run: v.run,
    decisions: [{ seq: 2, approve: true, binding: v.pending[0].binding }] } });
  eq([r.isError, r.structuredContent.ok, r.structuredContent.result], [false, true,
    { after: false, deleted: true }], 'server 2 restored the run and it went on');
  const g = await runLua(clients[1], 'return tools.kv.get{key = "doomed"}.found');
  eq(g.structuredContent.result, false, 'the key is gone for every server');
  // server 0 still holds the paused run in memory: the same decision there is refused,
  // so the approved call is never made twice
  const again = await clients[0].callTool({ name: 'resume_run', arguments: { run: v.run,
    decisions: [{ seq: 2, approve: true, binding: v.pending[0].binding }] } });
  eq([again.isError, again.structuredContent.error.code], [true, 'run.not_paused'],
    'a second resume through the server that paused it');
  assert(again.structuredContent.error.message.includes(servers[2].url),
    `the message names the server that resumed it: ${again.structuredContent.error.message}`);
}, 60000);

test('a server killed mid-run: nothing a client saw acknowledged is lost, the others keep serving', async () => {
  const victim = servers[2];
  const acked = [], refused = [];
  let stop = false;
  async function lane(k) {
    for (let n = 0; !stop; n++) {
      const key = `kill:${k}:${n}`;
      try {
        const r = await runLua(clients[k % 3],
          `tools.kv.set{key = "${key}", value = true}; tools.time.sleep{ms = 5}; return true`);
        if (r.structuredContent && r.structuredContent.ok) acked.push(key);
        else refused.push(key);
      } catch {
        refused.push(key);     // the killed server's calls fail: not acknowledged
        if (k % 3 === 2) return;
      }
    }
  }
  const lanes = Array.from({ length: 9 }, (_, k) => lane(k));
  await sleep(400);
  victim.proc.kill('SIGKILL');
  await sleep(400);
  stop = true;
  await Promise.all(lanes);
  assert(acked.length > 20, `runs were acknowledged (${acked.length})`);
  assert(acked.some((k) => Number(k.split(':')[1]) % 3 === 2), 'some on the killed server');
  const r = await runLua(clients[0], `
    local keys, missing = ${JSON.stringify(acked).replace('[', '{').replace(/]$/, '}')}, 0
    for _, k in ipairs(keys) do
      if tools.kv.get{key = k}.value ~= true then missing = missing + 1 end
    end
    return missing`);
  eq(r.structuredContent.result, 0, 'acknowledged keys missing after the kill');
  const after = await runLua(clients[1], 'return "still here"');
  eq(after.structuredContent.result, 'still here', 'server 1 after the kill');
}, 60000);

process.on('exit', () => {
  for (const p of procs) { try { p.kill('SIGKILL'); } catch { /* gone */ } }
  fs.rmSync(tmp, { recursive: true, force: true });
});
await run();
