//! The shared-mailbox conformance suite on a real MariaDB: the same cases the in-memory twin
//! passes as unit tests (src/store/conformance/mailbox.rs).

use crate::common;

use mysql::prelude::Queryable;

use common::Services;
use msgx::ports::MailboxMarks;
use msgx::store::conformance::mailbox::MailboxTwin;
use msgx::store::mailbox::MysqlMailbox;

struct Maria {
    store: MysqlMailbox,
    upstream: mysql::Conn,
    /// A connection with an insert in an open transaction.
    open: Option<mysql::Conn>,
    s: Services,
}

const INSERT: &str = "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES (?, UTC_TIMESTAMP(), 'VALID')";

impl MailboxTwin for Maria {
    type Store = MysqlMailbox;

    fn store(&mut self) -> &mut MysqlMailbox {
        &mut self.store
    }

    fn put(&mut self, raw: &str) -> i64 {
        self.upstream.exec_drop(INSERT, (raw,)).unwrap();
        self.upstream.last_insert_id() as i64
    }

    fn put_open(&mut self, raw: &str) -> i64 {
        let mut c = self.s.mysql();
        c.query_drop("START TRANSACTION").unwrap();
        c.exec_drop(INSERT, (raw,)).unwrap();
        let id = c.last_insert_id() as i64;
        self.open = Some(c);
        id
    }

    fn end_open(&mut self, commit: bool) {
        let mut c = self.open.take().expect("an open transaction");
        c.query_drop(if commit { "COMMIT" } else { "ROLLBACK" }).unwrap();
    }

    fn set_status(&mut self, id: i64, status: &str) {
        self.upstream
            .exec_drop("UPDATE cminmsgs SET CMINMSGS_STATUS = ? WHERE CMINMSGS_ID = ?", (status, id))
            .unwrap();
    }

    fn mark_of(&mut self, id: i64) -> (bool, String) {
        let (marked, status): (bool, String) = self
            .upstream
            .exec_first(
                "SELECT CMINMSGS_DATE_PROCESSED IS NOT NULL, CMINMSGS_STATUS FROM cminmsgs WHERE CMINMSGS_ID = ?",
                (id,),
            )
            .unwrap()
            .expect("row");
        (marked, status)
    }

    fn refuse_marks_of(&mut self, id: i64) {
        self.upstream
            .query_drop(format!(
                "CREATE TRIGGER refuse_{id} BEFORE UPDATE ON cminmsgs FOR EACH ROW \
                 IF NEW.CMINMSGS_ID = {id} THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'marks of row {id} are refused'; END IF"
            ))
            .unwrap();
    }

    fn mark_by_someone_else(&mut self, id: i64) {
        self.upstream
            .exec_drop(
                "UPDATE cminmsgs SET CMINMSGS_DATE_PROCESSED = UTC_TIMESTAMP(), CMINMSGS_STATUS = 'DONE-ELSEWHERE' WHERE CMINMSGS_ID = ?",
                (id,),
            )
            .unwrap();
    }
}

fn fresh() -> (Maria, ()) {
    let s = Services::migrated("");
    let store = MysqlMailbox::connect(&s.cfg.mysql_url, &s.cfg.inbound).expect("connect");
    let upstream = s.mysql();
    (Maria { store, upstream, open: None, s }, ())
}

msgx::mailbox_conformance_tests!(fresh());

/// #16: on a mailbox of 1,000,000 rows, the rescan's chunk reads a range of the primary key
/// (EXPLAIN type `range` on `PRIMARY`, rows of the order of the chunk), never the table.
#[test]
fn a_rescan_chunk_reads_a_primary_key_range_on_a_million_row_mailbox() {
    use msgx::ports::MailboxScan;
    let s = Services::migrated("");
    let mut my = s.mysql();
    my.query_drop(
        "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_DATE_PROCESSED, CMINMSGS_STATUS)
         SELECT '<MSG/>', UTC_TIMESTAMP(), UTC_TIMESTAMP(), 'PROCESSED' FROM seq_1_to_1000000",
    )
    .unwrap();
    my.query_drop("UPDATE cminmsgs SET CMINMSGS_DATE_PROCESSED = NULL, CMINMSGS_STATUS = 'VALID' WHERE CMINMSGS_ID = 987654")
        .unwrap();
    my.query_drop("ANALYZE TABLE cminmsgs").unwrap();
    let mut mb = MysqlMailbox::connect(&s.cfg.mysql_url, &s.cfg.inbound).unwrap();
    let chunk = s.cfg.pipeline.rescan_chunk as i64;
    for from in [1, 500_001, 990_001] {
        let plan = mb.explain_rescan(from, from + chunk - 1, chunk as usize).unwrap();
        assert_eq!(plan.len(), 1, "{plan:?}");
        let (access, key, rows) = &plan[0];
        assert_eq!((access.as_str(), key.as_deref()), ("range", Some("PRIMARY")), "{plan:?}");
        // InnoDB's range estimate is rough (about 2x here); a scan would say 1,000,000.
        assert!(*rows <= 5 * chunk, "a chunk of {chunk} IDs estimates {rows} rows: {plan:?}");
    }
    let found = mb.unmarked(980_001, 990_000, chunk as usize).unwrap();
    assert_eq!(found.iter().map(|r| r.id).collect::<Vec<_>>(), vec![987654]);
}

/// #16: with `mailbox.time-zone`, the marks, the compat insert and the outbound rows are
/// written as the owner's local time, and DATE_RECEIVED is read in it.
#[test]
fn the_mailbox_time_zone_is_used_for_every_datetime_written_and_read() {
    use msgx::ports::{MailboxMarks, MailboxScan, MailboxSubmit, Outbound};
    let s = Services::migrated("");
    let cfg = msgx::config::Config::from_toml_str(
        &format!("{}\n[mailbox]\ntime-zone = \"+08:00\"\n", s.toml),
        |k| match k {
            "MSGX_PG_URL" => Some(s.cfg.pg_url.clone()),
            "MSGX_MYSQL_URL" => Some(s.cfg.mysql_url.clone()),
            _ => None,
        },
    )
    .unwrap();
    let mut mb = MysqlMailbox::connect(&cfg.mysql_url, &cfg.inbound).unwrap();
    let now = std::time::SystemTime::now();
    let id = mb.insert("<MSG/>", now).unwrap();
    mb.mark(&[id], now, &|| Ok(())).unwrap();
    let mut my = s.mysql();
    // Minutes between what msgx wrote and UTC now: +480 for +08:00.
    let skew = |col: &str, table: &str, id_col: &str, id: i64, my: &mut mysql::Conn| -> i64 {
        my.query_first::<i64, _>(format!(
            "SELECT TIMESTAMPDIFF(MINUTE, UTC_TIMESTAMP(), {col}) FROM {table} WHERE {id_col} = {id}"
        ))
        .unwrap()
        .unwrap()
    };
    for col in ["CMINMSGS_DATE_RECEIVED", "CMINMSGS_DATE_PROCESSED"] {
        let m = skew(col, "cminmsgs", "CMINMSGS_ID", id, &mut my);
        assert!((479..=480).contains(&m), "{col} is {m} minutes from UTC, not +08:00");
    }
    let mut out = msgx::store::mailbox::MysqlOutbound::connect(&cfg.mysql_url, &cfg.outbound).unwrap();
    let oid = out.insert("VIEWRQRD", "<MSG/>", now).unwrap();
    let m = skew("COUTMSGS_DATE_INSERTED", "coutmsgs", "COUTMSGS_ID", oid, &mut my);
    assert!((479..=480).contains(&m), "outbound insert time is {m} minutes from UTC");
    assert_eq!(out.find("VIEWRQRD", "<MSG/>", now - std::time::Duration::from_secs(5)).unwrap(), Some(oid));
    // A row the owner inserted with its local sysdate() reads back as the right instant.
    my.query_drop("INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES ('<MSG/>', UTC_TIMESTAMP() + INTERVAL 8 HOUR, 'VALID')").unwrap();
    let rows = mb.rows(id + 1, i64::MAX, 10).unwrap();
    let got = rows[0].received_at.expect("received");
    let off = now.duration_since(got).unwrap_or_else(|e| e.duration());
    assert!(off < std::time::Duration::from_secs(60), "DATE_RECEIVED read {off:?} away from now");
}

/// #21 item 10: an instance frozen inside its mark transaction (after the UPDATE, before the
/// COMMIT) holds someone else's rows only until MariaDB ends its idle transaction
/// (`idle_transaction_timeout`, 5 s): the new active instance's marks go through, and the frozen
/// one, woken, commits nothing.
#[test]
fn regression_an_instance_frozen_inside_its_mark_transaction_releases_the_rows() {
    let (mut m, ()) = fresh();
    let ids: Vec<i64> = (0..200).map(|i| m.put(&format!("<m{i}/>"))).collect();
    let url = m.s.cfg.mysql_url.clone();
    let names = m.s.cfg.inbound.clone();
    let woke = std::thread::scope(|scope| {
        let frozen = scope.spawn(|| {
            let mut mb = MysqlMailbox::connect(&url, &names).unwrap();
            let asked = std::cell::Cell::new(0);
            let freeze_before_commit = || {
                asked.set(asked.get() + 1);
                if asked.get() == 2 {
                    std::thread::sleep(std::time::Duration::from_secs(8)); // SIGSTOP, as seen
                }
                Ok(())
            };
            mb.mark(&ids, msgx::clock::Clock::now(&msgx::clock::SystemClock), &freeze_before_commit)
        });
        std::thread::sleep(std::time::Duration::from_secs(1));
        let mut other = MysqlMailbox::connect(&url, &names).unwrap();
        let start = std::time::Instant::now();
        let theirs = other.mark(&ids, msgx::clock::Clock::now(&msgx::clock::SystemClock), &|| Ok(()));
        let waited = start.elapsed();
        println!("the active instance's marks waited {waited:?} for the frozen one's locks");
        assert!(waited < std::time::Duration::from_secs(7), "locks held past the session limit: {waited:?}");
        assert!(theirs.unwrap().iter().all(|m| *m == msgx::ports::Mark::Written));
        frozen.join().unwrap()
    });
    assert!(woke.is_err(), "the frozen instance committed after waking: {woke:?}");
    assert!(ids.iter().all(|id| m.mark_of(*id).0), "every row marked once, by the active instance");
}
