// tidepool inside a real Lua 5.4 server: Debian's lighttpd with mod_magnet (which runs on
// Debian's liblua5.4, 5.4.4) loads this build's tidepool.so from the handler of
// examples/lighttpd/, used as it is: the config is included and only its port changed.
// lighttpd runs in the foreground as this process's child on 127.0.0.1 and a free port;
// every wait has a deadline, so a server that does not start fails the suite, not hangs it.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, run, assert, eq, sleep, root, tidepool } from '../mcp/harness.mjs';

const build = path.resolve(root, process.env.BUILD || 'build');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tidepool-lighttpd-'));
const workspace = path.join(tmp, 'workspace');
fs.mkdirSync(workspace);
let server = null, port = 0, stderr = '';

function stop() {
  if (server && server.exitCode === null) server.kill('SIGKILL');
}
process.on('exit', () => { stop(); fs.rmSync(tmp, { recursive: true, force: true }); });

// Starts lighttpd on a port nobody holds: a port taken makes lighttpd exit at once
// ("Address already in use"), and the next one is tried. Resolves once it answers.
async function start() {
  for (let attempt = 0; attempt < 8; attempt++) {
    port = 20000 + Math.floor(Math.random() * 40000);
    const conf = path.join(tmp, 'lighttpd.conf');
    fs.writeFileSync(conf, `include "${root}/examples/lighttpd/lighttpd.conf"\n` +
                           `server.port := ${port}\n`);
    stderr = '';
    server = spawn('lighttpd', ['-D', '-f', conf], {
      cwd: root,  // the example's paths are under var.CWD
      env: { ...process.env, LUA_CPATH_5_4: `${build}/lua/?.so;;`,
             TIDEPOOL_WORKSPACE: workspace },
      stdio: ['ignore', 'inherit', 'pipe'],
    });
    server.stderr.setEncoding('utf8');
    server.stderr.on('data', (d) => { stderr += d; });
    for (let i = 0; i < 100 && server.exitCode === null; i++) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/run`,
                                { signal: AbortSignal.timeout(1000) });
        await res.text();
        return;
      } catch { await sleep(50); }
    }
    stop();
    if (!/Address already in use/.test(stderr)) break;
  }
  throw new Error(`lighttpd did not start: ${stderr.trim()}`);
}

async function post(source) {
  const t0 = Date.now();
  const res = await fetch(`http://127.0.0.1:${port}/run`, {
    method: 'POST', body: source, signal: AbortSignal.timeout(10000),
  });
  const text = await res.text();
  return { status: res.status, type: res.headers.get('content-type'), text,
           env: res.status === 200 ? JSON.parse(text) : null, ms: Date.now() - t0 };
}

// A value with every object's keys sorted, to compare envelopes whatever their order.
function sorted(v) {
  if (Array.isArray(v)) return v.map(sorted);
  if (v && typeof v === 'object') {
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])]));
  }
  return v;
}

test('lighttpd starts with examples/lighttpd and answers GET /run with 405', async () => {
  await start();
  const res = await fetch(`http://127.0.0.1:${port}/run`, { signal: AbortSignal.timeout(5000) });
  eq([res.status, res.headers.get('allow'), await res.text()],
     [405, 'POST', 'POST a Lua script to run\n'], 'the answer');
});

test('a POSTed script calls kv.* and fs.* tools and its envelope comes back as JSON', async () => {
  const r = await post('tools.kv.set{key = "greeting", value = "hello"}\n' +
                       'tools.fs.write{path = "note.txt", content = "hi"}\n' +
                       'return tools.kv.get{key = "greeting"}.value');
  eq(r.status, 200, 'status');
  eq(r.type, 'application/json', 'content-type');
  eq(r.env.ok, true, `ok (${r.text})`);
  eq(r.env.result, 'hello', 'result');
  eq(r.env.calls.map((c) => [c.tool, c.ok, c.line]),
     [['kv.set', true, 1], ['fs.write', true, 2], ['kv.get', true, 3]], 'calls');
  eq(fs.readFileSync(path.join(workspace, 'note.txt'), 'utf8'), 'hi', 'the file the run wrote');
});

test("the module's engine lives in lighttpd's Lua state: kv entries last across requests",
  async () => {
    const r = await post('return tools.kv.get{key = "greeting"}');
    eq(r.env.ok, true, `ok (${r.text})`);
    eq(r.env.result, { found: true, value: 'hello' }, 'result');
  });

test('a script of 300 KB (lighttpd keeps such a body in a temporary file) runs whole',
  async () => {
    const lines = ['local n = 0'];
    for (let i = 0; i < 10000; i++) lines.push('n = n + 1 -- ' + 'x'.repeat(20));
    const r = await post(lines.join('\n') + '\nreturn n');
    assert(r.ms < 8000, `answered after ${r.ms} ms`);
    eq([r.env.ok, r.env.result], [true, 10000], `the run (${r.text.slice(0, 200)})`);
  });

test('an endless loop stops at the handler\'s 1 s time limit with limit.time', async () => {
  const r = await post('while true do end');
  eq(r.status, 200, 'status');
  eq(r.env.ok, false, 'ok');
  eq([r.env.error.code, r.env.error.line, r.env.error.source],
     ['limit.time', 1, 'while true do end'], 'error');
  eq(r.env.calls, [], 'calls');
  assert(r.ms >= 900 && r.ms < 8000, `answered after ${r.ms} ms, not about 1 s`);
  const again = await post('return 1 + 1');  // lighttpd's one thread is free again
  eq([again.env.ok, again.env.result], [true, 2], 'the next request');
});

test('a syntax error comes back with code syntax, its line and its text', async () => {
  const r = await post('local x = 1\nreturn (');
  eq(r.env.ok, false, 'ok');
  eq([r.env.error.code, r.env.error.line, r.env.error.source, r.env.error.message],
     ['syntax', 2, 'return (', 'unexpected symbol near <eof>'], 'error');
});

test('the handler\'s JSON is the envelope `tidepool run --json` prints for the same script',
  async () => {
    const script = 'print("tab\\there", "quote\\"", "\\1")\n' +
      'return { list = {1, 2.5, -0.1, "x", 1e300}, empty = json.array({}), obj = {},\n' +
      '         nested = { a = { b = json.null } }, big = math.maxinteger, utf = "été" }';
    const r = await post(script);
    const cli = JSON.parse(execFileSync(tidepool, ['run', '--json', '--no-builtin-tools', '-'],
                                        { input: script, timeout: 10000 }).toString());
    delete r.env.stats;
    delete cli.stats;
    eq(r.env.ok, true, `ok (${r.text})`);
    eq(sorted(r.env), sorted(cli), 'the envelope');
  });

// lighttpd 1.4.69 exits with status 1 when a keep-alive connection (fetch keeps them) is
// still open at SIGTERM, with or without tidepool; 0 otherwise. Either is a clean stop.
test('lighttpd stops on SIGTERM, the module loaded', async () => {
  const exited = new Promise((res) => server.on('exit', (code, sig) => res(code ?? sig)));
  server.kill('SIGTERM');
  const how = await Promise.race([exited, sleep(5000).then(() => 'still running')]);
  assert(how === 0 || how === 1, `lighttpd after SIGTERM: ${how}; ${stderr.trim()}`);
  assert(/server stopped by UID/.test(stderr), `lighttpd's log: ${stderr.trim()}`);
});

run();
