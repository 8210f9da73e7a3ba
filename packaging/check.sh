#!/usr/bin/env bash
# CI's package check (#16): builds the .deb and the .rpm (packaging/build.sh), lints the .deb,
# installs it with dpkg and checks what an operator gets — the service account, the conffiles
# and their modes, the unit (systemd-analyze verify), the man page — runs the installed
# `msgx migrate` and `msgx check` against the local test services, purges it and checks that
# nothing is left; then inspects the .rpm (rpm -qpi/-qpl/--scripts).
#
#   packaging/check.sh [PROFILE]     PROFILE: release (default) or dev (CI: the binary it tested)
#   packaging/check.sh --tools       only installs the Debian packages the check needs, and exits
#                                    (CI does it early, beside clippy: apt-get waits on the
#                                    network and the disk; cargo-deb, compiled, is installed by
#                                    packaging/build.sh during the check, beside the tests: #66)
#
# Needs root (dpkg -i). Installs lintian and rpm (rpmbuild) with apt-get and cargo-deb with
# cargo, when missing.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
profile=${1:-release}

# Each line says when, in seconds since the check started: where its time goes (#66).
started=$SECONDS
say() { printf '== package: [%ss] %s\n' "$((SECONDS - started))" "$*"; }
fail() { printf '== package: FAILED: %s\n' "$*" >&2; exit 1; }
# A command that fails without a word of its own is named, with its line.
trap 'fail "line $LINENO: \`$BASH_COMMAND\` exited $?"' ERR

missing=()
command -v lintian >/dev/null || missing+=(lintian)
command -v rpmbuild >/dev/null || missing+=(rpm)
command -v systemd-analyze >/dev/null || missing+=(systemd)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ "$profile" = --tools ]; then
  say "lintian, rpm and systemd-analyze ready"
  exit 0
fi

packaging/build.sh "$profile"
deb=$(ls target/packages/msgx_*.deb)
rpmfile=$(ls target/packages/msgx-*.rpm)

say "lintian $deb"
# Errors fail; what lintian still says is explained in packaging/README.md (overrides ship
# in the package: packaging/debian/lintian-overrides).
lintian --fail-on error --display-info "$deb" | tee target/packages/lintian.txt

say "dpkg -i"
# What a run before that stopped half-way left installed (either package, an edited conffile).
dpkg --purge msgx >/dev/null 2>&1 || true
if rpm -q msgx >/dev/null 2>&1; then rpm -e --nodeps msgx >/dev/null 2>&1 || true; fi
rm -rf /etc/msgx
dpkg -i "$deb"
getent passwd msgx | grep -q ':/usr/sbin/nologin$' || fail "no system user msgx with nologin shell"
[ "$(stat -c '%a %U %G' /etc/msgx/msgx.toml)" = "640 root msgx" ] || fail "/etc/msgx/msgx.toml is $(stat -c '%a %U %G' /etc/msgx/msgx.toml), not 640 root msgx"
[ "$(stat -c '%a %U %G' /var/log/msgx)" = "750 msgx msgx" ] || fail "/var/log/msgx is $(stat -c '%a %U %G' /var/log/msgx)"
dpkg-query --control-show msgx conffiles | grep -qx '/etc/msgx/msgx.toml' || fail "msgx.toml is not a conffile"
dpkg-query --control-show msgx conffiles | grep -qx '/etc/logrotate.d/msgx' || fail "the logrotate file is not a conffile"
if command -v logrotate >/dev/null; then
  say "logrotate -d /etc/logrotate.d/msgx"
  logrotate -d /etc/logrotate.d/msgx 2>&1 | grep -qi 'error' && fail "logrotate finds errors in /etc/logrotate.d/msgx"
fi
[ -f /usr/share/msgx/grafana/msgx-dashboard.json ] || fail "no Grafana dashboard"
# The events' contract (#67): the schemas installed are the ones the binary prints.
for t in msg schd; do
  msgx schema "$t" | cmp -s - "/usr/share/msgx/schema/$t.json" || fail "/usr/share/msgx/schema/$t.json is not what msgx schema $t prints"
done
[ -f /usr/share/man/man1/msgx.1.gz ] || fail "no man page"
zcat /usr/share/man/man1/msgx.1.gz | grep -q 'watermark' || fail "the man page does not list the commands"
unit=$(ls /lib/systemd/system/msgx.service /usr/lib/systemd/system/msgx.service 2>/dev/null | head -1)
[ -n "$unit" ] || fail "no systemd unit installed"
say "systemd-analyze verify $unit"
systemd-analyze verify "$unit"
# The log's size is checked hourly, not only by the distribution's daily logrotate (#54).
timer="$(dirname "$unit")/msgx-logrotate.timer"
[ -f "$timer" ] && [ -f "${timer%.timer}.service" ] || fail "no hourly logrotate timer installed"
grep -qx 'OnCalendar=hourly' "$timer" || fail "$timer is not hourly"
systemd-analyze verify "$timer" "${timer%.timer}.service"
grep -q 'maxsize' /etc/logrotate.d/msgx || fail "/etc/logrotate.d/msgx rotates by no size"
# The units' hardening (#54): an exposure above 2.0 fails the check.
for u in "$unit" "$(dirname "$unit")/msgx@.service"; do
  score=$(systemd-analyze security --offline=true "$u" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  say "systemd-analyze security $(basename "$u"): exposure $score"
  [ -n "$score" ] || fail "systemd-analyze security gave no score for $u"
  awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' || fail "$u: exposure $score is above 2.0"
done

say "installed msgx against the test services"
eval "$(tests/support/services.sh env)"
scratch="pkgcheck_$$"
pg_admin=$MSGX_PG_URL
my_admin=$MSGX_MYSQL_URL
psql_bin=$(ls /usr/lib/postgresql/*/bin/psql | head -1)
"$psql_bin" -q "$pg_admin" -c "CREATE DATABASE $scratch"
mysql_cli=$(command -v mariadb || command -v mysql)
# mysql://USER:PASSWORD@HOST:PORT/DB
[[ $my_admin =~ ^mysql://([^:]+):([^@]+)@([^:]+):([0-9]+)/ ]] || fail "cannot read $my_admin"
my_user=${BASH_REMATCH[1]} my_pass=${BASH_REMATCH[2]} my_host=${BASH_REMATCH[3]} my_port=${BASH_REMATCH[4]}
my() { "$mysql_cli" -h "$my_host" -P "$my_port" -u "$my_user" -p"$my_pass" "$@"; }
my -e "CREATE DATABASE $scratch"
my "$scratch" < sql/fixtures/mailbox.sql
# The TLS leg's private servers (#64).
tls_dir=
tls_cleanup() {
  [ -n "$tls_dir" ] || return 0
  for k in pg mysql redis kafka; do tests/support/services.sh halt "$k" "$tls_dir/$k" >/dev/null 2>&1 || true; done
  rm -rf "$tls_dir"; tls_dir=
}
cleanup() {
  tls_cleanup
  for p in "${instance_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  [ -z "${traffic_pid:-}" ] || { touch "$traffic_stop"; wait "$traffic_pid" || true; }
  for db in $scratch ${scratch}_a ${scratch}_b ${scratch}_deb ${scratch}_rpm; do
    "$psql_bin" -q "$pg_admin" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
    my -e "DROP DATABASE IF EXISTS $db" || true
  done
  # The instances' Redis keys (named after this run's databases), when redis-cli is at hand.
  if command -v redis-cli >/dev/null; then
    redis-cli -u "$MSGX_REDIS_URL" --scan --pattern "msgx:${scratch}_*" | xargs -r redis-cli -u "$MSGX_REDIS_URL" DEL >/dev/null || true
  fi
  rm -f /etc/msgx/a.toml /etc/msgx/b.toml /etc/msgx/a.env /etc/msgx/b.env /etc/msgx/deb.toml /etc/msgx/deb.env /etc/msgx/rpm.toml /etc/msgx/rpm.env
}
instance_pids=()
trap cleanup EXIT
export MSGX_PG_URL="${pg_admin%/*}/$scratch" MSGX_MYSQL_URL="${my_admin%/*}/$scratch"
/usr/bin/msgx --config /etc/msgx/msgx.toml migrate
/usr/bin/msgx --config /etc/msgx/msgx.toml check | tee target/packages/check.txt
grep -q '^kafka: reachable' target/packages/check.txt || fail "the installed msgx check did not reach the broker"
/usr/bin/msgx --config /etc/msgx/msgx.toml status --check | tee target/packages/status-check.txt || true
grep -q '^MSGX CRITICAL - no instance holds the lease' target/packages/status-check.txt || fail "status --check"

# ---- TLS only (#64) ------------------------------------------------------------------------
# The installed binary against stores that refuse plaintext: a CA made here, TLS-only private
# instances (tests/support/services.sh instance-tls), the passwords in files only user msgx
# reads; `msgx migrate` and `msgx check` of the installed binary, then `msgx run` as the template
# unit runs it, until it serves.
tls_leg() {
  local t port_of pki base=${scratch}_tls
  t=$(mktemp -d /tmp/msgx-pkgcheck-tls.XXXXXX); chmod 755 "$t"
  tls_dir=$t # stopped by cleanup() too, should a step fail
  pki=$t/pki; mkdir -p "$pki" "$t/secrets"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=msgx-pkgcheck-ca \
    -keyout "$pki/ca.key" -out "$pki/ca.pem" 2>/dev/null
  for leaf in server client; do
    # The client certificate names the user (PostgreSQL's clientcert=verify-full asks it to).
    local cn=$leaf; [ "$leaf" = client ] && cn=msgx
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$cn" \
      -keyout "$pki/$leaf.key" -out "$pki/$leaf.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$pki/$leaf.ext"
    openssl x509 -req -in "$pki/$leaf.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
      -extfile "$pki/$leaf.ext" -out "$pki/$leaf.pem" 2>/dev/null
  done
  chmod 644 "$pki"/*.pem; chmod 600 "$pki"/*.key
  # The admin's copy of the client key stays root's (libpq wants a key its user owns).
  cp -p "$pki/client.key" "$pki/admin.key"; chown msgx:msgx "$pki/client.key"
  port_of() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
  local tls_pg_port tls_my_port tls_redis_port tls_kafka_port
  tls_pg_port=$(port_of) tls_my_port=$(port_of) tls_redis_port=$(port_of)
  while tls_kafka_port=$(port_of); ! python3 -c "import socket,sys; socket.socket().bind(('127.0.0.1',$tls_kafka_port+1))" 2>/dev/null; do :; done
  for k in pg mysql redis kafka; do
    local port_var="tls_${k}_port"; [ "$k" = mysql ] && port_var=tls_my_port
    tests/support/services.sh instance-tls "$k" "$t/$k" "${!port_var}" "$pki/server.pem" "$pki/server.key" "$pki/ca.pem" >/dev/null
  done
  # Every server asks for a client certificate too; the admin's is msgx's own.
  local cert="sslcert=$pki/client.pem sslkey=$pki/admin.key"
  PGPASSWORD=msgx-tls-secret "$psql_bin" -q "host=127.0.0.1 port=$tls_pg_port user=msgx dbname=msgx sslmode=verify-full sslrootcert=$pki/ca.pem $cert" -c "CREATE DATABASE $base"
  local mytls=(--ssl --ssl-ca="$pki/ca.pem" --ssl-cert="$pki/client.pem" --ssl-key="$pki/admin.key")
  "$mysql_cli" -h 127.0.0.1 -P "$tls_my_port" -u msgx -pmsgx-tls-secret "${mytls[@]}" -e "CREATE DATABASE $base"
  "$mysql_cli" -h 127.0.0.1 -P "$tls_my_port" -u msgx -pmsgx-tls-secret "${mytls[@]}" "$base" < sql/fixtures/mailbox.sql
  for topic in "msgx.$base.msg" "msgx.$base.schd"; do
    "$MSGX_TANSU" topic create "$topic" --partitions 1 --broker "tcp://127.0.0.1:$((tls_kafka_port + 1))" >/dev/null
  done
  for k in pg mysql redis; do printf 'msgx-tls-secret\n' >"$t/secrets/$k"; done
  chown -R msgx:msgx "$t/secrets"; chmod 700 "$t/secrets"; chmod 600 "$t/secrets"/*
  sed -e 's/^listen = "127.0.0.1:9722"/listen = "127.0.0.1:0"/' -e "s/^key-prefix = \"msgx:\"/key-prefix = \"msgx:$base:\"/" \
    -e "s/^msg = \"msgx.msg\"/msg = \"msgx.$base.msg\"/" -e "s/^schd = \"msgx.schd\"/schd = \"msgx.$base.schd\"/" \
    -e "s|^security-protocol = \"plaintext\"|security-protocol = \"ssl\"|" \
    -e "s|^ssl-ca-location = \"\"|ssl-ca-location = \"$pki/ca.pem\"|" \
    -e "s|^ssl-certificate-location = \"\"|ssl-certificate-location = \"$pki/client.pem\"|" \
    -e "s|^ssl-key-location = \"\"|ssl-key-location = \"$pki/client.key\"|" \
    -e "s|^tls-ca-file = \"\"|tls-ca-file = \"$pki/ca.pem\"|" \
    -e "s|^tls-cert-file = \"\"|tls-cert-file = \"$pki/client.pem\"|" \
    -e "s|^tls-key-file = \"\"|tls-key-file = \"$pki/client.key\"|" \
    /etc/msgx/msgx.toml > /etc/msgx/tls.toml
  # The three password files, each under its own table's `password-file` key.
  awk -v s="$t/secrets" '/^\[datasources.default\]/{t="pg"} /^\[mailbox.shared-mysql\]/{t="mysql"} /^\[redis\]/{t="redis"} /^\[/{if($0!~/^\[(datasources.default|mailbox.shared-mysql|redis)\]/)t=""} /^password-file = ""/{if(t!=""){print "password-file = \"" s "/" t "\""; next}} {print}' \
    /etc/msgx/tls.toml > /etc/msgx/tls.toml.new && mv /etc/msgx/tls.toml.new /etc/msgx/tls.toml
  chgrp msgx /etc/msgx/tls.toml && chmod 0640 /etc/msgx/tls.toml
  printf 'MSGX_PG_URL=%s\nMSGX_MYSQL_URL=%s\nMSGX_REDIS_URL=%s\nMSGX_KAFKA_BROKERS=%s\n' \
    "postgres://msgx@127.0.0.1:$tls_pg_port/$base?sslmode=verify-full&sslrootcert=$pki/ca.pem&sslcert=$pki/client.pem&sslkey=$pki/client.key" \
    "mysql://msgx@127.0.0.1:$tls_my_port/$base?ssl-mode=VERIFY_IDENTITY&ssl-ca=$pki/ca.pem&ssl-cert=$pki/client.pem&ssl-key=$pki/client.key" \
    "rediss://msgx@127.0.0.1:$tls_redis_port/" "127.0.0.1:$tls_kafka_port" > /etc/msgx/tls.env
  chgrp msgx /etc/msgx/tls.env && chmod 0640 /etc/msgx/tls.env
  # shellcheck disable=SC2046 # the env file's lines are NAME=VALUE words.
  env $(cat /etc/msgx/tls.env) /usr/bin/msgx --config /etc/msgx/tls.toml migrate >/dev/null
  # shellcheck disable=SC2046
  env $(cat /etc/msgx/tls.env) /usr/bin/msgx --config /etc/msgx/tls.toml check | tee target/packages/check-tls.txt
  for store in postgres mailbox; do
    grep -q "^$store: reachable.*TLSv1.[23] .*verified (chain and host name)" target/packages/check-tls.txt \
      || { tls_cleanup; fail "the installed msgx check did not reach $store over verified TLS"; }
  done
  grep -q '^redis: reachable, TLS, verified' target/packages/check-tls.txt || { tls_cleanup; fail "redis over TLS"; }
  grep -q '^kafka: reachable at .*TLS, verified' target/packages/check-tls.txt || { tls_cleanup; fail "kafka over TLS"; }
  if grep -q 'plaintext' target/packages/check-tls.txt; then tls_cleanup; fail "a plaintext connection in the TLS check"; fi
  rm -f /var/log/msgx/tls.log
  run_instance tls
  grep -q 'connection store=postgres TLSv1' /var/log/msgx/tls.log || { tls_cleanup; fail "instance tls: not over TLS"; }
  say "instance tls: $(grep -o 'started epoch=[0-9]*' /var/log/msgx/tls.log | head -1) on TLS-only stores, as user msgx"
  stop_instances
  rm -f /etc/msgx/tls.toml /etc/msgx/tls.env /var/log/msgx/tls.log
  tls_cleanup
}

say "two instances of msgx@.service side by side"
tmpl=$(ls /lib/systemd/system/msgx@.service /usr/lib/systemd/system/msgx@.service 2>/dev/null | head -1)
[ -n "$tmpl" ] || fail "no template unit msgx@.service installed"
systemd-analyze verify "$tmpl"
grep -qx 'Type=notify' "$tmpl" || fail "$tmpl is not Type=notify"
# No systemd runs this machine's services: each instance is started as the template says — its
# user, its Environment= and EnvironmentFile= with %i put in, its ExecStart — and watched
# through its own log file and metrics port.
unit_value() { sed -n "s/^$1=//p" "$tmpl"; }
# An instance's own databases (a fresh mailbox), env file and configuration, cut from the
# installed /etc/msgx/msgx.toml: its own metrics port (0: any free one, logged), Redis key
# prefix and topics, named after this run's databases (what a run before left in Redis is
# another instance's).
prepare_instance() {
  local i=$1 db="${scratch}_$1"
  "$psql_bin" -q "$pg_admin" -c "CREATE DATABASE $db"
  my -e "CREATE DATABASE $db"
  my "$db" < sql/fixtures/mailbox.sql
  printf 'MSGX_PG_URL=%s\nMSGX_MYSQL_URL=%s\nMSGX_REDIS_URL=%s\nMSGX_KAFKA_BROKERS=%s\n' "${pg_admin%/*}/$db" \
    "${my_admin%/*}/$db" "$MSGX_REDIS_URL" "$MSGX_KAFKA_BROKERS" > "/etc/msgx/$i.env"
  chgrp msgx "/etc/msgx/$i.env" && chmod 0640 "/etc/msgx/$i.env"
  sed -e 's/^listen = "127.0.0.1:9722"/listen = "127.0.0.1:0"/' -e "s/^key-prefix = \"msgx:\"/key-prefix = \"msgx:$db:\"/" \
    -e "s/^msg = \"msgx.msg\"/msg = \"msgx.$db.msg\"/" -e "s/^schd = \"msgx.schd\"/schd = \"msgx.$db.schd\"/" \
    /etc/msgx/msgx.toml > "/etc/msgx/$i.toml"
  chgrp msgx "/etc/msgx/$i.toml" && chmod 0640 "/etc/msgx/$i.toml"
  rm -f "/var/log/msgx/$i.log"
}
# `msgx migrate` of the installed binary for instance $1, as an operator runs it.
migrate_instance() {
  local db="${scratch}_$1"
  MSGX_PG_URL="${pg_admin%/*}/$db" MSGX_MYSQL_URL="${my_admin%/*}/$db" /usr/bin/msgx --config "/etc/msgx/$1.toml" migrate
}
# Runs instance $1 as the installed template unit says — its user, its Environment= and
# EnvironmentFile= with %i put in, its ExecStart — and waits for its Nth `started epoch=` ($2,
# default 1: the log is kept across restarts).
run_instance() {
  local i=$1 nth=${2:-1} envs=() line file user exec log=/var/log/msgx/$1.log
  tmpl=$(ls /lib/systemd/system/msgx@.service /usr/lib/systemd/system/msgx@.service 2>/dev/null | head -1)
  while IFS= read -r line; do envs+=("${line//%i/$i}"); done < <(unit_value Environment)
  file=$(unit_value EnvironmentFile | sed "s/%i/$i/g; s/^-//")
  while IFS= read -r line; do [ -n "$line" ] && envs+=("$line"); done < "$file"
  user=$(unit_value User)
  exec=$(unit_value ExecStart | sed "s/%i/$i/g")
  # shellcheck disable=SC2086 # ExecStart is split into words as systemd splits it.
  env -i PATH=/usr/bin:/bin "${envs[@]}" setpriv --reuid="$user" --regid="$user" --init-groups -- $exec \
    >>"target/packages/instance-$i.out" 2>&1 &
  instance_pids+=($!)
  for _ in $(seq 60); do
    [ "$(grep -c 'started epoch=' "$log" 2>/dev/null || true)" -ge "$nth" ] 2>/dev/null && return 0
    kill -0 "${instance_pids[-1]}" 2>/dev/null || break
    sleep 1
  done
  cat "$log" "target/packages/instance-$i.out" || true
  fail "instance $i did not start (run $nth)"
}
# SIGTERM to every running instance; each must exit 0.
stop_instances() {
  local p
  for p in "${instance_pids[@]}"; do kill -TERM "$p"; done
  for p in "${instance_pids[@]}"; do wait "$p" || fail "an instance exited $? on SIGTERM"; done
  instance_pids=()
}
start_instance() {
  prepare_instance "$1"
  migrate_instance "$1" >/dev/null
  run_instance "$1"
}
say "the installed msgx against TLS-only stores (#64)"
tls_leg
start_instance a
start_instance b
for i in a b; do
  log=/var/log/msgx/$i.log
  [ "$(stat -c %U "$log")" = msgx ] || fail "$log is not written by user msgx"
  addr=$(sed -n 's/.*metrics listening on \([^ ]*\) .*/\1/p' "$log" | head -1)
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$addr/live")" = 200 ] || fail "instance $i: /live on $addr"
  say "instance $i: $(grep -o 'started epoch=[0-9]*' "$log" | head -1), /live 200 on $addr, log $log"
done
[ "$(grep -ho 'metrics listening on [^ ]*' /var/log/msgx/a.log /var/log/msgx/b.log | sort -u | wc -l)" = 2 ] || fail "the instances share a metrics port"
stop_instances
for i in a b; do grep -q '\] stopped$' "/var/log/msgx/$i.log" || fail "instance $i did not stop cleanly"; done
say "both instances stopped on SIGTERM, exit 0"
rm -f /etc/msgx/a.toml /etc/msgx/b.toml /etc/msgx/a.env /etc/msgx/b.env /var/log/msgx/a.log /var/log/msgx/b.log

say "dpkg --purge"
dpkg --purge msgx
for p in /usr/bin/msgx /etc/msgx /var/log/msgx /usr/share/man/man1/msgx.1.gz "$unit" "$tmpl"; do
  [ ! -e "$p" ] || fail "$p is left after purge"
done

say "rpm $rpmfile"
rpm -qpi "$rpmfile"
rpm -qpl "$rpmfile" | tee target/packages/rpm-files.txt
for f in /usr/bin/msgx /etc/msgx/msgx.toml /usr/lib/systemd/system/msgx.service /usr/lib/systemd/system/msgx@.service /usr/share/man/man1/msgx.1.gz; do
  grep -qx "$f" target/packages/rpm-files.txt || fail "$f is not in the rpm"
done
rpm -qp --scripts "$rpmfile" | tee target/packages/rpm-scripts.txt
grep -q 'useradd --system' target/packages/rpm-scripts.txt || fail "the rpm does not create the msgx user"
rpm -qp --configfiles "$rpmfile" | grep -qx /etc/msgx/msgx.toml || fail "msgx.toml is not %config in the rpm"

# ---- Upgrade in place and back (#52) ------------------------------------------------------
# The previous release (the newest of packaging/RELEASES) packaged from its own tree; installed,
# serving; this release's package installed over it while it serves; `msgx migrate`; restarted
# as this release; the previous package installed again over this one (the way back) and
# restarted on the schema this release migrated. Traffic flows all along. Then every message
# is processed once, SUCCEEDED, each flight holds its last stand, `msgx verify --sample 1` finds
# nothing, the configuration file an operator edited and the env file are as they were, and the
# enabled unit is still enabled. Once with dpkg, once with rpm.
prev_bin=$(tests/support/releases.sh | sed -n 's/^previous=//p')
[ -x "$prev_bin" ] || fail "tests/support/releases.sh built no previous release"
packaging/build.sh --tree target/releases/previous --binary "$prev_bin" --out target/packages/previous >/dev/null
prev_deb=$(ls target/packages/previous/msgx_*.deb)
prev_rpm=$(ls target/packages/previous/msgx-*.rpm)
this_version=$(dpkg-deb -f "$deb" Version) prev_version=$(dpkg-deb -f "$prev_deb" Version)
dpkg --compare-versions "$this_version" gt "$prev_version" \
  || fail "this release's version $this_version is not above the pinned previous release's $prev_version (Cargo.toml)"
traffic_stop=$(mktemp -u)
# FLOP-STND messages for flights P0..P9 into the instance's mailbox, one each 50 ms, until
# traffic_end (not in a subshell: it waits for its child); the last SEQN written is in
# $traffic_stop.n.
traffic() {
  rm -f "$traffic_stop" "$traffic_stop.n"
  (
    n=${1:-0}
    while [ ! -e "$traffic_stop" ]; do
      n=$((n + 1)) f=P$((n % 10))
      my "${scratch}_$inst" -e "INSERT INTO cminmsgs (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_STATUS) VALUES ('<MSG><META><SNDR>AODB</SNDR><SEQN>$n</SEQN><DTTM>20260101083000</DTTM><TYPE>FLOP</TYPE><STYP>STND</STYP></META><FLOP><FLID>$f</FLID><FFID>MX-$f-D-01JAN260900-D</FFID><STND>S$n</STND></FLOP></MSG>', UTC_TIMESTAMP(), 'VALID')"
      echo "$n" > "$traffic_stop.n"
      sleep 0.05
    done
  ) &
  traffic_pid=$!
}
traffic_end() {
  touch "$traffic_stop"
  wait "$traffic_pid"
  traffic_pid=
}
# Waits until the instance marked every mailbox row processed.
drained() {
  local left
  for _ in $(seq 90); do
    left=$(my -N "${scratch}_$inst" -e "SELECT count(*) FROM cminmsgs WHERE CMINMSGS_DATE_PROCESSED IS NULL")
    [ "$left" = 0 ] && return 0
    sleep 1
  done
  fail "$left mailbox row(s) still unprocessed after 90 s"
}
u_env() { env MSGX_PG_URL="${pg_admin%/*}/${scratch}_$inst" MSGX_MYSQL_URL="${my_admin%/*}/${scratch}_$inst" "$@"; }
installed() { /usr/bin/msgx --version | tr -d '\n'; }

# upgrade_cycle KIND INSTALL UPGRADE DOWNGRADE REMOVE: the packages, the instance and the checks.
upgrade_cycle() {
  # The instance is named after the package kind: its databases, Redis keys and topics are
  # its own, apart from the other cycle's.
  local kind=$1 inst=$1 install=$2 upgrade=$3 downgrade=$4 remove=$5 conf_sum env_sum runs=0 last total
  say "$kind: install the previous release ($install)"
  $install
  say "$kind: $(installed) installed"
  # An operator's edit of the conffile, which every step below must keep.
  printf '\n# edited on this host (package check %s)\n' "$$" >> /etc/msgx/msgx.toml
  conf_sum=$(sha256sum < /etc/msgx/msgx.toml)
  prepare_instance "$inst"
  env_sum=$(sha256sum < /etc/msgx/$inst.env)
  systemctl enable msgx@$inst.service >/dev/null 2>&1 || fail "systemctl enable msgx@$inst.service"
  migrate_instance "$inst" >/dev/null
  run_instance "$inst" $((runs += 1))
  traffic 0
  sleep 2
  say "$kind: upgrade to this release while the previous one serves ($upgrade)"
  $upgrade
  say "$kind: $(installed) installed; msgx migrate, then the instance restarted as this release"
  migrate_instance "$inst" | tee -a "target/packages/upgrade-$kind.txt"
  stop_instances
  run_instance "$inst" $((runs += 1))
  grep -q "^.* INFO .*schema V" /var/log/msgx/$inst.log || fail "this release logged no schema line"
  sleep 2
  say "$kind: back to the previous release while this one serves ($downgrade)"
  $downgrade
  say "$kind: $(installed) installed; the instance restarted as it, on this release's schema"
  stop_instances
  run_instance "$inst" $((runs += 1))
  sleep 2
  traffic_end
  last=$(cat "$traffic_stop.n")
  drained
  stop_instances
  # What an operator checks after the way back.
  total=$(my -N "${scratch}_$inst" -e "SELECT count(*) FROM cminmsgs")
  [ "$total" = "$last" ] || fail "$kind: $total mailbox rows, $last written"
  local succeeded
  succeeded=$(u_env "$psql_bin" -Atq "${pg_admin%/*}/${scratch}_$inst" -c "SELECT count(*) FROM proc_state WHERE state = 'SUCCEEDED'")
  [ "$succeeded" = "$total" ] || fail "$kind: $succeeded of $total messages SUCCEEDED"
  local n f want got
  for n in $(seq $((last - 9)) "$last"); do
    f=P$((n % 10)) want=S$n
    got=$(u_env /usr/bin/msgx --config /etc/msgx/$inst.toml flight "$f" | sed -n 's/^  STND *= \([^ ]*\) .*/\1/p')
    [ "$got" = "$want" ] || fail "$kind: flight $f holds $got, not its last stand $want"
  done
  u_env /usr/bin/msgx --config /etc/msgx/$inst.toml verify --sample 1 > "target/packages/verify-$kind.txt" \
    || { cat "target/packages/verify-$kind.txt"; fail "$kind: msgx verify --sample 1 after the way back"; }
  if grep -E '^[^ ]+ (ERROR|WARN) ' /var/log/msgx/$inst.log | grep -v 'newer than this release'; then
    fail "$kind: the instance logged the warnings or errors above"
  fi
  grep -q 'WARN .*schema V.*newer than this release' /var/log/msgx/$inst.log \
    || fail "$kind: the previous release, back on this release's schema, did not say it runs on a newer one"
  [ "$(sha256sum < /etc/msgx/msgx.toml)" = "$conf_sum" ] || fail "$kind: the edited /etc/msgx/msgx.toml was not kept"
  [ "$(sha256sum < /etc/msgx/$inst.env)" = "$env_sum" ] || fail "$kind: /etc/msgx/$inst.env was not kept"
  [ "$(systemctl is-enabled msgx@$inst.service 2>/dev/null)" = enabled ] || fail "$kind: msgx@$inst.service is no longer enabled"
  say "$kind: $total messages through install, upgrade and downgrade, $runs runs: all SUCCEEDED, each flight at its last stand, verify exit 0, conffile and env file kept, msgx@$inst.service enabled"
  systemctl disable msgx@$inst.service >/dev/null 2>&1 || true
  for db in "${scratch}_$inst"; do
    "$psql_bin" -q "$pg_admin" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"
    my -e "DROP DATABASE IF EXISTS $db"
  done
  rm -f /etc/msgx/$inst.toml /etc/msgx/$inst.env /var/log/msgx/$inst.log
  $remove
  # What a removal keeps of an edited configuration (rpm: msgx.toml.rpmsave) goes with the check.
  rm -rf /etc/msgx
}
upgrade_cycle deb "dpkg -i $prev_deb" "dpkg -i --force-confdef --force-confold $deb" \
  "dpkg -i --force-confdef --force-confold $prev_deb" "dpkg --purge msgx"
# rpm on Debian: no rpm database knows /bin/sh or shadow-utils, hence --nodeps.
upgrade_cycle rpm "rpm -i --nodeps $prev_rpm" "rpm -U --nodeps $rpmfile" \
  "rpm -U --oldpackage --nodeps $prev_rpm" "rpm -e --nodeps msgx"
say "ok"
