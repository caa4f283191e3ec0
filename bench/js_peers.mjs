// tidepool against JavaScript sandboxes, side by side in one sitting: the same work in
// each, rounds alternating between them (the order rotated each round), medians of every
// sample, so that machine noise falls on all alike.
//   node bench/js_peers.mjs [BUILD [N [ROUNDS [INFLIGHT]]]]
// BUILD (default build) holds tidepool, bench/js_peers_tp and js-peers/ (the packages of
// bench/js_peers/package.json, which scripts/run-bench.sh installs there); N runs or calls
// per system per round (200), ROUNDS rounds (3) after a warm-up round, INFLIGHT calls in
// flight for the throughput figure (16).
//
// The systems (every run gets a new sandbox, thrown away after it):
//   tidepool      bench/js_peers_tp.c: the C API on one engine, tp_run_create from the
//                 source text, steps to the end, the envelope (JSON text), tp_run_destroy;
//                 timed in that process with CLOCK_MONOTONIC, run by run. Its sandbox
//                 comes from the engine's pool, put back byte for byte as built after
//                 each run (docs/measurements.md, "Pooled sandboxes")
//   tidepool_fresh the same on an engine without the pool: every run builds its sandbox
//                 from nothing and frees it
//   node_vm       node:vm: vm.createContext, vm.runInContext, the value (contexts are let
//                 go to the collector: node:vm has no dispose)
//   quickjs       quickjs-emscripten (release-sync WebAssembly build, loaded once): a new
//                 runtime and context, evalCode, the value dumped, context and runtime
//                 disposed
//   isolated_vm   isolated-vm: a new Isolate (memoryLimit 16 MB) and context, evalSync,
//                 context released, isolate disposed (a native addon: when it cannot be
//                 loaded its lines say why and it is left out)
//   code_mode_run the `run` package, the sandbox @ai-sdk/code-mode runs scripts in: run()
//                 with a fresh QuickJS context per run in its pool of worker threads
// The JavaScript sandboxes are timed here with process.hrtime, run by run.
//
// Figures ("name: value unit"; each ratio is the peer's median over tidepool's):
//   js_cold_<system>_us        a cold trivial run: `return 1 + 1` (JavaScript `1 + 1`, in
//                              code_mode_run `return 1 + 1`), source text in, result out
//   js_ten_calls_<system>_us   a fresh run whose script calls a host function 10 times and
//                              returns the sum (65): tidepool tools.add{a = i, b = 1}.sum,
//                              a C tool with an input schema; the JavaScript sandboxes
//                              `(await tools.add({ a: i, b: 1 })).sum`, an async host
//                              function (a promise-returning host function in quickjs,
//                              an ivm.Reference applied with arguments and result
//                              copied, result.promise, in isolated_vm)
//   js_cold_ratio, js_ten_calls_ratio   the smallest and largest of the peers' ratios
//                              over tidepool (pooled), and _fresh_ratio over tidepool_fresh
//   js_mcp_call_ms_<server>    one tools/call round trip of `return 1 + 1` over stdio, the
//                              client (this process) writing a request line and reading
//                              the answer line; servers: tidepool (`tidepool mcp
//                              --no-builtin-tools`, run_lua) and node_vm
//                              (bench/js_peers_mcp_server.mjs: the official MCP SDK's
//                              McpServer, run_js in a fresh node:vm context), both
//                              driven by the same client code
//   js_mcp_calls_per_s_<server> the same calls with INFLIGHT in flight, calls / wall time
// Every process started here is killed on every way out.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import vm from 'node:vm';
import { createRequire } from 'node:module';
import { pathToFileURL, fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const build = path.resolve(process.argv[2] || 'build');
const N = Number(process.argv[3]) || 200;
const ROUNDS = Number(process.argv[4]) || 3;
const INFLIGHT = Number(process.argv[5]) || 16;
const peersDir = path.join(build, 'js-peers');

const children = new Set();
const killAll = () => { for (const c of children) { try { c.kill('SIGKILL'); } catch { /* gone */ } } };
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => { killAll(); process.exit(1); });
const fail = (msg) => { console.error(`js_peers: ${msg}`); killAll(); process.exit(1); };
process.on('unhandledRejection', (e) => fail(e && e.stack || String(e)));
process.on('uncaughtException', (e) => fail(e && e.stack || String(e)));

for (const f of [path.join(build, 'tidepool'), path.join(build, 'bench', 'js_peers_tp')])
  if (!fs.existsSync(f)) fail(`${f} is missing (make -j2 bench builds it)`);
if (!fs.existsSync(path.join(peersDir, 'node_modules')))
  fail(`the packages are not installed: cp bench/js_peers/package.json ${peersDir}/ && npm install --prefix ${peersDir}`);
const need = createRequire(path.join(peersDir, 'package.json'));
const load = (n) => import(pathToFileURL(need.resolve(n)).href);
const version = (n) => JSON.parse(fs.readFileSync(path.join(peersDir, 'node_modules', n, 'package.json'), 'utf8')).version;

const median = (v) => {
  const s = [...v].sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const now = () => process.hrtime.bigint();
const us = (t0) => Number(now() - t0) / 1e3;
const check = (who, got, want) => { if (got !== want) fail(`${who} answered ${JSON.stringify(got)}, not ${want}`); };

// ---- tidepool: bench/js_peers_tp, one process for the whole sitting ----------------------
function lineReader(stream) {
  let buf = '';
  const lines = [], waiters = [];
  stream.setEncoding('utf8');
  stream.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const l = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (waiters.length) waiters.shift()(l); else lines.push(l);
    }
  });
  return () => (lines.length ? Promise.resolve(lines.shift()) : new Promise((r) => waiters.push(r)));
}
function start(cmd, args, stderr = 'inherit') {
  const p = spawn(cmd, args, { stdio: ['pipe', 'pipe', stderr] });
  children.add(p);
  p.on('exit', (code, sig) => {
    children.delete(p);
    if (!stopping) fail(`${path.basename(cmd)} ${args.join(' ')} ended (${sig || code})`);
  });
  return { p, next: lineReader(p.stdout) };
}
let stopping = false;
const tp = start(path.join(build, 'bench', 'js_peers_tp'), []);
if ((await tp.next()) !== 'ready') fail('js_peers_tp did not start');
async function tpTimes(what, n) {
  tp.p.stdin.write(`${what} ${n}\n`);
  return (await tp.next()).split(' ').map(Number);
}

// ---- the JavaScript sandboxes --------------------------------------------------------
const JS_TEN = 'let s = 0; for (let i = 1; i <= 10; i++) s += (await tools.add({ a: i, b: 1 })).sum; return s;';
const add = async ({ a, b }) => ({ sum: a + b });
const peers = [];
const skipped = [];

peers.push({ name: 'node_vm', label: `node:vm (Node ${process.versions.node})`,
  cold() {
    return vm.runInContext('1 + 1', vm.createContext({}));
  },
  async ten() {
    return vm.runInContext(`(async () => { ${JS_TEN} })()`, vm.createContext({ tools: { add } }));
  } });

try {
  const { getQuickJS } = await load('quickjs-emscripten');
  const QuickJS = await getQuickJS();
  peers.push({ name: 'quickjs', label: `quickjs-emscripten ${version('quickjs-emscripten')}`,
    cold() {
      const rt = QuickJS.newRuntime();
      const ctx = rt.newContext();
      const h = ctx.unwrapResult(ctx.evalCode('1 + 1'));
      const v = ctx.getNumber(h);
      h.dispose(); ctx.dispose(); rt.dispose();
      return v;
    },
    async ten() {
      const rt = QuickJS.newRuntime();
      const ctx = rt.newContext();
      const tools = ctx.newObject();
      const fn = ctx.newFunction('add', (argH) => {
        const d = ctx.newPromise();
        add(ctx.dump(argH)).then((r) => {
          const o = ctx.newObject(), n = ctx.newNumber(r.sum);
          ctx.setProp(o, 'sum', n);
          d.resolve(o);
          n.dispose(); o.dispose();
        });
        d.settled.then(() => rt.executePendingJobs());
        return d.handle;
      });
      ctx.setProp(tools, 'add', fn);
      ctx.setProp(ctx.global, 'tools', tools);
      fn.dispose(); tools.dispose();
      const ph = ctx.unwrapResult(ctx.evalCode(`(async () => { ${JS_TEN} })()`));
      const settled = ctx.resolvePromise(ph);
      ph.dispose();
      rt.executePendingJobs();
      const vh = ctx.unwrapResult(await settled);
      const v = ctx.getNumber(vh);
      vh.dispose(); ctx.dispose(); rt.dispose();
      return v;
    } });
} catch (e) { skipped.push(`quickjs: not measured (quickjs-emscripten could not be loaded: ${e.message})`); }

try {
  const ivm = (await load('isolated-vm')).default;
  peers.push({ name: 'isolated_vm', label: `isolated-vm ${version('isolated-vm')}`,
    cold() {
      const iso = new ivm.Isolate({ memoryLimit: 16 });
      const ctx = iso.createContextSync();
      const v = ctx.evalSync('1 + 1');
      ctx.release(); iso.dispose();
      return v;
    },
    async ten() {
      const iso = new ivm.Isolate({ memoryLimit: 16 });
      const ctx = iso.createContextSync();
      ctx.global.setSync('add_', new ivm.Reference(add));
      ctx.evalSync('globalThis.tools = { add: (x) => add_.apply(undefined, [x],' +
        ' { arguments: { copy: true }, result: { promise: true, copy: true } }) }');
      const v = await ctx.eval(`(async () => { ${JS_TEN} })()`, { promise: true });
      ctx.release(); iso.dispose();
      return v;
    } });
} catch (e) {
  skipped.push(`isolated_vm: not measured (isolated-vm could not be loaded: ${String(e.message).split('\n')[0]};` +
    ' it is a native addon built by npm install with node-gyp, g++ and Node\'s headers)');
}

try {
  const { run } = await load('run');
  const unwrap = (r) => { if (r.status !== 'completed') fail(`run: ${JSON.stringify(r)}`); return r.value; };
  peers.push({ name: 'code_mode_run', label: `run ${version('run')} (@ai-sdk/code-mode's sandbox)`,
    async cold() { return unwrap(await run({ source: 'return 1 + 1' })); },
    async ten() { return unwrap(await run({ source: JS_TEN, hostFunctions: { tools: { add } } })); } });
} catch (e) { skipped.push(`code_mode_run: not measured (the run package could not be loaded: ${e.message})`); }

// ---- (a) and (b): alternating rounds --------------------------------------------------
const systems = ['tidepool', 'tidepool_fresh', ...peers.map((p) => p.name)];
const samples = { cold: {}, ten: {} };
for (const s of systems) { samples.cold[s] = []; samples.ten[s] = []; }
async function round(n, keep, r) {
  const order = systems.slice(r % systems.length).concat(systems.slice(0, r % systems.length));
  for (const s of order) {
    let cold, ten;
    if (s.startsWith('tidepool')) {
      const fresh = s === 'tidepool' ? '' : '_fresh';
      cold = await tpTimes(`cold${fresh}`, n);
      ten = await tpTimes(`tools${fresh}`, n);
    } else {
      const p = peers.find((x) => x.name === s);
      cold = []; ten = [];
      for (let i = 0; i < n; i++) {
        const t0 = now();
        const v = await p.cold();
        cold.push(us(t0));
        if (i === 0) check(s, v, 2);
      }
      for (let i = 0; i < n; i++) {
        const t0 = now();
        const v = await p.ten();
        ten.push(us(t0));
        if (i === 0) check(s, v, 65);
      }
    }
    if (keep) { samples.cold[s].push(...cold); samples.ten[s].push(...ten); }
  }
}
await round(Math.max(10, N >> 2), false, 0);
for (let r = 0; r < ROUNDS; r++) await round(N, true, r);

// ---- (c) MCP: the same client for both servers ----------------------------------------
function mcpServer(name, cmd, args, tool) {
  const s = start(cmd, args, 'ignore');  // `tidepool mcp` says it is serving there
  let id = 0;
  const pending = new Map();
  (async () => {
    for (;;) {
      const l = await s.next();
      let m;
      try { m = JSON.parse(l); } catch { fail(`${name} wrote a line that is not JSON: ${l.slice(0, 200)}`); }
      const w = pending.get(m.id);
      if (w) { pending.delete(m.id); w(m); }
    }
  })();
  const request = (method, params) => new Promise((resolve) => {
    const i = ++id;
    pending.set(i, resolve);
    s.p.stdin.write(JSON.stringify({ jsonrpc: '2.0', id: i, method, params }) + '\n');
  });
  const call = async () => {
    const m = await request('tools/call', { name: tool, arguments: { code: 'return 1 + 1' } });
    const r = m.result && m.result.structuredContent;
    if (!r || r.ok !== true || r.result !== 2) fail(`${name}: unexpected answer ${JSON.stringify(m).slice(0, 300)}`);
  };
  return { name, s, request, call,
    async init() {
      await request('initialize', { protocolVersion: '2025-06-18', capabilities: {},
        clientInfo: { name: 'js_peers', version: '1' } });
      s.p.stdin.write('{"jsonrpc":"2.0","method":"notifications/initialized"}\n');
    } };
}
const servers = [
  mcpServer('tidepool', path.join(build, 'tidepool'), ['mcp', '--no-builtin-tools'], 'run_lua'),
  mcpServer('node_vm', process.execPath, [path.join(here, 'js_peers_mcp_server.mjs'), peersDir], 'run_js'),
];
for (const sv of servers) await sv.init();
const lat = {}, rate = {};
for (const sv of servers) { lat[sv.name] = []; rate[sv.name] = []; }
async function mcpRound(n, keep, r) {
  for (const sv of r % 2 ? [...servers].reverse() : servers) {
    for (let i = 0; i < n; i++) {
      const t0 = now();
      await sv.call();
      if (keep) lat[sv.name].push(us(t0) / 1e3);
    }
    const total = n * 4;
    let sent = 0;
    const t0 = now();
    const lane = async () => { while (sent < total) { sent++; await sv.call(); } };
    await Promise.all(Array.from({ length: INFLIGHT }, lane));
    if (keep) rate[sv.name].push(total / (us(t0) / 1e6));
  }
}
await mcpRound(Math.max(10, N >> 2), false, 0);
for (let r = 0; r < ROUNDS; r++) await mcpRound(N, true, r);
stopping = true;
for (const sv of servers) sv.s.p.stdin.end();
tp.p.stdin.end('quit\n');
await Promise.all([...children].map((c) => new Promise((r) => {
  const t = setTimeout(() => { c.kill('SIGKILL'); }, 3000);
  c.on('exit', () => { clearTimeout(t); r(); });
})));

// ---- the figures ------------------------------------------------------------------------
console.log(`js_peers_versions: node ${process.versions.node}, ${peers.slice(1).map((p) => p.label).join(', ')}, ` +
  `@modelcontextprotocol/sdk ${version('@modelcontextprotocol/sdk')} (${ROUNDS} rounds of ${N})`);
for (const line of skipped) console.log(line);
for (const [fig, key] of [['cold', 'cold'], ['ten_calls', 'ten']]) {
  const tpm = median(samples[key].tidepool), tpf = median(samples[key].tidepool_fresh);
  const ratios = [], fratios = [];
  console.log(`js_${fig}_tidepool_us: ${tpm.toFixed(1)} us (a pooled sandbox)`);
  console.log(`js_${fig}_tidepool_fresh_us: ${tpf.toFixed(1)} us (a sandbox built from nothing)`);
  for (const p of peers) {
    const m = median(samples[key][p.name]);
    ratios.push(m / tpm);
    fratios.push(m / tpf);
    console.log(`js_${fig}_${p.name}_us: ${m.toFixed(1)} us (${(m / tpm).toFixed(1)} x tidepool,` +
      ` ${(m / tpf).toFixed(1)} x tidepool_fresh)`);
  }
  const range = (v) => `${Math.min(...v).toFixed(1)}-${Math.max(...v).toFixed(1)} x`;
  console.log(`js_${fig}_ratio: ${range(ratios)} (the peers' medians over tidepool's)`);
  console.log(`js_${fig}_fresh_ratio: ${range(fratios)} (over tidepool_fresh's)`);
}
const lt = median(lat.tidepool), ln = median(lat.node_vm);
const rt = median(rate.tidepool), rn = median(rate.node_vm);
console.log(`js_mcp_call_ms_tidepool: ${lt.toFixed(3)} ms`);
console.log(`js_mcp_call_ms_node_vm: ${ln.toFixed(3)} ms (${(ln / lt).toFixed(1)} x tidepool)`);
console.log(`js_mcp_calls_per_s_tidepool: ${rt.toFixed(0)} calls/s (${INFLIGHT} in flight)`);
console.log(`js_mcp_calls_per_s_node_vm: ${rn.toFixed(0)} calls/s (tidepool ${(rt / rn).toFixed(1)} x)`);
process.exit(0);
