// Hostile upstream data (issue 19): an MCP server of our own (hostile-server.mjs) and an
// HTTP server in this file, both on this machine, push tidepool with long lines, huge
// tool lists, many content blocks, slow drips, handshakes that never end and results that
// are not objects. For each: the exact outcome, an end well within the run's time limit,
// and the whole tidepool process's peak RSS (VmHWM of /proc/PID/status, read until it
// exits) under 4 x --memory + 64 MB.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { test, run, assert, eq, root, tidepool } from '../mcp/harness.mjs';

const hostile = path.join(root, 'spec', 'upstream', 'hostile-server.mjs');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-hostile-'));
let nfile = 0;
const MB = 1 << 20;
const bound = (memMb) => (4 * memMb + 64) * MB;

function configFile(cfg) {
  const f = path.join(tmp, `config-${++nfile}.json`);
  fs.writeFileSync(f, JSON.stringify(cfg));
  return f;
}
const server = (...flags) => ({ mcpServers: { h: { command: 'node', args: [hostile, ...flags] } } });

// Every tidepool started here, until it has exited: killed when this file ends, however
// it ends (a test that timed out leaves its child behind otherwise; the servers that child
// started exit at the end of their stdin).
const live = new Set();
process.on('exit', () => { for (const c of live) { try { c.kill('SIGKILL'); } catch { /* gone */ } } });

// Peak RSS in bytes of pid so far, or 0 once it is gone.
function hwm(pid) {
  try {
    const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmHWM:\s+(\d+) kB/m);
    return m ? Number(m[1]) * 1024 : 0;
  } catch { return 0; }
}

// Runs tidepool run --json with args, the script on stdin; resolves {code, out, err, ms,
// env, peak}: peak is the largest VmHWM seen (it only grows, and is read every 5 ms).
function tp(args, script) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const child = spawn(tidepool, ['run', '--json', '--no-builtin-tools', ...args, '-'],
                        { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '', err = '', peak = 0;
    live.add(child);
    const poll = setInterval(() => { peak = Math.max(peak, hwm(child.pid)); }, 5);
    child.stdout.on('data', (d) => { out += d; peak = Math.max(peak, hwm(child.pid)); });
    child.stderr.on('data', (d) => { err += d; });
    child.on('error', (e) => { clearInterval(poll); live.delete(child); reject(e); });
    child.on('exit', () => { clearInterval(poll); live.delete(child); });
    child.on('close', (code) => {
      let env = null;
      try { env = JSON.parse(out); } catch { /* checked by the test */ }
      resolve({ code, out, err, ms: Date.now() - t0, env, peak });
    });
    child.stdin.end(script);
  });
}

function underBound(r, memMb) {
  assert(r.peak > 0, 'the peak RSS was never read');
  console.log(`#   peak RSS ${(r.peak / MB).toFixed(1)} MB (bound ${4 * memMb + 64} MB), ${r.ms} ms`);
  assert(r.peak < bound(memMb), `peak RSS ${(r.peak / MB).toFixed(1)} MB, over ${4 * memMb + 64} MB`);
}
function failed(r, code) {
  assert(r.env, `not JSON (exit ${r.code}): ${r.out}\n${r.err}`);
  eq(r.env.ok, false, 'ok');
  eq(r.env.error.code, code, `code (${r.env.error.message})`);
  return r.env.error.message;
}

test('a 60 MB answer on one line at --memory 16M: tool.invalid_output as it streams in, naming --tool-bytes', async () => {
  const r = await tp(['--memory', '16M', '--config', configFile(server())], 'return tools.h.long{mb = 60}');
  const m = failed(r, 'tool.invalid_output');
  assert(m.startsWith('tools.h.long returned an invalid result: the MCP server h sent a message of more than '), m);
  assert(m.includes('more than what this run may receive (--tool-bytes 4194304: a result\'s JSON; the message 12648448 bytes): ask for less (a smaller page, fewer fields), or raise --tool-bytes'), m);
  underBound(r, 16);
}, 60000);

test('the same with the id after the result: still refused while it streams in', async () => {
  const r = await tp(['--memory', '16M', '--config', configFile(server())], 'return tools.h.long{mb = 60, late_id = true}');
  const m = failed(r, 'tool.invalid_output');
  assert(m.includes('sent a message of more than'), m);
  underBound(r, 16);
}, 60000);

test('a 32 MB line with --tool-bytes 64M at --memory 16M: refused by the memory limit at once, never a false tool.timeout', async () => {
  const r = await tp(['--memory', '16M', '--tool-bytes', '64M', '--config', configFile(server())],
                     'return tools.h.long{mb = 32}');
  const m = failed(r, 'tool.invalid_output');
  assert(m.includes('(--memory 16777216: the message 16842752 bytes): ask for less (a smaller page, fewer fields), or raise --memory'), m);
  underBound(r, 16);
}, 60000);

test('a 10 MB line that fits (--tool-bytes 16M): returned whole', async () => {
  const r = await tp(['--memory', '64M', '--tool-bytes', '16M', '--timeout', '100s', '--tool-timeout', '100s',
                      '--config', configFile(server())], 'local s = tools.h.long{mb = 10} return #s');
  assert(r.env && r.env.ok, r.out + r.err);
  eq(r.env.result, 10 * MB, 'bytes');
  underBound(r, 64);
}, 120000);

test('300,000 content blocks (8 MB) at --memory 16M: limit.memory before they are built', async () => {
  for (const extra of [[], ['--tool-bytes', '64M']]) {
    const r = await tp(['--memory', '16M', ...extra, '--config', configFile(server())],
                       'return #tools.h.blocks{n = 300000}.content');
    const m = failed(r, 'limit.memory');
    assert(/^the answer to h\.blocks \(8100076 bytes of JSON\) would take about \d+ bytes of memory once decoded, more than the run's memory limit allows$/.test(m), m);
    underBound(r, 16);
  }
}, 60000);

test('a tools/list of 100,000 tools (one 6 MB line): refused past max_message, a warning names the server', async () => {
  const r = await tp(['--memory', '16M', '--config', configFile(server('--tools', '100000'))], 'return tools.list()');
  assert(r.env && r.env.ok, r.out + r.err);
  assert(r.err.includes('tidepool: warning: mcpServers.h: tools/list failed: the MCP server h sent a message of more than '), r.err);
  assert(r.err.includes('more than the 4194304 bytes it may send outside a call (its max_message in the config)'), r.err);
  underBound(r, 16);
}, 60000);

test('a tools/list of 20,000 tools: the first 10,000 are used, a warning names the server', async () => {
  const r = await tp(['--memory', '16M', '--config', configFile(server('--tools', '20000'))],
                     'local n = 0 for _, t in ipairs(tools.list()) do if t:match("^h%.") then n = n + 1 end end return n');
  assert(r.env && r.env.ok, r.out + r.err);
  eq(r.env.result, 10000, 'tools of h');
  assert(r.err.includes('tidepool: warning: mcpServers.h: it lists more than 10000 tools; the first 10000 are used (its max_tools in the config)'), r.err);
  underBound(r, 16);
}, 60000);

test('descriptions past 1 MiB together are cut, a warning names the server; the tools still work', async () => {
  const r = await tp(['--memory', '16M', '--config', configFile(server('--tools', '3000', '--descriptions', '1'))],
                     'return {tools.h.ok{}, #tools.describe("h.t0"), #tools.describe("h.t2999")}');
  assert(r.env && r.env.ok, r.out + r.err);
  eq(r.env.result[0], 'fine', 'the call');
  assert(r.env.result[1] > r.env.result[2], `descriptions ${r.env.result[1]} and ${r.env.result[2]}`);
  assert(/tidepool: warning: mcpServers\.h: its tools' descriptions hold more than 1048576 bytes together; they are cut from tool "t\d+" on \(its max_descriptions in the config\)/.test(r.err), r.err);
  underBound(r, 16);
}, 60000);

test('max_message and max_tools in the config raise and lower the caps', async () => {
  const cfg = server('--tools', '20000');
  cfg.mcpServers.h.max_tools = 50;
  const r = await tp(['--config', configFile(cfg)],
                     'local n = 0 for _, t in ipairs(tools.list()) do if t:match("^h%.") then n = n + 1 end end return n');
  eq(r.env && r.env.result, 50, 'tools of h');
  const cfg2 = server('--tools', '3000');
  cfg2.mcpServers.h.max_message = '64K';
  const r2 = await tp(['--config', configFile(cfg2)], 'return tools.list()');
  assert(r2.err.includes('more than the 65536 bytes it may send outside a call (its max_message in the config)'), r2.err);
}, 60000);

test('a tools/list line of 60 MB: dropped as it streams in, a warning names the server', async () => {
  const r = await tp(['--memory', '16M', '--config', configFile(server('--list-mb', '60'))], 'return tools.list()');
  assert(r.env && r.env.ok, r.out + r.err);
  assert(r.err.includes('tidepool: warning: mcpServers.h: tools/list failed: the MCP server h sent a message of more than'), r.err);
  underBound(r, 16);
}, 60000);

test('an answer dripped forever: the run ends at its time limit', async () => {
  const r = await tp(['--memory', '16M', '--timeout', '1s', '--config', configFile(server())], 'return tools.h.drip{ms = 5}');
  failed(r, 'limit.time');
  assert(r.ms < 15000, `took ${r.ms} ms`);
  underBound(r, 16);
}, 60000);

test('a server that never answers initialize: tidepool run --timeout 1s ends in time, and the envelope counts the wait', async () => {
  const r = await tp(['--timeout', '1s', '--config', configFile(server('--silent'))], 'return tools.h.ok{}');
  const m = failed(r, 'limit.time');
  eq(m, 'the script ran longer than its time limit of 1 s', 'message');
  assert(r.ms < 15000, `took ${r.ms} ms`);
  assert(r.env.stats.wait_ms >= 900 && r.env.stats.wait_ms < 5000, `wait_ms ${r.env.stats.wait_ms}`);
  assert(r.env.stats.wall_ms >= r.env.stats.wait_ms, `wall_ms ${r.env.stats.wall_ms}`);
  assert(r.err.includes('tidepool: warning: mcpServers.h: not ready within 1000 ms (the time limit of the run waiting for it): its tools are missing until it has started'), r.err);
}, 60000);

test('the wait for a server that does start is in wall_ms and wait_ms, and the run has the rest', async () => {
  const r = await tp(['--timeout', '20s', '--config', configFile(server())], 'return tools.h.ok{}');
  assert(r.env && r.env.ok, r.out + r.err);
  assert(r.env.stats.wait_ms > 0, `wait_ms ${r.env.stats.wait_ms}`);
  assert(r.env.stats.wall_ms >= r.env.stats.wait_ms, 'wall_ms counts the wait');
  // a script that names no tools starts no server and waits for nothing
  const r2 = await tp(['--timeout', '20s', '--config', configFile(server('--silent'))], 'return 1');
  eq(r2.env.stats.wait_ms, undefined, 'no wait');
}, 60000);

test('results that are not objects are tool.failed naming the server and what was wrong', async () => {
  const cfg = configFile(server());
  const want = {
    string_result: "the MCP server h broke the protocol: its answer's result is a string, not an object",
    array_result: "the MCP server h broke the protocol: its answer's result is an array, not an object",
    no_result: "the MCP server h broke the protocol: its answer's result is missing (and there is no error), not an object",
    error_string: 'the MCP server h broke the protocol: its error is a string, not an object {code, message}',
  };
  for (const [tool, msg] of Object.entries(want)) {
    const r = await tp(['--config', cfg], `return tools.h.${tool}{}`);
    eq(failed(r, 'tool.failed'), `tools.h.${tool} failed: ${msg}`, tool);
  }
}, 60000);

// ---- http.fetch against a hostile HTTP server ---------------------------------------

const big = Buffer.alloc(MB, 'y');
const web = http.createServer((req, res) => {
  const u = new URL(req.url, 'http://x');
  if (u.pathname === '/big') {  // mb megabytes, a megabyte at a time
    const mb = Number(u.searchParams.get('mb'));
    res.writeHead(200, { 'content-type': 'text/plain' });
    let i = 0;
    const more = () => {
      while (i < mb) { i++; if (!res.write(big)) return res.once('drain', more); }
      res.end();
    };
    return more();
  }
  if (u.pathname === '/drip') {  // never ends: a few bytes every 5 ms
    res.writeHead(200, { 'content-type': 'text/plain' });
    const t = setInterval(() => res.write('dddd'), 5);
    return res.on('close', () => clearInterval(t));
  }
  res.writeHead(404).end();
});
const port = await new Promise((r) => web.listen(0, '127.0.0.1', () => r(web.address().port)));
const httpCfg = (extra = {}) => configFile({ http: { allow: ['127.0.0.1'], allow_private: ['127.0.0.1/32'], ...extra } });
// tp with the built-in tools (http.fetch is one)
function tpFetch(args, script) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const child = spawn(tidepool, ['run', '--json', ...args, '-'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '', err = '', peak = 0;
    live.add(child);
    const poll = setInterval(() => { peak = Math.max(peak, hwm(child.pid)); }, 5);
    child.stdout.on('data', (d) => { out += d; peak = Math.max(peak, hwm(child.pid)); });
    child.stderr.on('data', (d) => { err += d; });
    child.on('error', (e) => { clearInterval(poll); live.delete(child); reject(e); });
    child.on('exit', () => { clearInterval(poll); live.delete(child); });
    child.on('close', (code) => {
      let env = null;
      try { env = JSON.parse(out); } catch { /* checked by the test */ }
      resolve({ code, out, err, ms: Date.now() - t0, env, peak });
    });
    child.stdin.end(script);
  });
}

const parallelFetch = (n, mb) => `
local fs = {}
for i = 1, ${n} do
  fs[i] = function() return tools.http.fetch{url = "http://127.0.0.1:${port}/big?mb=${mb}&i=" .. i} end
end
local got = {parallel(table.unpack(fs))}
return #got`;

test('32 parallel fetches of 10 MB at --memory 16M: charged as they arrive, limit.memory, bounded RSS', async () => {
  const r = await tpFetch(['--memory', '16M', '--config', httpCfg()], parallelFetch(32, 10));
  const m = failed(r, 'limit.memory');
  assert(m.includes("came to more than the run's memory limit allows"), m);
  underBound(r, 16);
}, 60000);

test('one fetch of 3 MB fits: the body is whole', async () => {
  const r = await tpFetch(['--memory', '64M', '--config', httpCfg()],
                          `local r = tools.http.fetch{url = "http://127.0.0.1:${port}/big?mb=3"} return {#r.body, r.truncated}`);
  assert(r.env && r.env.ok, r.out + r.err);
  eq(r.env.result, [3 * MB, false], 'body');
  underBound(r, 64);
}, 60000);

test('a body dripped forever: the run ends at its time limit', async () => {
  const r = await tpFetch(['--memory', '16M', '--timeout', '1s', '--config', httpCfg()],
                          `return tools.http.fetch{url = "http://127.0.0.1:${port}/drip"}`);
  failed(r, 'limit.time');
  assert(r.ms < 15000, `took ${r.ms} ms`);
  underBound(r, 16);
}, 60000);

// ---- an MCP server over Streamable HTTP that answers with huge bodies ------------------
// POST /mcp: the handshake as JSON; tools/call "long" answers {mb} megabytes as one JSON
// body, "long_sse" as one SSE event, "ok" a small JSON answer.
const mcpTools = ['long', 'long_sse', 'ok'].map((name) => ({ name, description: name, inputSchema: { type: 'object' } }));
const mcpWeb = http.createServer((req, res) => {
  if (req.method !== 'POST') return res.writeHead(405).end();
  let body = '';
  req.on('data', (d) => { body += d; });
  req.on('end', async () => {
    const m = JSON.parse(body);
    if (m.id === undefined) return res.writeHead(202).end();
    const json = (result) => {
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 's1' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: m.id, ...result }));
    };
    if (m.method === 'initialize') {
      return json({ result: { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'web', version: '1' } } });
    }
    if (m.method === 'tools/list') return json({ result: { tools: mcpTools } });
    if (m.method !== 'tools/call') return json({ error: { code: -32601, message: 'no' } });
    const { name, arguments: args } = m.params;
    if (name === 'ok') return json({ result: { content: [{ type: 'text', text: '"fine"' }] } });
    const sse = name === 'long_sse';
    res.writeHead(200, { 'content-type': sse ? 'text/event-stream' : 'application/json' });
    const write = (t) => new Promise((r) => { if (res.write(t)) r(); else res.once('drain', r); });
    const closed = new Promise((r) => res.on('close', r));
    await write(`${sse ? 'data: ' : ''}{"jsonrpc":"2.0","id":${m.id},"result":{"content":[{"type":"text","text":"`);
    for (let i = 0; i < args.mb; i++) {
      if (await Promise.race([write(big.toString()), closed.then(() => 'closed')]) === 'closed') return;
    }
    res.end(`"}]}}${sse ? '\n\n' : ''}`);
  });
});
const mcpPort = await new Promise((r) => mcpWeb.listen(0, '127.0.0.1', () => r(mcpWeb.address().port)));
const webServer = () => configFile({ mcpServers: { w: { url: `http://127.0.0.1:${mcpPort}/mcp` } } });

test('Streamable HTTP: a 60 MB JSON body or SSE event at --memory 16M is refused as it streams in', async () => {
  for (const tool of ['long', 'long_sse']) {
    const r = await tp(['--memory', '16M', '--config', webServer()], `return tools.w.${tool}{mb = 60}`);
    const m = failed(r, 'tool.invalid_output');
    assert(m.startsWith(`tools.w.${tool} returned an invalid result: the MCP server w sent a message of more than `), m);
    assert(m.includes('(--tool-bytes 4194304: a result\'s JSON; the message 12648448 bytes)'), m);
    underBound(r, 16);
  }
  const r = await tp(['--memory', '16M', '--config', webServer()], 'return tools.w.ok{}');
  eq(r.env && r.env.result, 'fine', 'a small answer');
}, 120000);

test('close the HTTP servers', async () => {
  web.closeAllConnections();
  await new Promise((r) => web.close(r));
  mcpWeb.closeAllConnections();
  await new Promise((r) => mcpWeb.close(r));
  fs.rmSync(tmp, { recursive: true, force: true });
});

await run();
