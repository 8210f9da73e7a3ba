//! `msgx check`: configuration, D3 and every store, read-only; stops at the first broken store.

use super::*;

pub(super) fn check(cfg: &Config) -> CmdResult {
    out!("configuration: ok");
    for line in cfg.describe() {
        out!("  {line}");
    }
    let d3: Vec<String> = producer_settings(cfg)
        .into_iter()
        .filter(|(k, _)| ["acks", "enable.idempotence", "max.in.flight.requests.per.connection"].contains(k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    out!("kafka producer (D3): {}", d3.join(" "));
    let (token, console) = (cfg.metrics_token.is_some(), cfg.console_token.is_some());
    for why in msgx::ops::http::token_warnings(cfg.metrics_listen, token, console) {
        out!("  warning: {why}");
    }
    let mut pg = Pg::of(cfg).and_then(Pg::connected).map_err(unreachable)?;
    let security = pg.security().map_err(unreachable)?;
    out!("postgres: reachable, {security}");
    plaintext_warning("postgres", &pg.hosts(), &security);
    let d = pg.durability().map_err(unreachable)?;
    out!("postgres durability: {d}");
    if cfg.require_sync_standby && d.synchronous == 0 {
        return Err((Exit::Unreachable, anyhow::anyhow!("postgres: datasources.default.require-sync-standby = true and no synchronous standby is attached")));
    }
    let schema = migrate::verify(pg.client().map_err(unreachable)?).map_err(|e| (Exit::Schema, e.into()))?;
    out!("schema: {}", schema.line());
    check_mailboxes(cfg)?;
    check_redis(cfg)?;
    check_kafka(cfg)?;
    let r = running(&mut pg, SystemClock.now())?;
    if r.holder.free {
        out!("lease: free (no instance running)");
    } else {
        out!("lease: held by {}", who(&r.holder));
    }
    Ok(())
}

fn check_mailboxes(cfg: &Config) -> CmdResult {
    let mut mb = MysqlMailbox::of(cfg).and_then(MysqlMailbox::connected).map_err(unreachable)?;
    mb.check_layout().map_err(|e| (Exit::Unreachable, anyhow::anyhow!("mailbox layout: {e}")))?;
    let security = mb.security().map_err(unreachable)?;
    out!("mailbox: reachable, table {} with the configured columns, {security}", cfg.inbound.table);
    plaintext_warning("mailbox", &[mb.host()], &security);
    let mut out = MysqlOutbound::of(cfg).map_err(unreachable)?;
    out.check_layout().map_err(|e| (Exit::Unreachable, anyhow::anyhow!("outbound mailbox layout: {e}")))?;
    out!("outbound mailbox: table {} with the configured columns", cfg.outbound.table);
    Ok(())
}

fn check_redis(cfg: &Config) -> CmdResult {
    let mut redis =
        msgx::store::flights::RedisFlights::connect_to(&cfg.redis, &cfg.redis_prefix).map_err(unreachable)?;
    out!("redis: reachable, {}", redis.security());
    plaintext_warning("redis", &redis.hosts(), &redis.security());
    let role = redis.replication().map_err(unreachable)?;
    out!("redis replication: {role}");
    if role.connected < cfg.redis.wait_replicas as i64 {
        out!(
            "  warning: redis.wait-replicas = {} but {} replica(s) are connected: every apply will wait and stall",
            cfg.redis.wait_replicas, role.connected
        );
    }
    Ok(())
}

/// The broker and every configured topic: asking never creates one.
fn check_kafka(cfg: &Config) -> CmdResult {
    let producer = msgx::store::kafka::KafkaProducer::new(cfg).map_err(unreachable)?;
    let topics = producer
        .topics(&[&cfg.topic_msg, &cfg.topic_schd], std::time::Duration::from_secs(10))
        .map_err(|e| (Exit::Unreachable, anyhow::anyhow!("kafka at {}: {e}", cfg.kafka_brokers)))?;
    let security = msgx::store::kafka::describe(&cfg.kafka_security);
    out!("kafka: reachable at {}, {security}", cfg.kafka_brokers);
    let hosts = msgx::store::kafka::broker_hosts(&cfg.kafka_brokers);
    plaintext_warning("kafka", &hosts, &security);
    for t in topics {
        match t.partitions {
            Some(n) => {
                out!(
                    "  topic {}: exists, {n} partition(s), replication factor {}, in sync {}",
                    t.topic, t.replication, t.in_sync
                );
                for w in t.warnings() {
                    out!("  warning: topic {}: {w}", t.topic);
                }
            }
            None => out!(
                "  topic {}: absent; created on first send if the broker auto-creates topics (auto.create.topics.enable), else create it",
                t.topic
            ),
        }
    }
    Ok(())
}

/// A plaintext connection to a host that is not this machine: passwords and every flight's data
/// cross the network readable (#64). The same words as the start-up log's.
fn plaintext_warning(store: &str, hosts: &[String], security: &str) {
    if let Some(line) = msgx::daemon::plaintext_warning(store, hosts, security) {
        out!("  warning: {line}");
    }
}
