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
        let (verdict, json) = report(&raw, &IgnoreRules::new(&[]), &super::Rulebook::this_release(), false);
        if let Verdict::Failed { class } = verdict {
            prop_assert!(matches!(class, ErrorClass::Malformed | ErrorClass::CodecError), "{class}: {json}");
            prop_assert!(json["error"].as_str().is_some_and(|e| !e.is_empty()));
        }
    }
}

/// No limit at all: the shapes are decoded whole, so their cost is the decoder's, not the
/// refusal's.
const UNBOUNDED: super::Limits =
    super::Limits { max_elements: u32::MAX, max_attributes: u32::MAX, max_unknown_names: u32::MAX };

/// The decoder's steps per byte for `text` (#53): a count of work done, the same on any machine.
fn steps_per_byte(text: &str, limits: &super::Limits) -> (f64, Result<super::Message, super::DecodeError>) {
    let before = super::work::steps();
    let out = super::decode_with(text, limits, &super::Rulebook::this_release());
    ((super::work::steps() - before) as f64 / text.len() as f64, out)
}

#[test]
fn every_shape_costs_work_linear_in_its_size() {
    // Sixteen times the size costs at most a quarter more steps a byte, for every shape, and no
    // shape costs more than a few steps a byte: a quadratic step (a name compared with every
    // earlier one) would make the large one cost sixteen times the small one's per byte.
    for (name, shape) in fixtures::shapes::ALL {
        let (small, large) = (shape(16 << 10), shape(256 << 10));
        let (a, out) = steps_per_byte(&small, &UNBOUNDED);
        assert!(out.is_ok(), "{name}: {out:?}");
        let (b, out) = steps_per_byte(&large, &UNBOUNDED);
        assert!(out.is_ok(), "{name}: {out:?}");
        println!("{name:<32} {a:.3} steps a byte at 16 KiB, {b:.3} at 256 KiB");
        assert!(b <= a * 1.25 + 0.01, "{name}: {a:.3} steps a byte at 16 KiB, {b:.3} at 256 KiB");
        assert!(b < 2.0, "{name}: {b:.3} steps a byte");
    }
}

#[test]
fn at_the_default_limits_every_shape_decodes_or_is_protocol_naming_its_limit() {
    for (name, shape) in fixtures::shapes::ALL {
        let text = shape(1 << 20);
        let (cost, out) = steps_per_byte(&text, &super::Limits::DEFAULT);
        match out {
            Ok(_) => {}
            Err(e) => {
                assert_eq!(e.class, ErrorClass::Protocol, "{name}: {e}");
                assert!(e.detail.contains("msgx.codec.max-"), "{name}: {e}");
            }
        }
        assert!(cost < 2.0, "{name}: {cost:.3} steps a byte");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn a_shape_of_any_size_costs_a_bounded_work_per_byte(at in 0..fixtures::shapes::ALL.len(), kib in 1usize..96) {
        let (name, shape) = fixtures::shapes::ALL[at];
        let text = shape(kib << 10);
        let (cost, out) = steps_per_byte(&text, &UNBOUNDED);
        prop_assert!(out.is_ok(), "{}: {:?}", name, out.err());
        prop_assert!(cost < 2.0, "{}: {:.3} steps a byte at {} KiB", name, cost, kib);
    }
}
