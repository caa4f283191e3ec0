// The operator page of `tidepool mcp --http --ui`, in a real browser: Debian's chromium,
// headless, driven by puppeteer-core. One server with auth (an operator token, an agent
// token without the "operator" scope) and a policy that asks a person before test.echo:
// sign in with the token; an agent's run paused for approval shows up (the page's own
// script refreshes it under the strict Content-Security-Policy); Approve runs the call
// once (the audit journal counts its executions) and the run finishes; Deny gives the
// script tool.denied; the decisions are audited with the operator as principal; what a
// script wrote (<script>alert(1)</script>) shows as text; a post without the CSRF token
// or without Origin is 403; no scope, or a non-loopback client without auth, is refused;
// oversized and malformed forms are clear 4xx. chromium and the servers are killed by
// PID on every path (and the harness kills whatever is left of this process's children).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test, run, assert, eq, sleep, tidepool, root } from '../mcp/harness.mjs';

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
let puppeteer;
try { puppeteer = (await import('puppeteer-core')).default; }
catch { console.log('not ok - puppeteer-core is not installed (npm install --prefix spec/ui)'); console.log('# 0 passed, 1 failed'); process.exit(1); }
if (!fs.existsSync(CHROMIUM)) {
  console.log(`not ok - ${CHROMIUM} is missing (apt-get install chromium; scripts/deps.sh)`);
  console.log('# 0 passed, 1 failed');
  process.exit(1);
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tp-ui-'));
const OP = 'operator-token-0123456789';
const AGENT = 'agent-token-0123456789ab';
const config = {
  auth: {
    resource: 'http://127.0.0.1/mcp',
    tokens: [
      { token: OP, principal: 'ops-alice', scopes: ['operator', 'mcp'] },
      { token: AGENT, principal: 'agent-7', scopes: ['mcp'] }],
  },
  policy: { default: 'allow', rules: [{ tools: 'test.echo', effect: 'ask', reason: 'echo needs a person' }] },
};
fs.writeFileSync(path.join(tmp, 'auth.json'), JSON.stringify(config));
// without auth, behind a proxy on this host that names the client (for the loopback check)
fs.writeFileSync(path.join(tmp, 'noauth.json'), JSON.stringify({
  server: { trusted_proxies: ['127.0.0.1'] }, policy: config.policy }));
const audit = path.join(tmp, 'audit.log');

const servers = [];
function start(cfg, extra = []) {
  return new Promise((resolve, reject) => {
    const p = spawn(tidepool, ['mcp', '--test-tools', '--workers', '1', '--http', '127.0.0.1:0',
      '--ui', '--config', cfg, ...extra], { stdio: ['ignore', 'ignore', 'pipe'] });
    const srv = { proc: p, err: '' };
    servers.push(srv);
    p.stderr.setEncoding('utf8');
    p.stderr.on('data', (d) => {
      srv.err += d;
      const m = srv.err.match(/serving on http:\/\/127\.0\.0\.1:(\d+)\/mcp/);
      if (m && !srv.base) { srv.base = `http://127.0.0.1:${m[1]}`; resolve(srv); }
    });
    p.on('exit', (code) => { if (!srv.base) reject(new Error(`exited ${code}: ${srv.err}`)); });
  });
}
function stopAll() {
  for (const s of servers) { try { process.kill(s.proc.pid, 'SIGKILL'); } catch { /* gone */ } }
}

// An agent over MCP (2025 era: a session from initialize), with a bearer token.
async function agent(base, token) {
  const h = { 'content-type': 'application/json', accept: 'application/json, text/event-stream',
              authorization: `Bearer ${token}` };
  const r = await fetch(`${base}/mcp`, { method: 'POST', headers: h, body: JSON.stringify({
    jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18',
      capabilities: {}, clientInfo: { name: 'ui-test', version: '1' } } }) });
  eq(r.status, 200, 'initialize');
  h['mcp-session-id'] = r.headers.get('mcp-session-id');
  await fetch(`${base}/mcp`, { method: 'POST', headers: h,
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }) });
  let id = 10;
  return {
    async run(code) {
      const res = await fetch(`${base}/mcp`, { method: 'POST', headers: h, body: JSON.stringify({
        jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name: 'run_lua', arguments: { code } } }) });
      return (await res.json()).result.structuredContent;
    },
  };
}

let browser, page, srv, bot, chromiumPid;
const dialogs = [];

async function goto(url) {
  const r = await page.goto(url, { waitUntil: 'load' });
  return r.status();
}
// the page without its refresh, so that a click never races a redraw
const still = () => goto(`${srv.base}/ui?refresh=0`);
async function cookie() {
  const cs = await page.cookies(`${srv.base}/ui`);
  return cs.find((c) => c.name === 'tp_ui');
}
// Reloads until fn(page) holds (the run finishes on the worker after the decision).
async function until(fn, what, ms = 8000) {
  const end = Date.now() + ms;
  for (;;) {
    await still();
    if (await fn()) return;
    if (Date.now() > end) throw new Error(`not seen within ${ms} ms: ${what}`);
    await sleep(150);
  }
}
const text = (sel) => page.$eval(sel, (e) => e.textContent);
const journal = () => fs.readFileSync(audit, 'utf8').trim().split('\n').map((l) => JSON.parse(l));

test('setup: a server with auth and --ui, and headless chromium', async () => {
  srv = await start(path.join(tmp, 'auth.json'), ['--audit', audit]);
  browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'] });
  chromiumPid = browser.process().pid;
  page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  bot = await agent(srv.base, AGENT);
}, 30000);

test('the page is behind sign-in; a wrong token is 401 and a token without the operator scope 403', async () => {
  eq(await goto(`${srv.base}/ui`), 200);
  assert(await page.$('form[action="/ui/signin"]'), 'a sign-in form');
  await page.type('#token', 'not-a-token');
  const [r1] = await Promise.all([page.waitForNavigation(), page.click('#signin')]);
  eq(r1.status(), 401);
  assert((await text('#why')).includes('not accepted'), await text('#why'));
  await page.type('#token', AGENT);
  const [r2] = await Promise.all([page.waitForNavigation(), page.click('#signin')]);
  eq(r2.status(), 403);
  assert((await text('#why')).includes('"operator" scope'), await text('#why'));
  // GET with the agent's bearer token: the same 403, no page
  const r3 = await fetch(`${srv.base}/ui`, { headers: { authorization: `Bearer ${AGENT}` } });
  eq(r3.status, 403);
  assert((await r3.text()).includes('operator'), 'says which scope');
  // the sign-in form looked at again (a reload, or the page's script refreshing it) keeps
  // its signed-out session and CSRF token: a form shown earlier still posts
  const csrfOf = (html) => html.match(/name="csrf" value="([0-9a-f]{32})"/)[1];
  const f1 = await fetch(`${srv.base}/ui`);
  const ck = f1.headers.get('set-cookie').split(';')[0];
  const csrf1 = csrfOf(await f1.text());
  const f2 = await fetch(`${srv.base}/ui`, { headers: { cookie: ck } });
  eq(f2.status, 200);
  eq(f2.headers.get('set-cookie'), null);
  eq(csrfOf(await f2.text()), csrf1);
});

test('sign in with the operator token: an HttpOnly SameSite=Strict session cookie, a strict CSP', async () => {
  await page.type('#token', OP);
  const [r] = await Promise.all([page.waitForNavigation(), page.click('#signin')]);
  eq(r.status(), 200);
  eq(new URL(page.url()).pathname, '/ui');
  eq(await text('#who'), 'signed in as ops-alice');
  const c = await cookie();
  assert(c && c.httpOnly && c.sameSite === 'Strict', JSON.stringify(c));
  assert(!c.value.includes(OP), 'the cookie is not the token');
  const h = r.headers();
  assert(h['content-security-policy'].includes("default-src 'self'") &&
         h['content-security-policy'].includes("script-src 'self'"), h['content-security-policy']);
  const js = await fetch(`${srv.base}/ui/app.js`);
  eq(js.headers.get('content-type'), 'text/javascript; charset=utf-8');
});

let first;
test('an agent\'s run paused for approval shows up on the open page (its script refreshes it)', async () => {
  await goto(`${srv.base}/ui`);  // with the refresh
  assert((await text('#paused h2')).includes('(0)'), await text('#paused h2'));
  first = await bot.run('local r = tools.test.echo{text = "approve-me"}\nreturn "echoed: " .. r.text');
  eq(first.status, 'paused');
  await page.waitForSelector('#paused tr.pending', { timeout: 10000 });
  const row = await text('#paused tr.pending');
  assert(row.includes(first.run) && row.includes('agent-7') && row.includes('test.echo') &&
         row.includes('approve-me') && row.includes('echo needs a person'), row);
}, 20000);

test('approve it: the call runs once, the run finishes ok, the decision is audited with the operator', async () => {
  await still();
  const [r] = await Promise.all([page.waitForNavigation(),
    page.click(`#paused tr.pending form input[value="${first.run}"] ~ button.approve`)]);
  eq(r.status(), 200);
  eq(await text('#flash'), 'Approved: the run goes on.');
  await until(async () => (await page.$$('#runs tr.run')).length === 1, 'the run in recent runs');
  eq(await text('#runs tr.run .outcome'), 'ok');
  eq(await text('#runs tr.run .ncalls'), '1');
  eq(await text('#result'), 'echoed: approve-me');
  assert((await text('#paused h2')).includes('(0)'), 'no longer waiting');
  const ends = journal().filter((l) => l.ev === 'end' && l.tool === 'test.echo' && l.ok === true);
  eq(ends.length, 1, 'test.echo ran once');
  const d = journal().filter((l) => l.event === 'operator_decision');
  eq(d.length, 1);
  eq([d[0].principal, d[0].run_principal, d[0].run, d[0].seq, d[0].approve, d[0].tool],
     ['ops-alice', 'agent-7', first.run, 1, true, 'test.echo']);
  // the waterfall: one call, and the time it waited for a person
  eq((await page.$$('#waterfall svg g.call')).length, 1);
  assert(await page.$('#waterfall svg g.call rect.held'), 'the approval wait is drawn');
}, 20000);

test('deny another: the script gets tool.denied; two parallel calls are two rows of the waterfall', async () => {
  const second = await bot.run('local a, b = parallel(function() return tools.test.echo{text = "deny-me"} end,\n' +
    '  function() return tools.test.echo{text = "deny-me-too"} end)\nreturn a');
  eq(second.status, 'paused');
  eq(second.pending.length, 2);
  await until(async () => (await page.$$('#paused tr.pending')).length === 2, 'two pending calls');
  for (let k = 0; k < 2; k++) {  // after the first, the run pauses again on the other call
    await until(async () => (await page.$$('#paused tr.pending')).length === 2 - k, 'the calls left');
    await page.type('#paused tr.pending input[name="note"]', 'not today');
    const [r] = await Promise.all([page.waitForNavigation(), page.click('#paused tr.pending button.deny')]);
    eq(r.status(), 200);
    eq(await text('#flash'), 'Denied: the run goes on.');
  }
  await until(async () => (await page.$$('#runs tr.run')).length === 2, 'the denied run finished');
  eq(await text('#runs tr.run .outcome'), 'tool.denied');
  assert((await text('#result')).includes('not today'), await text('#result'));
  eq((await page.$$('#waterfall svg g.call')).length, 2, 'both calls drawn');
  // made in parallel: the two bars span the same time (each starts before the other ends)
  const bars = await page.$$eval('#waterfall svg g.call rect.bar', (rs) => rs.map((r) =>
    [Number(r.getAttribute('x')), Number(r.getAttribute('x')) + Number(r.getAttribute('width'))]));
  assert(bars[0][0] < bars[1][1] && bars[1][0] < bars[0][1], JSON.stringify(bars));
  const ends = journal().filter((l) => l.ev === 'end' && l.tool === 'test.echo' && l.ok === true);
  eq(ends.length, 1, 'still one execution of test.echo');
  const d = journal().filter((l) => l.event === 'operator_decision' && l.approve === false);
  eq(d.length, 2);
  assert(d.every((x) => x.principal === 'ops-alice'), JSON.stringify(d));
}, 25000);

test('what a script wrote shows as text: <script>alert(1)</script> runs nowhere', async () => {
  const evil = '<script>alert(1)</script>';
  const p = await bot.run(`local r = tools.test.echo{text = "${evil}"}\nreturn "${evil}"`);
  eq(p.status, 'paused');
  await until(async () => (await page.$$('#paused tr.pending')).length === 1, 'the pending call');
  eq(await text('#paused tr.pending pre.args'), JSON.stringify({ text: evil }));
  await Promise.all([page.waitForNavigation(), page.click('#paused tr.pending button.approve')]);
  await until(async () => (await page.$$('#runs tr.run')).length === 3, 'the run finished');
  eq(await text('#result'), evil);
  await goto(`${srv.base}/ui`);
  await sleep(2500);  // a refresh of the live part went by too
  eq(await text('#result'), evil);
  eq(dialogs.length, 0, 'no alert ran');
  eq(await page.$$eval('script', (s) => s.map((x) => x.getAttribute('src'))), ['/ui/app.js']);
}, 25000);

test('a run paused for a 2026-07-28 client (input_required) is decided on the page too', async () => {
  const body = { jsonrpc: '2.0', id: 99, method: 'tools/call', params: { name: 'run_lua',
    arguments: { code: 'return tools.test.echo{text = "modern"}.text' },
    _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28',
             'io.modelcontextprotocol/clientCapabilities': { elicitation: {} } } } };
  const r = await fetch(`${srv.base}/mcp`, { method: 'POST', body: JSON.stringify(body), headers: {
    'content-type': 'application/json', accept: 'application/json, text/event-stream',
    authorization: `Bearer ${AGENT}`, 'mcp-protocol-version': '2026-07-28',
    'mcp-method': 'tools/call', 'mcp-name': 'run_lua' } });
  const all = await r.json();
  const res = all.result || {};
  eq(res.resultType, 'input_required', JSON.stringify(all).slice(0, 300));
  await until(async () => (await page.$$('#paused tr.pending')).length === 1, 'the pending call');
  const row = await text('#paused tr.pending');
  assert(row.includes('test.echo') && row.includes('modern') && row.includes('echo needs a person'), row);
  await Promise.all([page.waitForNavigation(), page.click('#paused tr.pending button.approve')]);
  await until(async () => (await page.$$('#runs tr.run')).length === 4, 'the run finished');
  eq(await text('#runs tr.run .outcome'), 'ok');
  eq(await text('#result'), 'modern');
  const d = journal().filter((l) => l.event === 'operator_decision');
  eq([d.length, d[4].tool, d[4].principal, d[4].run_principal], [5, 'test.echo', 'ops-alice', 'agent-7']);
  // the client's own answer comes too late: refused, and the tool does not run again
  const retry = { ...body, id: 100, params: { ...body.params, requestState: res.requestState,
    inputResponses: { 'approve-1': { action: 'accept', content: { approve: true } } } } };
  const r2 = await fetch(`${srv.base}/mcp`, { method: 'POST', body: JSON.stringify(retry), headers: {
    'content-type': 'application/json', accept: 'application/json, text/event-stream',
    authorization: `Bearer ${AGENT}`, 'mcp-protocol-version': '2026-07-28',
    'mcp-method': 'tools/call', 'mcp-name': 'run_lua' } });
  const late = JSON.stringify(await r2.json());
  assert(late.includes('run.unknown'), late.slice(0, 400));
  eq(journal().filter((l) => l.ev === 'end' && l.tool === 'test.echo' && l.ok === true).length, 3,
     'test.echo ran once for each approval');
}, 20000);

test('posts without the CSRF token, with a wrong one, or without Origin are 403; nothing is decided', async () => {
  const p = await bot.run('return tools.test.echo{text = "rotate the staging key"}');
  eq(p.status, 'paused');
  if (process.env.TP_UI_SCREENSHOT) {  // docs/operations.md's picture: a run waits, run 2 drawn
    await until(async () => (await page.$$('#paused tr.pending')).length === 1, 'the pending call');
    await goto(`${srv.base}/ui?refresh=0&run=2`);
    await page.screenshot({ path: path.resolve(root, process.env.TP_UI_SCREENSHOT), fullPage: true });
  }
  const c = (await cookie()).value;
  const origin = srv.base;
  const post = (body, headers = {}) => fetch(`${srv.base}/ui/decide`, { method: 'POST', redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `tp_ui=${c}`, origin, ...headers },
    body });
  await still();
  const csrf = await page.$eval('input[name="csrf"]', (e) => e.value);
  eq((await post(`run=${p.run}&seq=1&action=approve`)).status, 403);
  eq((await post(`csrf=${'0'.repeat(32)}&run=${p.run}&seq=1&action=approve`)).status, 403);
  const noOrigin = await fetch(`${srv.base}/ui/decide`, { method: 'POST', redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: `tp_ui=${c}` },
    body: `csrf=${csrf}&run=${p.run}&seq=1&action=approve` });
  eq(noOrigin.status, 403);
  eq((await post(`csrf=${csrf}&run=${p.run}&seq=1&action=approve`, { origin: 'http://evil.example' })).status, 403);
  // from the page itself, without the token: 403 as well
  eq(await page.evaluate(async (run) => (await fetch('/ui/decide', { method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `run=${run}&seq=1&action=approve` })).status, p.run), 403);
  await still();
  eq((await page.$$('#paused tr.pending')).length, 1, 'still waiting');
  eq(journal().filter((l) => l.event === 'operator_decision').length, 5, 'nothing more audited');
  // with it, the same post decides (303 back to the page)
  const ok = await post(`csrf=${csrf}&run=${p.run}&seq=1&action=deny`);
  eq(ok.status, 303);
  eq(ok.headers.get('location'), '/ui?done=deny');
});

test('malformed and oversized forms are clear 4xx; an unknown run is 404', async () => {
  const c = (await cookie()).value;
  await still();
  const csrf = await page.$eval('input[name="csrf"]', (e) => e.value).catch(() => null) ||
               (await page.$eval('form[action="/ui/signout"] input[name="csrf"]', (e) => e.value));
  const post = (body, type = 'application/x-www-form-urlencoded') => fetch(`${srv.base}/ui/decide`, {
    method: 'POST', redirect: 'manual', headers: { 'content-type': type, cookie: `tp_ui=${c}`, origin: srv.base }, body });
  const cases = [
    [`csrf=${csrf}&run=0-abc&seq=1&action=approve`, 404, 'no paused run'],
    [`csrf=${csrf}&run=0-abc&seq=x&action=approve`, 400, 'a decision is run'],
    [`csrf=${csrf}&run=0-abc&seq=1&action=maybe`, 400, 'approve or deny'],
    [`csrf=${csrf}&run=0-abc&seq=1&action=approve&note=%ZZ`, 400, 'bad %-escape'],
    [`csrf=${csrf}&run=0-abc&seq=1&action=approve&note=%FF`, 400, 'UTF-8'],
    [`csrf=${csrf}&` + 'a=1&'.repeat(20), 400, 'more than 16 fields'],
    [`csrf=${csrf}&note=` + 'x'.repeat(20000), 413, 'over the 16384 bytes'],
  ];
  for (const [body, status, says] of cases) {
    const r = await post(body);
    const t = await r.text();
    eq(r.status, status, body.slice(0, 60));
    assert(t.includes(says) || t.includes(says.replace(/"/g, '&quot;')), `${status}: ${t.slice(0, 300)}`);
  }
  eq((await post(`csrf=${csrf}`, 'application/json')).status, 415);
  eq((await fetch(`${srv.base}/ui`, { method: 'PUT' })).status, 405);
  // the server is still there
  eq((await fetch(`${srv.base}/ui/app.css`)).status, 200);
});

test('without auth: loopback clients only (a client a trusted proxy names is refused)', async () => {
  const s2 = await start(path.join(tmp, 'noauth.json'));
  const local = await fetch(`${s2.base}/ui`);
  eq(local.status, 200);
  assert((await local.text()).includes('a local client (no auth)'), 'served to loopback');
  const far = await fetch(`${s2.base}/ui`, { headers: { 'x-forwarded-for': '203.0.113.9' } });
  eq(far.status, 403);
  assert((await far.text()).includes('loopback clients only'), 'says why');
  const farPost = await fetch(`${s2.base}/ui/decide`, { method: 'POST', headers: {
    'x-forwarded-for': '203.0.113.9', 'content-type': 'application/x-www-form-urlencoded',
    origin: s2.base }, body: 'run=x&seq=1&action=approve' });
  eq(farPost.status, 403);
  // and --ui without --http is a usage error
  const u = spawn(tidepool, ['mcp', '--ui'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  u.stderr.on('data', (d) => { err += d; });
  const code = await new Promise((r) => u.on('exit', r));
  eq(code, 2);
  assert(err.includes('--ui serves the operator page over HTTP'), err);
}, 20000);

test('teardown: the servers stop on SIGTERM with no sanitizer report; chromium is gone', async () => {
  await browser.close();
  try { process.kill(chromiumPid, 'SIGKILL'); } catch { /* closed */ }
  for (const s of servers) {
    const exited = new Promise((r) => s.proc.on('exit', (code, sig) => r(sig || code)));
    s.proc.kill('SIGTERM');
    const how = await Promise.race([exited, sleep(8000).then(() => 'still running')]);
    eq(how, 0, `server exit (${s.err.slice(-300)})`);
    assert(!/AddressSanitizer|LeakSanitizer|runtime error:/.test(s.err), s.err.slice(-2000));
  }
  stopAll();
  await sleep(200);
  let alive = false;
  try { process.kill(chromiumPid, 0); alive = true; } catch { /* gone */ }
  eq(alive, false, 'chromium is gone');
});

process.on('exit', () => {
  if (chromiumPid) { try { process.kill(chromiumPid, 'SIGKILL'); } catch { /* gone */ } }
  stopAll();
  fs.rmSync(tmp, { recursive: true, force: true });
});
await run();
