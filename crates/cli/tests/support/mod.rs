//! What the CLI's process tests share: starting `idmint serve` as a real process on a port the
//! kernel picks, learning the port from its `idmint listening on http://ADDR` line, stopping it
//! with SIGKILL or SIGTERM, and a few assertions. Waits poll against a generous deadline; nothing
//! sleeps to order events.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read};
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
        adjust(&mut cmd);
        Server::spawn(cmd)
    }

    /// Runs `cmd` (an `idmint serve` command line) and waits for its listening line.
    pub fn spawn(mut cmd: Command) -> Server {
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
        let stderr = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(err).read_to_string(&mut text);
            sink.lock().unwrap().push_str(&text);
        });
        let deadline = Instant::now() + DEADLINE;
        let addr = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match stdout.recv_timeout(left) {
                Ok(line) => {
                    if let Some(addr) = line.strip_prefix("idmint listening on http://") {
                        break addr.trim().parse().unwrap();
                    }
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
        Server {
            child,
            addr,
            stdout,
            stderr,
        }
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
        let deadline = Instant::now() + DEADLINE;
        // The stderr thread appends everything at EOF; wait for it to have done so.
        while Arc::strong_count(&self.stderr) > 1 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
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

pub fn wait_with_deadline(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process {} did not exit in time", child.id());
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// The `(ids handed back, ids burned)` of a node's last stdout line, `idmint stopped: N ids handed
/// back, M burned`, among the `lines` [`Server::terminate`] returned.
pub fn stop_counts(lines: &[String]) -> (u64, u64) {
    let stopped = lines
        .iter()
        .find_map(|l| l.strip_prefix("idmint stopped: "))
        .unwrap_or_else(|| panic!("no stop line in {lines:?}"));
    let numbers: Vec<u64> = stopped
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(numbers.len(), 2, "{stopped}");
    (numbers[0], numbers[1])
}

/// Panics, naming `who`, unless `ids` strictly increase.
pub fn assert_strictly_increasing(ids: &[u64], who: &str) {
    if let Some(pair) = ids.windows(2).find(|p| p[0] >= p[1]) {
        panic!("{who}: ids not strictly increasing: {pair:?}");
    }
}
