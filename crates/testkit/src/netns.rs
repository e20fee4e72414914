//! Real network partitions between real processes: a [`Lab`] of Linux network namespaces joined
//! by veth pairs to bridges, with links a test cuts ([`Link::cut`]) and heals ([`Link::heal`]).
//!
//! Layout: the lab's own *hub* namespace holds one bridge per [`Lan`]; every [`Host`] is a
//! namespace of its own, attached to a LAN by a veth pair whose hub end is a port of that
//! LAN's bridge and whose other end (`eth0`, `eth1`, … in the host) carries the host's address,
//! `10.77.N.H/24`. A cut sets the hub end down: the host's side loses its carrier, packets are
//! dropped both ways and open TCP connections hang (no reset), as when a cable or a switch port
//! fails. A host on two LANs (a node with a back link to its authority and a front link to its
//! clients) can lose one and keep the other.
//!
//! Invariants: every address, route and interface lives in a namespace the lab made; nothing is
//! added to the namespace the tests run in, so a lab cannot reach or disturb anything else, and
//! labs of tests running in parallel are disjoint (namespace names carry the process id and a
//! counter; two labs may reuse a subnet since no route joins them). Dropping the lab deletes
//! every namespace it made, which removes their interfaces, also when the test panics.
//! Processes are put in a host with [`Host::command`] (`ip netns exec NS program`, which execs
//! the program: the child's pid is the program's); a test thread reaches the hosts from
//! [`run_in`] a host of its own.
//!
//! Needs root and iproute2's `ip`: without them [`Lab::new`] panics saying so; it never skips.

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Labs made by this process so far: part of each namespace name.
static LABS: AtomicU32 = AtomicU32::new(0);

/// Runs `ip ARGS`, panicking with its stderr when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `ip` (iproute2; Debian: apt-get install iproute2): {e}")
        });
    assert!(
        out.status.success(),
        "ip {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Panics unless this process is root and `ip` runs: a partition test cannot run otherwise.
fn require_root_and_ip() {
    assert!(
        rustix::process::geteuid().is_root(),
        "network partition tests need root (network namespaces, veth pairs): run them as root"
    );
    let version = Command::new("ip").arg("-V").output();
    assert!(
        version.as_ref().is_ok_and(|o| o.status.success()),
        "network partition tests need iproute2's `ip` (Debian: apt-get install iproute2): {version:?}"
    );
}

/// Deletes the namespaces of labs whose process is gone (a test binary killed before its
/// labs were dropped), so they do not pile up; those of live processes are left alone.
fn reap_dead_labs() {
    let Ok(listed) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&listed.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        // idmint-TAG-PID-N-…
        let mut parts = name.split('-');
        if parts.next() != Some("idmint") {
            continue;
        }
        let Some(pid) = parts.nth(1).and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip")
                .args(["netns", "delete", name])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

#[derive(Debug)]
struct Inner {
    prefix: String,
    hub: String,
    /// Every namespace made, the hub first.
    namespaces: Mutex<Vec<String>>,
    lans: Mutex<u8>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let namespaces = self.namespaces.get_mut().unwrap_or_else(|e| e.into_inner());
        for ns in namespaces.iter().rev() {
            let _ = Command::new("ip")
                .args(["netns", "delete", ns])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A set of namespaces, bridges and links; every namespace deleted when the last handle
/// ([`Lab`], [`Lan`], [`Host`], [`Link`]) is dropped.
#[derive(Clone, Debug)]
pub struct Lab {
    inner: Arc<Inner>,
}

/// One bridge in the hub and its subnet, `10.77.N.0/24`.
#[derive(Clone, Debug)]
pub struct Lan {
    lab: Lab,
    bridge: String,
    subnet: u8,
    next_host: Arc<Mutex<u8>>,
}

/// A network namespace, a machine of the lab.
#[derive(Clone, Debug)]
pub struct Host {
    /// Keeps the namespaces while the host is used.
    _lab: Lab,
    name: String,
    ports: Arc<Mutex<u8>>,
}

/// A host's attachment to a LAN: its address there, and the switch port a test cuts.
#[derive(Clone, Debug)]
pub struct Link {
    lab: Lab,
    hub_end: String,
    /// The host's address on the LAN.
    pub addr: Ipv4Addr,
}

impl Lab {
    /// A fresh lab, its hub namespace made; `tag` (a few letters, no `-`) names its namespaces
    /// (`idmint-TAG-PID-N-…`) for whoever lists them meanwhile. Namespaces left by labs of
    /// processes that are gone are deleted first.
    ///
    /// # Panics
    /// Unless running as root with `ip` installed, or when `ip` fails.
    pub fn new(tag: &str) -> Lab {
        assert!(!tag.contains('-'), "a lab tag has no '-': {tag:?}");
        require_root_and_ip();
        reap_dead_labs();
        let n = LABS.fetch_add(1, Ordering::SeqCst);
        let prefix = format!("idmint-{tag}-{}-{n}", std::process::id());
        let hub = format!("{prefix}-hub");
        let lab = Lab {
            inner: Arc::new(Inner {
                prefix,
                hub: hub.clone(),
                namespaces: Mutex::new(Vec::new()),
                lans: Mutex::new(0),
            }),
        };
        lab.add_namespace(&hub);
        lab
    }

    fn add_namespace(&self, name: &str) {
        ip(&["netns", "add", name]);
        self.inner
            .namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name.to_owned());
        ip(&["-n", name, "link", "set", "lo", "up"]);
    }

    /// A new LAN: a bridge in the hub with the next subnet `10.77.N.0/24`.
    pub fn lan(&self) -> Lan {
        let subnet = {
            let mut lans = self.inner.lans.lock().unwrap_or_else(|e| e.into_inner());
            *lans += 1;
            *lans
        };
        let bridge = format!("br{subnet}");
        let hub = &self.inner.hub;
        ip(&["-n", hub, "link", "add", &bridge, "type", "bridge"]);
        ip(&["-n", hub, "link", "set", &bridge, "up"]);
        Lan {
            lab: self.clone(),
            bridge,
            subnet,
            next_host: Arc::new(Mutex::new(0)),
        }
    }

    /// A new host (namespace) named `idmint-…-NAME`, with its loopback up and no link yet.
    pub fn host(&self, name: &str) -> Host {
        let full = format!("{}-{name}", self.inner.prefix);
        self.add_namespace(&full);
        Host {
            _lab: self.clone(),
            name: full,
            ports: Arc::new(Mutex::new(0)),
        }
    }
}

impl Lan {
    /// Attaches `host` to this LAN with the next address: a veth pair, its hub end a port of
    /// the bridge, its host end `ethK` with `10.77.N.H/24`; both up.
    pub fn attach(&self, host: &Host) -> Link {
        let h = {
            let mut next = self.next_host.lock().unwrap_or_else(|e| e.into_inner());
            *next += 1;
            *next
        };
        let k = {
            let mut ports = host.ports.lock().unwrap_or_else(|e| e.into_inner());
            let k = *ports;
            *ports += 1;
            k
        };
        let hub = &self.lab.inner.hub;
        let hub_end = format!("v{}h{h}", self.subnet);
        let host_end = format!("eth{k}");
        let addr = Ipv4Addr::new(10, 77, self.subnet, h);
        ip(&[
            "-n", hub, "link", "add", &hub_end, "type", "veth", "peer", "name", &host_end, "netns",
            &host.name,
        ]);
        ip(&["-n", hub, "link", "set", &hub_end, "master", &self.bridge]);
        ip(&["-n", hub, "link", "set", &hub_end, "up"]);
        ip(&[
            "-n",
            &host.name,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            &host_end,
        ]);
        ip(&["-n", &host.name, "link", "set", &host_end, "up"]);
        Link {
            lab: self.lab.clone(),
            hub_end,
            addr,
        }
    }
}

impl Host {
    /// The namespace's name (for `ip netns exec`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip netns exec NS program`: `program` run in this host. `ip` execs it, so the child's
    /// pid is the program's (signals reach it directly).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }
}

impl Link {
    /// Cuts the link: its switch port down. Idempotent.
    pub fn cut(&self) {
        ip(&[
            "-n",
            &self.lab.inner.hub,
            "link",
            "set",
            &self.hub_end,
            "down",
        ]);
    }

    /// Heals the link: its switch port up. Idempotent.
    pub fn heal(&self) {
        ip(&[
            "-n",
            &self.lab.inner.hub,
            "link",
            "set",
            &self.hub_end,
            "up",
        ]);
    }
}

/// Runs `f` on a new thread inside `host`'s network namespace and returns what it returns (or
/// resumes its panic). Every socket `f` opens, every thread it spawns (a tokio runtime's
/// workers) and every process it starts is in that namespace too; the calling thread is not
/// moved.
///
/// # Panics
/// If the namespace cannot be entered, or when `f` panics.
pub fn run_in<T: Send + 'static>(host: &Host, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{}", host.name);
    let joined = std::thread::spawn(move || {
        let file = File::open(&path).unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
        // Changes only this thread's network namespace (and its future children's).
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap_or_else(|e| panic!("setns({path}): {e}"));
        f()
    })
    .join();
    joined.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::time::Duration;

    fn reaches(from: &Host, to: SocketAddr) -> bool {
        run_in(from, move || {
            TcpStream::connect_timeout(&to, Duration::from_millis(300)).is_ok()
        })
    }

    #[test]
    fn links_cut_and_heal_and_namespaces_go_with_the_lab() {
        let lab = Lab::new("kit");
        let lan = lab.lan();
        let (a, b) = (lab.host("a"), lab.host("b"));
        let _la = lan.attach(&a);
        let lb = lan.attach(&b);
        let to = SocketAddr::from((lb.addr, 7000));
        let listener = run_in(&b, move || TcpListener::bind(to).unwrap());
        assert!(reaches(&a, to));
        lb.cut();
        assert!(!reaches(&a, to), "reached a host whose link is cut");
        lb.heal();
        // A healed port forwards again once the bridge relearns it: poll.
        crate::wait::until("the healed link to carry", Duration::from_secs(10), || {
            reaches(&a, to)
        });
        drop(listener);
        let name = b.name().to_owned();
        drop((lab, lan, a, b, _la, lb));
        let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
        assert!(
            !String::from_utf8_lossy(&listed.stdout).contains(&name),
            "{name} outlived its lab"
        );
    }
}
