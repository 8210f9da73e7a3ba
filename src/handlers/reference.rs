//! Reference (master) data into `REF_MASTER (RTYPE, RKEY)`: DNLD and RESP replace the type's
//! list (keys not in the package go), ADD and UPD upsert, DEL deletes. A key twice in one
//! package is PROTOCOL. A declared `RECS` that is not the number of records is tolerated: every
//! record present is applied and the mismatch is reported (real vendor feeds miscount; a
//! record is self-contained, so applying it is always right). Except for a full list
//! (DNLD/RESP) that declares *more* records than it carries: replacing the list with a
//! truncated package would delete what the missing records hold, so that stays PROTOCOL.
//! Reference data writes no events.

use std::collections::BTreeSet;

use super::{Decision, RefChange, Reject};
use crate::codec::{RefData, RefOp};

pub fn decide(rtype: &str, op: RefOp, r: &RefData) -> Result<Decision, Reject> {
    let mut warnings: Vec<String> = r.note.iter().cloned().collect();
    if let Some(n) = r.recs.map(|n| n as usize).filter(|n| *n != r.records.len()) {
        let full_list = matches!(op, RefOp::Dnld | RefOp::Resp);
        let what = format!("RECS declares {n} {rtype} records, the package carries {}", r.records.len());
        if full_list && n > r.records.len() {
            return Err(Reject::Protocol(format!(
                "{what}: a full list that lacks records would delete them"
            )));
        }
        warnings.push(format!("{what}; every record present was applied"));
    }
    if r.records.is_empty() && matches!(op, RefOp::Dnld | RefOp::Resp) {
        return Err(Reject::Protocol(format!(
            "a full {rtype} list without records: replacing the list with it would delete every {rtype}"
        )));
    }
    let mut keys = BTreeSet::new();
    for rec in &r.records {
        if !keys.insert(rec.key.as_str()) {
            return Err(Reject::Protocol(format!("{rtype} key {} appears twice in the package", rec.key)));
        }
    }
    let mut refs = Vec::new();
    if matches!(op, RefOp::Dnld | RefOp::Resp) {
        refs.push(RefChange::Keep {
            rtype: rtype.to_string(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
        });
    }
    for rec in &r.records {
        refs.push(match op {
            RefOp::Del => RefChange::Delete { rtype: rtype.to_string(), rkey: rec.key.clone() },
            _ => RefChange::Upsert {
                rtype: rtype.to_string(),
                rkey: rec.key.clone(),
                payload_json: serde_json::to_string(&rec.fields).expect("JSON values serialise"),
            },
        });
    }
    Ok(Decision { references: refs, warnings, ..Default::default() })
}
