// A tiny MCP server over stdio, raw JSON-RPC (no SDK), for the edge cases of tidepool's
// upstream client that the npm servers do not reach: names to map, pagination, a repeated
// cursor, list_changed, progress, cancellation, result shapes, a server that dies, the
// 2026-07-28 era (server/discover).
//
// Options (argv): --modern (answers server/discover with 2026-07-28, and takes no
// initialize), --version V (initialize answers V), --page-size N (tools/list pages of N
// tools), --loop-cursor (page 2 gives page 1's cursor again), --pages-forever (every page
// has a next cursor), --names (tools whose names need mapping), --collide (two tools that
// map to one Lua name), --stubborn (ignores stdin's end and SIGTERM), --http PORT (Streamable
// HTTP instead of stdio). Env: EDGE_DIR, a folder where it records what it saw: "pid" at
// start, "slow-<pid>" when a slow call starts, "cancelled" lines (request ids), "methods"
// lines (every method received, with its protocol _meta when there is one), "traceparent"
// lines (method and _meta.traceparent, when a request carries one).
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

const argv = process.argv.slice(2);
const has = (f) => argv.includes(f);
const opt = (f, d) => { const i = argv.indexOf(f); return i >= 0 ? argv[i + 1] : d; };
const dir = process.env.EDGE_DIR;
const note = (file, line) => { if (dir) fs.appendFileSync(path.join(dir, file), line + '\n'); };
if (dir) fs.writeFileSync(path.join(dir, 'pid'), String(process.pid));

const modern = has('--modern');
const pageSize = Number(opt('--page-size', '1000'));
const obj = (props = {}, required = []) => ({ type: 'object', properties: props, required });

let tools = [
  { name: 'echo', description: 'Echoes text back as plain text.',
    inputSchema: obj({ text: { type: 'string' } }, ['text']) },
  { name: 'json_text', description: 'Returns JSON as text.', inputSchema: obj() },
  { name: 'structured', description: 'Returns structured content.', inputSchema: obj(),
    outputSchema: obj({ n: { type: 'integer' } }, ['n']) },
  { name: 'bad_structured', description: 'Breaks its own output schema.', inputSchema: obj(),
    outputSchema: obj({ n: { type: 'integer' } }, ['n']) },
  { name: 'mixed', description: 'Text and an image.', inputSchema: obj() },
  { name: 'two_texts', description: 'Two text blocks.', inputSchema: obj() },
  { name: 'fail', description: 'Fails with isError.', inputSchema: obj() },
  { name: 'rpc_error', description: 'Answers with a JSON-RPC error.', inputSchema: obj() },
  { name: 'slow', description: 'Answers after ms, reporting progress every 100 ms.',
    inputSchema: obj({ ms: { type: 'integer' }, progress: { type: 'boolean' } }, ['ms']) },
  { name: 'pid', description: 'Its process id.', inputSchema: obj() },
  { name: 'add_tool', description: 'Adds the tool late and says tools/list_changed.',
    inputSchema: obj() },
];
if (has('--names')) {
  for (const n of ['get-item', 'a.b', 'with space', '9lives', 'end', 'x_y']) {
    tools.push({ name: n, description: `The tool named ${n}.`, inputSchema: obj() });
  }
}
if (has('--collide')) {
  for (const n of ['x-y', 'x.y']) {
    tools.push({ name: n, description: `The tool named ${n}.`, inputSchema: obj() });
  }
}
if (has('--many')) {
  for (let i = 0; i < 150; i++) {
    tools.push({ name: `t${i}`, description: `Tool number ${i}.`, inputSchema: obj() });
  }
}

// Over stdio every message is a line on stdout; over HTTP (--http) a message goes to the
// SSE stream of the POST it belongs to (its response, or progress of its token), else to
// the GET streams that are open (list_changed).
const streams = new Map();   // request id -> the POST's response, an SSE stream
const tokens = new Map();    // progress token -> request id
const listeners = new Set(); // GET streams
function send(m) {
  const line = JSON.stringify({ jsonrpc: '2.0', ...m });
  if (!http) return process.stdout.write(line + '\n');
  const id = m.method === 'notifications/progress' ? tokens.get(m.params.progressToken) : m.id;
  const res = id !== undefined ? streams.get(id) : undefined;
  if (res) {
    res.write(`event: message\ndata: ${line}\n\n`);
    if (!m.method) { streams.delete(id); res.end(); }
  } else if (m.method) {
    for (const l of listeners) l.write(`data: ${line}\n\n`);
  }
}
const reply = (id, result) => send({ id, result });
const text = (t) => ({ content: [{ type: 'text', text: t }] });
const slow = new Map();  // request id -> timers

function call(id, name, args, meta) {
  const token = meta && meta.progressToken;
  switch (name) {
    case 'echo': return reply(id, text(args.text));
    case 'json_text': return reply(id, text('{"a": 1, "b": [1, 2], "c": null}'));
    case 'structured':
      return reply(id, { content: [{ type: 'text', text: '{"n":5}' }], structuredContent: { n: 5 } });
    case 'bad_structured':
      return reply(id, { content: [], structuredContent: { n: 'five' } });
    case 'mixed':
      return reply(id, { content: [{ type: 'text', text: 'a picture' },
        { type: 'image', data: 'iVBORw0KGgo=', mimeType: 'image/png' }] });
    case 'two_texts':
      return reply(id, { content: [{ type: 'text', text: 'one' }, { type: 'text', text: 'two' }] });
    case 'fail': return reply(id, { isError: true, content: [{ type: 'text', text: 'it broke: disk full' }] });
    case 'rpc_error': return send({ id, error: { code: -32000, message: 'no such item' } });
    case 'pid': return reply(id, { content: [], structuredContent: { pid: process.pid } });
    case 'add_tool':
      if (!tools.some((t) => t.name === 'late')) {
        tools.push({ name: 'late', description: 'Added after the start.', inputSchema: obj() });
      }
      tools = tools.filter((t) => t.name !== 'two_texts');
      reply(id, text('"added"'));
      return send({ method: 'notifications/tools/list_changed' });
    case 'slow': {
      if (dir) fs.writeFileSync(path.join(dir, `slow-${process.pid}`), String(id));
      let done = 0;
      const every = setInterval(() => {
        done += 100;
        if (args.progress && token !== undefined) {
          send({ method: 'notifications/progress',
                 params: { progressToken: token, progress: done, total: args.ms, message: `at ${done}` } });
        }
      }, 100);
      const end = setTimeout(() => {
        clearInterval(every);
        slow.delete(id);
        reply(id, text(`slept ${args.ms}`));
      }, args.ms);
      slow.set(id, [every, end]);
      return;
    }
    case 'late': return reply(id, text('"late"'));
    default:
      if (tools.some((t) => t.name === name)) return reply(id, text(JSON.stringify(name)));
      return send({ id, error: { code: -32602, message: `unknown tool ${name}` } });
  }
}

function list(id, params) {
  const cursor = params && params.cursor;
  const start = cursor ? Number(cursor.slice(1)) : 0;
  const page = tools.slice(start, start + pageSize);
  const result = { tools: page };
  if (has('--pages-forever')) result.nextCursor = `c${start + pageSize}`;
  else if (start + pageSize < tools.length) {
    result.nextCursor = has('--loop-cursor') && start > 0 ? `c${pageSize}` : `c${start + pageSize}`;
  }
  reply(id, result);
}

function onLine(line) {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  const meta = m.params && m.params._meta;
  const era = meta && meta['io.modelcontextprotocol/protocolVersion'];
  note('methods', `${m.method || 'response'}${era ? ' ' + era : ''}`);
  if (meta && meta.traceparent) note('traceparent', `${m.method} ${meta.traceparent}`);
  if (m.method === 'server/discover') {
    if (!modern) return send({ id: m.id, error: { code: -32601, message: 'Method not found' } });
    return reply(m.id, { supportedVersions: ['2026-07-28'], capabilities: { tools: { listChanged: true } },
                         serverInfo: { name: 'edge', version: '1' } });
  }
  if (m.method === 'initialize') {
    if (modern) return send({ id: m.id, error: { code: -32601, message: 'Method not found' } });
    return reply(m.id, { protocolVersion: opt('--version', m.params.protocolVersion),
                         capabilities: { tools: { listChanged: true } },
                         serverInfo: { name: 'edge', version: '1' } });
  }
  if (m.method === 'notifications/cancelled') {
    note('cancelled', String(m.params.requestId));
    const t = slow.get(m.params.requestId);
    if (t) { clearInterval(t[0]); clearTimeout(t[1]); slow.delete(m.params.requestId); }
    return;
  }
  if (m.method === 'tools/list') return list(m.id, m.params);
  if (m.method === 'tools/call') return call(m.id, m.params.name, m.params.arguments || {}, meta);
  if (m.id !== undefined && m.method) send({ id: m.id, error: { code: -32601, message: 'Method not found' } });
}

// --http PORT: Streamable HTTP on 127.0.0.1 at /mcp, one session ("s1", required after
// initialize), POST answered as SSE, GET opens a stream for notifications.
const http = opt('--http', null);
if (http) {
  const { createServer } = await import('node:http');
  let session = null;
  createServer((req, res) => {
    note('http', `${req.method} ${req.headers['mcp-session-id'] || '-'} ${req.headers['mcp-protocol-version'] || '-'} ${req.headers['x-test'] || '-'}`);
    if (req.method === 'DELETE') { session = null; res.writeHead(200); return res.end(); }
    if (req.method === 'GET') {
      if (!session || req.headers['mcp-session-id'] !== session) { res.writeHead(400); return res.end(); }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': open\n\n');
      listeners.add(res);
      req.on('close', () => listeners.delete(res));
      return;
    }
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      let m;
      try { m = JSON.parse(body); } catch { res.writeHead(400); return res.end(); }
      if (m.method === 'initialize') session = 's1';
      else if (m.method !== 'server/discover' && req.headers['mcp-session-id'] !== session) {
        res.writeHead(400, { 'content-type': 'application/json' });
        return res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32000, message: 'no session' } }));
      }
      if (m.id === undefined || !m.method) { res.writeHead(202); res.end(); return onLine(body); }
      const headers = { 'content-type': 'text/event-stream' };
      if (m.method === 'initialize') headers['mcp-session-id'] = session;
      res.writeHead(200, headers);
      streams.set(m.id, res);
      const token = m.params && m.params._meta && m.params._meta.progressToken;
      if (token !== undefined) tokens.set(token, m.id);
      onLine(body);
    });
  }).listen(Number(http), '127.0.0.1', () => process.stderr.write(`edge listening on ${http}\n`));
} else {
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', onLine);
  rl.on('close', () => { if (!has('--stubborn')) process.exit(0); else setInterval(() => {}, 1000); });
}
if (has('--stubborn')) process.on('SIGTERM', () => note('signals', 'SIGTERM'));
process.stderr.write('edge server up\nsecond line\n');
