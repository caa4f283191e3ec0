// MCP of every era over Streamable HTTP: the SDK 2.x client (@modelcontextprotocol/client)
// in each of its modes against `tidepool mcp --http`, as era.mjs does over stdio. The
// 2025 modes open a protocol session (Mcp-Session-Id); auto and pin reach 2026-07-28,
// where every POST stands alone. What each era must do: list the tools, run a script, keep
// a tidepool session's globals across calls, and give a script's error as a tool error.
import { spawn } from 'node:child_process';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { test, run, eq, tidepool } from './harness.mjs';

let server, base;

async function start () {
  server = spawn(tidepool, ['mcp', '--test-tools', '--http', '127.0.0.1:0'],
                 { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  base = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no address on stderr: ${err}`)), 10000);
    server.stderr.on('data', (d) => {
      err += d;
      const m = /http:\/\/127\.0\.0\.1:(\d+)\/mcp/.exec(err) || /127\.0\.0\.1:(\d+)/.exec(err);
      if (m) { clearTimeout(timer); resolve(`http://127.0.0.1:${m[1]}/mcp`); }
    });
    server.on('exit', (code) => reject(new Error(`tidepool mcp exited ${code}: ${err}`)));
  });
}

// negotiation: undefined (no option: legacy), 'legacy', 'auto', or {pin: version}
async function connect (negotiation) {
  const opts = negotiation === undefined ? {}
    : typeof negotiation === 'string' ? { versionNegotiation: { mode: negotiation } }
      : { versionNegotiation: { mode: 'pin', ...negotiation } };
  const client = new Client({ name: 'tidepool-era-http', version: '2.0.0' }, opts);
  await client.connect(new StreamableHTTPClientTransport(new URL(base)));
  return client;
}

const runLua = (c, code, extra = {}) => c.callTool({ name: 'run_lua', arguments: { code, ...extra } });

async function worksInEveryEra (c, session) {
  const { tools } = await c.listTools();
  eq(tools.map((t) => t.name), ['run_lua'], 'the tools listed');
  const a = await runLua(c, 'x = 41 return tools.test.echo{n = x}.n', { session });
  eq([a.isError, a.structuredContent.result], [false, 41], 'the result');
  eq(a.structuredContent.session, { id: session, state: 'new' }, 'a new session');
  const b = await runLua(c, 'return x + 1', { session });
  eq(b.structuredContent.result, 42, 'the global kept by the session');
  eq(b.structuredContent.session, { id: session, state: 'continued' }, 'the session continued');
  const n = await runLua(c, 'return x');
  eq([n.structuredContent.ok, n.structuredContent.result], [true, null], 'no global without the session');
  const e = await runLua(c, 'error("boom")', { session });
  eq(e.isError, true, 'a script error is a tool error');
  eq([e.structuredContent.error.code, e.structuredContent.error.message], ['runtime', 'boom'],
    'the error');
}

const cases = [
  ['no versionNegotiation (legacy by default)', undefined, '2025-11-25', 'h-default'],
  ['legacy', 'legacy', '2025-11-25', 'h-legacy'],
  ['auto', 'auto', '2026-07-28', 'h-auto'],
  ['pin 2026-07-28', { pin: '2026-07-28' }, '2026-07-28', 'h-pin'],
];

test('tidepool mcp --http starts and prints its address', start);

for (const [name, negotiation, version, session] of cases) {
  test(`SDK 2.x over HTTP, ${name}: protocol ${version}, tools, a script, a session, an error`,
    async () => {
      const c = await connect(negotiation);
      try {
        eq(c.getNegotiatedProtocolVersion(), version, 'the protocol version agreed');
        await worksInEveryEra(c, session);
      } finally {
        await c.close();
      }
    });
}

test('a session made over HTTP in 2026-07-28 continues from a 2025 client: sessions are tidepool\'s, not the protocol\'s', async () => {
  const modern = await connect({ pin: '2026-07-28' });
  const legacy = await connect('legacy');
  try {
    await runLua(modern, 'y = 7 return y', { session: 'h-shared' });
    const r = await runLua(legacy, 'return y * 6', { session: 'h-shared' });
    eq([r.structuredContent.result, r.structuredContent.session.state], [42, 'continued'],
      'the same sandbox, across eras and connections');
  } finally {
    await modern.close();
    await legacy.close();
  }
});

await run();
server?.kill('SIGTERM');
