// Requests piped into `tidepool mcp`: when standard input closes, every request read so
// far is still answered before the server exits (as the SDKs' stdio servers do), the
// calls still running included; a call that would outlive the drain's bound (the run's
// --timeout) ends by that limit and is answered too. The server exits 0.
import { spawn } from 'node:child_process';
import { test, run, assert, eq, tidepool } from './harness.mjs';

const procs = new Set();

// Runs tidepool mcp ARGS with input (written at once, then standard input closed);
// resolves with its output lines parsed, its exit status and the time it took.
function pipe(args, input, waitMs = 20000) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const p = spawn(tidepool, ['mcp', '--test-tools', ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    procs.add(p);
    let out = '';
    p.stdout.setEncoding('utf8');
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.resume();
    const timer = setTimeout(() => { p.kill('SIGKILL'); reject(new Error(`no exit in ${waitMs} ms`)); }, waitMs);
    p.on('exit', (code) => {
      clearTimeout(timer);
      procs.delete(p);
      resolve({ code, ms: Date.now() - t0, msgs: out.split('\n').filter(Boolean).map((l) => JSON.parse(l)) });
    });
    p.stdin.end(input);
  });
}

const line = (o) => JSON.stringify({ jsonrpc: '2.0', ...o }) + '\n';
const init = line({ id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18',
  capabilities: {}, clientInfo: { name: 'eof', version: '1' } } })
  + line({ method: 'notifications/initialized' });
const call = (id, code) => line({ id, method: 'tools/call', params: { name: 'run_lua', arguments: { code } } });
const byId = (msgs) => Object.fromEntries(msgs.filter((m) => m.id !== undefined).map((m) => [m.id, m]));

test('five runs piped in, input closed at once: five answers, five times out of five', async () => {
  for (let round = 0; round < 5; round++) {
    let input = init;
    for (let i = 2; i <= 6; i++) input += call(i, `return ${i} + ${i}`);
    const r = await pipe([], input);
    eq(r.code, 0, `round ${round}: exit status`);
    const got = byId(r.msgs);
    for (let i = 2; i <= 6; i++) {
      assert(got[i], `round ${round}: request ${i} unanswered: ${JSON.stringify(r.msgs)}`);
      eq([got[i].result.isError, got[i].result.structuredContent.result], [false, 2 * i],
        `round ${round}: request ${i}`);
    }
  }
});

test('a call still running at end of input finishes, its tool calls and all', async () => {
  const r = await pipe([], init + call(2, 'tools.test.sleep{ms = 600} return "slept"')
    + line({ id: 3, method: 'ping' }));
  eq(r.code, 0, 'exit status');
  const got = byId(r.msgs);
  eq(got[3].result, {}, 'the ping');
  eq(got[2].result.structuredContent.result, 'slept', 'the run that was in flight');
  assert(r.ms >= 500, `it waited for the run: ${r.ms} ms`);
});

test('a call longer than its --timeout is answered with limit.time, then the server exits', async () => {
  const r = await pipe(['--timeout', '1s'], init + call(2, 'tools.test.sleep{ms = 60000} return 1'));
  eq(r.code, 0, 'exit status');
  const got = byId(r.msgs);
  eq([got[2].result.isError, got[2].result.structuredContent.error.code], [true, 'limit.time'],
    'answered by its limit');
  assert(r.ms < 15000, `it did not wait for the sleep: ${r.ms} ms`);
}, 30000);

await run().finally(() => { for (const p of procs) p.kill('SIGKILL'); });
