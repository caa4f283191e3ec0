// Approvals over MCP with the official TypeScript SDK client (1.x) declaring elicitation:
// a call that a policy rule asks a person to approve makes `tidepool mcp` send
// elicitation/create, which the client's handler answers, and the same tools/call goes on.
// The handler approves the 250 payment and declines the 300 one with a note; a client
// without elicitation gets the paused result and decides with resume_run. The tool is a
// plugin (spec/fixtures/tools_calls, fx.echo returns its arguments).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { test, run, assert, eq, tidepool, root } from './harness.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-approve-sdk-'));
const config = path.join(tmp, 'policy.json');
fs.writeFileSync(config, JSON.stringify({ policy: { default: 'allow', rules: [
  { tools: 'fx.echo', effect: 'ask', where: 'amount > 100', reason: 'big payments need a person' },
] } }));

const clients = [];
async function connect(capabilities) {
  const transport = new StdioClientTransport({
    command: tidepool, stderr: 'pipe', args: ['mcp', '--no-builtin-tools', '--tools',
      path.join(root, 'spec/fixtures/tools_calls'), '--config', config, '--workers', '1'],
  });
  const client = new Client({ name: 'tidepool-approve', version: '1.0.0' }, { capabilities });
  await client.connect(transport);
  transport.stderr.resume();
  clients.push(client);
  return client;
}

const SCRIPT = `local function pay(amount)
  local ok, r = pcall(tools.fx.echo, {amount = amount, to = "bob"})
  return ok and ("paid " .. r.amount) or (r.code .. ": " .. r.message)
end
return {tools.fx.echo{amount = 5}.amount, pay(250), pay(300)}`;

test('an elicitation handler approves one call and declines another, in the same tools/call', async () => {
  const c = await connect({ elicitation: {} });
  const asked = [];
  c.setRequestHandler(ElicitRequestSchema, async (req) => {
    asked.push(req.params.message);
    eq(Object.keys(req.params.requestedSchema.properties), ['approve', 'note'], 'the form');
    if (req.params.message.includes('"amount":250')) return { action: 'accept', content: { approve: true } };
    return { action: 'accept', content: { approve: false, note: 'over the weekly budget' } };
  });
  const r = await c.callTool({ name: 'run_lua', arguments: { code: SCRIPT } });
  eq(r.isError, false, 'isError');
  const denied = "tools.fx.echo was denied by the host's policy: the person declined: over the weekly budget";
  eq(r.structuredContent, { calls: { 'fx.echo': 3 },
    failed_calls: [{ code: 'tool.denied', line: 2, message: denied, tool: 'fx.echo' }],
    logs: [], ok: true, result: [5, 'paid 250',
    "tool.denied: tools.fx.echo was denied by the host's policy: the person declined: over the weekly budget"] },
  'result');
  eq(asked, [
    'A script wants to call tools.fx.echo with {"amount":250,"to":"bob"}. Approve this call? (big payments need a person (policy rule 0))',
    'A script wants to call tools.fx.echo with {"amount":300,"to":"bob"}. Approve this call? (big payments need a person (policy rule 0))',
  ], 'asked twice, with the tool, arguments and reason');
});

test('without elicitation the run pauses, and resume_run decides through the SDK', async () => {
  const c = await connect({});
  const { tools } = await c.listTools();
  eq(tools.map((t) => t.name), ['run_lua', 'resume_run'], 'tools');
  const p = await c.callTool({ name: 'run_lua', arguments: { code: SCRIPT } });
  const v = p.structuredContent;
  eq([p.isError, v.ok, v.status, v.pending.map((x) => [x.seq, x.args.amount])], [false, false, 'paused', [[2, 250]]], 'paused');
  const p2 = await c.callTool({ name: 'resume_run', arguments: { run: v.run,
    decisions: [{ seq: 2, approve: true, binding: v.pending[0].binding }] } });
  const v2 = p2.structuredContent;
  eq([v2.status, v2.run, v2.pending.map((x) => [x.seq, x.args.amount])], ['paused', v.run, [[3, 300]]], 'paused again');
  const r = await c.callTool({ name: 'resume_run', arguments: { run: v.run,
    decisions: [{ seq: 3, approve: false, note: 'no', binding: v2.pending[0].binding }] } });
  eq(r.structuredContent.result, [5, 'paid 250', "tool.denied: tools.fx.echo was denied by the host's policy: the person declined: no"], 'result');
});

run().finally(async () => {
  for (const c of clients) await c.close().catch(() => {});
  fs.rmSync(tmp, { recursive: true, force: true });
});
