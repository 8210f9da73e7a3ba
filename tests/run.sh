#!/usr/bin/env bash
# The whole test suite, services included: starts PostgreSQL, MariaDB, Redis and Tansu on
# loopback (installing them if needed), runs unit and integration tests, and stops the
# services again if this script started them.
set -euo pipefail
cd "$(dirname "$0")/.."

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

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --lib --bins --tests --no-fail-fast "$@"
else
  cargo test --lib --bins --tests --no-fail-fast "$@"
fi
