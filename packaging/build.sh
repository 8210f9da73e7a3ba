#!/usr/bin/env bash
# Builds the Debian and RPM packages into target/packages (installs cargo-deb and
# cargo-generate-rpm from crates.io if they are missing).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-deb >/dev/null || cargo install --locked cargo-deb
command -v cargo-generate-rpm >/dev/null || cargo install --locked cargo-generate-rpm
cargo build --release --locked
mkdir -p target/packages
cargo deb --no-build --output target/packages/
cargo generate-rpm --output target/packages/
ls -l target/packages
