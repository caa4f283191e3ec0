'use strict';
// tidepool for Node: runs Lua scripts in a `tidepool mcp` child process and answers the
// script's calls to the caller's own tools (caller tools, docs/caller-tools.md, live
// mode). No runtime dependency and no native code: a crash of the engine ends the child,
// never this process. The guide is docs/sdk-node.md.

const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const PROTOCOL = '2025-06-18';
const CALLER_CAP = 'tidepool/callerTools';
const SCHEMA_MARK = Symbol.for('vercel.ai.schema'); // the AI SDK's jsonSchema() mark
const ERROR_CODES = new Set(['tool.failed', 'tool.denied', 'tool.timeout', 'tool.unavailable',
  'tool.rate_limited', 'tool.invalid_input']);
const STDERR_KEEP = 4096;
const INSTALL_HINT = 'Install tidepool (from a checkout: `make && sudo make install`, or the ' +
  'Debian package `tidepool`), or pass { binary: "/path/to/tidepool" }, or set TIDEPOOL_BIN.';

class TidepoolError extends Error {
  constructor(message, code, data) {
    super(message);
    this.name = 'TidepoolError';
    this.code = code;
    if (data !== undefined) this.data = data;
  }
}

function abortError(signal) {
  const reason = signal && signal.reason;
  if (reason instanceof Error) return reason;
  const e = new Error(reason === undefined ? 'the run was aborted' : String(reason));
  e.name = 'AbortError';
  e.code = 'cancelled';
  return e;
}

// ---- the binary ------------------------------------------------------------------------

function isExecutable(file) {
  try {
    const st = fs.statSync(file);
    if (!st.isFile()) return false;
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch { return false; }
}

// The binary: the option, else $TIDEPOOL_BIN, else `tidepool` on $PATH. A missing one is
// an error saying where it looked and how to install it.
function findBinary(binary, env = process.env) {
  if (binary) {
    if (isExecutable(binary)) return binary;
    throw new TidepoolError(`tidepool binary not found: ${binary} (the binary option) ` +
      `is not an executable file. ${INSTALL_HINT}`, 'binary.missing');
  }
  if (env.TIDEPOOL_BIN) {
    if (isExecutable(env.TIDEPOOL_BIN)) return env.TIDEPOOL_BIN;
    throw new TidepoolError(`tidepool binary not found: TIDEPOOL_BIN=${env.TIDEPOOL_BIN} ` +
      `is not an executable file. ${INSTALL_HINT}`, 'binary.missing');
  }
  for (const dir of (env.PATH || '').split(path.delimiter)) {
    if (!dir) continue;
    const f = path.join(dir, 'tidepool');
    if (isExecutable(f)) return f;
  }
  throw new TidepoolError(`tidepool binary not found: no \`tidepool\` on PATH ` +
    `(${env.PATH || 'empty'}). ${INSTALL_HINT}`, 'binary.missing');
}

// { timeout: '5s', toolCalls: 100 } -> ['--timeout', '5s', '--tool-calls', '100']: the
// command line's limit options, values as it takes them.
const LIMITS = ['memory', 'instructions', 'cpu', 'timeout', 'max-output', 'max-source',
  'max-result', 'tool-calls', 'tool-calls-per-tool', 'tool-in-flight', 'tool-bytes',
  'tool-timeout', 'fs-quota'];
function limitFlags(limits) {
  const out = [];
  for (const [k, v] of Object.entries(limits || {})) {
    if (v === undefined || v === null) continue;
    const flag = k.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase()).replace(/_/g, '-');
    if (!LIMITS.includes(flag)) {
      throw new TidepoolError(`unknown limit "${k}": the limits are ${LIMITS.join(', ')} ` +
        '(camelCase or snake_case)', 'limits.unknown');
    }
    out.push('--' + flag, String(v));
  }
  return out;
}

// ---- schemas ---------------------------------------------------------------------------

// A tool's schema as JSON Schema: plain JSON Schema as it is; the AI SDK's jsonSchema()
// object; zod 4 (its Standard JSON Schema converter, or toJSONSchema()); zod 3 through
// zod-to-json-schema when that is installed; a lazy schema (a function). Duck-typed: no
// dependency on zod or ai.
function toJsonSchema(schema, what) {
  if (schema === undefined || schema === null) return undefined;
  if (typeof schema === 'function') return toJsonSchema(schema(), what);
  if (typeof schema !== 'object') {
    throw new TidepoolError(`${what}: a schema must be an object (JSON Schema or zod), ` +
      `got ${typeof schema}`, 'schema.invalid');
  }
  if (schema[SCHEMA_MARK] === true) {
    const js = schema.jsonSchema;
    if (js && typeof js.then === 'function') {
      throw new TidepoolError(`${what}: the schema's JSON Schema is a promise; give it as ` +
        'a value', 'schema.invalid');
    }
    return js;
  }
  const std = schema['~standard'];
  if (std && std.jsonSchema && typeof std.jsonSchema.input === 'function') {
    return std.jsonSchema.input({ target: 'draft-2020-12' });
  }
  if (typeof schema.toJSONSchema === 'function') return schema.toJSONSchema();
  if (schema._def && typeof schema.safeParse === 'function') {
    let conv;
    try { conv = require('zod-to-json-schema'); } catch { conv = null; }
    if (conv && conv.zodToJsonSchema) return conv.zodToJsonSchema(schema, { $refStrategy: 'root' });
    throw new TidepoolError(`${what}: a zod 3 schema needs the package zod-to-json-schema ` +
      '(npm install zod-to-json-schema), or zod 4', 'schema.invalid');
  }
  if (std) {
    throw new TidepoolError(`${what}: a Standard Schema of "${std.vendor}" without a JSON ` +
      'Schema converter: give inputSchema as JSON Schema', 'schema.invalid');
  }
  return schema;
}

// The schema's own validation (zod's parse with its defaults and transforms, the AI SDK's
// validate), run on arguments tidepool already checked against the JSON Schema; null when
// there is none.
function validatorOf(schema) {
  if (!schema || typeof schema !== 'object') return null;
  if (schema[SCHEMA_MARK] === true && typeof schema.validate === 'function') {
    return async (v) => {
      const r = await schema.validate(v);
      if (r.success) return r.value;
      throw Object.assign(new Error(String(r.error && r.error.message || r.error)),
        { code: 'tool.invalid_input' });
    };
  }
  const std = schema['~standard'];
  if (std && typeof std.validate === 'function') {
    return async (v) => {
      const r = await std.validate(v);
      if (!r.issues) return r.value;
      const msg = r.issues.map((i) => {
        const p = (i.path || []).map((s) => (typeof s === 'object' ? s.key : s)).join('.');
        return (p ? `${p}: ` : '') + i.message;
      }).join('; ');
      throw Object.assign(new Error(msg), { code: 'tool.invalid_input' });
    };
  }
  return null;
}

// ---- tools -----------------------------------------------------------------------------

// A name the script can write (letters, digits, _ and dots between parts): an AI SDK
// tool named "lookup-user" is tools.lookup_user in the script.
function scriptName(name) {
  let n = String(name).replace(/[^A-Za-z0-9_.]/g, '_').replace(/\.{2,}/g, '.')
    .replace(/^\.+|\.+$/g, '');
  n = n.split('.').map((p) => (/^[0-9]/.test(p) ? '_' + p : p)).join('.');
  return n || '_';
}

// tools (a { name: tool } object, or a Map) -> { decls, byName }.
// paused: the tools are answered by resume() (no execute needed), not while the run waits.
function prepareTools(tools, paused = false) {
  const decls = [];
  const byName = new Map();
  if (!tools) return { decls, byName };
  const entries = tools instanceof Map ? [...tools.entries()] : Object.entries(tools);
  for (const [name, t] of entries) {
    if (!t || typeof t !== 'object') {
      throw new TidepoolError(`tool "${name}": expected { description, inputSchema, execute }`,
        'tool.invalid');
    }
    if (!paused && typeof t.execute !== 'function') {
      throw new TidepoolError(`tool "${name}" has no execute function (a provider-executed or ` +
        'client-side tool cannot be called from a script)', 'tool.invalid');
    }
    const sname = scriptName(name);
    if (byName.has(sname)) {
      throw new TidepoolError(`tools "${byName.get(sname).name}" and "${name}" both become ` +
        `tools.${sname} in a script: rename one`, 'tool.invalid');
    }
    const decl = { name: sname };
    let description = t.description;
    if (typeof description === 'function') { // ai 7: a description made from the context
      try { description = description({ context: undefined }); } catch { description = undefined; }
    }
    if (typeof description === 'string') decl.description = description;
    const input = toJsonSchema(t.inputSchema || t.parameters, `tool "${name}" inputSchema`);
    if (input) decl.inputSchema = plainSchema(input);
    const output = toJsonSchema(t.outputSchema, `tool "${name}" outputSchema`);
    if (output) decl.outputSchema = plainSchema(output);
    if (Number.isInteger(t.timeoutMs) && t.timeoutMs > 0) decl.timeoutMs = t.timeoutMs;
    decls.push(decl);
    byName.set(sname, { name, tool: t, validate: validatorOf(t.inputSchema || t.parameters) });
  }
  return { decls, byName };
}

// JSON Schema as plain data: drops "$schema" of draft versions tidepool reads by default
// and anything JSON cannot carry.
function plainSchema(s) {
  const out = JSON.parse(JSON.stringify(s));
  if (out && typeof out === 'object' && typeof out.$schema === 'string' &&
      !/2020-12|draft-07/.test(out.$schema)) delete out.$schema;
  return out;
}

async function needsApproval(entry, args, options) {
  const na = entry.tool.needsApproval;
  if (typeof na === 'function') return Boolean(await na(args, options));
  return Boolean(na);
}

// ---- the envelope ----------------------------------------------------------------------

const VIEW = Symbol('tidepool.modelView');

// A tools/call result -> the envelope (ok, result, error, logs, calls, stats; status, run
// and pending when paused), with what the model reads kept beside it (modelView()).
function envelopeOf(res) {
  let view = res.structuredContent;
  if (!view && Array.isArray(res.content) && res.content[0] && res.content[0].type === 'text') {
    try { view = JSON.parse(res.content[0].text); } catch { view = { ok: false,
      error: { code: 'runtime', message: res.content[0].text } }; }
  }
  view = view || {};
  const meta = res._meta || {};
  const env = { ok: view.ok === true };
  if ('result' in view) env.result = view.result;
  if (view.error) env.error = view.error;
  env.logs = view.logs || [];
  env.calls = meta['tidepool/calls'] || [];
  env.stats = meta['tidepool/stats'] || {};
  for (const k of ['status', 'run', 'pending', 'session', 'warnings', 'truncated']) {
    if (k in view) env[k] = view[k];
  }
  Object.defineProperty(env, VIEW, { value: view });
  return env;
}

// What a model reads of a run: the envelope as `tidepool mcp` gives it to a model (ok,
// result or error, logs, calls counted by tool, failed calls in full).
function modelView(env) {
  if (env && env[VIEW]) return env[VIEW];
  if (!env || typeof env !== 'object') return env;
  const calls = {};
  for (const c of env.calls || []) calls[c.tool] = (calls[c.tool] || 0) + 1;
  const v = { ok: env.ok, calls, logs: env.logs || [] };
  if (env.ok) v.result = env.result; else v.error = env.error;
  return v;
}

// ---- one tidepool mcp process ----------------------------------------------------------

class Server {
  constructor(bin, args, opts) {
    this.bin = bin;
    this.args = args;
    this.opts = opts;
    this.nextId = 1;
    this.pending = new Map();   // our request id -> { resolve, reject, run }
    this.runs = new Map();      // run_lua request id -> run
    this.active = 0;
    this.stderr = '';
    this.closed = false;
    this.exited = null;
    this.ready = this.start();
    this.ready.catch(() => {});
  }

  start() {
    const child = spawn(this.bin, ['mcp', ...this.args], {
      stdio: ['pipe', 'pipe', 'pipe'], env: this.opts.env || process.env,
    });
    this.child = child;
    this.pid = child.pid;
    const exited = new Promise((resolve) => {
      child.on('exit', (code, sig) => resolve({ code, signal: sig }));
      child.on('error', (err) => resolve({ code: null, signal: null, error: err }));
    });
    this.exitedP = exited;
    exited.then((how) => this.onExit(how));
    child.stdin.on('error', () => {}); // EPIPE when it died: reported by onExit
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d) => {
      this.stderr = (this.stderr + d).slice(-STDERR_KEEP);
      if (this.opts.stderr) this.opts.stderr(d);
    });
    child.stdout.setEncoding('utf8');
    let buf = '';
    child.stdout.on('data', (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line) this.onLine(line);
      }
    });
    this.idle();
    // elicitation always: a call the server's policy holds for a person is asked of
    // onApproval, or declined at once, never left as a paused run nobody resumes
    const caps = { experimental: { [CALLER_CAP]: { version: 1 } }, elicitation: {} };
    return this.request('initialize', {
      protocolVersion: PROTOCOL, capabilities: caps,
      clientInfo: { name: 'tidepool-node', version: '0.1.0' },
    }).then((init) => {
      const cap = init && init.capabilities && init.capabilities.experimental &&
        init.capabilities.experimental[CALLER_CAP];
      this.callerTools = cap || null;
      this.notify('notifications/initialized', {});
      return init;
    });
  }

  // Not running a request, the child holds no reference on the event loop: a program
  // that forgot close() still exits.
  idle() {
    if (this.active > 0) return;
    for (const h of [this.child, this.child.stdin, this.child.stdout, this.child.stderr]) {
      if (h && h.unref) h.unref();
    }
  }
  busy() {
    for (const h of [this.child, this.child.stdin, this.child.stdout, this.child.stderr]) {
      if (h && h.ref) h.ref();
    }
  }

  send(msg) {
    if (this.exited || this.closed) return;
    this.child.stdin.write(JSON.stringify(msg) + '\n');
  }
  notify(method, params) { this.send({ jsonrpc: '2.0', method, params }); }

  request(method, params, run) {
    if (this.exited) return Promise.reject(this.exitError());
    const id = this.nextId++;
    return this.requestWithId(id, method, params, run);
  }
  requestWithId(id, method, params, run) {
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, run });
      if (this.active++ === 0) this.busy();
      this.send({ jsonrpc: '2.0', id, method, params });
    });
  }
  settle(id) {
    const p = this.pending.get(id);
    if (!p) return null;
    this.pending.delete(id);
    if (--this.active === 0) this.idle();
    return p;
  }

  onLine(line) {
    let msg;
    try { msg = JSON.parse(line); } catch { return; }
    if (msg.method !== undefined) {
      if (msg.id !== undefined) this.onRequest(msg);
      else this.onNotification(msg);
      return;
    }
    const p = this.settle(msg.id);
    if (!p) return;
    if (msg.error) {
      p.reject(new TidepoolError(msg.error.message, msg.error.code, msg.error.data));
    } else {
      p.resolve(msg.result);
    }
  }

  onNotification(msg) {
    if (msg.method === 'notifications/cancelled') {
      const rid = msg.params && msg.params.requestId;
      for (const run of this.runs.values()) {
        const call = run.inflight.get(rid);
        if (call) { call.abort(new Error(msg.params.reason || 'cancelled by tidepool')); return; }
      }
    } else if (msg.method === 'notifications/message' && this.opts.onLog) {
      this.opts.onLog(msg.params);
    }
  }

  onRequest(msg) {
    if (msg.method === 'tidepool/callTool') return this.onCallTool(msg);
    if (msg.method === 'elicitation/create') return this.onElicit(msg);
    if (msg.method === 'ping') return this.send({ jsonrpc: '2.0', id: msg.id, result: {} });
    this.send({ jsonrpc: '2.0', id: msg.id,
      error: { code: -32601, message: `tidepool-node does not handle ${msg.method}` } });
  }

  runOf(p) {
    if (p.request !== undefined && this.runs.has(p.request)) return this.runs.get(p.request);
    const tok = p._meta && p._meta.progressToken;
    if (tok !== undefined && this.runs.has(tok)) return this.runs.get(tok);
    if (p.run !== undefined) {
      for (const r of this.runs.values()) if (r.serverRun === p.run) return r;
    }
    // A client with one run at a time (or tools of distinct names) needs no more.
    let found = null;
    for (const r of this.runs.values()) {
      if (r.byName.has(p.tool)) {
        if (found) return null;
        found = r;
      }
    }
    return found;
  }

  answer(id, payload) {
    let line;
    try {
      line = JSON.stringify({ jsonrpc: '2.0', id, result: payload });
    } catch (e) {
      line = JSON.stringify({ jsonrpc: '2.0', id, result: { error: {
        message: `the tool's result is not JSON: ${e.message}`, code: 'tool.failed' } } });
    }
    if (!this.exited && !this.closed) this.child.stdin.write(line + '\n');
  }

  // A call of the script to one of the run's tools. The common case (no zod parse, no
  // approval, a plain result) is answered in the same tick, without a promise; the
  // AbortController is made only when the tool reads its signal.
  onCallTool(msg) {
    const p = msg.params || {};
    const run = this.runOf(p);
    const entry = run && run.byName.get(p.tool);
    if (!entry) {
      this.answer(msg.id, { error: { message: `no caller tool ${p.tool} in this run`,
        code: 'tool.unavailable' } });
      return;
    }
    if (p.run !== undefined) run.serverRun = p.run;
    let ac = null;
    const controller = () => ac || (ac = new AbortController());
    const call = {
      get signal() { return controller().signal; },
      get abortSignal() { return controller().signal; },
      toolCallId: `${p.run || 'run'}:${p.id}`, messages: run.messages || [],
      context: run.context, tidepool: { run: p.run, id: p.id, tool: p.tool },
    };
    // a run the server keeps in its state store (--state) sends each call's binding: what
    // resume() takes for it when the process dies while the call is here (onExit)
    run.inflight.set(msg.id, { abort: (reason) => controller().abort(reason), run: p.run,
      pending: typeof p.binding === 'string' ? { kind: 'call', id: p.id, tool: p.tool,
        args: p.args, binding: p.binding } : null });
    if (entry.validate || entry.tool.needsApproval) {
      this.callChecked(msg.id, run, entry, p.args, call);
      return;
    }
    let out;
    try {
      out = entry.tool.execute(p.args, call);
    } catch (e) {
      run.inflight.delete(msg.id);
      this.fail(msg.id, e);
      return;
    }
    if (out && (typeof out.then === 'function' || typeof out[Symbol.asyncIterator] === 'function')) {
      this.finish(msg.id, run, out);
      return;
    }
    run.inflight.delete(msg.id);
    this.answer(msg.id, { result: out === undefined ? null : out });
  }

  fail(id, e) {
    const message = e && e.message !== undefined ? String(e.message) : String(e);
    const code = e && ERROR_CODES.has(e.code) ? e.code : 'tool.failed';
    this.answer(id, { error: { message: message || 'the tool failed', code } });
  }

  // A promise or an async iterable (the AI SDK's preliminary results: the last one counts).
  async finish(id, run, out) {
    try {
      if (typeof out.then === 'function') out = await out;
      if (out && typeof out[Symbol.asyncIterator] === 'function') {
        let last;
        for await (const part of out) last = part;
        out = last;
      }
      this.answer(id, { result: out === undefined ? null : out });
    } catch (e) {
      this.fail(id, e);
    } finally {
      run.inflight.delete(id);
    }
  }

  // The schema's own parse (zod), then needsApproval, then the call.
  async callChecked(id, run, entry, args, call) {
    try {
      if (entry.validate) args = await entry.validate(args);
      if (entry.tool.needsApproval && await needsApproval(entry, args, call)) {
        const ok = run.onApproval ? await run.onApproval({ tool: entry.name, args,
          reason: 'the tool needs approval (needsApproval)', toolCallId: call.toolCallId }) : false;
        if (!ok) {
          run.inflight.delete(id);
          this.answer(id, { error: { code: 'tool.denied', message: run.onApproval
            ? `${entry.name} needs approval and it was not given`
            : `${entry.name} needs approval (needsApproval) and this code tool has no ` +
              'onApproval to ask anyone: the call is denied' } });
          return;
        }
      }
    } catch (e) {
      run.inflight.delete(id);
      this.fail(id, e);
      return;
    }
    let out;
    try { out = entry.tool.execute(args, call); } catch (e) {
      run.inflight.delete(id);
      this.fail(id, e);
      return;
    }
    await this.finish(id, run, out && (typeof out.then === 'function' ||
      typeof out[Symbol.asyncIterator] === 'function') ? out : Promise.resolve(out));
  }

  async onElicit(msg) {
    // A call the server's policy holds for approval (effect "ask") comes as a form with
    // {approve, note}: answered by onApproval, else declined.
    const p = msg.params || {};
    let approve = false;
    try {
      if (this.opts.onApproval) {
        approve = Boolean(await this.opts.onApproval({ message: p.message, request: p }));
      }
    } catch { approve = false; }
    this.send({ jsonrpc: '2.0', id: msg.id, result: approve
      ? { action: 'accept', content: { approve: true } }
      : { action: 'accept', content: { approve: false, note: this.opts.onApproval
        ? 'declined by the application' : 'no one to ask: the application set no onApproval' } } });
  }

  exitError() {
    const how = this.exited || {};
    if (how.error) {
      return new TidepoolError(`could not start ${this.bin}: ${how.error.message}`,
        'process.spawn');
    }
    const tail = this.stderr.trim().split('\n').slice(-5).join('\n');
    return new TidepoolError(`the tidepool process exited (${how.signal ? 'signal ' +
      how.signal : 'status ' + how.code})${tail ? ': ' + tail : ''}`, 'process.exited');
  }

  onExit(how) {
    this.exited = how;
    const err = this.exitError();
    for (const id of [...this.pending.keys()]) {
      const p = this.settle(id);
      // a stored run whose calls were here: it is paused at them in the store, and
      // resume(error.paused, results) answers them through a new process
      const calls = p.run ? [...p.run.inflight.values()].filter((c) => c.pending) : [];
      if (!calls.length) { p.reject(err); continue; }
      const e = new TidepoolError(`${err.message}; run ${calls[0].run} is kept in the ` +
        'state store, paused at its calls in flight: resume(error.paused, results) answers ' +
        'them', err.code);
      e.paused = { ok: false, status: 'paused', run: calls[0].run,
        pending: calls.map((c) => c.pending) };
      p.reject(e);
    }
    for (const run of this.runs.values()) for (const ac of run.inflight.values()) ac.abort(err);
    if (this.onGone) this.onGone();
  }

  async close(graceMs = 2000) {
    if (this.closed) return this.exitedP;
    this.closed = true;
    try { this.child.stdin.end(); } catch { /* already gone */ }
    let timer;
    const killed = new Promise((resolve) => {
      timer = setTimeout(() => { try { this.child.kill('SIGKILL'); } catch { /* gone */ } resolve(); }, graceMs);
    });
    this.busy();
    await Promise.race([this.exitedP, killed]);
    clearTimeout(timer);
    return this.exitedP;
  }
}

// ---- the public class ------------------------------------------------------------------

class Tidepool {
  // options: binary, config (a file), limits ({timeout: '5s', memory: '64M', ...}), args
  // (more `tidepool mcp` options), env, onApproval, onLog, stderr (a function given what
  // the server writes on standard error).
  constructor(options = {}) {
    this.options = options;
    this.bin = findBinary(options.binary);
    this.servers = new Map(); // extra limit flags (JSON) -> Server
  }

  baseArgs() {
    const o = this.options;
    const args = [];
    if (o.config) args.push('--config', o.config);
    if (o.builtinTools === false) args.push('--no-builtin-tools');
    args.push(...limitFlags(o.limits));
    if (o.args) args.push(...o.args);
    return args;
  }

  server(limits) {
    const extra = limitFlags(limits);
    const key = JSON.stringify(extra);
    let s = this.servers.get(key);
    if (!s || s.exited) {
      if (this.closed) throw new TidepoolError('this Tidepool is closed', 'closed');
      s = new Server(this.bin, [...this.baseArgs(), ...extra], this.options);
      s.onGone = () => { if (this.servers.get(key) === s) this.servers.delete(key); };
      this.servers.set(key, s);
    }
    return s;
  }

  // The pid of the default process (started if needed), for tests and supervision.
  async pid() { const s = this.server(); await s.ready; return s.pid; }

  // A run's own limits go in its _meta["tidepool/limits"] (the server lowers its own for
  // that run); what the server refuses there (a raise above its limits, a run in a
  // session, a limit it cannot take per run) goes to a process started with those limits.
  async run(code, options = {}) {
    const { limits, session } = options;
    const flags = limitFlags(limits);
    if (!flags.length || (session !== undefined && session !== null)) {
      return this.runOn(this.server(flags.length ? limits : undefined), code, options, null);
    }
    const meta = {};
    for (const [k, v] of Object.entries(limits)) {
      if (v !== undefined && v !== null) {
        meta[k.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase()).replace(/-/g, '_')] = v;
      }
    }
    try {
      return await this.runOn(this.server(), code, options, meta);
    } catch (e) {
      if (!(e instanceof TidepoolError && e.code === -32602 &&
            e.message.includes('"tidepool/limits"'))) throw e;
      return this.runOn(this.server(limits), code, options, null);
    }
  }

  async runOn(s, code, options, metaLimits) {
    const { tools, session, signal } = options;
    if (typeof code !== 'string') throw new TypeError('run(code): code must be a string');
    const mode = options.mode === undefined ? 'live' : options.mode;
    if (mode !== 'live' && mode !== 'paused') {
      throw new TypeError(`run(code, { mode }): mode is 'live' or 'paused', not ${JSON.stringify(mode)}`);
    }
    if (signal && signal.aborted) throw abortError(signal);
    const { decls, byName } = prepareTools(tools, mode === 'paused');
    await s.ready;
    if (signal && signal.aborted) throw abortError(signal);
    if (decls.length && !s.callerTools) {
      throw new TidepoolError(`${this.bin} does not offer caller tools (the ` +
        `"${CALLER_CAP}" capability): it is older than this SDK; update tidepool`,
        'caller.unsupported');
    }
    const id = s.nextId++;
    const run = { id, byName, inflight: new Map(), messages: options.messages,
      context: options.context, onApproval: options.onApproval || this.options.onApproval };
    const args = { code };
    if (session !== undefined && session !== null) args.session = String(session);
    const params = { name: 'run_lua', arguments: args };
    if (decls.length || metaLimits) params._meta = {};
    if (decls.length) params._meta[CALLER_CAP] = { version: 1, mode, tools: decls };
    if (metaLimits) params._meta['tidepool/limits'] = metaLimits;
    s.runs.set(id, run);
    let onAbort;
    try {
      const done = s.requestWithId(id, 'tools/call', params, run);
      if (!signal) return envelopeOf(await done);
      const aborted = new Promise((_, reject) => {
        onAbort = () => {
          s.notify('notifications/cancelled', { requestId: id, reason: 'aborted by the caller' });
          const err = abortError(signal);
          for (const ac of run.inflight.values()) ac.abort(err);
          const p = s.settle(id);
          if (p) p.reject(err);
          reject(err);
        };
        signal.addEventListener('abort', onAbort, { once: true });
      });
      aborted.catch(() => {});
      return envelopeOf(await Promise.race([done, aborted]));
    } finally {
      if (onAbort) signal.removeEventListener('abort', onAbort);
      s.runs.delete(id);
    }
  }

  // Resumes a run that came back paused (run(code, { mode: 'paused' })): results answer
  // its pending calls, [{ id, result } | { id, error: { message, code? } }], the binding of
  // each copied from paused.pending; decisions answer pending approvals as resume_run
  // takes them. Returns the run's envelope: its end, or paused again with what is left.
  // With the server's --state (and --secret-file) the run survives a restart of the process.
  async resume(paused, results = [], options = {}) {
    if (!paused || typeof paused !== 'object' || typeof paused.run !== 'string') {
      throw new TypeError('resume(paused, results): paused is the envelope of a paused run ' +
        '(status "paused", with run and pending)');
    }
    if (!Array.isArray(results)) throw new TypeError('resume(paused, results): results is an array');
    const pending = Array.isArray(paused.pending) ? paused.pending : [];
    const answers = results.map((r, i) => {
      if (!r || typeof r !== 'object' || !('id' in r) || (!('result' in r) && !('error' in r))) {
        throw new TypeError(`resume: results[${i}] is { id, result } or { id, error: { message } }`);
      }
      const p = pending.find((q) => q && q.kind === 'call' && q.id === r.id);
      if (!p && !r.binding) {
        const ids = pending.filter((q) => q && q.kind === 'call').map((q) => q.id);
        throw new TidepoolError(`resume: no pending call of run ${paused.run} has id ` +
          `${JSON.stringify(r.id)} (pending: ${ids.join(', ') || 'none'})`, 'caller.not_pending');
      }
      const out = { id: r.id, binding: r.binding || p.binding };
      if ('error' in r) {
        const e = r.error;
        if (e instanceof Error) {
          out.error = { message: e.message };
          if (typeof e.code === 'string') out.error.code = e.code;
        } else out.error = typeof e === 'string' ? { message: e } : e;
      } else out.result = r.result;
      return out;
    });
    const args = { run: paused.run };
    if (answers.length) args.results = answers;
    if (options.decisions) args.decisions = options.decisions;
    const s = this.server();
    await s.ready;
    return envelopeOf(await s.request('tools/call', { name: 'resume_run', arguments: args }));
  }

  // The script tool a model is given, with these tools in its description:
  // { name: 'run_lua', description, inputSchema: {code} } (mode 'auto' fits 2,048 chars).
  describe(tools, mode = 'auto') {
    const { decls } = prepareTools(tools);
    return { name: 'run_lua', description: describeTools(this.bin, decls, {
      config: this.options.config, builtinTools: this.options.builtinTools, describe: mode }),
    inputSchema: CODE_INPUT };
  }

  // Ends every process this object started; runs in flight reject with process.exited.
  async close() {
    this.closed = true;
    const all = [...this.servers.values()];
    this.servers.clear();
    await Promise.all(all.map((s) => s.close()));
  }
}

// ---- the AI SDK ------------------------------------------------------------------------

const DESCRIBE_MAX = 2048;

// run_lua's description with the bound tools, from `tidepool describe --caller-tools -`
// (synchronous: the AI SDK reads a tool's description without awaiting). Where that
// binary cannot, a description made here from the same declarations, fitted to 2,048.
// ai 7 binds the tool callers anew for every generateText: the same tools give the same
// description, so it is kept (the last 64 tool sets) instead of starting a process each time.
const described = new Map();
function describeTools(bin, decls, options = {}) {
  const args = ['describe', '--format', 'json', '--describe', options.describe || 'auto',
    '--caller-tools', '-'];
  if (options.config) args.push('--config', options.config);
  if (options.builtinTools === false) args.push('--no-builtin-tools');
  const input = JSON.stringify({ tools: decls });
  const key = JSON.stringify([bin, args]) + input;
  const known = described.get(key);
  if (known !== undefined) return known;
  let text;
  try {
    const out = execFileSync(bin, args, { input, stdio: ['pipe', 'pipe', 'pipe'],
      timeout: 10000, encoding: 'utf8' });
    const d = JSON.parse(out);
    if (d && typeof d.description === 'string') text = d.description;
  } catch { /* an older binary: the description below */ }
  if (text === undefined) text = localDescription(decls);
  if (described.size >= 64) described.delete(described.keys().next().value);
  described.set(key, text);
  return text;
}

function sig(decl) {
  const props = (decl.inputSchema && decl.inputSchema.properties) || {};
  const req = new Set((decl.inputSchema && decl.inputSchema.required) || []);
  const fields = Object.entries(props).map(([k, v]) => `${k}${req.has(k) ? '' : '?'}: ` +
    `${(v && (Array.isArray(v.type) ? v.type.join('|') : v.type)) || 'any'}`);
  return `tools.${decl.name}{${fields.join(', ')}}`;
}

function localDescription(decls) {
  const head = 'Write one Lua 5.4 script; return the result; print() logs. Arrays start at ' +
    '1; .. joins strings; ~= is not-equal. Tools return directly (no await): local r = ' +
    'tools.x{a = 1}; a failure raises {code, message}: pcall(tools.x, args) where failure ' +
    'is expected. parallel(f, g) runs calls at once. tools.describe(name) shows a tool.\nTools:\n';
  const full = decls.map((d) => `${sig(d)}${d.description ? ' -- ' + d.description.split('\n')[0] : ''}`);
  let text = head + full.join('\n');
  if (text.length <= DESCRIBE_MAX) return text;
  text = head + decls.map(sig).join('\n');
  if (text.length <= DESCRIBE_MAX) return text;
  return (head + decls.map((d) => `tools.${d.name}`).join(', ')).slice(0, DESCRIBE_MAX);
}

function aiSchema(json, validate) {
  return { [SCHEMA_MARK]: true, _type: undefined, jsonSchema: json, validate };
}

const CODE_INPUT = {
  type: 'object',
  properties: { code: { type: 'string',
    description: 'The Lua 5.4 script to run; its return value is the result.' } },
  required: ['code'],
  additionalProperties: false,
};

let shared = null;
function sharedTidepool(options) {
  if (options.tidepool) return options.tidepool;
  if (options.binary || options.config || options.limits || options.args) {
    return new Tidepool(options);
  }
  if (!shared) shared = new Tidepool({});
  return shared;
}

// The code tool over a given tool set, for the AI SDK (ai 5, 6, 7) and any framework that
// takes { description, inputSchema, execute }: the model writes Lua that calls the tools.
// options: tools, tidepool (a Tidepool to share) or binary/config/limits/args, session,
// onApproval, describe ('auto' | 'full' | 'compact').
function createCodeTool(options = {}) {
  const tp = sharedTidepool(options);
  const { decls } = prepareTools(options.tools);
  const description = options.description ||
    describeTools(tp.bin, decls, { config: tp.options.config, builtinTools: tp.options.builtinTools,
      describe: options.describe });
  const tools = options.tools || {};
  return {
    type: 'function',
    description,
    inputSchema: aiSchema(CODE_INPUT, async (v) => (v && typeof v.code === 'string'
      ? { success: true, value: v }
      : { success: false, error: new Error('expected {code: string}') })),
    async execute(input, execOptions = {}) {
      const env = await tp.run(input.code, {
        tools, session: options.session, limits: options.runLimits,
        signal: execOptions.abortSignal || execOptions.signal,
        messages: execOptions.messages, context: execOptions.context,
        onApproval: options.onApproval,
      });
      return modelView(env);
    },
  };
}

// The same for ai 7's tool callers: put it in `tools`, and name it in
// experimental_toolCallers for the tools it may call; generateText binds them to it.
function codeModeTool(options = {}) {
  const tidepool = sharedTidepool(options);
  const base = createCodeTool({ ...options, tidepool, tools: {} });
  return Object.defineProperty(base, 'experimental_toolCaller', {
    value: { type: 'local', bind: (tools) => createCodeTool({ ...options, tidepool, tools }) },
  });
}

module.exports = {
  Tidepool, TidepoolError, createCodeTool, codeModeTool, modelView, findBinary,
  toJsonSchema,
};
