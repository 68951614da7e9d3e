/**
 * The lifecycle helper: a Session (OpenSession; the subject comes from the runtime's own auth,
 * never from the model), the tools for a model call, propose() returning a typed Outcome with the
 * model-facing message, waiting for a confirmation, and the Executor's
 * BeginAttempt -> function -> ReportOutcome -> EncodeResult path. See docs/CLIENTS-TS.md.
 */
import { createHash, randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  Confirmations,
  Effect,
  Executor as ExecutorService,
  FailureClass,
  Gate,
  Outcome as WireOutcome,
  RejectionSchema,
  State,
} from "./gen/callgate/v1/callgate_pb.js";
import type {
  BudgetsSchema,
  Decision,
  Invocation,
  ProposeResponse,
  Rejection,
  RetryAdvice,
} from "./gen/callgate/v1/callgate_pb.js";
import { CallgateError, ClientCode, MalformedResponseError } from "./errors.js";
import { UnaryClient } from "./rpc.js";
import type { CallOptions, Target } from "./rpc.js";
import { wireNames } from "./names.js";
import { Dialect, dropStrictNulls, gatedTool, stripStrictNullsText } from "./tools.js";
import type { GatedTool } from "./tools.js";

export { Effect, FailureClass, State };

const dec = new TextDecoder("utf-8", { fatal: true });
const enc = new TextEncoder();

export interface ConnectOptions {
  /** The agent listener (Gate). */
  agent: Target;
  /** The executor listener (only for Executor). */
  executor?: Target;
  /** The confirmer listener (only for the confirmer UI side; tests and examples use it). */
  confirmer?: Target;
  /** Default deadline of each call (default 10 s). */
  timeoutMs?: number;
}

/** One connection to the sidecar's listeners. */
export class Callgate {
  readonly gate: UnaryClient<(typeof Gate)["method"]>;
  readonly executorRpc: UnaryClient<(typeof ExecutorService)["method"]> | undefined;
  readonly confirmations: UnaryClient<(typeof Confirmations)["method"]> | undefined;

  constructor(opts: ConnectOptions) {
    const t = opts.timeoutMs ?? 10_000;
    this.gate = new UnaryClient(Gate, opts.agent, t);
    this.executorRpc = opts.executor ? new UnaryClient(ExecutorService, opts.executor, t) : undefined;
    this.confirmations = opts.confirmer ? new UnaryClient(Confirmations, opts.confirmer, t) : undefined;
  }

  /** Opens a session for `subject` (from the runtime's authentication, never from the model). */
  async openSession(opts: {
    tenant: string;
    subject: string;
    timezone?: string;
    locale?: string;
    sessionId?: string;
    toolAllowlist?: string[];
    budgets?: MessageInitShape<typeof BudgetsSchema>;
    call?: CallOptions;
  }): Promise<Session> {
    const r = await this.gate.call(
      "openSession",
      {
        subject: { tenant: opts.tenant, id: opts.subject },
        timezone: opts.timezone ?? "UTC",
        locale: opts.locale ?? "",
        sessionId: opts.sessionId ?? "",
        toolAllowlist: opts.toolAllowlist ?? [],
        ...(opts.budgets ? { budgets: opts.budgets } : {}),
      },
      opts.call,
    );
    if (!r.sessionId) throw new MalformedResponseError("OpenSession answered without a session id");
    return new Session(this, r.sessionId);
  }

  executor(executorId: string): Executor {
    if (!this.executorRpc) throw new CallgateError(ClientCode.Transport, "no executor target configured");
    return new Executor(this.executorRpc, executorId);
  }

  close(): void {
    this.gate.close();
    this.executorRpc?.close();
    this.confirmations?.close();
  }
}

/** A tool call as a model produced it (provider-neutral). */
export interface ToolCall {
  /** The provider's tool call id (becomes the proposal id). */
  id: string;
  /** The legal name the model used. */
  name: string;
  /** The argument text exactly as generated (a string), or an already parsed object. */
  arguments: string | Record<string, unknown>;
}

/** The tools shown to one model call. */
export class ToolSet {
  private readonly byName: ReadonlyMap<string, GatedTool>;
  constructor(
    readonly modelCallId: string,
    readonly dialect: Dialect,
    readonly tools: readonly GatedTool[],
    readonly toolSetDigest: string,
  ) {
    this.byName = new Map(tools.map((t) => [t.name, t]));
  }
  /** The provider-format definitions to pass to the model. */
  definitions(): Record<string, unknown>[] {
    return this.tools.map((t) => t.definition);
  }
  /** The tool behind a legal name (the reverse mapping), or undefined. */
  resolve(legal: string): GatedTool | undefined {
    return this.byName.get(legal);
  }
}

export enum OutcomeKind {
  /** Authorized: run it through the Executor (or, for a replay, use `replayedMessage`). */
  Allowed = "allowed",
  Denied = "denied",
  /** Parked until a confirmer approves the exact digest: waitForConfirmation(). */
  NeedsConfirmation = "needs_confirmation",
  /** Refused before authorization (parse, schema, normalization, unknown tool). */
  Rejected = "rejected",
}

interface OutcomeBase {
  readonly toolCallId: string;
  readonly toolName: string;
  /** The JSON text to send back to the model as the tool message. */
  readonly message: string;
  /** The raw answer, for logging ids (never log argument values). */
  readonly response: ProposeResponse | undefined;
}
export interface Allowed extends OutcomeBase {
  readonly kind: OutcomeKind.Allowed;
  readonly invocationId: string;
  readonly digest: string;
  /** The tool message of an earlier identical call (idempotent replay): nothing ran again. */
  readonly replayedMessage: string | undefined;
}
export interface Denied extends OutcomeBase {
  readonly kind: OutcomeKind.Denied;
  readonly invocationId: string;
  readonly decision: Decision;
}
export interface NeedsConfirmation extends OutcomeBase {
  readonly kind: OutcomeKind.NeedsConfirmation;
  readonly invocationId: string;
  readonly digest: string;
  readonly expiresAt: string;
  /**
   * The normalized arguments as a person may be shown them (JSON, UTF-8): each secret masked by
   * the sidecar (`⟦masked <name>⟧`; docs/CONSOLE.md "Secrets are masked"). Show an approver these;
   * the digest and what runs are the exact arguments'.
   */
  readonly maskedArguments: Uint8Array;
}
export interface Rejected extends OutcomeBase {
  readonly kind: OutcomeKind.Rejected;
  readonly invocationId: string;
  readonly rejection: Rejection;
}
export type ProposeOutcome = Allowed | Denied | NeedsConfirmation | Rejected;

/**
 * A tool message in the sidecar's own shape (role "tool", the model's tool call id, content).
 * The Python client writes the same bytes; tests/data/client-messages.json pins both.
 */
export function toolMessage(toolCallId: string, content: Record<string, unknown>): string {
  return JSON.stringify({ role: "tool", tool_call_id: toolCallId, content });
}

/** The model-facing message of a deny. */
export function deniedMessage(toolCallId: string, reasons: readonly string[], errorCode = ""): string {
  return toolMessage(toolCallId, {
    status: "denied",
    message: "The policy does not allow this call; do not retry it unchanged.",
    reasons: [...reasons],
    ...(errorCode ? { error_code: errorCode } : {}),
  });
}

/** The model-facing message of a call parked for the user's confirmation. */
export function confirmMessage(toolCallId: string, expiresAt: string): string {
  return toolMessage(toolCallId, {
    status: "needs_confirmation",
    message: "This call waits for the user's confirmation; it has not run.",
    expires_at: expiresAt,
  });
}

/** The model-facing message of a rejected proposal (violations: pointers and messages, no values). */
export function rejectedMessage(
  toolCallId: string,
  code: string,
  message: string,
  violations: readonly { pointer: string; message: string }[],
): string {
  return toolMessage(toolCallId, {
    status: "rejected",
    code,
    message,
    violations: violations.map((v) => ({ pointer: v.pointer, message: v.message })),
  });
}

/**
 * The code of a call naming a tool the model was not shown: the sidecar's own code for a
 * `name@version` outside the shown set (docs/ERRORS.md), and the MCP gateway's.
 */
export const NOT_LISTED = "unknown_tool_version";
/** At most this many names are offered to the model in a not-listed answer. */
export const AVAILABLE_MAX = 32;
/** The model's unknown name is echoed back cut to this many characters (code points). */
export const NAME_MAX = 100;

/**
 * What the model reads when it named a tool it was not shown: the name, the names it may use
 * (sorted, at most AVAILABLE_MAX) and that nothing ran. The Python client writes the same text
 * (tests/data/client-messages.json).
 */
export function notListedText(name: string, available: readonly string[]): string {
  const shown = [...new Set(available)].sort();
  const head = shown.slice(0, AVAILABLE_MAX).join(", ") || "none";
  const more = shown.length > AVAILABLE_MAX ? ` and ${shown.length - AVAILABLE_MAX} more` : "";
  const points = Array.from(name);
  const cut = points.slice(0, NAME_MAX).join("") + (points.length > NAME_MAX ? "..." : "");
  return `No tool named "${cut}" is listed for this call; available: ${head}${more}. Nothing ran.`;
}

/**
 * The idempotency key of a proposal: a hash of the session, the tool, the model call and the
 * provider's tool call id. Deterministic, so a runtime that restarts and proposes the same tool
 * call again in the same session gets the earlier invocation back (spec 6.8) instead of a second
 * side effect.
 */
export function idempotencyKey(p: {
  sessionId: string;
  modelCallId: string;
  toolCallId: string;
  toolName: string;
  toolVersion: string;
}): string {
  const h = createHash("sha256")
    .update(JSON.stringify(["callgate-idem-v1", p.sessionId, p.modelCallId, p.toolCallId, p.toolName, p.toolVersion]))
    .digest("hex");
  return `cgk1-${h.slice(0, 48)}`;
}

export class Session {
  constructor(
    readonly client: Callgate,
    readonly sessionId: string,
  ) {}

  /** ListTools for one model call, in a provider's dialect. */
  async tools(
    dialect: Dialect,
    opts: { modelCallId?: string; fedInvocationIds?: string[]; call?: CallOptions } = {},
  ): Promise<ToolSet> {
    const modelCallId = opts.modelCallId ?? randomUUID();
    const r = await this.client.gate.call(
      "listTools",
      { sessionId: this.sessionId, modelCallId, fedInvocationIds: opts.fedInvocationIds ?? [] },
      opts.call,
    );
    const names = wireNames(r.tools);
    const tools = r.tools.map((spec) => gatedTool(spec, dialect, names.get(`${spec.name}@${spec.version}`)));
    return new ToolSet(modelCallId, dialect, tools, r.toolSetDigest);
  }

  /** Proposes one tool call of the model; never runs anything. */
  async propose(tools: ToolSet, call: ToolCall, opts: { call?: CallOptions } = {}): Promise<ProposeOutcome> {
    const tool = tools.resolve(call.name);
    if (tool === undefined) {
      // Not a tool the model was shown (a hallucinated or stale name): answered locally with the
      // sidecar's own code for a tool outside the shown set; nothing is proposed or run.
      const text = notListedText(call.name, tools.tools.map((t) => t.name));
      return {
        kind: OutcomeKind.Rejected,
        toolCallId: call.id,
        toolName: call.name,
        invocationId: "",
        rejection: create(RejectionSchema, { code: NOT_LISTED, message: text }),
        message: rejectedMessage(call.id, NOT_LISTED, text, []),
        response: undefined,
      };
    }
    let bytes: Uint8Array;
    if (typeof call.arguments === "string") {
      // the exact bytes unless a strict-mode null is dropped (tools.ts stripStrictNullsText)
      bytes = enc.encode(stripStrictNullsText(call.arguments, tool.nullableOptional));
    } else {
      bytes = enc.encode(JSON.stringify(dropStrictNulls(call.arguments, tool.nullableOptional)));
    }
    const r = await this.client.gate.call(
      "propose",
      {
        sessionId: this.sessionId,
        modelCallId: tools.modelCallId,
        proposalId: call.id,
        toolName: tool.toolName,
        toolVersion: tool.toolVersion,
        arguments: bytes,
        idempotencyKey: idempotencyKey({
          sessionId: this.sessionId,
          modelCallId: tools.modelCallId,
          toolCallId: call.id,
          toolName: tool.toolName,
          toolVersion: tool.toolVersion,
        }),
      },
      opts.call,
    );
    return classify(call, r);
  }

  /**
   * Waits until a parked invocation is confirmed (returns true) or ends otherwise (false: expired,
   * refused, cancelled), on the WatchInvocation server stream (no polling): the invocation as it
   * is, then one answer per change. Past `timeoutMs` it throws ClientCode.ConfirmationTimeout.
   * `cancelOnClose`: if the wait is abandoned before `timeoutMs` (the process exits, the call is
   * cancelled), the sidecar cancels the still parked invocation (it leaves the console).
   */
  async waitForConfirmation(
    invocationId: string,
    opts: { timeoutMs?: number; cancelOnClose?: boolean; call?: CallOptions } = {},
  ): Promise<boolean> {
    const timeoutMs = opts.timeoutMs ?? 300_000;
    try {
      for await (const change of this.client.gate.stream(
        "watchInvocation",
        { invocationId, sessionId: this.sessionId, cancelOnClose: opts.cancelOnClose ?? false },
        { ...opts.call, timeoutMs },
      )) {
        const st = change.invocation?.state;
        if (st === undefined) throw new MalformedResponseError("WatchInvocation answered without an invocation");
        if (st !== State.AUTHORIZED) {
          return st === State.PREPARED || st === State.EXECUTING || st === State.COMMITTED || st === State.OBSERVED;
        }
        if (change.terminal) return false;
      }
    } catch (exc) {
      if (exc instanceof CallgateError && exc.code === ClientCode.DeadlineExceeded) {
        throw new CallgateError(ClientCode.ConfirmationTimeout, `invocation ${invocationId} is still waiting for confirmation`);
      }
      throw exc;
    }
    throw new CallgateError(ClientCode.ConfirmationTimeout, `the watch of ${invocationId} ended before a decision`);
  }

  /**
   * The invocation this session's proposal of tool call `toolCallId` (of `tools`' model call)
   * made, found by the tool and its idempotency key (FindInvocation), or undefined when no
   * proposal of this session used that key: for a process that holds a tool call id but not the
   * invocation id (a run resumed elsewhere).
   */
  async find(
    tools: ToolSet,
    toolCallId: string,
    name: string,
    opts: { call?: CallOptions } = {},
  ): Promise<Invocation | undefined> {
    const tool = tools.resolve(name);
    if (tool === undefined) throw new CallgateError(ClientCode.UnknownTool, `no tool named ${JSON.stringify(name)}`);
    const key = idempotencyKey({
      sessionId: this.sessionId,
      modelCallId: tools.modelCallId,
      toolCallId,
      toolName: tool.toolName,
      toolVersion: tool.toolVersion,
    });
    try {
      const r = await this.client.gate.call(
        "findInvocation",
        { sessionId: this.sessionId, toolName: tool.toolName, toolVersion: tool.toolVersion, idempotencyKey: key },
        opts.call,
      );
      return r.invocation;
    } catch (exc) {
      if (exc instanceof CallgateError && exc.code === "invocation_not_found") return undefined;
      throw exc;
    }
  }

  /** This session's invocations waiting for a confirmation now, oldest first (ListParked). */
  async listParked(opts: { call?: CallOptions } = {}): Promise<Invocation[]> {
    const r = await this.client.gate.call("listParked", { sessionId: this.sessionId }, opts.call);
    return r.invocations;
  }

  /** The tool message of an observed invocation (6.10). */
  async result(invocationId: string, opts: { call?: CallOptions } = {}): Promise<string> {
    const r = await this.client.gate.call("getResult", { invocationId, sessionId: this.sessionId }, opts.call);
    return decodeText(r.message, "GetResult message");
  }
}

function decodeText(b: Uint8Array, what: string): string {
  try {
    return dec.decode(b);
  } catch {
    throw new MalformedResponseError(`${what} is not UTF-8`);
  }
}

function classify(call: ToolCall, r: ProposeResponse): ProposeOutcome {
  const base = { toolCallId: call.id, toolName: call.name, response: r };
  if (!r.invocationId) throw new MalformedResponseError("Propose answered without an invocation id");
  if (r.rejection !== undefined) {
    const rej = r.rejection;
    return {
      ...base,
      kind: OutcomeKind.Rejected,
      invocationId: r.invocationId,
      rejection: rej,
      message: rejectedMessage(call.id, rej.code, rej.message, rej.violations),
    };
  }
  const d = r.decision;
  if (d === undefined) throw new MalformedResponseError("Propose answered neither a rejection nor a decision");
  switch (d.effect) {
    case Effect.ALLOW:
      return {
        ...base,
        kind: OutcomeKind.Allowed,
        invocationId: r.invocationId,
        digest: r.digest,
        replayedMessage: r.idempotentReplay && r.replayedMessage.length > 0 ? decodeText(r.replayedMessage, "replayed message") : undefined,
        message: r.idempotentReplay && r.replayedMessage.length > 0 ? decodeText(r.replayedMessage, "replayed message") : "",
      };
    case Effect.DENY:
      return {
        ...base,
        kind: OutcomeKind.Denied,
        invocationId: r.invocationId,
        decision: d,
        message: deniedMessage(call.id, d.reasons.map((x) => x.code), d.errorCode),
      };
    case Effect.CONFIRM:
      return {
        ...base,
        kind: OutcomeKind.NeedsConfirmation,
        invocationId: r.invocationId,
        digest: r.digest,
        expiresAt: r.confirmationExpiresAt,
        maskedArguments: r.maskedArguments,
        message: confirmMessage(call.id, r.confirmationExpiresAt),
      };
    default:
      // Fail closed: an unset or unknown effect is never an allow.
      throw new MalformedResponseError(`Propose answered an unknown effect ${String(d.effect)}`);
  }
}

/** What the user's function reports. */
export interface ToolSuccess {
  /** The tool's result (JSON-serializable), encoded for the model by the sidecar. */
  value: unknown;
  /** The external system's id of the side effect (for write tools). */
  externalResourceId?: string;
  commitTime?: string;
  costMicros?: bigint;
}

/** Thrown by the user's function to report a classified failure (the retry matrix of 6.9). */
export class ToolFailure extends Error {
  override readonly name = "ToolFailure";
  constructor(
    readonly failureClass: FailureClass,
    message: string,
    /** Whether the side effect may have happened (TIMEOUT implies it may). */
    readonly outcome: WireOutcome = failureClass === FailureClass.TIMEOUT
      ? WireOutcome.UNKNOWN_COMMIT
      : WireOutcome.FAILED_BEFORE_COMMIT,
    readonly httpStatus = 0,
  ) {
    super(message);
  }
}

/** What the executor's function receives. */
export interface AttemptContext {
  readonly invocationId: string;
  readonly attemptNumber: number;
  /** The scoped credential (a JWT for this invocation only). */
  readonly credential: string;
  /** The normalized arguments: exactly what may run. */
  readonly arguments: unknown;
  readonly idempotencyKey: string;
  readonly deadline: string;
  readonly toolName: string;
  readonly toolVersion: string;
  /** Redeems a secret with this attempt's credential. */
  redeemSecret(name: string): Promise<Uint8Array>;
}

export interface ExecutionResult {
  /** The tool message to send to the model ("" when withheld). */
  readonly message: string;
  readonly state: State;
  readonly attempts: number;
  readonly withheld: boolean;
  readonly truncated: boolean;
}

/** Runs allowed invocations: BeginAttempt -> fn -> ReportOutcome (retry advice) -> EncodeResult. */
export class Executor {
  constructor(
    private readonly rpc: UnaryClient<(typeof ExecutorService)["method"]>,
    readonly executorId: string,
  ) {}

  async run(
    invocationId: string,
    fn: (ctx: AttemptContext) => Promise<ToolSuccess>,
    opts: { call?: CallOptions; maxAttempts?: number } = {},
  ): Promise<ExecutionResult> {
    let attempts = 0;
    for (;;) {
      const a = await this.rpc.call("beginAttempt", { invocationId, executorId: this.executorId }, opts.call);
      if (!a.attemptId || !a.credential) throw new MalformedResponseError("BeginAttempt answered without an attempt or credential");
      attempts += 1;
      let args: unknown;
      try {
        args = JSON.parse(decodeText(a.normalizedArguments, "normalized arguments"));
      } catch (exc) {
        throw exc instanceof CallgateError ? exc : new MalformedResponseError("normalized arguments are not JSON");
      }
      const rpc = this.rpc;
      const ctx: AttemptContext = {
        invocationId,
        attemptNumber: a.attemptNumber,
        credential: a.credential,
        arguments: args,
        idempotencyKey: a.idempotencyKey,
        deadline: a.deadline,
        toolName: a.toolName,
        toolVersion: a.toolVersion,
        redeemSecret: async (name) => (await rpc.call("redeemSecret", { credential: a.credential, secretName: name }, opts.call)).value,
      };
      const deadlineMs = a.deadline ? Date.parse(a.deadline) - Date.now() : Number.NaN;
      let ok: ToolSuccess | undefined;
      let failure: ToolFailure;
      try {
        ok = await withDeadline(fn(ctx), deadlineMs);
        failure = new ToolFailure(FailureClass.FAILURE_CLASS_UNSPECIFIED, "");
      } catch (exc) {
        // An unclassified exception may have happened after the side effect: unknown commit.
        failure = exc instanceof ToolFailure ? exc : new ToolFailure(FailureClass.TIMEOUT, "tool raised an unclassified error");
      }
      if (ok !== undefined) {
        await this.rpc.call(
          "reportOutcome",
          {
            attemptId: a.attemptId,
            outcome: WireOutcome.COMMITTED,
            externalResourceId: ok.externalResourceId ?? "",
            commitTime: ok.commitTime ?? "",
            costMicros: ok.costMicros ?? 0n,
          },
          opts.call,
        );
        return this.encode(invocationId, "ok", ok.value, attempts, opts.call);
      }
      const rep = await this.rpc.call(
        "reportOutcome",
        {
          attemptId: a.attemptId,
          outcome: failure.outcome,
          failureClass: failure.failureClass,
          httpStatus: failure.httpStatus,
          message: failure.message.slice(0, 1024),
        },
        opts.call,
      );
      const advice: RetryAdvice | undefined = rep.retry;
      if (advice?.retry && attempts < (opts.maxAttempts ?? Number.POSITIVE_INFINITY)) {
        await new Promise((res) => setTimeout(res, advice.backoffMs));
        continue;
      }
      const retryable = advice?.retry ?? false;
      return this.encode(invocationId, "error", { code: "tool_failed", message: failure.message, retryable }, attempts, opts.call);
    }
  }

  private async encode(
    invocationId: string,
    status: "ok" | "error",
    value: unknown,
    attempts: number,
    call: CallOptions | undefined,
  ): Promise<ExecutionResult> {
    const r = await this.rpc.call("encodeResult", { invocationId, status, value: enc.encode(JSON.stringify(value ?? null)) }, call);
    return {
      message: r.withheld ? "" : decodeText(r.message, "EncodeResult message"),
      state: r.state,
      attempts,
      withheld: r.withheld,
      truncated: r.truncated,
    };
  }
}

function withDeadline<T>(p: Promise<T>, ms: number): Promise<T> {
  if (!Number.isFinite(ms)) return p;
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new ToolFailure(FailureClass.TIMEOUT, "the tool did not finish before the invocation's deadline")), Math.max(0, ms));
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}
