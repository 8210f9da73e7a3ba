//! Bugs planted on purpose, so that a test can prove the simulator finds each kind (issue #14).
//! A bug is a switch a test turns on for its own thread; outside test builds every switch is a
//! constant `false`. No lease code and, but for one rule, no stage asks one (#24): the
//! simulator plants them in port wrappers (`sim::mischief`) and in its own consistency pass;
//! the in-memory twins of own PostgreSQL, the mailbox and Redis ask theirs, where the store
//! itself would misbehave; the pump's round building asks `SnapshotSharesRound` and the
//! poller's clock reading `RoundTimeReused`, rules no port sees.

/// One planted bug per invariant the simulator checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub enum Bug {
    /// The pump passes over a FAILED head backing off and processes the rows behind it (INV-3).
    HeadOvertaken,
    /// A mailbox mark overwrites a mark already there (INV-7).
    MarkOverwritten,
    /// A DEAD outcome is recorded without its backfill intent (INV-8).
    IntentForgotten,
    /// Neither the pump nor the store holds identities (INV-9).
    IdentityUnchecked,
    /// The pump ignores the journal of decisions an earlier attempt applied (I2).
    JournalIgnored,
    /// The lease gate stays open after a newer instance took over, and the mark transaction's
    /// check of own PostgreSQL's fence passes with it (PRE-5; since #56 the marks ask both).
    GateNeverCloses,
    /// The dispatcher sends a batch in reverse order (EVENT_ID order).
    DeliveryReordered,
    /// An unavailable broker is charged to the event (SPEC §4.9).
    OutageCharged,
    /// The consistency pass finds a store that forgot and heals nothing (#20).
    HealSkipped,
    /// The consistency pass heals Redis without the epoch's fence: a heal that lost its lease
    /// writes over what the newer holder's pump wrote (#38).
    HealUnfenced,
    /// The pump lets a snapshot share its round: a message of it is decided against a window
    /// another message of the round changed (SPEC §4.12, #39).
    SnapshotSharesRound,
    /// Redis drops the journal entry of a decision that changes no value (the same value
    /// again) although it answers that it applied it (#37).
    NoOpJournalDropped,
    /// The poller dates what a round read by the time the round began, not by when the read
    /// came back: a store call that blocked makes a fresh gap look old, and the rows above it
    /// flow before the commit grace is over (#69).
    RoundTimeReused,
    /// A stop does not give the lease back: the fleet has no writer until it expires (#65;
    /// planted in the simulator's effect interpreter, where the release is performed).
    StopKeepsLease,
    /// Own PostgreSQL finishes a `msgx rules apply` job without the events it tells: Redis
    /// holds what no consumer was told (#65; planted in the twin).
    RulesUntold,
}

#[cfg(test)]
thread_local! {
    static PLANTED: std::cell::Cell<Option<Bug>> = const { std::cell::Cell::new(None) };
}

/// Whether `bug` is planted on this thread.
#[inline]
pub fn on(bug: Bug) -> bool {
    #[cfg(test)]
    {
        PLANTED.with(|b| b.get() == Some(bug))
    }
    #[cfg(not(test))]
    {
        let _ = bug;
        false
    }
}

/// The bug planted on this thread, if any.
#[cfg(test)]
pub fn planted() -> Option<Bug> {
    PLANTED.with(|b| b.get())
}

/// Plants `bug` on this thread (or none).
#[cfg(test)]
pub fn plant(bug: Option<Bug>) {
    PLANTED.with(|b| b.set(bug));
}
