//! A 2,000-flight SCHD-DNLD end to end on the real stores: mailbox read, decode, validation,
//! the Redis snapshot script, and the PostgreSQL commit of 2,000 KAFKA:schd rows — the time the
//! pump is busy with it, against reading the same text back from the mailbox (the I/O floor).
//! Run with the services up: `cargo bench --bench snapshot`.

#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::Instant;

use msgx::ingress;
use msgx::ports::MailboxTexts;
use msgx::pump::Round;
use msgx::stats::Stats;
use msgx::store::mailbox::MysqlMailbox;

fn dnld(seqn: u64, n: usize) -> String {
    let mut body = format!("<RECS>{n}</RECS>");
    for i in 0..n {
        body.push_str(&format!(
            "<FLTR><FLID>{}</FLID><ALCD>MU</ALCD><FLNO>MU{}</FLNO><MVIN>{}</MVIN><SODT>05MAR26{:02}{:02}</SODT><FLTY>J</FLTY>\
             <ROUT RTNO=\"1\"><APCD>SHA</APCD><SCAT>05MAR261130</SCAT></ROUT><ACFT>32N</ACFT><RENO>B-{:04}</RENO><TRML>T2</TRML>\
             <STND>2{:02}</STND><PSDT PSNO=\"1\"><PSST>2{:02}</PSST><STST>05MAR260800</STST></PSDT><PHAG>110009</PHAG>\
             <ERUT RTNO=\"1\"><APCD>CTU</APCD><SCDT>05MAR260905</SCDT></ERUT><ERUT RTNO=\"2\"><APCD>SHA</APCD></ERUT><FTSS>SCH</FTSS></FLTR>",
            100_000 + i, 5000 + i, if i % 2 == 0 { "D" } else { "A" }, 6 + i % 16, i % 60, i, i % 90, i % 90
        ));
    }
    msgx::fixtures::other(seqn, "SCHD", "DNLD", &format!("<SCHD>{body}</SCHD>"))
}

fn main() {
    let _ = env_logger::Builder::new().filter_level(log::LevelFilter::Warn).try_init();
    let s = common::Services::migrated("");
    let stats = Arc::new(Stats::default());
    let mut poller = s.poller(&stats);
    let mut pump = s.pump(&stats);
    let mut mailbox = MysqlMailbox::connect(&s.cfg.mysql_url, &s.cfg.inbound).unwrap();
    println!(
        "SCHD-DNLD of 2,000 flights, end to end in the pump (real MariaDB, Redis, PostgreSQL), one run each:"
    );
    for seqn in 1..=3u64 {
        let raw = dnld(seqn, 2000);
        let ids = s.insert_inbound(std::slice::from_ref(&raw));
        while poller.round(common::now()).unwrap() != ingress::Round::Idle {}
        let t = Instant::now();
        let floor = mailbox.raws(&ids, u64::MAX, u64::MAX).unwrap();
        let floor_ms = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(floor.len(), 1);
        let t = Instant::now();
        assert_eq!(pump.round(common::now()).unwrap(), Round::Worked(1));
        let ms = t.elapsed().as_secs_f64() * 1e3;
        println!(
            "  snapshot {seqn} ({:.1} MB): pump {ms:7.1} ms   reading it from the mailbox {floor_ms:5.1} ms   ratio {:.0}x",
            raw.len() as f64 / 1e6,
            ms / floor_ms
        );
    }
}
