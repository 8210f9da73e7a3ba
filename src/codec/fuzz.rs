//! Property tests over arbitrary bytes and mutated messages: the decoder never panics, and
//! whatever it refuses it classifies. `PROPTEST_CASES=200000 cargo test --lib codec::fuzz`
//! runs it for longer.

use proptest::prelude::*;

use super::report::{report, Verdict};
use super::{decode, ignore::IgnoreRules};
use crate::error::ErrorClass;
use crate::fixtures;

fn seeds() -> Vec<String> {
    let meta = |t: &str, s: &str| {
        format!("<MSG><META><SNDR>AODB</SNDR><SEQN>9</SEQN><DTTM>20260305140000</DTTM><TYPE>{t}</TYPE><STYP>{s}</STYP></META>")
    };
    vec![
        fixtures::flop_stnd(1, "77", "212"),
        format!("{}<FLOP><FLID>1</FLID><GTDT GTNO=\"1\"><GATE>G1</GATE><PGOT>05MAR261320</PGOT></GTDT></FLOP></MSG>", meta("FLOP", "GTDT")),
        format!("{}<FLOP><FLID>1</FLID><DELY CODE=\"93\" STRT=\"05MAR261400\" DURA=\"0045\">late</DELY></FLOP></MSG>", meta("FLOP", "DELY")),
        format!("{}<SCHD><RECS>1</RECS><FLTR><FLID>5</FLID><SODT>05MAR260905</SODT><ROUT RTNO=\"1\"><APCD>CTU</APCD></ROUT></FLTR></SCHD></MSG>", meta("SCHD", "DNLD")),
        format!("{}<RECS>1</RECS><AIRL><ITOP>MU</ITOP><SUBC><SCOD>SH</SCOD></SUBC></AIRL></MSG>", meta("AIRL", "UPD")),
    ]
}

/// A seed with a few bytes deleted, replaced or inserted.
fn mutated() -> impl Strategy<Value = String> {
    let edits = prop::collection::vec((any::<usize>(), 0u8..3, any::<u8>()), 1..8);
    (prop::sample::select(seeds()), edits).prop_map(|(seed, edits)| {
        let mut b = seed.into_bytes();
        for (pos, op, byte) in edits {
            let i = pos % (b.len() + 1);
            match op {
                0 if i < b.len() => {
                    b.remove(i);
                }
                1 if i < b.len() => b[i] = byte,
                _ => b.insert(i, byte),
            }
        }
        String::from_utf8_lossy(&b).into_owned()
    })
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(raw in ".{0,400}") {
        let _ = decode(&raw);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = decode(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn mutated_messages_decode_or_are_classified(raw in mutated()) {
        let (verdict, json) = report(&raw, &IgnoreRules::new(&[]), false);
        if let Verdict::Failed { class } = verdict {
            prop_assert!(matches!(class, ErrorClass::Malformed | ErrorClass::CodecError), "{class}: {json}");
            prop_assert!(json["error"].as_str().is_some_and(|e| !e.is_empty()));
        }
    }
}
