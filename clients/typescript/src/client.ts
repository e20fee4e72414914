//! `Client`: connects to nodes, sets namespaces up on first use, closes cleanly.
//!
//! Setting a namespace up reads it (`Namespace`, which creates nothing); a namespace the node
//! does not have yet is created the only way the API allows, with a `Block` (the node's
//! `auto_create`), and that block is the buffer's first. `close` stops every namespace (no id
//! is handed out after), waits for refills in flight, and hands each sequence namespace's
//! unused tail back to the node that leased it: a clean close burns nothing.
//!
//! 64-bit ids are `bigint` by default, or decimal `string`s; `number` only by an explicit
//! opt-in and only where every id of the namespace is a safe integer (a snowflake layout of at
//! most 53 bits, such as `js53`, or a 32-bit sequence): elsewhere `UnsafeIdError`.

import { readFileSync } from "node:fs";
import { DEFAULT_POLICY, type BufferPolicy } from "./buffer.js";
import {
  ClosedError,
  InvalidConfigError,
  InvalidCountError,
  ProtocolError,
  UnknownNamespaceError,
  UnsafeIdError,
  WrongKindError,
} from "./errors.js";
import { LocalSnowflake, type LocalSnowflakeOptions } from "./local_snowflake.js";
import { Namespace, statsOf, type IdType, type NamespaceStats } from "./namespace.js";
import { Nodes, transports, type NodeUrl, type TransportKind } from "./nodes.js";
import { SequenceIds, SpecCheck } from "./sequence.js";
import { routeFields, type RouteFields, type ShardRoute } from "./shard.js";
import { SHARD_MAP_REFRESH_MS, ShardMaps } from "./shard_map.js";
import { TimedIds } from "./timed.js";
import { Ids, type Kind } from "./typed.js";
import type { Credentials, IdsAnswer, NamespaceInfo, RemoteDecoded, Transport } from "./transport.js";

export interface TlsOptions {
  /** The CA to trust (only that one), as a file or PEM; default: the public roots. */
  caFile?: string;
  ca?: string | Buffer;
  /** The certificate and key presented to nodes that require client certificates. */
  certFile?: string;
  keyFile?: string;
  cert?: string | Buffer;
  key?: string | Buffer;
}

export interface ClientOptions {
  /** How urls given as text are reached: gRPC (default) or the HTTP/JSON API. */
  transport?: TransportKind;
  /** A bearer token sent with every call (`ids`, `blocks` and `read` scopes as used). */
  token?: string;
  tls?: TlsOptions;
  /** One call to one node, ms (default 5,000). */
  timeoutMs?: number;
  /** The longest `next` waits on an empty buffer, ms (default 2,000). */
  refillWaitMs?: number;
  /** Time-ordered ids are handed out only this long after their request, ms (default 1,000). */
  validityMs?: number;
  /** Largest `Next` batch of a time-ordered namespace (default 1,000; at most the nodes' `max_count`). */
  maxTimeBatch?: number;
  /** Block sizing of sequence namespaces (default: 10 s of demand, 1,000 to 1,000,000 ids, refill below half). */
  buffer?: Partial<BufferPolicy>;
  /** How old a shard-owned namespace's shard map may grow before the next routed request refreshes it (in the background), ms (default 10,000). */
  shardMapRefreshMs?: number;
  /** The monotonic clock of time-ordered batches and shard maps' age, ms (tests inject one). */
  now?: () => number;
}

/** What `close` did. */
export interface CloseReport {
  /** Ids handed back to the nodes. */
  givenBack: number;
  /** Ids burned in all, since the client started (never handed out, never to be). */
  burned: number;
}

function pem(file: string | undefined, text: string | Buffer | undefined, what: string): Buffer | undefined {
  if (text !== undefined) return Buffer.isBuffer(text) ? text : Buffer.from(text);
  if (file === undefined) return undefined;
  try {
    return readFileSync(file);
  } catch (e) {
    throw new InvalidConfigError(`${what} ${file}: ${(e as Error).message}`);
  }
}

function credentials(options: ClientOptions): Credentials {
  const token = options.token;
  if (token !== undefined && (token === "" || !/^[\x21-\x7e]+$/.test(token))) {
    throw new InvalidConfigError("the token is empty or not printable ASCII");
  }
  const tls = options.tls ?? {};
  const cert = pem(tls.certFile, tls.cert, "client certificate");
  const key = pem(tls.keyFile, tls.key, "client key");
  if ((cert === undefined) !== (key === undefined)) throw new InvalidConfigError("a client certificate needs its key, and a key its certificate");
  return { token, ca: pem(tls.caFile, tls.ca, "CA file"), cert, key };
}

function policy(p: Partial<BufferPolicy> | undefined): BufferPolicy {
  const out = { ...DEFAULT_POLICY, ...p };
  const whole = (n: number) => Number.isSafeInteger(n) && n >= 1;
  if (!whole(out.minBlock) || !whole(out.maxBlock) || out.minBlock > out.maxBlock) {
    throw new InvalidConfigError("buffer: minBlock and maxBlock are whole numbers, 1 <= minBlock <= maxBlock");
  }
  if (!(out.bufferSeconds > 0) || !Number.isFinite(out.bufferSeconds)) throw new InvalidConfigError("buffer: bufferSeconds must be positive");
  if (!(out.lowWater > 0 && out.lowWater <= 1)) throw new InvalidConfigError("buffer: lowWater must be in (0, 1]");
  if (!(out.demandWindow > 0)) throw new InvalidConfigError("buffer: demandWindow must be positive");
  return out;
}

export class Client {
  private readonly nodes: Nodes;
  /** Where each shard-owned namespace's ranges are held (`shard_map.ts`). */
  private readonly shardMaps: ShardMaps;
  private readonly states = new Map<string, Promise<State>>();
  private readonly opened: State[] = [];
  /** The bigint handles `next` and `nextBatch` use, by name. */
  private readonly handles = new Map<string, Namespace<"bigint">>();
  private closed = false;
  private closing: Promise<CloseReport> | undefined;
  private readonly policy: BufferPolicy;
  private readonly timeoutMs: number;
  private readonly refillWaitMs: number;
  private readonly validityMs: number;
  private readonly maxTimeBatch: number;
  private readonly now: () => number;

  /**
   * A client of the nodes at `urls`, in order of preference: `http://host:port`, or
   * `https://host:port` for a node serving TLS, over gRPC unless `options.transport` (or the
   * entry's own `transport`) says `http`. Connects lazily.
   */
  constructor(urls: NodeUrl | readonly NodeUrl[], options: ClientOptions = {}) {
    const list = Array.isArray(urls) ? (urls as readonly NodeUrl[]) : [urls as NodeUrl];
    this.timeoutMs = positive(options.timeoutMs ?? 5000, "timeoutMs");
    this.refillWaitMs = positive(options.refillWaitMs ?? 2000, "refillWaitMs");
    this.validityMs = positive(options.validityMs ?? 1000, "validityMs");
    this.maxTimeBatch = positive(options.maxTimeBatch ?? 1000, "maxTimeBatch");
    this.policy = policy(options.buffer);
    this.now = options.now ?? (() => performance.now());
    const transport = options.transport ?? "grpc";
    this.nodes = new Nodes(transports(list, transport, credentials(options)), this.timeoutMs);
    const refreshMs = options.shardMapRefreshMs ?? SHARD_MAP_REFRESH_MS;
    if (!(refreshMs >= 0)) throw new InvalidConfigError("shardMapRefreshMs must be at least 0");
    this.shardMaps = new ShardMaps(this.nodes.list, this.timeoutMs, refreshMs, this.now);
  }

  /**
   * A handle on `name` for the hot path (set up once, on first use). `ids` picks how 64-bit
   * ids are given: `bigint` (default), `string` (decimal), or `number`, allowed only for
   * namespaces whose ids are all safe integers. Handles of one name share one buffer.
   */
  async namespace<T extends IdType = "bigint">(name: string, opts: { ids?: T } = {}): Promise<Namespace<T>> {
    if (this.closed) throw new ClosedError();
    const type = (opts.ids ?? "bigint") as T;
    if (type !== "bigint" && type !== "string" && type !== "number") {
      throw new InvalidConfigError(`ids: ${String(type)} is not bigint, string or number`);
    }
    const state = await this.stateOf(name, true);
    if (type === "number" && !state.safe) {
      throw new UnsafeIdError(`${name}: ${state.unsafeWhy}; use bigint or string`);
    }
    return new Namespace(name, type, state.ids);
  }

  /** A typed handle of the sequence namespace `name`: `bigint` ids (`WrongKindError` at first use if it is another kind; created there with the node's `auto_create` if the node does not have it). */
  sequence(name: string): Ids<bigint> {
    return new Ids<bigint>(name, "sequence", () => this.typed(name, "sequence"));
  }

  /** A typed handle of the snowflake namespace `name`: `bigint` ids (`WrongKindError` at first use if not). */
  snowflake(name: string): Ids<bigint> {
    return new Ids<bigint>(name, "snowflake", () => this.typed(name, "snowflake"));
  }

  /** A typed handle of the UUIDv7 namespace `name`: ids as canonical text (`WrongKindError` at first use if not). */
  uuid7(name: string): Ids<string> {
    return new Ids<string>(name, "uuid7", () => this.typed(name, "uuid7"));
  }

  /** A typed handle of the ULID namespace `name`: ids as canonical text (`WrongKindError` at first use if not). */
  ulid(name: string): Ids<string> {
    return new Ids<string>(name, "ulid", () => this.typed(name, "ulid"));
  }

  /**
   * Snowflake ids of `name` made in this process, under a worker id leased from the
   * namespace's pool over gRPC (see `LocalSnowflake`; the token needs the `workers` scope).
   * Close the handle to release the worker id.
   */
  async localSnowflake(name: string, options: LocalSnowflakeOptions = {}): Promise<LocalSnowflake> {
    if (this.closed) throw new ClosedError();
    const { answer } = await this.nodes.call((t) => t.info(name, this.timeoutMs));
    return LocalSnowflake.open(name, answer, this.nodes.list, this.timeoutMs, options);
  }

  /** The counters of every namespace this client has set up, by name (also after `close`). */
  allStats(): Map<string, NamespaceStats> {
    return new Map(this.opened.map((s) => [s.name, statsOf(s.ids)]));
  }

  /** The bigint handle of `name` if its kind is `kind`; only sequence handles create. */
  private async typed(name: string, kind: Kind): Promise<Namespace<"bigint">> {
    if (this.closed) throw new ClosedError();
    const state = await this.stateOf(name, kind === "sequence");
    const actual = state.ids instanceof SequenceIds ? "sequence" : state.ids.kind;
    if (actual !== kind) {
      throw new WrongKindError(
        "wrong_kind",
        `namespace ${name} is a ${actual} namespace, not ${kind}: client.${kind}() is for ${kind} namespaces; use client.${actual}(${JSON.stringify(name)})`,
      );
    }
    return new Namespace(name, "bigint", state.ids);
  }

  /** The namespace set up, once; `create`: a sequence namespace the node lacks is created. */
  private stateOf(name: string, create: boolean): Promise<State> {
    let p = this.states.get(name);
    if (p === undefined) {
      p = this.setUp(name, create);
      this.states.set(name, p);
      // A failed set-up is not kept: the next call tries again.
      p.catch(() => this.states.delete(name));
    }
    return p;
  }

  /** The bigint handle of `name`, made once. */
  private async handle(name: string): Promise<Namespace<"bigint">> {
    let h = this.handles.get(name);
    if (h === undefined) {
      h = await this.namespace(name);
      this.handles.set(name, h);
    }
    return h;
  }

  /**
   * One id of `name` (bigint for 64-bit kinds, text for UUIDv7 and ULID). With `route.shard`
   * or `route.key`: an id of that shard (see `nextBatch`).
   */
  async next(name: string, route?: ShardRoute): Promise<bigint | string> {
    if (this.closed) throw new ClosedError();
    const fields = routeFields(route);
    if (fields !== undefined) return (await this.routed(name, 1, fields))[0] as bigint;
    const h = this.handles.get(name) ?? (await this.handle(name));
    return h.tryNext() ?? h.next();
  }

  /**
   * `count` increasing ids of `name`. With `route.shard` (or `route.key`, whose shard is
   * `key % logical_shards`; never both): ids of that shard of a snowflake namespace with
   * `shards = "owned"`, fetched from a node on every call, never buffered: with several nodes,
   * from the node holding the shard's range first (the namespace's shard map, learned from the
   * nodes, refreshed every `shardMapRefreshMs`). Any other namespace answers
   * `InvalidRequestError`.
   */
  async nextBatch(name: string, count: number, route?: ShardRoute): Promise<(bigint | string)[]> {
    if (this.closed) throw new ClosedError();
    const fields = routeFields(route);
    if (fields !== undefined) return this.routed(name, count, fields);
    return (this.handles.get(name) ?? (await this.handle(name))).nextBatch(count);
  }

  /** `count` ids of the shard `route` names, straight from a node: its range's holder first. */
  private async routed(name: string, count: number, route: RouteFields): Promise<bigint[]> {
    if (!Number.isSafeInteger(count) || count < 1) {
      throw new InvalidCountError("invalid_count", `count must be a whole number from 1, got ${count}`);
    }
    const choice = await this.shardMaps.choose(name, route);
    let tried = 0;
    const take = (t: Transport) => {
      tried++;
      return t.next(name, count, this.timeoutMs, route);
    };
    let answer: IdsAnswer;
    try {
      ({ answer } = await this.nodes.call(take, choice?.node));
    } finally {
      if (choice !== undefined && tried > 1) this.shardMaps.failed(name, choice);
    }
    if (answer.kind !== "u64") throw new ProtocolError(`${name}: a shard's ids that are not snowflake ids`);
    return answer.ids;
  }

  /** The namespace's settings and state, read from a node (creates nothing). */
  async info(name: string): Promise<NamespaceInfo> {
    if (this.closed) throw new ClosedError();
    return (await this.nodes.call((t) => t.info(name, this.timeoutMs))).answer;
  }

  /** What a node says `id` is, as an id of namespace `name` (for offline decoding: `decode`). */
  async decode(name: string, id: string | bigint): Promise<RemoteDecoded> {
    if (this.closed) throw new ClosedError();
    return (await this.nodes.call((t) => t.decode(name, String(id), this.timeoutMs))).answer;
  }

  private async setUp(name: string, create: boolean): Promise<State> {
    let first;
    let info = await this.nodes.call((t) => t.describe(name, this.timeoutMs));
    if (info.answer === null && !create) {
      throw new UnknownNamespaceError("unknown_namespace", `${name}: the node does not have it (only sequence namespaces are created on first use)`);
    }
    if (info.answer === null) {
      const count = this.policy.minBlock;
      first = await this.nodes.call((t) => t.block(name, count, this.timeoutMs));
      info = await this.nodes.call((t) => t.describe(name, this.timeoutMs));
      if (info.answer === null) throw new UnknownNamespaceError("unknown_namespace", `${name}: the node does not have it`);
    }
    const d = info.answer;
    let state: State;
    if (d.kind === "sequence") {
      const ids = new SequenceIds(name, this.nodes, new SpecCheck(d), {
        policy: this.policy,
        timeoutMs: this.timeoutMs,
        refillWaitMs: this.refillWaitMs,
      });
      if (first !== undefined) ids.firstBlock(first.answer, first.node);
      state = { name, ids, safe: d.width === 32, unsafeWhy: `a ${d.width}-bit sequence namespace's ids can exceed 2^53 - 1` };
    } else {
      const ids = new TimedIds(name, d.kind, this.nodes, {
        validityMs: this.validityMs,
        maxBatch: this.maxTimeBatch,
        timeoutMs: this.timeoutMs,
        refillWaitMs: this.refillWaitMs,
        now: this.now,
      });
      state =
        d.kind === "snowflake"
          ? { name, ids, safe: d.totalBits <= 53, unsafeWhy: `a ${d.totalBits}-bit snowflake layout's ids can exceed 2^53 - 1 (js53 layouts do not)` }
          : { name, ids, safe: false, unsafeWhy: `${d.kind} ids are text` };
    }
    if (this.closed) {
      await state.ids.close();
      throw new ClosedError();
    }
    this.opened.push(state);
    return state;
  }

  /** Stops every namespace and hands the unused tails back. Idempotent: later calls answer the first's report. */
  close(): Promise<CloseReport> {
    this.closing ??= this.shutDown();
    return this.closing;
  }

  private async shutDown(): Promise<CloseReport> {
    this.closed = true;
    // Set-ups in flight finish (or fail) first, so their namespaces are closed too.
    await Promise.allSettled([...this.states.values()]);
    let givenBack = 0;
    for (const s of this.opened) givenBack += (await s.ids.close()) ?? 0;
    this.nodes.close();
    const burned = this.opened.reduce((sum, s) => sum + statsOf(s.ids).burned, 0);
    return { givenBack, burned };
  }
}

/** A namespace set up: its ids, and whether they may be given as `number`s. */
interface State {
  name: string;
  ids: SequenceIds | TimedIds;
  safe: boolean;
  unsafeWhy: string;
}

function positive(n: number, what: string): number {
  if (!(Number.isFinite(n) && n > 0)) throw new InvalidConfigError(`${what} must be a positive number`);
  return n;
}
