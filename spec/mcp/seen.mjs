// The shape of an upstream tool's last result, shared by the workers of `tidepool mcp`
// through their state store: a script on one worker calls the tool, and a script on the
// other reads the shape in tools.describe (requests alternate between two idle workers).
// Across processes with --state: spec/seen_state_spec.lua.
import path from 'node:path';
import fs from 'node:fs';
import os from 'node:os';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { test, run, assert, eq, tidepool, root } from './harness.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-seen-'));
const config = path.join(dir, 'config.json');
fs.writeFileSync(config, JSON.stringify({ mcpServers: { edge: {
  command: 'node', args: [path.join(root, 'spec/upstream/edge-server.mjs')] } } }));

const clients = [];
async function connect(args) {
  const transport = new StdioClientTransport({
    command: tidepool, args: ['mcp', '--config', config, ...args], stderr: 'pipe',
  });
  const client = new Client({ name: 'tidepool-seen', version: '1.0.0' });
  await client.connect(transport);
  transport.stderr.resume();
  clients.push(client);
  return client;
}
const runLua = async (c, code) => {
  const r = await c.callTool({ name: 'run_lua', arguments: { code } });
  assert(!r.isError, JSON.stringify(r.structuredContent));
  return r.structuredContent.result;
};
const SHAPE = '-- its last result here was {a: integer, b: integer[], c: json.null}\n';
const WHO = 'return {worker = tools.edge.pid{}.pid}';

for (const [name, state] of [['in memory', null], ['with --state DIR', path.join(dir, 'state')]]) {
  test(`${name}: a worker reads the shape another worker's call gave back`, async () => {
    const c = await connect(['--workers', '2', ...(state ? ['--state', state] : [])]);
    // each worker starts its own edge server: two requests in a row reach both workers
    const pids = new Set([(await runLua(c, WHO)).worker, (await runLua(c, WHO)).worker]);
    eq(pids.size, 2, 'two workers, each with its own server');
    const before = await runLua(c, 'return tools.describe("edge.json_text")');
    assert(!before.includes('its last result'), `nothing seen yet: ${before}`);
    await runLua(c, 'tools.edge.json_text{} return 1');  // worker 1 (worker 0 described)
    const after = await runLua(c, 'return tools.describe("edge.json_text")');  // worker 0
    assert(after.endsWith(SHAPE), `the other worker shows it: ${after}`);
    await c.close();
  }, 30000);
}

// run() ends the process: the folder goes in an exit handler (synchronous), and the
// servers end when their standard input closes with it
process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
await run();
