#!/usr/bin/env bash
# Demo on a fresh machine: starts the local services, loads a handful of messages into the
# mailbox, runs msgx on them for a few seconds and shows what came out.
set -euo pipefail
cd "$(dirname "$0")/.."

eval "$(tests/support/services.sh start)"
echo "== building msgx" >&2
cargo build -q
msgx=target/debug/msgx
work=$(mktemp -d)

# A fresh demo database on each store.
psql -q "$MSGX_PG_URL" -c "DROP DATABASE IF EXISTS msgx_demo WITH (FORCE)" -c "CREATE DATABASE msgx_demo"
export MSGX_PG_URL="${MSGX_PG_URL%/*}/msgx_demo"
MYSQL_PORT=$(echo "$MSGX_MYSQL_URL" | sed -E 's#.*:([0-9]+)/.*#\1#')
my() { mariadb --no-defaults -h127.0.0.1 -P"$MYSQL_PORT" -umsgx -pmsgx-secret "$@"; }
my -e "DROP DATABASE IF EXISTS msgx_demo; CREATE DATABASE msgx_demo CHARACTER SET utf8mb4"
my msgx_demo < sql/fixtures/mailbox.sql
export MSGX_MYSQL_URL="${MSGX_MYSQL_URL%/*}/msgx_demo"
topic="msgx.demo.$(date +%s)"
"$MSGX_TANSU" topic create "$topic" --partitions 1 --broker "tcp://$MSGX_KAFKA_BROKERS" >/dev/null
"$MSGX_TANSU" topic create "$topic.schd" --partitions 1 --broker "tcp://$MSGX_KAFKA_BROKERS" >/dev/null
REDIS_PORT=$(echo "$MSGX_REDIS_URL" | sed -E 's#.*:([0-9]+)/.*#\1#')
redis-cli -p "$REDIS_PORT" --scan --pattern 'demo:*' | xargs -r redis-cli -p "$REDIS_PORT" del >/dev/null

cat >"$work/msgx.toml" <<TOML
[msgx.pipeline]
poll-interval = "100ms"
stats-interval = "5s"
[redis]
key-prefix = "demo:"
[kafka.topics]
msg = "$topic"
schd = "$topic.schd"
[msgx.schd]
flush-period = "500ms"
TOML

echo "== msgx migrate / check" >&2
$msgx --config "$work/msgx.toml" migrate
$msgx --config "$work/msgx.toml" check
# The broker validates every record against the published schemas (#67): services.sh starts it
# with the registry, and this writes the schemas of this run's topics into it.
$msgx --config "$work/msgx.toml" schema --registry "$MSGX_SCHEMA_REGISTRY"

echo "== loading 9 messages into cminmsgs" >&2
ins() { my msgx_demo -e "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES ('$1', UTC_TIMESTAMP(), 'VALID')"; }
meta() { echo "<MSG><META><SNDR>AODB</SNDR><SEQN>$1</SEQN><DTTM>20261130083000</DTTM><TYPE>$2</TYPE><STYP>$3</STYP></META>"; }
ins "$(meta 100 SCHD DNLD)<SCHD><RECS>2</RECS><FLTR><FLID>5001</FLID><FLNO>MU5101</FLNO><MVIN>D</MVIN><SODT>30NOV260900</SODT><STND>210</STND></FLTR><FLTR><FLID>5002</FLID><FLNO>MU5102</FLNO><MVIN>A</MVIN><SODT>30NOV261130</SODT></FLTR></SCHD></MSG>"
ins "$(meta 101 FLOP STND)<FLOP><FLID>5001</FLID><FFID>MU-5101-D-30NOV260900-D</FFID><STND>212</STND></FLOP></MSG>"
ins "$(meta 102 FLOP EOBT)<FLOP><FLID>5001</FLID><EOBT>30NOV260915</EOBT></FLOP></MSG>"
ins "$(meta 103 FLOP STND)<FLOP><FLID>5002</FLID><STND>B07</STND></FLOP><FLOP><FLID>5003</FLID><STND>B08</STND></FLOP></MSG>"
ins "$(meta 103 FLOP STND)<FLOP><FLID>5002</FLID><STND>B99</STND></FLOP></MSG>"        # same identity: duplicate
ins "$(meta 104 LDM LOAD)<LDM><ANYTHING/></LDM></MSG>"                                # ignored (LDM-*)
ins "this is not XML"                                                                # DEAD(MALFORMED)
ins "$(meta 105 FLOP STND)<FLOP><FLID>5001</FLID><STND>213</STND></FLOP></MSG>"
ins "$(meta 106 ZZZZ Q)<ZZZZ><FLID>5001</FLID></ZZZZ></MSG>"                           # a kind no handler knows: DEAD(UNSUPPORTED) at once (SPEC §3a)

echo "== running msgx for 4 seconds" >&2
$msgx --config "$work/msgx.toml" run 2>"$work/msgx.log" &
pid=$!
sleep 4
kill -TERM "$pid"
wait "$pid" && echo "msgx exited 0 after SIGTERM" >&2
echo "== msgx log (lifecycle lines)" >&2
grep -E 'received|succeeded|skipped|failed|dead|sent|stopped' "$work/msgx.log" | sed -E 's/^\[[^ ]+ /[/' | cut -c1-160

echo; echo "== msgx status"
$msgx --config "$work/msgx.toml" status
echo; echo "== flight state in Redis"
for f in 5001 5002 5003; do echo "demo:flight:$f  $(redis-cli -p "$REDIS_PORT" --no-raw hgetall "demo:flight:$f" | tr '\n' ' ')"; done
echo "daily plan generation: $(redis-cli -p "$REDIS_PORT" --no-raw hgetall demo:schd:gen | tr '\n' ' ')"
echo; echo "== KAFKA:schd (daily plan) records on $topic.schd"
"$MSGX_TANSU" cat consume "$topic.schd" --broker "tcp://$MSGX_KAFKA_BROKERS" --max-wait-time-ms 1000 2>/dev/null | head -5 || true
echo; echo "== Kafka records on $topic"
"$MSGX_TANSU" cat consume "$topic" --broker "tcp://$MSGX_KAFKA_BROKERS" --max-wait-time-ms 1000 2>/dev/null | head -20 || true
echo; echo "== mailbox rows"
my msgx_demo -t -e "SELECT CMINMSGS_ID AS id, CMINMSGS_STATUS AS status, CMINMSGS_DATE_PROCESSED AS processed, LEFT(CMINMSGS_CLOB_MSG, 60) AS msg FROM cminmsgs"
echo; echo "(services keep running; stop them with: tests/support/services.sh stop)"
rm -rf "$work"
