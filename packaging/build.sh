#!/usr/bin/env bash
# Builds the Debian and RPM packages into target/packages, with the man page generated from
# the CLI (`msgx man`): the .deb with cargo-deb (installed from crates.io if missing), the .rpm
# with rpmbuild and packaging/rpm/msgx.spec (package `rpm` on Debian).
#
#   packaging/build.sh [PROFILE]    release (default), or dev to package the binary CI tested
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-release}
command -v cargo-deb >/dev/null || cargo install --locked cargo-deb
if [ "$profile" = release ]; then
  cargo build --release --locked
  bin=target/release/msgx
else
  cargo build --locked --profile "$profile"
  bin=target/debug/msgx
fi
# The packages' asset paths name target/release (Cargo.toml); a dev build is staged there,
# stripped, so that the package holds exactly the binary that was tested.
if [ "$bin" != target/release/msgx ]; then
  mkdir -p target/release
  strip -o target/release/msgx "$bin"
fi
mkdir -p target/man target/packages
rm -f target/packages/msgx*.deb target/packages/msgx*.rpm
target/release/msgx man > target/man/msgx.1
gzip -9 -n -f target/man/msgx.1
cargo deb --no-build --no-strip --output target/packages/
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
rm -rf target/rpmbuild
rpmbuild -bb --quiet --define "_topdir $PWD/target/rpmbuild" --define "src $PWD" \
  --define "version $version" packaging/rpm/msgx.spec
cp target/rpmbuild/RPMS/*/msgx-*.rpm target/packages/
ls -l target/packages
