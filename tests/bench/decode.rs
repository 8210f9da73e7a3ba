//! Decode throughput on one core, one run, side by side with the raw-XML floor (quick-xml
//! reading every event of the same text, building nothing):
//! - a typical FLOP message (a three-gate GTDT list);
//! - a 500-flight SCHD-DNLD;
//!
//! then the shapes a hostile upstream can send (`msgx::fixtures::shapes`, #53) at 64 KiB,
//! 256 KiB, 1 MiB and 16 MiB, decoded whole (no limit), each as time per MiB beside a plain
//! SCHD-DNLD of the same size; and at the default limits, what becomes of each at 1 MiB.
//!
//! `cargo bench --bench decode` (no services needed).

use std::time::{Duration, Instant};

use msgx::codec;

/// The daemon's allocator (src/main.rs): the decoder is measured as the daemon runs it, and the
/// quick-xml floor beside it runs under the same one.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn flop() -> String {
    let mut gates = String::new();
    for n in 1..=3 {
        gates.push_str(&format!(
            "<GTDT GTNO=\"{n}\"><GATE>G2{n}</GATE><PGOT>05MAR261320</PGOT><PGCT>05MAR261350</PGCT><GOTM>05MAR261322</GOTM><GTYP>D</GTYP></GTDT>"
        ));
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<MSG><META><SNDR>AODB</SNDR><SEQN>1243</SEQN><DTTM>20260305132000</DTTM>\
         <TYPE>FLOP</TYPE><STYP>GTDT</STYP></META><FLOP><FLID>88231</FLID><FFID>MU-MU5101-D-05MAR261400-D</FFID>{gates}</FLOP></MSG>"
    )
}

fn dnld(flights: usize) -> String {
    let mut body = format!("<RECS>{flights}</RECS>");
    for i in 0..flights {
        body.push_str(&msgx::fixtures::shapes::fltr(i));
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<MSG><META><SNDR>AODB</SNDR><SEQN>345935</SEQN><DTTM>20260305010000</DTTM>\
         <TYPE>SCHD</TYPE><STYP>DNLD</STYP></META><SCHD>{body}</SCHD></MSG>"
    )
}

/// Runs `f` repeatedly for about `budget`; returns runs per second.
fn rate(budget: Duration, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        f();
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// msgx and the floor in alternating slices, so that a shared machine's drift falls on both
/// alike: each slice pair gives a ratio; returns msgx's and the floor's median rates and the
/// minimum, median and maximum of the ratios.
fn side_by_side(slices: usize, slice: Duration, mut ours: impl FnMut(), mut floor: impl FnMut()) -> [f64; 5] {
    let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..slices {
        let (x, y) = (rate(slice, &mut ours), rate(slice, &mut floor));
        a.push(x);
        b.push(y);
        r.push(x / y);
    }
    for v in [&mut a, &mut b, &mut r] {
        v.sort_by(f64::total_cmp);
    }
    [a[slices / 2], b[slices / 2], r[0], r[slices / 2], r[slices - 1]]
}

fn raw_xml(text: &str) -> usize {
    let mut r = quick_xml::Reader::from_str(text);
    let mut n = 0;
    loop {
        match r.read_event() {
            Ok(quick_xml::events::Event::Eof) => return n,
            Ok(_) => n += 1,
            Err(e) => panic!("{e}"),
        }
    }
}

/// The median of `runs` timings of `f`, in seconds.
fn median_secs(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[runs / 2]
}

/// The limits an operator sets to read messages of `bytes`: `max-message-bytes` raised, and
/// `max-elements` with it (one per four bytes, as its default is for 1 MiB); the shape limits
/// at their defaults.
fn raised(bytes: usize) -> codec::Limits {
    let max_elements = (bytes as u32 / 4).max(codec::Limits::DEFAULT.max_elements);
    codec::Limits { max_elements, ..codec::Limits::DEFAULT }
}

/// Each shape's time per MiB beside the plain message's, at each size, under `limits` (#53:
/// within 2x).
fn shape_table(title: &str, limits: impl Fn(usize) -> codec::Limits) {
    println!("\n{title}: ms per MiB, and the shape's time per MiB / the plain one's");
    let sizes = [(64usize << 10, "64 KiB"), (256 << 10, "256 KiB"), (1 << 20, "1 MiB"), (16 << 20, "16 MiB")];
    print!("  {:<34}", "shape");
    for (_, label) in sizes {
        print!(" {label:>18}");
    }
    println!();
    let mut plain_ms = [0f64; 4];
    let rules = codec::Rulebook::this_release();
    for (name, shape) in msgx::fixtures::shapes::ALL {
        print!("  {name:<34}");
        let mut refused = None;
        for (k, (bytes, _)) in sizes.into_iter().enumerate() {
            let (text, limits) = (shape(bytes), limits(bytes));
            let runs = ((64 << 20) / bytes.max(1 << 20) * 2 + 3).min(21);
            let secs = median_secs(runs, || {
                if let Err(e) = codec::decode_with(std::hint::black_box(&text), &limits, &rules) {
                    refused = Some(e.class);
                }
            });
            let ms_per_mib = secs * 1e3 / (text.len() as f64 / (1 << 20) as f64);
            if plain_ms[k] == 0.0 {
                plain_ms[k] = ms_per_mib;
            }
            print!(" {ms_per_mib:>8.2} ms {:>5.2}x", ms_per_mib / plain_ms[k]);
        }
        println!("{}", refused.map_or(String::new(), |c| format!("  ({c}: refused at a limit)")));
    }
}

fn shapes() {
    shape_table("shapes under the limits raised for the size (max-elements one per four bytes, the others at their defaults)", raised);
    shape_table("shapes decoded whole, no limit at all (the decoder's own cost)", |_| codec::Limits {
        max_elements: u32::MAX,
        max_attributes: u32::MAX,
        max_unknown_names: u32::MAX,
    });
    println!("\nat the default limits, 1 MiB of each:");
    let rules = codec::Rulebook::this_release();
    for (name, shape) in msgx::fixtures::shapes::ALL {
        let text = shape(1 << 20);
        let mut verdict = String::new();
        let secs = median_secs(5, || {
            verdict = match codec::decode_with(&text, &codec::Limits::DEFAULT, &rules) {
                Ok(_) => "decoded".into(),
                Err(e) => format!("{}: {}", e.class, e.detail),
            };
        });
        println!("  {name:<34} {:>8.2} ms  {verdict}", secs * 1e3);
    }
}

fn main() {
    println!(
        "decode on one core, one run, msgx and quick-xml tokenising the same text in 20 alternating \
         slices of 100 ms each (median msgs/s and MB/s; msgx/floor min, median, max over the slices):"
    );
    for (name, text) in [("FLOP-GTDT (3 gates)", flop()), ("SCHD-DNLD (500 flights)", dnld(500))] {
        let m = codec::decode(&text).expect("bench input decodes");
        assert!(matches!(m.body, codec::Body::Flop { .. } | codec::Body::Schedule(_)));
        let [ours, floor, lo, mid, hi] = side_by_side(
            20,
            Duration::from_millis(100),
            || {
                std::hint::black_box(codec::decode(std::hint::black_box(&text)).unwrap());
            },
            || {
                std::hint::black_box(raw_xml(std::hint::black_box(&text)));
            },
        );
        let mb = text.len() as f64 / 1e6;
        println!(
            "  {name:<24} {:>7} bytes  msgx {ours:>9.0} msgs/s {:>6.1} MB/s   floor {floor:>9.0} msgs/s {:>6.1} MB/s   \
             msgx/floor {lo:.2} / {mid:.2} / {hi:.2}",
            text.len(),
            ours * mb,
            floor * mb,
        );
    }
    shapes();
}
