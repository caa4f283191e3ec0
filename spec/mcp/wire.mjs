// `tidepool mcp` wired to the engine's operations API: a worker engine's log messages reach
// the client as notifications/message (by mail to the protocol thread), a run_lua run's span
// is a child of params._meta.traceparent (--trace-file), and --audit holds the call journal
// that `tidepool audit show` reads.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
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

test('--state without --audit journals the calls with the state: kill -9 mid-run, audit show --state lists them', async () => {
  const dir = fs.mkdtempSync(path.join(tmp, 'state-'));
  const journal = path.join(dir, 'journal.jsonl');
  const s = mcpServer(['mcp', '--tools', plugins, '--state', dir]);
  try {
    await s.initialize();
    s.start('tools/call', { name: 'run_lua', arguments: {
      code: 'tools.say.hi{who = "a"} tools.time.sleep{ms = 30000} return 1' } });
    const t0 = Date.now();  // until the sleep has started, as the journal says
    while (!(fs.existsSync(journal) && /"ev":"call".*"time\.sleep"/.test(fs.readFileSync(journal, 'utf8')))) {
      assert(Date.now() - t0 < 20000, `the sleep never started: ${s.stderr()}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  } finally { s.kill(); }
  eq(await s.exited, 'SIGKILL');
  const list = spawnSync(tidepool, ['audit', 'show', '--state', dir, '--json'], { encoding: 'utf8' });
  eq(list.status, 0, list.stderr);
  const runs = JSON.parse(list.stdout);
  eq(runs.map((r) => [r.calls, r.ended, r.outcome]), [[2, false, 'died']]);
  const one = spawnSync(tidepool, ['audit', 'show', '--state', dir, runs[0].run, '--json'], { encoding: 'utf8' });
  eq(one.status, 0, one.stderr);
  eq(JSON.parse(one.stdout).calls.map((c) => [c.seq, c.tool, c.state, c.code]), [
    [1, 'say.hi', 'made', 'ok'], [2, 'time.sleep', 'in flight', '']]);
  const redis = spawnSync(tidepool, ['audit', 'show', '--state', 'redis://127.0.0.1:6379/0'], { encoding: 'utf8' });
  eq(redis.status, 2);
  assert(redis.stderr.includes('keeps no journal file (a Redis or memory store): give the servers --audit FILE'),
    redis.stderr);
}, 60000);

test('after kill -9, the operator page of the restarted server shows the journal\'s unfinished run, call by call', async () => {
  const dir = fs.mkdtempSync(path.join(tmp, 'uistate-'));
  const journal = path.join(dir, 'journal.jsonl');
  let srv = await startHttp(['--ui', '--state', dir]);
  try {
    const init = await rpc(srv, null, 1, 'initialize', { protocolVersion: '2025-11-25', capabilities: {},
      clientInfo: { name: 'wire', version: '1' } });
    // not awaited: the run sleeps until the server is killed
    rpc(srv, init.sid, 2, 'tools/call', { name: 'run_lua', arguments: {
      code: 'tools.say.hi{who = "<b>x</b>"} tools.time.sleep{ms = 30000} return 1' } }).catch(() => {});
    const t0 = Date.now();
    while (!(fs.existsSync(journal) && /"ev":"call".*"time\.sleep"/.test(fs.readFileSync(journal, 'utf8')))) {
      assert(Date.now() - t0 < 20000, `the sleep never started: ${srv.stderr()}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  } finally { await stop(srv); }
  const id = JSON.parse(fs.readFileSync(journal, 'utf8').split('\n')[0]).run;
  srv = await startHttp(['--ui', '--state', dir]);
  try {
    const page = await (await fetch(`${srv.base}/ui`)).text();
    const sect = page.slice(page.indexOf('<section id="journal">'));
    assert(sect.includes(`run <code>${id}</code>`), `the died run on the page: ${sect.slice(0, 800)}`);
    assert(/<code>say\.hi<\/code><\/td><td>1<\/td><td class="state">made<\/td>/.test(sect), sect.slice(0, 800));
    assert(/<code>time\.sleep<\/code><\/td><td>1<\/td><td class="state">in flight \(no end recorded\)<\/td>/.test(sect),
      sect.slice(0, 800));
  } finally { await stop(srv); }
}, 60000);

test('--otlp needs an http(s) URL: a usage error', async () => {
  const r = spawnSync(tidepool, ['mcp', '--otlp', 'ftp://127.0.0.1/x'], { encoding: 'utf8', input: '' });
  eq(r.status, 2, r.stderr);
  assert(r.stderr.includes("--otlp: 'ftp://127.0.0.1/x' is not an http(s) URL"), r.stderr);
});

// `tidepool mcp --http 127.0.0.1:0 ...args`; resolves {p, base} once it serves.
function startHttp(args) {
  return new Promise((resolve, reject) => {
    const p = spawn(tidepool, ['mcp', '--tools', plugins, '--http', '127.0.0.1:0', ...args],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '', done = false;
    p.stderr.setEncoding('utf8');
    p.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/serving on (http:\/\/127\.0\.0\.1:\d+)\/mcp/);
      if (m && !done) { done = true; resolve({ p, base: m[1], stderr: () => err }); }
    });
    p.on('exit', (code) => { if (!done) reject(new Error(`exited ${code}: ${err}`)); });
  });
}
const stop = (srv, sig = 'SIGKILL') => new Promise((r) => { srv.p.on('exit', r); srv.p.kill(sig); });
const H = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
async function rpc(srv, sid, id, method, params, more = {}) {
  const r = await fetch(`${srv.base}/mcp`, { method: 'POST', body: JSON.stringify({ jsonrpc: '2.0', id, method, params }),
    headers: { ...H, 'MCP-Protocol-Version': '2025-11-25', ...(sid ? { 'Mcp-Session-Id': sid } : {}), ...more } });
  const text = await r.text();
  return { status: r.status, sid: r.headers.get('mcp-session-id'), text };
}
const series = (text, name) => {
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
};

test('/metrics on --http: runs by outcome, tool calls, the server\'s own series; promtool passes; loopback only without auth', async () => {
  const cfg = path.join(tmp, 'proxy.json');
  fs.writeFileSync(cfg, JSON.stringify({ server: { trusted_proxies: ['127.0.0.1'] } }));
  const srv = await startHttp(['--config', cfg]);
  try {
    const init = await rpc(srv, null, 1, 'initialize', { protocolVersion: '2025-11-25', capabilities: {},
      clientInfo: { name: 'wire', version: '1' } });
    eq(init.status, 200, init.text);
    const sid = init.sid;
    await fetch(`${srv.base}/mcp`, { method: 'POST', headers: { ...H, 'Mcp-Session-Id': sid,
      'MCP-Protocol-Version': '2025-11-25' }, body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
    for (const [id, code] of [[2, 'tools.say.hi{who = "a"} tools.say.hi{who = "b"} return 1'],
      [3, 'error("boom")'], [4, 'local ok = pcall(tools.say.hi, {}) return 2']]) {
      const r = await rpc(srv, sid, id, 'tools/call', { name: 'run_lua', arguments: { code, session: 'm1' } });
      eq(r.status, 200, r.text);
    }
    eq((await fetch(`${srv.base}/nope`)).status, 404, 'a 4xx to count');
    const m = await fetch(`${srv.base}/metrics`);
    eq(m.status, 200, 'loopback reads it');
    eq(m.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8');
    const text = await m.text();
    eq(series(text, 'tidepool_runs_total{outcome="ok"}'), 2, text);
    eq(series(text, 'tidepool_runs_total{outcome="runtime"}'), 1, 'the failed run');
    eq(series(text, 'tidepool_tool_calls_total{tool="say.hi",outcome="ok"}'), 2, text);
    eq(series(text, 'tidepool_tool_calls_total{tool="say.hi",outcome="tool.invalid_input"}'), 1, text);
    eq(series(text, 'tidepool_run_duration_seconds_count'), 3, 'three runs timed');
    eq(series(text, 'tidepool_mcp_sessions'), 1, 'one session (m1)');
    eq(series(text, 'tidepool_mcp_paused_runs'), 0);
    eq(series(text, 'tidepool_mcp_requests_running'), 0);
    eq(series(text, 'tidepool_http_responses_total{class="4xx"}'), 1, 'the 404');
    eq(series(text, 'tidepool_http_responses_total{class="5xx"}'), 0);
    const pc = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    eq(pc.status, 0, `promtool: ${pc.stdout}${pc.stderr}`);
    // a client a trusted proxy names is not local
    const far = await fetch(`${srv.base}/metrics`, { headers: { 'X-Forwarded-For': '203.0.113.5' } });
    eq(far.status, 403, 'a non-loopback client');
    assert((await far.text()).includes('/metrics is served to loopback clients only'), 'says why');
  } finally { await stop(srv); }
});

test('/metrics with auth needs the metrics scope, not required_scopes: 401 without a token, 403 without the scope, 200 with it', async () => {
  const cfg = path.join(tmp, 'auth.json');
  fs.writeFileSync(cfg, JSON.stringify({ auth: { resource: 'http://127.0.0.1/mcp', required_scopes: ['mcp'],
    tokens: [{ token: 'plain-token-0123456789', principal: 'p', scopes: ['mcp'] },
      { token: 'prom-token-0123456789a', principal: 'prom', scopes: ['mcp', 'metrics'] },
      { token: 'scrape-only-0123456789', principal: 'scraper', scopes: ['metrics'] }] } }));
  const srv = await startHttp(['--config', cfg]);
  try {
    eq((await fetch(`${srv.base}/metrics`)).status, 401, 'no token');
    eq((await fetch(`${srv.base}/metrics`, { headers: { Authorization: 'Bearer plain-token-0123456789' } })).status,
      403, 'a token without the metrics scope');
    // required_scopes ("mcp") are the MCP endpoint's: a scraper's token needs metrics alone
    const scraper = { Authorization: 'Bearer scrape-only-0123456789' };
    const only = await fetch(`${srv.base}/metrics`, { headers: scraper });
    eq(only.status, 200, 'a token with only the metrics scope');
    const ok = await fetch(`${srv.base}/metrics`, { headers: { Authorization: 'Bearer prom-token-0123456789a' } });
    eq(ok.status, 200, 'the metrics scope');
    eq(series(await ok.text(), 'tidepool_http_responses_total{class="4xx"}'), 2, 'the 401 and the 403');
    // ... and that token is still refused at /mcp, which needs required_scopes
    const mcp = await fetch(`${srv.base}/mcp`, { method: 'POST', headers: { ...scraper,
      'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }) });
    eq(mcp.status, 403, 'the metrics-only token at /mcp');
    assert((mcp.headers.get('www-authenticate') || '').includes('insufficient_scope'), 'names insufficient_scope');
  } finally { await stop(srv); }
});

test('/metrics shows each upstream server up, and its restarts after it dies; promtool passes', async () => {
  const edge = path.join(path.dirname(new URL(import.meta.url).pathname), '..', 'upstream', 'edge-server.mjs');
  const dir = fs.mkdtempSync(path.join(tmp, 'edge-'));
  const cfg = path.join(tmp, 'upstream.json');
  fs.writeFileSync(cfg, JSON.stringify({ mcpServers: { 'edge"x': { command: 'node', args: [edge],
    env: { EDGE_DIR: dir }, eager: true } } }));
  const srv = await startHttp(['--config', cfg, '--workers', '1']);
  const scrape = async () => (await fetch(`${srv.base}/metrics`)).text();
  const until = async (what, ok) => {  // polls /metrics, up to 60 s (a loaded machine)
    for (let i = 0; i < 600; i++) {
      const t = await scrape();
      if (ok(t)) return t;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`${what}: not seen in 60 s: ${await scrape()}`);
  };
  const up = 'tidepool_upstream_up{server="edge\\"x"}';
  const restarts = 'tidepool_upstream_restarts_total{server="edge\\"x"}';
  try {
    let text = await until('up', (t) => series(t, up) === 1);
    eq(series(text, restarts), 0, 'no restart yet');
    assert(text.includes('# TYPE tidepool_upstream_up gauge'), 'typed');
    let pc = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    eq(pc.status, 0, `promtool: ${pc.stdout}${pc.stderr}`);
    const init = await rpc(srv, null, 1, 'initialize', { protocolVersion: '2025-11-25', capabilities: {},
      clientInfo: { name: 'wire', version: '1' } });
    const r = await rpc(srv, init.sid, 2, 'tools/call', { name: 'run_lua',
      arguments: { code: 'return tools.edge_x.pid{}' } });
    const pid = JSON.parse(r.text).result.structuredContent.result.pid;
    assert(pid > 1, `the server's pid: ${r.text}`);
    process.kill(pid, 'SIGKILL');
    text = await until('restarted and up again', (t) => series(t, restarts) === 1 && series(t, up) === 1);
    pc = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    eq(pc.status, 0, `promtool: ${pc.stdout}${pc.stderr}`);
  } finally { await stop(srv); }
}, 90000);

test('the example alert rules of docs/operations.md pass promtool check rules', async () => {
  const doc = fs.readFileSync(path.join(path.dirname(new URL(import.meta.url).pathname), '..', '..',
    'docs', 'operations.md'), 'utf8');
  const m = doc.match(/```yaml\n(groups:[\s\S]*?)```/);
  assert(m, 'the alerts block');
  const file = path.join(tmp, 'alerts.yml');
  fs.writeFileSync(file, m[1]);
  const r = spawnSync('promtool', ['check', 'rules', file], { encoding: 'utf8' });
  eq(r.status, 0, `${r.stdout}${r.stderr}`);
  const n = (m[1].match(/- alert: /g) || []).length;
  assert(r.stdout.includes(`SUCCESS: ${n} rules found`), r.stdout);
});

// A port free now on 127.0.0.1 (Prometheus takes an address, not port 0).
const freePort = () => new Promise((resolve, reject) => {
  const sv = net.createServer();
  sv.on('error', reject);
  sv.listen(0, '127.0.0.1', () => { const { port } = sv.address(); sv.close(() => resolve(port)); });
});

test('a real Prometheus server (Debian\'s) scrapes /metrics: up is 1 and tidepool_runs_total is stored', async () => {
  const srv = await startHttp([]);
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(tmp, 'prom-'));
  const target = srv.base.replace('http://', '');
  fs.writeFileSync(path.join(dir, 'prometheus.yml'), [
    'global: { scrape_interval: 1s, evaluation_interval: 1s }',
    'scrape_configs:',
    '  - job_name: tidepool',
    `    static_configs: [{ targets: ["${target}"] }]`, ''].join('\n'));
  const prom = spawn('prometheus', [`--config.file=${path.join(dir, 'prometheus.yml')}`,
    `--storage.tsdb.path=${path.join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  let perr = '';
  prom.stderr.setEncoding('utf8');
  prom.stderr.on('data', (d) => { perr += d; });
  const exited = new Promise((r) => prom.on('exit', (code, sig) => r(sig || code)));
  prom.on('error', (e) => { perr += `\n${e.message} (scripts/deps.sh installs prometheus)`; });
  const query = async (q) => {
    const r = await fetch(`http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent(q)}`);
    return (await r.json()).data.result;
  };
  try {
    let up = null, runs = null;
    for (let i = 0; i < 600 && !(up === '1' && runs !== null); i++) {  // up to 60 s
      await new Promise((r) => setTimeout(r, 100));
      if (prom.exitCode !== null || prom.signalCode !== null) break;
      try {
        const u = await query('up{job="tidepool"}');
        up = u.length ? u[0].value[1] : null;
        const t = await query('tidepool_runs_total{job="tidepool",outcome="ok"}');
        runs = t.length ? t[0].value[1] : null;
      } catch { /* not listening yet */ }
    }
    eq(up, '1', `up{job="tidepool"} (prometheus said: ${perr.slice(-600)})`);
    eq(runs, '0', 'tidepool_runs_total{outcome="ok"} as stored by Prometheus');
    const samples = await query('scrape_samples_scraped{job="tidepool"}');
    assert(samples.length === 1 && Number(samples[0].value[1]) > 50, `samples scraped: ${JSON.stringify(samples)}`);
  } finally {
    prom.kill('SIGKILL');
    await exited;
    await stop(srv);
  }
}, 90000);

test('over HTTP the traceparent header is the run\'s parent when _meta has none; _meta wins', async () => {
  const file = path.join(tmp, 'http-spans.jsonl');
  const srv = await startHttp(['--trace-file', file]);
  const OTHER = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  try {
    const init = await rpc(srv, null, 1, 'initialize', { protocolVersion: '2025-11-25', capabilities: {},
      clientInfo: { name: 'wire', version: '1' } });
    const sid = init.sid;
    const a = await rpc(srv, sid, 2, 'tools/call', { name: 'run_lua', arguments: { code: 'return 1' } },
      { traceparent: OTHER });
    eq(a.status, 200, a.text);
    const b = await rpc(srv, sid, 3, 'tools/call', { name: 'run_lua', arguments: { code: 'return 2' },
      _meta: { traceparent: PARENT } }, { traceparent: OTHER });
    eq(b.status, 200, b.text);
  } finally { await stop(srv, 'SIGTERM'); }  // a clean stop: the engines write what is queued
  const runs = fs.readFileSync(file, 'utf8').trim().split('\n').map((l) => JSON.parse(l))
    .filter((x) => x.name === 'tidepool.run');
  eq(runs.map((x) => [x.traceId, x.parentSpanId]).sort(), [
    ['0af7651916cd43dd8448eb211c80319c', 'b7ad6b7169203331'],
    ['4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7']], 'header, then _meta');
});

try { await run(); } finally { fs.rmSync(tmp, { recursive: true, force: true }); }
