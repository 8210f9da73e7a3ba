//! The events' contract (#67): one JSON Schema (2020-12) per Kafka topic's record — its key,
//! its headers and its value — published with every release (`msgx schema`, the packages'
//! `/usr/share/msgx/schema/`), and the form a registry-validating broker enforces. The files
//! beside this one are the schemas; docs/events.md is checked against them by a test, every
//! golden event is validated against them, and so is every record the simulator delivers.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::domain::Target;

/// The version of the records' schema this release writes, in every record's
/// `schema_version` header. Version 1 was msgx 0.1 and 0.2 (no `schema_version`, no
/// `time_zone`); a release step only adds optional fields, a breaking change takes a new
/// version (docs/operations.md, "Upgrading msgx").
pub const VERSION: &str = "2";

/// `KAFKA:msg`'s record schema.
pub const MSG: &str = include_str!("msg.json");
/// `KAFKA:schd`'s record schema.
pub const SCHD: &str = include_str!("schd.json");

/// The Kafka targets, each with its schema's name (`msgx schema NAME`, `NAME.json`).
pub const TOPICS: [(Target, &str); 2] = [(Target::KafkaMsg, "msg"), (Target::KafkaSchd, "schd")];

/// The record schema of a Kafka target; `None` for COUTMSGS (a table, not a topic).
pub fn of(target: Target) -> Option<&'static str> {
    match target {
        Target::KafkaMsg => Some(MSG),
        Target::KafkaSchd => Some(SCHD),
        Target::Coutmsgs => None,
    }
}

/// The target a schema name (`msg`, `schd`) stands for.
pub fn named(name: &str) -> Option<Target> {
    TOPICS.iter().find(|(_, n)| *n == name).map(|(t, _)| *t)
}

fn parsed(target: Target) -> Value {
    let text = of(target).expect("a Kafka target");
    serde_json::from_str(text).expect("the schemas shipped are JSON (schema::tests)")
}

/// What a registry-validating broker checks a topic's records against (Tansu's
/// `--schema-registry`: the file `TOPIC.json`, whose `properties.value` validates each
/// record's value, and `properties.key`, if present, its key parsed as JSON). The value's
/// schema made self-contained — the root's `$defs` carried in, because the broker compiles it
/// alone and a reference it cannot resolve would make it validate nothing — and no key
/// schema: msgx's keys are plain text (a FLID, `FLTR`), not JSON.
pub fn registry_document(target: Target) -> Value {
    registry_form(&parsed(target))
}

/// [`registry_document`] of any record schema (the tests' too: the release before's, a
/// planted change).
pub(crate) fn registry_form(record: &Value) -> Value {
    let mut value = record["properties"]["value"].clone();
    value["$schema"] = record["$schema"].clone();
    if let Some(defs) = record.get("$defs") {
        value["$defs"] = defs.clone();
    }
    json!({
        "title": record["title"],
        "description": "msgx's record value for a registry-validating broker (msgx schema --registry); the key is plain text and not validated",
        "type": "object",
        "properties": { "value": value },
    })
}

/// `msgx schema --registry DIR`: `TOPIC.json` for both configured topics, written where the
/// broker's registry reads them. The paths written, in target order.
pub fn write_registry(dir: &Path, topic_msg: &str, topic_schd: &str) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut out = Vec::new();
    for (target, topic) in [(Target::KafkaMsg, topic_msg), (Target::KafkaSchd, topic_schd)] {
        let path = dir.join(format!("{topic}.json"));
        let text = serde_json::to_string_pretty(&registry_document(target)).expect("JSON");
        std::fs::write(&path, text + "\n")?;
        out.push(path);
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests;
