//! `msgx decode`: what msgx makes of message files, writing nothing anywhere.

use super::*;

pub(super) fn decode(cfg: &Config, files: &[PathBuf], decide: bool, from_redis: bool) -> ExitCode {
    use codec::report::{report, Verdict};
    let rules = codec::ignore::IgnoreRules::new(&cfg.pipeline.ignore_rules);
    // What this release reads: the rules its daemon carries (#65).
    let rulebook = codec::Rulebook::this_release();
    let mut redis = None;
    if from_redis {
        match msgx::store::flights::RedisFlights::connect_to(&cfg.redis, &cfg.redis_prefix) {
            Ok(r) => redis = Some(r),
            Err(e) => {
                error!("--from-redis: {e}");
                return Exit::Unreachable.into();
            }
        }
    }
    let mut all_ok = true;
    for f in files {
        let out = match std::fs::read_to_string(f) {
            Err(e) => {
                all_ok = false;
                serde_json::json!({ "file": f, "error": format!("cannot read: {e}") })
            }
            Ok(raw) => {
                let (verdict, mut v) = report(&raw, &rules, &rulebook, cfg.pipeline.include_day_boundary);
                all_ok &= !matches!(verdict, Verdict::Failed { .. });
                if decide && matches!(verdict, Verdict::Decoded { .. }) {
                    match decision(cfg, &raw, &rulebook, redis.as_mut()) {
                        Ok(d) => v["decision"] = d,
                        Err(e) => {
                            error!("--from-redis: {e}");
                            return Exit::Unreachable.into();
                        }
                    }
                }
                v["file"] = serde_json::json!(f);
                v
            }
        };
        out!("{}", serde_json::to_string(&out).expect("json"));
    }
    ExitCode::from(if all_ok { Exit::Ok } else { Exit::Failed })
}

/// The decision on `raw` against an empty view, or the flights Redis holds (read only:
/// nothing is forgotten, applied or journalled).
pub(super) fn decision(
    cfg: &Config,
    raw: &str,
    rulebook: &codec::Rulebook,
    redis: Option<&mut msgx::store::flights::RedisFlights>,
) -> Result<serde_json::Value, msgx::error::StoreError> {
    use msgx::handlers::{need_of, preview, View};
    use msgx::ports::{FlightStore, RoundNeed};
    let Ok(msg) = codec::decode_with(raw, &codec::Limits::of(&cfg.pipeline), rulebook) else {
        return Ok(serde_json::Value::Null);
    };
    let mut view = View::default();
    let against = match redis {
        None => "an empty flight view",
        Some(r) => {
            let need = need_of(&msg);
            let p = r.prepare(
                &RoundNeed { msg_ids: vec![], flids: need.flids, window: need.window, ..Default::default() },
                &[],
                SystemClock.now(),
            )?;
            view.flights = p.flights;
            view.window = p.window;
            "the flights in Redis now"
        }
    };
    let mut d = preview(&view, &msg, cfg.pipeline.max_event_bytes);
    d["against"] = serde_json::json!(against);
    Ok(d)
}
