//! `LocalSnowflake`: snowflake ids made in this process under a worker id leased from the nodes
//! (`client.localSnowflake(name)`, docs/clients.md "Local snowflake ids").
//!
//! The handle leases a worker id of the namespace's lease group over gRPC (`AcquireWorker`; the
//! pool the nodes' own workers lease from, so nodes and handles never share one; the token
//! needs the `workers` scope), renews it in the background (unref'd timers: it never keeps the
//! process alive), and makes ids with `snowflake_rules.ts`' `Generator`:
//!
//! - nothing below a floor: the generator starts above the lease's floor; a floor more than
//!   `maxFloorWaitMs` ahead of the clock is refused (`clock_behind_floor`), a nearer one waited for;
//! - nothing above a recorded floor nor after the lease could expire: every renewal records a
//!   floor `floorAheadMs` ahead, the generator stops there and at the renewal's send time + TTL
//!   - `safetyMarginMs` (`lease_expired`, retryable, naming the last renewal's failure);
//! - a lease lost (`superseded`) is never used again: the loop leases anew, above every id made;
//! - the acquisition names the layout's text: a group recording another is refused
//!   (`layout_conflict`) before any id is made;
//! - `close()` stops issuing and the renewals, then releases the lease with a floor above the
//!   last id.
//!
//! Lease calls exist over gRPC only: a client whose urls are all HTTP cannot lease.

import { ClosedError, IdmintError, InvalidConfigError, ProtocolError, WrongKindError } from "./errors.js";
import { GrpcTransport } from "./grpc.js";
import { Layout } from "./layout.js";
import { Nodes } from "./nodes.js";
import { floorBehind, Generator, LeaseExpiredError, lockText, SYSTEM_CLOCK, type LocalClock } from "./snowflake_rules.js";
import type { NamespaceInfo, Transport } from "./transport.js";

/** Settings of a local snowflake generator; the defaults are the nodes' `[leases]` defaults. */
export interface LocalSnowflakeOptions {
  /** How long the lease lives without a renewal, by the nodes' store's clock (10,000 ms). */
  ttlMs?: number;
  /** How far ahead of the clock each renewal records the worker's floor (5,000 ms). */
  floorAheadMs?: number;
  /** Issuing stops this long before the lease could expire (2,000 ms). */
  safetyMarginMs?: number;
  /** A floor at most this far ahead of the clock is waited for; further, refused (2,000 ms). */
  maxFloorWaitMs?: number;
  /** The layout ids are made with (default: the namespace's); another is refused at lease time. */
  layout?: Layout;
  /** Injected time (tests). */
  clock?: LocalClock;
}

interface Lease {
  group: string;
  worker: string;
  token: string;
  floor_unix_ms: string;
  ttl_ms: string;
  holder: string;
}

const REFUSALS: Record<string, string> = {
  LAYOUT_CONFLICT: "layout_conflict",
  POOL_FULL: "worker_pool_full",
  SUPERSEDED: "lease_superseded",
};

function leaseOf(group: string, answer: unknown): Lease {
  const a = answer as { outcome?: string; lease?: Lease; refused?: { reason: string; message: string } };
  if (a.outcome === "lease" && a.lease !== undefined && a.lease.group === group && a.lease.token !== "0") return a.lease;
  if (a.outcome === "refused" && a.refused !== undefined) {
    throw new IdmintError(REFUSALS[a.refused.reason] ?? "lease_refused", a.refused.message);
  }
  throw new ProtocolError(`a lease answer for group ${group} with neither a lease nor a refusal`);
}

/** The lease group and layout of a snowflake namespace whose worker ids are leased. */
export function targetOf(name: string, info: NamespaceInfo): { group: string; layout: Layout } {
  if (info.kind !== "snowflake") {
    throw new WrongKindError("wrong_kind", `namespace ${name} is ${info.kind}: local ids are snowflake ids`);
  }
  const s = info as unknown as {
    shards?: unknown;
    worker_pool?: { group: string };
    layout?: {
      timestamp_bits: number;
      node_bits: number;
      sequence_bits: number;
      time_unit_ns: string;
      epoch_unix_ms: string;
      order: string;
      max_bits: number;
    };
  };
  if (s.shards !== undefined && s.shards !== null) {
    throw new WrongKindError("wrong_kind", `namespace ${name} has shards = "owned": its node field is the data's shard, never leased to a client`);
  }
  if (s.worker_pool === undefined || s.worker_pool === null) {
    throw new WrongKindError("wrong_kind", `namespace ${name} has a fixed worker id on an authority that stores no leases: there is no pool to lease from`);
  }
  const l = s.layout;
  if (l === undefined || l.time_unit_ns === "0" || l.max_bits === 0) {
    throw new ProtocolError("the node does not describe the layout's time unit and bit limit (an older node): pass options.layout");
  }
  const layout = new Layout({
    timestampBits: l.timestamp_bits,
    nodeBits: l.node_bits,
    sequenceBits: l.sequence_bits,
    unitNanos: BigInt(l.time_unit_ns),
    epochUnixMs: BigInt(l.epoch_unix_ms),
    order: l.order === "FIELD_ORDER_SEQUENCE_THEN_NODE" ? "sequence_then_node" : "node_then_sequence",
    maxBits: l.max_bits,
  });
  return { group: s.worker_pool.group, layout };
}

const MS = 1_000_000n;

/** Snowflake ids made in this process under a leased worker id. `next()` never touches the network. */
export class LocalSnowflake {
  private generator!: Generator;
  private lease!: Lease;
  private closed = false;
  private lost = false;
  private lastError: string | undefined;
  private wake: (() => void) | undefined;
  private timer: NodeJS.Timeout | undefined;
  private loop: Promise<void> | undefined;
  private readonly text: string;
  private readonly holder: string;
  private readonly ttlMs: number;
  private readonly floorAheadMs: number;
  private readonly marginMs: number;
  private readonly maxWaitMs: number;
  private readonly clock: LocalClock;
  readonly layout: Layout;

  private constructor(
    readonly name: string,
    private readonly group: string,
    layout: Layout,
    private readonly nodes: Nodes,
    options: LocalSnowflakeOptions,
  ) {
    this.ttlMs = options.ttlMs ?? 10_000;
    this.floorAheadMs = options.floorAheadMs ?? 5_000;
    this.marginMs = options.safetyMarginMs ?? 2_000;
    this.maxWaitMs = options.maxFloorWaitMs ?? 2_000;
    if (!(this.ttlMs >= 10 && this.floorAheadMs > 0 && this.floorAheadMs < this.ttlMs && this.marginMs < this.ttlMs / 2)) {
      throw new InvalidConfigError("local snowflake: need ttlMs >= 10, 0 < floorAheadMs < ttlMs and safetyMarginMs < ttlMs / 2");
    }
    this.layout = options.layout ?? layout;
    this.clock = options.clock ?? SYSTEM_CLOCK;
    this.text = lockText(this.layout);
    this.holder = `node.js pid ${process.pid} local ${name}`;
  }

  /** Leases a worker id for `name` over the gRPC ones of `transports`. */
  static async open(name: string, info: NamespaceInfo, transports: readonly Transport[], timeoutMs: number, options: LocalSnowflakeOptions = {}): Promise<LocalSnowflake> {
    const grpcNodes = transports.filter((t): t is GrpcTransport => t instanceof GrpcTransport);
    if (grpcNodes.length === 0) {
      throw new InvalidConfigError("local snowflake ids need a gRPC node url: the worker-lease calls exist over gRPC only");
    }
    const { group, layout } = targetOf(name, info);
    const handle = new LocalSnowflake(name, group, layout, new Nodes(grpcNodes, timeoutMs), options);
    [handle.lease, handle.generator] = await handle.takeLease(0n);
    handle.loop = handle.keep();
    return handle;
  }

  /** The worker id leased. */
  get worker(): number {
    return this.generator.worker;
  }

  /** The next id, above every id this handle made. */
  next(): bigint {
    try {
      return this.generator.next();
    } catch (e) {
      if (e instanceof LeaseExpiredError) throw this.notIssuing();
      throw e;
    }
  }

  private notIssuing(): IdmintError {
    if (this.closed) return new ClosedError("the local snowflake generator is closed");
    const last = this.lastError === undefined ? "" : `; last renewal: ${this.lastError}`;
    if (this.lost) {
      return new IdmintError("lease_lost", `the worker lease of namespace ${this.name} was lost (taken over); not issuing until a new one is leased${last}`);
    }
    this.wake?.();
    return new LeaseExpiredError(
      `the worker lease of namespace ${this.name} is not renewed up to now (the nodes did not answer for longer than the lease covers); not issuing, as another process may lease the worker id${last}`,
    );
  }

  private call(method: "AcquireWorker" | "RenewWorker" | "ReleaseWorker", request: object): Promise<unknown> {
    return this.nodes.call((t) => (t as GrpcTransport).leaseCall(method, request, this.nodes.timeoutMs)).then((r) => r.answer);
  }

  private async release(lease: Lease, floorMs: bigint): Promise<void> {
    leaseOf(lease.group, await this.call("ReleaseWorker", { lease, floor_unix_ms: floorMs.toString() }));
  }

  private async takeLease(ownFloorMs: bigint): Promise<[Lease, Generator]> {
    const nowMs = this.clock.wallNs() / MS;
    const acquired = await this.call("AcquireWorker", {
      group: this.group,
      workers: (1n << BigInt(this.layout.spec.nodeBits)).toString(),
      prefer_floor_at_most: (nowMs + BigInt(this.maxWaitMs)).toString(),
      holder: this.holder,
      layout: this.text,
      ttl_ms: String(this.ttlMs),
    });
    let lease = leaseOf(this.group, acquired);
    const floor = BigInt(lease.floor_unix_ms);
    let waited = 0;
    for (let behind = floorBehind(floor, this.clock, ownFloorMs); behind !== undefined; behind = floorBehind(floor, this.clock, ownFloorMs)) {
      if (behind > BigInt(this.maxWaitMs) || waited > this.maxWaitMs) {
        await this.release(lease, floor).catch(() => undefined);
        throw new IdmintError(
          "clock_behind_floor",
          `worker ${lease.worker} of group ${lease.group} has issued ids up to ${floor} ms since the Unix epoch (its floor), but this clock is ${behind} ms behind: it may have been stepped back. Not issuing`,
        );
      }
      const pause = Number(behind < 100n ? behind : 100n);
      await new Promise((r) => setTimeout(r, pause).unref());
      waited += pause;
    }
    const generator = new Generator(this.layout, Number(lease.worker), floor, this.clock, ownFloorMs);
    try {
      lease = await this.renew(lease, generator);
    } catch (e) {
      await this.release(lease, floor).catch(() => undefined);
      throw e;
    }
    return [lease, generator];
  }

  private async renew(lease: Lease, generator: Generator): Promise<Lease> {
    const sent = generator.nowNs();
    const floor = sent / MS + BigInt(this.floorAheadMs);
    const renewed = leaseOf(lease.group, await this.call("RenewWorker", { lease, floor_unix_ms: floor.toString() }));
    generator.renewed(sent, BigInt(renewed.floor_unix_ms), BigInt(renewed.ttl_ms) * MS, BigInt(this.marginMs) * MS);
    this.lastError = undefined;
    return { ...lease, floor_unix_ms: renewed.floor_unix_ms };
  }

  /** Sleeps `ms`, or less when `next()` asks for a renewal or `close()` stops the loop. */
  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.wake = () => {
        if (this.timer !== undefined) clearTimeout(this.timer);
        this.wake = undefined;
        resolve();
      };
      this.timer = setTimeout(() => this.wake?.(), ms);
      this.timer.unref();
    });
  }

  private async keep(): Promise<void> {
    const period = Math.min(this.ttlMs / 3, this.floorAheadMs / 2);
    const retry = Math.max(this.ttlMs / 10, 10);
    let backoff = retry / 8;
    let wait = period;
    while (!this.closed) {
      await this.pause(wait);
      if (this.closed) return;
      try {
        if (this.lost) {
          const [lease, generator] = await this.takeLease(this.generator.issuedBelowMs());
          if (this.closed) {
            generator.stop();
            await this.release(lease, generator.issuedBelowMs()).catch(() => undefined);
            return;
          }
          [this.lease, this.generator, this.lost] = [lease, generator, false];
        } else {
          this.lease = await this.renew(this.lease, this.generator);
        }
        wait = period;
        backoff = retry / 8;
      } catch (e) {
        if (e instanceof IdmintError && e.code === "lease_superseded") {
          this.generator.stop();
          this.lost = true;
        }
        this.lastError = e instanceof Error ? e.message : String(e);
        backoff = Math.min(retry, backoff * 2);
        wait = backoff * (1 - Math.random() / 2);
      }
    }
  }

  /** Stops issuing and the renewals, then releases the lease with a floor above the last id. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wake?.();
    await this.loop;
    this.generator.stop();
    if (this.lost) return;
    const issued = this.generator.issuedBelowMs();
    const recorded = BigInt(this.lease.floor_unix_ms);
    await this.release(this.lease, issued > recorded ? issued : recorded).catch(() => undefined);
  }
}
