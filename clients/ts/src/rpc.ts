/**
 * Unary calls over @grpc/grpc-js for the service descriptors that protoc-gen-es generates
 * (src/gen): the request and answer are (de)serialized with @bufbuild/protobuf; every failure is a
 * typed CallgateError (errors.ts).
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import type { DescMessage, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import type { GenService, GenServiceMethods } from "@bufbuild/protobuf/codegenv2";
import * as grpc from "@grpc/grpc-js";
import { fromServiceError, MalformedResponseError } from "./errors.js";

/** Where one role of the sidecar listens: "unix:/path.sock", "unix:relative.sock" or "host:port". */
export type Target = string;

export interface CallOptions {
  /** Per-call deadline in milliseconds (default: the channel's). */
  timeoutMs?: number;
  /** W3C traceparent to propagate (else none is sent). */
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
    const md = new grpc.Metadata();
    if (opts.traceparent) md.set("traceparent", opts.traceparent);
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

  close(): void {
    this.client.close();
  }
}
