//! Operators' reads of a message's life (#40): the dead-letter queue listed (`msgx dead`). Read
//! only, from own PostgreSQL, never on a stage's path.

use std::time::SystemTime;

use super::Pg;
use crate::error::ErrorClass;
use crate::ports::StoreResult;

/// One DEAD message, as `msgx dead` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub msg_id: i64,
    /// FLOP-STND, SCHD-DNLD, …; `None` when the META could not be read.
    pub type_tag: Option<String>,
    pub class: Option<ErrorClass>,
    pub error: Option<String>,
    pub attempts: i32,
    /// The row's last change: when it became DEAD, or when a person dismissed it.
    pub since: SystemTime,
    /// When a person dismissed it, and the note they left (`msgx dismiss`).
    pub dismissed: Option<(SystemTime, String)>,
}

/// Which DEAD messages to list.
#[derive(Debug, Clone, Default)]
pub struct DeadFilter {
    pub class: Option<ErrorClass>,
    /// Only rows whose last change is at or after this time.
    pub since: Option<SystemTime>,
    pub limit: i64,
}

impl Pg {
    /// The DEAD messages still in PROC_STATE (dismissed ones too, marked), oldest MSG_ID first.
    pub fn dead_letters(&mut self, f: &DeadFilter) -> StoreResult<Vec<DeadLetter>> {
        let class = f.class.map(|c| c.as_str().to_string());
        self.run(|c| {
            let rows = c.query(
                "SELECT msg_id, type_tag, error_class, last_error, attempts, updated_at, dismissed_at, dismissed_note
                 FROM proc_state
                 WHERE state = 'DEAD' AND ($1::text IS NULL OR error_class = $1)
                   AND ($2::timestamptz IS NULL OR updated_at >= $2)
                 ORDER BY msg_id LIMIT $3",
                &[&class, &f.since, &f.limit],
            )?;
            Ok(rows
                .iter()
                .map(|r| DeadLetter {
                    msg_id: r.get(0),
                    type_tag: r.get(1),
                    class: r.get::<_, Option<&str>>(2).and_then(ErrorClass::parse),
                    error: r.get(3),
                    attempts: r.get(4),
                    since: r.get(5),
                    dismissed: r
                        .get::<_, Option<SystemTime>>(6)
                        .map(|at| (at, r.get::<_, Option<String>>(7).unwrap_or_default())),
                })
                .collect())
        })
    }
}
