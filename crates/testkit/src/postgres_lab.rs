//! A private PostgreSQL server in a host of a [`crate::netns::Lab`]: [`LabPostgres`] runs
//! `initdb` and `postgres` (the binaries [`crate::postgres_tls`] finds) with its own temporary
//! data directory, listening on the host's address only, plain TCP, and kills it when dropped.
//!
//! Invariants: it is reachable only from the lab's hosts on that address's LAN, so cutting the
//! host's link cuts every client off it; `pg_hba.conf` trusts user `postgres` from the lab's
//! addresses (`10.77.0.0/16`). As root it runs as the `postgres` user (`setpriv` after
//! `ip netns exec`, since only root may enter a namespace). [`LabPostgres::start`] returns once
//! `pg_isready`, run in the same host, says it accepts connections.
//!
//! What it does not do: durability (`fsync = off`: partition tests cut links, not disks), TLS,
//! replication. Missing binaries panic with how to install them; it never skips a test.

use crate::netns::Host;
use crate::postgres_tls::{bin_dir, command, run_as};
use std::fs::File;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tempfile::TempDir;

const PORT: u16 = 5432;
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running private PostgreSQL in a lab host; killed when dropped.
pub struct LabPostgres {
    child: Option<Child>,
    dir: TempDir,
    addr: Ipv4Addr,
    _host: Host,
}

/// `program` run in `host`, as `user` when given (`setpriv`, after entering the namespace).
fn in_host(host: &Host, program: &Path, user: Option<(u32, u32)>) -> Command {
    match user {
        Some((uid, gid)) => {
            let mut cmd = host.command("setpriv");
            cmd.args([
                &format!("--reuid={uid}"),
                &format!("--regid={gid}"),
                "--clear-groups",
                "--",
            ])
            .arg(program);
            cmd
        }
        None => host.command(program),
    }
}

impl LabPostgres {
    /// Starts a fresh server in `host` listening on `addr:5432` (the host's address on a LAN)
    /// and waits until it accepts connections.
    ///
    /// # Panics
    /// If the binaries are missing or the server does not start (with its log).
    pub fn start(host: &Host, addr: Ipv4Addr) -> LabPostgres {
        let bin = bin_dir();
        let user = run_as();
        let dir = tempfile::Builder::new()
            .prefix("idmint-pg-lab-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a directory for PostgreSQL: {e}"));
        let data = dir.path().join("data");
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {}: {e}", dir.path().display()));
        }
        let init = command(&bin.join("initdb"), user)
            .args(["-D"])
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.join("initdb").display()));
        assert!(
            init.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&init.stdout),
            String::from_utf8_lossy(&init.stderr)
        );
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhost all all 10.77.0.0/16 trust\n",
        )
        .unwrap_or_else(|e| panic!("writing pg_hba.conf: {e}"));
        let log = File::create(dir.path().join("postgres.log"))
            .unwrap_or_else(|e| panic!("creating postgres.log: {e}"));
        let child = in_host(host, &bin.join("postgres"), user)
            .arg("-D")
            .arg(&data)
            .args(["-p", &PORT.to_string(), "-k"])
            .arg(dir.path())
            .args([
                "-c",
                &format!("listen_addresses={addr}"),
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run postgres in {}: {e}", host.name()));
        let mut pg = LabPostgres {
            child: Some(child),
            dir,
            addr,
            _host: host.clone(),
        };
        let ready = in_host(host, &bin.join("pg_isready"), user);
        pg.wait_ready(ready);
        pg
    }

    /// A `postgres://` URL of database `postgres` as user `postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@{}:{PORT}/postgres", self.addr)
    }

    fn wait_ready(&mut self, mut ready: Command) {
        ready
            .args([
                "-h",
                &self.addr.to_string(),
                "-p",
                &PORT.to_string(),
                "-t",
                "1",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut exited = None;
        crate::wait::until(
            "the lab's PostgreSQL to accept connections",
            READY_TIMEOUT,
            || {
                if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                    exited = Some(status);
                    return true;
                }
                ready.status().is_ok_and(|s| s.success())
            },
        );
        if let Some(status) = exited {
            panic!("postgres exited ({status}): {}", self.log());
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }
}

impl Drop for LabPostgres {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
