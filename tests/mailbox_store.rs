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
