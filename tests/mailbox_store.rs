//! The shared-mailbox conformance suite on a real MariaDB: the same cases the in-memory twin
//! passes as unit tests (src/store/conformance/mailbox.rs).

mod common;

use mysql::prelude::Queryable;

use common::Services;
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
