//! The block buffer of a sequence namespace: the node's buffer policy (crates/core/src/buffer.rs)
//! in one event loop. Blocks are sized from an exponentially weighted moving average of demand
//! (10 s of demand, 1,000 to 1,000,000 ids by default, averaged over 5 s), a refill is wanted
//! below the low-water mark (half a block), at most one is in flight.
//!
//! Invariants:
//! - ids leave each once, in strictly increasing order per residue class: a block is used only
//!   above every id held of its class before; the part of a block at or below them (another
//!   node's, after a failover) is cut away and counted burned;
//! - every id received is served, buffered, burned or given back:
//!   `received == served + buffered + burned + givenBack` (`stats()`);
//! - the hot path (`take`) does number arithmetic only (a comparison, an add, a decrement) and
//!   makes the `bigint` id with `BigInt(n)` while the block's ids are safe integers, a `bigint`
//!   add beyond; the low-water check is a number comparison against a threshold recomputed when
//!   blocks change.

export interface Block {
  start: bigint;
  end: bigint;
  step: bigint;
}

/** Ids of a block. */
export function blockLen(b: Block): number {
  return Number((b.end - b.start + b.step - 1n) / b.step);
}

export interface BufferPolicy {
  bufferSeconds: number;
  minBlock: number;
  maxBlock: number;
  /** Refill when fewer than this fraction of a block remain (0 < f <= 1). */
  lowWater: number;
  /** Time constant of the demand average, seconds. */
  demandWindow: number;
}

export const DEFAULT_POLICY: Readonly<BufferPolicy> = Object.freeze({
  bufferSeconds: 10,
  minBlock: 1_000,
  maxBlock: 1_000_000,
  lowWater: 0.5,
  demandWindow: 5,
});

/** Blocks ending at or below this hold only safe integers (and so does every step between them). */
const SAFE_END = BigInt(Number.MAX_SAFE_INTEGER);

/** Shortest interval whose rate counts as the recent demand, ms. */
const RECENT_MIN_MS = 10;

export interface BufferStats {
  received: number;
  served: number;
  buffered: number;
  burned: number;
  givenBack: number;
  refills: number;
}

export class BlockBuffer {
  /**
   * The current block: the next id, ids left in it, its step. While every id of the block is a
   * safe integer (`small`) the cursor is the number `curN` (a number add is much cheaper than a
   * bigint add, and `BigInt(n)` makes the id); otherwise the bigint `cur`.
   */
  private small = true;
  private curN = 0;
  private stepN = 1;
  private cur = 0n;
  private left = 0;
  private step = 1n;
  /** The current block itself (for the give-back of its tail). */
  private current: Block | undefined;
  private readonly ahead: Block[] = [];
  private aheadIds = 0;
  /** Per residue class (`step:residue`), the highest id ever held. */
  private readonly highest = new Map<string, bigint>();
  /** `take` calls `onLow` when `left` falls below this (-1: never). */
  private wakeBelow = -1;
  inFlight = false;
  private received = 0;
  private burned = 0;
  private givenBack = 0;
  refills = 0;
  private rate: number;
  private recentRate = 0;
  private servedAtObserve = 0;
  private lastObserveMs: number | undefined;

  /**
   * `onLow` is called when a take brings the buffer below its low-water mark (armed), `onEmpty`
   * when a take finds it empty.
   */
  constructor(
    readonly policy: BufferPolicy,
    private readonly onLow: () => void,
    private readonly onEmpty: () => void,
  ) {
    // Start as if demand filled a minimum block per buffer period.
    this.rate = policy.minBlock / policy.bufferSeconds;
  }

  /** The next id, or `undefined` when the buffer is empty. */
  take(): bigint | undefined {
    if (this.left > 0) {
      if (this.small) {
        const n = this.curN;
        this.curN = n + this.stepN;
        if (--this.left < this.wakeBelow) this.onLow();
        return BigInt(n);
      }
      const id = this.cur;
      this.cur = id + this.step;
      if (--this.left < this.wakeBelow) this.onLow();
      return id;
    }
    if (this.advance()) return this.take();
    this.onEmpty();
    return undefined;
  }

  /** The next id of the current block (`left` > 0 or not). */
  private get cursor(): bigint {
    return this.small ? BigInt(this.curN) : this.cur;
  }

  /** Up to `max` ids into `out`, in order; how many. */
  takeMany(max: number, out: bigint[]): number {
    let n = 0;
    while (n < max) {
      const id = this.take();
      if (id === undefined) break;
      out.push(id);
      n++;
    }
    return n;
  }

  /** The next block ahead becomes the current one; false when there is none. */
  private advance(): boolean {
    const next = this.ahead.shift();
    if (next === undefined) {
      this.current = undefined;
      return false;
    }
    const len = blockLen(next);
    this.aheadIds -= len;
    this.current = next;
    this.small = next.end <= SAFE_END;
    this.cur = next.start;
    this.step = next.step;
    this.curN = Number(next.start);
    this.stepN = Number(next.step);
    this.left = len;
    this.rearm();
    return true;
  }

  get buffered(): number {
    return this.left + this.aheadIds;
  }

  get served(): number {
    return this.received - this.buffered - this.burned - this.givenBack;
  }

  /** Recomputes the low-water threshold on `left` (after any change but a take). */
  rearm(): void {
    this.wakeBelow = this.inFlight ? -1 : this.lowWaterMark() - this.aheadIds;
  }

  /** Whether a refill is wanted now (below the low-water mark, none in flight). */
  wantsRefill(): boolean {
    return !this.inFlight && this.buffered < this.lowWaterMark();
  }

  /** Folds the ids served since the last call into the demand average. */
  observe(nowMs: number): void {
    const served = this.served;
    if (this.lastObserveMs === undefined) {
      this.lastObserveMs = nowMs;
      this.servedAtObserve = served;
      return;
    }
    const dtMs = nowMs - this.lastObserveMs;
    if (dtMs < 1) return;
    const dt = dtMs / 1000;
    const rate = Math.max(0, served - this.servedAtObserve) / dt;
    const alpha = 1 - Math.exp(-dt / this.policy.demandWindow);
    this.rate += alpha * (rate - this.rate);
    if (dtMs >= RECENT_MIN_MS) this.recentRate = rate;
    this.lastObserveMs = nowMs;
    this.servedAtObserve = served;
  }

  get demandPerSec(): number {
    return this.rate;
  }

  /** The block size the next refill asks for. */
  targetBlock(): number {
    const { bufferSeconds, minBlock, maxBlock } = this.policy;
    const want = Math.ceil(Math.max(this.rate, this.recentRate) * bufferSeconds);
    return Math.min(maxBlock, Math.max(minBlock, want));
  }

  lowWaterMark(): number {
    return Math.max(1, Math.ceil(this.targetBlock() * this.policy.lowWater));
  }

  /** Marks a refill in flight and says how many ids to ask for; `force` ignores the level. */
  startRefill(nowMs: number, force: boolean): number | undefined {
    this.observe(nowMs);
    if (this.inFlight || !(force || this.buffered < this.lowWaterMark())) return undefined;
    this.inFlight = true;
    this.rearm();
    return this.targetBlock();
  }

  /** No `onLow` calls until the next change (a refill that could not start now). */
  disarm(): void {
    this.wakeBelow = -1;
  }

  refillFailed(): void {
    this.inFlight = false;
    this.rearm();
  }

  /**
   * Adds a granted block: the part above every id held of its class. Returns the part kept
   * (`undefined` if none); the rest is counted burned.
   */
  push(block: Block, fromRefill: boolean): Block | undefined {
    if (fromRefill) {
      this.inFlight = false;
      this.refills++;
    }
    const len = blockLen(block);
    this.received += len;
    const cls = `${block.step}:${block.start % block.step}`;
    const highest = this.highest.get(cls);
    let kept: Block | undefined = block;
    if (highest !== undefined && block.start <= highest) {
      const below = (highest - block.start) / block.step + 1n;
      const start = block.start + below * block.step;
      kept = start < block.end ? { start, end: block.end, step: block.step } : undefined;
      this.burned += len - (kept === undefined ? 0 : blockLen(kept));
    }
    if (kept !== undefined) {
      const keptLen = blockLen(kept);
      this.highest.set(cls, kept.start + BigInt(keptLen - 1) * kept.step);
      this.ahead.push(kept);
      this.aheadIds += keptLen;
    }
    this.rearm();
    return kept;
  }

  /**
   * Empties the buffer for `close`: for the give-back, the ids held that end with `newest`
   * (still held, its tail or all of it) and run back without a gap, down to `from` (the first
   * id its lease covers; `newest.start` when absent); every other id held is counted burned.
   */
  drain(newest: Block | undefined, from?: bigint): Block | undefined {
    let tail: Block | undefined;
    const held: Block[] = [];
    if (this.current !== undefined && this.left > 0) {
      held.push({ start: this.cursor, end: this.current.end, step: this.step });
    }
    held.push(...this.ahead);
    const last = held[held.length - 1];
    if (newest !== undefined && last !== undefined && last.end === newest.end && last.start >= newest.start) {
      const floor = from ?? newest.start;
      let start = last.start;
      for (let i = held.length - 2; i >= 0; i--) {
        const b = held[i] as Block;
        const meets = b.step === newest.step && b.start + BigInt(blockLen(b)) * b.step === start;
        if (!meets || b.start < floor) break;
        start = b.start;
      }
      tail = { start, end: newest.end, step: newest.step };
    }
    const tailLen = tail === undefined ? 0 : blockLen(tail);
    this.burned += this.buffered - tailLen;
    // Counted as given back until the node's answer says otherwise (`tailRefused`).
    this.givenBack += tailLen;
    this.left = 0;
    this.ahead.length = 0;
    this.aheadIds = 0;
    this.current = undefined;
    this.wakeBelow = -1;
    return tail;
  }

  /** The node refused (or never answered) the give-back of `n` ids: they are burned. */
  tailRefused(n: number): void {
    this.givenBack -= n;
    this.burned += n;
  }

  stats(): BufferStats {
    return {
      received: this.received,
      served: this.served,
      buffered: this.buffered,
      burned: this.burned,
      givenBack: this.givenBack,
      refills: this.refills,
    };
  }
}
