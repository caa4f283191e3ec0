// examples/reach/api.mjs: a small HTTP API for the example (an issue tracker), on
// 127.0.0.1:18787 (PORT overrides). GET /issues[?state=open], GET /issues/N,
// POST /issues/N/comments {"body"}. Plain node, no packages.
import http from 'node:http';

const issues = [
  { number: 1, title: 'Crash when the config file is empty', state: 'open', labels: ['bug'] },
  { number: 2, title: 'Document the policy grammar', state: 'closed', labels: ['docs'] },
  { number: 3, title: 'Retry upstream calls after a restart', state: 'open', labels: ['feature'] },
];
const comments = {};

const send = (res, status, body) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  let m;
  if (req.method === 'GET' && url.pathname === '/issues') {
    const state = url.searchParams.get('state');
    return send(res, 200, issues.filter((i) => !state || i.state === state));
  }
  if (req.method === 'GET' && (m = url.pathname.match(/^\/issues\/(\d+)$/))) {
    const issue = issues.find((i) => i.number === Number(m[1]));
    return issue ? send(res, 200, { ...issue, comments: comments[issue.number] || [] })
                 : send(res, 404, { error: 'no such issue' });
  }
  if (req.method === 'POST' && (m = url.pathname.match(/^\/issues\/(\d+)\/comments$/))) {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      let c;
      try { c = JSON.parse(body); } catch { return send(res, 400, { error: 'body is not JSON' }); }
      (comments[m[1]] ||= []).push(c.body);
      send(res, 201, { issue: Number(m[1]), comments: comments[m[1]].length });
    });
    return undefined;
  }
  return send(res, 404, { error: 'not found' });
});
server.listen(Number(process.env.PORT || 18787), '127.0.0.1', () => {
  process.stdout.write(`api listening on 127.0.0.1:${server.address().port}\n`);
});
