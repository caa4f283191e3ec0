// A small TAP-style harness for the MCP suites: test(name, fn) runs in order, each with a
// timeout; the run ends with "# N passed, M failed" (what scripts/run-tests.sh sums).
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, '..', '..');
export const tidepool = path.resolve(root, process.env.BUILD || 'build', 'tidepool');

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
