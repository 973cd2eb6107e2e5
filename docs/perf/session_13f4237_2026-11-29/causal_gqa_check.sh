# The device call that ran causal_gqa_check.py: a4339eb's safeattn (base) against 13f4237's
# (new), alternating processes, with each tree's table and then with dK/dV forced to M64-N64-w4-s2.
set -u
H=docs/perf/session_13f4237_2026-11-29
rm -rf /tmp/base /tmp/r && mkdir -p /tmp/base && git clone -q -b main .bundle/repo.bundle /tmp/r
git -C /tmp/r archive a4339eb safeattn | tar -x -C /tmp/base
for rep in 1 2; do for t in base new; do
  tree=/tmp/base; [ "$t" = new ] && tree=/tmp/r
  PYTHONPATH=$tree timeout 100 python3 $H/causal_gqa_check.py --label $t
  [ "$rep" = 1 ] && PYTHONPATH=$tree timeout 100 python3 $H/causal_gqa_check.py --label $t --config M64-N64-w4-s2
done; done
