#!/usr/bin/env bash
# Run the tests as if today were another date, to prove they do not depend on it:
#   tests/clock/run_on_date.sh 2027-06-01 [pytest arguments]
# libfaketime (Debian package `faketime`) shifts the clock of pytest, of the API and
# Spark processes it starts, and of `lb` subprocesses; redis-server runs on the real
# clock (its allocator and libfaketime clash; nothing the tests check reads Redis'
# clock: the service passes its own time to every script).
set -euo pipefail
date="$1"
shift
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
command -v faketime >/dev/null || {
  echo "faketime is missing: apt-get install faketime" >&2
  exit 2
}
shim="$(mktemp -d)"
trap 'rm -rf "$shim"' EXIT
real="$(command -v redis-server)"
printf '#!/bin/sh\nunset LD_PRELOAD\nexec %s "$@"\n' "$real" >"$shim/redis-server"
chmod +x "$shim/redis-server"
cd "$root"
PATH="$shim:$PATH" faketime -f "@$date 00:00:00" .venv/bin/pytest "$@"
