// mcp_call_ms: the round trip of one tools/call of a trivial script over stdio, from a
// client in a separate process (this one) writing a request line to `tidepool mcp` and
// reading its response line. Median of N calls after a warm-up.
//   node bench/mcp_call.mjs [path/to/tidepool] [N]
import { spawn } from 'node:child_process';
import path from 'node:path';

const bin = path.resolve(process.argv[2] || 'build/tidepool');
const n = Number(process.argv[3] || 200);
const p = spawn(bin, ['mcp', '--no-builtin-tools'], { stdio: ['pipe', 'pipe', 'ignore'] });
let buf = '';
let waiter = null;
p.stdout.setEncoding('utf8');
p.stdout.on('data', (d) => {
  buf += d;
  const i = buf.indexOf('\n');
  if (i >= 0 && waiter) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    const w = waiter;
    waiter = null;
    w(line);
  }
});
const request = (msg) => new Promise((resolve) => {
  waiter = resolve;
  p.stdin.write(JSON.stringify(msg) + '\n');
});

await request({ jsonrpc: '2.0', id: 0, method: 'initialize', params: {
  protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bench', version: '1' } } });
p.stdin.write('{"jsonrpc":"2.0","method":"notifications/initialized"}\n');
const call = (id) => ({ jsonrpc: '2.0', id, method: 'tools/call',
  params: { name: 'run_lua', arguments: { code: 'return 1 + 1' } } });
for (let i = 1; i <= 20; i++) await request(call(i));  // warm-up
const ms = [];
for (let i = 0; i < n; i++) {
  const t0 = process.hrtime.bigint();
  const line = await request(call(100 + i));
  ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  if (i === 0 && !line.includes('"ok":true')) { console.error(`unexpected answer: ${line}`); process.exit(1); }
}
ms.sort((a, b) => a - b);
console.log(`mcp_call_ms: ${ms[Math.floor(n / 2)].toFixed(3)} ms (median of ${n}; p90 ${ms[Math.floor(n * 0.9)].toFixed(3)} ms)`);
p.stdin.end();
await new Promise((r) => p.on('exit', r));
