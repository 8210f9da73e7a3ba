//! `msgx replay` rules (SPEC §4.7): only FAILED/DEAD rows whose class is in
//! {CODEC_ERROR, UNSUPPORTED, INFRA, EXHAUSTED} go back to PENDING (ATTEMPTS=0,
//! NEXT_ATTEMPT_AT=NULL, class and last error kept for audit). MALFORMED/PROTOCOL never do.

use crate::domain::ProcStatus;
use crate::error::ErrorClass;

/// Whether a row in `state` with `class` may be replayed, and if not, why — in words an
/// operator can act on.
pub fn verdict(state: ProcStatus, class: Option<ErrorClass>) -> Result<(), String> {
    match state {
        ProcStatus::Failed | ProcStatus::Dead => match class {
            Some(c) if c.is_replayable() => Ok(()),
            Some(c) => Err(format!(
                "{c} is never replayed: the message itself is illegal (format or protocol), so \
                 processing it again cannot succeed; have it corrected and resent upstream"
            )),
            None => Err("no error class recorded, nothing to replay".to_string()),
        },
        other => Err(format!("state is {}; only FAILED or DEAD rows are replayed", other.as_str())),
    }
}

/// Whether a SKIPPED row may be replayed (`msgx replay --skipped`): only one msgx skipped as
/// not for it (`not-for-msgx`), never an ignore rule's or a duplicate's.
pub fn skipped_verdict(state: ProcStatus, reason: Option<&str>) -> Result<(), String> {
    use crate::domain::SkipReason;
    match (state, reason.and_then(SkipReason::parse)) {
        (ProcStatus::Skipped, Some(r)) if r.is_replayable() => Ok(()),
        (ProcStatus::Skipped, Some(r)) => {
            Err(format!("SKIPPED as {r}: final (an ignore rule or a duplicate is not replayed)"))
        }
        (ProcStatus::Skipped, None) => Err("no skip reason recorded, nothing to replay".to_string()),
        (other, _) => {
            Err(format!("state is {}; --skipped replays only SKIPPED not-for-msgx rows", other.as_str()))
        }
    }
}

/// Why `msgx dismiss` refused a row, from what it was: (state, already dismissed), or absent.
pub fn dismiss_refusal(was: Option<(ProcStatus, bool)>) -> String {
    match was {
        None => "no such message".to_string(),
        Some((ProcStatus::Dead, true)) => "already dismissed".to_string(),
        Some((state, _)) => format!("state is {}; only DEAD messages are dismissed", state.as_str()),
    }
}

/// Whether an outbox event in `state` may be replayed: only DEAD ones (the dead-letter queue).
pub fn event_verdict(state: crate::domain::EventStatus) -> Result<(), String> {
    match state {
        crate::domain::EventStatus::Dead => Ok(()),
        other => Err(format!("event is {}; only DEAD events are replayed", other.as_str())),
    }
}

/// `msgx park` (#67): only an event a topic holds at because the broker refused it — a Kafka
/// target's PENDING event with a refused attempt — may be parked; anything else keeps its
/// place in the order. `None`: no such event.
pub fn park_verdict(
    event: Option<(crate::domain::Target, crate::domain::EventStatus, i32)>,
) -> Result<(), String> {
    use crate::domain::{EventStatus, Target};
    match event {
        None => Err("no such event".into()),
        Some((Target::Coutmsgs, ..)) => {
            Err("a COUTMSGS event is not parked: a refused insert goes to the dead-letter queue by itself"
                .into())
        }
        Some((_, EventStatus::Pending, attempts)) if attempts > 0 => Ok(()),
        Some((_, EventStatus::Pending, _)) => {
            Err("event is PENDING and was never refused; only an event the broker refused is parked".into())
        }
        Some((_, state, _)) => {
            Err(format!("event is {}; only a PENDING event the broker refused is parked", state.as_str()))
        }
    }
}

/// What a parked event's `LAST_ERROR` says: the person's note, then the refusal it answers.
pub fn parked_error(note: &str, refused: Option<&str>) -> String {
    format!("parked by msgx park: {note} (it was {})", refused.unwrap_or("refused by the broker"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitelist_is_codec_unsupported_infra_exhausted_from_failed_or_dead() {
        for state in [ProcStatus::Failed, ProcStatus::Dead] {
            for c in ErrorClass::ALL {
                assert_eq!(verdict(state, Some(c)).is_ok(), c.is_replayable(), "{state:?} {c}");
            }
        }
        let ok: Vec<_> =
            ErrorClass::ALL.into_iter().filter(|c| verdict(ProcStatus::Dead, Some(*c)).is_ok()).collect();
        assert_eq!(
            ok,
            [ErrorClass::CodecError, ErrorClass::Unsupported, ErrorClass::Infra, ErrorClass::Exhausted]
        );
    }

    #[test]
    fn refusals_say_why() {
        let e = verdict(ProcStatus::Dead, Some(ErrorClass::Malformed)).unwrap_err();
        assert!(e.contains("MALFORMED is never replayed") && e.contains("resent upstream"), "{e}");
        let e = verdict(ProcStatus::Succeeded, Some(ErrorClass::Infra)).unwrap_err();
        assert!(e.contains("state is SUCCEEDED"), "{e}");
        assert!(verdict(ProcStatus::Pending, None).is_err());
        assert!(verdict(ProcStatus::Archived, Some(ErrorClass::Infra)).is_err());
    }
}
