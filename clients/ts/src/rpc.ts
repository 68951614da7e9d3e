/**
 * Unary calls over @grpc/grpc-js for the service descriptors that protoc-gen-es generates
 * (src/gen): the request and answer are (de)serialized with @bufbuild/protobuf; every failure is a
 * typed CallgateError (errors.ts).
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import type { DescMessage, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import type { GenService, GenServiceMethods } from "@bufbuild/protobuf/codegenv2";
import * as grpc from "@grpc/grpc-js";
import { createRequire } from "node:module";
import { fromServiceError, MalformedResponseError } from "./errors.js";

/** The parts of `@opentelemetry/api` this client reads (an optional peer dependency). */
interface OtelApi {
  context: { active(): unknown };
  trace: {
    getSpanContext(ctx: unknown): { traceId: string; spanId: string; traceFlags: number } | undefined;
    isSpanContextValid?(sc: { traceId: string; spanId: string; traceFlags: number }): boolean;
  };
}

let otel: OtelApi | null | undefined;
function otelApi(): OtelApi | null {
  if (otel === undefined) {
    try {
      otel = createRequire(import.meta.url)("@opentelemetry/api") as OtelApi;
    } catch {
      otel = null; // not installed: no traceparent unless the caller passes one
    }
  }
  return otel;
}

/**
 * The `traceparent` to send: the explicit one, else the active span of the caller's
 * OpenTelemetry context when `@opentelemetry/api` is installed (W3C trace context, version 00);
 * else none (the sidecar starts a trace).
 */
export function traceparentFor(explicit?: string): string | undefined {
  if (explicit) return explicit;
  const api = otelApi();
  if (api === null) return undefined;
  const sc = api.trace.getSpanContext(api.context.active());
  if (sc === undefined || (api.trace.isSpanContextValid !== undefined && !api.trace.isSpanContextValid(sc))) {
    return undefined;
  }
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

/** Where one role of the sidecar listens: "unix:/path.sock", "unix:relative.sock" or "host:port". */
export type Target = string;

export interface CallOptions {
  /** Per-call deadline in milliseconds (default: the channel's). */
  timeoutMs?: number;
  /** W3C traceparent to propagate; wins over the OpenTelemetry context (see traceparentFor). */
  traceparent?: string;
}

type MethodOf<S extends GenServiceMethods> = S[keyof S] & {
  input: DescMessage;
  output: DescMessage;
  name: string;
};

/** A typed unary client of one service on one channel. */
export class UnaryClient<S extends GenServiceMethods> {
  private readonly client: grpc.Client;

  constructor(
    private readonly service: GenService<S>,
    target: Target,
    private readonly defaultTimeoutMs: number,
    credentials: grpc.ChannelCredentials = grpc.credentials.createInsecure(),
  ) {
    this.client = new grpc.Client(target, credentials, {
      // Fail fast when the sidecar is down: the call fails with UNAVAILABLE, nothing is queued.
      "grpc.enable_retries": 0,
    });
  }

  call<K extends keyof S & string>(
    method: K,
    request: MessageInitShape<S[K]["input"]>,
    opts: CallOptions = {},
  ): Promise<MessageShape<S[K]["output"]>> {
    const m = this.service.method[method] as unknown as MethodOf<S>;
    const input = m.input;
    const output = m.output;
    const path = `/${this.service.typeName}/${m.name}`;
    const md = metadataFor(opts);
    const deadline = new Date(Date.now() + (opts.timeoutMs ?? this.defaultTimeoutMs));
    const msg = create(input, request as MessageInitShape<DescMessage>);
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(
        path,
        (value: typeof msg) => Buffer.from(toBinary(input, value)),
        (bytes: Buffer) => {
          try {
            return fromBinary(output, bytes);
          } catch (exc) {
            throw new MalformedResponseError(`undecodable ${output.typeName}: ${(exc as Error).message}`);
          }
        },
        msg,
        md,
        { deadline },
        (err, value) => {
          if (err) reject(fromServiceError(err));
          else if (value === undefined) reject(new MalformedResponseError(`empty ${output.typeName}`));
          else resolve(value as MessageShape<S[K]["output"]>);
        },
      );
    });
  }

  /**
   * A server-streaming call (e.g. WatchInvocation): the answers as an async iterable; a failure
   * (including the deadline) is thrown as a typed CallgateError; leaving the loop early cancels
   * the call.
   */
  async *stream<K extends keyof S & string>(
    method: K,
    request: MessageInitShape<S[K]["input"]>,
    opts: CallOptions = {},
  ): AsyncGenerator<MessageShape<S[K]["output"]>, void, undefined> {
    const m = this.service.method[method] as unknown as MethodOf<S>;
    const input = m.input;
    const output = m.output;
    const path = `/${this.service.typeName}/${m.name}`;
    const deadline = new Date(Date.now() + (opts.timeoutMs ?? this.defaultTimeoutMs));
    const msg = create(input, request as MessageInitShape<DescMessage>);
    const call = this.client.makeServerStreamRequest(
      path,
      (value: typeof msg) => Buffer.from(toBinary(input, value)),
      (bytes: Buffer) => {
        try {
          return fromBinary(output, bytes);
        } catch (exc) {
          throw new MalformedResponseError(`undecodable ${output.typeName}: ${(exc as Error).message}`);
        }
      },
      msg,
      metadataFor(opts),
      { deadline },
    );
    try {
      for await (const value of call) yield value as MessageShape<S[K]["output"]>;
    } catch (err) {
      throw fromServiceError(err);
    } finally {
      call.cancel();
    }
  }

  close(): void {
    this.client.close();
  }
}

function metadataFor(opts: CallOptions): grpc.Metadata {
  const md = new grpc.Metadata();
  const tp = traceparentFor(opts.traceparent);
  if (tp) md.set("traceparent", tp);
  return md;
}
