// Durable paused runs (tidepool mcp --state, engine/front/mcp/pause.c): a run
// paused for an approval is in the state store before its paused result is sent, so it
// survives kill -9; a new server with the same --state and --secret-file resumes it by
// replay (the calls before the held one are answered from the log: the counting tool is
// not called again). Also: decline, expiry, a changed policy, divergence, sessions.
// Raw JSON-RPC on stdio; the tools are spec/fixtures/durable/dur.lua (dur.count counts
// its real calls in a file; dur.pay is what the policy asks about).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, run, assert, eq, sleep, root, mcpServer } from './harness.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-durable-'));
const policy = (reason) => ({ policy: { default: 'allow', rules: [
  { tools: 'dur.pay', effect: 'ask', reason } ] } });
const config = path.join(tmp, 'policy.json'), config2 = path.join(tmp, 'policy2.json');
fs.writeFileSync(config, JSON.stringify(policy('payments need a person')));
fs.writeFileSync(config2, JSON.stringify(policy('payments need two people')));
const secret = path.join(tmp, 'secret');
fs.writeFileSync(secret, 's'.repeat(48));
const REASON = 'payments need a person (policy rule 0)';

// A server on state dir `state`; responses by id.
function server(state, { args = [], env = {}, cfg = config, init = true } = {}) {
  const s = mcpServer(['mcp', '--no-builtin-tools', '--tools', path.join(root, 'spec/fixtures/durable'),
    '--config', cfg, '--workers', '1', '--state', state, '--secret-file', secret, ...args], { env });
  s.ready = !init ? Promise.resolve() : s.initialize({ name: 'durable' });
  return s;
}

const view = (m) => {
  assert(m.result, `a result: ${JSON.stringify(m)}`);
  return m.result.structuredContent;
};
let dirs = 0;
const fresh = () => {
  const d = path.join(tmp, `case${++dirs}`);
  fs.mkdirSync(d);
  return { state: path.join(d, 'state'), count: path.join(d, 'count') };
};
const realCalls = (file) => Number(fs.readFileSync(file, 'utf8'));
// dur.count, then dur.pay with an amount made from its result, a math.random draw and the
// time (the replay must draw the same number and read the same clock, or its arguments
// would differ from the log's), then a result with them.
const script = (count) => `local a = tools.dur.count{file = ${JSON.stringify(count)}}
local x, t = math.random(1000000), os.time()
local ok, r = pcall(tools.dur.pay, {amount = 100 + a.n, x = x, t = t})
return {n = a.n, x = x, t = t, ok = ok, paid = ok and r.paid or r.message}`;

// Pauses script in a new server on c.state; returns the paused result and the server.
async function pause(c, code = script(c.count), opts = {}) {
  const s = server(c.state, opts);
  await s.ready;
  const v = view(await s.call('run_lua', { code }));
  eq([v.status, v.pending.length, v.pending[0].tool, v.pending[0].reason], ['paused', 1, 'dur.pay', REASON], 'paused');
  return { s, v };
}
async function refused(m, code, pattern) {
  eq(m.result.isError, true, `isError for ${code}`);
  const v = view(m);
  eq(v.error.code, code, `code (${v.error.message})`);
  assert(pattern.test(v.error.message), `message: ${v.error.message}`);
}
const decide = (v, approve, note) => [{ seq: v.pending[0].seq, approve, binding: v.pending[0].binding,
  ...(note ? { note } : {}) }];

test('a paused run survives kill -9: a new server resumes it, and the calls before are not made again', async () => {
  const c = fresh();
  const { s, v } = await pause(c);
  const held = v.pending[0].args;
  eq([v.pending[0].seq, held.amount, Number.isInteger(held.x), Number.isInteger(held.t)], [2, 101, true, true], 'held call');
  eq(await s.kill(), 'SIGKILL', 'killed');
  eq(realCalls(c.count), 1, 'dur.count ran once');
  await sleep(1100);  // os.time() reads another second now, unless replayed
  const s2 = server(c.state);
  await s2.ready;
  const m = await s2.call('resume_run', { run: v.run, decisions: decide(v, true) });
  eq(m.result.isError, false, `isError: ${JSON.stringify(m.result)}`);
  const r = view(m);
  eq(r.result, { n: 1, ok: true, paid: 101, t: held.t, x: held.x }, 'the result: the same draw and time');
  eq(realCalls(c.count), 1, 'dur.count was answered from the log, not called again');
  // the run ended: it is gone from the store too
  await refused(await s2.call('resume_run', { run: v.run, decisions: decide(v, true) }), 'run.unknown',
    /^there is no paused run "0-[0-9a-f]{32}", here or in the state store/);
  await s2.kill();
});

test('declined after a restart: the script reads tool.denied with the note', async () => {
  const c = fresh();
  const { s, v } = await pause(c);
  await s.kill();
  const s2 = server(c.state);
  await s2.ready;
  const r = view(await s2.call('resume_run', { run: v.run, decisions: decide(v, false, 'too much') }));
  eq([r.ok, r.result.n, r.result.ok, r.result.paid],
    [true, 1, false, "tools.dur.pay was denied by the host's policy: the person declined: too much"], 'result');
  eq(realCalls(c.count), 1, 'dur.count not called again');
  await s2.kill();
});

test('a wrong binding after a restart is refused, and the run can still be decided', async () => {
  const c = fresh();
  const { s, v } = await pause(c);
  await s.kill();
  const s2 = server(c.state);
  await s2.ready;
  const b = v.pending[0].binding;
  const bad = [{ seq: 2, approve: true, binding: (b[0] === 'a' ? 'b' : 'a') + b.slice(1) }];
  await refused(await s2.call('resume_run', { run: v.run, decisions: bad }), 'approval.binding',
    new RegExp(`^arguments\\.decisions\\[0\\]\\.binding does not match call 2 of run ${v.run}`));
  // the run now waits in this server
  const r = view(await s2.call('resume_run', { run: v.run, decisions: decide(v, true) }));
  eq([r.ok, r.result.paid], [true, 101], 'approved after the refusal');
  eq(realCalls(c.count), 1, 'dur.count not called again');
  await s2.kill();
});

test('an expired run: run.expired after the restart', async () => {
  const c = fresh();
  const { s, v } = await pause(c, undefined, { args: ['--pause-ttl', '500ms'] });
  assert(/Undecided after 500ms/.test(v.message), v.message);
  await s.kill();
  await sleep(900);
  const s2 = server(c.state, { args: ['--pause-ttl', '500ms'] });
  await s2.ready;
  await refused(await s2.call('resume_run', { run: v.run, decisions: decide(v, true) }), 'run.expired',
    new RegExp(`^run ${v.run} expired: it waited for decisions longer than the --pause-ttl`));
  // and it is gone
  await refused(await s2.call('resume_run', { run: v.run, decisions: decide(v, true) }), 'run.unknown',
    /^there is no paused run/);
  eq(realCalls(c.count), 1, 'nothing ran again');
  await s2.kill();
});

test('a changed policy between the two servers: run.policy_changed, nothing runs', async () => {
  const c = fresh();
  const { s, v } = await pause(c);
  await s.kill();
  const s2 = server(c.state, { cfg: config2 });
  await s2.ready;
  await refused(await s2.call('resume_run', { run: v.run, decisions: decide(v, true) }), 'run.policy_changed',
    new RegExp(`^run ${v.run} was paused under another policy: the config's policy section changed since`));
  await s2.kill();
  // under the first policy again it resumes
  const s3 = server(c.state);
  await s3.ready;
  eq(view(await s3.call('resume_run', { run: v.run, decisions: decide(v, true) })).result.paid, 101, 'resumed');
  eq(realCalls(c.count), 1, 'dur.count not called again');
  await s3.kill();
});

test('a replay that diverges (other arguments at the held call) ends with replay.divergence naming the seq', async () => {
  const c = fresh();
  // the amount depends on how many tools the server has: the second server has one more
  const code = `local n = #tools.list()
local a = tools.dur.count{file = ${JSON.stringify(c.count)}}
return tools.dur.pay{amount = n}`;
  const { s, v } = await pause(c, code);
  eq(v.pending[0].args, { amount: 3 }, 'three tools');
  await s.kill();
  const s2 = server(c.state, { env: { DUR_EXTRA: '1' } });
  await s2.ready;
  const m = await s2.call('resume_run', { run: v.run, decisions: decide(v, true) });
  await refused(m, 'replay.divergence', /^the replay diverged from its log at call 2: the log has tools\.dur\.pay with arguments hash [0-9a-f]{64}, and the script called tools\.dur\.pay with/);
  eq(realCalls(c.count), 1, 'dur.count not called again');
  await refused(await s2.call('resume_run', { run: v.run, decisions: decide(v, true) }), 'run.unknown',
    /^there is no paused run/);
  await s2.kill();
});

test('paused again after a restart, at the next ask: a second restart resumes that one', async () => {
  const c = fresh();
  const code = `local a = tools.dur.count{file = ${JSON.stringify(c.count)}}
local p1 = tools.dur.pay{amount = 1}
local b = tools.dur.count{file = ${JSON.stringify(c.count)}}
local p2 = tools.dur.pay{amount = 2}
return {a.n, p1.paid, b.n, p2.paid}`;
  const { s, v } = await pause(c, code);
  eq([v.pending[0].seq, v.pending[0].args], [2, { amount: 1 }], 'first ask');
  await s.kill();
  const s2 = server(c.state);
  await s2.ready;
  const w = view(await s2.call('resume_run', { run: v.run, decisions: decide(v, true) }));
  eq([w.status, w.run, w.pending.map((p) => [p.seq, p.args])], ['paused', v.run, [[4, { amount: 2 }]]], 'paused again');
  eq(realCalls(c.count), 2, 'the second dur.count ran');
  await s2.kill();
  const s3 = server(c.state);
  await s3.ready;
  const r = view(await s3.call('resume_run', { run: v.run, decisions: decide(w, true) }));
  eq([r.ok, r.result], [true, [1, 1, 2, 2]], 'result');
  eq(realCalls(c.count), 2, 'no dur.count ran again');
  await s3.kill();
});

test('2026-07-28: the requestState of an input_required result resumes after a restart', async () => {
  const c = fresh();
  const META26 = { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientCapabilities': { elicitation: {} } } };
  const code = script(c.count);
  const s = server(c.state, { init: false });
  const m = await s.call('run_lua', { code }, META26);
  eq([m.result.resultType, Object.keys(m.result.inputRequests)], ['input_required', ['approve-2']], 'input_required');
  await s.kill();
  const s2 = server(c.state, { init: false });
  const m2 = await s2.call('run_lua', { code }, { ...META26, requestState: m.result.requestState,
    inputResponses: { 'approve-2': { action: 'accept', content: { approve: true } } } });
  const r = view(m2);
  eq([r.ok, r.result.n, r.result.paid], [true, 1, 101], `result ${JSON.stringify(m2.result)}`);
  eq(realCalls(c.count), 1, 'dur.count not called again');
  await s2.kill();
});

test('killed while running after its approval: a restart refuses it (run.interrupted), nothing is made twice', async () => {
  const c = fresh();
  const code = `local a = tools.dur.count{file = ${JSON.stringify(c.count)}}
tools.dur.pay{amount = 1}
tools.dur.nap{ms = 5000}
return tools.dur.count{file = ${JSON.stringify(c.count)}}.n`;
  const { s, v } = await pause(c, code);
  s.call('resume_run', { run: v.run, decisions: decide(v, true) }).catch(() => {});
  await sleep(700);  // dur.pay was approved and made; dur.nap sleeps
  await s.kill();
  const s2 = server(c.state);
  await s2.ready;
  await refused(await s2.call('resume_run', { run: v.run, decisions: decide(v, true) }), 'run.interrupted',
    new RegExp(`^run ${v.run} cannot be resumed: it was resumed already and was running when its server stopped`));
  eq(realCalls(c.count), 1, 'the second dur.count never ran');
  await s2.kill();
});

test('an exposed tool (--expose-tools) that asks: resumed after a restart, its result in the tool\'s own form', async () => {
  const c = fresh();
  const s = server(c.state, { args: ['--expose-tools'] });
  await s.ready;
  const v = view(await s.call('dur_pay', { amount: 7 }));
  eq([v.status, v.pending[0].seq, v.pending[0].tool, v.pending[0].args], ['paused', 1, 'dur.pay', { amount: 7 }], 'paused');
  await s.kill();
  const s2 = server(c.state, { args: ['--expose-tools'] });
  await s2.ready;
  const m = await s2.call('resume_run', { run: v.run, decisions: decide(v, true) });
  eq([m.result.isError, m.result.structuredContent], [false, { paid: 7 }], `result ${JSON.stringify(m.result)}`);
  await s2.kill();
});

test('a record over 1 MiB is not cut: the paused result says the run waits in this process only', async () => {
  const c = fresh();
  const code = `-- ${'x'.repeat(1048000)}\n${script(c.count)}`;
  const { s, v } = await pause(c, code);
  assert(v.message.endsWith('It could not be kept in the state store (its record (the script and the pending calls\' ' +
    'arguments) is over the store\'s 1 MiB a value: keep scripts and tool arguments small (write large data to a file ' +
    'and pass its path)): it waits in this server process only and does not survive a restart.'), v.message.slice(-400));
  // it still waits here
  const r = view(await s.call('resume_run', { run: v.run, decisions: decide(v, true) }));
  eq([r.ok, r.result.paid], [true, 101], 'resumed in the same process');
  await s.kill();
});

test('a session\'s paused run says it does not survive a restart', async () => {
  const c = fresh();
  const s = server(c.state);
  await s.ready;
  const v = view(await s.call('run_lua', { code: script(c.count), session: 'one' }));
  eq(v.status, 'paused', 'paused');
  assert(v.message.endsWith("This run is in a session: it does not survive a restart of the server " +
    "(the session's globals live in this process)."), v.message);
  await s.kill();
  const s2 = server(c.state);
  await s2.ready;
  await refused(await s2.call('resume_run', { run: v.run, decisions: decide(v, true) }), 'run.unknown',
    /^there is no paused run/);
  await s2.kill();
});

run().finally(() => fs.rmSync(tmp, { recursive: true, force: true }));
