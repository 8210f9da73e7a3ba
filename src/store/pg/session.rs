//! One connection's statements, prepared once and reused (#23).
//!
//! The `postgres` crate prepares a statement given as text on every call: a round trip to
//! parse and describe it, then one to run it, then it closes it. A statement of msgx's is run
//! thousands of times on one connection, so each connection keeps what it prepared, by its
//! text. Every call is still planned with its values (`plan_cache_mode = force_custom_plan`,
//! set for every session in `Pg::client`): a plan kept for any values misjudged the batches
//! (see there), so what is saved is the parse, the describe and their round trip.

use std::collections::HashMap;

use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

/// At most this many statements are kept per connection. msgx's texts are a fixed set of
/// about sixty; a text built with values inside (none is, today) would otherwise grow it for
/// ever, so past this bound the cache starts again.
const STATEMENTS_MAX: usize = 256;

/// What one connection prepared, by the statement's text. Dropped with the connection: a
/// statement belongs to the session that prepared it.
#[derive(Default)]
pub struct Statements(HashMap<String, Statement>);

/// A connection with its statements: what a read or a write transaction runs its SQL on.
pub struct Session<'a> {
    client: &'a mut Client,
    statements: &'a mut Statements,
}

impl<'a> Session<'a> {
    pub fn new(client: &'a mut Client, statements: &'a mut Statements) -> Session<'a> {
        Session { client, statements }
    }

    /// The statement for `sql`, prepared on this connection the first time it is asked for.
    fn prepared(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.statements.0.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        if self.statements.0.len() >= STATEMENTS_MAX {
            self.statements.0.clear();
        }
        self.statements.0.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    pub fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, postgres::Error> {
        let s = self.prepared(sql)?;
        self.client.query(&s, params)
    }

    pub fn query_one(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Row, postgres::Error> {
        let s = self.prepared(sql)?;
        self.client.query_one(&s, params)
    }

    pub fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        let s = self.prepared(sql)?;
        self.client.query_opt(&s, params)
    }

    pub fn execute(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, postgres::Error> {
        let s = self.prepared(sql)?;
        self.client.execute(&s, params)
    }

    /// Statements without parameters, sent as they are (the simple protocol, nothing kept).
    pub fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.client.batch_execute(sql)
    }

    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }
}
