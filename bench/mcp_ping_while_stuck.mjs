// mcp_ping_while_stuck_ms: the round trip of a ping to `tidepool mcp` over stdio while
// another session's script is stuck in long C work (string.upper/lower over a 64 MB string,
// each call tens of milliseconds inside one C function, in a loop). Median of N pings sent
// one after another from a client in a separate process (this one). Issue 7's target: 50.
//   node bench/mcp_ping_while_stuck.mjs [path/to/tidepool] [N]
import { spawn } from 'node:child_process';
import path from 'node:path';

const bin = path.resolve(process.argv[2] || 'build/tidepool');
const n = Number(process.argv[3] || 200);
const p = spawn(bin, ['mcp', '--no-builtin-tools', '--memory', '512M', '--timeout', '120s',
  '--cpu', '120s'], { stdio: ['pipe', 'pipe', 'ignore'] });
let buf = '';
const waiters = new Map();  // id -> resolve
p.stdout.setEncoding('utf8');
p.stdout.on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    const m = JSON.parse(line);
    const w = waiters.get(m.id);
    if (w) { waiters.delete(m.id); w(m); }
  }
});
const send = (msg) => p.stdin.write(JSON.stringify(msg) + '\n');
const request = (msg) => new Promise((resolve) => { waiters.set(msg.id, resolve); send(msg); });

await request({ jsonrpc: '2.0', id: 0, method: 'initialize', params: {
  protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bench', version: '1' } } });
send({ jsonrpc: '2.0', method: 'notifications/initialized' });
const stuck = request({ jsonrpc: '2.0', id: 'stuck', method: 'tools/call', params: { name: 'run_lua',
  arguments: { session: 'stuck', code: 'local s = string.rep("ab", 32 * 1024 * 1024) ' +
    'while true do s = s:upper() s = s:lower() end' } } });
await new Promise((r) => setTimeout(r, 300));  // the script is in its loop
const ms = [];
for (let i = 0; i < n; i++) {
  const t0 = process.hrtime.bigint();
  await request({ jsonrpc: '2.0', id: i + 1, method: 'ping' });
  ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
}
let stillStuck = true;
stuck.then(() => { stillStuck = false; });
await new Promise((r) => setImmediate(r));
if (!stillStuck) { console.error('the stuck script ended before the pings did'); process.exit(1); }
send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'stuck' } });
ms.sort((a, b) => a - b);
console.log(`mcp_ping_while_stuck_ms: ${ms[Math.floor(n / 2)].toFixed(3)} ms (median of ${n}; p90 ${ms[Math.floor(n * 0.9)].toFixed(3)} ms, max ${ms[n - 1].toFixed(3)} ms)`);
p.stdin.end();
await new Promise((r) => p.on('exit', r));
