#!/bin/sh
# fuzz-replay: every fuzz target's replay program over its crashes/<name>/ (regressions: crashes found and fixed) and
# its seed corpus/<name>/; a crash, a sanitizer report or a leak (ASan build) fails the test.
# Usage: replay_test.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1 build=$2
status=0
for exe in "$build"/replay_*; do
  case $exe in *.log|*.p) continue ;; esac
  name=${exe##*/replay_}
  if "$exe" "$src/crashes/$name" "$src/corpus/$name" >"$build/replay_$name.log" 2>&1; then
    echo "ok    $name: $(tail -1 "$build/replay_$name.log")"
  else
    echo "FAIL  $name"; tail -30 "$build/replay_$name.log"; status=1
  fi
done
exit $status
