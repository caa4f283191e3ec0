// --expose-tools through the official TypeScript SDK v1 client: every exposed tool's
// failure path. The SDK checks a result's structuredContent against the tool's
// outputSchema whenever it is there, and throws -32602 when it does not match: an error
// result (isError) must carry none, so that the error itself reaches the caller. Each tool
// is called once with arguments its inputSchema refuses (tool.invalid_input) and once
// under a policy that denies everything (tool.denied); each call must come back as an
// error result naming that code, its JSON in the text block.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { test, run, assert, eq, tidepool } from './harness.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-exposed-'));
const ws = path.join(dir, 'ws');
fs.mkdirSync(ws);
// every built-in tool is offered: fs.* (a workspace), proc.run (commands), http.fetch (http)
const base = { commands: [{ argv0: 'sh' }], http: { allow: ['127.0.0.1'] } };
const write = (name, cfg) => {
  const f = path.join(dir, name);
  fs.writeFileSync(f, JSON.stringify(cfg));
  return f;
};
const open = write('open.json', base);
const deny = write('deny.json', { ...base, policy: { default: 'deny', rules: [] } });

const clients = [];
async function connect(config) {
  const transport = new StdioClientTransport({
    command: tidepool, stderr: 'pipe',
    args: ['mcp', '--test-tools', '--expose-tools', '--workspace', ws, '--config', config],
  });
  const client = new Client({ name: 'tidepool-exposed', version: '1.0.0' });
  await client.connect(transport);
  transport.stderr.resume();
  clients.push(client);
  return client;
}

// Arguments the tool's inputSchema refuses, or null when it refuses none.
function badArgs(schema) {
  if ((schema.required || []).length > 0) return {};
  const [name, prop] = Object.entries(schema.properties || {})[0] || [];
  if (!name) return null;
  const types = [].concat(prop.type || []);
  return { [name]: types.includes('string') ? 12345 : 'not the type' };
}

// Calls each exposed tool; returns [tool, outcome] where outcome is the error's code, or
// what went wrong (the SDK threw, a structuredContent came with the error, ...).
async function failEach(client, argsOf) {
  const { tools } = await client.listTools();
  const out = [];
  for (const t of tools) {
    if (t.name === 'run_lua') continue;
    const args = argsOf(t);
    if (args === null) continue;
    let r;
    try {
      r = await client.callTool({ name: t.name, arguments: args });
    } catch (e) {
      out.push([t.name, `the SDK threw: ${e.message}`, !!t.outputSchema]);
      continue;
    }
    if (!r.isError) out.push([t.name, 'not an error', !!t.outputSchema]);
    else if (r.structuredContent !== undefined) out.push([t.name, 'structuredContent', !!t.outputSchema]);
    else out.push([t.name, JSON.parse(r.content[0].text).error.code, !!t.outputSchema]);
  }
  return out;
}

test('arguments its schema refuses: every exposed tool answers an error result the SDK accepts', async () => {
  const c = await connect(open);
  const got = await failEach(c, (t) => badArgs(t.inputSchema));
  assert(got.filter(([, , schema]) => schema).length >= 8,
    `tools with an outputSchema among them: ${JSON.stringify(got)}`);
  for (const [name, outcome] of got) eq([name, outcome], [name, 'tool.invalid_input'], name);
  for (const n of ['kv_get', 'kv_set', 'fs_read', 'proc_run', 'http_fetch', 'test_sleep'])
    assert(got.some(([name]) => name === n), `${n} was called`);
});

test('a policy that denies everything: every exposed tool answers tool.denied, no structuredContent', async () => {
  const c = await connect(deny);
  const { tools } = await c.listTools();
  const valid = { kv_get: { key: 'k' }, kv_set: { key: 'k', value: 1 }, kv_delete: { key: 'k' },
    fs_read: { path: 'a' }, test_sleep: { ms: 1 }, proc_run: { cmd: 'sh' },
    http_fetch: { url: 'http://127.0.0.1:9/' } };
  const got = await failEach(c, (t) => valid[t.name] || {});
  eq(got.length, tools.length - 1, 'every tool but run_lua');
  for (const [name, outcome] of got) eq([name, outcome], [name, 'tool.denied'], name);
});

await run().finally(() => {
  fs.rmSync(dir, { recursive: true, force: true });
  return Promise.all(clients.map((x) => x.close().catch(() => {})));
});
