// A server in mcpServers that does not answer at start holds `tidepool mcp` and
// `tidepool describe` up for its start_wait_ms (default 5 s) only, not for its handshake's
// timers (10 s for server/discover, then 60 s for initialize: 70 s before): tidepool goes
// on without its tools, says so, and adds them when (if) the server answers, with a log
// line. `tidepool run` keeps waiting up to the run's time limit (hostile.mjs).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, run, assert, eq, root, tidepool } from '../mcp/harness.mjs';

const edge = path.join(root, 'spec', 'upstream', 'edge-server.mjs');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-start-wait-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));
let nfile = 0;
function configFile(cfg) {
  const f = path.join(tmp, `config-${++nfile}.json`);
  fs.writeFileSync(f, JSON.stringify(cfg));
  return f;
}
// A server that reads its input and never writes a byte.
const silent = (ms) => ({ command: 'sh', args: ['-c', 'exec cat > /dev/null'], start_wait_ms: ms });

// tidepool with args; lines written to its stdin by the test; resolves lines of stdout
// and stderr as they come. kill() ends it (the harness kills what is left at exit).
function start(args) {
  const child = spawn(tidepool, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  const out = [], err = [], waiters = [];
  const feed = (into) => {
    let buf = '';
    return (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        into.push(buf.slice(0, i));
        buf = buf.slice(i + 1);
        for (const w of waiters.splice(0)) w();
      }
    };
  };
  child.stdout.on('data', feed(out));
  child.stderr.on('data', feed(err));
  const exited = new Promise((r) => child.on('close', (code) => { for (const w of waiters.splice(0)) w(); r(code); }));
  // Resolves the first line of list (out or err) that matches re.
  async function line(list, re) {
    for (;;) {
      const hit = list.find((l) => re.test(l));
      if (hit !== undefined) return hit;
      if (child.exitCode !== null) throw new Error(`exited; stderr: ${err.join('\n')}`);
      await new Promise((r) => waiters.push(r));
    }
  }
  return { child, out, err, line, exited, send: (m) => child.stdin.write(JSON.stringify(m) + '\n') };
}

const INIT = { jsonrpc: '2.0', id: 1, method: 'initialize', params: {
  protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } };

test('describe with a silent server ends after its start_wait_ms, with a warning naming it', async () => {
  const p = start(['describe', '--no-builtin-tools', '--config',
                   configFile({ mcpServers: { quiet: silent(500) } })]);
  const t0 = Date.now();
  eq(await p.exited, 0, 'exit status');
  assert(Date.now() - t0 < 9000, `describe took ${Date.now() - t0} ms`);  // 70 s before
  eq(p.err.filter((l) => l.includes('quiet')), ['tidepool: warning: mcpServers.quiet: no answer '
    + 'within 500 ms of its start (start_wait_ms): going on without its tools; they are added '
    + 'when it answers']);
}, 20000);

test('mcp serves before a late server answers; its tools come when it does, with a log line', async () => {
  // answers after 2 s: the start waits 300 ms for it, then serves
  const cfg = configFile({ mcpServers: { late: { command: 'sh', args: ['-c',
    `sleep 2; exec node '${edge}'`], start_wait_ms: 300 } } });
  const p = start(['mcp', '--config', cfg]);
  p.send(INIT);
  const init = JSON.parse(await p.line(p.out, /"id":1/));
  eq(init.result.serverInfo.name, 'tidepool');
  // the answer to initialize came before the server's tools did
  assert(!p.err.some((l) => l.includes('tools are added')), p.err.join('\n'));
  assert(p.err.some((l) => l.endsWith('mcpServers.late: no answer within 300 ms of its start '
    + '(start_wait_ms): going on without its tools; they are added when it answers')), p.err.join('\n'));
  const added = await p.line(p.err, /mcpServers\.late: answered/);
  assert(/^tidepool: mcpServers\.late: answered \d+ ms after its start: its 11 tools are added$/
    .test(added), added);
  p.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
  p.send({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'run_lua',
    arguments: { code: 'return tools.late.echo{text = "hi"}' } } });
  const r = JSON.parse(await p.line(p.out, /"id":2/));
  eq([r.result.isError, r.result.structuredContent.result], [false, 'hi']);
  p.child.stdin.end();
  await p.exited;
}, 30000);

test('when a late server\'s tools come, mcp sends notifications/tools/list_changed and lists them', async () => {
  const cfg = configFile({ mcpServers: { late: { command: 'sh', args: ['-c',
    `sleep 2; exec node '${edge}'`], start_wait_ms: 300 } } });
  const p = start(['mcp', '--config', cfg]);
  p.send(INIT);
  const init = JSON.parse(await p.line(p.out, /"id":1/));
  eq(init.result.capabilities.tools, { listChanged: true });
  p.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
  p.send({ jsonrpc: '2.0', id: 2, method: 'tools/list' });
  const before = JSON.parse(await p.line(p.out, /"id":2/));
  const desc = (r) => r.result.tools.find((t) => t.name === 'run_lua').description;
  assert(!desc(before).includes('late.echo'), 'no late tools yet');
  await p.line(p.err, /mcpServers\.late: answered/);
  await p.line(p.out, /"method":"notifications\/tools\/list_changed"/);
  p.send({ jsonrpc: '2.0', id: 3, method: 'tools/list' });
  const after = JSON.parse(await p.line(p.out, /"id":3/));
  assert(desc(after).includes('late.echo'), `run_lua lists the late tools: ${desc(after)}`);
  eq(p.out.filter((l) => l.includes('notifications/tools/list_changed')).length, 1, 'once');
  p.child.stdin.end();
  await p.exited;
}, 30000);

test('mcp with a silent server answers initialize after start_wait_ms, not after 70 s', async () => {
  const p = start(['mcp', '--config', configFile({ mcpServers: { quiet: silent(1000) } })]);
  const t0 = Date.now();
  p.send(INIT);
  await p.line(p.out, /"id":1/);
  assert(Date.now() - t0 < 9000, `initialize answered after ${Date.now() - t0} ms`);
  p.child.stdin.end();
  await p.exited;
}, 20000);

run();
