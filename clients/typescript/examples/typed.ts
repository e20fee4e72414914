// The README's typed handles as a program. run_tests.sh compiles it with `tsc --strict` against
// the packed package (ESM) and test/examples.test.mjs runs it against a node, so the static
// types it relies on are the types the ids have at run time.
import { Client, WrongKindError, decode, type NamespaceStats } from "@idmint/client";

export async function main(urls: string[], transport: "grpc" | "http" = "grpc"): Promise<void> {
  const client = new Client(urls, { transport });
  try {
    const photos = client.sequence("seq"); // Ids<bigint>
    const id: bigint = await photos.next(); // 1n: a bigint
    const ids: bigint[] = await photos.nextBatch(3);
    if (ids[0] !== id + 1n || ids[2] !== id + 3n) throw new Error(`not consecutive: ${id} ${ids.join()}`);
    const held: bigint | undefined = photos.tryNext(); // no network, no waiting
    if (held !== undefined && held <= id + 3n) throw new Error("tryNext went back");

    const event: bigint = await client.snowflake("flake").next();
    const session: string = await client.uuid7("uuids").next(); // canonical text
    const token: string = await client.ulid("ulids").next();
    // @ts-expect-error a UUIDv7 handle's ids are text, never bigint
    const notABigint: bigint = await client.uuid7("uuids").next();
    if (typeof notABigint !== "string") throw new Error("a uuid7 id that is not text");
    if (event <= 2n ** 53n || session[14] !== "7" || token.length !== 26) {
      throw new Error(`unexpected ids: ${event} ${session} ${token}`);
    }
    if (decode(event.toString(), "twitter").kind !== "snowflake") throw new Error("not a snowflake id");

    try {
      await client.sequence("flake").next(); // a snowflake namespace
      throw new Error("a sequence handle of a snowflake namespace took an id");
    } catch (e) {
      if (!(e instanceof WrongKindError) || e.code !== "wrong_kind") throw e;
    }

    const untyped: bigint | string = await client.next("seq"); // the untyped call stays
    if (typeof untyped !== "bigint" || untyped <= id) throw new Error(`untyped ${untyped}`);
    const stats: NamespaceStats | undefined = photos.stats();
    if (stats?.kind !== "sequence" || stats.served < 5) throw new Error(`stats ${JSON.stringify(stats)}`);
  } finally {
    await client.close(); // hands the unused tail back
  }
}
