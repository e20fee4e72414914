//! Live topologies of the suite: `idmint serve` processes started as
//! clients/conformance/README.md says (fresh loopback ports and data directories, the templates
//! filled, `serve --config FILE --init`, up once stdout prints `idmint listening on `), and
//! stopped when the [`Topology`] drops (SIGTERM, SIGKILL after 5 s), also when a run fails.
//!
//! A topology with `"postgres": true` gets a fresh database (`{{POSTGRES}}`), dropped after its
//! nodes stop.
//!
//! Invariants: no node outlives its `Topology`; a node that exits before listening, or does not
//! listen within 30 s, is an error showing its stderr; the binary missing is an error saying how
//! to build it, never a skip.

use rustix::process::{kill_process, Pid, Signal};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The longest a node may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a node may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The binary under test: `$IDMINT_BIN`, else the `idmint` cargo built next to this test
/// (`target/debug/idmint` by default). An error, with the command to build it, when missing.
pub fn idmint_bin() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("IDMINT_BIN") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("IDMINT_BIN={} is not a file", path.display()))
        };
    }
    // target/<profile>/deps/conformance-<hash> → target/<profile>/idmint
    let exe = std::env::current_exe().map_err(|e| format!("locating this test: {e}"))?;
    let path = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("idmint"))
        .ok_or_else(|| format!("no target directory above {}", exe.display()))?;
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "the idmint binary is missing at {}: build it first with `cargo build --bin idmint` \
             (the conformance runner starts real nodes), or set IDMINT_BIN",
            path.display()
        ))
    }
}

/// A free loopback port: bound, then released.
fn free_port() -> Result<u16, String> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("binding a free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("reading a bound port: {e}"))
}

/// A fresh database on the test PostgreSQL server (`idmint_testkit::postgres`: it panics,
/// saying how to start the server, when it is unreachable), made on a thread of its own so a
/// caller inside a runtime is not blocked on.
fn temp_database() -> idmint_testkit::postgres::TempDatabase {
    std::thread::spawn(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("a runtime to create the test database: {e}"));
        runtime.block_on(idmint_testkit::postgres::TempDatabase::create())
    })
    .join()
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// One running node.
pub struct Node {
    /// The HTTP port.
    pub http: u16,
    /// The gRPC port.
    pub grpc: u16,
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Node {
    fn stderr_tail(&self) -> String {
        let text = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        let start = text.len().saturating_sub(2000);
        let start = (start..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        text[start..].to_owned()
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = i32::try_from(self.child.id()).ok().and_then(Pid::from_raw) {
            // The process may have exited already: nothing to signal then.
            let _ = kill_process(pid, signal);
        }
    }

    /// Waits up to `within` for the process to exit; whether it did.
    fn exited_within(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if matches!(self.child.try_wait(), Ok(Some(_)) | Err(_)) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL, and waits for the process to end.
    pub fn kill(&mut self) -> Result<(), String> {
        self.signal(Signal::KILL);
        self.child
            .wait()
            .map(|_| ())
            .map_err(|e| format!("waiting for a killed node: {e}"))
    }

    fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        self.signal(Signal::TERM);
        if !self.exited_within(STOP_TIMEOUT) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The nodes of one topology of scenarios.json, running; dropped, they stop.
pub struct Topology {
    /// The nodes by name.
    pub nodes: BTreeMap<String, Node>,
    /// The nodes the client is given, in order.
    pub client: Vec<String>,
    /// Whether the nodes serve TLS (`https://` urls).
    pub tls: bool,
    /// The certificates of `certs.sh`, when `tls`.
    pub certs: PathBuf,
    /// The topology's PostgreSQL database, when it has `"postgres": true`; dropped after the
    /// nodes stopped (fields drop after `Drop::drop`).
    postgres: Option<idmint_testkit::postgres::TempDatabase>,
    /// Removed after `drop` stopped the nodes (fields drop after `Drop::drop`).
    dir: TempDir,
}

impl Drop for Topology {
    fn drop(&mut self) {
        for node in self.nodes.values_mut() {
            node.stop();
        }
    }
}

impl Topology {
    /// Starts topology `name` of the suite `data`.
    pub fn start(data: &Value, name: &str) -> Result<Topology, String> {
        let spec = data
            .get("topologies")
            .and_then(|t| t.get(name))
            .ok_or_else(|| format!("no topology {name:?} in scenarios.json"))?;
        let bin = idmint_bin()?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("idmint-conformance-{name}-"))
            .tempdir()
            .map_err(|e| format!("making a temporary directory: {e}"))?;
        let tls = spec.get("certs").and_then(Value::as_bool).unwrap_or(false);
        let certs = dir.path().join("certs");
        let client = spec
            .get("client")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("topology {name}: no client list"))?
            .iter()
            .map(|n| n.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| format!("topology {name}: a client entry is not a name"))?;
        let postgres = if spec.get("postgres").and_then(Value::as_bool) == Some(true) {
            Some(temp_database())
        } else {
            None
        };
        let mut topology = Topology {
            nodes: BTreeMap::new(),
            client,
            tls,
            certs,
            postgres,
            dir,
        };
        if tls {
            topology.make_certs()?;
        }
        let nodes = spec
            .get("nodes")
            .and_then(Value::as_array)
            .ok_or_else(|| format!("topology {name}: no nodes"))?;
        for node in nodes {
            // On an error, the nodes started so far stop as `topology` drops.
            topology.start_node(&bin, node)?;
        }
        Ok(topology)
    }

    fn make_certs(&self) -> Result<(), String> {
        let script = super::suite::dir().join("certs.sh");
        let out = Command::new("bash")
            .arg(&script)
            .arg(&self.certs)
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "certs.sh failed ({}); it needs openssl: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    fn start_node(&mut self, bin: &Path, spec: &Value) -> Result<(), String> {
        use super::suite::Keys;
        let name = spec.str_at("name")?.to_owned();
        let template = spec.str_at("template")?;
        let (http, grpc) = (free_port()?, free_port()?);
        let data = self.dir.path().join(&name);
        std::fs::create_dir(&data).map_err(|e| format!("making {}: {e}", data.display()))?;
        let upstream = match spec.get("upstream").and_then(Value::as_str) {
            None => String::new(),
            Some("closed-port") => format!("http://127.0.0.1:{}", free_port()?),
            Some(other) => {
                let node = self
                    .nodes
                    .get(other)
                    .ok_or_else(|| format!("node {name}: upstream {other} is not started"))?;
                format!("http://127.0.0.1:{}", node.grpc)
            }
        };
        let template_path = super::suite::dir().join(template);
        let mut text = std::fs::read_to_string(&template_path)
            .map_err(|e| format!("reading {}: {e}", template_path.display()))?;
        let certs = self.certs.display().to_string();
        let data_dir = data.display().to_string();
        for (key, value) in [
            ("HTTP", format!("127.0.0.1:{http}")),
            ("GRPC", format!("127.0.0.1:{grpc}")),
            ("DATA_DIR", data_dir),
            ("CERTS", certs),
            ("UPSTREAM", upstream),
            (
                "POSTGRES",
                self.postgres
                    .as_ref()
                    .map(idmint_testkit::postgres::TempDatabase::url)
                    .unwrap_or_default(),
            ),
        ] {
            text = text.replace(&format!("{{{{{key}}}}}"), &value);
        }
        let config = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, text).map_err(|e| format!("writing {}: {e}", config.display()))?;
        let mut child = Command::new(bin)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--init")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let stdout = child.stdout.take();
        let stderr_pipe = child.stderr.take();
        let stderr = Arc::new(Mutex::new(String::new()));
        let node = Node {
            http,
            grpc,
            child,
            stderr: stderr.clone(),
        };
        self.nodes.insert(name.clone(), node);
        if let Some(mut pipe) = stderr_pipe {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    stderr
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        let (lines, listening) = mpsc::channel();
        if let Some(pipe) = stdout {
            // Reads stdout to its end, so the node never blocks on a full pipe.
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if line.starts_with("idmint listening on ") {
                        let _ = lines.send(());
                    }
                }
            });
        }
        match listening.recv_timeout(START_TIMEOUT) {
            Ok(()) => Ok(()),
            Err(why) => {
                let node = self.nodes.get_mut(&name).ok_or("the node just inserted")?;
                let exited = node.exited_within(Duration::from_secs(2));
                Err(format!(
                    "node {name} {}; its stderr: {}",
                    match (why, exited) {
                        (mpsc::RecvTimeoutError::Timeout, false) =>
                            format!("did not listen within {START_TIMEOUT:?}"),
                        _ => format!("exited before listening ({:?})", node.child.try_wait()),
                    },
                    node.stderr_tail()
                ))
            }
        }
    }

    /// The client's urls for `transport`, in the topology's order.
    pub fn urls(&self, transport: &str) -> Result<Vec<String>, String> {
        let scheme = if self.tls { "https" } else { "http" };
        self.client
            .iter()
            .map(|name| {
                let node = self
                    .nodes
                    .get(name)
                    .ok_or_else(|| format!("client node {name} is not in the topology"))?;
                match transport {
                    "grpc" => Ok(format!("{scheme}://127.0.0.1:{}", node.grpc)),
                    "http" => Ok(format!("{scheme}://127.0.0.1:{}", node.http)),
                    other => Err(format!("unknown transport {other}")),
                }
            })
            .collect()
    }

    /// The node `name`, to kill it.
    pub fn node_mut(&mut self, name: &str) -> Result<&mut Node, String> {
        self.nodes
            .get_mut(name)
            .ok_or_else(|| format!("no node {name} in the topology"))
    }
}
