// A stdio relay for spec/mcp/era.mjs: `node tap.mjs LOG COMMAND ARGS...` runs COMMAND with
// this process's standard input and output passed through, and appends every line the
// client writes to LOG as {"pid": <this relay's pid>, "msg": <the line>} (one JSON a line),
// so that a test can see what an SDK client sent, probe processes included.
import { spawn } from 'node:child_process';
import fs from 'node:fs';

const [log, command, ...args] = process.argv.slice(2);
const child = spawn(command, args, { stdio: ['pipe', 'inherit', 'inherit'] });
let buf = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\n')) >= 0) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    fs.appendFileSync(log, JSON.stringify({ pid: process.pid, msg: line }) + '\n');
  }
  child.stdin.write(d);
});
process.stdin.on('end', () => child.stdin.end());
child.stdin.on('error', () => {});
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => child.kill(sig));
child.on('exit', (code, sig) => process.exit(sig ? 1 : code ?? 0));
