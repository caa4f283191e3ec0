// HTTP for scripts and plugins (engine/host/http.c, tools/http.lua, ctx.http): real HTTP
// and HTTPS servers on 127.0.0.1 that this file starts, and `tidepool run --config` as a
// user runs it. The HTTPS server's certificate comes from a test CA made here with the
// openssl command; curl is told that CA through the config's test-only http.ca_file, and
// test names resolve to 127.0.0.1 through the test-only http.resolve (curl's
// CURLOPT_RESOLVE), which is how "a public name that resolves to a private address" is
// made without DNS.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { test, run, assert, eq, sleep, tidepool, root } from '../mcp/harness.mjs';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-http-'));
process.on('exit', () => fs.rmSync(tmp, { recursive: true, force: true }));
const SECRET = 'tok-7f3a9c1e5b';  // the injected credential: must never reach the output

// ---- the servers ---------------------------------------------------------------------

const seen = [];        // every request: {host, path, method, headers, body}
let aborted = 0;        // /slow requests whose client went away before the answer
const gate = { waiting: [], max: 0 };

function handler(req, res) {
  let body = '';
  req.on('data', (d) => { body += d; });
  req.on('end', () => {
    const u = new URL(req.url, 'http://x');
    seen.push({ host: req.headers.host, path: u.pathname, method: req.method,
                headers: req.headers, body });
    const q = (k) => u.searchParams.get(k);
    switch (u.pathname) {
      case '/echo':  // what came, without header values (the script must not see them)
        res.writeHead(200, { 'content-type': 'application/json', 'x-multi': ['a', 'b'] });
        return res.end(JSON.stringify({ method: req.method, body,
                                        header_names: Object.keys(req.headers).sort() }));
      case '/big':
        res.writeHead(200, { 'content-type': 'text/plain' });
        return res.end('x'.repeat(Number(q('n'))));
      case '/gzip':
        res.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'gzip' });
        return res.end(zlib.gzipSync('hello, compressed world'));
      case '/bin':
        res.writeHead(200, { 'content-type': 'application/octet-stream' });
        return res.end(Buffer.from([0xff, 0xfe, 0x00, 0x41]));
      case '/slow': {
        let done = false;
        const t = setTimeout(() => { done = true; res.end('late'); }, Number(q('ms')));
        res.on('close', () => { if (!done) { aborted++; clearTimeout(t); } });
        return;
      }
      case '/sse': {  // three events, 150 ms apart
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        let i = 0;
        const tick = () => {
          res.write(`data: ${++i}\n\n`);
          if (i < 3) setTimeout(tick, 150); else res.end();
        };
        return tick();
      }
      case '/aborted':
        return res.end(String(aborted));
      case '/redir':
        res.writeHead(Number(q('code') || 302), { location: q('to') });
        return res.end('moved');
      case '/loop':
        res.writeHead(302, { location: '/loop' });
        return res.end();
      case '/gate': {  // answers once n requests wait here at once (503 after 5 s)
        const n = Number(q('n'));
        gate.waiting.push(res);
        gate.max = Math.max(gate.max, gate.waiting.length);
        if (gate.waiting.length === n) {
          for (const r of gate.waiting.splice(0)) r.end('open');
        } else if (gate.waiting.length === 1) {
          setTimeout(() => {
            for (const r of gate.waiting.splice(0)) { r.writeHead(503); r.end('timeout'); }
          }, 5000);
        }
        return;
      }
      default:
        res.writeHead(404);
        return res.end('no such path');
    }
  });
}

function listen(server) {
  return new Promise((r) => server.listen(0, '127.0.0.1', () => r(server.address().port)));
}

function makeCerts() {
  const o = (...args) => execFileSync('openssl', args, { cwd: tmp, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  o('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2',
    '-subj', '/CN=tidepool test CA');
  o('req', ...ec, '-keyout', 'srv.key', '-out', 'srv.csr', '-subj', '/CN=public.test');
  fs.writeFileSync(path.join(tmp, 'ext.cnf'), 'subjectAltName=DNS:public.test\n');
  o('x509', '-req', '-in', 'srv.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key',
    '-CAcreateserial', '-out', 'srv.pem', '-days', '2', '-extfile', 'ext.cnf');
}

makeCerts();
const plain = http.createServer(handler);
const tls = https.createServer({ key: fs.readFileSync(path.join(tmp, 'srv.key')),
                                 cert: fs.readFileSync(path.join(tmp, 'srv.pem')) }, handler);
const PORT = await listen(plain);
const TLS_PORT = await listen(tls);
const U = `http://127.0.0.1:${PORT}`;
const CA = path.join(tmp, 'ca.pem');
const RESOLVE = [`public.test:${PORT}:127.0.0.1`, `evil.test:${PORT}:127.0.0.1`,
                 `other.test:${PORT}:127.0.0.1`, `public.test:${TLS_PORT}:127.0.0.1`,
                 `metadata.test:${PORT}:169.254.169.254`, `ten.test:${PORT}:10.0.0.5`,
                 `cgnat.test:${PORT}:100.64.0.1`, `ula.test:${PORT}:[fd00::1]`];

// ---- running tidepool ------------------------------------------------------------------

let nconf = 0;
// Runs script with a config whose http section is section (none when undefined).
function tp(script, section, { env = {}, args = [] } = {}) {
  const file = path.join(tmp, `config-${++nconf}.json`);
  fs.writeFileSync(file, JSON.stringify(section === undefined ? {} : { http: section }));
  return new Promise((resolve) => {
    const p = spawn(tidepool, ['run', '--config', file, '--json',
                               '--tools', path.join(root, 'spec/fixtures/http'), ...args, '-'],
                    { env: { ...process.env, TP_TEST_SECRET: SECRET, ...env },
                      stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '', err = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { err += d; });
    p.on('exit', (code) => {
      let envelope = null;
      try { envelope = JSON.parse(out); } catch { /* checked by the caller */ }
      resolve({ code, out, err, env: envelope });
    });
    p.stdin.end(script);
  });
}

// The envelope of a script that must succeed; its result.
async function ok(script, section, opts) {
  const r = await tp(script, section, opts);
  assert(r.env && r.env.ok, `the run failed: ${r.out} ${r.err}`);
  return r.env.result;
}

// The error of a script that must fail: {code, message}.
async function fails(script, section, opts) {
  const r = await tp(script, section, opts);
  assert(r.env && r.env.ok === false, `the run did not fail: ${r.out} ${r.err}`);
  return { code: r.env.error.code, message: r.env.error.message, r };
}

const FETCH = 'tools.http.fetch failed: ';
const DENIED = 'tools.http.fetch was denied: ';
const TIMED_OUT = 'tools.http.fetch timed out: ';
const local = { allow: ['127.0.0.1'], allow_private: ['127.0.0.0/8'] };

// ---- allowed and denied hosts, methods -------------------------------------------------

test('an allowed host answers: status, lower-case headers, body as a string', async () => {
  const r = await ok(`local r = tools.http.fetch{url = "${U}/echo?x=1"}
    return {r.status, r.headers["content-type"], r.headers["x-multi"], type(r.body),
            json.decode(r.body).method, r.truncated, r.url}`, local);
  eq(r, [200, 'application/json', 'a, b', 'string', 'GET', false, `${U}/echo?x=1`]);
});

test('a host no http.allow entry matches is tool.denied, and no request leaves', async () => {
  const before = seen.length;
  const e = await fails(`return tools.http.fetch{url = "http://other.test:${PORT}/echo"}`,
                        { ...local, resolve: RESOLVE });
  eq([e.code, e.message], ['tool.denied', `${DENIED}GET http://other.test:${PORT}/echo: no ` +
    'http.allow entry matches other.test']);
  eq(seen.length, before, 'requests the server saw');
});

test('libcurl is opened on first use: when it cannot be, the warning names it and why', async () => {
  // TIDEPOOL_LIBCURL names the library engine/lib/curl_dl.c opens (libcurl.so.4).
  const e = await fails(`return tools.http.fetch{url = "${U}/echo"}`, local,
                        { env: { TIDEPOOL_LIBCURL: 'libcurl-missing-for-test.so.4' } });
  // the http section is checked when the tool loads, which opens libcurl: the tool is then
  // not offered, and the warning says why
  eq(e.code, 'tool.unknown');
  assert(e.r.err.includes('tools/http.lua:1: http.unavailable: libcurl-missing-for-test.so.4 ' +
    'could not be loaded: libcurl-missing-for-test.so.4: cannot open shared object file'),
  e.r.err);
  // a run that makes no request does not need it
  eq(await ok('return 1 + 1', local, { env: { TIDEPOOL_LIBCURL: 'libcurl-missing.so.4' } }), 2);
});
test('host globs: *.example.test matches a subdomain, not the bare name', async () => {
  const sec = { allow: ['*.public.test'], resolve: RESOLVE, allow_private: ['127.0.0.0/8'] };
  const e = await fails(`return tools.http.fetch{url = "http://public.test:${PORT}/echo"}`, sec);
  eq(e.code, 'tool.denied');
  assert(e.message.endsWith('no http.allow entry matches public.test'), e.message);
});

test('without an http section, http.fetch is not offered', async () => {
  const e = await fails(`return tools.http.fetch{url = "${U}/echo"}`, undefined);
  eq(e.code, 'tool.unknown');
});

test('methods: an entry with methods allows those only', async () => {
  const sec = { allow: [{ host: '127.0.0.1', methods: ['GET', 'PUT'] }],
                allow_private: ['127.0.0.0/8'] };
  const r = await ok(`local a = tools.http.fetch{url = "${U}/echo"}
    local b = tools.http.fetch{url = "${U}/echo", method = "PUT", body = "put-body"}
    return {json.decode(a.body).method, json.decode(b.body).method, json.decode(b.body).body}`,
  sec);
  eq(r, ['GET', 'PUT', 'put-body']);
  const e = await fails(`return tools.http.fetch{url = "${U}/echo", method = "POST", body = "x"}`,
                        sec);
  eq([e.code, e.message], ['tool.denied', `${DENIED}POST ${U}/echo: http.allow allows ` +
    '127.0.0.1 only for GET, PUT, not POST']);
});

test('POST sends its body; DELETE and HEAD go as asked', async () => {
  const r = await ok(`local a = tools.http.fetch{url = "${U}/echo", method = "POST",
      body = '{"k":1}', headers = {["Content-Type"] = "application/json"}}
    local d = tools.http.fetch{url = "${U}/echo", method = "DELETE"}
    local h = tools.http.fetch{url = "${U}/echo", method = "HEAD"}
    return {json.decode(a.body).body, json.decode(d.body).method, h.status, h.body}`, local);
  eq(r, ['{"k":1}', 'DELETE', 200, '']);
});

test('only http and https: another scheme is tool.denied', async () => {
  const e = await fails('return tools.http.fetch{url = "file:///etc/passwd"}', local);
  eq([e.code, e.message], ['tool.denied', `${DENIED}GET file:///etc/passwd: only http:// and ` +
    'https:// URLs are allowed, not file://']);
});

test('a header value with a line break cannot add headers: the call fails', async () => {
  const e = await fails(`return tools.http.fetch{url = "${U}/echo",
    headers = {["X-A"] = "v\\r\\nX-Injected: 1"}}`, local);
  eq(e.code, 'tool.failed');
  assert(e.message.includes("header 'X-A': its value has a line break"), e.message);
});

// ---- redirects -------------------------------------------------------------------------

test('a redirect to a denied host is tool.denied, and that host gets no request', async () => {
  const before = seen.filter((s) => s.host.startsWith('evil.test')).length;
  const to = `http://evil.test:${PORT}/echo`;
  const e = await fails(`return tools.http.fetch{url = "${U}/redir?to=${encodeURIComponent(to)}"}`,
                        { ...local, resolve: RESOLVE });
  eq([e.code, e.message], ['tool.denied', `${DENIED}GET ${U}/redir?to=${encodeURIComponent(to)}` +
    `: its redirect to ${to} is refused: no http.allow entry matches evil.test`]);
  eq(seen.filter((s) => s.host.startsWith('evil.test')).length, before, 'requests to evil.test');
});

test('redirects to allowed hosts are followed; 303 turns POST into GET', async () => {
  const to = `http://public.test:${PORT}/echo`;
  const sec = { allow: ['127.0.0.1', 'public.test'], allow_private: ['127.0.0.0/8'],
                resolve: RESOLVE };
  const r = await ok(`local r = tools.http.fetch{url = "${U}/redir?code=303&to=${encodeURIComponent(to)}",
      method = "POST", body = "b"}
    return {r.status, r.url, json.decode(r.body).method, json.decode(r.body).body}`, sec);
  eq(r, [200, to, 'GET', '']);
  const r2 = await ok(`local r = tools.http.fetch{url = "${U}/redir?code=307&to=/echo",
      method = "POST", body = "again"}
    return {json.decode(r.body).method, json.decode(r.body).body}`, sec);
  eq(r2, ['POST', 'again']);
});

test('more than 10 redirects is tool.failed', async () => {
  const e = await fails(`return tools.http.fetch{url = "${U}/loop"}`, local);
  eq([e.code, e.message], ['tool.failed', `${FETCH}GET ${U}/loop: more than 10 redirects`]);
});

// ---- addresses after DNS ---------------------------------------------------------------

test('a public name resolving to loopback is tool.denied, naming the address', async () => {
  const before = seen.length;
  const e = await fails(`return tools.http.fetch{url = "http://public.test:${PORT}/echo"}`,
                        { allow: ['public.test'], resolve: RESOLVE });
  eq([e.code, e.message], ['tool.denied', `${DENIED}GET http://public.test:${PORT}/echo: ` +
    'public.test resolved to 127.0.0.1, a loopback address; add it to http.allow_private ' +
    'to allow it']);
  eq(seen.length, before, 'requests the server saw');
});

test('allow_private lets that range through', async () => {
  const r = await ok(`return tools.http.fetch{url = "http://public.test:${PORT}/echo"}.status`,
                     { allow: ['public.test'], resolve: RESOLVE, allow_private: ['127.0.0.1/32'] });
  eq(r, 200);
});

test('link-local (169.254.169.254), private and IPv4-mapped addresses are refused', async () => {
  const sec = { allow: ['*'], resolve: RESOLVE };
  const m = await fails(`return tools.http.fetch{url = "http://metadata.test:${PORT}/"}`, sec);
  eq([m.code, m.message], ['tool.denied', `${DENIED}GET http://metadata.test:${PORT}/: ` +
    'metadata.test resolved to 169.254.169.254, a link-local address; add it to ' +
    'http.allow_private to allow it']);
  const p = await fails(`return tools.http.fetch{url = "http://ten.test:${PORT}/"}`, sec);
  assert(p.message.endsWith('ten.test resolved to 10.0.0.5, a private address; add it to ' +
    'http.allow_private to allow it'), p.message);
  const v6 = await fails(`return tools.http.fetch{url = "http://[::ffff:127.0.0.1]:${PORT}/"}`,
                         sec);
  eq(v6.code, 'tool.denied');
  assert(v6.message.includes('resolved to ::ffff:127.0.0.1, a loopback address'), v6.message);
  const cg = await fails(`return tools.http.fetch{url = "http://cgnat.test:${PORT}/"}`, sec);
  assert(cg.message.endsWith('cgnat.test resolved to 100.64.0.1, a carrier-grade NAT ' +
    '(100.64.0.0/10) address; add it to http.allow_private to allow it'), cg.message);
  const ula = await fails(`return tools.http.fetch{url = "http://ula.test:${PORT}/"}`, sec);
  assert(ula.message.endsWith('ula.test resolved to fd00::1, a unique-local (fc00::/7) ' +
    'address; add it to http.allow_private to allow it'), ula.message);
  const lo = await fails(`return tools.http.fetch{url = "http://127.0.0.1:${PORT}/"}`, sec);
  assert(lo.message.includes('127.0.0.1 resolved to 127.0.0.1, a loopback address'), lo.message);
});

// ---- injected credentials ----------------------------------------------------------------

test('inject: the server sees the header, replacing the script\'s, and no output holds it',
  async () => {
    const sec = { ...local, inject: { '127.0.0.1': { Authorization: 'env:TP_TEST_SECRET' } } };
    const r = await tp(`local r = tools.http.fetch{url = "${U}/echo",
        headers = {authorization = "mine", ["X-Other"] = "kept"}}
      print(r.body)
      return json.decode(r.body).header_names`, sec);
    assert(r.env && r.env.ok, r.out + r.err);
    const got = seen[seen.length - 1];
    eq([got.headers.authorization, got.headers['x-other']], [SECRET, 'kept']);
    assert(r.env.result.includes('authorization'));
    assert(!r.out.includes(SECRET) && !r.err.includes(SECRET), 'the secret is in the output');
  });

test('inject: a redirect to another host does not carry the credential', async () => {
  const sec = { allow: ['127.0.0.1', 'public.test'], allow_private: ['127.0.0.0/8'],
                resolve: RESOLVE,
                inject: { '127.0.0.1': { 'X-Api-Key': 'env:TP_TEST_SECRET' } } };
  const to = `http://public.test:${PORT}/echo`;
  await ok(`return tools.http.fetch{url = "${U}/redir?to=${encodeURIComponent(to)}",
    headers = {Authorization = "script-token"}}.status`, sec);
  const last = seen[seen.length - 1], first = seen[seen.length - 2];
  eq([first.path, first.headers['x-api-key']], ['/redir', SECRET]);
  eq([last.host, last.headers['x-api-key'], last.headers.authorization],
     [`public.test:${PORT}`, undefined, undefined]);
});

test('inject: a variable missing from the environment is a load problem naming it', async () => {
  const sec = { ...local, inject: { '127.0.0.1': { Authorization: 'env:TP_TEST_NOT_SET' } } };
  const r = await tp('return 1', sec, { args: ['--strict'] });
  eq(r.code, 3);
  assert(r.err.includes(': /http/inject/127.0.0.1/Authorization: the environment variable ' +
    'TP_TEST_NOT_SET is not set (the value "env:TP_TEST_NOT_SET" reads it); set it, or write ' +
    'the value itself\n'), r.err);
  assert(r.err.endsWith('tidepool: --strict: refused: 1 problem of the config on this machine ' +
    '(above)\n'), r.err);
});

test('a malformed http section is refused by the config check, or at load naming the field', async () => {
  const r = await tp('return 1', { allow: [42] }, { args: ['--strict'] });
  eq(r.code, 2);  // the config file's schema: nothing runs
  assert(r.err.includes('/http/allow/0: expected a string or an object, got an integer (42); ' +
    'for example "api.github.com"'), r.err);
  const c = await tp('return 1', { allow_private: ['10.0.0.0/33'] }, { args: ['--strict'] });
  eq(c.code, 3);
  assert(c.err.includes('.json: /http/allow_private/0: expected a CIDR'), c.err);
});

// ---- caps, compression, TLS --------------------------------------------------------------

test('max_bytes keeps that many bytes and says truncated; the config caps it', async () => {
  const r = await ok(`local a = tools.http.fetch{url = "${U}/big?n=100000", max_bytes = 10}
    local b = tools.http.fetch{url = "${U}/big?n=100000", max_bytes = 1000000}
    local c = tools.http.fetch{url = "${U}/big?n=50"}
    return {#a.body, a.truncated, #b.body, b.truncated, #c.body, c.truncated}`,
  { ...local, max_bytes: 5000 });
  eq(r, [10, true, 5000, true, 50, false]);
});

test('timeout_ms is tool.timeout; the config caps it', async () => {
  const t0 = Date.now();
  const e = await fails(`return tools.http.fetch{url = "${U}/slow?ms=4000", timeout_ms = 600}`,
                        local);
  eq([e.code, e.message], ['tool.timeout', `${TIMED_OUT}GET ${U}/slow?ms=4000: no answer within ` +
    '600 ms (timeout_ms)']);
  const e2 = await fails(`return tools.http.fetch{url = "${U}/slow?ms=4000", timeout_ms = 60000}`,
                         { ...local, timeout_ms: 500 });
  eq(e2.code, 'tool.timeout');
  assert(e2.message.endsWith('no answer within 500 ms (timeout_ms)'), e2.message);
  assert(Date.now() - t0 < 3500, `took ${Date.now() - t0} ms`);
});

test('a gzip body comes decoded; a binary body comes as base64', async () => {
  const r = await ok(`local g = tools.http.fetch{url = "${U}/gzip"}
    local b = tools.http.fetch{url = "${U}/bin"}
    return {g.body, b.body, b.encoding}`, local);
  eq(r, ['hello, compressed world', '//4AQQ==', 'base64']);
});

test('HTTPS with the test CA; without it the certificate is refused', async () => {
  const sec = { allow: ['public.test'], allow_private: ['127.0.0.0/8'], resolve: RESOLVE };
  const url = `https://public.test:${TLS_PORT}/echo`;
  const r = await ok(`local r = tools.http.fetch{url = "${url}"}
    return {r.status, json.decode(r.body).method}`, { ...sec, ca_file: CA });
  eq(r, [200, 'GET']);
  const e = await fails(`return tools.http.fetch{url = "${url}"}`, sec);
  eq(e.code, 'tool.failed');
  assert(e.message.startsWith(`${FETCH}GET ${url}: SSL peer certificate`) ||
         e.message.includes('certificate'), e.message);
});

// ---- concurrency, ctx.http, cancellation -------------------------------------------------

test('100 requests from parallel are in flight at once', async () => {
  gate.max = 0;
  const r = await ok(`local fns = {}
    for i = 1, 100 do
      fns[i] = function() return tools.http.fetch{url = "${U}/gate?n=100&i=" .. i}.status end
    end
    local st = {parallel(table.unpack(fns))}
    local n = 0
    for _, s in ipairs(st) do if s == 200 then n = n + 1 end end
    return n`, local, { args: ['--tool-in-flight', '100'] });
  eq([r, gate.max], [100, 100]);
}, 30000);

test('ctx.http returns the result to a plugin, and raises {code, message}', async () => {
  const r = await ok(`local a = tools.fxhttp.get{url = "${U}/echo"}
    local e = tools.fxhttp.error{url = "http://other.test/"}
    return {a.status, a.type, e.ok, e.code, e.message}`, local);
  eq(r, [200, 'application/json', false, 'tool.denied',
          'GET http://other.test/: no http.allow entry matches other.test']);
  const e = await fails(`return tools.fxhttp.get{url = "http://other.test/"}`, local);
  eq(e.code, 'tool.denied');
});

test('ctx.http takes no trusted flag, and http.fetch refuses one', async () => {
  const e = await fails(`return tools.fxhttp.get{url = "http://other.test:${PORT}/echo",
                                                 trusted = true}`,
                        { ...local, resolve: RESOLVE });
  eq(e.code, 'tool.denied');
  const f = await fails(`return tools.http.fetch{url = "${U}/echo", trusted = true}`, local);
  eq(f.code, 'tool.invalid_input');
});

test('a call that ends first cancels its request: the server sees it go', async () => {
  const before = aborted;
  const r = await ok(`local ok, err = pcall(tools.fxhttp.hold, {url = "${U}/slow?ms=5000"})
    tools.time.sleep{ms = 300}
    return {ok, err.code, tools.http.fetch{url = "${U}/aborted"}.body}`, local);
  eq(r, [false, 'tool.timeout', String(before + 1)]);
});

test('the run ending cancels its requests at once', async () => {
  const t0 = Date.now();
  const e = await fails(`return tools.http.fetch{url = "${U}/slow?ms=5000"}`, local,
                        { args: ['--timeout', '1s'] });
  eq(e.code, 'limit.time');
  assert(Date.now() - t0 < 3000, `the run took ${Date.now() - t0} ms`);
});

test('the Lua API: on_headers first, then chunks to on_data as they come; body ""', async () => {
  const r = await ok(`return tools.fxhttp.stream{url = "${U}/sse"}`, local);
  eq([r.text, r.body, r.status, r.n >= 2], ['data: 1\n\ndata: 2\n\ndata: 3\n\n', '', 200, true]);
  eq(r.heads, { chunks_before: 0, status: 200, type: 'text/event-stream' }, 'on_headers');
});

test('the Lua API: trusted skips the egress policy, not the scheme check', async () => {
  const r = await ok(`return tools.fxhttp.stream{url = "${U}/sse", trusted = true}.status`,
                     { allow: [] });
  eq(r, 200);
  const e = await fails(`return tools.fxhttp.stream{url = "${U}/sse"}`, { allow: [] });
  eq(e.code, 'tool.denied');
  const f = await fails('return tools.fxhttp.stream{url = "ftp://x/", trusted = true}',
                        { allow: [] });
  eq(f.code, 'tool.denied');
});

test('req:cancel() stops the request; on_done is not called', async () => {
  const before = aborted;
  const r = await ok(`local c = tools.fxhttp.cancel{url = "${U}/slow?ms=3000"}
    return {c.called, c.closing_before, c.closing_after,
            tools.http.fetch{url = "${U}/aborted"}.body}`, local);
  eq(r, [false, false, true, String(before + 1)]);
});

await run();
