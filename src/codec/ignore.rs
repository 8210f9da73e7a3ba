//! Ignore rules (G-IGNORE, US-04): `TYPE-STYP` or `TYPE-*` patterns, matched
//! case-insensitively against the META, after META is decoded and before body, identity and
//! handler. A hit ends the message as SKIPPED with `LAST_ERROR = ignored:<rule>`.

use super::Meta;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoreRules {
    rules: Vec<(String, String, String)>, // (TYPE, STYP or "*", the rule as written)
}

impl IgnoreRules {
    /// Rules are validated by the configuration (`TYPE-STYP` or `TYPE-*`).
    pub fn new(rules: &[String]) -> IgnoreRules {
        let rules = rules
            .iter()
            .filter_map(|r| {
                let (t, s) = r.split_once('-')?;
                Some((t.to_ascii_uppercase(), s.to_ascii_uppercase(), r.clone()))
            })
            .collect();
        IgnoreRules { rules }
    }

    /// The first rule that matches, as written in the configuration.
    pub fn matching(&self, meta: &Meta) -> Option<&str> {
        self.rules
            .iter()
            .find(|(t, s, _)| {
                t.eq_ignore_ascii_case(&meta.msg_type) && (s == "*" || s.eq_ignore_ascii_case(&meta.styp))
            })
            .map(|(_, _, r)| r.as_str())
    }
}
