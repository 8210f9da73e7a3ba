#!/usr/bin/env bash
# Builds the release the upgrade tests run beside the build under test (#52) and prints where
# its binary is, as `previous=path`: the newest release of packaging/RELEASES, the release
# before this one (a line is added at each release; a release before #52 cannot run on a newer
# schema, so the newest is never older than the commit that taught releases to). The next
# release is no build (#65): the tests run this release's rulebook plus one mapping.
# It is built in the main target directory (#66), debug, with the lock file of its tree: every
# dependency it shares with this build is compiled once, for both. Its binary is renamed
# (msgx-previous) in its tree's Cargo.toml, so building it never replaces target/debug/msgx,
# the build under test, which tests run while this script runs again. The tree is staged in
# target/releases. A second run builds only what changed; concurrent runs wait for each other.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD/target/releases
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9
# Where the releases were built before #66: a target directory of their own.
rm -rf "$root/target"
# Where the next release was staged and built before #65.
rm -rf "$root/next" "$root/msgx-next"

# A release's binary is named msgx-NAME: the `name` of the [[bin]] msgx in its Cargo.toml. Its
# package is renamed msgx-NAME too (in its lock file as well), its library keeping the crate name
# msgx and its Debian package the name msgx: cargo tells the builds of a path package apart by
# name and version, not by path, so a release of the version this tree had before a bump took
# this tree's library build, fresh by its own files, and failed to compile against it (#68).
rename_bin() {
  sed -i '/^\[\[bin\]\]$/,/^path/ s/^name = "msgx"$/name = "msgx-'"$2"'"/' "$1/Cargo.toml"
  grep -qx "name = \"msgx-$2\"" "$1/Cargo.toml" \
    || { echo "releases.sh: no [[bin]] msgx to rename in $1/Cargo.toml" >&2; exit 1; }
  sed -i '0,/^name = "msgx"$/ s//name = "msgx-'"$2"'"/' "$1/Cargo.toml"
  sed -i -e 's/^\[lib\]$/[lib]\nname = "msgx"/' \
    -e 's/^\[package.metadata.deb\]$/[package.metadata.deb]\nname = "msgx"/' "$1/Cargo.toml"
  sed -i 's/^name = "msgx"$/name = "msgx-'"$2"'"/' "$1/Cargo.lock"
  [ "$(sed -n '/^\[package\]$/,/^name/p; /^\[lib\]$/,/^name/p; /^\[package.metadata.deb\]$/,/^name/p' "$1/Cargo.toml" \
       | grep -c '^name = ')" = 3 ] \
    || { echo "releases.sh: the package, library and Debian package of $1/Cargo.toml were not all named" >&2; exit 1; }
}

# The tree at the pinned commit, written once per pin.
pin=$(awk '!/^#/ && NF { c = $2 } END { print c }' packaging/RELEASES)
[ -n "$pin" ] || { echo "releases.sh: packaging/RELEASES lists no release" >&2; exit 1; }
if [ "$(cat "$root/previous.pin" 2>/dev/null)" != "$pin renamed" ]; then
  git cat-file -e "$pin^{commit}" 2>/dev/null || {
    echo "releases.sh: the pinned previous release $pin is not in this clone's history (fetch it, or deepen a shallow clone)" >&2
    exit 1
  }
  rm -rf "$root/previous"
  mkdir -p "$root/previous"
  git archive "$pin" | tar -x -C "$root/previous"
  rename_bin "$root/previous" previous
  echo "$pin renamed" > "$root/previous.pin"
fi

build() {
  local name=$1 dir=$2 exe stamp
  # Built once per pin and compiler (#66): a warm run does not ask cargo, which would compile the
  # release's crate again whenever the build under test moved a shared dependency's fingerprint.
  stamp="$(cat "$root/previous.pin") $(rustc -V)"
  if [ -x "$root/msgx-$name" ] && [ "$(cat "$root/msgx-$name.built" 2>/dev/null)" = "$stamp" ]; then
    echo "$name=$root/msgx-$name"
    return
  fi
  # The dependencies built as this tree builds them (Cargo.toml's dev profile: no debug info,
  # #66), whatever the release's own Cargo.toml says, so they are the same build, shared. The
  # release's own crate without debug info and without incremental state: nobody debugs it or
  # edits it, and it compiles in 13 s instead of 23 s.
  exe=$(CARGO_TARGET_DIR="$PWD/target" cargo build --locked --bin "msgx-$name" --manifest-path "$dir/Cargo.toml" \
          --config 'profile.dev.package."*".debug = false' \
          --config 'profile.dev.debug = false' --config 'profile.dev.incremental = false' \
          --message-format=json-render-diagnostics \
        | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
  [ -x "$exe" ] || { echo "releases.sh: the $name release built no binary" >&2; exit 1; }
  cp "$exe" "$root/msgx-$name.new" && mv "$root/msgx-$name.new" "$root/msgx-$name"
  echo "$stamp" > "$root/msgx-$name.built"
  echo "$name=$root/msgx-$name"
}
build previous "$root/previous"
