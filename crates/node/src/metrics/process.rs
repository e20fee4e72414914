//! The process's own metrics, read from `/proc/self` at each scrape, under the names every
//! Prometheus client library uses (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_open_fds`, `process_max_fds`, `process_start_time_seconds`), so dashboards and
//! alerts written for any service work unchanged.
//!
//! Invariants: reading is best effort and never fails a scrape: a file that cannot be read or
//! parsed (another OS, a sandbox without `/proc`) leaves its series out. CPU time is in clock
//! ticks of 1/100 s: Linux fixes `USER_HZ` at 100 for every architecture's userspace ABI.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Clock ticks per second of `/proc/[pid]/stat`'s times (`USER_HZ`).
const TICKS_PER_SECOND: f64 = 100.0;

/// Reads `/proc/self` at each scrape. See the module docs.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What one scrape read.
#[derive(Debug, Default, Clone, PartialEq)]
struct Reading {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<i64>,
    open_fds: Option<i64>,
    max_fds: Option<i64>,
    start_time_seconds: Option<f64>,
}

impl Reading {
    fn now() -> Reading {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let fields = stat.as_deref().and_then(stat_fields);
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| boot_time(&s));
        Reading {
            cpu_seconds: fields.as_ref().and_then(|f| {
                let utime: u64 = f.get(11)?.parse().ok()?;
                let stime: u64 = f.get(12)?.parse().ok()?;
                Some((utime + stime) as f64 / TICKS_PER_SECOND)
            }),
            start_time_seconds: fields.as_ref().and_then(|f| {
                let ticks: u64 = f.get(19)?.parse().ok()?;
                Some(boot? as f64 + ticks as f64 / TICKS_PER_SECOND)
            }),
            resident_bytes: std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| status_kib(&s, "VmRSS:"))
                .map(|kib| kib.saturating_mul(1024)),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|dir| i64::try_from(dir.count()).unwrap_or(i64::MAX)),
            max_fds: std::fs::read_to_string("/proc/self/limits")
                .ok()
                .and_then(|s| soft_limit(&s, "Max open files")),
        }
    }
}

/// The fields of `/proc/self/stat` after the command name (which may hold spaces and
/// parentheses: everything up to the last `)`): index 0 is the state, 11 `utime`, 12 `stime`,
/// 19 `starttime`.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().collect())
}

/// `btime` of `/proc/stat`: the boot time, in seconds since the Unix epoch.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// A `kB` value of `/proc/self/status`.
fn status_kib(status: &str, key: &str) -> Option<i64> {
    let line = status.lines().find_map(|l| l.strip_prefix(key))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The soft limit of a `/proc/self/limits` row (`unlimited` has no value).
fn soft_limit(limits: &str, name: &str) -> Option<i64> {
    let line = limits.lines().find_map(|l| l.strip_prefix(name))?;
    line.split_whitespace().next()?.parse().ok()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let r = Reading::now();
        if let Some(v) = r.cpu_seconds {
            let counter = ConstCounter::new(v);
            // The unit is appended to the name: `process_cpu_seconds_total`.
            counter.encode(encoder.encode_descriptor(
                "process_cpu",
                "Total user and system CPU time spent in seconds",
                Some(&Unit::Seconds),
                counter.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                r.resident_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                r.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                r.max_fds,
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(v) = value {
                let gauge = ConstGauge::new(v);
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
        }
        if let Some(v) = r.start_time_seconds {
            let gauge = ConstGauge::new(v);
            gauge.encode(encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn proc_files_parse() {
        let stat = "4242 (idmint (serve) x) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 75 0 0 20 0 \
                    9 0 123400 1000 100 18446744073709551615";
        let f = stat_fields(stat).unwrap();
        assert_eq!((f[0], f[11], f[12], f[19]), ("S", "250", "75", "123400"));
        assert_eq!(
            boot_time("cpu 1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(
            status_kib("Name:\tidmint\nVmRSS:\t  14336 kB\n", "VmRSS:"),
            Some(14_336)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            65536                524288               files\n\
                      Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(soft_limit(limits, "Max open files"), Some(65_536));
        assert_eq!(soft_limit(limits, "Max locked memory"), None);
    }

    /// On Linux every series is there, with values a running process has.
    #[test]
    fn this_process_reads_itself() {
        let r = Reading::now();
        assert!(r.cpu_seconds.unwrap() >= 0.0);
        assert!(r.resident_bytes.unwrap() > 1024 * 1024);
        assert!(r.open_fds.unwrap() >= 3);
        assert!(r.max_fds.unwrap() >= r.open_fds.unwrap());
        let start = r.start_time_seconds.unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            start <= now + 1.0 && start > now - 86_400.0 * 365.0,
            "{start} {now}"
        );
    }
}
