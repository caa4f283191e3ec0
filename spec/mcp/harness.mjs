// A small TAP-style harness for the MCP suites: test(name, fn) runs in order, each with a
// timeout; the run ends with "# N passed, M failed" (what scripts/run-tests.sh sums).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, '..', '..');
export const tidepool = path.resolve(root, process.env.BUILD || 'build', 'tidepool');

// Every process a suite starts, by spawn or through an SDK's transport, is a descendant of
// this one: when the suite ends, on every path (its last test, a failed or timed-out
// test, an uncaught exception, a rejected promise, the runner's timeout or ^C), those
// still alive are killed, so that no server outlives its suite (scripts/run-tests.sh also
// fails a suite that leaves one).
function descendants() {
  const children = new Map();
  for (const d of fs.readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(d)) continue;
    let stat;
    try { stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8'); } catch { continue; }
    // pid (comm) state ppid ...: comm may hold spaces and parentheses
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (!children.has(ppid)) children.set(ppid, []);
    children.get(ppid).push(Number(d));
  }
  const out = [], queue = [process.pid];
  while (queue.length) for (const c of children.get(queue.shift()) || []) { out.push(c); queue.push(c); }
  return out;
}
export function killDescendants() {
  for (const pid of descendants()) { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } }
}
process.on('exit', killDescendants);
for (const [sig, n] of [['SIGTERM', 15], ['SIGINT', 2], ['SIGHUP', 1]]) {
  process.on(sig, () => { console.log(`# ${sig}: stopped`); killDescendants(); process.exit(128 + n); });
}

// `tidepool ARGS` (ARGS: ['mcp', ...]) over standard input and output, for the suites that
// speak raw JSON-RPC lines. Killed with the suite on every path (above); kill() and close()
// end it sooner. Its messages can be read two ways, whichever a test prefers:
//   in order:  line(ms), msg(ms) (parsed), ask(m) (send, then the next message), pending()
//   sorted:    response(id, ms) (by id), other(pred, ms) (requests and notifications,
//              the first that pred accepts), has(pred); start(method, params) (the id),
//              request(method, params, ms) and call(name, args, extra, ms) number their
//              requests 1, 2, ...
// initialize({ version, capabilities, name }) is the handshake: initialize, its response
// (returned), then notifications/initialized. raw() is all stdout, stderr() all stderr;
// exited resolves to the exit status, or the signal's name.
export function mcpServer(args, { env, cwd } = {}) {
  const p = spawn(tidepool, args, { stdio: ['pipe', 'pipe', 'pipe'], cwd,
    env: env ? { ...process.env, ...env } : process.env });
  const lines = [], lineWaiters = [], byId = new Map(), others = [], waiters = [];
  let buf = '', raw = '', err = '';
  p.stdout.setEncoding('utf8');
  p.stdout.on('data', (d) => {
    raw += d;
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      lines.push(line);
      while (lineWaiters.length && lines.length) lineWaiters.shift()(lines.shift());
      let m;
      try { m = JSON.parse(line); } catch { continue; }
      if (m && m.id !== undefined && m.method === undefined) byId.set(m.id, m);
      else others.push(m);
    }
    for (const w of waiters.splice(0)) w();
  });
  p.stderr.setEncoding('utf8');
  p.stderr.on('data', (d) => { err += d; });
  const exited = new Promise((r) => p.on('exit', (code, sig) => r(sig || code)));
  const until = (pick, ms, what) => new Promise((res, rej) => {
    const t = setTimeout(() => rej(new Error(`no ${what} from the server; stderr: ${err.slice(-500)}`)), ms);
    const look = () => {
      const v = pick();
      if (v !== undefined) { clearTimeout(t); res(v); } else waiters.push(look);
    };
    look();
  });
  let next = 1;
  const s = {
    p, exited,
    raw: () => raw,
    stderr: () => err,
    // an object is sent as one JSON line; a string or bytes as they are
    send(m) {
      if (typeof m === 'string') p.stdin.write(m);
      else if (m instanceof Uint8Array) p.stdin.write(Buffer.from(m));
      else p.stdin.write(JSON.stringify(m) + '\n');
    },
    line(ms = 10000) {
      if (lines.length) return Promise.resolve(lines.shift());
      return new Promise((res, rej) => {
        const t = setTimeout(() => rej(new Error('no line from the server')), ms);
        lineWaiters.push((l) => { clearTimeout(t); res(l); });
      });
    },
    async msg(ms) { return JSON.parse(await s.line(ms)); },
    async ask(m, ms) { s.send(typeof m === 'string' ? m : JSON.stringify(m) + '\n'); return s.msg(ms); },
    pending: () => lines.length,
    response(id, ms = 8000) {
      return until(() => { const m = byId.get(id); if (m) byId.delete(id); return m; }, ms, `response ${id}`);
    },
    other(pred, ms = 8000) {
      return until(() => { const i = others.findIndex(pred); return i >= 0 ? others.splice(i, 1)[0] : undefined; },
        ms, 'message');
    },
    has(pred) { return others.some(pred); },
    start(method, params) {  // sends a request; its id
      const id = next++;
      s.send({ jsonrpc: '2.0', id, method, params });
      return id;
    },
    request(method, params, ms) { return s.response(s.start(method, params), ms); },
    call(name, a, extra = {}, ms) { return s.request('tools/call', { name, arguments: a, ...extra }, ms); },
    async initialize({ version = '2025-11-25', capabilities = {}, name = 'spec' } = {}) {
      const r = await s.request('initialize', { protocolVersion: version, capabilities,
        clientInfo: { name, version: '1' } });
      s.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
      return r;
    },
    close() { p.stdin.end(); return exited; },
    kill(sig = 'SIGKILL') { p.kill(sig); return exited; },
  };
  return s;
}

const tests = [];
export function test(name, fn, timeoutMs = 15000) { tests.push({ name, fn, timeoutMs }); }

export function assert(cond, msg) { if (!cond) throw new Error(msg || 'assertion failed'); }
export function eq(got, want, msg) {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  if (g !== w) throw new Error(`${msg || 'values differ'}: got ${g}, want ${w}`);
}
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function run() {
  let passed = 0, failed = 0, n = 0;
  for (const t of tests) {
    n++;
    let timer;
    try {
      await Promise.race([
        t.fn(),
        new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`timed out after ${t.timeoutMs} ms`)), t.timeoutMs); }),
      ]);
      passed++;
      console.log(`ok ${n} - ${t.name}`);
    } catch (e) {
      failed++;
      console.log(`not ok ${n} - ${t.name}`);
      console.log(`#   ${String(e && e.stack || e).split('\n').slice(0, 3).join('\n#   ')}`);
    } finally {
      clearTimeout(timer);
    }
  }
  console.log(`1..${n}`);
  console.log(`# ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}
