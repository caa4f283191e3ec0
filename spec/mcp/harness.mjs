// A small TAP-style harness for the MCP suites: test(name, fn) runs in order, each with a
// timeout; the run ends with "# N passed, M failed" (what scripts/run-tests.sh sums).
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
