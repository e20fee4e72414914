//! The routing helpers of the command line, offline: `decode --layout composite`, `decode
//! --step N [--offsets ...]` and `shard-for --shards N`, one key as an argument, many on
//! standard input, and JSON.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn idmint(args: &[&str], input: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idmint"))
        .args(args)
        .env_remove("IDMINT_SERVER")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = input {
        // Small inputs: written whole before the output is read.
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn json(args: &[&str]) -> Value {
    let out = idmint(args, None);
    assert!(out.status.success(), "{args:?}: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn refused(args: &[&str], why: &str) {
    let out = idmint(args, None);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(why), "{args:?}: {stderr}");
}

#[test]
fn composite_keys_decode_and_refuse_non_canonical_text() {
    let v = json(&["decode", "42-1007", "--layout", "composite", "--json"]);
    assert_eq!(
        v,
        serde_json::json!({"kind": "composite", "id": "42-1007", "shard": 42, "local": "1007"})
    );
    let out = idmint(
        &["decode", "0-18446744073709551615", "--layout", "composite"],
        None,
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("local 18446744073709551615"), "{text}");
    for (key, why) in [
        ("042-1", "the shard has a leading zero"),
        ("42-01", "the local id has a leading zero"),
        ("-1", "the shard is empty"),
        ("42-", "the local id is empty"),
        ("42", "expected SHARD-LOCAL"),
        ("1-2-3", "the local id is not a decimal number"),
        ("18446744073709551616-1", "the shard is above"),
    ] {
        refused(&["decode", "--layout", "composite", "--", key], why);
    }
    refused(
        &["decode", "1-2", "--layout", "composite", "--epoch", "5"],
        "--epoch applies to snowflake layouts",
    );
}

#[test]
fn step_names_the_residue_class_and_its_member() {
    // Members in config order owning 3, 1 and 2 of step 4.
    let v = json(&[
        "decode",
        "13",
        "--step",
        "4",
        "--offsets",
        "3,1,2",
        "--json",
    ]);
    assert_eq!(v["residue"], 1);
    assert_eq!(v["member"], 2);
    assert_eq!(v["step"], 4);
    // No member owns 0: null, and `none` in rows.
    let v = json(&[
        "decode",
        "16",
        "--step",
        "4",
        "--offsets",
        "3,1,2",
        "--json",
    ]);
    assert_eq!(v["residue"], 0);
    assert_eq!(v["member"], Value::Null);
    // Without offsets there is no member field.
    let v = json(&["decode", "16", "--step", "3", "--json"]);
    assert_eq!(v["residue"], 1);
    assert!(v.get("member").is_none(), "{v}");

    let out = idmint(
        &["decode", "--step", "4", "--offsets", "3,1,2"],
        Some("13\n\n16\n18446744073709551615\n"),
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "13\t4\t1\t2\n16\t4\t0\tnone\n18446744073709551615\t4\t3\t1\n"
    );

    refused(&["decode", "1", "--step", "0"], "--step must be at least 1");
    refused(
        &["decode", "1", "--step", "4", "--offsets", "1,4"],
        "offset 4 is not below --step 4",
    );
    refused(
        &["decode", "1", "--step", "4", "--offsets", "1,2,1"],
        "offset 1 is given twice",
    );
    refused(&["decode", "+1", "--step", "4"], "not a decimal 64-bit id");
    // --step is its own way of decoding: not with a layout.
    let out = idmint(&["decode", "1", "--step", "4", "--layout", "twitter"], None);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn shard_for_is_the_key_modulo_the_shards() {
    let v = json(&["shard-for", "--shards", "2000", "31341", "--json"]);
    assert_eq!(
        v,
        serde_json::json!({"kind": "shard_for", "key": "31341", "shards": 2000, "shard": 1341})
    );
    let out = idmint(
        &["shard-for", "--shards", "7"],
        Some("0\n13\n18446744073709551615\n"),
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "0\t7\t0\n13\t7\t6\n18446744073709551615\t7\t{}\n",
            u64::MAX % 7
        )
    );
    let out = idmint(&["shard-for", "--shards", "7"], Some("5\nx\n6\n"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 2"),
        "{out:?}"
    );
    refused(
        &["shard-for", "--shards", "0", "5"],
        "--shards must be at least 1",
    );
}
