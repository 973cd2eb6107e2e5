#!/usr/bin/env bash
# Entry point of the bench service (installed in the image as `safeattn-bench`).
#
# asv measures git commits, so the service needs the checkout's history, but it must not
# write into the user's tree (.asv/ environments, worktrees). It clones the checkout
# mounted read-only at $SAFEATTN_SRC into a fresh directory, checks out the same commit
# as the checkout's HEAD, and runs tools/run.py from there with the shared results
# directory $SAFEATTN_RESULTS. Arguments go to run.py unchanged (--range, --same, -b, ...).
set -euo pipefail

src=${SAFEATTN_SRC:?SAFEATTN_SRC must name the mounted safeattn checkout (docker-compose.yml sets it)}
results=${SAFEATTN_RESULTS:?SAFEATTN_RESULTS must name the asv results directory (docker-compose.yml sets it)}

head=$(git -C "$src" rev-parse HEAD)
work=$(mktemp -d "${TMPDIR:-/tmp}/safeattn-bench.XXXXXX")
echo "[bench] cloning $src at ${head:0:12} ($(git -C "$src" log -1 --format=%s "$head")) into $work"
git clone --quiet --no-checkout "$src" "$work"
git -C "$work" checkout --quiet --detach "$head"
if [ -n "$(git -C "$src" status --porcelain --untracked-files=no)" ]; then
  echo "[bench] note: $src has uncommitted changes; they are not measured (commit them first)"
fi
cd "$work"
echo "[bench] results go to $results"
# exec: python becomes the process that receives Ctrl-C / docker stop, not this shell.
exec python tools/run.py --results "$results" "$@"
