// Starts and stops the conformance suite's topologies (clients/conformance/README.md): real
// `idmint serve` processes on free loopback ports, each with a temporary data directory, and
// certificates from certs.sh, a PostgreSQL database for a topology with `"postgres": true`
// (dropped after its nodes stop); every process is stopped (SIGTERM, SIGKILL after 5 s) and every
// directory removed, also when a test fails.

import { spawn, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { request } from "node:https";
import { request as plainRequest } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

/** The repository root: $IDMINT_REPO, else two levels above this package's test/. */
export const REPO = process.env.IDMINT_REPO ?? resolve(here, "..", "..", "..");
export const CONFORMANCE = join(REPO, "clients", "conformance");

/** The idmint binary: $IDMINT_BIN, else <repo>/target/debug/idmint; missing is a failure. */
export function idmintBin() {
  const bin = process.env.IDMINT_BIN ?? join(REPO, "target", "debug", "idmint");
  if (!existsSync(bin)) throw new Error(`the idmint binary ${bin} is missing: build it (cargo build -p idmint-cli) or set IDMINT_BIN`);
  return bin;
}

export function loadScenarios() {
  return JSON.parse(readFileSync(join(CONFORMANCE, "scenarios.json"), "utf8"));
}

/** A free loopback port (the listener is closed before the node binds it). */
export function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

/** Every node process still running: killed if this process exits before stopping them. */
const live = new Set();
process.on("exit", () => {
  for (const proc of live) proc.kill("SIGKILL");
});

/** One started node. */
class Node {
  constructor(name, proc, http, grpc, dir) {
    Object.assign(this, { name, proc, http, grpc, dir });
    this.exited = new Promise((ok) => proc.once("exit", ok));
    this.running = true;
    this.exited.then(() => (this.running = false));
  }

  async kill(signal = "SIGKILL") {
    if (this.running) this.proc.kill(signal);
    await this.exited;
  }

  async stop() {
    if (this.running) {
      this.proc.kill("SIGTERM");
      const timer = setTimeout(() => this.running && this.proc.kill("SIGKILL"), 5000);
      await this.exited;
      clearTimeout(timer);
    }
  }
}

function startNode(bin, name, config, dir) {
  const file = join(dir, "node.toml");
  writeFileSync(file, config);
  const proc = spawn(bin, ["serve", "--config", file, "--init"], { stdio: ["ignore", "pipe", "pipe"] });
  live.add(proc);
  proc.once("exit", () => live.delete(proc));
  let stderr = "";
  proc.stderr.on("data", (d) => (stderr = (stderr + d).slice(-8000)));
  return new Promise((ok, fail) => {
    let out = "";
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      fail(new Error(`node ${name} did not listen within 30 s; stderr:\n${stderr}`));
    }, 30_000);
    proc.stdout.on("data", (d) => {
      out += d;
      if (out.split("\n").some((l) => l.startsWith("idmint listening on "))) {
        clearTimeout(timer);
        ok(proc);
      }
    });
    proc.once("exit", (code) => {
      clearTimeout(timer);
      fail(new Error(`node ${name} exited (${code}) before listening; stderr:\n${stderr}`));
    });
  });
}

/**
 * A fresh PostgreSQL database for a topology with `"postgres": true`, made and dropped with
 * `psql` on $IDMINT_TEST_POSTGRES_ADDR (default 127.0.0.1:5432) as $IDMINT_TEST_POSTGRES_USER
 * (default postgres). An unreachable server, or psql missing, fails with how to fix it.
 */
let databases = 0;
class TempDatabase {
  constructor() {
    const addr = process.env.IDMINT_TEST_POSTGRES_ADDR ?? "127.0.0.1:5432";
    const colon = addr.lastIndexOf(":");
    this.host = addr.slice(0, colon);
    this.port = addr.slice(colon + 1);
    this.user = process.env.IDMINT_TEST_POSTGRES_USER ?? "postgres";
    this.name = `idmint_test_js_${process.pid}_${Date.now()}_${databases++}`;
    this.psql(`CREATE DATABASE "${this.name}"`);
  }

  psql(sql) {
    const password = process.env.IDMINT_TEST_POSTGRES_PASSWORD;
    try {
      execFileSync("psql", ["-h", this.host, "-p", this.port, "-U", this.user, "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", sql], {
        stdio: ["ignore", "ignore", "pipe"],
        env: { ...process.env, ...(password === undefined ? {} : { PGPASSWORD: password }) },
      });
    } catch (e) {
      throw new Error(
        `PostgreSQL at ${this.host}:${this.port} refused ${sql} (${e.code ?? e.stderr ?? e.message}): the owned-shard topology needs psql and a server ` +
          "with trust authentication for user postgres (or IDMINT_TEST_POSTGRES_ADDR/_USER/_PASSWORD)",
      );
    }
  }

  url() {
    const password = process.env.IDMINT_TEST_POSTGRES_PASSWORD;
    const url = `host=${this.host} port=${this.port} user=${this.user} dbname=${this.name}`;
    return password === undefined ? url : `${url} password='${password}'`;
  }

  drop() {
    this.psql(`DROP DATABASE IF EXISTS "${this.name}" WITH (FORCE)`);
  }
}

/** A running topology: its nodes, the certificate directory, and how a client reaches them. */
export class Topology {
  static async start(spec) {
    const bin = idmintBin();
    const t = new Topology();
    t.spec = spec;
    t.nodes = new Map();
    t.dirs = [];
    t.certs = undefined;
    t.postgres = undefined;
    try {
      if (spec.postgres) t.postgres = new TempDatabase();
      if (spec.certs) {
        t.certs = mkdtempSync(join(tmpdir(), "idmint-certs-"));
        t.dirs.push(t.certs);
        execFileSync("bash", [join(CONFORMANCE, "certs.sh"), t.certs], { stdio: ["ignore", "ignore", "inherit"] });
      }
      for (const n of spec.nodes) {
        const dir = mkdtempSync(join(tmpdir(), `idmint-node-${n.name}-`));
        t.dirs.push(dir);
        const http = await freePort();
        const grpc = await freePort();
        let upstream = "";
        if (n.upstream === "closed-port") upstream = `http://127.0.0.1:${await freePort()}`;
        else if (n.upstream !== undefined) {
          const up = t.nodes.get(n.upstream);
          if (up === undefined) throw new Error(`node ${n.name}: upstream ${n.upstream} is not started before it`);
          upstream = `http://127.0.0.1:${up.grpc}`;
        }
        const data = join(dir, "data");
        const config = readFileSync(join(CONFORMANCE, n.template), "utf8")
          .replaceAll("{{HTTP}}", `127.0.0.1:${http}`)
          .replaceAll("{{GRPC}}", `127.0.0.1:${grpc}`)
          .replaceAll("{{DATA_DIR}}", data)
          .replaceAll("{{CERTS}}", t.certs ?? "")
          .replaceAll("{{UPSTREAM}}", upstream)
          .replaceAll("{{POSTGRES}}", t.postgres?.url() ?? "");
        for (const left of config.match(/\{\{[A-Z_]+\}\}/g) ?? []) throw new Error(`${n.template}: unknown placeholder ${left}`);
        const proc = await startNode(bin, n.name, config, dir);
        t.nodes.set(n.name, new Node(n.name, proc, http, grpc, dir));
      }
    } catch (e) {
      await t.stop();
      throw e;
    }
    return t;
  }

  get scheme() {
    return this.spec.certs ? "https" : "http";
  }

  /** The client's urls for `transport`, in the topology's order. */
  urls(transport) {
    return this.spec.client.map((name) => {
      const n = this.nodes.get(name);
      return `${this.scheme}://127.0.0.1:${transport === "http" ? n.http : n.grpc}`;
    });
  }

  /** GET `path` from the HTTP port of the client's first node, with the scenario's credentials. */
  getJson(path, creds) {
    return this.requestJson("GET", path, creds);
  }

  /** `method` `path` on the HTTP port of the client's first node; its JSON answer (200 only). */
  requestJson(method, path, creds = {}) {
    const n = this.nodes.get(this.spec.client[0]);
    const headers = creds.token ? { authorization: `Bearer ${creds.token}` } : {};
    const options = { method, host: "127.0.0.1", port: n.http, path, headers };
    const send = this.spec.certs ? request : plainRequest;
    if (this.spec.certs) Object.assign(options, { ca: creds.ca, cert: creds.cert, key: creds.key });
    return new Promise((ok, fail) => {
      const req = send(options, (res) => {
        let body = "";
        res.on("data", (d) => (body += d));
        res.on("end", () => (res.statusCode === 200 ? ok(JSON.parse(body)) : fail(new Error(`${method} ${path}: ${res.statusCode} ${body}`))));
      });
      req.on("error", fail);
      req.end();
    });
  }

  async stop() {
    await Promise.all([...this.nodes.values()].map((n) => n.stop()));
    for (const d of this.dirs) rmSync(d, { recursive: true, force: true });
    const db = this.postgres;
    this.postgres = undefined;
    db?.drop();
  }

  /** The sum over the nodes of the counter line `name{labels}` of `GET /metrics` (plain HTTP). */
  async metric(line) {
    let total = 0;
    for (const n of this.nodes.values()) {
      const text = await new Promise((ok, fail) => {
        const req = plainRequest({ host: "127.0.0.1", port: n.http, path: "/metrics" }, (res) => {
          let body = "";
          res.on("data", (d) => (body += d));
          res.on("end", () => ok(body));
        });
        req.on("error", fail);
        req.end();
      });
      const found = text.split("\n").find((l) => l.startsWith(`${line} `));
      total += found === undefined ? 0 : Number(found.slice(line.length + 1));
    }
    return total;
  }
}
