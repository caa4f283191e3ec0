// A hostile MCP server over stdio (raw JSON-RPC, no SDK), for what tidepool's upstream
// client must survive with bounded memory and time (spec/upstream/hostile.mjs): answers
// of tens of megabytes on one line, results of hundreds of thousands of content blocks, a
// tools/list of a hundred thousand tools or megabytes of descriptions, answers dripped a
// few bytes at a time, a handshake that never ends, results that are not objects.
//
// Options (argv): --silent (never answers server/discover nor initialize), --tools N (lists
// N tools, one page), --descriptions KB (each listed tool's description is KB kilobytes),
// --list-mb MB (tools/list is one line of MB megabytes: a few tools whose descriptions
// fill it). Its tools (tools/call):
//   long {mb, late_id}   a text block of mb megabytes on one line; late_id: "id" after it
//   blocks {n}           a result of n small text blocks
//   drip {ms}            an answer that never ends: a few bytes every ms milliseconds
//   string_result        "result": "a string", not an object
//   no_result            neither result nor error
//   array_result         "result": [1, 2]
//   error_string         "error": "oops", not an object
//   ok                   {"content": [{"type": "text", "text": "\"fine\""}]}
import readline from 'node:readline';

const argv = process.argv.slice(2);
const has = (f) => argv.includes(f);
const opt = (f, d) => { const i = argv.indexOf(f); return i >= 0 ? Number(argv[i + 1]) : d; };
const obj = (props = {}) => ({ type: 'object', properties: props });

const out = process.stdout;
// Writes text, waiting for the pipe to drain (a reader that stops reading stops us).
function write(text) {
  return new Promise((resolve) => { if (out.write(text)) resolve(); else out.once('drain', resolve); });
}
const send = (m) => write(JSON.stringify({ jsonrpc: '2.0', ...m }) + '\n');

// A long line in pieces of 1 MiB, so the server itself stays small.
async function longLine(prefix, mb, suffix) {
  await write(prefix);
  const piece = 'x'.repeat(1 << 20);
  for (let i = 0; i < mb; i++) await write(piece);
  await write(suffix + '\n');
}

const baseTools = [
  { name: 'long', description: 'A long answer.', inputSchema: obj({ mb: { type: 'integer' }, late_id: { type: 'boolean' } }) },
  { name: 'blocks', description: 'Many blocks.', inputSchema: obj({ n: { type: 'integer' } }) },
  { name: 'drip', description: 'Drips.', inputSchema: obj({ ms: { type: 'integer' } }) },
  { name: 'string_result', description: 'A string result.', inputSchema: obj() },
  { name: 'no_result', description: 'No result.', inputSchema: obj() },
  { name: 'array_result', description: 'An array result.', inputSchema: obj() },
  { name: 'error_string', description: 'An error that is a string.', inputSchema: obj() },
  { name: 'ok', description: 'Fine.', inputSchema: obj() },
];

async function list(id) {
  const n = opt('--tools', 0), kb = opt('--descriptions', 0), listMb = opt('--list-mb', 0);
  if (listMb) {  // one line of listMb MB: the base tools, then one whose description fills it
    const head = JSON.stringify({ jsonrpc: '2.0', id, result: { tools: baseTools } });
    return longLine(head.slice(0, -3) + ',{"name":"fat","inputSchema":{"type":"object"},"description":"',
                    listMb, '"}]}}');
  }
  const tools = [...baseTools];
  const desc = kb ? 'd'.repeat(kb * 1024) : 'A tool.';
  for (let i = 0; i < n; i++) tools.push({ name: `t${i}`, description: desc, inputSchema: { type: 'object' } });
  return send({ id, result: { tools } });
}

async function call(id, name, args) {
  switch (name) {
    case 'long': {
      const head = args.late_id ? '{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"'
                                : `{"jsonrpc":"2.0","id":${id},"result":{"content":[{"type":"text","text":"`;
      return longLine(head, args.mb, args.late_id ? `"}]},"id":${id}}` : '"}]}}');
    }
    case 'blocks': {
      const block = '{"type":"text","text":"b"},';
      let s = `{"jsonrpc":"2.0","id":${id},"result":{"content":[`;
      const chunk = block.repeat(10000);
      await write(s);
      for (let i = 0; i + 10000 <= args.n; i += 10000) await write(chunk);
      return write('{"type":"text","text":"end"}]}}\n');
    }
    case 'drip': {
      await write(`{"jsonrpc":"2.0","id":${id},"result":{"content":[{"type":"text","text":"`);
      const t = setInterval(() => { out.write('dddddddd'); }, args.ms || 20);
      process.stdin.on('end', () => clearInterval(t));
      return;
    }
    case 'string_result': return send({ id, result: 'a string' });
    case 'no_result': return send({ id });
    case 'array_result': return send({ id, result: [1, 2] });
    case 'error_string': return send({ id, error: 'oops' });
    case 'ok': return send({ id, result: { content: [{ type: 'text', text: '"fine"' }] } });
    default: return send({ id, error: { code: -32602, message: `unknown tool ${name}` } });
  }
}

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  let m;
  try { m = JSON.parse(line); } catch { return; }
  if (m.id === undefined) return;  // notifications
  if (has('--silent') && (m.method === 'server/discover' || m.method === 'initialize')) return;
  if (m.method === 'server/discover') return send({ id: m.id, error: { code: -32601, message: 'no' } });
  if (m.method === 'initialize') {
    return send({ id: m.id, result: { protocolVersion: '2025-06-18', capabilities: { tools: {} },
                                      serverInfo: { name: 'hostile', version: '1' } } });
  }
  if (m.method === 'tools/list') return list(m.id);
  if (m.method === 'tools/call') return call(m.id, m.params.name, m.params.arguments || {});
  if (m.method === 'ping') return send({ id: m.id, result: {} });
  return send({ id: m.id, error: { code: -32601, message: 'unknown method' } });
});
rl.on('close', () => process.exit(0));
process.on('SIGTERM', () => process.exit(0));
