#!/usr/bin/env bash
# The whole test suite, services included: starts PostgreSQL, MariaDB, Redis and Tansu on
# loopback (installing them if needed), runs unit and integration tests, and stops the
# services again if this script started them.
set -euo pipefail
cd "$(dirname "$0")/.."

# The 15 slowest tests of the run, from nextest's JUnit report: where the suite's time goes.
# awk reads every line (a `head` would close the pipe early: SIGPIPE, and pipefail ends the run).
slowest() {
  [ -f "$1" ] || return 0
  echo "== the 15 slowest tests (seconds; every test's time: $1)"
  grep -o '<testcase [^>]*>' "$1" \
    | sed -n 's/.* name="\([^"]*\)" classname="\([^"]*\)".* time="\([0-9.]*\)".*/\3 \2 \1/p' \
    | sort -rn | awk 'NR <= 15 { printf "%8.1f  %s %s\n", $1, $2, $3 }'
}

services=tests/support/services.sh
if $services status 2>/dev/null; then
  started=0
else
  started=1
fi
eval "$($services start)"
if [ "$started" = 1 ]; then
  trap '$services stop' EXIT
fi

# The releases the upgrade tests run beside this build (#52): built before the tests, so no
# test waits on a compiler while the others run.
tests/support/releases.sh

# The schedule (many waiting tests at a time, the CPU-heavy ones in a group of their own) and
# the JUnit report are nextest's: .config/nextest.toml (#66).
status=0
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --lib --bins --tests --no-fail-fast "$@" || status=$?
  slowest target/nextest/default/junit.xml
else
  cargo test --lib --bins --tests --no-fail-fast "$@" || status=$?
fi
exit "$status"
