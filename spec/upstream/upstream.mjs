// Upstream MCP servers as Lua APIs (lua/upstream.lua): build/tidepool run|describe
// --config FILE against real servers: @modelcontextprotocol/server-memory,
// server-filesystem and server-everything from npm (spec/mcp/package.json, installed by
// scripts/run-tests.sh), and edge-server.mjs, a raw JSON-RPC server of our own for what
// those do not reach (names, pages, list_changed, progress, cancellation, dying, eras).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test, run, assert, eq, sleep, root, tidepool } from '../mcp/harness.mjs';

const mods = path.join(root, 'spec', 'mcp', 'node_modules', '@modelcontextprotocol');
const edge = path.join(root, 'spec', 'upstream', 'edge-server.mjs');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-upstream-'));
let nfile = 0;

function fresh(name) {
  const d = path.join(tmp, `${name}-${++nfile}`);
  fs.mkdirSync(d, { recursive: true });
  return d;
}

function configFile(servers) {
  const f = path.join(tmp, `config-${++nfile}.json`);
  fs.writeFileSync(f, JSON.stringify({ mcpServers: servers }));
  return f;
}

const memory = (file) => ({ command: 'node', args: [path.join(mods, 'server-memory', 'dist', 'index.js')],
                            env: { MEMORY_FILE_PATH: file } });
const filesystem = (dir) => ({ command: 'node', args: [path.join(mods, 'server-filesystem', 'dist', 'index.js'), dir] });
const everything = () => ({ command: 'node', args: [path.join(mods, 'server-everything', 'dist', 'index.js')] });
const edgeServer = (dir, ...flags) => ({ command: 'node', args: [edge, ...flags], env: { EDGE_DIR: dir } });

// Runs tidepool with args, the script on stdin; resolves {code, out, err, ms}. onStderr
// and during(child) may act while it runs.
function tp(args, script, during) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const child = spawn(tidepool, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '', err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, out, err, ms: Date.now() - t0 }));
    if (during) during(child);
    child.stdin.end(script || '');
  });
}

async function runLua(config, script, extra = [], during) {
  const r = await tp(['run', '--json', '--no-builtin-tools', '--config', config, ...extra, '-'],
                     script, during);
  let env;
  try { env = JSON.parse(r.out); } catch { throw new Error(`not JSON (exit ${r.code}): ${r.out}\n${r.err}`); }
  return { ...r, env };
}

function okResult(r) {
  assert(r.env.ok, `the run failed: ${JSON.stringify(r.env.error)}\nstderr: ${r.err}`);
  return r.env.result;
}

const alive = (pid) => { try { process.kill(pid, 0); return true; } catch { return false; } };

async function waitFor(file, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (fs.existsSync(file)) return true;
    await sleep(20);
  }
  return false;
}

const lines = (dir, f) => fs.existsSync(path.join(dir, f))
  ? fs.readFileSync(path.join(dir, f), 'utf8').split('\n').filter(Boolean) : [];

// ---- the npm servers ---------------------------------------------------------------------

test('server-memory: entities written, then read back through tools.memory', async () => {
  const d = fresh('memory');
  const cfg = configFile({ memory: memory(path.join(d, 'memory.jsonl')) });
  const r = await runLua(cfg, `
    tools.memory.create_entities{entities = {{name = "Ada", entityType = "person",
                                              observations = {"wrote the first program"}}}}
    tools.memory.add_observations{observations = {{entityName = "Ada", contents = {"born 1815"}}}}
    local g = tools.memory.open_nodes{names = {"Ada"}}
    return {n = #g.entities, name = g.entities[1].name, obs = g.entities[1].observations}`);
  eq(okResult(r), { n: 1, name: 'Ada', obs: ['wrote the first program', 'born 1815'] });
  eq(r.env.calls.map((c) => c.tool), ['memory.create_entities', 'memory.add_observations', 'memory.open_nodes']);
}, 30000);

test('server-filesystem: a file inside its root is read; outside it, tool.failed with the server\'s words', async () => {
  const d = fresh('fs');
  fs.writeFileSync(path.join(d, 'notes.txt'), 'line one\nline two\n');
  const cfg = configFile({ files: filesystem(d) });
  const r = await runLua(cfg, `
    local t = tools.files.read_text_file{path = ${JSON.stringify(path.join(d, 'notes.txt'))}}
    tools.files.write_file{path = ${JSON.stringify(path.join(d, 'out.txt'))}, content = "written"}
    local ok, err = pcall(tools.files.read_text_file, {path = "/etc/hostname"})
    return {text = t.content, ok = ok, code = err.code, message = err.message}`);
  const res = okResult(r);
  eq(res.text, 'line one\nline two\n');
  eq(fs.readFileSync(path.join(d, 'out.txt'), 'utf8'), 'written');
  eq([res.ok, res.code], [false, 'tool.failed']);
  assert(/Access denied - path outside allowed directories/.test(res.message), res.message);
}, 30000);

test('server-everything: text, structuredContent, mixed content and a long operation', async () => {
  const cfg = configFile({ everything: everything() });
  const r = await runLua(cfg, `
    local img = tools.everything.get_tiny_image{}
    local kinds = {}
    for i, c in ipairs(img.content) do kinds[i] = c.type end
    return {
      sum = tools.everything.get_sum{a = 2, b = 40},
      weather = tools.everything.get_structured_content{location = "Chicago"},
      kinds = kinds,
      long = tools.everything.trigger_long_running_operation{duration = 1, steps = 2},
    }`);
  const res = okResult(r);
  eq(res.sum, 'The sum of 2 and 40 is 42.');
  eq(Object.keys(res.weather).sort(), ['conditions', 'humidity', 'temperature']);
  eq(res.kinds, ['text', 'image', 'text']);
  eq(res.long, 'Long running operation completed. Duration: 1 seconds, Steps: 2.');
}, 30000);

test('two servers in one run: a file read through one is remembered by the other', async () => {
  const d = fresh('two');
  fs.writeFileSync(path.join(d, 'fact.txt'), 'tidepool runs Lua');
  const cfg = configFile({ files: filesystem(d), memory: memory(path.join(d, 'm.jsonl')) });
  const r = await runLua(cfg, `
    local fact = tools.files.read_text_file{path = ${JSON.stringify(path.join(d, 'fact.txt'))}}.content
    tools.memory.create_entities{entities = {{name = "tidepool", entityType = "project", observations = {fact}}}}
    local found = tools.memory.search_nodes{query = "tidepool"}
    return found.entities[1].observations[1]`);
  eq(okResult(r), 'tidepool runs Lua');
}, 30000);

test('describe lists the upstream tools like any other; tools.search finds them', async () => {
  const d = fresh('describe');
  const cfg = configFile({ memory: memory(path.join(d, 'm.jsonl')) });
  const r = await tp(['describe', '--no-builtin-tools', '--config', cfg, '--describe', 'compact']);
  eq(r.code, 0, r.err);
  assert(/^memory\.create_entities\{entities\}( -> \{entities\})?$/m.test(r.out), r.out);
  assert(/^memory\.search_nodes\{query\}( -> \{entities, relations\})?$/m.test(r.out), r.out);
  const s = await runLua(cfg, `
    local hits = {}
    for _, h in ipairs(tools.search("knowledge graph observations")) do hits[#hits + 1] = h.name end
    return {hits = hits, api = tools.describe("memory.open_nodes")}`);
  const res = okResult(s);
  assert(res.hits.includes('memory.add_observations'), JSON.stringify(res.hits));
  assert(/^memory\.open_nodes\{ -- Open specific nodes/.test(res.api), res.api);
}, 30000);

// ---- names -------------------------------------------------------------------------------

test('names become Lua names (-, ., space, digit, keyword); the raw name works with brackets', async () => {
  const d = fresh('names');
  const cfg = configFile({ 'edge-srv': edgeServer(d, '--names') });
  const r = await runLua(cfg, `
    local e = tools.edge_srv
    return {e.get_item{}, e["get-item"]{}, e.a_b{}, e["a.b"]{}, e.with_space{},
            e["with space"]{}, e._9lives{}, e["9lives"]{}, e.end_{}, e["end"]{}, e.x_y{}}`);
  eq(okResult(r), ['get-item', 'get-item', 'a.b', 'a.b', 'with space', 'with space', '9lives', '9lives',
                   'end', 'end', 'x_y']);
  eq(r.env.calls[1].tool, 'edge_srv.get-item');
  eq(r.env.calls[1].ok, true);
}, 20000);

test('a collision is an error naming both tools; --strict exits 3; rename settles it', async () => {
  const d = fresh('collide');
  const cfg = configFile({ edge: edgeServer(d, '--collide') });
  const r = await runLua(cfg, 'return tools.edge.x_y{}');
  assert(/mcpServers\.edge: tools "x-y" and "x\.y" both become tools\.edge\.x_y; give one another name with "rename"/.test(r.err), r.err);
  eq(r.env.error.code, 'tool.unknown');
  const strict = await tp(['run', '--strict', '--no-builtin-tools', '--config', cfg, '-'],
                          'return tools.edge.echo{text = "x"}');
  eq(strict.code, 3, strict.err);
  const renamed = configFile({ edge: { ...edgeServer(d, '--collide'), rename: { 'x.y': 'x_dot_y' } } });
  const ok = await runLua(renamed, 'return {tools.edge.x_y{}, tools.edge.x_dot_y{}, tools.edge["x.y"]{}}');
  eq(okResult(ok), ['x-y', 'x.y', 'x.y']);
  assert(!/both become/.test(ok.err), ok.err);
}, 30000);

// ---- the protocol ------------------------------------------------------------------------

test('tools/list page by page: every page\'s tools are there', async () => {
  const d = fresh('pages');
  const cfg = configFile({ edge: edgeServer(d, '--page-size', '3', '--many') });
  const r = await runLua(cfg, `
    local n = 0
    for _, name in ipairs(tools.list()) do if name:match("^edge%.") then n = n + 1 end end
    return {n = n, last = tools.edge.t149{}, first = tools.edge.echo{text = "p"}}`);
  eq(okResult(r), { first: 'p', last: 't149', n: 161 });
  eq(lines(d, 'methods').filter((l) => l === 'tools/list').length, 54);
}, 30000);

test('tools/list stops at 64 pages, and at a repeated cursor, saying so', async () => {
  const d = fresh('forever');
  const cfg = configFile({ edge: edgeServer(d, '--page-size', '1', '--many', '--pages-forever') });
  const r = await runLua(cfg, `
    local n = 0
    for _, name in ipairs(tools.list()) do if name:match("^edge%.") then n = n + 1 end end
    return n`);
  eq(okResult(r), 64);
  assert(/tools\/list has more than 64 pages; the tools of the first 64 are used/.test(r.err), r.err);
  const d2 = fresh('loop');
  const cfg2 = configFile({ edge: edgeServer(d2, '--page-size', '4', '--loop-cursor') });
  const r2 = await runLua(cfg2, `
    local n = 0
    for _, name in ipairs(tools.list()) do if name:match("^edge%.") then n = n + 1 end end
    return n`);
  eq(okResult(r2), 8);
  assert(/tools\/list gave the cursor "c4" twice; listing stopped there/.test(r2.err), r2.err);
  eq(lines(d2, 'methods').filter((l) => l === 'tools/list').length, 2);
}, 30000);

test('notifications/tools/list_changed: a new tool is callable, a removed one is tool.unavailable', async () => {
  const d = fresh('changed');
  const cfg = configFile({ edge: edgeServer(d) });
  const r = await runLua(cfg, `
    tools.edge.add_tool{}
    local late, tries = nil, 0
    repeat
      tries = tries + 1
      local ok, v = pcall(tools.edge.late, {})
      if ok then late = v else tools.time.sleep{ms = 50} end
    until late or tries > 40
    local ok, err = pcall(tools.edge.two_texts, {})
    return {late = late, code = err.code, message = err.message}`, ['--tools', path.join(root, 'tools')]);
  const res = okResult(r);
  eq(res.late, 'late');
  eq(res.code, 'tool.unavailable');
  assert(/the MCP server edge no longer offers this tool/.test(res.message), res.message);
}, 30000);

test('results unwrap: structuredContent, JSON text, plain text, mixed content; isError and JSON-RPC errors are tool.failed', async () => {
  const d = fresh('results');
  const cfg = configFile({ edge: edgeServer(d) });
  const r = await runLua(cfg, `
    local function err(f) local ok, e = pcall(f, {}) return {ok = ok, code = e.code, message = e.message} end
    local j = tools.edge.json_text{}
    local m = tools.edge.mixed{}
    return {
      structured = tools.edge.structured{},
      json = {a = j.a, b = j.b, c_is_null = j.c == json.null},
      text = tools.edge.echo{text = "not { json"},
      mixed = {#m.content, m.content[1].text, m.content[2].type},
      two = #tools.edge.two_texts{}.content,
      fail = err(tools.edge.fail),
      rpc = err(tools.edge.rpc_error),
      bad_output = err(tools.edge.bad_structured),
    }`);
  const res = okResult(r);
  eq(res.structured, { n: 5 });
  eq(res.json, { a: 1, b: [1, 2], c_is_null: true });
  eq(res.text, 'not { json');
  eq(res.mixed, [2, 'a picture', 'image']);
  eq(res.two, 2);
  eq([res.fail.ok, res.fail.code, res.fail.message], [false, 'tool.failed', 'tools.edge.fail failed: it broke: disk full']);
  eq(res.rpc.code, 'tool.failed');
  assert(/the MCP server edge answered with an error: no such item \(JSON-RPC code -32000\)/.test(res.rpc.message), res.rpc.message);
  eq(res.bad_output.code, 'tool.invalid_output');
}, 20000);

test('arguments are checked against inputSchema before anything is sent', async () => {
  const d = fresh('input');
  const cfg = configFile({ edge: edgeServer(d) });
  const r = await runLua(cfg, `
    local ok, e = pcall(tools.edge.echo, {text = 5})
    return {ok = ok, code = e.code, message = e.message}`);
  const res = okResult(r);
  eq([res.ok, res.code], [false, 'tool.invalid_input']);
  assert(/\$\.text: expected string/.test(res.message), res.message);
  eq(lines(d, 'methods').filter((l) => l === 'tools/call').length, 0);
}, 20000);

test('version negotiation: 2025-06-18 is accepted, 2024-11-05 refused with why', async () => {
  const d = fresh('v1');
  const ok = await runLua(configFile({ edge: edgeServer(d, '--version', '2025-06-18') }),
                          'return tools.edge.echo{text = "v"}');
  eq(okResult(ok), 'v');
  eq(lines(d, 'methods').slice(0, 4), ['server/discover 2026-07-28', 'initialize', 'notifications/initialized', 'tools/list']);
  const d2 = fresh('v2');
  const old = await runLua(configFile({ edge: edgeServer(d2, '--version', '2024-11-05') }),
                           'return tools.edge.echo{text = "v"}');
  assert(/mcpServers\.edge: the server speaks MCP 2024-11-05; tidepool speaks 2025-11-25, 2025-06-18/.test(old.err), old.err);
  eq(old.env.error.code, 'tool.unknown');
}, 20000);

test('the 2026-07-28 era: server/discover, no initialize, _meta on every request', async () => {
  const d = fresh('modern');
  const r = await runLua(configFile({ edge: edgeServer(d, '--modern') }), 'return tools.edge.echo{text = "new"}');
  eq(okResult(r), 'new');
  eq(lines(d, 'methods'), ['server/discover 2026-07-28', 'tools/list 2026-07-28', 'tools/call 2026-07-28']);
}, 20000);

test('progress extends a call past its timeout_ms; without progress it times out and is cancelled', async () => {
  const d = fresh('progress');
  const cfg = configFile({ edge: { ...edgeServer(d), timeout_ms: 600 } });
  const r = await runLua(cfg, `
    local slow = tools.edge.slow{ms = 1500, progress = true}
    local ok, e = pcall(tools.edge.slow, {ms = 3000})
    return {slow = slow, ok = ok, code = e.code, message = e.message}`);
  const res = okResult(r);
  eq(res.slow, 'slept 1500');
  eq([res.ok, res.code], [false, 'tool.timeout']);
  assert(/the MCP server edge did not answer within 600 ms, nor report progress/.test(res.message), res.message);
  eq(lines(d, 'cancelled'), ['5']);  // ids: server/discover 1, initialize 2, tools/list 3, slow 4 and 5
}, 30000);

test('progress extends a call only up to 4 times its timeout_ms', async () => {
  const d = fresh('hardcap');
  const cfg = configFile({ edge: { ...edgeServer(d), timeout_ms: 250 } });
  const r = await runLua(cfg, `
    local ok, e = pcall(tools.edge.slow, {ms = 3000, progress = true})
    return {ok = ok, code = e.code, message = e.message}`);
  const res = okResult(r);
  eq([res.ok, res.code], [false, 'tool.timeout']);
  assert(/did not answer within 1000 ms, the most its progress reports may extend the call to \(4 times its timeout_ms of 250\)/.test(res.message), res.message);
  const ms = r.env.calls[0].ms;
  assert(ms >= 990 && ms < 2500, `the call took ${ms} ms`);
  eq(lines(d, 'cancelled'), ['4']);
}, 20000);

test('a run that ends while a call waits cancels it upstream', async () => {
  const d = fresh('cancel');
  const r = await runLua(configFile({ edge: edgeServer(d) }), 'return tools.edge.slow{ms = 5000}', ['--timeout', '1s']);
  eq(r.env.error.code, 'limit.time');
  // the server reads the notification on its own time, which a loaded machine may give it
  // after tidepool has exited: wait for its line (the test's timeout bounds the wait)
  for (let i = 0; i < 500 && lines(d, 'cancelled').length === 0; i++) await sleep(20);
  eq(lines(d, 'cancelled').length, 1);
}, 30000);

test('a server killed mid-run: tool.unavailable while it is down, then it restarts', async () => {
  const d = fresh('kill');
  const cfg = configFile({ edge: edgeServer(d) });
  const r = await runLua(cfg, `
    local first = tools.edge.pid{}.pid
    local ok1, e1 = pcall(tools.edge.slow, {ms = 8000})
    local ok2, e2 = pcall(tools.edge.echo, {text = "down?"})
    local second, tries = nil, 0
    repeat
      tries = tries + 1
      tools.time.sleep{ms = 100}
      local ok, v = pcall(tools.edge.pid, {})
      if ok then second = v.pid end
    until second or tries > 50
    return {first = first, second = second, e1 = e1.code, m1 = e1.message, e2 = e2.code, m2 = e2.message}`,
  ['--tools', path.join(root, 'tools'), '--timeout', '20s', '--tool-timeout', '15s'], async () => {
    const pidFile = path.join(d, 'pid');
    assert(await waitFor(pidFile, 10000), 'no pid file');
    const pid = Number(fs.readFileSync(pidFile, 'utf8'));
    assert(await waitFor(path.join(d, `slow-${pid}`), 10000), 'the slow call never started');
    process.kill(pid, 'SIGKILL');
  });
  const res = okResult(r);
  eq(res.e1, 'tool.unavailable');
  assert(/the MCP server edge stopped during the call \(it exited with code 0, signal 9\)/.test(res.m1), res.m1);
  eq(res.e2, 'tool.unavailable');
  assert(/is down \(it exited with code 0, signal 9\); it restarts in \d+ ms/.test(res.m2), res.m2);
  assert(res.second && res.second !== res.first, JSON.stringify(res));
  assert(!alive(res.second), 'the restarted server outlived tidepool');
}, 40000);

test('an eager server restarts by itself after its backoff; a lazy one waits for a call', async () => {
  const d = fresh('eager');
  const cfg = configFile({ edge: { ...edgeServer(d), eager: true } });
  let killedAt = 0, restartedAt = 0, first = 0;
  // Eager: the new server is up before the script, asleep since before the kill, makes
  // its next call (the script's clock just before it, calledAt). A lazy server would start
  // only at that call. No bound on how long the restart takes: a loaded machine is slow.
  const r = await runLua(cfg, `
    local p1 = tools.edge.pid{}.pid
    tools.time.sleep{ms = 6000}
    local calledAt = tools.time.now{}.unix_ms
    return {p1, tools.edge.pid{}.pid, calledAt}`, ['--tools', path.join(root, 'tools'), '--timeout', '30s'], async () => {
    const pidFile = path.join(d, 'pid');
    assert(await waitFor(pidFile, 10000), 'no pid file');
    await sleep(300);
    first = Number(fs.readFileSync(pidFile, 'utf8'));
    process.kill(first, 'SIGKILL');
    killedAt = Date.now();
    while (Date.now() - killedAt < 20000) {
      if (Number(fs.readFileSync(pidFile, 'utf8')) !== first) { restartedAt = Date.now(); break; }
      await sleep(20);
    }
  });
  const [p1, p2, calledAt] = okResult(r);
  eq(p1, first);
  assert(p2 !== p1, `the same pid ${p1} after the kill`);
  assert(restartedAt && restartedAt < calledAt,
    `restarted ${restartedAt - killedAt} ms after the kill, ${restartedAt - calledAt} ms after the script's next call`);
  assert(/^\[edge\] the server stopped \(it exited with code 0, signal 9\); it restarts in 500 ms$/m.test(r.err), r.err);
}, 60000);

test('"disabled": true skips a server; two names that map to one Lua name are an error', async () => {
  const d = fresh('disabled');
  const cfg = configFile({ off: { ...edgeServer(d), disabled: true }, 'a-b': edgeServer(fresh('ab')),
                           a_b: edgeServer(fresh('ab2')) });
  const r = await runLua(cfg, `
    local n = 0
    for _, name in ipairs(tools.list()) do if name:match("^off%.") then n = n + 1 end end
    return {n, tools.a_b.echo{text = "one"}}`);
  eq(okResult(r), [0, 'one']);
  assert(!fs.existsSync(path.join(d, 'pid')), 'the disabled server was started');
  assert(/mcpServers: servers "a-b" and "a_b" both become tools\.a_b; rename one of them in the config/.test(r.err), r.err);
}, 20000);

test('stderr lines are prefixed with the server\'s name; servers are gone when tidepool exits', async () => {
  const d = fresh('stderr');
  const r = await runLua(configFile({ edge: edgeServer(d) }), 'return tools.edge.pid{}.pid');
  assert(/^\[edge\] edge server up$/m.test(r.err) && /^\[edge\] second line$/m.test(r.err), r.err);
  assert(!alive(okResult(r)), 'the server outlived tidepool');
}, 20000);

test('a server that ignores stdin\'s end and SIGTERM is killed (SIGKILL) at exit', async () => {
  const d = fresh('stubborn');
  const r = await runLua(configFile({ edge: edgeServer(d, '--stubborn') }), 'return tools.edge.pid{}.pid');
  const pid = okResult(r);
  assert(!alive(pid), 'the stubborn server outlived tidepool');
  eq(lines(d, 'signals'), ['SIGTERM']);
  assert(r.ms >= 1900 && r.ms < 10000, `took ${r.ms} ms`);
}, 20000);

test('a server that cannot start: a warning, and the run goes on without it', async () => {
  const d = fresh('nostart');
  const cfg = configFile({ gone: { command: path.join(d, 'no-such-program') }, edge: edgeServer(d) });
  const r = await runLua(cfg, 'return tools.edge.echo{text = "still here"}');
  eq(okResult(r), 'still here');
  assert(/mcpServers\.gone: cannot start ".*no-such-program": ENOENT/.test(r.err), r.err);
}, 20000);

// ---- Streamable HTTP ---------------------------------------------------------------------

function freePort() {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => { const { port } = srv.address(); srv.close(() => resolve(port)); });
  });
}

// server-everything's Streamable HTTP transport on 127.0.0.1; resolves {url, stop}.
async function everythingHttp() {
  const port = await freePort();
  const child = spawn('node', ['--require', path.join(root, 'spec', 'upstream', 'webcrypto.cjs'),
    path.join(mods, 'server-everything', 'dist', 'index.js'), 'streamableHttp'],
                      { env: { ...process.env, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`server-everything did not listen: ${out}`)), 15000);
    const look = (d) => { out += d; if (/listening on port/.test(out)) { clearTimeout(t); resolve(); } };
    child.stdout.on('data', look);
    child.stderr.on('data', look);
  });
  return { url: `http://127.0.0.1:${port}/mcp`, stop: () => child.kill('SIGTERM') };
}

test('Streamable HTTP (server-everything): session kept, JSON and SSE answers, progress', async () => {
  const ev = await everythingHttp();
  try {
    const cfg = configFile({ web: { url: ev.url, headers: { 'X-Test': 'yes' } } });
    const r = await runLua(cfg, `
      return {
        sum = tools.web.get_sum{a = 20, b = 22},
        weather = tools.web.get_structured_content{location = "Chicago"},
        long = tools.web.trigger_long_running_operation{duration = 1, steps = 2},
      }`);
    const res = okResult(r);
    eq(res.sum, 'The sum of 20 and 22 is 42.');
    eq(Object.keys(res.weather).sort(), ['conditions', 'humidity', 'temperature']);
    eq(res.long, 'Long running operation completed. Duration: 1 seconds, Steps: 2.');
  } finally { ev.stop(); }
}, 40000);

test('Streamable HTTP (edge --http): session and headers on every POST, list_changed on the GET stream', async () => {
  const port = await freePort();
  const d = fresh('edgehttp');
  const child = spawn('node', [edge, '--http', String(port)], { env: { ...process.env, EDGE_DIR: d },
                                                              stdio: ['ignore', 'ignore', 'pipe'] });
  try {
    let err = '';
    await new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`edge did not listen: ${err}`)), 10000);
      child.stderr.on('data', (x) => { err += x; if (/edge listening/.test(err)) { clearTimeout(t); resolve(); } });
    });
    const cfg = configFile({ web: { url: `http://127.0.0.1:${port}/mcp`, headers: { 'X-Test': 'yes' } } });
    const r = await runLua(cfg, `
      tools.web.add_tool{}
      local late, tries = nil, 0
      repeat
        tries = tries + 1
        local ok, v = pcall(tools.web.late, {})
        if ok then late = v else tools.time.sleep{ms = 50} end
      until late or tries > 40
      return {late = late, slow = tools.web.slow{ms = 300, progress = true}}`, ['--tools', path.join(root, 'tools')]);
    eq(okResult(r), { late: 'late', slow: 'slept 300' });
    const http = lines(d, 'http');
    eq(http[0], 'POST - 2026-07-28 yes');        // server/discover: -32601 from this one
    eq(http[1], 'POST - - yes');                 // initialize
    assert(http.includes('GET s1 2025-11-25 yes'), http.join('\n'));
    assert(http.filter((l) => l === 'POST s1 2025-11-25 yes').length >= 4, http.join('\n'));
    eq(http[http.length - 1], 'DELETE s1 2025-11-25 yes');  // the session ends with tidepool
  } finally { child.kill('SIGTERM'); }
}, 30000);

test('Streamable HTTP: nothing listening is a warning naming the URL', async () => {
  const port = await freePort();
  const d = fresh('nohttp');
  const cfg = configFile({ web: { url: `http://127.0.0.1:${port}/mcp` }, edge: edgeServer(d) });
  const r = await runLua(cfg, 'return tools.edge.echo{text = "ok"}');
  eq(okResult(r), 'ok');
  assert(new RegExp(`mcpServers\\.web: initialize failed: cannot reach the MCP server web at http://127\\.0\\.0\\.1:${port}/mcp`).test(r.err), r.err);
}, 30000);

// ---- through tidepool mcp -------------------------------------------------------------

test('tidepool mcp: run_lua\'s description lists the upstream tools; their progress reaches our client as notifications/progress', async () => {
  const d = fresh('mcp');
  const cfg = configFile({ edge: edgeServer(d) });
  const child = spawn(tidepool, ['mcp', '--no-builtin-tools', '--workers', '1', '--config', cfg],
                      { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (x) => { out += x; });
  const sendLine = (m) => child.stdin.write(JSON.stringify({ jsonrpc: '2.0', ...m }) + '\n');
  sendLine({ id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } });
  sendLine({ method: 'notifications/initialized' });
  sendLine({ id: 3, method: 'tools/list' });
  sendLine({ id: 2, method: 'tools/call', params: { name: 'run_lua', _meta: { progressToken: 'tok' },
             arguments: { code: 'return tools.edge.slow{ms = 350, progress = true}' } } });
  const end = Date.now() + 15000;
  while (!(/"id":2/.test(out) && /"id":3/.test(out)) && Date.now() < end) await sleep(50);
  child.stdin.end();
  const msgs = out.split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const progress = msgs.filter((m) => m.method === 'notifications/progress').map((m) => m.params.message);
  assert(progress.includes('tools.edge.slow: at 100 (100/350)'), JSON.stringify(progress));
  const runLuaTool = msgs.find((m) => m.id === 3).result.tools.find((t) => t.name === 'run_lua');
  // the full text when it fits in 2,048 characters, else one line a tool
  assert(/^edge\.slow\{ms(: integer, progress\?: boolean|, \.\.\.)\}( -> .+)?$/m.test(runLuaTool.description), runLuaTool.description);
  const done = msgs.find((m) => m.id === 2);
  eq(done.result.structuredContent.result, 'slept 350');
}, 30000);

test('tidepool mcp --workers 2: each worker\'s engine has the servers (a process each)', async () => {
  const d = fresh('workers');
  const cfg = configFile({ edge: edgeServer(d) });
  const child = spawn(tidepool, ['mcp', '--no-builtin-tools', '--workers', '2', '--config', cfg],
                      { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (x) => { out += x; });
  const sendLine = (m) => child.stdin.write(JSON.stringify({ jsonrpc: '2.0', ...m }) + '\n');
  sendLine({ id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } });
  sendLine({ method: 'notifications/initialized' });
  const code = 'tools.edge.slow{ms = 400} return tools.edge.pid{}.pid';
  sendLine({ id: 2, method: 'tools/call', params: { name: 'run_lua', arguments: { code } } });
  sendLine({ id: 3, method: 'tools/call', params: { name: 'run_lua', arguments: { code } } });
  const end = Date.now() + 15000;
  while (!(/"id":2/.test(out) && /"id":3/.test(out)) && Date.now() < end) await sleep(50);
  child.stdin.end();
  const msgs = out.split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const pids = [2, 3].map((id) => msgs.find((m) => m.id === id).result.structuredContent.result);
  assert(Number.isInteger(pids[0]) && Number.isInteger(pids[1]) && pids[0] !== pids[1], JSON.stringify(pids));
}, 30000);

test('tidepool mcp without --workers runs one worker when the config has servers: one copy of each', async () => {
  const d = fresh('one-worker');
  const cfg = configFile({ edge: edgeServer(d) });
  const child = spawn(tidepool, ['mcp', '--no-builtin-tools', '--config', cfg],
                      { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (x) => { out += x; });
  const sendLine = (m) => child.stdin.write(JSON.stringify({ jsonrpc: '2.0', ...m }) + '\n');
  sendLine({ id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } });
  sendLine({ method: 'notifications/initialized' });
  const code = 'tools.edge.slow{ms = 300} return tools.edge.pid{}.pid';
  for (const id of [2, 3, 4]) sendLine({ id, method: 'tools/call', params: { name: 'run_lua', arguments: { code } } });
  const end = Date.now() + 15000;
  while (!(/"id":2/.test(out) && /"id":3/.test(out) && /"id":4/.test(out)) && Date.now() < end) await sleep(50);
  child.stdin.end();
  const msgs = out.split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const pids = [2, 3, 4].map((id) => msgs.find((m) => m.id === id).result.structuredContent.result);
  assert(Number.isInteger(pids[0]) && pids[1] === pids[0] && pids[2] === pids[0], JSON.stringify(pids));
}, 30000);

// ---- examples/reach: docs/config.md's example, as written but for where the servers come from

test('examples/reach: one script uses the HTTP API, git, the filesystem and memory servers', async () => {
  const d = fresh('reach');
  for (const f of ['api.mjs', 'config.json', 'script.lua', 'run.sh'])
    fs.copyFileSync(path.join(root, 'examples', 'reach', f), path.join(d, f));
  const cfg = JSON.parse(fs.readFileSync(path.join(d, 'config.json'), 'utf8'));
  delete cfg.$schema;  // a path relative to the repository
  // npx would fetch the servers from the registry: the ones this suite installed serve
  cfg.mcpServers.memory = { ...cfg.mcpServers.memory, ...memory(path.join(d, 'memory.jsonl')) };
  cfg.mcpServers.files = { ...cfg.mcpServers.files, ...filesystem('.') };
  fs.writeFileSync(path.join(d, 'config.json'), JSON.stringify(cfg));
  const r = await new Promise((resolve, reject) => {
    const child = spawn('sh', [path.join(d, 'run.sh'), '--json'],
                        { env: { ...process.env, TIDEPOOL: tidepool }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    child.stdout.on('data', (x) => { out += x; });
    child.stderr.on('data', (x) => { err += x; });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, out, err }));
  });
  let env;
  try { env = JSON.parse(r.out); } catch { throw new Error(`not JSON (exit ${r.code}): ${r.out}\n${r.err}`); }
  assert(env.ok, JSON.stringify(env.error) + r.err);
  eq(env.result, { issues: [  // keys sorted, as the envelope has them
    { fixed_by: 'Fix the crash on an empty config file (#1)', number: 1,
      title: 'Crash when the config file is empty' },
    { number: 3, title: 'Retry upstream calls after a restart' }], owner: 'Ada' });
  eq(env.calls.map((c) => c.tool), ['http.fetch', 'proc.run', 'files.read_text_file', 'http.fetch',
                                    'memory.create_entities']);
  const graph = fs.readFileSync(path.join(d, 'memory.jsonl'), 'utf8');
  assert(graph.includes('"2 open issues, 1 addressed"'), graph);
}, 60000);

await run();
fs.rmSync(tmp, { recursive: true, force: true });
