// `tidepool mcp` wired to the engine's operations API: a worker engine's log messages reach
// the client as notifications/message (by mail to the protocol thread), a run_lua run's span
// is a child of params._meta.traceparent (--trace-file), and --audit holds the call journal
// that `tidepool audit show` reads.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, run, assert, eq, tidepool, mcpServer } from './harness.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-wire-'));
const plugins = path.join(tmp, 'plugins');
fs.mkdirSync(plugins);
fs.writeFileSync(path.join(plugins, 'say.lua'), `return {
  name = "say.hi",
  description = "Prints a line at call time and answers.",
  input = { type = "object", properties = { who = { type = "string" } }, required = { "who" } },
  handler = function(args)
    print("hello", args.who)
    return { said = true }
  end,
}
`);
const PARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const runLua = (s, code, extra = {}) => s.call('run_lua', { code }, extra);

test('a plugin\'s print reaches the client as notifications/message: level info, logger plugin', async () => {
  const s = mcpServer(['mcp', '--tools', plugins]);
  try {
    await s.initialize();
    const r = await runLua(s, 'return tools.say.hi{who = "world"}.said');
    eq(r.result.structuredContent.result, true, JSON.stringify(r));
    const m = await s.other((x) => x.method === 'notifications/message' && x.params.logger === 'plugin');
    eq([m.params.level, m.params.logger, m.params.data], ['info', 'plugin', 'hello\tworld'], 'the message');
    assert(s.stderr().includes('tidepool mcp: info: plugin: hello\tworld'), `stderr: ${s.stderr()}`);
    // below the client's level: not sent, still on stderr
    await s.request('logging/setLevel', { level: 'warning' });
    await runLua(s, 'return tools.say.hi{who = "quiet"}.said');
    await s.request('ping', {});
    assert(!s.has((x) => x.method === 'notifications/message' && x.params.data === 'hello\tquiet'),
      'an info message went to a client at warning');
    assert(s.stderr().includes('plugin: hello\tquiet'), 'on stderr all the same');
  } finally { await s.kill(); }
});

test('run_lua with _meta.traceparent: the run span is its child (--trace-file), with principal and session', async () => {
  const file = path.join(tmp, 'spans.jsonl');
  const s = mcpServer(['mcp', '--tools', plugins, '--trace-file', file]);
  try {
    await s.initialize();
    const r = await s.call('run_lua', { code: 'return tools.say.hi{who = "t"}.said', session: 'sess-1' },
      { _meta: { traceparent: PARENT } });
    eq(r.result.structuredContent.result, true, JSON.stringify(r));
    const bad = await s.call('run_lua', { code: 'return 2' }, { _meta: { traceparent: '00-zz-01' } });
    eq(bad.result.structuredContent.result, 2, 'a malformed traceparent does not fail the run');
  } finally { await s.close(); }
  const spans = fs.readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  const runs = spans.filter((x) => x.name === 'tidepool.run');
  eq(runs.length, 2, 'two run spans');
  const [a, b] = runs;
  eq(a.traceId, '4bf92f3577b34da6a3ce929d0e0e4736', 'the client\'s trace');
  eq(a.parentSpanId, '00f067aa0ba902b7', 'the client\'s span is the parent');
  const attr = (x, k) => (x.attributes.find((y) => y.key === k) || {}).value;
  eq(attr(a, 'tidepool.principal'), { stringValue: '' }, 'the local principal');
  eq(attr(a, 'tidepool.session'), { stringValue: 'sess-1' }, 'the session');
  const call = spans.find((x) => x.name === 'execute_tool say.hi');
  assert(call, `a call span: ${spans.map((x) => x.name)}`);
  eq([call.traceId, call.parentSpanId], [a.traceId, a.spanId], 'the call is the run\'s child');
  assert(b.traceId !== a.traceId && b.parentSpanId === undefined, `own trace: ${JSON.stringify(b)}`);
});

test('--audit holds the call journal: tidepool audit show lists the run\'s calls', async () => {
  const file = path.join(tmp, 'audit.jsonl');
  const s = mcpServer(['mcp', '--tools', plugins, '--audit', file]);
  try {
    await s.initialize();
    const r = await runLua(s, 'tools.say.hi{who = "a"} tools.say.hi{who = "b"} return 1');
    eq(r.result.structuredContent.result, 1, JSON.stringify(r));
  } finally { await s.close(); }
  const lines = fs.readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  const starts = lines.filter((l) => l.ev === 'call');
  eq(starts.length, 2, `two call starts: ${JSON.stringify(lines)}`);
  const out = spawnSync(tidepool, ['audit', 'show', file], { encoding: 'utf8' });
  eq(out.status, 0, out.stderr);
  assert(out.stdout.includes(starts[0].run), `the run listed: ${out.stdout}`);
  const one = spawnSync(tidepool, ['audit', 'show', file, starts[0].run], { encoding: 'utf8' });
  eq(one.status, 0, one.stderr);
  eq(one.stdout.split('\n').filter((l) => l.includes('say.hi')).length, 2, one.stdout);
});

test('--otlp needs an http(s) URL: a usage error', async () => {
  const r = spawnSync(tidepool, ['mcp', '--otlp', 'ftp://127.0.0.1/x'], { encoding: 'utf8', input: '' });
  eq(r.status, 2, r.stderr);
  assert(r.stderr.includes("--otlp: 'ftp://127.0.0.1/x' is not an http(s) URL"), r.stderr);
});

try { await run(); } finally { fs.rmSync(tmp, { recursive: true, force: true }); }
