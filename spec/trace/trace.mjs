// OpenTelemetry traces (engine/host/trace.c): `tidepool run --otlp URL` against a small
// OTLP/HTTP receiver started here on 127.0.0.1, an HTTP server for http.fetch and an
// upstream MCP server (spec/upstream/edge-server.mjs) that record the trace context they
// are given. Checks the span tree of a script making parallel calls, an upstream call and
// an HTTP fetch; the context passed on; that no argument value nor injected secret is in a
// span; and that a receiver that is down, or never answers, slows no run.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test, run, assert, eq, root, tidepool } from '../mcp/harness.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-trace-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));
const SECRET = 'tok-trace-5d1e9a';     // injected by the config into HTTP fetches
const ARG = 'argument-value-83c1';     // a value a script passes: never in a span
const PARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const edge = path.join(root, 'spec', 'upstream', 'edge-server.mjs');

// ---- the servers ---------------------------------------------------------------------

const exports = [];   // every OTLP request body, parsed
let mode = 'ok';      // ok | hang: what the receiver does
const hung = [];
const receiver = http.createServer((req, res) => {
  let body = '';
  req.on('data', (d) => { body += d; });
  req.on('end', () => {
    if (mode === 'hang') { hung.push(res); return; }  // never answers
    if (req.url !== '/v1/traces' || req.method !== 'POST' ||
        req.headers['content-type'] !== 'application/json') {
      res.writeHead(400); res.end(); return;
    }
    exports.push({ text: body, json: JSON.parse(body) });
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{}');
  });
});
const fetched = [];   // requests the HTTP server saw: {path, headers}
const target = http.createServer((req, res) => {
  fetched.push({ path: req.url, headers: req.headers });
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.end('fetched');
});
const listen = (s) => new Promise((r) => s.listen(0, '127.0.0.1', () => r(s.address().port)));
const OTLP = `http://127.0.0.1:${await listen(receiver)}`;
const WEB = `http://127.0.0.1:${await listen(target)}`;

// A port nobody listens on: bound, then closed.
async function closedPort() {
  const s = net.createServer();
  const p = await listen(s);
  await new Promise((r) => s.close(r));
  return p;
}

// ---- running tidepool ------------------------------------------------------------------

let nfile = 0;
function config(extra = {}) {
  const f = path.join(tmp, `config-${++nfile}.json`);
  fs.writeFileSync(f, JSON.stringify({
    http: { allow: ['127.0.0.1'], allow_private: ['127.0.0.1/32'],
            inject: { '127.0.0.1': { 'X-Api-Key': SECRET } } },
    ...extra }));
  return f;
}

function tp(args, script, env = {}) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const child = spawn(tidepool, ['run', '--json', ...args, '-'],
                        { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    let out = '', err = '', outAt = 0;
    child.stdout.on('data', (d) => { out += d; if (!outAt) outAt = Date.now() - t0; });
    child.stderr.on('data', (d) => { err += d; });
    child.on('error', reject);
    child.on('close', (code) => {
      let envelope = null;
      try { envelope = JSON.parse(out); } catch { /* the caller says */ }
      resolve({ code, out, err, env: envelope, outMs: outAt, ms: Date.now() - t0 });
    });
    child.stdin.end(script);
  });
}

const spansOf = (bodies) => bodies.flatMap((b) => b.json.resourceSpans.flatMap(
  (rs) => rs.scopeSpans.flatMap((ss) => ss.spans)));
const attr = (s, k) => {
  const a = s.attributes.find((x) => x.key === k);
  return a && (a.value.stringValue ?? a.value.intValue);
};

// ---- the tests -------------------------------------------------------------------------

test('a run is a span with its calls and policy decisions as children, under the caller\'s traceparent', async () => {
  exports.length = 0;
  const cfg = config({ policy: { rules: [{ tools: 'time.*', effect: 'allow' }], default: 'deny' } });
  const r = await tp(['--config', cfg, '--otlp', OTLP, '--traceparent', PARENT], `
    local a, b = parallel(function() return tools.time.sleep{ ms = 100 } end,
                          function() return tools.time.sleep{ ms = 100 } end)
    local ok, err = pcall(tools.kv.set, { key = "k", value = "${ARG}" })
    return "done"`);
  eq(r.code, 0, r.err);
  eq(r.env.ok, true, r.out);
  assert(exports.length >= 1, 'no export reached the receiver');
  const body = exports[0].json;
  eq(body.resourceSpans[0].resource.attributes[0],
     { key: 'service.name', value: { stringValue: 'tidepool' } });
  const spans = spansOf(exports);
  const runs = spans.filter((s) => s.name === 'tidepool.run');
  eq(runs.length, 1, 'one run span');
  const run = runs[0];
  eq(run.traceId, '4bf92f3577b34da6a3ce929d0e0e4736', 'the caller\'s trace');
  eq(run.parentSpanId, '00f067aa0ba902b7', 'the caller\'s span is the parent');
  eq(attr(run, 'tidepool.outcome'), 'ok');
  eq(attr(run, 'tidepool.run.calls'), '3');
  const calls = spans.filter((s) => s.name.startsWith('execute_tool '));
  eq(calls.map((s) => attr(s, 'gen_ai.tool.name')).sort(), ['kv.set', 'time.sleep', 'time.sleep']);
  for (const c of calls) {
    eq(c.parentSpanId, run.spanId, 'a call is a child of its run');
    eq(c.traceId, run.traceId);
    eq(attr(c, 'gen_ai.operation.name'), 'execute_tool');
  }
  // kv.set is not allowed by a rule: the policy's default denies it
  const set = calls.find((c) => attr(c, 'gen_ai.tool.name') === 'kv.set');
  eq(attr(set, 'tidepool.outcome'), 'tool.denied');
  eq(set.status.code, 2);
  const pols = spans.filter((s) => s.name.startsWith('policy '));
  eq(pols.map((s) => attr(s, 'tidepool.policy.effect')).sort(), ['allow', 'allow', 'deny']);
  for (const p of pols) eq(p.parentSpanId, run.spanId, 'a decision is a child of its run');
  // the two parallel calls overlap in time
  const [a, b] = calls.filter((c) => attr(c, 'gen_ai.tool.name') === 'time.sleep');
  assert(BigInt(a.startTimeUnixNano) <= BigInt(b.endTimeUnixNano) &&
         BigInt(b.startTimeUnixNano) <= BigInt(a.endTimeUnixNano), 'parallel calls overlap');
  assert(!exports[0].text.includes(ARG), 'an argument value is in a span');
  eq(new Set(spans.map((s) => s.spanId)).size, spans.length, 'span ids are unique');
});

test('an approval wait is a child span of the run', async () => {
  exports.length = 0;
  const cfg = config({ policy: { rules: [{ tools: 'kv.set', effect: 'ask', reason: 'writes' },
                                         { tools: '**', effect: 'allow' }] } });
  const r = await tp(['--config', cfg, '--otlp', OTLP, '--approve', 'all'],
                     'tools.kv.set{ key = "a", value = 1 } return 1');
  eq(r.env.ok, true, r.out);
  const spans = spansOf(exports);
  const run = spans.find((s) => s.name === 'tidepool.run');
  const wait = spans.find((s) => s.name === 'approval kv.set');
  assert(wait, `no approval span in ${spans.map((s) => s.name)}`);
  eq(wait.parentSpanId, run.spanId);
  eq(spans.find((s) => s.name === 'policy kv.set') && attr(spans.find((s) => s.name === 'policy kv.set'), 'tidepool.policy.effect'), 'ask');
});

test('an HTTP fetch and an upstream call: their spans are grandchildren, their servers get the call\'s context, no secret leaks', async () => {
  exports.length = 0;
  fetched.length = 0;
  const dir = fs.mkdtempSync(path.join(tmp, 'edge-'));
  const cfg = config({ mcpServers: { edge: { command: 'node', args: [edge], env: { EDGE_DIR: dir } } } });
  const r = await tp(['--config', cfg, '--otlp', OTLP, '--traceparent', PARENT], `
    local a = tools.http.fetch{ url = "${WEB}/page?q=${ARG}" }
    local b = tools.edge.echo{ text = "${ARG}" }
    return { a.status, b }`);
  eq(r.env && r.env.ok, true, r.out + r.err);
  const spans = spansOf(exports);
  const run = spans.find((s) => s.name === 'tidepool.run');
  const fetch = spans.find((s) => s.name === 'execute_tool http.fetch');
  const echo = spans.find((s) => s.name === 'execute_tool edge.echo');
  assert(fetch && echo, spans.map((s) => s.name).join(', '));
  eq([fetch.parentSpanId, echo.parentSpanId], [run.spanId, run.spanId]);
  const get = spans.find((s) => s.name === 'HTTP GET');
  assert(get, spans.map((s) => s.name).join(', '));
  eq(get.parentSpanId, fetch.spanId, 'the HTTP request is a child of its call');
  eq(get.kind, 3);
  eq(attr(get, 'http.response.status_code'), '200');
  eq(attr(get, 'server.address'), '127.0.0.1');
  const up = spans.find((s) => s.name === 'mcp tools/call echo');
  assert(up, spans.map((s) => s.name).join(', '));
  eq(up.parentSpanId, echo.spanId, 'the upstream request is a child of its call');
  eq(fetched.length, 1);
  eq(fetched[0].headers.traceparent, `00-${run.traceId}-${fetch.spanId}-01`, 'the HTTP server got the call\'s context');
  eq(fetched[0].headers['x-api-key'], SECRET, 'the injected credential reached the server');
  const seen = fs.readFileSync(path.join(dir, 'traceparent'), 'utf8').trim().split('\n');
  eq(seen, [`tools/call 00-${run.traceId}-${echo.spanId}-01`], 'the upstream server got the call\'s context');
  for (const e of exports) {
    assert(!e.text.includes(SECRET), 'the injected secret is in a span');
    assert(!e.text.includes(ARG), 'an argument value is in a span');
  }
});

test('a command is a span under its call', async () => {
  exports.length = 0;
  const cfg = config({ commands: [{ argv0: 'true' }] });
  const r = await tp(['--config', cfg, '--otlp', OTLP], 'return tools.proc.run{ cmd = "true" }.exit_code');
  eq(r.env && r.env.ok, true, r.out + r.err);
  const spans = spansOf(exports);
  const call = spans.find((s) => s.name === 'execute_tool proc.run');
  const cmd = spans.find((s) => s.name === 'command true');
  assert(call && cmd, spans.map((s) => s.name).join(', '));
  eq(cmd.parentSpanId, call.spanId);
  eq(cmd.status, { code: 1 });
});

test('telemetry.propagate false keeps the context in', async () => {
  exports.length = 0;
  fetched.length = 0;
  const cfg = config({ telemetry: { propagate: false } });
  const r = await tp(['--config', cfg, '--otlp', OTLP], `
    return tools.http.fetch{ url = "${WEB}/x" }.status`);
  eq(r.env && r.env.ok, true, r.out + r.err);
  eq(fetched.length, 1);
  eq(fetched[0].headers.traceparent, undefined);
  assert(spansOf(exports).some((s) => s.name === 'execute_tool http.fetch'));
});

test('telemetry.otlp.endpoint in the config sends the spans', async () => {
  exports.length = 0;
  const cfg = config({ telemetry: { otlp: { endpoint: OTLP }, service_name: 'agents-prod' } });
  const r = await tp(['--config', cfg], 'return 1');
  eq(r.env.ok, true);
  eq(exports[0].json.resourceSpans[0].resource.attributes[0].value.stringValue, 'agents-prod');
  eq(spansOf(exports).map((s) => s.name), ['tidepool.run']);
});

test('a script error is the run span\'s outcome and status', async () => {
  exports.length = 0;
  const r = await tp(['--otlp', OTLP], 'error("boom")');
  eq(r.env.ok, false);
  const run = spansOf(exports).find((s) => s.name === 'tidepool.run');
  eq(attr(run, 'tidepool.outcome'), 'runtime');
  eq(run.status, { code: 2, message: 'runtime' });
  assert(run.parentSpanId === undefined, 'a run without a traceparent is a root span');
});

test('--trace-file writes the same spans as JSON lines', async () => {
  const file = path.join(tmp, 'spans.jsonl');
  const r = await tp(['--trace-file', file, '--traceparent', PARENT],
                     'tools.time.now{} return 1');
  eq(r.env.ok, true, r.out);
  const lines = fs.readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  eq(lines.map((s) => s.name).sort(), ['execute_tool time.now', 'tidepool.run']);
  for (const s of lines) eq(s.traceId, '4bf92f3577b34da6a3ce929d0e0e4736');
});

test('TRACEPARENT in the environment is the parent; a malformed one starts a new trace', async () => {
  exports.length = 0;
  await tp(['--otlp', OTLP], 'return 1', { TRACEPARENT: PARENT });
  await tp(['--otlp', OTLP], 'return 2', { TRACEPARENT: '00-zz-00f067aa0ba902b7-01' });
  const runs = spansOf(exports).filter((s) => s.name === 'tidepool.run');
  eq(runs.length, 2);
  eq(runs[0].parentSpanId, '00f067aa0ba902b7');
  assert(runs[1].traceId !== '4bf92f3577b34da6a3ce929d0e0e4736' &&
         /^[0-9a-f]{32}$/.test(runs[1].traceId) && runs[1].parentSpanId === undefined,
         JSON.stringify(runs[1]));
});

test('a bad --otlp URL is a usage error', async () => {
  const r = await tp(['--otlp', 'ftp://127.0.0.1/x'], 'return 1');
  eq(r.code, 2);
  assert(/--otlp: the OTLP endpoint must be an http:\/\/ or https:\/\/ URL/.test(r.err), r.err);
});

test('a receiver that is down slows no run', async () => {
  const port = await closedPort();
  const r = await tp(['--otlp', `http://127.0.0.1:${port}`], `
    for i = 1, 50 do tools.time.now{} end
    return 1`);
  eq(r.code, 0, r.err);
  eq(r.env.ok, true);
  assert(r.ms < 5000, `took ${r.ms} ms`);
});

test('a receiver that never answers slows no run; the exit waits at most about a second', async () => {
  mode = 'hang';
  try {
    const r = await tp(['--otlp', OTLP], `
      for i = 1, 20 do tools.time.now{} end
      return 1`);
    eq(r.env.ok, true, r.out);
    assert(r.env.stats.wall_ms < 2000, `the run took ${r.env.stats.wall_ms} ms`);
    assert(r.ms < 6000, `the process took ${r.ms} ms`);
    assert(hung.length >= 1, 'the export was not even tried');
  } finally {
    mode = 'ok';
    for (const res of hung.splice(0)) res.destroy();
  }
});

// ---- the audit journal: what a run did, even after a crash --------------------------------

function audit(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(tidepool, ['audit', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, out, err }));
  });
}

test('kill -9 mid-run: audit show lists the calls made, failed, refused and in flight', async () => {
  const file = path.join(tmp, 'audit.jsonl');
  const port = await closedPort();
  const cfg = config({ policy: { rules: [{ tools: 'kv.set', effect: 'deny', reason: 'read only' },
                                         { tools: '**', effect: 'allow' }] } });
  const child = spawn(tidepool, ['run', '--config', cfg, '--audit', file, '-'],
                      { stdio: ['pipe', 'ignore', 'ignore'] });
  const exited = new Promise((r) => child.on('close', (code, sig) => r(sig)));
  child.stdin.end(`
    tools.time.now{}
    pcall(tools.http.fetch, { url = "http://127.0.0.1:${port}/x" })
    pcall(tools.kv.set, { key = "k", value = "${ARG}" })
    parallel(function() return tools.time.sleep{ ms = 30000 } end,
             function() return tools.time.sleep{ ms = 30000 } end)
    return 1`);
  try {
    // wait until both sleeps have started, as the file says
    const t0 = Date.now();
    while (!(fs.existsSync(file) &&
             (fs.readFileSync(file, 'utf8').match(/"ev":"call".*"time\.sleep"/g) || []).length === 2)) {
      assert(Date.now() - t0 < 10000, 'the sleeps never started');
      await new Promise((r) => setTimeout(r, 20));
    }
  } finally {
    child.kill('SIGKILL');
  }
  eq(await exited, 'SIGKILL');
  const text = fs.readFileSync(file, 'utf8');
  assert(!text.includes(ARG), 'an argument value is in the audit journal');
  const list = await audit(['show', file, '--json']);
  eq(list.code, 0, list.err);
  const runs = JSON.parse(list.out);
  eq(runs.length, 1);
  eq([runs[0].calls, runs[0].ended, runs[0].outcome], [5, false, 'died']);
  const shown = await audit(['show', file, runs[0].run.slice(0, 6), '--json']);
  eq(shown.code, 0, shown.err);
  const rec = JSON.parse(shown.out);
  eq(rec.calls.map((c) => [c.seq, c.tool, c.state, c.code]), [
    [1, 'time.now', 'made', 'ok'],
    [2, 'http.fetch', 'failed', 'tool.failed'],
    [3, 'kv.set', 'refused', 'tool.denied'],
    [4, 'time.sleep', 'in flight', ''],
    [5, 'time.sleep', 'in flight', ''],
  ]);
  const human = await audit(['show', file, runs[0].run]);
  assert(/no end recorded: the process died/.test(human.out), human.out);
  eq((human.out.match(/in flight when it died/g) || []).length, 2, human.out);
  const none = await audit(['show', file, 'ffff']);
  eq(none.code, 2);
  assert(/no run ffff in /.test(none.err), none.err);
});

test('a run that ends records its end; the next run is a new record', async () => {
  const file = path.join(tmp, 'audit2.jsonl');
  await tp(['--audit', file], 'tools.time.now{} return 1');
  await tp(['--audit', file], 'error("x")');
  const runs = JSON.parse((await audit(['show', file, '--json'])).out);
  eq(runs.map((r) => [r.calls, r.ended, r.outcome]), [[1, true, 'ok'], [0, true, 'runtime']]);
});

await run();
receiver.close();
target.close();
