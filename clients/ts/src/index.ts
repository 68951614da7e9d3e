export * from "./client.js";
export * from "./errors.js";
export * from "./tools.js";
export { isToolName, TOOL_NAME, wireName, wireNames } from "./names.js";
export { UnaryClient, traceparentFor } from "./rpc.js";
export type { CallOptions, Target } from "./rpc.js";
export * as pb from "./gen/callgate/v1/callgate_pb.js";
