//! Step 2 of a round: the texts in one mailbox read, every META and body decoded (pure), and
//! the identity holders in one query (INV-9). Nothing here is written anywhere.

use std::collections::HashMap;
use std::time::SystemTime;

use log::warn;

use super::plan::{pure, Planned, Step};
use super::rules::{head_action, Failing, HeadAction};
use super::Pump;
use crate::codec::{self, DecodeError, Message, MsgKind};
use crate::domain::{ProcRow, SkipReason};
use crate::error::ErrorClass;
use crate::planted::{self, Bug};
use crate::ports::{Failure, Fifo, FlightStore, MailboxTexts, Outcome, Raw, StoreResult};

/// What decoding one text gave: the message, or the META of one an ignore rule matched. The
/// tag is read from either (#23: the META was copied for it, five strings a message).
enum Read {
    Message(Box<Message>),
    Ignored(codec::Meta),
}

type Decoded = Result<Result<Read, DecodeError>, DecodeError>;

impl<P: Fifo, M: MailboxTexts, F: FlightStore> Pump<P, M, F> {
    /// The round ends after the first message that will be FAILED (it becomes the head in
    /// backoff), and before a snapshot (a round of its own).
    pub(super) fn read<'r>(
        &mut self,
        rows: &'r [ProcRow],
        before: SystemTime,
    ) -> StoreResult<Vec<Planned<'r>>> {
        let ids: Vec<i64> = rows.iter().map(|r| r.msg_id).collect();
        let mut raws = self.read_texts(&ids)?;
        // A failure's backoff and a head's deadline count from when the texts came back.
        let now = self.clock.after(before);
        let mut plan: Vec<Planned<'r>> = Vec::with_capacity(rows.len());
        for row in rows {
            if matches!(raws.get(&row.msg_id), Some(Raw::Later)) {
                break; // past the round's byte budget: the next round starts here
            }
            let planned = match head_action(Some(row), now, &self.policy) {
                HeadAction::Poison(p) => {
                    let reason = format!(
                        "{}; last {}: {}",
                        p.describe(),
                        row.error_class.map(|c| c.as_str()).unwrap_or("-"),
                        row.last_error.as_deref().unwrap_or("-")
                    );
                    let dead = Failure::Dead { class: ErrorClass::Exhausted, error: reason };
                    Planned::new(row, Step::Settled(Outcome::Failed(dead)))
                }
                _ => self.decode(row, raws.remove(&row.msg_id), now),
            };
            // The planted bug (#39) is the rule left out: no port sees a round being built.
            let snapshot = planned.is_snapshot() && !planted::on(Bug::SnapshotSharesRound);
            if snapshot && !plan.is_empty() {
                break; // the snapshot comes next round, alone
            }
            let stop = snapshot || planned.backs_off();
            plan.push(planned);
            if stop {
                break;
            }
        }
        // SPEC §4.12: a round never decides a message against a window another message of it
        // changed — a snapshot is a round of its own.
        assert!(
            plan.len() == 1
                || !plan.iter().any(Planned::is_snapshot)
                || planted::on(Bug::SnapshotSharesRound),
            "a snapshot shares its round: {:?}",
            plan.iter().map(|p| p.row.msg_id).collect::<Vec<_>>()
        );
        Ok(plan)
    }

    /// Identities (INV-9): held by one earlier in this round, by the round still committing,
    /// by a SUCCEEDED message, or else by the message whose decision Redis journals under it
    /// (`owners`) — the message is then a duplicate, SKIPPED. The last is for own PostgreSQL
    /// having forgotten a message and its holding while a resend became visible (seed 3591):
    /// processed again, the message whose decision stands in Redis keeps the identity, and its
    /// journalled events still go out, rather than a resend's taking it in MSG_ID order.
    pub(super) fn hold_identities(
        &mut self,
        plan: &mut [Planned],
        owners: &HashMap<String, i64>,
    ) -> StoreResult<()> {
        let keys: Vec<String> = plan
            .iter()
            .filter_map(|p| match &p.step {
                Step::Decide { identity, .. } => Some(identity.clone()),
                _ => None,
            })
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        let holders = self.fifo.identity_holders(&keys)?;
        let mut taken: HashMap<String, i64> = HashMap::new();
        for p in plan {
            let Step::Decide { identity, .. } = &p.step else { continue };
            let holder = taken
                .get(identity)
                .copied()
                .or_else(|| self.lane.as_ref().and_then(|l| l.holder(identity)))
                .or_else(|| holders.get(identity).copied())
                .or_else(|| owners.get(identity).copied());
            match holder.filter(|h| *h != p.row.msg_id) {
                Some(other) => p.settle(Outcome::Skipped { reason: SkipReason::DuplicateOf(other) }),
                None => {
                    taken.insert(identity.clone(), p.row.msg_id);
                }
            }
        }
        Ok(())
    }

    /// The round's texts in one read. A read the mailbox refuses is tried row by row: a row it
    /// refuses alone while it reads others is that row's failure (`Raw::Refused`); when it
    /// refuses every row, the store refuses the read and the stage stalls (SPEC §4.9) — a lone
    /// unreadable head is charged as soon as another row arrives behind it.
    fn read_texts(&mut self, ids: &[i64]) -> StoreResult<HashMap<i64, Raw>> {
        let whole = match self.texts.raws(ids, self.max_message_bytes, self.batch_bytes) {
            Err(e) if e.is_rejected() && ids.len() > 1 => e,
            other => return other,
        };
        warn!(target: super::LOG, "mailbox refused reading {} texts ({whole}); reading them one at a time", ids.len());
        let mut out = HashMap::with_capacity(ids.len());
        let mut refused = Vec::new();
        let mut budget = self.batch_bytes;
        for (k, id) in ids.iter().enumerate() {
            match self.texts.raws(&[*id], self.max_message_bytes, budget) {
                Ok(mut one) => {
                    if let Some(raw) = one.remove(id) {
                        if let Raw::Body(b) = &raw {
                            budget = budget.saturating_sub(b.len() as u64);
                        }
                        out.insert(*id, raw);
                    }
                    if budget == 0 {
                        out.extend(ids[k + 1..].iter().map(|i| (*i, Raw::Later)));
                        break;
                    }
                }
                Err(e) if e.is_rejected() => refused.push((*id, e.to_string())),
                Err(e) => return Err(e),
            }
        }
        if refused.len() == ids.len() {
            return Err(whole);
        }
        out.extend(refused.into_iter().map(|(id, e)| (id, Raw::Refused(e))));
        Ok(out)
    }

    /// `processOne` steps 1–4 for one message (pure): text, META, ignore rules, body.
    fn decode<'r>(&mut self, row: &'r ProcRow, raw: Option<Raw>, now: SystemTime) -> Planned<'r> {
        let fail = |class: ErrorClass, e: &str| {
            let failure = self.policy.on_failure(row.attempts, Failing::of(row), class, e, now);
            Step::Settled(Outcome::Failed(failure))
        };
        let body = match raw {
            None => return Planned::new(row, fail(ErrorClass::Malformed, "raw text missing in the mailbox")),
            Some(Raw::TooLarge { bytes }) => {
                let why = format!(
                    "message of {bytes} bytes exceeds msgx.codec.max-message-bytes ({}); not decoded",
                    self.max_message_bytes
                );
                return Planned::new(row, fail(ErrorClass::Protocol, &why));
            }
            Some(Raw::Refused(e)) => {
                let why = format!("the mailbox refused reading this row's text: {e}");
                return Planned::new(row, fail(ErrorClass::Infra, &why));
            }
            Some(Raw::Body(b)) => b,
            Some(Raw::Later) => unreachable!("a round ends before a text it did not read"),
        };
        let read = match pure(|| self.decode_text(&body)) {
            Err(panic) => return Planned::new(row, fail(ErrorClass::Infra, &panic)),
            // META unreadable, or read but the body is not: the text fails either way.
            Ok(Err(e)) | Ok(Ok(Err(e))) => return Planned::new(row, fail(e.class, &e.detail)),
            Ok(Ok(Ok(r))) => r,
        };
        let mut planned =
            Planned::new(row, Step::Settled(Outcome::Skipped { reason: SkipReason::Ignored(String::new()) }));
        let msg = match read {
            Read::Ignored(meta) => {
                planned.tag = Some(MsgKind::of(&meta, &self.rules).type_tag());
                let rule = self.ignore.matching(&meta).unwrap_or("?").to_string();
                planned.settle(Outcome::Skipped { reason: SkipReason::Ignored(rule) });
                return planned;
            }
            Read::Message(msg) => msg,
        };
        planned.tag = Some(MsgKind::of(&msg.meta, &self.rules).type_tag());
        planned.unknown = msg.unknown.clone();
        if let Some(why) = msg.kind.not_for_us() {
            planned.settle(Outcome::Skipped { reason: SkipReason::NotForMsgx(why.to_string()) });
            return planned;
        }
        let identity = codec::identity(&msg.meta, self.include_day_boundary);
        planned.step = Step::Decide { msg, identity };
        planned
    }

    fn decode_text(&self, body: &[u8]) -> Decoded {
        let text = codec::text_of(body)?;
        let env = codec::decode_meta_with(text, &self.limits)?;
        if self.ignore.matching(&env.meta).is_some() {
            return Ok(Ok(Read::Ignored(env.meta)));
        }
        Ok(codec::decode_body_with(env, self.strict, &self.rules).map(|m| Read::Message(Box::new(m))))
    }
}
