#!/usr/bin/env bash
# Device call 1 of 2026-12-02 #3 (H200), run from the repository root of the device's copy:
# the SM clock, power and throttle reasons logged every 200 ms, the swing probe (8 trials,
# three shapes, three launch orders, cuDNN beside, one backward's timeline), then the family
# tests on the GPU (tests/test_families.py holds them alone since ae58f63). Detached; poll
# with S=/tmp/sess bash docs/perf/device_poll.sh 540.
D=docs/perf/session_swing_2026-12-02
mkdir -p /tmp/sess && rm -f /tmp/sess/done
setsid bash -c "
  exec >/tmp/sess/driver.log 2>&1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv
  python3 -c 'import torch, triton; print(\"torch\", torch.__version__, \"triton\", triton.__version__)'
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv -lms 200 >/tmp/sess/clocks.csv 2>&1 &
  smi=\$!
  echo \"[\$(date +%T)] swing\"; echo swing >/tmp/sess/step
  PYTHONPATH=. timeout 480 python3 $D/swing_probe.py --trials 8 --timeline >/tmp/sess/swing.jsonl 2>/tmp/sess/swing.err
  echo \"swing rc=\$?\"
  python3 $D/swing_probe.py --table /tmp/sess/swing.jsonl >/tmp/sess/swing.txt 2>&1
  kill \$smi
  echo \"[\$(date +%T)] tests\"; echo tests >/tmp/sess/step
  timeout 420 python3 -m pytest -v --gpu -n 14 tests/test_families.py >/tmp/sess/tests.log 2>&1
  echo \"tests rc=\$?\"
  echo \"[\$(date +%T)] done\"; echo done >/tmp/sess/step; touch /tmp/sess/done
" >/dev/null 2>&1 </dev/null &
echo $! >/tmp/sess.pid
