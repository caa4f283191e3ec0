// The ready client configurations of examples/clients/ (Claude Desktop, Claude Code,
// Cursor, VS Code): each JSON file parses and has the shape its client reads, and the
// command each one gives starts `tidepool mcp`, which answers initialize and runs a script
// calling a built-in tool (the tools path works). The configured program is replaced by
// the built one; ${workspaceFolder} by a temporary directory, as the editor would.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, run, assert, eq, root, tidepool } from './harness.mjs';

const dir = path.join(root, 'examples', 'clients');
const workspace = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-clients-'));
process.on('exit', () => fs.rmSync(workspace, { recursive: true, force: true }));

// Starts command + args with the built tidepool in place of the configured one, sends
// initialize and a tools/call of run_lua, and returns both answers.
async function talk(command, args) {
  eq(path.basename(command), 'tidepool', 'the program');
  eq(args[0], 'mcp', 'the subcommand');
  const argv = args.map((a) => a.replaceAll('${workspaceFolder}', workspace));
  assert(!argv.some((a) => a.includes('${')), `a variable left unexpanded: ${argv.join(' ')}`);
  const p = spawn(tidepool, argv, { stdio: ['pipe', 'pipe', 'pipe'], cwd: root });
  let out = '', err = '';
  p.stdout.setEncoding('utf8');
  p.stderr.setEncoding('utf8');
  p.stderr.on('data', (d) => { err += d; });
  const answers = new Map();
  const waiting = new Map();
  p.stdout.on('data', (d) => {
    out += d;
    let i;
    while ((i = out.indexOf('\n')) >= 0) {
      const m = JSON.parse(out.slice(0, i));
      out = out.slice(i + 1);
      if (waiting.has(m.id)) { waiting.get(m.id)(m); waiting.delete(m.id); } else answers.set(m.id, m);
    }
  });
  const exited = new Promise((r) => p.on('exit', (code) => r(code)));
  const ask = (id, method, params) => {
    p.stdin.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
    if (answers.has(id)) return Promise.resolve(answers.get(id));
    return Promise.race([
      new Promise((r) => waiting.set(id, r)),
      exited.then((code) => { throw new Error(`tidepool ${argv.join(' ')} exited (${code}): ${err}`); }),
    ]);
  };
  try {
    const init = await ask(1, 'initialize', { protocolVersion: '2025-06-18', capabilities: {},
      clientInfo: { name: 'clients.mjs', version: '1' } });
    p.stdin.write(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) + '\n');
    const call = await ask(2, 'tools/call', { name: 'run_lua',
      arguments: { code: 'return tools.time.now{}.unix_ms > 0' } });
    return { init, call };
  } finally {
    p.stdin.end();
    if (await Promise.race([exited, new Promise((r) => setTimeout(() => r('late'), 5000))]) === 'late') {
      p.kill('SIGKILL');
    }
  }
}

function check({ init, call }) {
  assert(init.result && init.result.serverInfo, `initialize answered: ${JSON.stringify(init)}`);
  eq(init.result.serverInfo.name, 'tidepool', 'serverInfo.name');
  const env = call.result && call.result.structuredContent;
  assert(env, `tools/call answered: ${JSON.stringify(call)}`);
  eq([env.ok, env.result], [true, true], 'the script calling tools.time.now');
}

function json(name) { return JSON.parse(fs.readFileSync(path.join(dir, name), 'utf8')); }

test('Claude Desktop: claude_desktop_config.json, mcpServers.tidepool', async () => {
  const s = json('claude_desktop_config.json').mcpServers.tidepool;
  assert(path.isAbsolute(s.command), 'Claude Desktop does not search PATH: a full path');
  check(await talk(s.command, s.args));
});

test('Claude Code: claude-code.sh, claude mcp add ... -- tidepool mcp', async () => {
  const lines = fs.readFileSync(path.join(dir, 'claude-code.sh'), 'utf8').split('\n')
    .filter((l) => l.startsWith('claude mcp add '));
  eq(lines.length, 1, 'one claude mcp add line');
  const words = lines[0].split(/\s+/).filter(Boolean);
  const dash = words.indexOf('--');
  assert(dash > 0, 'the server command after --');
  eq(words[words.indexOf('--scope') + 1], 'user', 'its scope');
  eq(words[dash - 1], 'tidepool', 'the server name');
  check(await talk(words[dash + 1], words.slice(dash + 2)));
});

test('Cursor: cursor-mcp.json (.cursor/mcp.json), mcpServers.tidepool', async () => {
  const s = json('cursor-mcp.json').mcpServers.tidepool;
  check(await talk(s.command, s.args));
});

test('VS Code: vscode-mcp.json (.vscode/mcp.json), servers.tidepool of type stdio', async () => {
  const c = json('vscode-mcp.json');
  assert(!c.mcpServers, 'VS Code reads "servers", not "mcpServers"');
  const s = c.servers.tidepool;
  eq(s.type, 'stdio', 'type');
  check(await talk(s.command, s.args));
});

run();
