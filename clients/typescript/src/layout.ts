//! Bit layouts of 64-bit time-ordered ids, the same as the node's (crates/core/src/layout.rs):
//! a timestamp in whole time units since an epoch, then a node field and a sequence field in
//! one of two orders. The presets are the node's, by the same names.
//!
//! Invariants: a `Layout` always fits its bit limit (63, or 53 for JavaScript-safe ids), has
//! at least one timestamp bit and a time unit from 1 microsecond to 1 day; all arithmetic is
//! on `bigint`, saturating at 2^64 - 1 where the node's does.

import { DecodeError, InvalidConfigError } from "./errors.js";

export type FieldOrder = "node_then_sequence" | "sequence_then_node";

export interface LayoutSpec {
  timestampBits: number;
  nodeBits: number;
  sequenceBits: number;
  /** One time unit, in nanoseconds (1,000 to 86,400,000,000,000). */
  unitNanos: bigint;
  epochUnixMs: bigint;
  order: FieldOrder;
  /** The most bits an id may use: 63, or 53 for JavaScript-safe ids. */
  maxBits: number;
}

export type PresetName = "twitter" | "snowflake" | "instagram" | "sonyflake" | "discord" | "js53";

export const PRESETS: readonly PresetName[] = ["twitter", "instagram", "sonyflake", "discord", "js53"];

const MS = 1_000_000n;
const U64_MAX = (1n << 64n) - 1n;

const PRESET_SPECS: Record<Exclude<PresetName, "snowflake">, LayoutSpec> = {
  twitter: spec(41, 10, 12, MS, 1_288_834_974_657n, "node_then_sequence", 63),
  instagram: spec(40, 13, 10, MS, 1_314_220_021_721n, "node_then_sequence", 63),
  sonyflake: spec(39, 16, 8, 10n * MS, 1_409_529_600_000n, "sequence_then_node", 63),
  discord: spec(41, 10, 12, MS, 1_420_070_400_000n, "node_then_sequence", 63),
  js53: spec(41, 5, 7, MS, 1_735_689_600_000n, "node_then_sequence", 53),
};

function spec(
  timestampBits: number,
  nodeBits: number,
  sequenceBits: number,
  unitNanos: bigint,
  epochUnixMs: bigint,
  order: FieldOrder,
  maxBits: number,
): LayoutSpec {
  return { timestampBits, nodeBits, sequenceBits, unitNanos, epochUnixMs, order, maxBits };
}

/** The fields of an id and the start of its time unit. */
export interface Parts {
  timestamp: bigint;
  node: number;
  sequence: number;
  /** Start of the id's time unit, nanoseconds since the Unix epoch (saturating at 2^64 - 1). */
  unixNanos: bigint;
}

/** A validated layout. */
export class Layout {
  readonly spec: Readonly<LayoutSpec>;
  readonly totalBits: number;
  private readonly timestampShift: bigint;
  private readonly nodeShift: bigint;
  private readonly sequenceShift: bigint;
  private readonly epochNanos: bigint;

  constructor(s: LayoutSpec) {
    const bitsOk = (n: number) => Number.isInteger(n) && n >= 0 && n <= 63;
    if (!bitsOk(s.timestampBits) || !bitsOk(s.nodeBits) || !bitsOk(s.sequenceBits) || !bitsOk(s.maxBits)) {
      throw new InvalidConfigError("layout bit counts are whole numbers from 0 to 63");
    }
    if (s.timestampBits === 0) throw new InvalidConfigError("the timestamp needs at least 1 bit");
    const total = s.timestampBits + s.nodeBits + s.sequenceBits;
    if (total > s.maxBits) {
      throw new InvalidConfigError(
        `timestamp ${s.timestampBits} + node ${s.nodeBits} + sequence ${s.sequenceBits} = ${total} bits, more than the ${s.maxBits} allowed`,
      );
    }
    if (s.unitNanos < 1000n) throw new InvalidConfigError("the time unit is too short; the shortest is 1 microsecond");
    if (s.unitNanos > 86_400n * 1_000_000_000n) throw new InvalidConfigError("the time unit is too long; the longest is 1 day");
    if (s.epochUnixMs < 0n || s.epochUnixMs * MS > U64_MAX) {
      throw new InvalidConfigError(`epoch ${s.epochUnixMs} ms is too far in the future`);
    }
    this.spec = Object.freeze({ ...s });
    this.totalBits = total;
    this.timestampShift = BigInt(s.nodeBits + s.sequenceBits);
    this.nodeShift = s.order === "node_then_sequence" ? BigInt(s.sequenceBits) : 0n;
    this.sequenceShift = s.order === "node_then_sequence" ? 0n : BigInt(s.nodeBits);
    this.epochNanos = s.epochUnixMs * MS;
  }

  /** A preset by name (`snowflake` is `twitter`), with its epoch replaced when given. */
  static preset(name: string, epochUnixMs?: bigint | number): Layout {
    const key = name === "snowflake" ? "twitter" : name;
    const base = (PRESET_SPECS as Record<string, LayoutSpec | undefined>)[key];
    if (base === undefined) {
      throw new InvalidConfigError(`unknown layout preset ${JSON.stringify(name)}; known: ${PRESETS.join(", ")}`);
    }
    return new Layout(epochUnixMs === undefined ? base : { ...base, epochUnixMs: BigInt(epochUnixMs) });
  }

  /**
   * A custom layout as `idmint decode --bits TS,NODE,SEQ --unit U --epoch MS` builds it: node
   * before sequence, at most 63 bits, unit `1ms` and epoch 0 unless given.
   */
  static custom(bits: [number, number, number], unit = "1ms", epochUnixMs: bigint | number = 0n): Layout {
    const [timestampBits, nodeBits, sequenceBits] = bits;
    return new Layout(
      spec(timestampBits, nodeBits, sequenceBits, parseUnit(unit), BigInt(epochUnixMs), "node_then_sequence", 63),
    );
  }

  /** Whether every id of the layout is a safe JavaScript integer (below 2^53). */
  get jsSafe(): boolean {
    return this.totalBits <= 53;
  }

  /** Splits `id` into its fields; fails if it has bits above the layout's. */
  decode(id: bigint): Parts {
    if (id < 0n || id > U64_MAX) throw new DecodeError(`${id} is not a 64-bit unsigned id`);
    if (id >> BigInt(this.totalBits) !== 0n) {
      throw new DecodeError(`id ${id} has bits above the layout's ${this.totalBits}`);
    }
    const mask = (bits: number) => (1n << BigInt(bits)) - 1n;
    const timestamp = id >> this.timestampShift;
    const node = (id >> this.nodeShift) & mask(this.spec.nodeBits);
    const sequence = (id >> this.sequenceShift) & mask(this.spec.sequenceBits);
    let unixNanos = timestamp * this.spec.unitNanos + this.epochNanos;
    if (unixNanos > U64_MAX) unixNanos = U64_MAX;
    return { timestamp, node: Number(node), sequence: Number(sequence), unixNanos };
  }
}

/** A time unit: a whole number with `us`, `ms` or `s` (`1ms`, `10ms`, `1s`), in nanoseconds. */
export function parseUnit(text: string): bigint {
  const m = /^\s*(\d+)\s*(us|µs|ms|s)\s*$/.exec(text);
  if (m === null || m[1] === undefined || m[2] === undefined) {
    throw new InvalidConfigError(`${JSON.stringify(text)}: expected a number and a unit, e.g. 1ms, 10ms, 1s`);
  }
  const n = BigInt(m[1]);
  const per = m[2] === "s" ? 1_000_000_000n : m[2] === "ms" ? MS : 1000n;
  return n * per;
}
