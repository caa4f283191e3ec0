// Approvals over MCP, raw JSON-RPC on stdio (engine/front/mcp/pause.c, approve.c): a call
// that a policy rule asks a person to approve ("effect": "ask") pauses the run for a
// client without elicitation (the paused result, resume_run, bindings, --pause-ttl), is
// asked with elicitation/create for a client that declared elicitation, and with an
// input_required result and a sealed requestState for a 2026-07-28 request. The tool is a
// plugin (spec/fixtures/tools_calls, fx.echo returns its arguments; fx.nap sleeps).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, run, assert, eq, sleep, tidepool, root, mcpServer } from './harness.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-approve-'));
const config = path.join(tmp, 'policy.json');
fs.writeFileSync(config, JSON.stringify({ policy: { default: 'allow', rules: [
  { tools: 'fx.echo', effect: 'ask', where: 'amount > 100', reason: 'big payments need a person' },
] } }));
const secretA = path.join(tmp, 'secret-a'), secretB = path.join(tmp, 'secret-b');
fs.writeFileSync(secretA, 'a'.repeat(40) + '\n');
fs.writeFileSync(secretB, 'b'.repeat(40));
const REASON = 'big payments need a person (policy rule 0)';

// A server with a reader that sorts its messages: responses by id, requests and
// notifications in order of arrival.
function server(args = [], { elicit = false, version = '2025-11-25', init = true } = {}) {
  const s = mcpServer(['mcp', '--no-builtin-tools', '--tools',
    path.join(root, 'spec/fixtures/tools_calls'), '--config', config, '--workers', '1', ...args]);
  if (init) {
    s.ready = s.initialize({ version, capabilities: elicit ? { elicitation: {} } : {}, name: 'approve' });
  }
  return s;
}

const SCRIPT = `local a = tools.fx.echo{amount = 5}
local ok, r = pcall(tools.fx.echo, {amount = 250, to = "bob"})
return {small = a.amount, ok = ok, big = ok and r.amount or r.message}`;
const runLua = (s, code, extra) => s.call('run_lua', { code }, extra);
const view = (m) => {
  assert(m.result, `a result: ${JSON.stringify(m)}`);
  eq(m.result.content[0].text, JSON.stringify(m.result.structuredContent), 'text block = structuredContent');
  return m.result.structuredContent;
};
const resume = (s, runId, decisions) => s.call('resume_run', { run: runId, decisions });

// The paused result, checked whole; returns it.
async function paused(s, code = SCRIPT, { seq = 2, args = { amount: 250, to: 'bob' }, calls = { 'fx.echo': 2 } } = {}) {
  const m = await runLua(s, code);
  eq(m.result.isError, false, 'a paused run is not an error');
  const v = view(m);
  assert(/^0-[0-9a-f]{32}$/.test(v.run), `run id ${v.run}`);
  eq(v.pending.length, 1, 'one pending call');
  assert(/^[0-9a-f]{64}$/.test(v.pending[0].binding), `binding ${v.pending[0].binding}`);
  eq(v, { calls, message: v.message, ok: false,
    pending: [{ args, binding: v.pending[0].binding, reason: REASON, seq, tool: 'fx.echo' }],
    run: v.run, status: 'paused' }, 'the paused result');
  assert(v.message.startsWith('The run is paused: a policy rule asks a person to approve the calls in pending'), v.message);
  return v;
}
async function refused(m, code, pattern) {
  eq(m.result.isError, true, `isError for ${code}`);
  const v = view(m);
  eq(v.ok, false, 'ok');
  eq(v.error.code, code, `code (${v.error.message})`);
  assert(pattern.test(v.error.message), `message: ${v.error.message}`);
  return v;
}

let s;
test('tools/list has resume_run when the config asks', async () => {
  s = server();
  await s.ready;
  const m = await s.request('tools/list', {});
  eq(m.result.tools.map((t) => t.name), ['run_lua', 'resume_run'], 'tools');
  eq(m.result.tools[1].inputSchema.required, ['run', 'decisions'], 'resume_run takes run and decisions');
});

test('a held call pauses the run; resume_run approves it and the run goes on', async () => {
  const v = await paused(s);
  const m = await resume(s, v.run, [{ seq: 2, approve: true, binding: v.pending[0].binding }]);
  eq(m.result.isError, false, 'isError');
  eq(view(m), { calls: { 'fx.echo': 2 }, logs: [], ok: true, result: { big: 250, ok: true, small: 5 } }, 'result');
});

test('a declined call: the script reads tool.denied with the note', async () => {
  const v = await paused(s);
  const m = await resume(s, v.run, [{ seq: 2, approve: false, note: 'not today', binding: v.pending[0].binding }]);
  eq(view(m).result, { big: "tools.fx.echo was denied by the host's policy: the person declined: not today",
    ok: false, small: 5 }, 'result');
});

test('paused again at the next ask, with the next seq', async () => {
  const code = 'local a = tools.fx.echo{amount = 200}\nlocal b = tools.fx.echo{amount = 300}\nreturn a.amount + b.amount';
  const v = await paused(s, code, { seq: 1, args: { amount: 200 }, calls: { 'fx.echo': 1 } });
  const m = await resume(s, v.run, [{ seq: 1, approve: true, binding: v.pending[0].binding }]);
  const w = view(m);
  eq([w.status, w.run, w.pending.map((p) => [p.seq, p.args])], ['paused', v.run, [[2, { amount: 300 }]]], 'paused again');
  const m2 = await resume(s, v.run, [{ seq: 2, approve: true, binding: w.pending[0].binding }]);
  eq(view(m2).result, 500, 'result');
});

test('parallel asks are pending together; deciding one leaves the other pending', async () => {
  const code = 'local a, b = parallel(function () return tools.fx.echo{amount = 101} end, ' +
    'function () return tools.fx.echo{amount = 102} end)\nreturn a.amount + b.amount';
  const m = await runLua(s, code);
  const v = view(m);
  eq(v.pending.map((p) => [p.seq, p.args.amount]), [[1, 101], [2, 102]], 'both pending');
  const m2 = await resume(s, v.run, [{ seq: 2, approve: true, binding: v.pending[1].binding }]);
  const w = view(m2);
  eq([w.status, w.pending.map((p) => p.seq)], ['paused', [1]], 'one still pending');
  eq(w.pending[0].binding, v.pending[0].binding, 'the same binding');
  const m3 = await resume(s, v.run, [{ seq: 1, approve: true, binding: v.pending[0].binding }]);
  eq(view(m3).result, 203, 'result');
});

test('resume_run errors: unknown run, finished run, bad arguments, seq not pending', async () => {
  await refused(await resume(s, '0-00000000000000000000000000000000', [{ seq: 1, approve: true, binding: 'x' }]),
    'run.unknown', /^there is no paused run "0-0{32}": it finished, it was ended after waiting longer than the server's --pause-ttl, or the id is wrong/);
  await refused(await s.call('resume_run', { decisions: [] }), 'tool.invalid_input', /^arguments\.run must be the run id of a paused result/);
  const v = await paused(s);
  const b = v.pending[0].binding;
  await refused(await resume(s, v.run, []), 'tool.invalid_input', /^arguments\.decisions must be a non-empty array/);
  await refused(await resume(s, v.run, [{ seq: 2, approve: 'yes', binding: b }]), 'tool.invalid_input',
    /^arguments\.decisions\[0\] must be \{seq = <integer>, approve = <boolean>, binding = <string>\}/);
  await refused(await resume(s, v.run, [{ seq: 2, approve: true, binding: b }, { seq: 2, approve: true, binding: b }]),
    'tool.invalid_input', /^arguments\.decisions\[1\] decides seq 2 again/);
  await refused(await resume(s, v.run, [{ seq: 1, approve: true, binding: b }]), 'approval.not_pending',
    new RegExp(`^arguments\\.decisions\\[0\\]\\.seq 1 is not a call run ${v.run} waits on; it waits on seq 2`));
  // none of that decided anything: the run is still paused, and a good decision goes on
  const m = await resume(s, v.run, [{ seq: 2, approve: true, binding: b }]);
  eq(view(m).result, { big: 250, ok: true, small: 5 }, 'result after the refusals');
  await refused(await resume(s, v.run, [{ seq: 2, approve: true, binding: b }]), 'run.unknown', /^there is no paused run/);
});

test('a run that is running is not paused: run.not_paused', async () => {
  const code = 'local r = tools.fx.echo{amount = 500}\ntools.fx.nap{ms = 1500}\nreturn r.amount';
  const v = await paused(s, code, { seq: 1, args: { amount: 500 }, calls: { 'fx.echo': 1 } });
  const first = resume(s, v.run, [{ seq: 1, approve: true, binding: v.pending[0].binding }]);
  await sleep(300);
  await refused(await resume(s, v.run, [{ seq: 1, approve: true, binding: v.pending[0].binding }]), 'run.not_paused',
    new RegExp(`^run ${v.run} is not paused: it is running`));
  eq(view(await first).result, 500, 'the first resume gets the result');
});

test('bindings: another run\'s binding, a changed binding, tool or arguments are refused', async () => {
  const v1 = await paused(s), v2 = await paused(s);
  assert(v1.pending[0].binding !== v2.pending[0].binding, 'same call in two runs: two bindings');
  const b = v1.pending[0].binding;
  const re = (seq, runId) => new RegExp(`^arguments\\.decisions\\[0\\]\\.binding does not match call ${seq} of run ${runId}: a binding holds only for the run, seq, tool and arguments it was issued for`);
  await refused(await resume(s, v1.run, [{ seq: 2, approve: true, binding: v2.pending[0].binding }]), 'approval.binding', re(2, v1.run));
  const flipped = (b[0] === 'a' ? 'b' : 'a') + b.slice(1);
  await refused(await resume(s, v1.run, [{ seq: 2, approve: true, binding: flipped }]), 'approval.binding', re(2, v1.run));
  await refused(await resume(s, v1.run, [{ seq: 2, approve: true, binding: b.slice(0, 63) }]), 'approval.binding', re(2, v1.run));
  await refused(await resume(s, v1.run, [{ seq: 2, approve: true, binding: b, args: { amount: 250, to: 'eve' } }]),
    'approval.binding', /^arguments\.decisions\[0\] names other arguments than call 2 of run/);
  await refused(await resume(s, v1.run, [{ seq: 2, approve: true, binding: b, tool: 'fx.put' }]),
    'approval.binding', /^arguments\.decisions\[0\] names another tool than call 2 of run/);
  // the run of the other binding refuses this one too; each takes its own
  await refused(await resume(s, v2.run, [{ seq: 2, approve: true, binding: b }]), 'approval.binding', re(2, v2.run));
  const m1 = await resume(s, v1.run, [{ seq: 2, approve: true, binding: b, tool: 'fx.echo', args: { to: 'bob', amount: 250 } }]);
  eq(view(m1).result.big, 250, 'the echoed call with its own binding');
  eq(view(await resume(s, v2.run, [{ seq: 2, approve: false, binding: v2.pending[0].binding }])).result.ok, false, 'run 2 declined');
  eq(await s.close(), 0, 'exit status');
});

test('a session with a paused run says so, and takes calls again once it is decided', async () => {
  s = server();
  await s.ready;
  const code = 'x = (x or 0) + 1\nlocal r = tools.fx.echo{amount = 400}\nreturn {x = x, amount = r.amount}';
  const m = await s.call('run_lua', { code, session: 'pay' });
  const v = view(m);
  eq([v.status, v.session], ['paused', { id: 'pay', state: 'new' }], 'paused in the session');
  await refused(await s.call('run_lua', { code: 'return x', session: 'pay' }), 'session.busy',
    new RegExp(`^session "pay" has a paused run \\(${v.run}\\) that waits for a person's decisions: decide it with resume_run first`));
  const r = await resume(s, v.run, [{ seq: 1, approve: true, binding: v.pending[0].binding }]);
  eq(view(r).result, { amount: 400, x: 1 }, 'result');
  eq(view(await s.call('run_lua', { code: 'return x', session: 'pay' })).result, 1, 'the session kept its globals');
  eq(await s.close(), 0, 'exit status');
});

test('an exposed tool that needs approval pauses too; resume_run returns the tool\'s result', async () => {
  const t = server(['--expose-tools']);
  await t.ready;
  const m = await t.call('fx_echo', { amount: 700, to: 'ann' });
  const v = view(m);
  eq([m.result.isError, v.status, v.pending.map((p) => [p.seq, p.tool, p.args])],
    [false, 'paused', [[1, 'fx.echo', { amount: 700, to: 'ann' }]]], 'paused');
  const r = await resume(t, v.run, [{ seq: 1, approve: true, binding: v.pending[0].binding }]);
  eq([r.result.isError, r.result.structuredContent], [false, { amount: 700, to: 'ann' }], 'the tool\'s own result');
  const m2 = await t.call('fx_echo', { amount: 701 });
  const v2 = view(m2);
  const r2 = await resume(t, v2.run, [{ seq: 1, approve: false, note: 'no', binding: v2.pending[0].binding }]);
  eq(r2.result.isError, true, 'declined: an error');
  eq(r2.result.structuredContent, undefined, 'an error result of an exposed tool: text only');
  eq(JSON.parse(r2.result.content[0].text).error, { code: 'tool.denied',
    hint: 'The policy refuses this call: retrying will not help; use another tool or return what you have.',
    message: "fx_echo was denied by the host's policy: the person declined: no" }, 'the error');
  eq(await t.close(), 0, 'exit status');
});

test('--pause-ttl: a run undecided past it ends, and resume_run says it is gone', async () => {
  const t = server(['--pause-ttl', '500ms']);
  await t.ready;
  const v = await paused(t);
  assert(v.message.includes('Undecided after 500ms'), v.message);
  await sleep(1500);
  await refused(await resume(t, v.run, [{ seq: 2, approve: true, binding: v.pending[0].binding }]), 'run.unknown', /^there is no paused run/);
  eq(await t.close(), 0, 'exit status');
});

test('the time paused does not count against the wall-clock limit', async () => {
  const t = server(['--timeout', '1s', '--pause-ttl', '30s']);
  await t.ready;
  const v = await paused(t);
  await sleep(1800);
  const m = await resume(t, v.run, [{ seq: 2, approve: true, binding: v.pending[0].binding }]);
  eq(view(m).result, { big: 250, ok: true, small: 5 }, 'finished within its 1 s of running');
  eq(await t.close(), 0, 'exit status');
});

test('bad --pause-ttl and --secret-file are usage errors', async () => {
  for (const [args, msg] of [[['--pause-ttl', '2 days'], "--pause-ttl: bad duration '2 days' (use 500ms, 30s, 10m or 24h)"],
    [['--secret-file', path.join(tmp, 'none')], '--secret-file: cannot open']]) {
    const t = server(args, { init: false });
    eq(await t.exited, 2, `exit status of ${args.join(' ')}`);
  }
  const short = path.join(tmp, 'short');
  fs.writeFileSync(short, 'abc');
  const t = spawn(tidepool, ['mcp', '--secret-file', short], { stdio: ['pipe', 'pipe', 'pipe'] });
  let err = '';
  t.stderr.on('data', (d) => { err += d; });
  eq(await new Promise((r) => t.on('exit', r)), 2, 'exit status');
  assert(err.includes(`--secret-file: ${short} holds 3 bytes; a secret needs at least 32`), err);
});

// ---- elicitation (clients that declared it) -------------------------------------------

test('elicitation: the server asks with elicitation/create and resumes in the same call', async () => {
  s = server([], { elicit: true });
  await s.ready;
  const pending = runLua(s, SCRIPT);
  const q = await s.other((m) => m.method === 'elicitation/create');
  assert(q.id.startsWith('tidepool-approve-0-'), `id ${q.id}`);
  eq(q.params.mode, 'form', 'form mode');
  eq(q.params.requestedSchema.required, ['approve'], 'approve is required');
  eq(Object.keys(q.params.requestedSchema.properties), ['approve', 'note'], 'approve and note');
  eq(q.params.message, `A script wants to call tools.fx.echo with {"amount":250,"to":"bob"}. Approve this call? (${REASON})`, 'message');
  s.send({ jsonrpc: '2.0', id: q.id, result: { action: 'accept', content: { approve: true } } });
  eq(view(await pending).result, { big: 250, ok: true, small: 5 }, 'result');
});

test('elicitation: approve=false with a note, decline and cancel deny the call', async () => {
  for (const [answer, msg] of [
    [{ action: 'accept', content: { approve: false, note: 'too much' } }, 'the person declined: too much'],
    [{ action: 'decline' }, 'the person declined to answer'],
    [{ action: 'cancel' }, 'the person dismissed the question without answering']]) {
    const pending = runLua(s, SCRIPT);
    const q = await s.other((m) => m.method === 'elicitation/create');
    s.send({ jsonrpc: '2.0', id: q.id, result: answer });
    eq(view(await pending).result, { big: `tools.fx.echo was denied by the host's policy: ${msg}`, ok: false, small: 5 }, answer.action);
  }
  // an error response denies too
  const pending = runLua(s, SCRIPT);
  const q = await s.other((m) => m.method === 'elicitation/create');
  s.send({ jsonrpc: '2.0', id: q.id, error: { code: -32601, message: 'no UI here' } });
  eq(view(await pending).result.big, "tools.fx.echo was denied by the host's policy: the client could not ask a person (no UI here)", 'error');
});

test('elicitation: a cancelled tools/call withdraws the request', async () => {
  const id = 'to-cancel';
  s.send({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'run_lua', arguments: { code: SCRIPT } } });
  const q = await s.other((m) => m.method === 'elicitation/create');
  s.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id } });
  const c = await s.other((m) => m.method === 'notifications/cancelled');
  eq(c.params, { reason: 'the run that asked ended before a person answered', requestId: q.id }, 'withdrawn');
  // a late answer is ignored, and the server still serves
  s.send({ jsonrpc: '2.0', id: q.id, result: { action: 'accept', content: { approve: true } } });
  eq((await s.request('ping', {})).result, {}, 'ping');
  eq(await s.close(), 0, 'exit status');
});

test('elicitation: a client that never answers is bounded by the wall-clock limit', async () => {
  const t = server(['--timeout', '1s'], { elicit: true });
  await t.ready;
  const pending = runLua(t, SCRIPT);
  const q = await t.other((m) => m.method === 'elicitation/create');
  const m = await pending;
  eq(view(m).error.code, 'limit.time', 'limit.time');
  const c = await t.other((x) => x.method === 'notifications/cancelled');
  eq(c.params.requestId, q.id, 'withdrawn');
  eq(await t.close(), 0, 'exit status');
});

// ---- 2026-07-28: input_required and requestState ---------------------------------------

const META26 = { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientCapabilities': { elicitation: {} } } };
async function inputRequired(t) {
  const m = await runLua(t, SCRIPT, META26);
  const r = m.result;
  eq(Object.keys(r).sort(), ['inputRequests', 'requestState', 'resultType'], 'keys');
  eq(r.resultType, 'input_required', 'resultType');
  eq(Object.keys(r.inputRequests), ['approve-2'], 'one request, by seq');
  const e = r.inputRequests['approve-2'];
  eq([e.method, e.params.mode, e.params.requestedSchema.required], ['elicitation/create', 'form', ['approve']], 'an elicitation');
  assert(/^[A-Za-z0-9_-]+$/.test(r.requestState), 'base64url');
  return r;
}
const retry = (t, state, responses) => runLua(t, SCRIPT, { ...META26, requestState: state, inputResponses: responses });

test('2026-07-28: input_required with a sealed requestState; the retry with the answer resumes', async () => {
  s = server(['--secret-file', secretA], { init: false });
  const r = await inputRequired(s);
  const m = await retry(s, r.requestState, { 'approve-2': { action: 'accept', content: { approve: true } } });
  eq(view(m).result, { big: 250, ok: true, small: 5 }, 'result');
  const r2 = await inputRequired(s);
  const m2 = await retry(s, r2.requestState, { 'approve-2': { action: 'accept', content: { approve: false, note: 'no' } } });
  eq(view(m2).result.big, "tools.fx.echo was denied by the host's policy: the person declined: no", 'declined');
  // the same state again: its run is gone
  await refused(await retry(s, r.requestState, { 'approve-2': { action: 'accept', content: { approve: true } } }),
    'run.unknown', /^there is no paused run/);
});

test('2026-07-28: a hostile requestState gets a JSON-RPC error, and the server keeps serving', async () => {
  const r = await inputRequired(s);
  const st = r.requestState;
  const mid = Math.floor(st.length / 2);
  const flipped = st.slice(0, mid) + (st[mid] === 'A' ? 'B' : 'A') + st.slice(mid + 1);
  const ans = { 'approve-2': { action: 'accept', content: { approve: true } } };
  const cases = [
    [flipped, /^Invalid params: requestState failed its integrity check: it was changed, or sealed by a server with another secret/],
    ['not base64!', /^Invalid params: requestState is not base64url text/],
    ['AAAA', /^Invalid params: requestState is too short to be one this server sealed/],
    ['A'.repeat(70000), /^Invalid params: requestState is 70000 bytes long; this server's are at most 65536/],
  ];
  for (const [state, re] of cases) {
    const m = await retry(s, state, ans);
    eq(m.error && m.error.code, -32602, `code for ${state.slice(0, 20)}`);
    assert(re.test(m.error.message), m.error.message);
  }
  const none = await retry(s, st, { other: {} });
  eq(none.error.code, -32602, 'no answer');
  assert(/^Invalid params: inputResponses answers none of the inputRequests/.test(none.error.message), none.error.message);
  // after all that, the real state still resumes the run
  eq(view(await retry(s, st, ans)).result.big, 250, 'the genuine state');
});

test('2026-07-28: a requestState is accepted by a server with the same secret only', async () => {
  const r = await inputRequired(s);
  const same = server(['--secret-file', secretA], { init: false });
  const other = server(['--secret-file', secretB], { init: false });
  const ans = { 'approve-2': { action: 'accept', content: { approve: true } } };
  // the same secret opens it (the run lives in the first server, so it is unknown here)
  await refused(await retry(same, r.requestState, ans), 'run.unknown', /^there is no paused run/);
  const m = await retry(other, r.requestState, ans);
  eq(m.error.code, -32602, 'another secret');
  assert(/failed its integrity check/.test(m.error.message), m.error.message);
  eq(view(await retry(s, r.requestState, ans)).result.big, 250, 'its own server');
  for (const t of [same, other, s]) eq(await t.close(), 0, 'exit status');
});

test('2026-07-28: an expired requestState is refused', async () => {
  const t = server(['--pause-ttl', '500ms'], { init: false });
  const r = await inputRequired(t);
  await sleep(2600);
  const m = await retry(t, r.requestState, { 'approve-2': { action: 'accept', content: { approve: true } } });
  eq(m.error.code, -32602, 'code');
  assert(/^Invalid params: requestState has expired/.test(m.error.message), m.error.message);
  eq(await t.close(), 0, 'exit status');
}, 20000);

run().finally(() => fs.rmSync(tmp, { recursive: true, force: true }));
