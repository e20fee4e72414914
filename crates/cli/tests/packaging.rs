//! What an operator installs besides the binary, checked against the binary
//! and the tools that will read it: the example configuration (deploy/idmint.toml) through the
//! node's own parser, the systemd unit (deploy/idmint.service) with `systemd-analyze verify`,
//! the manual pages with `man --warnings`, the shell completions with `bash -n`, and the
//! Kubernetes manifests (deploy/kubernetes) with `kubernetes-validate --strict` and their
//! configurations through the node's parser.
//!
//! The tools come from Debian (`systemd`, `man-db`, `bash`); `scripts/test.sh` installs what is
//! missing. A missing tool fails the test, saying what to install.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use idmint_node::FileConfig;
use idmint_store::config::AuthorityConfig;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn idmint(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_idmint"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "idmint {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `program args` with `stdin`, failing loudly if the tool is missing.
fn tool(program: &str, args: &[&str], stdin: &[u8], package: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {program} ({e}): apt-get install -y {package} (scripts/test.sh does)"
            )
        });
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn the_example_config_is_valid_and_production_ready() {
    let text = std::fs::read_to_string(root().join("deploy/idmint.toml")).unwrap();
    let config = FileConfig::parse(&text).unwrap_or_else(|e| panic!("deploy/idmint.toml: {e}"));
    // What the production checklist in deploy/README.md asks for.
    assert!(!config.node.auto_create, "auto_create must be off");
    let auth = config.node.auth.as_ref().expect("an [auth] section");
    assert_eq!(auth.tokens.len(), 3);
    assert!(config.tls.is_some(), "TLS on the listeners");
    match &config.authority {
        AuthorityConfig::Postgres(pg) => assert!(format!("{pg:?}").contains("VerifyFull")),
        other => panic!("a shared durable authority, not {other:?}"),
    }
    let names: Vec<_> = config
        .node
        .namespaces
        .keys()
        .map(|n| n.as_str().to_owned())
        .collect();
    assert_eq!(names, ["events", "orders", "orders.legacy", "sessions"]);

    // The regional tier it describes reaches this node the way it serves: over TLS, with its CA.
    let regional: String = text
        .lines()
        .skip_while(|l| !l.starts_with("# A regional node"))
        .skip(1)
        .map_while(|l| l.strip_prefix("#   "))
        .map(|l| format!("{l}\n"))
        .collect();
    let regional = FileConfig::parse(&regional)
        .unwrap_or_else(|e| panic!("the regional example of deploy/idmint.toml: {e}\n{regional}"));
    match &regional.authority {
        AuthorityConfig::Upstream(up) => {
            assert!(up.urls.iter().all(|u| u.starts_with("https://")), "{up:?}");
            assert!(up.ca_file.is_some(), "{up:?}");
        }
        other => panic!("an upstream authority, not {other:?}"),
    }
}

#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(root().join("deploy/idmint.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/idmint serve --config /etc/idmint/idmint.toml"));
    // verify checks that ExecStart's binary exists: point it at the one just built.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idmint.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/idmint", env!("CARGO_BIN_EXE_idmint")),
    )
    .unwrap();
    let out = tool(
        "systemd-analyze",
        &["verify", "--man=no", path.to_str().unwrap()],
        b"",
        "systemd",
    );
    // verify exits 0 on unknown keys and bad values too; it reports them on stderr.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {}\n{stderr}",
        out.status
    );
}

#[test]
fn the_manual_pages_render_without_warnings() {
    let page = idmint(&["man"]).stdout;
    let out = tool(
        "man",
        &["--warnings", "-l", "-"],
        &page,
        "man-db groff-base",
    );
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && warnings.trim().is_empty(),
        "{warnings}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for word in ["NAME", "SYNOPSIS", "serve", "completions"] {
        assert!(text.contains(word), "{word} missing from:\n{text}");
    }

    let dir = tempfile::tempdir().unwrap();
    let listed = idmint(&["man", "--out-dir", dir.path().to_str().unwrap()]).stdout;
    let listed = String::from_utf8(listed).unwrap();
    for file in [
        "idmint.1",
        "idmint-serve.1",
        "idmint-admin-reseed.1",
        "idmint-token-new.1",
    ] {
        let path = dir.path().join(file);
        assert!(listed.contains(path.to_str().unwrap()), "{listed}");
        let roff = std::fs::read(&path).unwrap();
        let out = tool(
            "man",
            &["--warnings", "-l", "-"],
            &roff,
            "man-db groff-base",
        );
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let serve = std::fs::read_to_string(dir.path().join("idmint-serve.1")).unwrap();
    assert!(serve.contains("insecure\\-no\\-auth"), "{serve}");
    // groff alone (no preconv, as `man` runs) renders every page without a warning: they are
    // ASCII, and every footer names the program and its version.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let roff = std::fs::read(entry.unwrap().path()).unwrap();
        assert!(roff.is_ascii());
        let text = String::from_utf8(roff.clone()).unwrap();
        assert!(
            text.contains(concat!("\"idmint ", env!("CARGO_PKG_VERSION"), "\"")),
            "{text}"
        );
        let out = tool(
            "groff",
            &["-man", "-Tutf8", "-ww", "-z"],
            &roff,
            "groff-base",
        );
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "groff: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn completions_cover_every_subcommand_and_bash_parses_them() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = String::from_utf8(idmint(&["completions", shell]).stdout).unwrap();
        for sub in [
            "serve",
            "next",
            "decode",
            "status",
            "token",
            "admin",
            "completions",
            "man",
        ] {
            assert!(script.contains(sub), "{shell}: {sub} missing");
        }
        assert!(
            script.contains("--insecure-no-auth"),
            "{shell}: serve's flags missing"
        );
    }
    let bash = idmint(&["completions", "bash"]).stdout;
    let out = tool("bash", &["-n"], &bash, "bash");
    assert!(
        out.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An unknown shell is a usage error (exit 2), with the choices.
    let out = Command::new(env!("CARGO_BIN_EXE_idmint"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bash"));
}

/// The configuration in a manifest's Secret (`idmint.toml: |`), unindented.
fn embedded_config(manifest: &str) -> String {
    let mut lines = manifest
        .lines()
        .skip_while(|l| l.trim() != "idmint.toml: |")
        .skip(1)
        .take_while(|l| l.starts_with("    ") || l.trim().is_empty())
        .map(|l| l.strip_prefix("    ").unwrap_or(""))
        .collect::<Vec<_>>();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines.join("\n") + "\n"
}

/// The Kubernetes manifests (deploy/kubernetes) validate strictly against the Kubernetes API
/// schemas (`kubernetes-validate`, PyPI; scripts/test.sh installs it), and the configuration
/// each carries goes through the node's own parser: the global tier on PostgreSQL, the regional
/// tier on the global pods over TLS, both leasing worker ids from one pool; both probe readiness on /readyz and liveness on
/// /healthz, spread one pod per machine, run one async worker per CPU requested and name a
/// versioned image.
#[test]
fn the_kubernetes_manifests_validate_and_their_configs_parse() {
    let dir = root().join("deploy/kubernetes");
    for tier in ["global", "regional"] {
        let path = dir.join(format!("{tier}.yaml"));
        let out = Command::new("kubernetes-validate")
            .args(["--strict", "--quiet"])
            .arg(&path)
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run kubernetes-validate ({e}): python3 -m pip install \
                     kubernetes-validate (scripts/test.sh does)"
                )
            });
        assert!(
            out.status.success(),
            "{tier}.yaml: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let manifest = std::fs::read_to_string(&path).unwrap();
        for kind in ["Secret", "Service", "StatefulSet", "PodDisruptionBudget"] {
            assert!(
                manifest.contains(&format!("kind: {kind}\n")),
                "{tier}: no {kind}"
            );
        }
        assert!(manifest.contains("path: /readyz") && manifest.contains("path: /healthz"));
        let text = embedded_config(&manifest);
        let config = FileConfig::parse(&text)
            .unwrap_or_else(|e| panic!("the configuration of {tier}.yaml: {e}\n{text}"));
        assert!(!config.node.auto_create, "{tier}");
        assert!(config.node.auth.is_some(), "{tier}: [auth] off loopback");
        assert!(config.tls.is_some(), "{tier}: TLS on the listeners");
        // Both tiers lease from one pool per group (the regional tier through the global
        // one): pods' ordinals would collide, every StatefulSet counting from 0.
        let events = &config.node.namespaces[&idmint_core::NamespaceName::new("events").unwrap()];
        assert!(
            format!("{events:?}").contains("worker: Lease"),
            "{tier}: the lowest free worker id of the shared pool: {events:?}"
        );
        assert!(
            manifest.contains("topologySpreadConstraints:")
                && manifest.contains("topologyKey: kubernetes.io/hostname"),
            "{tier}: one pod per machine"
        );
        assert!(
            !manifest.contains(":latest"),
            "{tier}: a versioned image tag"
        );
        let cpu = manifest
            .split_once("requests:\n              cpu: \"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(cpu, _)| cpu)
            .unwrap_or_else(|| panic!("{tier}: a whole CPU request"));
        assert!(
            manifest.contains(&format!(
                "name: TOKIO_WORKER_THREADS\n              value: \"{cpu}\""
            )),
            "{tier}: one async worker per CPU requested ({cpu})"
        );
        assert!(
            manifest.contains(r#""orders" = ["ids", "blocks", "read"]"#),
            "{tier}: the application token holds the application role (ids, blocks, read)"
        );
        match (&config.authority, tier) {
            (AuthorityConfig::Postgres(pg), "global") => {
                assert!(format!("{pg:?}").contains("VerifyFull"))
            }
            (AuthorityConfig::Upstream(up), "regional") => {
                assert_eq!(up.urls.len(), 3, "{up:?}");
                assert!(up
                    .urls
                    .iter()
                    .all(|u| u.starts_with("https://idmint-global-")));
                assert!(up.ca_file.is_some() && up.token.is_some(), "{up:?}");
            }
            (other, _) => panic!("{tier}: {other:?}"),
        }
    }
}
