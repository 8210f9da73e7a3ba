//! What `msgx decode` prints for one message: kind, identity, META, the ignore verdict or the
//! error class, and the decoded body — the same steps, in the same order, as the pump.

use serde_json::{json, Value};

use super::ignore::IgnoreRules;
use super::{decode_body, decode_meta, identity, MsgKind, Rulebook};
use crate::error::ErrorClass;

/// The verdict on one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Decoded to this type tag; `supported` is false for a kind msgx does not read yet.
    Decoded { tag: String, supported: bool },
    /// Ended by an ignore rule (SKIPPED in the pump).
    Ignored { rule: String },
    /// MALFORMED or CODEC_ERROR.
    Failed { class: ErrorClass },
}

/// `raw` as an instance carrying `rulebook` reads it, under the ignore rules `ignore`.
pub fn report(
    raw: &str,
    ignore: &IgnoreRules,
    rulebook: &Rulebook,
    include_day_boundary: bool,
) -> (Verdict, Value) {
    let env = match decode_meta(raw) {
        Ok(e) => e,
        Err(e) => {
            return (
                Verdict::Failed { class: e.class },
                json!({ "class": e.class.as_str(), "error": e.detail }),
            )
        }
    };
    let tag = MsgKind::of(&env.meta, rulebook).type_tag();
    let meta = json!(env.meta);
    if let Some(rule) = ignore.matching(&env.meta) {
        return (
            Verdict::Ignored { rule: rule.to_string() },
            json!({ "kind": tag, "meta": meta, "ignored": rule }),
        );
    }
    match decode_body(env, rulebook) {
        Err(e) => (
            Verdict::Failed { class: e.class },
            json!({ "kind": tag, "meta": meta, "class": e.class.as_str(), "error": e.detail }),
        ),
        Ok(m) => {
            let supported = !matches!(m.kind, MsgKind::Unsupported { .. });
            let v = json!({
                "kind": tag,
                "identity": identity(&m.meta, include_day_boundary),
                "meta": meta,
                "supported": supported,
                "unknown": m.unknown,
                "decoded": m.body,
            });
            (Verdict::Decoded { tag: tag.into_owned(), supported }, v)
        }
    }
}
