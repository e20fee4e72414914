//! `@idmint/client`: ids from idmint nodes, cached in the process, offline decoding and routing
//! helpers (`shardOf`, `shardFor`, `residueOf`, `memberOf`, `CompositeKey`).

export { Client, type ClientOptions, type CloseReport, type TlsOptions } from "./client.js";
export { LocalSnowflake, type LocalSnowflakeOptions } from "./local_snowflake.js";
export { Generator as SnowflakeGenerator, LeaseExpiredError, limitAfterRenewal, lockText, SYSTEM_CLOCK, type LocalClock } from "./snowflake_rules.js";
export { Namespace, type IdType, type IdOf, type NamespaceStats } from "./namespace.js";
export { Ids, type IdOfKind, type Kind } from "./typed.js";
export { type BufferPolicy, DEFAULT_POLICY } from "./buffer.js";
export * from "./errors.js";
export { Layout, PRESETS, parseUnit, type FieldOrder, type LayoutSpec, type Parts, type PresetName } from "./layout.js";
export {
  decode,
  decodeSnowflake,
  decodeUlid,
  decodeUuid7,
  parseU64,
  parseUlid,
  parseUuid7,
  rfc3339Millis,
  ulidText,
  uuidText,
  type Decoded,
  type DecodedSnowflake,
  type DecodedTime,
} from "./decode.js";
export { CompositeKey, memberOf, parseKey, residueOf, shardFor, shardOf } from "./keys.js";
export { idsQuery, routeFields, type RouteFields, type ShardRoute } from "./shard.js";
export { Entry as ShardMapEntry, Routes as ShardRoutes, shardMapOf, SHARD_MAP_REFRESH_MS, type Choice as ShardChoice, type WireShardMap } from "./shard_map.js";
export { fromGrpc, fromHttp, grpcStatusNumber, type GrpcFailure } from "./wire_errors.js";
export type { NodeUrl, TransportKind } from "./nodes.js";
export type { NamespaceInfo, RemoteDecoded } from "./transport.js";
