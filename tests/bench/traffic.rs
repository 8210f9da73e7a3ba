//! What the end-to-end and soak benches share: the traffic they feed (realistic FLOPs) and the
//! CPU time they read from /proc for msgx and each store's server.
#![allow(dead_code)] // each bench takes what it needs

use std::collections::BTreeMap;

use msgx::fixtures;

/// A realistic FLOP: stands, gates, times, counters, delays, remarks and aircraft over 500
/// flights, values varying so most messages change their flight (and so write an event).
pub fn message(i: u64) -> String {
    let flid = 100_000 + (i * 31) % 500;
    let (hh, mm) = (10 + i % 10, i % 60);
    let (styp, body) = match i % 8 {
        0 => ("STND", format!("<STND>{}</STND>", 200 + i % 97)),
        1 => ("GTDT", format!("<GTDT GTNO=\"1\"><GATE>G{}</GATE><PGOT>05MAR26{hh:02}{mm:02}</PGOT><PGCT>05MAR26{:02}{mm:02}</PGCT></GTDT>", i % 90, hh + 1)),
        2 => ("EOBT", format!("<EOBT>05MAR26{hh:02}{mm:02}</EOBT>")),
        3 => ("CKDT", format!("<CKDT CKNO=\"1\"><CHKC>K{}</CHKC><PCOT>05MAR26{hh:02}00</PCOT><PCCT>05MAR26{hh:02}{mm:02}</PCCT></CKDT>", i % 40)),
        4 => ("DELY", format!("<DELY CODE=\"{}\" STRT=\"05MAR26{hh:02}{mm:02}\" DURA=\"00{:02}\">late inbound</DELY>", 80 + i % 19, mm)),
        5 => ("REMC", format!("<REMC>remark {i}: 航班备注</REMC>")),
        6 => ("ACFT", format!("<ACFT>{}</ACFT>", ["32N", "738", "77W", "789", "321"][(i % 5) as usize])),
        _ => ("TOBT", format!("<TOBT>05MAR26{hh:02}{mm:02}</TOBT>")),
    };
    fixtures::other(
        i,
        "FLOP",
        styp,
        &format!("<FLOP><FLID>{flid}</FLID><FFID>MU-{flid}-D-05MAR260900-D</FFID>{body}</FLOP>"),
    )
}

/// CPU time (ms) by process group: the program under test and each store's server. The
/// machine is shared by all of them, so the drain rate follows the total.
#[derive(Default, Clone)]
pub struct Cpu(pub BTreeMap<&'static str, f64>);

impl Cpu {
    pub fn now(own: u32) -> Cpu {
        let tick = 100.0; // USER_HZ on Linux
        let mut m: BTreeMap<&'static str, f64> = BTreeMap::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
            let comm = &stat[open + 1..close];
            let group = match comm {
                _ if pid == own => "program",
                "postgres" => "postgres",
                "mariadbd" | "mysqld" => "mariadb",
                "redis-server" => "redis",
                "tansu" => "broker",
                // The broker's TLS (#64): Tansu has none of its own.
                "stunnel4" | "stunnel" => "stunnel",
                _ => continue,
            };
            let f: Vec<&str> = stat[close + 2..].split_whitespace().collect();
            // A zombie is not counted: a server stopped just before the run (its postmaster
            // waiting for a parent to reap it, here where pid 1 may be slow to) would
            // otherwise take its children's time out of the run when it went (measured: a
            // drop of 14 s in the first run after a restart, a negative CPU figure).
            if f.first() == Some(&"Z") {
                continue;
            }
            // utime + stime, and cutime + cstime: a PostgreSQL backend that has exited is
            // counted in the postmaster's children time.
            let ticks: f64 = if group == "program" { &f[11..13] } else { &f[11..15] }
                .iter()
                .map(|v| v.parse::<f64>().unwrap_or(0.0))
                .sum();
            *m.entry(group).or_default() += ticks * 1000.0 / tick;
        }
        Cpu(m)
    }

    pub fn since(&self, before: &Cpu) -> Cpu {
        Cpu(self.0.iter().map(|(k, v)| (*k, v - before.0.get(k).copied().unwrap_or(0.0))).collect())
    }

    pub fn total(&self) -> f64 {
        self.0.values().sum()
    }

    /// "total N ms (program a, postgres b, …) per 1000 messages".
    pub fn per_thousand(&self, n: u64) -> String {
        let k = n as f64 / 1000.0;
        let total: f64 = self.0.values().sum::<f64>() / k;
        let parts: Vec<String> = self.0.iter().map(|(g, v)| format!("{g} {:.0}", v / k)).collect();
        format!("{total:.0} ms ({})", parts.join(", "))
    }
}

/// A memory figure of `/proc/PID/status` in KiB: `VmRSS` (now) or `VmHWM` (the peak).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}
