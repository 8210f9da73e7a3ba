use super::*;

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(text, |_| None)
}

#[test]
fn empty_file_gives_the_spec_defaults() {
    let c = parse("").unwrap();
    let p = &c.pipeline;
    assert_eq!(p.poll_interval, Duration::from_secs(1));
    assert_eq!(p.max_attempts, 5);
    let secs: Vec<u64> = p.backoff.iter().map(|d| d.as_secs()).collect();
    assert_eq!(secs, vec![1, 2, 4, 8, 16]);
    assert_eq!(p.backoff_cap, Duration::from_secs(60));
    assert_eq!(p.head_deadline, Duration::from_secs(600));
    assert_eq!(p.max_commit_delay, Duration::from_secs(300));
    assert_eq!(p.backfill_backoff, Duration::from_secs(30));
    assert_eq!(p.backfill_backoff_cap, Duration::from_secs(900));
    assert_eq!(p.overdue_backfill, Duration::from_secs(30 * 86_400));
    assert_eq!(p.event_retention, Duration::from_secs(7 * 86_400));
    assert_eq!(p.archive_after, Duration::from_secs(86_400));
    assert_eq!(p.schd_flush_period, Duration::from_secs(3));
    assert_eq!(p.schd_flush_limit, 500);
    assert!(!p.include_day_boundary);
    assert_eq!(p.ignore_rules, vec!["LDM-*", "REGN-*", "RSTA-*", "EROR-*"]);
    assert_eq!(c.producer.acks, "all");
    assert!(c.producer.enable_idempotence);
    assert_eq!(c.producer.max_in_flight, 1);
    assert_eq!(c.inbound.table, "cminmsgs");
    assert_eq!(c.inbound.id_column, "CMINMSGS_ID");
    assert_eq!(c.inbound.status_filter, vec!["VALID"]);
    assert_eq!(c.inbound.processed_status, "PROCESSED");
}

#[test]
fn keys_are_toml_tables() {
    let c = parse(
        "[msgx.pipeline]\nmax-attempts = 7\npoll-interval = \"250ms\"\n\
         [kafka.topics]\nmsg = \"ops.flights\"\n",
    )
    .unwrap();
    assert_eq!(c.pipeline.max_attempts, 7);
    assert_eq!(c.pipeline.poll_interval, Duration::from_millis(250));
    assert_eq!(c.topic_msg, "ops.flights");
    // Dotted keys in one table are the same keys.
    let c = parse("msgx.pipeline.max-attempts = 3\n").unwrap();
    assert_eq!(c.pipeline.max_attempts, 3);
}

#[test]
fn unknown_key_is_refused_by_its_full_name_with_a_hint() {
    let err = parse("[msgx.pipeline]\nmax-attemps = 5\n").unwrap_err();
    assert_eq!(
        err,
        ConfigError::UnknownKey {
            key: "msgx.pipeline.max-attemps".into(),
            hint: " (did you mean `msgx.pipeline.max-attempts`?)".into(),
            also: String::new(),
        }
    );
    let err = parse("[nothing]\nlike = 1\n").unwrap_err();
    assert_eq!(err.to_string(), "unknown configuration key `nothing.like`");
}

/// #68: going back a release, operators.md tells to remove the keys only the newer release
/// knows, "`msgx check` names each one" — it named the first only.
#[test]
fn regression_every_unknown_key_of_a_file_is_named_at_once() {
    let err =
        parse("[msgx.pipeline]\nmax-attemps = 5\nretry-unsupportd = true\n[next]\nkey = 1\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown configuration key `msgx.pipeline.max-attemps` (did you mean `msgx.pipeline.max-attempts`?); also unknown: `msgx.pipeline.retry-unsupportd`, `next.key`"
    );
}

#[test]
fn bad_values_name_the_key() {
    let cases = [
        ("[msgx.pipeline]\nmax-attempts = \"five\"", "msgx.pipeline.max-attempts", "integer"),
        ("[msgx.pipeline]\nmax-attempts = 0", "msgx.pipeline.max-attempts", "outside"),
        ("[msgx.pipeline]\npoll-interval = \"10ms\"", "msgx.pipeline.poll-interval", "lower bound"),
        ("[msgx.pipeline]\npoll-interval = \"1 fortnight\"", "msgx.pipeline.poll-interval", "unit"),
        ("[msgx.pipeline]\npoll-interval = 1", "msgx.pipeline.poll-interval", "duration"),
        ("[msgx.pipeline]\nbackoff-ms = []", "msgx.pipeline.backoff-ms", "empty"),
        ("[msgx.pipeline]\nbackoff-ms = [1000, -1]", "msgx.pipeline.backoff-ms", "-1"),
        (
            "[msgx.identity]\ninclude-day-boundary = \"yes\"",
            "msgx.identity.include-day-boundary",
            "true or false",
        ),
        ("[mailbox.inbound]\ntable = \"x; DROP TABLE y\"", "mailbox.inbound.table", "SQL name"),
        ("[msgx.codec]\nignore-rules = [\"LDM\"]", "msgx.codec.ignore-rules", "TYPE-STYP"),
        ("[redis]\nurl = \"\"", "redis.url", "empty"),
        ("[msgx.requests]\ndialect = \"SITA\"", "msgx.requests.dialect", "neither"),
        ("[msgx.requests]\nwindow-format = \"%Q\"", "msgx.requests.window-format", "strftime"),
        ("[msgx.requests]\nwindow-format = \"NOON\"", "msgx.requests.window-format", "writes no time"),
        ("[msgx.requests]\nheal-window = \"2026-03-05\"", "msgx.requests.heal-window", "FROM/TO"),
        (
            "[msgx.requests]\nheal-window = \"2026-03-06T00:00/2026-03-05T23:59\"",
            "msgx.requests.heal-window",
            "FROM not after TO",
        ),
        ("[msgx.compat-http]\nlisten = \"localhost\"", "msgx.compat-http.listen", "ip:port"),
        (
            "[msgx.pipeline]\nbackfill-backoff-ms = 1000000",
            "msgx.pipeline.backfill-backoff-ms",
            "must not exceed",
        ),
    ];
    for (text, key, words) in cases {
        match parse(text) {
            Err(ConfigError::BadValue { key: k, detail }) => {
                assert_eq!(k, key, "for {text}");
                assert!(detail.contains(words), "{detail:?} should mention {words:?} for {text}");
            }
            other => panic!("{text}: expected BadValue for {key}, got {other:?}"),
        }
    }
}

#[test]
fn d3_producer_settings_cannot_be_relaxed() {
    for (text, key) in [
        ("acks = \"1\"", "kafka.producers.default.acks"),
        ("enable-idempotence = false", "kafka.producers.default.enable-idempotence"),
        (
            "max-in-flight-requests-per-connection = 5",
            "kafka.producers.default.max-in-flight-requests-per-connection",
        ),
    ] {
        let err = parse(&format!("[kafka.producers.default]\n{text}\n")).unwrap_err();
        match &err {
            ConfigError::D3 { key: k, .. } => assert_eq!(k, key),
            other => panic!("expected D3 for {key}, got {other:?}"),
        }
        assert!(err.to_string().contains("D3"), "{err}");
    }
}

#[test]
fn syntax_errors_are_reported() {
    assert!(matches!(parse("[msgx.pipeline\n"), Err(ConfigError::Syntax { .. })));
}

#[test]
fn environment_overrides_the_file() {
    let text = "[datasources.default]\nurl = \"postgres://file@h/db\"\n[redis]\nurl = \"redis://file/\"\n";
    let c = Config::from_toml_str(text, |k| match k {
        "MSGX_PG_URL" => Some("postgres://env@h/db".into()),
        "MSGX_MYSQL_URL" => Some("mysql://env@h/mb".into()),
        "MSGX_KAFKA_BROKERS" => Some("127.0.0.1:1".into()),
        "MSGX_REDIS_URL" => Some("  ".into()), // blank means unset
        _ => None,
    })
    .unwrap();
    assert_eq!(c.pg_url, "postgres://env@h/db");
    assert_eq!(c.mysql_url, "mysql://env@h/mb");
    assert_eq!(c.kafka_brokers, "127.0.0.1:1");
    assert_eq!(c.redis_url, "redis://file/");
}

#[test]
fn passwords_never_reach_the_description() {
    let c = Config::from_toml_str("", |k| match k {
        "MSGX_PG_URL" => Some("postgres://msgx:pg-s3cret@127.0.0.1:5432/msgx".into()),
        "MSGX_MYSQL_URL" => Some("mysql://msgx:my-s3cret@127.0.0.1:3306/mailbox".into()),
        "MSGX_REDIS_URL" => Some("redis://:redis-s3cret@127.0.0.1:6379/".into()),
        _ => None,
    })
    .unwrap();
    let text = c.describe().join("\n");
    for secret in ["pg-s3cret", "my-s3cret", "redis-s3cret"] {
        assert!(!text.contains(secret), "{secret} leaked in {text}");
    }
    assert!(text.contains("postgres://msgx:***@127.0.0.1:5432/msgx"), "{text}");
}

/// #21 item 3: a key=value connection string and a `?password=` URL are accepted, and their
/// passwords never reach the description the start-up `config` line and `msgx check` print.
#[test]
fn regression_key_value_and_query_passwords_never_reach_the_description() {
    let c = Config::from_toml_str("", |k| match k {
        "MSGX_PG_URL" => Some("host=127.0.0.1 port=5432 user=msgx password=kv-s3cret dbname=msgx".into()),
        "MSGX_MYSQL_URL" => Some("mysql://msgx@127.0.0.1:3306/mailbox?password=q-s3cret".into()),
        _ => None,
    })
    .unwrap();
    let text = c.describe().join("\n");
    for secret in ["kv-s3cret", "q-s3cret"] {
        assert!(!text.contains(secret), "{secret} leaked in {text}");
    }
    assert!(text.contains("password=***"), "{text}");
}

#[test]
fn durations_parse_and_format() {
    assert_eq!(parse_duration("50ms").unwrap(), Duration::from_millis(50));
    assert_eq!(parse_duration("30d").unwrap(), Duration::from_secs(30 * 86_400));
    assert!(parse_duration("").is_err());
    assert!(parse_duration("5").is_err());
    assert!(parse_duration("-5s").is_err());
    assert!(parse_duration("99999999999999999999d").is_err());
    for s in ["50ms", "1s", "10m", "2h", "30d", "1500ms"] {
        assert_eq!(format_duration(parse_duration(s).unwrap()), s);
    }
}

#[test]
fn every_default_is_valid_and_keys_are_unique() {
    let mut seen = std::collections::BTreeSet::new();
    for s in KEYS {
        assert!(seen.insert(s.key), "{} registered twice", s.key);
    }
    Config::defaults();
}

#[test]
fn the_shipped_etc_file_is_the_rendered_registry() {
    let shipped = include_str!("../../etc/msgx.toml");
    assert!(
        shipped == render_default_file(),
        "etc/msgx.toml is stale: regenerate it with `msgx config-defaults > etc/msgx.toml`"
    );
    // …and it loads to exactly the defaults.
    assert_eq!(parse(shipped).unwrap(), Config::defaults());
}

#[test]
fn reference_doc_lists_every_key_with_its_default() {
    let doc = include_str!("../../docs/reference.md");
    for s in KEYS {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", s.key)))
            .unwrap_or_else(|| panic!("docs/reference.md has no row for `{}`", s.key));
        assert!(
            row.contains(&format!("`{}`", s.default)),
            "docs/reference.md row for {} does not show the default {}: {row}",
            s.key,
            s.default
        );
    }
}

#[test]
fn regression_every_allowed_event_limit_fits_the_producer() {
    // max-event-bytes defaulted to 1 MiB while librdkafka refuses records over 1,000,000
    // bytes: an event between the two passed the pump's check and then died in dispatch
    // (found writing the producer conformance suite, issue #14).
    use crate::store::conformance::producer::MAX_RECORD_BYTES;
    let keys = crate::config::keys::KEYS.iter().find(|k| k.key == "msgx.codec.max-event-bytes").unwrap();
    let crate::config::keys::Kind::Int { max, .. } = keys.kind else { panic!("an integer key") };
    assert!((max as usize) + 10_000 <= MAX_RECORD_BYTES, "room for the key and headers");
    assert!(Config::defaults().pipeline.max_event_bytes + 10_000 <= MAX_RECORD_BYTES);
}

#[test]
fn the_mailbox_time_zone_is_parsed_and_a_bad_one_is_named() {
    let cfg = Config::from_toml_str("[mailbox]\ntime-zone = \"Asia/Shanghai\"\n", |_| None).unwrap();
    assert_eq!(
        (cfg.inbound.zone.name.as_str(), cfg.outbound.zone.name.as_str()),
        ("Asia/Shanghai", "Asia/Shanghai")
    );
    assert_eq!(Config::defaults().inbound.zone.name, "UTC");
    let e =
        Config::from_toml_str("[mailbox]\ntime-zone = \"Asia/Shangai\"\n", |_| None).unwrap_err().to_string();
    assert!(e.contains("mailbox.time-zone") && e.contains("Asia/Shangai"), "{e}");
}

#[test]
fn an_empty_status_filter_is_refused_at_start_naming_the_key() {
    // `IN ()` on every poll, and an index panic in the compat insert (#53).
    let err = parse("[mailbox.inbound]\nstatus-filter = []\n").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("mailbox.inbound.status-filter"), "{text}");
    assert!(text.contains("at least one status"), "{text}");
    assert!(parse("[mailbox.inbound]\nstatus-filter = [\"VALID\", \"RESENT\"]\n").is_ok());
}

#[test]
fn the_codec_limits_are_keys_with_their_defaults() {
    let p = parse("").unwrap().pipeline;
    assert_eq!((p.max_elements, p.max_attributes, p.max_unknown_names), (262_144, 64, 64));
    let p = parse("[msgx.codec]\nmax-elements = 1000000\nmax-attributes = 16\nmax-unknown-names = 8\n")
        .unwrap()
        .pipeline;
    assert_eq!((p.max_elements, p.max_attributes, p.max_unknown_names), (1_000_000, 16, 8));
    let err = parse("[msgx.codec]\nmax-attributes = 0\n").unwrap_err().to_string();
    assert!(err.contains("msgx.codec.max-attributes"), "{err}");
}

/// #64: the Kafka security keys go together, and nothing can turn verification off.
#[test]
fn kafka_security_needs_what_its_protocol_needs_and_names_the_key() {
    let dir = std::env::temp_dir().join(format!("msgx-cfg-sasl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pw = dir.join("sasl");
    std::fs::write(&pw, "sasl-secret-pw\n").unwrap();
    std::fs::set_permissions(&pw, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let err = |t: &str| parse(t).unwrap_err().to_string();
    assert!(err("[kafka]\nsecurity-protocol = \"tls\"").contains("`kafka.security-protocol`"));
    assert!(err("[kafka]\nsecurity-protocol = \"sasl_ssl\"").contains("`kafka.sasl-password-file`"));
    assert!(err("[kafka]\nssl-ca-location = \"/ca.pem\"").contains("`kafka.ssl-ca-location`"));
    let sasl = format!(
        "[kafka]\nsecurity-protocol = \"sasl_ssl\"\nsasl-mechanism = \"SCRAM-SHA-512\"\nsasl-username = \"msgx\"\nsasl-password-file = \"{}\"\nssl-ca-location = \"/etc/msgx/ca.pem\"",
        pw.display()
    );
    let cfg = parse(&sasl).unwrap();
    let settings = crate::store::kafka::producer_settings(&cfg);
    let get = |k: &str| settings.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("security.protocol"), Some("sasl_ssl"));
    assert_eq!(get("sasl.mechanisms"), Some("SCRAM-SHA-512"));
    assert_eq!(get("sasl.username"), Some("msgx"));
    assert_eq!(get("enable.ssl.certificate.verification"), Some("true"));
    assert_eq!(get("ssl.endpoint.identification.algorithm"), Some("https"));
    assert_eq!(get("sasl.password"), None, "the password is read at each new producer, never kept");
    assert!(settings.iter().all(|(_, v)| !v.contains("sasl-secret-pw")));
    let mech = sasl.replace("SCRAM-SHA-512", "GSSAPI");
    assert!(err(&mech).contains("`kafka.sasl-mechanism`"), "{}", err(&mech));
    let _ = std::fs::remove_dir_all(&dir);
}

/// #64: a rediss:// URL that turns verification off is refused; TLS files need a rediss URL.
#[test]
fn redis_tls_is_verified_or_refused() {
    let err = |t: &str| parse(t).unwrap_err().to_string();
    assert!(err("[redis]\nurl = \"rediss://h:6380/#insecure\"").contains("#insecure"));
    assert!(err("[redis]\nurl = \"redis://h/\"\ntls-ca-file = \"/ca.pem\"").contains("`redis.tls-ca-file`"));
    assert!(
        err("[redis]\nurl = \"rediss://h/\"\ntls-cert-file = \"/c.pem\"").contains("`redis.tls-cert-file`")
    );
    parse("[redis]\nurl = \"rediss://msgx@h:6380/\"\ntls-ca-file = \"/ca.pem\"").unwrap();
}
