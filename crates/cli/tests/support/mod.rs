//! What the CLI's process tests share: starting `idmint serve` as a real process on a port the
//! kernel picks, learning the port from its `idmint listening on http://ADDR` line (`https://`
//! with TLS; or how it
//! exited when it refused to start), reading its log as it runs, signalling it (SIGSTOP, SIGCONT),
//! stopping it with SIGKILL or SIGTERM, plain HTTP GETs, a wall clock a test steps under a
//! running process (libfaketime, [`FakeClock`]), and a few assertions. Waits poll against a
//! generous deadline; nothing sleeps to order events.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use idmint_testkit::wait;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long any awaited condition may take on a loaded 2-core machine.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub fn idmint() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idmint"));
    cmd.env_remove("IDMINT_SERVER")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

/// The command line of [`Server::start_on`]: `idmint serve --data-dir DIR --http HTTP --init
/// [--config FILE]` in `dir`, not yet run.
pub fn serve_command(dir: &Path, data_dir: &Path, http: &str, config: Option<&Path>) -> Command {
    let mut cmd = idmint();
    cmd.current_dir(dir)
        .arg("serve")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--http", http])
        // Each test's store starts empty: a new deployment (a no-op once the store holds
        // namespaces). Tests of the refusal without it build their own command.
        .arg("--init");
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    cmd
}

/// How an `idmint serve` that never listened ended: [`Server::try_spawn`].
#[derive(Debug)]
pub struct Exited {
    /// Its exit status.
    pub status: ExitStatus,
    /// All it wrote to stderr.
    pub stderr: String,
}

/// A running `idmint serve`; killed (SIGKILL) when dropped.
pub struct Server {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// The rest of stdout, line by line, until the process exits.
    stdout: mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `idmint serve --data-dir DIR --http 127.0.0.1:0 --init [--config FILE]` in `dir` and waits
    /// for its listening line.
    pub fn start(dir: &Path, data_dir: &Path, config: Option<&Path>) -> Server {
        Server::start_on(dir, data_dir, "127.0.0.1:0", config)
    }

    /// [`Server::start`] with `--http http`.
    pub fn start_on(dir: &Path, data_dir: &Path, http: &str, config: Option<&Path>) -> Server {
        Server::start_with(dir, data_dir, http, config, |_| {})
    }

    /// [`Server::start_on`], with `adjust` changing the command (more arguments, environment)
    /// before it runs.
    pub fn start_with(
        dir: &Path,
        data_dir: &Path,
        http: &str,
        config: Option<&Path>,
        adjust: impl FnOnce(&mut Command),
    ) -> Server {
        let mut cmd = serve_command(dir, data_dir, http, config);
        adjust(&mut cmd);
        Server::spawn(cmd)
    }

    /// Runs `cmd` (an `idmint serve` command line) and waits for its listening line.
    pub fn spawn(cmd: Command) -> Server {
        match Server::try_spawn(cmd) {
            Ok(server) => server,
            Err(exited) => panic!(
                "no listening line; exit {:?}; stderr: {}",
                exited.status, exited.stderr
            ),
        }
    }

    /// Runs `cmd` (an `idmint serve` command line) and waits for its listening line, or for it
    /// to exit first (a refused start): then its status and stderr. Panics if it neither
    /// listens nor exits within [`DEADLINE`].
    pub fn try_spawn(mut cmd: Command) -> Result<Server, Exited> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, stdout) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Appended as it arrives (whole lines), so a running server's log can be read.
        let stderr = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        thread::spawn(move || {
            let mut reader = BufReader::new(err);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => sink
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&line)),
                }
            }
        });
        let deadline = Instant::now() + DEADLINE;
        let addr = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match stdout.recv_timeout(left) {
                Ok(line) => {
                    let addr = line
                        .strip_prefix("idmint listening on http://")
                        .or_else(|| line.strip_prefix("idmint listening on https://"));
                    if let Some(addr) = addr {
                        break addr.trim().parse().unwrap();
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // Stdout closed: the process is exiting (or closed it, which it never does).
                    let status = wait_with_deadline(&mut child);
                    // The stderr thread holds its clone until EOF, which the exit brings.
                    wait::until("the stderr reader to finish", DEADLINE, || {
                        Arc::strong_count(&stderr) == 1
                    });
                    let stderr = stderr.lock().unwrap().clone();
                    return Err(Exited { status, stderr });
                }
                Err(e) => {
                    let _ = child.kill();
                    let status = child.wait();
                    panic!(
                        "no listening line ({e}); exit {status:?}; stderr: {}",
                        stderr.lock().unwrap()
                    );
                }
            }
        };
        Ok(Server {
            child,
            addr,
            stdout,
            stderr,
        })
    }

    /// Everything the server wrote to stderr so far (its log), whole lines.
    pub fn stderr_so_far(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends signal `name` (`STOP`, `CONT`, …) with kill(1).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{name} {pid} failed");
    }

    /// SIGSTOP, returning once every thread of the process is stopped: kill(2) returns before
    /// the threads running on other cores have stopped, and they may still answer a request
    /// sent right after it.
    pub fn stop(&self) {
        self.signal("STOP");
        let tasks = format!("/proc/{}/task", self.child.id());
        idmint_testkit::wait::until("every thread of the node is stopped", DEADLINE, || {
            std::fs::read_dir(&tasks).unwrap().all(|task| {
                let stat = task.unwrap().path().join("stat");
                // `pid (comm) S ...`: the state follows the last ')'.
                std::fs::read_to_string(stat).is_ok_and(|s| {
                    s.rsplit_once(')')
                        .is_some_and(|(_, rest)| rest.trim_start().starts_with(['T', 't']))
                })
            })
        });
    }

    /// The next line the server prints on stdout after its listening line (e.g. another
    /// front-end's), waiting up to [`DEADLINE`].
    pub fn next_line(&self) -> String {
        self.stdout
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|e| panic!("no further stdout line: {e}"))
    }

    /// The process id (to send it other signals, SIGSTOP say).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: no hand-back, no goodbye.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Sends SIGTERM and returns at once (a first signal, to be followed by another).
    pub fn send_term(&self) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(killed.success());
    }

    /// SIGTERM, then waits for the exit; returns the status, the rest of stdout and all of
    /// stderr, apart.
    pub fn terminate_apart(mut self) -> (ExitStatus, Vec<String>, String) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(killed.success());
        let status = wait_with_deadline(&mut self.child);
        let mut rest = Vec::new();
        // The reader threads end at EOF, which the exit brings.
        while let Ok(line) = self.stdout.recv_timeout(DEADLINE) {
            rest.push(line);
        }
        // The stderr thread appends everything at EOF; wait for it to have done so.
        wait::until("the stderr reader to finish", DEADLINE, || {
            Arc::strong_count(&self.stderr) == 1
        });
        let stderr = self.stderr.lock().unwrap().clone();
        (status, rest, stderr)
    }

    /// SIGTERM, then waits for the exit; returns the status and the rest of stdout (with
    /// whatever reached stderr appended, for failure messages).
    pub fn terminate(mut self) -> (ExitStatus, Vec<String>) {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(killed.success());
        let status = wait_with_deadline(&mut self.child);
        let mut rest = Vec::new();
        // The reader thread ends at EOF, which the exit brings.
        while let Ok(line) = self.stdout.recv_timeout(DEADLINE) {
            rest.push(line);
        }
        rest.push(format!("stderr: {}", self.stderr.lock().unwrap()));
        (status, rest)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits up to [`DEADLINE`] for `child` to exit; kills it before panicking if it does not.
pub fn wait_with_deadline(child: &mut Child) -> ExitStatus {
    let what = format!("process {} to exit", child.id());
    let exited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait::until_some(what, DEADLINE, || child.try_wait().unwrap())
    }));
    exited.unwrap_or_else(|timeout| {
        let _ = child.kill();
        std::panic::resume_unwind(timeout)
    })
}

/// What a node's stop line said: `idmint stopped: N ids handed back, K kept in the data
/// directory, M burned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopCounts {
    /// Handed back to the authority (or the tier above).
    pub given_back: u64,
    /// Kept in the data directory, to be served first after a restart.
    pub kept: u64,
    /// Burned.
    pub burned: u64,
}

/// The counts of a node's stop line among the `lines` [`Server::terminate`] returned.
pub fn stop_counts(lines: &[String]) -> StopCounts {
    let stopped = lines
        .iter()
        .find_map(|l| l.strip_prefix("idmint stopped: "))
        .unwrap_or_else(|| panic!("no stop line in {lines:?}"));
    let numbers: Vec<u64> = stopped
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(numbers.len(), 3, "{stopped}");
    StopCounts {
        given_back: numbers[0],
        kept: numbers[1],
        burned: numbers[2],
    }
}

/// The ids of a `GET /v1/ids` answer.
pub fn ids_of(body: &str) -> Vec<u64> {
    serde_json::from_str::<serde_json::Value>(body).unwrap()["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no ids in {body}"))
        .iter()
        .map(|id| id.as_str().unwrap().parse().unwrap())
        .collect()
}

/// Panics, naming `who`, unless `ids` strictly increase.
pub fn assert_strictly_increasing(ids: &[u64], who: &str) {
    if let Some(pair) = ids.windows(2).find(|p| p[0] >= p[1]) {
        panic!("{who}: ids not strictly increasing: {pair:?}");
    }
}

/// `GET path` on `addr` over HTTP/1.1 (one connection, closed after): the status code and
/// the body.
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut stream)
}

/// Reads a whole `Connection: close` HTTP/1.1 response from `stream`: its status and body.
pub fn read_response(stream: &mut impl Read) -> (u16, String) {
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP response: {raw:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_string())
}

/// The path of libfaketime's multi-threaded preload library (the Debian `faketime` package;
/// scripts/test.sh installs it). Panics, saying so, if it is missing.
pub fn libfaketime() -> std::path::PathBuf {
    let candidates = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
        "/usr/local/lib/faketime/libfaketimeMT.so.1",
    ];
    candidates
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!("libfaketimeMT.so.1 is missing: apt-get install -y faketime (scripts/test.sh installs it)")
        })
}

/// A wall clock a test steps while a process runs: libfaketime preloaded, reading its offset
/// from a file on every call (`FAKETIME_TIMESTAMP_FILE`, `FAKETIME_NO_CACHE=1`), with the
/// monotonic clock left alone (`FAKETIME_DONT_FAKE_MONOTONIC=1`; `DONT_FAKE_MONOTONIC=1` for
/// libfaketime before 0.9.8). Offsets are libfaketime's relative ones: `+0`, `-5`, `+10`,
/// `-2.5` (seconds).
pub struct FakeClock {
    file: std::path::PathBuf,
}

impl FakeClock {
    /// A control file in `dir` holding `offset`.
    pub fn new(dir: &Path, offset: &str) -> FakeClock {
        let clock = FakeClock {
            file: dir.join("faketime.rc"),
        };
        clock.set(offset);
        clock
    }

    /// Steps the clock of every process started with [`FakeClock::apply`] to `offset` from
    /// the real time (replacing the file at once, so no reader sees it half written).
    pub fn set(&self, offset: &str) {
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, format!("{offset}\n")).unwrap();
        std::fs::rename(&tmp, &self.file).unwrap();
    }

    /// Makes `cmd` run under this clock.
    pub fn apply(&self, cmd: &mut Command) {
        cmd.env("LD_PRELOAD", libfaketime())
            .env("FAKETIME_TIMESTAMP_FILE", &self.file)
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("DONT_FAKE_MONOTONIC", "1")
            .env("FAKETIME_DISABLE_SHM", "1")
            .env_remove("FAKETIME");
    }
}

/// `ms` since the Unix epoch as RFC 3339 with milliseconds, `2026-11-25T06:40:00.123Z` (how
/// the node names times in messages and logs).
pub fn rfc3339_ms(ms: u64) -> String {
    let days = (ms / 86_400_000) as i64;
    let rest = ms % 86_400_000;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600_000,
        rest / 60_000 % 60,
        rest / 1000 % 60,
        rest % 1000
    )
}

/// The inverse of [`rfc3339_ms`]: ms since the Unix epoch of `2026-11-25T06:40:00.123Z`.
pub fn parse_rfc3339_ms(text: &str) -> u64 {
    let bad = || panic!("not a time like 2026-11-25T06:40:00.123Z: {text:?}");
    let num = |range: std::ops::Range<usize>| -> i64 {
        text.get(range)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(bad)
    };
    if text.len() != 24 || !text.ends_with('Z') {
        bad();
    }
    let (year, month, day) = (num(0..4), num(5..7), num(8..10));
    // Howard Hinnant's days_from_civil.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = days * 86_400_000
        + num(11..13) * 3_600_000
        + num(14..16) * 60_000
        + num(17..19) * 1000
        + num(20..23);
    u64::try_from(ms).unwrap_or_else(|_| panic!("before 1970: {text:?}"))
}

/// What `idmint audit verify` and `export` found after a run ([`audit_check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditCounts {
    /// Ledger entries of the namespace.
    pub entries: u64,
    /// Of them, grants (blocks, rebases, retirements).
    pub grants: u64,
    /// Of them, give-backs.
    pub give_backs: u64,
    /// The namespace's watermark after the last entry: the store's, as the ledger tells it.
    pub watermark: u64,
}

/// Runs `idmint audit verify` on the node's configuration and data directory (the node
/// stopped) and asserts it passes; then `idmint audit export` of `namespace` and asserts that
/// every id in `received` lies in a block the ledger records as granted: the ledger is checked
/// against what the clients actually got, not only against itself.
pub fn audit_check(
    config: Option<&Path>,
    data_dir: &Path,
    namespace: &str,
    received: &[u64],
) -> AuditCounts {
    let with_source = |cmd: &mut Command| {
        cmd.arg("--data-dir").arg(data_dir);
        if let Some(config) = config {
            cmd.arg("--config").arg(config);
        }
    };
    let mut verify = idmint();
    verify.args(["audit", "verify"]);
    with_source(&mut verify);
    let out = verify.output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "idmint audit verify failed ({}): {report}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("ok: no id was granted twice"), "{report}");

    let mut export = idmint();
    export.args([
        "audit",
        "export",
        "--format",
        "csv",
        "--namespace",
        namespace,
    ]);
    with_source(&mut export);
    let out = export.output().unwrap();
    assert!(
        out.status.success(),
        "idmint audit export failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("authority,subject,seq,at_unix_ms,event,a,b,holder")
    );
    let mut counts = AuditCounts {
        entries: 0,
        grants: 0,
        give_backs: 0,
        watermark: 0,
    };
    let mut granted: Vec<(u64, u64)> = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        assert!(fields.len() >= 8, "export line {line:?}");
        assert_eq!(fields[1], namespace, "{line}");
        let (a, b): (u64, u64) = (fields[5].parse().unwrap(), fields[6].parse().unwrap());
        counts.entries += 1;
        match fields[4] {
            "granted" => {
                counts.grants += 1;
                granted.push((a, b));
                counts.watermark = b;
            }
            "rebased" | "retired" => {
                counts.grants += 1;
                counts.watermark = b;
            }
            "given_back" => {
                counts.give_backs += 1;
                counts.watermark = a;
            }
            // Parked at a clean stop and claimed at the restart: ids of an earlier grant,
            // which stays the one every received id must lie in.
            "parked" | "claimed" => {}
            other => panic!("unexpected event {other:?} in {line:?}"),
        }
    }
    granted.sort_unstable();
    let mut ids = received.to_vec();
    ids.sort_unstable();
    let mut g = 0;
    for id in ids {
        while g < granted.len() && granted[g].1 <= id {
            g += 1;
        }
        assert!(
            g < granted.len() && granted[g].0 <= id,
            "id {id} was received but lies in no block the audit ledger records as granted"
        );
    }
    counts
}

/// A TOML basic string of `s`, for configurations the tests write.
pub fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The ids of an `ids` answer body (`{"ids": ["1", …]}`), as numbers.
pub fn parse_ids(body: &str) -> Vec<u64> {
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    body["ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no ids in {body}"))
        .iter()
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect()
}
