// Types of the tidepool package (docs/sdk-node.md).

/** Limits, as `tidepool mcp`'s options take them: `{ timeout: '5s', memory: '64M', toolCalls: 100 }`. */
export interface Limits {
  memory?: string | number;
  instructions?: string | number;
  cpu?: string | number;
  timeout?: string | number;
  maxOutput?: string | number;
  maxSource?: string | number;
  maxResult?: string | number;
  toolCalls?: string | number;
  toolCallsPerTool?: string | number;
  toolInFlight?: string | number;
  toolBytes?: string | number;
  toolTimeout?: string | number;
  fsQuota?: string | number;
  [snakeCase: string]: string | number | undefined;
}

export type JSONValue = null | boolean | number | string | JSONValue[] | { [k: string]: JSONValue };
export type JSONSchema = { [k: string]: unknown };

/** What a tool's execute gets besides its arguments. */
export interface ToolCallOptions {
  /** Aborted when the run ends, is aborted, or tidepool gives up on the call (its timeout). */
  signal: AbortSignal;
  /** The same signal, under the AI SDK's name. */
  abortSignal: AbortSignal;
  toolCallId: string;
  /** The messages of the code tool's own call, when it is an AI SDK tool (else []). */
  messages: any[];
  /** The code tool's own context (ai 7's tool context), passed on; undefined without one. */
  context: any;
  experimental_context?: any;
  tidepool: { run: string; id: number; tool: string };
}

/** A caller tool: an AI SDK `tool(...)` fits as it is. */
export interface CallerTool<ARGS = any, RESULT = any> {
  /** A string, or (ai 7) a function of the context, called once with { context: undefined }. */
  description?: string | ((options: any) => string);
  /** JSON Schema, a zod schema (3 with zod-to-json-schema, or 4), or the AI SDK's jsonSchema(). */
  inputSchema?: unknown;
  outputSchema?: unknown;
  /** The call's own timeout, in milliseconds. */
  timeoutMs?: number;
  /** true, or a function of the arguments: the call is asked of onApproval (denied without one). */
  needsApproval?: boolean | ((args: ARGS, options: any) => boolean | PromiseLike<boolean>);
  /** Required at run time (optional here only because the AI SDK's Tool type has it so). */
  execute?: (args: ARGS, options: ToolCallOptions) => RESULT | PromiseLike<RESULT> | AsyncIterable<RESULT>;
}

export type ToolSet = Record<string, CallerTool> | Map<string, CallerTool>;

export interface ApprovalRequest {
  /** A caller tool whose needsApproval holds: its name and arguments. */
  tool?: string;
  args?: unknown;
  reason?: string;
  toolCallId?: string;
  /** A call the server's policy holds ("effect": "ask"): the elicitation's message and params. */
  message?: string;
  request?: unknown;
}
export type OnApproval = (request: ApprovalRequest) => boolean | Promise<boolean>;

export interface TidepoolOptions {
  /** The tidepool binary; default $TIDEPOOL_BIN, else `tidepool` on PATH. */
  binary?: string;
  /** A tidepool config file (limits, tools, MCP servers, policy). */
  config?: string;
  limits?: Limits;
  /** More `tidepool mcp` options. */
  args?: string[];
  /** false: leave out the built-in tools (time.*, kv.*, fs.*). */
  builtinTools?: boolean;
  env?: NodeJS.ProcessEnv;
  onApproval?: OnApproval;
  onLog?: (params: unknown) => void;
  /** Given what the server writes on standard error. */
  stderr?: (text: string) => void;
}

export interface RunOptions {
  tools?: ToolSet;
  /** A session id: runs with the same id share the sandbox's globals. */
  session?: string;
  /** This run's limits: lower than the server's they travel with the run; higher, or in a session, a process is started with them. */
  limits?: Limits;
  signal?: AbortSignal;
  onApproval?: OnApproval;
  messages?: unknown[];
  context?: unknown;
  /** 'live' (default): each call of a tool runs its execute while the run waits. 'paused': the run returns { status: 'paused', run, pending } instead (execute not needed); answer with resume(). */
  mode?: 'live' | 'paused';
}

/** An answer to a pending call of a paused run. */
export type CallAnswer =
  | { id: number; result: JSONValue; binding?: string }
  | { id: number; error: { message: string; code?: string } | Error | string; binding?: string };

export interface ScriptError {
  code: string;
  message: string;
  line?: number;
  hint?: string;
  [k: string]: unknown;
}

export interface CallRecord {
  tool: string;
  ok: boolean;
  ms?: number;
  error?: string;
  message?: string;
  line?: number;
  [k: string]: unknown;
}

export interface Envelope {
  ok: boolean;
  result?: JSONValue;
  error?: ScriptError;
  logs: string[];
  calls: CallRecord[];
  stats: { instructions?: number; cpu_ms?: number; wall_ms?: number; memory_peak?: number; [k: string]: unknown };
  status?: 'paused';
  run?: string;
  pending?: unknown[];
  session?: { id: string; state: string; [k: string]: unknown };
}

export class TidepoolError extends Error {
  code: string | number;
  data?: unknown;
  /** process.exited of a live run the server keeps in its state store (--state): the run,
   *  paused at the calls that were in flight, for resume(error.paused, results). */
  paused?: Envelope;
}

export class Tidepool {
  constructor(options?: TidepoolOptions);
  readonly bin: string;
  run(code: string, options?: RunOptions): Promise<Envelope>;
  /** Resumes a paused run with answers to its pending calls (bindings copied from paused.pending); the envelope of its end, or paused again. */
  resume(paused: Envelope, results?: CallAnswer[], options?: { decisions?: unknown[] }): Promise<Envelope>;
  pid(): Promise<number>;
  /** The script tool a model is given, these tools in its description ('auto' fits 2,048 characters). */
  describe(tools?: ToolSet, mode?: 'auto' | 'full' | 'compact'): { name: 'run_lua'; description: string; inputSchema: JSONSchema };
  close(): Promise<void>;
}

/** What a model reads of a run (as `tidepool mcp` gives it). */
export function modelView(envelope: Envelope): Record<string, unknown>;
export function findBinary(binary?: string, env?: NodeJS.ProcessEnv): string;
export function toJsonSchema(schema: unknown, what?: string): JSONSchema | undefined;

export interface CodeToolOptions extends Omit<TidepoolOptions, 'limits'> {
  /** A Tidepool to share; else one is made (shared among code tools without options). */
  tidepool?: Tidepool;
  limits?: Limits;
  /** Limits of each run of this tool. */
  runLimits?: Limits;
  session?: string;
  describe?: 'auto' | 'full' | 'compact';
  /** Replaces the description tidepool gives. */
  description?: string;
}

/** An AI SDK tool: { description, inputSchema: {code}, execute }. */
export interface CodeTool {
  type: 'function';
  description: string;
  /** The AI SDK's jsonSchema() of {code: string}. */
  inputSchema: any;
  execute(input: { code: string }, options?: any): Promise<Record<string, any>>;
}

export function createCodeTool(options: CodeToolOptions & { tools: ToolSet }): CodeTool;
/** For ai 7's experimental_toolCallers: the tools named there are bound to it. */
export function codeModeTool(options?: CodeToolOptions): CodeTool & {
  readonly experimental_toolCaller: { type: 'local'; bind: (tools: Record<string, unknown>) => CodeTool };
};

declare const _default: {
  Tidepool: typeof Tidepool;
  TidepoolError: typeof TidepoolError;
  createCodeTool: typeof createCodeTool;
  codeModeTool: typeof codeModeTool;
  modelView: typeof modelView;
  findBinary: typeof findBinary;
  toJsonSchema: typeof toJsonSchema;
};
export default _default;
