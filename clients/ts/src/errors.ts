/**
 * Typed errors. A failed *call* to the sidecar is a gRPC status whose `grpc-status-details-bin`
 * trailer carries a google.rpc.Status with a google.rpc.ErrorInfo: its `reason` is the stable
 * callgate error code (docs/ERRORS.md). Every failure reaches the caller as a CallgateError with a
 * stable `code`; nothing is ever turned into an execution.
 */
import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import type { ServiceError } from "@grpc/grpc-js";
import { status as GrpcStatus } from "@grpc/grpc-js";
import { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "./gen/google/rpc/status_pb.js";

/** The ErrorInfo domain the sidecar sets. */
export const ERROR_DOMAIN = "callgate.dev";

/** Codes the client itself produces when the sidecar gave no ErrorInfo. */
export enum ClientCode {
  /** The sidecar could not be reached (gRPC UNAVAILABLE without ErrorInfo). */
  Unavailable = "client_unavailable",
  /** The call did not finish before its deadline. */
  DeadlineExceeded = "client_deadline_exceeded",
  /** The answer could not be decoded or violates the protocol (never acted upon). */
  MalformedResponse = "client_malformed_response",
  /** A gRPC failure without a callgate ErrorInfo. */
  Transport = "client_transport_error",
  /** A tool call named a tool that was not in the tool set handed to the model. */
  UnknownTool = "client_unknown_tool",
  /** waitForConfirmation gave up before the invocation left the parked state. */
  ConfirmationTimeout = "client_confirmation_timeout",
}

/** Base class: `code` is stable (a callgate ErrorCode value or a ClientCode). */
export class CallgateError extends Error {
  override readonly name: string = "CallgateError";
  constructor(
    readonly code: string,
    message: string,
    /** The gRPC status code, when the error came from a call. */
    readonly grpcCode: GrpcStatus | undefined = undefined,
    /** ErrorInfo.metadata (e.g. invocation_id, retry_after_ms); never argument values. */
    readonly metadata: Readonly<Record<string, string>> = {},
  ) {
    super(`${code}: ${message}`);
  }
}

/** The sidecar refused the call with a callgate ErrorInfo (its reason is `code`). */
export class SidecarError extends CallgateError {
  override readonly name = "SidecarError";
}

/** The sidecar was not reachable, or did not answer in time. */
export class TransportError extends CallgateError {
  override readonly name = "TransportError";
}

/** The sidecar's answer was not what the protocol promises. */
export class MalformedResponseError extends CallgateError {
  override readonly name = "MalformedResponseError";
  constructor(message: string) {
    super(ClientCode.MalformedResponse, message);
  }
}

/** Decodes the ErrorInfo of a `grpc-status-details-bin` trailer value; undefined if absent. */
export function decodeErrorInfo(
  details: Buffer | Uint8Array | undefined,
): { reason: string; domain: string; metadata: Record<string, string>; message: string } | undefined {
  if (!details || details.length === 0) return undefined;
  try {
    const st = fromBinary(StatusSchema, details);
    for (const any of st.details) {
      const info = anyUnpack(any, ErrorInfoSchema);
      if (info !== undefined && info.reason) {
        return { reason: info.reason, domain: info.domain, metadata: { ...info.metadata }, message: st.message };
      }
    }
  } catch {
    return undefined; // malformed details: classified by the gRPC code below
  }
  return undefined;
}

/** Turns any failure of a gRPC call into a typed CallgateError. */
export function fromServiceError(err: unknown): CallgateError {
  if (err instanceof CallgateError) return err;
  const e = err as Partial<ServiceError>;
  if (typeof e?.code !== "number") {
    return new CallgateError(ClientCode.Transport, String((err as Error)?.message ?? err));
  }
  const raw = e.metadata?.get("grpc-status-details-bin")?.[0];
  const info = decodeErrorInfo(typeof raw === "string" ? Buffer.from(raw, "base64") : raw);
  if (info !== undefined && info.domain === ERROR_DOMAIN) {
    return new SidecarError(info.reason, e.details || info.message, e.code, info.metadata);
  }
  switch (e.code) {
    case GrpcStatus.UNAVAILABLE:
      return new TransportError(ClientCode.Unavailable, e.details ?? "sidecar unavailable", e.code);
    case GrpcStatus.DEADLINE_EXCEEDED:
      return new TransportError(ClientCode.DeadlineExceeded, e.details ?? "deadline exceeded", e.code);
    case GrpcStatus.INTERNAL:
      // grpc-js: "Response message parsing error: <the deserializer's message>"
      if (/message parsing error|undecodable/i.test(e.details ?? "")) return new MalformedResponseError(e.details ?? "");
      return new TransportError(ClientCode.Transport, e.details ?? "internal", e.code);
    default:
      return new TransportError(ClientCode.Transport, `${GrpcStatus[e.code]}: ${e.details ?? ""}`, e.code);
  }
}
