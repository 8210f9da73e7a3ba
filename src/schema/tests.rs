//! The schemas against the events: every golden payload, every record the simulator delivers
//! (`Contract::record`), random decisions, and the release before's schema (#67).

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::*;
use crate::ports::Record;

/// The published schemas, compiled: a record checked as a consumer reads it (key, headers and
/// value against the record schema) and as the broker does (the value alone against the
/// registry form, compiled as its own root the way Tansu compiles it).
pub(crate) struct Contract {
    schemas: boon::Schemas,
    record: [boon::SchemaIndex; 2],
    registry: [boon::SchemaIndex; 2],
}

/// Records [`Contract::record`] checked in this process (the simulator's sweep says how many).
pub(crate) static CHECKED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The published schemas compiled once for every check that reads records (the simulator).
pub(crate) fn contract() -> &'static Contract {
    static CONTRACT: std::sync::OnceLock<Contract> = std::sync::OnceLock::new();
    CONTRACT.get_or_init(Contract::new)
}

fn slot(target: Target) -> usize {
    usize::from(target == Target::KafkaSchd)
}

impl Contract {
    pub(crate) fn new() -> Contract {
        Contract::of([parsed(Target::KafkaMsg), parsed(Target::KafkaSchd)])
    }

    /// A contract from other record schemas (the release before's; a planted change).
    pub(crate) fn of(records: [Value; 2]) -> Contract {
        let mut schemas = boon::Schemas::new();
        let mut c = boon::Compiler::new();
        let [msg, schd] = records;
        // The value's schema alone, as the broker compiles it.
        let registry = |record: &Value| registry_form(record)["properties"]["value"].clone();
        let docs = [
            ("urn:msgx:test:record:msg", msg.clone()),
            ("urn:msgx:test:record:schd", schd.clone()),
            ("urn:msgx:test:registry:msg", registry(&msg)),
            ("urn:msgx:test:registry:schd", registry(&schd)),
        ];
        let mut idx = Vec::new();
        for (url, doc) in docs {
            c.add_resource(url, doc).expect("a resource");
            idx.push(
                c.compile(url, &mut schemas).unwrap_or_else(|e| panic!("{url} does not compile: {e:#}")),
            );
        }
        Contract { schemas, record: [idx[0], idx[1]], registry: [idx[2], idx[3]] }
    }

    /// A delivered record against its topic's schema, as a consumer and as the broker read it.
    pub(crate) fn record(&self, target: Target, r: &Record<'_>) -> Result<(), String> {
        CHECKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let value: Value = serde_json::from_str(&r.payload).map_err(|e| format!("not JSON: {e}"))?;
        let headers: serde_json::Map<String, Value> =
            r.headers.iter().map(|(k, v)| (k.to_string(), Value::String(v.clone()))).collect();
        let instance = json!({ "key": r.key, "headers": headers, "value": value });
        self.schemas.validate(&instance, self.record[slot(target)]).map_err(|e| format!("{e:#}"))?;
        self.value(target, &value)
    }

    /// A record's value as the broker's registry checks it.
    pub(crate) fn value(&self, target: Target, value: &Value) -> Result<(), String> {
        self.schemas.validate(value, self.registry[slot(target)]).map_err(|e| format!("{e:#}"))
    }
}

/// Every `event KAFKA:… key=K PAYLOAD` line of the golden files: (target, key, payload).
fn golden_events() -> Vec<(Target, String, Value)> {
    let files = [
        include_str!("../handlers/golden/flop.txt"),
        include_str!("../handlers/golden/platform.txt"),
        include_str!("../handlers/golden/reference.txt"),
        include_str!("../handlers/golden/rules.txt"),
        include_str!("../handlers/golden/schd.txt"),
        include_str!("../handlers/golden/schs.txt"),
    ];
    let mut out = Vec::new();
    for line in files.iter().flat_map(|f| f.lines()) {
        let Some(rest) = line.trim().strip_prefix("event ") else { continue };
        let target = if rest.starts_with("KAFKA:msg ") {
            Target::KafkaMsg
        } else if rest.starts_with("KAFKA:schd ") {
            Target::KafkaSchd
        } else {
            continue;
        };
        let rest = &rest[rest.find("key=").expect("key=") + 4..];
        let (key, payload) = rest.split_once(' ').expect("key then payload");
        out.push((target, key.to_string(), serde_json::from_str(payload).expect("a JSON payload")));
    }
    out
}

/// A golden event as the dispatcher sends it: a msg event alone, a schd event in its array.
fn as_sent(target: Target, key: &str, value: &Value) -> Record<'static> {
    let (key, payload, headers) = match target {
        Target::KafkaMsg => (
            key.to_string(),
            value.to_string(),
            vec![("event_id", "4711"), ("event_key", "1001.0.9f86d081"), ("msg_id", "1001")],
        ),
        _ => (
            "FLTR".to_string(),
            json!([value]).to_string(),
            vec![
                ("first_event_id", "2001"),
                ("last_event_id", "2001"),
                ("flights", "1"),
                ("batch_key", "schd:0123456789abcdef01234567"),
            ],
        ),
    };
    let mut headers: Vec<(std::borrow::Cow<'static, str>, String)> =
        headers.into_iter().map(|(k, v)| (k.into(), v.to_string())).collect();
    headers.push(("schema_version".into(), VERSION.into()));
    headers.push(("time_zone".into(), "Asia/Shanghai".into()));
    Record { topic: "t".into(), key: key.into(), payload: payload.into(), headers }
}

#[test]
fn every_golden_event_is_valid_against_its_published_schema() {
    let contract = Contract::new();
    let events = golden_events();
    let kinds: BTreeSet<Target> = events.iter().map(|(t, ..)| *t).collect();
    assert_eq!(kinds.len(), 2, "golden events of both topics");
    assert!(events.len() > 50, "{} golden events", events.len());
    for (target, key, value) in &events {
        contract.record(*target, &as_sent(*target, key, value)).unwrap_or_else(|e| panic!("{value}: {e}"));
    }
}

#[test]
fn a_record_that_breaks_the_schema_is_found() {
    let contract = Contract::new();
    let (target, key, mut value) =
        golden_events().into_iter().find(|(t, ..)| *t == Target::KafkaMsg).unwrap();
    let flid = value.as_object_mut().unwrap().remove("flid").unwrap();
    value["flight_id"] = flid;
    let e = contract.record(target, &as_sent(target, &key, &value)).unwrap_err();
    assert!(e.contains("flid"), "{e}");
    assert!(contract.value(target, &value).is_err(), "the broker's form refuses it too");
    let mut record = as_sent(Target::KafkaMsg, &key, &golden_events()[0].2);
    record.headers.retain(|(k, _)| k != "time_zone");
    assert!(contract.record(Target::KafkaMsg, &record).unwrap_err().contains("time_zone"));
    let schd = json!([{"DELETED": true, "FLID": "499"}]);
    assert!(
        contract.value(Target::KafkaSchd, &schd).unwrap_err().contains("REASON"),
        "DELETED without REASON"
    );
}

/// Every `properties` entry of a schema, at any depth, with its path.
fn properties<'a>(v: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
    if let Some(props) = v.get("properties").and_then(Value::as_object) {
        for (name, p) in props {
            out.push((format!("{path}.{name}"), p));
            properties(p, format!("{path}.{name}"), out);
        }
    }
    if let Some(items) = v.get("items") {
        properties(items, format!("{path}[]"), out);
    }
}

#[test]
fn every_field_of_both_schemas_has_a_description_and_the_version_is_the_headers() {
    for (target, name) in TOPICS {
        let record = parsed(target);
        assert_eq!(record["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(record["x-msgx-schema-version"].to_string(), VERSION, "{name}");
        assert_eq!(record["$id"], format!("urn:msgx:schema:{name}:{VERSION}"));
        assert_eq!(record["properties"]["headers"]["properties"]["schema_version"]["const"], VERSION);
        let mut all = Vec::new();
        properties(&record, name.to_string(), &mut all);
        assert!(all.len() > 10, "{name}: {} fields", all.len());
        for (path, p) in all {
            assert!(
                p.get("description").and_then(Value::as_str).is_some_and(|d| d.len() > 10),
                "{path} has no description"
            );
        }
    }
}

#[test]
fn the_registry_form_is_self_contained_and_validates_what_the_record_schema_does() {
    for (target, _) in TOPICS {
        let doc = registry_document(target);
        assert!(doc["properties"].get("key").is_none(), "the key is plain text: no key schema");
        let value = &doc["properties"]["value"];
        assert_eq!(value["$schema"], "https://json-schema.org/draft/2020-12/schema");
        // Every reference points inside the value's own document.
        let text = value.to_string();
        for r in text.split("\"$ref\":\"").skip(1) {
            let r = &r[..r.find('"').unwrap()];
            let pointer = r.strip_prefix('#').expect("a local reference");
            assert!(value.pointer(pointer).is_some(), "{r} does not resolve in the value's document");
        }
    }
    let dir = std::env::temp_dir().join(format!("msgx-registry-{}", std::process::id()));
    let written = write_registry(&dir, "aodb.msg", "aodb.schd").unwrap();
    assert_eq!(written, [dir.join("aodb.msg.json"), dir.join("aodb.schd.json")]);
    let back: Value = serde_json::from_str(&std::fs::read_to_string(&written[1]).unwrap()).unwrap();
    assert_eq!(back, registry_document(Target::KafkaSchd));
    std::fs::remove_dir_all(dir).unwrap();
}

/// The schemas of the versions releases published, frozen as published: the newest is what
/// consumers of the release before this one rely on. A release that publishes a new version
/// adds its files here when it is pinned in packaging/RELEASES (docs/operations.md).
const RELEASED: [(&str, &str, &str); 1] =
    [("1", include_str!("released/msg.1.json"), include_str!("released/schd.1.json"))];

/// What a consumer of `old` would find broken in `new`: a field removed or renamed, a type
/// widened (a value the consumer was promised never to see), a required field that became
/// optional, a field added as required. A release step may only add optional fields.
fn breaking(old: &Value, new: &Value, path: &str, out: &mut Vec<String>) {
    let types = |v: &Value| -> BTreeSet<String> {
        match v.get("type") {
            Some(Value::String(t)) => [t.clone()].into(),
            Some(Value::Array(ts)) => ts.iter().filter_map(|t| t.as_str().map(String::from)).collect(),
            _ => BTreeSet::new(),
        }
    };
    let (was, is) = (types(old), types(new));
    if !was.is_empty() && !is.is_subset(&was) {
        out.push(format!("{path}: type {is:?} where {was:?} was promised"));
    }
    let required = |v: &Value| -> BTreeSet<String> {
        v.get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str().map(String::from))
            .collect()
    };
    let (req_was, req_is) = (required(old), required(new));
    for r in req_was.difference(&req_is) {
        out.push(format!("{path}.{r}: required before, optional or gone now"));
    }
    for r in req_is.difference(&req_was) {
        out.push(format!("{path}.{r}: added as required (a release step adds only optional fields)"));
    }
    let empty = serde_json::Map::new();
    let props = |v: &'_ Value| {
        v.get("properties").and_then(Value::as_object).cloned().unwrap_or_else(|| empty.clone())
    };
    let (p_old, p_new) = (props(old), props(new));
    for (name, o) in &p_old {
        match p_new.get(name) {
            None => out.push(format!("{path}.{name}: removed or renamed")),
            Some(n) => breaking(o, n, &format!("{path}.{name}"), out),
        }
    }
    if let (Some(o), Some(n)) = (old.get("items"), new.get("items")) {
        breaking(o, n, &format!("{path}[]"), out);
    }
}

/// What version 2 changed against version 1, on both topics (announced in docs/operations.md, "Upgrading msgx"):
/// two headers every record now carries.
const CHANGED_IN_THIS_VERSION: [&str; 2] = [
    ".headers.schema_version: added as required (a release step adds only optional fields)",
    ".headers.time_zone: added as required (a release step adds only optional fields)",
];

fn breaking_changes(old: &Value, new: &Value) -> Vec<String> {
    let mut out = Vec::new();
    breaking(old, new, "", &mut out);
    out
}

fn released(version: &str) -> [Value; 2] {
    let (_, msg, schd) = RELEASED.iter().find(|(v, ..)| *v == version).expect("a released version");
    [serde_json::from_str(msg).unwrap(), serde_json::from_str(schd).unwrap()]
}

#[test]
fn this_releases_events_keep_the_promise_of_the_schema_the_release_before_published() {
    let (version, ..) = RELEASED[RELEASED.len() - 1];
    let before = released(version);
    let upgrading = include_str!("../../docs/operations.md");
    for ((target, name), old) in TOPICS.iter().zip(&before) {
        let changes = breaking_changes(old, &parsed(*target));
        if version == VERSION {
            assert!(
                changes.is_empty(),
                "{name}: a change within version {VERSION} breaks its promise: {changes:?}"
            );
            continue;
        }
        // A new version: what changed is what docs/operations.md announces for it, no more.
        let announced: Vec<String> = CHANGED_IN_THIS_VERSION.iter().map(|c| c.to_string()).collect();
        assert_eq!(changes, announced, "{name}: version {VERSION} against {version}");
        for field in ["schema_version", "time_zone"] {
            assert!(upgrading.contains(&format!("`{field}`")), "docs/operations.md announces {field}");
        }
    }
    let contract = Contract::of(before);
    for (target, key, value) in golden_events() {
        contract.record(target, &as_sent(target, &key, &value)).unwrap_or_else(|e| panic!("{value}: {e}"));
    }
}

#[test]
fn a_planted_field_rename_is_a_breaking_change() {
    let (version, ..) = RELEASED[RELEASED.len() - 1];
    let [old_msg, _] = released(version);
    let renamed: Value = serde_json::from_str(&MSG.replace("\"flid\"", "\"flight_id\"")).unwrap();
    let changes = breaking_changes(&old_msg, &renamed);
    assert!(
        changes.contains(&".properties.value.flid: removed or renamed".replace(".properties", "")),
        "{changes:?}"
    );
    assert!(changes.iter().any(|c| c == ".value.flid: required before, optional or gone now"), "{changes:?}");
    // And an event written to the renamed schema breaks the old one's consumers.
    let contract = Contract::of(released(version));
    let (_, key, mut value) = golden_events().into_iter().find(|(t, ..)| *t == Target::KafkaMsg).unwrap();
    let flid = value.as_object_mut().unwrap().remove("flid").unwrap();
    value["flight_id"] = flid;
    assert!(contract.record(Target::KafkaMsg, &as_sent(Target::KafkaMsg, &key, &value)).is_err());
    // A widened type and an optional field made required are found too.
    let widened: Value =
        serde_json::from_str(&MSG.replace("\"type\": \"integer\"", "\"type\": [\"integer\", \"string\"]"))
            .unwrap();
    assert!(breaking_changes(&old_msg, &widened).iter().any(|c| c.starts_with(".value.msg_id: type")));
    let mut stricter = parsed(Target::KafkaMsg);
    stricter["properties"]["value"]["required"].as_array_mut().unwrap().push(json!("ffid"));
    assert!(breaking_changes(&old_msg, &stricter).iter().any(|c| c.contains("ffid: added as required")));
}

#[test]
fn the_released_schemas_are_the_versions_they_say() {
    for (version, msg, schd) in RELEASED {
        for (text, name) in [(msg, "msg"), (schd, "schd")] {
            let v: Value = serde_json::from_str(text).unwrap();
            assert_eq!(v["$id"], format!("urn:msgx:schema:{name}:{version}"));
            assert_eq!(v["x-msgx-schema-version"].to_string(), version);
        }
    }
    assert!(
        RELEASED.iter().all(|(v, ..)| *v != VERSION),
        "a published version is never changed: bump VERSION"
    );
}

mod random_decisions {
    //! Random messages decided against random held flights: every event the handlers write
    //! matches its topic's schema as the broker checks it. `PROPTEST_CASES=20000 cargo test
    //! --lib schema::tests::random` runs it for longer.
    use super::*;
    use crate::handlers::{decide, state::FlightState, View};
    use proptest::prelude::*;
    use std::sync::Arc;

    /// Text an airport might send and some it should not: XML-escaped on the way in.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof!["[A-Z0-9]{1,6}", ".{0,12}", Just("05MAR261430".to_string()), Just(String::new())]
    }

    fn escape(s: &str) -> String {
        s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
    }

    fn message() -> impl Strategy<Value = String> {
        let flop = (prop::sample::select(vec!["STND", "ACFT", "COBT", "RENO", "CNCL"]), "[0-9]{1,5}", text())
            .prop_map(|(f, flid, v)| {
                crate::fixtures::flop(
                    1,
                    f,
                    &flid,
                    &[(f, Some(&escape(&v)).filter(|v| !v.is_empty()).map(|v| v.as_str()))],
                )
            });
        let every = (prop::sample::select(crate::fixtures::EVERY_SUBTYPE.to_vec()), "[0-9]{1,5}")
            .prop_map(|((styp, body, _), flid)| crate::fixtures::flop_body(styp, &flid, body));
        let schd = prop::collection::vec(("[0-9]{1,4}", text(), 0u32..28), 1..5).prop_map(|flights| {
            let body: String = flights
                .iter()
                .enumerate()
                .map(|(i, (flid, stnd, day))| {
                    format!(
                        "<FLTR><FLID>{flid}{i}</FLID><SODT>{:02}MAR260905</SODT><STND>{}</STND></FLTR>",
                        day + 1,
                        escape(stnd)
                    )
                })
                .collect();
            crate::fixtures::other(1, "SCHD", "DNLD", &format!("<SCHD>{body}</SCHD>"))
        });
        prop_oneof![flop, every, schd]
    }

    fn view() -> impl Strategy<Value = View> {
        let held = prop::collection::btree_map(
            "[0-9]{1,5}",
            prop::collection::btree_map("[A-Z]{4}", text(), 0..4),
            0..4,
        );
        held.prop_map(|held| {
            let window = held.keys().cloned().collect();
            let flights = held
                .into_iter()
                .map(|(flid, fields)| {
                    let state = FlightState { fields: fields.into_iter().collect(), ..Default::default() };
                    (flid, Arc::new(state))
                })
                .collect();
            View { flights, window }
        })
    }

    proptest! {
        #[test]
        fn every_event_of_a_random_decision_matches_its_schema(raw in message(), view in view(), msg_id in 1i64..1_000_000_000) {
            let Ok(msg) = crate::codec::decode(&raw) else { return Ok(()) };
            let Ok(d) = decide(&view, &msg, msg_id) else { return Ok(()) };
            for e in &d.events {
                let payload: Value = serde_json::from_str(&e.payload_json).expect("JSON");
                let checked = match e.target {
                    Target::KafkaMsg => contract().value(Target::KafkaMsg, &payload),
                    Target::KafkaSchd => contract().value(Target::KafkaSchd, &json!([payload])),
                    Target::Coutmsgs => Ok(()),
                };
                prop_assert!(checked.is_ok(), "{}: {:?}", e.payload_json, checked);
            }
        }
    }
}

/// The rows `| `name` | …` of the first table after `heading` in docs/events.md, and that
/// section's text.
fn documented(heading: &str) -> (BTreeSet<String>, String) {
    let doc = include_str!("../../docs/events.md");
    let section = doc.split(heading).nth(1).expect("the section").split("\n## ").next().unwrap();
    let rows = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split_once('`').map(|(name, _)| name.to_string()))
        .collect();
    (rows, section.to_string())
}

#[test]
fn docs_events_tables_are_the_schemas_fields() {
    for (target, heading, value) in [
        (Target::KafkaMsg, "## `KAFKA:msg`", "/properties/value/properties"),
        (Target::KafkaSchd, "## `KAFKA:schd`", "/properties/value/items/properties"),
    ] {
        let record = parsed(target);
        let fields: BTreeSet<String> =
            record.pointer(value).unwrap().as_object().unwrap().keys().cloned().collect();
        let (rows, text) = documented(heading);
        assert_eq!(rows, fields, "{heading}: the table's fields and the schema's");
        for header in record.pointer("/properties/headers/properties").unwrap().as_object().unwrap().keys() {
            assert!(text.contains(&format!("`{header}`")), "{heading} does not name the header {header}");
        }
    }
}

#[test]
fn the_schemas_examples_are_golden_events_and_valid() {
    let contract = Contract::new();
    let golden: Vec<(Target, Value)> = golden_events().into_iter().map(|(t, _, v)| (t, v)).collect();
    for (target, _) in TOPICS {
        let record = parsed(target);
        let examples =
            record.pointer("/properties/value/examples").and_then(Value::as_array).expect("value examples");
        assert!(!examples.is_empty());
        for example in examples {
            contract.value(target, example).unwrap_or_else(|e| panic!("{example}: {e}"));
            let events: Vec<&Value> = match target {
                Target::KafkaSchd => example.as_array().unwrap().iter().collect(),
                _ => vec![example],
            };
            for e in events {
                assert!(golden.iter().any(|(t, g)| *t == target && g == e), "{e} is not a golden event");
            }
        }
    }
}
