#!/usr/bin/env bash
# Device call 4 of 2026-12-02 #3 (H200): the host's issue times of BASE's tree against
# HEAD's again, as call 3's two rounds disagreed (cuDNN's own times in the same processes
# moved 2-4x): four rounds of alternating processes, each pinned to one core (taskset), 200
# calls per median. Run in the foreground (about 3 minutes), .bundle carried.
BASE="${BASE:?BASE=<commit>}"
D=docs/perf/session_swing_2026-12-02
rm -rf /tmp/r /tmp/base && git clone -q -b main .bundle/repo.bundle /tmp/r && mkdir -p /tmp/base
git -C /tmp/r archive "$BASE" safeattn | tar -x -C /tmp/base
cd /tmp/r || exit 1
for rep in 1 2 3 4; do
  for t in /tmp/base /tmp/r; do
    PYTHONPATH=$t timeout 120 taskset -c 5 python3 $D/host_probe.py --top 0 --calls 200 \
      >>"$OUT/host_ab4.txt" 2>>"$OUT/host_ab4.err"
    echo "host $t rep $rep rc=$?"
  done
done
