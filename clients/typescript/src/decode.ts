//! Offline decoding: what an id says about itself, with the same answers as `idmint decode
//! --json` (crates/cli/src/decode.rs): a snowflake id by a preset or custom layout, a UUIDv7 or
//! a ULID by its text. Field names and values are the CLI's; `unix_ms` is a `number` (48 bits
//! at most, always safe), `id` is text.
//!
//! Invariant: parsing is as strict as the node's: a snowflake id is a decimal 64-bit number
//! within the layout's bits, a UUIDv7 has version 7 and the RFC variant (36 characters with
//! hyphens, or 32 hex digits), a ULID is 26 Crockford base32 characters whose first is 0-7.

import { DecodeError } from "./errors.js";
import { Layout } from "./layout.js";

/** The last Unix millisecond RFC 3339 can write: 9999-12-31T23:59:59.999Z. */
export const RFC3339_MAX_UNIX_MS = 253_402_300_799_999;

export interface DecodedSnowflake {
  kind: "snowflake";
  /** The preset's name, or `custom`. */
  layout: string;
  id: string;
  timestamp: string;
  unix_ms: number;
  /** The node field, named as the layout names it. */
  worker?: number;
  process?: number;
  shard?: number;
  machine?: number;
  node?: number;
  sequence: number;
}

export interface DecodedTime {
  kind: "uuid7" | "ulid";
  /** The canonical text: lowercase UUID, uppercase ULID. */
  id: string;
  /** RFC 3339 with milliseconds; `null` past the year 9999. */
  timestamp: string | null;
  unix_ms: number;
}

export type Decoded = DecodedSnowflake | DecodedTime;

/** `unix_ms` as RFC 3339 in UTC with milliseconds, or `null` past the year 9999. */
export function rfc3339Millis(unixMs: number): string | null {
  if (unixMs > RFC3339_MAX_UNIX_MS) return null;
  return new Date(unixMs).toISOString();
}

/** A decimal 64-bit id (`+` allowed in front, as the node's parser does). */
export function parseU64(text: string): bigint {
  if (!/^\+?[0-9]+$/.test(text)) throw new DecodeError(`${JSON.stringify(text)} is not a decimal 64-bit id`);
  const n = BigInt(text);
  if (n >= 1n << 64n) throw new DecodeError(`${JSON.stringify(text)} is not a decimal 64-bit id`);
  return n;
}

/**
 * Decodes a snowflake id with `layout`: a preset's name (`twitter`, `snowflake`, `instagram`,
 * `sonyflake`, `discord`, `js53`) or a `Layout` (named `custom` unless `name` says otherwise).
 */
export function decodeSnowflake(id: string | bigint, layout: string | Layout, name?: string): DecodedSnowflake {
  const resolved = typeof layout === "string" ? Layout.preset(layout) : layout;
  const label = name ?? (typeof layout === "string" ? layout : "custom");
  const n = typeof id === "bigint" ? id : parseU64(id.trim());
  const parts = resolved.decode(n);
  const unixMs = Number(parts.unixNanos / 1_000_000n);
  return {
    kind: "snowflake",
    layout: label,
    id: n.toString(),
    timestamp: rfc3339Millis(unixMs) ?? `${unixMs} ms after 1970 (past year 9999)`,
    unix_ms: unixMs,
    ...nodeField(label, parts.node),
    sequence: parts.sequence,
  };
}

/** The node field as the layout names it (the CLI's names). */
function nodeField(layout: string, node: number): Partial<DecodedSnowflake> {
  switch (layout) {
    case "discord":
      // Discord's 10-bit node field is a 5-bit worker above a 5-bit process.
      return { worker: node >> 5, process: node & 0x1f };
    case "instagram":
      return { shard: node };
    case "sonyflake":
      return { machine: node };
    case "twitter":
    case "snowflake":
    case "js53":
      return { worker: node };
    default:
      return { node };
  }
}

const HEX = /^[0-9a-fA-F]$/;

/** The 128-bit value of UUIDv7 text (36 characters with hyphens, or 32 hex digits). */
export function parseUuid7(text: string): bigint {
  const hyphenated = text.length === 36;
  if (!hyphenated && text.length !== 32) {
    throw new DecodeError(`${JSON.stringify(text)} is not a UUIDv7: expected 36 characters (or 32 without hyphens), got ${text.length}`);
  }
  let hex = "";
  for (let i = 0; i < text.length; i++) {
    const c = text[i] ?? "";
    if (hyphenated && (i === 8 || i === 13 || i === 18 || i === 23)) {
      if (c !== "-") throw new DecodeError(`${JSON.stringify(text)} is not a UUIDv7: ${JSON.stringify(c)} at position ${i}`);
      continue;
    }
    if (!HEX.test(c)) throw new DecodeError(`${JSON.stringify(text)} is not a UUIDv7: ${JSON.stringify(c)} at position ${i}`);
    hex += c;
  }
  const v = BigInt("0x" + hex);
  const version = Number((v >> 76n) & 0xfn);
  if (version !== 7) throw new DecodeError(`${JSON.stringify(text)} is not a UUIDv7: version ${version}`);
  if (((v >> 62n) & 0b11n) !== 0b10n) throw new DecodeError(`${JSON.stringify(text)} is not a UUIDv7: not the RFC 9562 variant`);
  return v;
}

/** Canonical UUID text (lowercase, 8-4-4-4-12) of a 128-bit value. */
export function uuidText(v: bigint): string {
  const h = v.toString(16).padStart(32, "0");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const ULID_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/** The 128-bit value of ULID text: 26 Crockford base32 characters, the first 0-7. */
export function parseUlid(text: string): bigint {
  if (text.length !== 26) throw new DecodeError(`${JSON.stringify(text)} is not a ULID: expected 26 characters, got ${text.length}`);
  let v = 0n;
  for (let i = 0; i < 26; i++) {
    const c = text[i] ?? "";
    const d = ULID_ALPHABET.indexOf(c.toUpperCase());
    if (d < 0 || c.length !== 1) throw new DecodeError(`${JSON.stringify(text)} is not a ULID: ${JSON.stringify(c)} at position ${i}`);
    if (i === 0 && d > 7) throw new DecodeError(`${JSON.stringify(text)} is not a ULID: above 128 bits`);
    v = (v << 5n) | BigInt(d);
  }
  return v;
}

/** Canonical ULID text (uppercase) of a 128-bit value. */
export function ulidText(v: bigint): string {
  let out = "";
  for (let i = 0; i < 26; i++) out += ULID_ALPHABET[Number((v >> BigInt(5 * (25 - i))) & 31n)];
  return out;
}

function timeRecord(kind: "uuid7" | "ulid", id: string, v: bigint): DecodedTime {
  const unixMs = Number(v >> 80n);
  return { kind, id, timestamp: rfc3339Millis(unixMs), unix_ms: unixMs };
}

export function decodeUuid7(text: string): DecodedTime {
  const v = parseUuid7(text.trim());
  return timeRecord("uuid7", uuidText(v), v);
}

export function decodeUlid(text: string): DecodedTime {
  const v = parseUlid(text.trim());
  return timeRecord("ulid", ulidText(v), v);
}

/**
 * Decodes `id` as `idmint decode --layout <kind>` does: `kind` is a preset's name, `uuid7` or
 * `ulid`, or a custom `Layout`. `epochUnixMs` replaces a preset's epoch (as `--epoch`).
 */
export function decode(id: string | bigint, kind: string | Layout, epochUnixMs?: bigint | number): Decoded {
  if (kind === "uuid7" || kind === "ulid") {
    if (epochUnixMs !== undefined) throw new DecodeError(`an epoch applies to snowflake layouts, not ${kind}`);
    if (typeof id !== "string") throw new DecodeError(`a ${kind} is decoded from its text`);
    return kind === "uuid7" ? decodeUuid7(id) : decodeUlid(id);
  }
  if (typeof kind === "string") return decodeSnowflake(id, Layout.preset(kind, epochUnixMs), kind);
  return decodeSnowflake(id, kind, "custom");
}
