#!/bin/sh
# Mirrors a registry kept in object storage ($SYNC_SOURCE, an rclone path such as s3:bucket/registry) into the
# pod's own registry folder ($REGISTRY) by the rule adapterd's watch honours: a version is copied under a '.'
# name and renamed to its number once complete, the state files (base, then journal) are copied aside and renamed
# over the old ones.
# Versions gone from the bucket are moved aside, then removed. "sync.sh once" copies everything and exits (the
# init container: models must be there before adapterd starts); without it, it repeats every $SYNC_INTERVAL s.
set -eu
R=${REGISTRY:-/registry}
S=${SYNC_SOURCE:?SYNC_SOURCE (rclone path of the registry) is required}
every=${SYNC_INTERVAL:-5}

# $1 (a file of the registry's top) copied aside and renamed over the old one when it changed; 1 when
# the bucket has none
sync_file() {
  [ -n "$(rclone lsf "$S/$1" 2>/dev/null)" ] || return 1
  rclone copyto "$S/$1" "$R/$1.sync"
  cmp -s "$R/$1.sync" "$R/$1" 2>/dev/null || mv -f "$R/$1.sync" "$R/$1"
  rm -f "$R/$1.sync"
}

# The state: the base first, then its journal (or none): adapterd applies a journal only when it
# names the base it read, so a reader between the two renames sees the old base or the new one whole.
sync_state() {
  sync_file .adapterd-state.json || return 0
  sync_file .adapterd-state.log || rm -f "$R/.adapterd-state.log"
}

sync_tasks() {
  for t in $(rclone lsf --dirs-only "$S/tasks/" | tr -d /); do
    mkdir -p "$R/tasks/$t"
    remote=$(rclone lsf --dirs-only "$S/tasks/$t/" | tr -d / | grep -E '^[0-9]+$' || true)
    for v in $remote; do
      [ -d "$R/tasks/$t/$v" ] && continue
      rm -rf "$R/tasks/$t/.sync-$v"
      rclone copy "$S/tasks/$t/$v" "$R/tasks/$t/.sync-$v" && mv "$R/tasks/$t/.sync-$v" "$R/tasks/$t/$v"
    done
    for d in "$R/tasks/$t"/*; do
      v=$(basename "$d")
      [ -d "$d" ] || continue
      echo "$remote" | grep -qx "$v" && continue
      mv "$d" "$R/tasks/$t/.gone-$v" && rm -rf "$R/tasks/$t/.gone-$v"
    done
  done
}

if [ "${1:-}" = once ]; then
  mkdir -p "$R/models" "$R/tasks"
  rclone copy "$S/models" "$R/models"
  sync_tasks
  sync_state
  exit 0
fi
while :; do
  sync_tasks || echo "sync: tasks failed; retrying in ${every}s" >&2
  sync_state || echo "sync: state failed; retrying in ${every}s" >&2
  sleep "$every"
done
