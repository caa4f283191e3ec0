// The Node MCP server bench/js_peers.mjs measures `tidepool mcp` against: the official
// TypeScript SDK's McpServer over stdio with one tool of tidepool's run_lua shape,
// run_js {code}, whose code runs as the body of an async function in a fresh node:vm
// context per call (a 10 s timeout on its synchronous part, tidepool's default time
// limit) and answers as run_lua does: the envelope {ok, result} (or {ok: false, error})
// as text content and as structuredContent.
//   node bench/js_peers_mcp_server.mjs DIR   (DIR: where bench/js_peers/package.json's
//                                              packages are installed)
import path from 'node:path';
import vm from 'node:vm';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const need = createRequire(path.join(path.resolve(process.argv[2] || 'build/js-peers'), 'package.json'));
const load = (n) => import(pathToFileURL(need.resolve(n)).href);
const { McpServer } = await load('@modelcontextprotocol/sdk/server/mcp.js');
const { StdioServerTransport } = await load('@modelcontextprotocol/sdk/server/stdio.js');
const { z } = await load('zod');

const server = new McpServer({ name: 'node-vm-code-mode', version: '1.0.0' });
server.registerTool('run_js', {
  description: 'Runs JavaScript (the body of an async function; return the result).',
  inputSchema: { code: z.string() },
}, async ({ code }) => {
  let envelope;
  try {
    const result = await vm.runInContext(`(async () => {\n${code}\n})()`, vm.createContext({}),
      { timeout: 10000 });
    envelope = { ok: true, result };
  } catch (e) {
    envelope = { ok: false, error: { message: String(e && e.message || e) } };
  }
  return { content: [{ type: 'text', text: JSON.stringify(envelope) }],
    structuredContent: envelope, isError: !envelope.ok };
});
await server.connect(new StdioServerTransport());
