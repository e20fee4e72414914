//! A sequence namespace's ids in the client: a `BlockBuffer` fed with blocks leased from the
//! nodes over `Block`, refilled in the background below the low-water mark, and closed with the
//! newest block's unused tail handed back with its lease (`GiveBack`).
//!
//! Invariants (docs/design.md, docs/client.md):
//! - only ids of blocks a node granted are handed out, and only blocks of the namespace: its
//!   step, one of the residue classes the node's authority grants, within its width;
//! - at most one `Block` in flight; a refill that fails backs off (50 ms doubling to 2 s, each
//!   pause jittered down by up to half) and is retried while the buffer wants one;
//! - a refill asks its node to extend the newest lease (`extends`); a node that granted the
//!   block right after that lease's answers a lease covering both (`leaseStart`);
//! - `close` hands out nothing more, waits for the refill in flight, then gives the newest
//!   lease's unused tail (from the first id held, the older block's included when the lease
//!   covers it) back to the node that leased it, once; everything else held is burned. A tail
//!   refused, or whose answer is lost, is burned too: never used again.

import { BlockBuffer, blockLen, type Block, type BufferPolicy } from "./buffer.js";
import { ClosedError, IdmintError, ProtocolError, UnavailableError } from "./errors.js";
import type { Nodes } from "./nodes.js";
import type { LeasedBlock, NamespaceDescription } from "./transport.js";

/** What a block must be to belong to the namespace. */
export class SpecCheck {
  readonly step: bigint;
  readonly residues: bigint[];
  readonly maxId: bigint;

  constructor(d: Extract<NamespaceDescription, { kind: "sequence" }>) {
    if (d.step <= 0n) throw new ProtocolError("the node described a step of 0");
    if (d.width !== 32 && d.width !== 64) throw new ProtocolError(`the node described a width of ${d.width}`);
    this.step = d.step;
    this.residues = d.residues;
    this.maxId = d.width === 32 ? (1n << 31n) - 1n : (1n << 63n) - 1n;
  }

  /** `leased` as a block of the namespace, or a `ProtocolError`. */
  block(leased: LeasedBlock): Block {
    const { start, end, step } = leased;
    const ok =
      step === this.step &&
      start < end &&
      this.residues.includes(start % step) &&
      start + ((end - start - 1n) / step) * step <= this.maxId;
    if (!ok) throw new ProtocolError(`the node granted [${start}, ${end}) step ${step}: not a block of the namespace; not used`);
    return { start, end, step };
  }
}

export interface SequenceSettings {
  policy: BufferPolicy;
  timeoutMs: number;
  refillWaitMs: number;
}

const BACKOFF_FIRST_MS = 50;
const BACKOFF_MAX_MS = 2000;

/** The newest block, while its tail may still go back; `from`: the first id its lease covers. */
interface Lease {
  block: Block;
  from: bigint;
  lease: bigint;
  node: number;
}

export class SequenceIds {
  readonly buffer: BlockBuffer;
  private newest: Lease | undefined;
  /** The highest end granted so far: a node holding ids below it grants from its store instead. */
  private floor: bigint | undefined;
  private closed = false;
  private inflight: Promise<void> | undefined;
  /** Callers waiting for ids: woken after every refill outcome. */
  private waiters: Array<() => void> = [];
  private backoffMs = 0;
  private retry: NodeJS.Timeout | undefined;
  lastError: IdmintError | undefined;
  /** The latest refill's error if it cannot be cured by waiting (exhausted, forbidden...). */
  private fatal: IdmintError | undefined;
  waits = 0;
  refillFailures = 0;

  constructor(
    readonly name: string,
    private readonly nodes: Nodes,
    private readonly check: SpecCheck,
    private readonly settings: SequenceSettings,
  ) {
    this.buffer = new BlockBuffer(
      settings.policy,
      () => this.refill(false),
      () => this.refill(true),
    );
  }

  /** A block got while setting the namespace up (the `Block` that created it). */
  firstBlock(leased: LeasedBlock, node: number): void {
    this.accept(leased, node, false);
  }

  private accept(leased: LeasedBlock, node: number, fromRefill: boolean): void {
    const block = this.check.block(leased);
    if (this.floor === undefined || block.end > this.floor) this.floor = block.end;
    const prev = this.newest;
    const kept = this.buffer.push(block, fromRefill);
    // The node's newest lease is this block now, joined to the previous one when it says so.
    let from = kept?.start ?? 0n;
    const leaseStart = leased.leaseStart ?? 0n;
    if (
      kept !== undefined && prev !== undefined && prev.node === node && kept.start === block.start &&
      leaseStart > 0n && leaseStart < block.start && prev.block.end === block.start && prev.block.step === block.step
    ) {
      from = leaseStart > prev.from ? leaseStart : prev.from;
    }
    this.newest = kept === undefined ? undefined : { block: kept, from, lease: leased.lease, node };
  }

  /** Starts a refill if one is wanted (or `force`d by an empty buffer) and none is in flight. */
  refill(force: boolean): void {
    if (this.closed || this.retry !== undefined) {
      this.buffer.disarm();
      return;
    }
    const count = this.buffer.startRefill(performance.now(), force);
    if (count === undefined) {
      if (!this.buffer.inFlight) this.buffer.disarm();
      return;
    }
    const { timeoutMs } = this.settings;
    const floor = this.floor;
    const extends_ = this.newest?.lease;
    this.inflight = this.nodes.call((t) => t.block(this.name, count, timeoutMs, floor, extends_)).then(
      ({ node, answer }) => {
        try {
          this.accept(answer, node, true);
          this.backoffMs = 0;
          this.fatal = undefined;
        } catch (e) {
          this.failed(e);
        }
      },
      (e: unknown) => this.failed(e),
    ).finally(() => {
      this.inflight = undefined;
      const waiters = this.waiters;
      this.waiters = [];
      for (const w of waiters) w();
    });
  }

  private failed(e: unknown): void {
    this.buffer.refillFailed();
    this.refillFailures++;
    const error = e instanceof IdmintError ? e : new UnavailableError(String(e));
    this.lastError = error;
    // A node's answer (exhausted, forbidden, authority_unavailable...) goes to the callers
    // waiting now; only "no node answered" is worth waiting out.
    this.fatal = error instanceof UnavailableError ? undefined : error;
    if (this.closed || !(error.retryable || error instanceof ProtocolError)) return;
    this.backoffMs = Math.min(BACKOFF_MAX_MS, this.backoffMs === 0 ? BACKOFF_FIRST_MS : this.backoffMs * 2);
    const pause = this.backoffMs * (1 - Math.random() / 2);
    this.buffer.disarm();
    this.retry = setTimeout(() => {
      this.retry = undefined;
      this.refill(this.waiters.length > 0);
      this.buffer.rearm();
    }, pause);
    this.retry.unref();
  }

  /** The next id without waiting; `undefined` when the buffer is empty (a refill is then due) or closed. */
  tryNext(): bigint | undefined {
    return this.buffer.take();
  }

  /** The next id, waiting (at most `refillWaitMs`) for a refill when the buffer is empty. */
  async next(): Promise<bigint> {
    const id = this.buffer.take();
    if (id !== undefined) return id;
    const [first] = await this.wait(1);
    return first as bigint;
  }

  /** `count` ids, increasing; waits for refills as `next` does. */
  async nextBatch(count: number): Promise<bigint[]> {
    const out: bigint[] = [];
    this.buffer.takeMany(count, out);
    if (out.length === count) return out;
    const rest = await this.wait(count - out.length);
    for (const id of rest) out.push(id);
    return out;
  }

  private async wait(count: number): Promise<bigint[]> {
    this.waits++;
    const deadline = performance.now() + this.settings.refillWaitMs;
    const out: bigint[] = [];
    // Each call tries the nodes again, whatever the last refill answered.
    this.fatal = undefined;
    this.refill(true);
    for (;;) {
      if (this.closed) throw new ClosedError();
      this.buffer.takeMany(count - out.length, out);
      if (out.length === count) return out;
      if (this.fatal !== undefined) throw this.fatal;
      const left = deadline - performance.now();
      if (left <= 0) {
        throw this.lastError ?? new UnavailableError(`${this.name}: no ids within ${this.settings.refillWaitMs} ms`);
      }
      this.refill(true);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /**
   * Stops handing out ids, waits for the refill in flight, and gives the newest block's unused
   * tail back to its node. Returns the ids given back.
   */
  async close(): Promise<number> {
    if (this.closed) return 0;
    this.closed = true;
    if (this.retry !== undefined) clearTimeout(this.retry);
    this.retry = undefined;
    for (const w of this.waiters.splice(0)) w();
    if (this.inflight !== undefined) await this.inflight;
    const newest = this.newest;
    this.newest = undefined;
    const tail = this.buffer.drain(newest?.block, newest?.from);
    if (tail === undefined || newest === undefined) return 0;
    const n = blockLen(tail);
    if (newest.lease === 0n) {
      this.buffer.tailRefused(n);
      return 0;
    }
    const leased = { ...tail, lease: newest.lease };
    try {
      const a = await this.nodes.callOne(newest.node, (t) => t.giveBack(this.name, leased, this.settings.timeoutMs));
      if (a.givenBack) return n;
    } catch {
      // The answer is lost: the tail is burned, which is always safe.
    }
    this.buffer.tailRefused(n);
    return 0;
  }
}
