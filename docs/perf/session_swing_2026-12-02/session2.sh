#!/usr/bin/env bash
# Device call 3 of 2026-12-02 #3 (H200), from the repository root of the device's copy, with
# .bundle/repo.bundle carried (git bundle create .bundle/repo.bundle main): the host's issue
# times of BASE's tree against HEAD's (host_probe.py, alternating processes, two rounds), the
# D = 256 rows against cuDNN by GPU time (tree_ab.py --d256, two processes), then the masked
# and contract GPU tests (the list of 2026-12-02 #2, the family cases now in test_families).
# Detached; poll with S=/tmp/sess bash docs/perf/device_poll.sh 540.
BASE="${BASE:?BASE=<commit>}"
D=docs/perf/session_swing_2026-12-02
TESTS="$(sed -n 's/^export TEST_FILES="\(.*\)"$/\1/p' docs/perf/session_negzero_2026-12-02/session.sh |
  sed 's#tests/test_kernels.py::test_adversarial_families#tests/test_families.py::test_safeattn_passes#')"
mkdir -p /tmp/sess && rm -f /tmp/sess/done
setsid bash -c "
  exec >/tmp/sess/driver.log 2>&1
  export PYTHONUNBUFFERED=1
  rm -rf /tmp/r /tmp/base && git clone -q -b main .bundle/repo.bundle /tmp/r && mkdir -p /tmp/base
  git -C /tmp/r archive $BASE safeattn | tar -x -C /tmp/base
  cd /tmp/r && git log -1 --format='HEAD %h %s' | cut -c1-100
  echo \"[\$(date +%T)] host\"; echo host >/tmp/sess/step
  for rep in 1 2; do
    for t in /tmp/base /tmp/r; do
      PYTHONPATH=\$t timeout 240 python3 $D/host_probe.py --top 0 >>/tmp/sess/host_ab.txt 2>>/tmp/sess/host_ab.err
      echo \"host \$t rep \$rep rc=\$?\"
    done
  done
  echo \"[\$(date +%T)] d256\"; echo d256 >/tmp/sess/step
  for rep in 1 2; do
    PYTHONPATH=/tmp/r timeout 240 python3 docs/perf/tree_ab.py --label head --d256 >>/tmp/sess/d256.jsonl 2>>/tmp/sess/d256.err
    echo \"d256 rep \$rep rc=\$?\"
  done
  python3 docs/perf/tree_ab.py --table /tmp/sess/d256.jsonl >/tmp/sess/d256.txt 2>&1
  echo \"[\$(date +%T)] tests\"; echo tests >/tmp/sess/step
  timeout 420 python3 -m pytest -v --gpu -n 14 -k 'not fp32 or trainable_bias' $TESTS >/tmp/sess/tests.log 2>&1
  echo \"tests rc=\$?\"
  echo \"[\$(date +%T)] done\"; echo done >/tmp/sess/step; touch /tmp/sess/done
" >/dev/null 2>&1 </dev/null &
echo $! >/tmp/sess.pid
