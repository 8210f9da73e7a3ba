#!/usr/bin/env bash
# Builds the releases the upgrade tests run beside the build under test (#52) and prints where
# their binaries are, one `name=path` a line:
#   previous — the commit pinned in tests/support/previous-release: the release before this one
#              (moved forward at each release; a release before #52 cannot run on a newer schema,
#              so the pin is never older than the commit that taught releases to);
#   next     — this tree plus tests/support/next-release.patch: one more mapping, the rules
#              version one up.
# Both are built in target/releases (a target directory of their own, shared by the two: only
# msgx itself is compiled twice), debug, with the lock file of their tree. A second run builds
# only what changed; concurrent runs wait for each other.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD/target/releases
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9

# The tree at the pinned commit, written once per pin.
pin=$(tr -d '[:space:]' < tests/support/previous-release)
if [ "$(cat "$root/previous.pin" 2>/dev/null)" != "$pin" ]; then
  git cat-file -e "$pin^{commit}" 2>/dev/null || {
    echo "releases.sh: the pinned previous release $pin is not in this clone's history (fetch it, or deepen a shallow clone)" >&2
    exit 1
  }
  rm -rf "$root/previous"
  mkdir -p "$root/previous"
  git archive "$pin" | tar -x -C "$root/previous"
  echo "$pin" > "$root/previous.pin"
fi

# This tree as it is (committed or not, as git lists it), and the patch on top: staged, then
# copied over the build's tree only where a file differs, so cargo sees unchanged files unchanged.
sync_tree() {
  local src=$1 dst=$2 f
  mkdir -p "$dst"
  while IFS= read -r f; do
    cmp -s "$src/$f" "$dst/$f" || { mkdir -p "$dst/$(dirname "$f")"; cp "$src/$f" "$dst/$f"; }
  done < <(cd "$src" && find . -type f)
  while IFS= read -r f; do
    [ -e "$src/$f" ] || rm -f "$dst/$f"
  done < <(cd "$dst" && find . -type f)
}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -f "$f" ] && { mkdir -p "$stage/$(dirname "$f")"; cp -p "$f" "$stage/$f"; }
done
( cd "$stage" && git apply ) < tests/support/next-release.patch \
  || { echo "releases.sh: tests/support/next-release.patch no longer applies to this tree" >&2; exit 1; }
sync_tree "$stage" "$root/next"

build() {
  local name=$1 dir=$2 exe
  exe=$(CARGO_TARGET_DIR="$root/target" cargo build --locked --bin msgx --manifest-path "$dir/Cargo.toml" \
          --message-format=json-render-diagnostics \
        | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
  [ -x "$exe" ] || { echo "releases.sh: the $name release built no binary" >&2; exit 1; }
  cp "$exe" "$root/msgx-$name.new" && mv "$root/msgx-$name.new" "$root/msgx-$name"
  echo "$name=$root/msgx-$name"
}
build previous "$root/previous"
build next "$root/next"
