// A CommonJS TypeScript module using the package: run_tests.sh compiles it with `tsc --strict`
// (module NodeNext: `import` becomes `require`, resolved through the package's `require`
// condition to dist/cjs) and test/examples.test.mjs runs the output with `require`.
import { Client, UnknownNamespaceError } from "@idmint/client";
import { registerMetrics } from "@idmint/client/metrics";
import { Registry } from "prom-client";

export async function main(urls: string[]): Promise<{ id: bigint; metrics: string; unknown: boolean }> {
  const client = new Client(urls);
  const registry = new Registry();
  registerMetrics(client, registry);
  try {
    const id: bigint = await client.sequence("seq").next();
    const unknown = await client.ulid("absent").next().then(
      () => false,
      (e: unknown) => e instanceof UnknownNamespaceError,
    );
    return { id, metrics: await registry.metrics(), unknown };
  } finally {
    await client.close();
  }
}
