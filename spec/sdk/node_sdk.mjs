// The Node SDK (sdk/node) against the real `tidepool mcp` of this build: caller tools
// answered live (an async one, one that throws, one called in a loop and in parallel()),
// abort mid-run, crashes kept out of this process, a missing binary, zod and recursive
// schemas, one process for many runs. zod comes from build/sdk-node/ai6
// (spec/sdk/install.sh). Run: BUILD=build node spec/sdk/node_sdk.mjs
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { test, run, assert, eq, sleep, tidepool as bin, root } from '../mcp/harness.mjs';
import { Tidepool, TidepoolError, modelView, createCodeTool } from '../../sdk/node/index.js';

const modules = path.resolve(root, process.env.BUILD || 'build', 'sdk-node', 'ai6');
const need = createRequire(path.join(modules, 'package.json'));
const { z } = await import(pathToFileURL(need.resolve('zod')).href);

const tp = new Tidepool({ binary: bin, builtinTools: false });

const SCRIPT = fs.readFileSync(path.join(root, 'spec/sdk/three_tools.lua'), 'utf8');

function userTools(seen) {
  return {
    weather: {
      description: 'Current weather for a city.',
      inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      execute: async ({ city }) => { seen.weather.push(city); await sleep(20); return { temp_c: 21 }; },
    },
    explode: {
      description: 'Always fails.',
      inputSchema: { type: 'object', properties: { why: { type: 'string' } } },
      execute: (args) => { seen.explode.push(args); throw new Error(`exploded: ${args.why}`); },
    },
    add: {
      description: 'Adds two integers.',
      inputSchema: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } },
        required: ['a', 'b'] },
      execute: async ({ a, b }) => { seen.add.push([a, b]); return { sum: a + b }; },
    },
  };
}

test('three caller tools: async, throwing, in a loop and in parallel(); exact arguments and results', async () => {
  const seen = { weather: [], explode: [], add: [] };
  const env = await tp.run(SCRIPT, { tools: userTools(seen) });
  eq(env.ok, true, `the run succeeded (${JSON.stringify(env.error)})`);
  eq(env.result, { code: 'tool.failed', message: 'tools.explode failed: exploded: boom', ok: false, par: [101, 202],
    sum: 36, temp: 21 }, 'the result');
  eq(seen.weather, ['Paris'], 'weather args');
  eq(seen.explode, [{ why: 'boom' }], 'explode args');
  eq(seen.add.slice(0, 3), [[1, 10], [2, 10], [3, 10]], 'add in the loop, in order');
  eq(seen.add.slice(3).sort((x, y) => x[0] - y[0]), [[100, 1], [200, 2]], 'add in parallel()');
  eq(env.calls.map((c) => c.tool), ['weather', 'explode', 'add', 'add', 'add', 'add', 'add'],
    'the calls, in the envelope');
  eq(env.calls[1].ok, false, 'the throw is a failed call');
  assert(typeof env.stats.wall_ms === 'number', 'stats');
  const view = modelView(env);
  eq(view.calls, { add: 5, explode: 1, weather: 1 }, 'the model view counts calls by tool');
});

test('one process serves many runs; a session keeps globals', async () => {
  const pid = await tp.pid();
  for (let i = 0; i < 20; i++) {
    const env = await tp.run(`return ${i} * 2`);
    eq(env.result, i * 2);
  }
  eq(await tp.pid(), pid, 'the same process');
  await tp.run('counter = 41', { session: 's1' });
  eq((await tp.run('counter = counter + 1 return counter', { session: 's1' })).result, 42);
});

test('a script error is an envelope, not an exception', async () => {
  const env = await tp.run('local x = nil; return x.y');
  eq(env.ok, false);
  eq(env.error.code, 'runtime');
  assert(/attempt to index/.test(env.error.message), env.error.message);
});

test('AbortSignal: aborting mid-run rejects the run and aborts the execute in flight', async () => {
  const ac = new AbortController();
  let started, sawAbort = false;
  const began = new Promise((r) => { started = r; });
  const tools = {
    slow: {
      description: 'Waits until aborted.',
      inputSchema: { type: 'object' },
      execute: (_args, { signal }) => new Promise((resolve) => {
        started();
        signal.addEventListener('abort', () => { sawAbort = true; resolve(null); });
      }),
    },
  };
  const p = tp.run('tools.slow{} return "never"', { tools, signal: ac.signal });
  p.catch(() => {});
  await Promise.race([began, p]);
  const t0 = Date.now();
  ac.abort();
  let err;
  try { await p; } catch (e) { err = e; }
  assert(err, 'the run rejected');
  eq(err.name, 'AbortError');
  assert(sawAbort, "the execute's signal was aborted");
  assert(Date.now() - t0 < 2000, 'at once');
  eq((await tp.run('return 7')).result, 7, 'the process goes on serving');
});

test('a signal already aborted runs nothing', async () => {
  let called = false;
  const ac = new AbortController();
  ac.abort();
  let err;
  try {
    await tp.run('tools.t{}', { signal: ac.signal, tools: { t: { execute: () => { called = true; } } } });
  } catch (e) { err = e; }
  eq(err && err.name, 'AbortError');
  eq(called, false);
});

test('a crash of the engine stays in its process: the run rejects, the next run starts a new one', async () => {
  const own = new Tidepool({ binary: bin, builtinTools: false });
  try {
    const pid = await own.pid();
    let started;
    const began = new Promise((r) => { started = r; });
    const tools = { hang: { execute: () => new Promise(() => { started(); }) } };
    const p = own.run('tools.hang{}', { tools });
    p.catch(() => {});
    await Promise.race([began, p]);
    process.kill(pid, 'SIGKILL');
    let err;
    try { await p; } catch (e) { err = e; }
    assert(err instanceof TidepoolError, `a TidepoolError (${err})`);
    eq(err.code, 'process.exited');
    assert(/signal SIGKILL/.test(err.message), err.message);
    eq((await own.run('return 1 + 1')).result, 2, 'a new process serves the next run');
    assert((await own.pid()) !== pid, 'another pid');
  } finally { await own.close(); }
});

test('a missing binary is an error that says how to install tidepool', async () => {
  const cases = [
    () => new Tidepool({ binary: '/nonexistent/tidepool' }),
    () => { const saved = process.env.TIDEPOOL_BIN; process.env.TIDEPOOL_BIN = '/nonexistent/tp';
      try { return new Tidepool(); } finally { if (saved === undefined) delete process.env.TIDEPOOL_BIN; else process.env.TIDEPOOL_BIN = saved; } },
    () => { const saved = [process.env.PATH, process.env.TIDEPOOL_BIN];
      process.env.PATH = '/nonexistent'; delete process.env.TIDEPOOL_BIN;
      try { return new Tidepool(); } finally { process.env.PATH = saved[0]; if (saved[1] !== undefined) process.env.TIDEPOOL_BIN = saved[1]; } },
    () => createCodeTool({ binary: '/nonexistent/tidepool', tools: {} }),
  ];
  const where = ['/nonexistent/tidepool (the binary option)', 'TIDEPOOL_BIN=/nonexistent/tp',
    'no `tidepool` on PATH (/nonexistent)', '/nonexistent/tidepool (the binary option)'];
  for (const [i, make] of cases.entries()) {
    let err;
    try { make(); } catch (e) { err = e; }
    assert(err instanceof TidepoolError, `case ${i}: a TidepoolError`);
    eq(err.code, 'binary.missing', `case ${i}`);
    assert(err.message.includes(where[i]), `case ${i}: ${err.message}`);
    assert(err.message.includes('make && sudo make install') && err.message.includes('TIDEPOOL_BIN'),
      `case ${i}: how to install: ${err.message}`);
  }
});

test('a zod schema: tidepool checks the JSON Schema, zod parses (defaults applied)', async () => {
  const got = [];
  const tools = {
    book: {
      description: 'Books a room.',
      inputSchema: z.object({ room: z.string().min(2), nights: z.number().int().min(1),
        breakfast: z.boolean().default(false) }),
      execute: async (args) => { got.push(args); return { ok: true }; },
    },
  };
  const env = await tp.run(`
    local ok, err = pcall(tools.book, { room = "A", nights = 0 })
    local r = tools.book{ room = "Blue", nights = 2 }
    return { ok = ok, code = err.code, message = err.message, booked = r.ok }`, { tools });
  eq(env.ok, true, JSON.stringify(env.error));
  eq(env.result.ok, false);
  eq(env.result.code, 'tool.invalid_input', 'bad arguments stop before the caller');
  assert(/room/.test(env.result.message) && /nights/.test(env.result.message) || /room|nights/.test(env.result.message),
    env.result.message);
  eq(got, [{ room: 'Blue', nights: 2, breakfast: false }], 'execute got the parsed value, once');
});

test('a recursive schema: a tree through $ref, checked at every depth', async () => {
  const Node = z.object({ name: z.string(), get children() { return z.array(Node).optional(); } });
  const seen = [];
  const count = (n) => 1 + (n.children || []).reduce((s, c) => s + count(c), 0);
  const tools = {
    size: { description: 'Counts the nodes of a tree.', inputSchema: Node,
      execute: (tree) => { seen.push(tree); return { nodes: count(tree) }; } },
    size_json: {
      description: 'The same with a JSON Schema.',
      inputSchema: { $defs: { node: { type: 'object', required: ['name'],
        properties: { name: { type: 'string' }, children: { type: 'array', items: { $ref: '#/$defs/node' } } } } },
      $ref: '#/$defs/node' },
      execute: (tree) => ({ nodes: count(tree) }),
    },
  };
  const env = await tp.run(`
    local tree = { name = "a", children = { { name = "b", children = { { name = "c" } } }, { name = "d" } } }
    local ok, err = pcall(tools.size, { name = "x", children = { { name = "y", children = { { name = 5 } } } } })
    local ok2, err2 = pcall(tools.size_json, { name = "x", children = { { children = {} } } })
    return { n = tools.size(tree).nodes, n2 = tools.size_json(tree).nodes,
             bad = err.code, bad2 = err2.code, where = err.message }`, { tools });
  eq(env.ok, true, JSON.stringify(env.error));
  eq([env.result.n, env.result.n2, env.result.bad, env.result.bad2], [4, 4, 'tool.invalid_input', 'tool.invalid_input']);
  assert(/children/.test(env.result.where), `the message names the path: ${env.result.where}`);
  eq(seen.length, 1, 'the bad tree never reached the caller');
});

test("a tool's error code is kept when tidepool knows it; a result JSON cannot hold fails the call", async () => {
  const tools = {
    guarded: { execute: () => { throw Object.assign(new Error('not for you'), { code: 'tool.denied' }); } },
    odd: { execute: () => ({ n: 10n }) },
    other: { execute: () => { throw Object.assign(new Error('x'), { code: 'ENOENT' }); } },
  };
  const env = await tp.run(`local r = {} for _, n in ipairs{"guarded", "odd", "other"} do
    local _, e = pcall(tools[n], {}) r[#r + 1] = e.code r[#r + 1] = e.message end return r`, { tools });
  eq(env.result, ['tool.denied', 'tools.guarded was denied: not for you', 'tool.failed',
    "tools.odd failed: the tool's result is not JSON: Do not know how to serialize a BigInt",
    'tool.failed', 'tools.other failed: x']);
});

test('a tool name the script cannot write is adapted: lookup-user is tools.lookup_user', async () => {
  const tools = { 'lookup-user': { inputSchema: { type: 'object' }, execute: () => ({ id: 7 }) } };
  eq((await tp.run('return tools.lookup_user{}.id', { tools })).result, 7);
});

test('runs at once on one process, with tools of the same name, each get their own', async () => {
  const mk = (tag) => ({ who: { inputSchema: { type: 'object' },
    execute: async () => { await sleep(5); return tag; } } });
  const code = 'local t = {} for i = 1, 20 do t[i] = tools.who{} end return table.concat(t)';
  const envs = await Promise.all(['a', 'b', 'c', 'd'].map((tag) => tp.run(code, { tools: mk(tag) })));
  eq(envs.map((e) => e.result), ['a'.repeat(20), 'b'.repeat(20), 'c'.repeat(20), 'd'.repeat(20)]);
});

test("a run's own limits hold (lowered in the same process, raised in one of their own), the instance's stay", async () => {
  const procs = tp.servers.size;
  const env = await tp.run('local n = 0 while true do n = n + 1 end', { limits: { instructions: 100000 } });
  eq(tp.servers.size, procs, 'a lower limit needs no other process');
  eq(env.ok, false);
  eq(env.error.code, 'limit.instructions');
  const t0 = Date.now();
  const env2 = await tp.run('local t = os.clock() while os.clock() - t < 0.7 do end return 1',
    { limits: { cpu: '200ms' } });
  eq(env2.error && env2.error.code, 'limit.cpu');
  assert(Date.now() - t0 < 5000);
  eq(tp.servers.size, procs, 'nor does a lower cpu limit');
  const long = await tp.run('local t = os.clock() while os.clock() - t < 0.2 do end return 5',
    { limits: { timeout: '60s', cpu: '30s' } });
  eq(long.result, 5);
  eq(tp.servers.size, procs + 1, 'limits above the server\'s: a process of their own');
  eq((await tp.run('local n = 0 for i = 1, 200000 do n = n + 1 end return n')).result, 200000,
    'without limits of its own, a run has the instance\'s');
  let err;
  try { await tp.run('return 1', { limits: { bogus: 1 } }); } catch (e) { err = e; }
  eq(err && err.code, 'limits.unknown');
});

test("the config's policy asks onApproval for a caller tool; without one the call is denied", async () => {
  const cfg = path.join(fs.mkdtempSync('/tmp/tp-sdk-'), 'ask.json');
  fs.writeFileSync(cfg, JSON.stringify({ policy: { default: 'allow',
    rules: [{ tools: 'pay', effect: 'ask', reason: 'money' }] } }));
  const code = 'local ok, e = pcall(tools.pay, { cents = 5 }) return { ok, ok and e or e.code, not ok and e.message or nil }';
  const asked = [];
  const cases = [
    [undefined, [false, 'tool.denied', "tools.pay was denied by the host's policy: the person declined: no one to ask: the application set no onApproval"]],
    [async (r) => { asked.push(r.message); return true; }, [true, 'paid']],
    [async () => false, [false, 'tool.denied', "tools.pay was denied by the host's policy: the person declined: declined by the application"]],
  ];
  let paid = 0;
  const tools = { pay: { inputSchema: { type: 'object' }, execute: async () => { paid++; return 'paid'; } } };
  for (const [onApproval, want] of cases) {
    const own = new Tidepool({ binary: bin, config: cfg, onApproval });
    try {
      const env = await own.run(code, { tools });
      eq(env.result, want);
    } finally { await own.close(); }
  }
  eq(paid, 1, 'only the approved call ran');
  eq(asked, ['A script wants to call tools.pay with {"cents":5}. Approve this call? (money (policy rule 0))']);
  fs.rmSync(path.dirname(cfg), { recursive: true });
});

const WEATHER = { description: 'Current weather for a city.',
  inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };

test("mode 'paused': the run returns its pending calls together; resume() answers them and the run ends", async () => {
  const code = 'local a, b = parallel(function() return tools.weather{city = "Paris"} end,\n' +
    '  function() return tools.weather{city = "Oslo"} end)\nreturn a.temp_c - b.temp_c';
  const paused = await tp.run(code, { tools: { weather: WEATHER }, mode: 'paused' });
  eq([paused.ok, paused.status], [false, 'paused'], JSON.stringify(paused));
  eq(paused.pending.map((p) => [p.kind, p.tool, p.args.city]).sort(),
    [['call', 'weather', 'Oslo'], ['call', 'weather', 'Paris']], 'both calls, together');
  const byCity = Object.fromEntries(paused.pending.map((p) => [p.args.city, p.id]));
  // an id that is not pending: refused here; a forged binding: refused by the server
  let wrong = null;
  try { await tp.resume(paused, [{ id: 999, result: {} }]); } catch (e) { wrong = e; }
  assert(wrong instanceof TidepoolError && wrong.code === 'caller.not_pending' &&
    wrong.message.includes('has id 999 (pending: '), String(wrong));
  const forged = await tp.resume(paused, [{ id: byCity.Paris, binding: 'ab'.repeat(32), result: {} }]);
  eq([forged.ok, forged.error && forged.error.code], [false, 'caller.binding'], JSON.stringify(forged));
  // one answer: still paused, with what is left
  const half = await tp.resume(paused, [{ id: byCity.Paris, result: { temp_c: 21 } }]);
  eq([half.status, half.pending.map((p) => p.args.city)], ['paused', ['Oslo']], JSON.stringify(half));
  const done = await tp.resume(half, [{ id: byCity.Oslo, result: { temp_c: -4 } }]);
  eq([done.ok, done.result], [true, 25], JSON.stringify(done));
  // an error answer is the script's tool.failed, with the caller's message
  const p2 = await tp.run('local ok, e = pcall(tools.weather, {city = "X"}) return e.code .. ": " .. e.message',
    { tools: { weather: WEATHER }, mode: 'paused' });
  const failed = await tp.resume(p2, [{ id: p2.pending[0].id, error: new Error('no such city') }]);
  eq([failed.ok, failed.result], [true, 'tool.failed: tools.weather failed: no such city'], JSON.stringify(failed));
  let bad = null;
  try { await tp.run('return 1', { mode: 'later' }); } catch (e) { bad = e; }
  assert(bad instanceof TypeError && /mode is 'live' or 'paused'/.test(bad.message), String(bad));
});

test("a paused run survives kill -9 of the process with the server's --state: resume() on the new one", async () => {
  const dir = fs.mkdtempSync(path.join(root, 'build', 'sdk-state-'));
  const secret = path.join(dir, 'secret');
  fs.writeFileSync(secret, 'an-example-secret-of-32-characters-at-least', { mode: 0o600 });
  const own = new Tidepool({ binary: bin, builtinTools: false, args: ['--state', dir, '--secret-file', secret] });
  try {
    const paused = await own.run('return tools.weather{city = "Lima"}.temp_c * 2',
      { tools: { weather: WEATHER }, mode: 'paused' });
    eq(paused.status, 'paused', JSON.stringify(paused));
    const pid = await own.pid();
    process.kill(pid, 'SIGKILL');
    for (let i = 0; i < 200 && fs.existsSync(`/proc/${pid}`); i++) await sleep(25);
    await sleep(50);
    const done = await own.resume(paused, [{ id: paused.pending[0].id, result: { temp_c: 19 } }]);
    eq([done.ok, done.result], [true, 38], JSON.stringify(done));
    assert((await own.pid()) !== pid, 'a new process');
  } finally {
    await own.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}, 60000);

test("a live run survives kill -9 with --state: the run rejects with error.paused, resume() on the new process finishes it", async () => {
  const dir = fs.mkdtempSync(path.join(root, 'build', 'sdk-state-'));
  const secret = path.join(dir, 'secret');
  fs.writeFileSync(secret, 'an-example-secret-of-32-characters-at-least', { mode: 0o600 });
  const own = new Tidepool({ binary: bin, builtinTools: false, args: ['--state', dir, '--secret-file', secret] });
  const seen = [];
  let pid;
  const tools = { weather: { ...WEATHER, execute: async ({ city }, { signal }) => {
    seen.push(city);
    if (city === 'Oslo') {  // the process dies while the call is here
      process.kill(pid, 'SIGKILL');
      await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    }
    return { temp_c: 10 };
  } } };
  try {
    pid = await own.pid();
    let err = null;
    try {
      await own.run('local a = tools.weather{city = "Lima"} local b = tools.weather{city = "Oslo"} ' +
        'return a.temp_c + b.temp_c', { tools });
    } catch (e) { err = e; }
    assert(err instanceof TidepoolError && err.code === 'process.exited', `rejected: ${err}`);
    eq([err.paused?.status, err.paused?.pending.map((c) => [c.kind, c.id, c.tool, c.args.city])],
      ['paused', [['call', 2, 'weather', 'Oslo']]], `error.paused: ${JSON.stringify(err.paused)}`);
    assert(/kept in the state store, paused at its calls in flight/.test(err.message), err.message);
    const done = await own.resume(err.paused, [{ id: 2, result: { temp_c: 5 } }]);
    eq([done.ok, done.result, seen], [true, 15, ['Lima', 'Oslo']], `Lima's answer from the log: ${JSON.stringify(done)}`);
    assert((await own.pid()) !== pid, 'a new process');
  } finally {
    await own.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}, 60000);

test('close() ends the process; the pid is gone', async () => {
  const own = new Tidepool({ binary: bin });
  const pid = await own.pid();
  await own.close();
  let alive = true;
  try { process.kill(pid, 0); } catch { alive = false; }
  eq(alive, false, 'the child exited');
});

test('close() of the shared object', async () => { await tp.close(); });
await run();
