//! A release's rules as a value (#65): the FLOP mapping its decoder reads (which elements each
//! subtype carries, and their shape) and the version its decisions carry
//! (`PROC_STATE.RULES_VERSION`, #52). One is built where an instance or a command starts
//! ([`Rulebook::this_release`]) and handed down to everything that decodes a message as the pump
//! did: the pump, the sentinel's sample, the heal, `msgx verify`, `msgx trace`, `msgx decode`.
//! Nothing else knows which rules are in force, so two releases' rules can run side by side in
//! one process: the simulator's fleet and the upgrade tests start an instance of the next release
//! as this rulebook plus one mapping ([`Rulebook::with_scalar`]), not as another build.

use std::borrow::Cow;
use std::sync::Arc;

use super::flop::{Kind, Shape, Subtype, MAX_ELEMENTS, SUBTYPES};
use super::xml::same_name;

/// The version of this release's rules: bumped whenever the decision for some input changes (a
/// new mapping, a changed one). PostgreSQL records it with each message whose decision an
/// instance applied (V017), and the consistency check re-decides a message only under the rules
/// that decided it: one decided under other rules is counted, never a finding.
/// `handlers/golden/rules.txt` ties it to the golden decisions: a change to them under the same
/// version fails `handlers::golden`. Read only through [`Rulebook::this_release`].
const THIS_RELEASE: u32 = 1;

/// What a release decodes and the version its decisions carry.
#[derive(Debug, Clone)]
pub struct Rulebook {
    version: u32,
    flop: Cow<'static, [Subtype]>,
}

/// Why a rulebook cannot be made from another (a mapping it cannot take).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RulebookError {
    #[error("FLOP-{0} is not a subtype of this rulebook")]
    NoSubtype(String),
    #[error("FLOP-{styp} already reads <{element}>")]
    Mapped { styp: String, element: String },
    #[error("FLOP-{styp} would carry more than {MAX_ELEMENTS} elements")]
    TooMany { styp: String },
}

impl Rulebook {
    /// This release's rules, built once by whoever starts an instance or a command.
    pub fn this_release() -> Arc<Rulebook> {
        Arc::new(Rulebook { version: THIS_RELEASE, flop: Cow::Borrowed(SUBTYPES) })
    }

    /// The version the decisions made under it carry (`PROC_STATE.RULES_VERSION`).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Whether a message decided under `recorded` (its `PROC_STATE.RULES_VERSION`) was decided
    /// under these rules: only then can it be decided again and compared.
    pub fn decided(&self, recorded: Option<u32>) -> bool {
        recorded == Some(self.version)
    }

    /// The FLOP subtype named `styp`, if these rules read it.
    pub fn subtype(&self, styp: &str) -> Option<&Subtype> {
        self.flop.iter().find(|s| same_name(s.styp, styp))
    }

    /// These rules with the FLOP subtype `styp` reading one more scalar element, and the version
    /// one up: the most ordinary change a release makes. The new row is made once per rulebook
    /// and lives as long as the process (the decoder's table is `'static`); a rulebook is built
    /// once per instance.
    pub fn with_scalar(
        &self,
        styp: &str,
        element: &'static str,
        kind: Kind,
    ) -> Result<Rulebook, RulebookError> {
        let mut flop = self.flop.to_vec();
        let st = flop
            .iter_mut()
            .find(|s| same_name(s.styp, styp))
            .ok_or_else(|| RulebookError::NoSubtype(styp.into()))?;
        if st.elements.iter().any(|(n, _)| same_name(n, element)) {
            return Err(RulebookError::Mapped { styp: styp.into(), element: element.into() });
        }
        if st.elements.len() >= MAX_ELEMENTS {
            return Err(RulebookError::TooMany { styp: styp.into() });
        }
        let mut elements = st.elements.to_vec();
        elements.push((element, Shape::Scalar(kind)));
        st.elements = Box::leak(elements.into_boxed_slice());
        Ok(Rulebook { version: self.version + 1, flop: Cow::Owned(flop) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_more_mapping_is_the_next_version_and_reads_the_element() {
        let this = Rulebook::this_release();
        let next = this.with_scalar("STND", "XSTND", Kind::Text).unwrap();
        assert_eq!(next.version(), this.version() + 1);
        let names =
            |r: &Rulebook| -> Vec<&str> { r.subtype("stnd").unwrap().elements.iter().map(|e| e.0).collect() };
        assert_eq!(names(&this), ["STND"], "this release's table is untouched");
        assert_eq!(names(&next), ["STND", "XSTND"]);
        assert!(
            next.decided(Some(next.version())) && !next.decided(Some(this.version())) && !next.decided(None)
        );
        assert_eq!(next.flop.len(), this.flop.len());
    }

    #[test]
    fn a_mapping_it_cannot_take_is_named() {
        let this = Rulebook::this_release();
        let e = |s, el| this.with_scalar(s, el, Kind::Text).unwrap_err().to_string();
        assert_eq!(e("XXXX", "A"), "FLOP-XXXX is not a subtype of this rulebook");
        assert_eq!(e("STND", "STND"), "FLOP-STND already reads <STND>");
        assert_eq!(e("TAOP", "TAXX"), "FLOP-TAOP would carry more than 3 elements");
    }
}
