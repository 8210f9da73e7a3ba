#!/usr/bin/env bash
# CI's package check (#16): builds the .deb and the .rpm (packaging/build.sh), lints the .deb,
# installs it with dpkg and checks what an operator gets — the service account, the conffiles
# and their modes, the unit (systemd-analyze verify), the man page — runs the installed
# `msgx migrate` and `msgx check` against the local test services, purges it and checks that
# nothing is left; then inspects the .rpm (rpm -qpi/-qpl/--scripts).
#
#   packaging/check.sh [PROFILE]     PROFILE: release (default) or dev (CI: the binary it tested)
#
# Needs root (dpkg -i). Installs lintian and rpm (rpmbuild) with apt-get and cargo-deb with
# cargo, when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-release}

say() { printf '== package: %s\n' "$*"; }
fail() { printf '== package: FAILED: %s\n' "$*" >&2; exit 1; }

missing=()
command -v lintian >/dev/null || missing+=(lintian)
command -v rpmbuild >/dev/null || missing+=(rpm)
command -v systemd-analyze >/dev/null || missing+=(systemd)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

packaging/build.sh "$profile"
deb=$(ls target/packages/msgx_*.deb)
rpmfile=$(ls target/packages/msgx-*.rpm)

say "lintian $deb"
# Errors fail; what lintian still says is explained in packaging/README.md (overrides ship
# in the package: packaging/debian/lintian-overrides).
lintian --fail-on error --display-info "$deb" | tee target/packages/lintian.txt

say "dpkg -i"
dpkg --purge msgx >/dev/null 2>&1 || true
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
cleanup() {
  for p in "${instance_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for db in $scratch ${scratch}_a ${scratch}_b; do
    "$psql_bin" -q "$pg_admin" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
    my -e "DROP DATABASE IF EXISTS $db" || true
  done
  rm -f /etc/msgx/a.toml /etc/msgx/b.toml /etc/msgx/a.env /etc/msgx/b.env
}
instance_pids=()
trap cleanup EXIT
export MSGX_PG_URL="${pg_admin%/*}/$scratch" MSGX_MYSQL_URL="${my_admin%/*}/$scratch"
/usr/bin/msgx --config /etc/msgx/msgx.toml migrate
/usr/bin/msgx --config /etc/msgx/msgx.toml check | tee target/packages/check.txt
grep -q '^kafka: reachable' target/packages/check.txt || fail "the installed msgx check did not reach the broker"
/usr/bin/msgx --config /etc/msgx/msgx.toml status --check | tee target/packages/status-check.txt || true
grep -q '^MSGX CRITICAL - no instance holds the lease' target/packages/status-check.txt || fail "status --check"

say "two instances of msgx@.service side by side"
tmpl=$(ls /lib/systemd/system/msgx@.service /usr/lib/systemd/system/msgx@.service 2>/dev/null | head -1)
[ -n "$tmpl" ] || fail "no template unit msgx@.service installed"
systemd-analyze verify "$tmpl"
grep -qx 'Type=notify' "$tmpl" || fail "$tmpl is not Type=notify"
# No systemd runs this machine's services: each instance is started as the template says — its
# user, its Environment= and EnvironmentFile= with %i put in, its ExecStart — and watched
# through its own log file and metrics port.
unit_value() { sed -n "s/^$1=//p" "$tmpl"; }
start_instance() {
  local i=$1 db="${scratch}_$1"
  "$psql_bin" -q "$pg_admin" -c "CREATE DATABASE $db"
  my -e "CREATE DATABASE $db"
  my "$db" < sql/fixtures/mailbox.sql
  printf 'MSGX_PG_URL=%s\nMSGX_MYSQL_URL=%s\nMSGX_REDIS_URL=%s\nMSGX_KAFKA_BROKERS=%s\n' "${pg_admin%/*}/$db" \
    "${my_admin%/*}/$db" "$MSGX_REDIS_URL" "$MSGX_KAFKA_BROKERS" > "/etc/msgx/$i.env"
  chgrp msgx "/etc/msgx/$i.env" && chmod 0640 "/etc/msgx/$i.env"
  # Its own metrics port (0: any free one, logged), Redis key prefix and topics.
  sed -e 's/^listen = "127.0.0.1:9722"/listen = "127.0.0.1:0"/' -e "s/^key-prefix = \"msgx:\"/key-prefix = \"msgx:$i:\"/" \
    -e "s/^msg = \"msgx.msg\"/msg = \"msgx.$i.msg\"/" -e "s/^schd = \"msgx.schd\"/schd = \"msgx.$i.schd\"/" \
    /etc/msgx/msgx.toml > "/etc/msgx/$i.toml"
  chgrp msgx "/etc/msgx/$i.toml" && chmod 0640 "/etc/msgx/$i.toml"
  local envs=() line file user exec
  while IFS= read -r line; do envs+=("${line//%i/$i}"); done < <(unit_value Environment)
  file=$(unit_value EnvironmentFile | sed "s/%i/$i/g; s/^-//")
  while IFS= read -r line; do [ -n "$line" ] && envs+=("$line"); done < "$file"
  user=$(unit_value User)
  exec=$(unit_value ExecStart | sed "s/%i/$i/g")
  MSGX_PG_URL="${pg_admin%/*}/$db" MSGX_MYSQL_URL="${my_admin%/*}/$db" /usr/bin/msgx --config "/etc/msgx/$i.toml" migrate >/dev/null
  rm -f "/var/log/msgx/$i.log"
  # shellcheck disable=SC2086 # ExecStart is split into words as systemd splits it.
  env -i PATH=/usr/bin:/bin "${envs[@]}" setpriv --reuid="$user" --regid="$user" --init-groups -- $exec \
    >"target/packages/instance-$i.out" 2>&1 &
  instance_pids+=($!)
}
start_instance a
start_instance b
for i in a b; do
  log=/var/log/msgx/$i.log
  for _ in $(seq 60); do grep -q 'started epoch=' "$log" 2>/dev/null && break; sleep 1; done
  grep -q 'started epoch=' "$log" 2>/dev/null || { cat "$log" "target/packages/instance-$i.out" || true; fail "instance $i did not start"; }
  [ "$(stat -c %U "$log")" = msgx ] || fail "$log is not written by user msgx"
  addr=$(sed -n 's/.*metrics listening on \([^ ]*\) .*/\1/p' "$log" | head -1)
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$addr/live")" = 200 ] || fail "instance $i: /live on $addr"
  say "instance $i: $(grep -o 'started epoch=[0-9]*' "$log" | head -1), /live 200 on $addr, log $log"
done
[ "$(grep -ho 'metrics listening on [^ ]*' /var/log/msgx/a.log /var/log/msgx/b.log | sort -u | wc -l)" = 2 ] || fail "the instances share a metrics port"
for p in "${instance_pids[@]}"; do kill -TERM "$p"; done
for p in "${instance_pids[@]}"; do wait "$p" || fail "an instance exited $? on SIGTERM"; done
instance_pids=()
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
say "ok"
