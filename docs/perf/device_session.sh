#!/usr/bin/env bash
# One device session of issue 13's kernel work, run detached (setsid) so that it outlives a
# single 10-minute device command; later commands poll it with docs/perf/device_poll.sh,
# which hands back all of $S as one file each time (a released machine loses the rest).
#
#   here:   git bundle create .bundle/repo.bundle main        (carry .bundle and .whl)
#           or, where the tree, .whl and a full-history bundle go over the device tool's 64 MiB
#           carry limit (2026-12-04: 45 + 8 + 13 MB): a shallow bare clone under the same name,
#           git clone --bare --depth 2 --no-single-branch file://$PWD .bundle/repo.bundle
#   device: STEPS="suites d256 tests" BASE=<commit> setsid bash docs/perf/device_session.sh \
#             >/dev/null 2>&1 & echo $! >/tmp/sess.pid; bash docs/perf/device_poll.sh
#
# Steps (STEPS, in this order; default: ab probe ncu suites tests), each logged under $S
# (default /tmp/sess):
#   smoke   pytest --gpu -x on $SMOKE_TESTS (pytest node ids) before anything else; a failure
#           ends the session there (no tune, no suites on a kernel that is wrong)
#   masked  docs/perf/masked_dkdv_probe.py $MASKED_ARGS: every dK/dV (and dQ) candidate of the
#           masked builds timed by the tuner with its live spills, spill filter off
#   tune    tools.prewarm, then tools.tune --repeats $TUNE_REPEATS (default 3) $TUNE_ARGS alone on the GPU,
#           committed there as $GIT_AUTHOR_NAME/$GIT_AUTHOR_EMAIL at $TUNE_DATE with the log under
#           docs/perf/ (the same commit made here from $S/tune_commit/ has the same hash, so the
#           suites' results that follow name it); TUNE_LOG names the log (default: the GPU and
#           date, with the tuned commit's short hash where a log of that name exists)
#   ab      docs/perf/tree_ab.py: BASE's safeattn against HEAD's, alternating processes, x2
#   gqa     docs/perf/gqa_dkdv_probe.py: BASE's GQA dK/dV candidates against HEAD's, once each
#           (GQA_TREES=new: HEAD's only)
#   probe   docs/perf/ws_forward_probe.py: one process per implementation, each under a
#           timeout (a warp-specialised kernel that deadlocks must not stall the session)
#   ncu     docs/perf/ncu_dense.py under Nsight Compute, once per ';'-separated argument list in
#           $NCU_RUNS (default: safeattn's forward, dK/dV, dQ of D=128 N=4096), stall reasons
#   suites  tools/gpu_history.sh 1 --same: $SUITES at HEAD (default SpeedSuite, LiveResourcesSuite,
#           LiveBuildResourcesSuite, ModelStepSuite)
#   live    docs/perf/live_builds_ptxas.py: every live build's resources under Triton's bundled
#           ptxas (4 parallel shards, cold compiles) and under torch's (the suites' cache)
#   overlap docs/perf/bwd_overlap_ab.py $OVERLAP_ARGS (default --flex): SAFEATTN_BWD_OVERLAP=0 against
#           1, alternating in one process, 3 rounds (and FlexAttention on the rows where safeattn
#           trailed it)
#   reload  docs/perf/dkdv_tiles_probe.py --causal at D=256 and 128: HEAD, then HEAD with
#           docs/perf/session_no_tail_2026-11-29/reload_kv.patch and SAFEATTN_RELOAD_KV (static-only lever)
#   d256    docs/perf/tree_ab.py --d256: HEAD against cuDNN at D=256 N=4096
#   softcap docs/perf/softcap_fp32_probe.py on the failing fp32 case, first configs only
#   curve   tools/kernel_perf.py $CURVE_ARGS (default: D=128 at N=1024..16384, safeattn and
#           cuDNN): TFLOP/s against the work per program, B*N fixed
#   tests   pytest --gpu on $TEST_FILES (default: the kernel test files), $TESTS_S at most
#           (or until $DEADLINE), with $TESTS_ENV (e.g. SAFEATTN_AUTOTUNE=0: the first shipped candidate, no tuner)
set -u
S="${S:-/tmp/sess}"
mkdir -p "$S" && rm -f "$S/done"  # a session before this one on the same machine
exec >"$S/driver.log" 2>&1
export PYTHONUNBUFFERED=1
step() { echo "[$(date +%T)] $*"; echo "$*" >"$S/step"; }
STEPS=" ${STEPS:-ab probe ncu suites tests} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
step env
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
rm -rf /tmp/r /tmp/base
git clone -q -b main .bundle/repo.bundle /tmp/r && cp -r .whl /tmp/r/
if want ab || { want gqa && [[ " ${GQA_TREES:-base} " == *" base "* ]]; }; then
  mkdir -p /tmp/base && git -C /tmp/r archive "${BASE:?BASE=<commit>}" safeattn | tar -x -C /tmp/base
fi
cd /tmp/r || exit 1
git log -1 --format='HEAD %h %s' | cut -c1-120

if want smoke; then
step smoke
# shellcheck disable=SC2086  # SMOKE_TESTS is a word list
timeout "${SMOKE_S:-240}" python3 -m pytest -x -q --gpu ${SMOKE_TESTS:?SMOKE_TESTS=<tests>} \
  >"$S/smoke.log" 2>&1
rc=$?
echo "smoke rc=$rc"
if [ "$rc" != 0 ]; then
  step done
  touch "$S/done"
  exit 1
fi
fi

if want masked; then
step masked
# shellcheck disable=SC2086  # MASKED_ARGS is a word list
timeout "${MASKED_S:-300}" python3 docs/perf/masked_dkdv_probe.py ${MASKED_ARGS:-} \
  >"$S/masked.jsonl" 2>"$S/masked.err"
echo "masked rc=$?"
python3 docs/perf/masked_dkdv_probe.py --table "$S/masked.jsonl" >"$S/masked.txt" 2>&1
fi

if want tune; then
step tune
python3 -m tools.prewarm --workers 12 >"$S/prewarm.log" 2>&1
echo "prewarm rc=$?"
# shellcheck disable=SC2086  # TUNE_ARGS is a word list (e.g. --kind speed --new-keys-only)
timeout "${TUNE_S:-900}" python3 -m tools.tune --repeats "${TUNE_REPEATS:-3}" ${TUNE_ARGS:-} \
  >"$S/tune.raw" 2>&1
rc=$?
echo "tune rc=$rc"
slug=$(python3 -c "import torch; from safeattn.kernels import tuning; print(tuning.gpu_slug(torch.cuda.get_device_name()))")
log="${TUNE_LOG:-docs/perf/tune_${slug#nvidia-}_${TUNE_DATE%%T*}.log}"  # TUNE_LOG: a name of your own
# A second tune the same day: the commit it tunes in the name, never over the first one's log.
[ -z "${TUNE_LOG:-}" ] && [ -e "$log" ] && log="${log%.log}_$(git rev-parse --short HEAD).log"
{ echo "# python -m tools.tune --repeats ${TUNE_REPEATS:-3} ${TUNE_ARGS:+$TUNE_ARGS }at $(git rev-parse --short HEAD) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'), alone on the GPU after python -m tools.prewarm --workers 12 (docs/perf/device_session.sh, step tune)"
  cat "$S/tune.raw"; echo "exit $rc"; } >"$log"
if [ "$rc" = 0 ] && [ -n "${TUNE_DATE:-}" ]; then
  mkdir -p "$S/tune_commit/$(dirname "$log")" "$S/tune_commit/safeattn/kernels/tuning_tables"
  tail -1 "$S/tune.raw" | sed 's/^\[tune\] //' >"$S/tune.summary"
  what="${TUNE_WHAT:-re-tuned with the Hopper path keys (tma=1)}"  # TUNE_WHAT: what this tune adds
  printf '%s\n\n%s\n' "tuning: the ${slug}'s table ${what}, from tools/tune.py --repeats ${TUNE_REPEATS:-3} ${TUNE_ARGS:+$TUNE_ARGS }on an $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
    "$(cat "$S/tune.summary"); log $log (made on the device machine by docs/perf/device_session.sh, same identity and date here, so the suites' results name this commit)" >"$S/tune_commit/message"
  git add "$log" "safeattn/kernels/tuning_tables/${slug}.json"
  GIT_AUTHOR_DATE="$TUNE_DATE" GIT_COMMITTER_DATE="$TUNE_DATE" GIT_COMMITTER_NAME="$GIT_AUTHOR_NAME" \
    GIT_COMMITTER_EMAIL="$GIT_AUTHOR_EMAIL" git commit -q -F "$S/tune_commit/message"
  cp "$log" "$S/tune_commit/$log"
  cp "safeattn/kernels/tuning_tables/${slug}.json" "$S/tune_commit/safeattn/kernels/tuning_tables/"
  git log -1 --format='tune commit %H' | tee "$S/tune_commit/sha"
fi
fi

if want ab; then
step ab
for rep in 1 2; do
  for t in base new; do
    tree=/tmp/base
    [ "$t" = new ] && tree=/tmp/r
    PYTHONPATH=$tree timeout 400 python3 docs/perf/tree_ab.py --label "$t" >>"$S/ab.jsonl" 2>>"$S/ab.err"
    echo "ab $t rep $rep rc=$?"
  done
done
python3 docs/perf/tree_ab.py --table "$S/ab.jsonl" >"$S/ab.txt" 2>&1
fi

if want gqa; then
step gqa
for t in ${GQA_TREES:-base new}; do
  tree=/tmp/base
  [ "$t" = new ] && tree=/tmp/r
  PYTHONPATH=$tree timeout "${GQA_S:-240}" python3 docs/perf/gqa_dkdv_probe.py --label "$t" >>"$S/gqa.jsonl" 2>>"$S/gqa.err"
  echo "gqa $t rc=$?"
done
python3 docs/perf/gqa_dkdv_probe.py --table "$S/gqa.jsonl" >"$S/gqa.txt" 2>&1
fi

if want probe; then
step probe
for impl in cudnn safeattn probe-M128-N128-w8-s3 probe-M128-N128-w4-s2 probe-M128-N128-w4-s2-WS \
  probe-M128-N64-w4-s3-WS probe-M128-N64-w4-s2-WS; do
  timeout 90 python3 docs/perf/ws_forward_probe.py --only "$impl" >>"$S/ws.jsonl" 2>>"$S/ws.err"
  echo "probe $impl rc=$?" | tee -a "$S/ws.rc"
done
python3 docs/perf/ws_forward_probe.py --table "$S/ws.jsonl" >"$S/ws.txt" 2>&1
fi

if want ncu; then
step ncu
# NCU_RUNS: ';'-separated argument lists of ncu_dense.py, one profile each (ncu_<i>.txt); the
# clocks left alone (the device notes' METHOD.md), the stall reasons printed per kernel.
IFS=';' read -r -a runs <<<"${NCU_RUNS:-}"
[ "${#runs[@]}" = 0 ] && runs=("")
i=0
for args in "${runs[@]}"; do
  i=$((i + 1))
  for stalls in 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' ''; do
    # shellcheck disable=SC2086  # args is a word list
    timeout "${NCU_S:-300}" ncu --profile-from-start off --clock-control none \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
      --section ComputeWorkloadAnalysis ${stalls:+--metrics "$stalls"} \
      python3 docs/perf/ncu_dense.py $args >"$S/ncu_$i.txt" 2>&1
    rc=$?
    echo "ncu $i ($args)${stalls:+ with stalls} rc=$rc"
    [ "$rc" = 0 ] && break  # else once more without the stall metrics (a name ncu refused)
  done
done
fi

if want suites; then
step suites
SAFEATTN_HISTORY_BUDGET_S="${SUITES_BUDGET_S:-420}" SAFEATTN_RESULTS_MIRROR="$S/results" \
  timeout "${SUITES_S:-560}" bash tools/gpu_history.sh 1 --same \
  $(for s in ${SUITES:-SpeedSuite LiveResourcesSuite LiveBuildResourcesSuite ModelStepSuite}; do
      echo --suite "$s"; done) >"$S/suites.log" 2>&1
echo "suites rc=$?"
fi

if want live; then
step live
for i in 0 1 2 3; do
  timeout "${LIVE_S:-420}" python3 docs/perf/live_builds_ptxas.py --ptxas triton --shard "$i/4" \
    >"$S/live_triton_$i.jsonl" 2>"$S/live_triton_$i.err" &
done
wait
timeout "${LIVE_S:-420}" python3 docs/perf/live_builds_ptxas.py --ptxas torch \
  >"$S/live_torch.jsonl" 2>"$S/live_torch.err"
echo "live rc=$?"
python3 docs/perf/live_builds_ptxas.py --table "$S"/live_*.jsonl >"$S/live.txt" 2>&1
fi

if want overlap; then
step overlap
# shellcheck disable=SC2086  # OVERLAP_ARGS is a word list
timeout "${OVERLAP_S:-420}" python3 docs/perf/bwd_overlap_ab.py ${OVERLAP_ARGS:---flex} \
  >>"$S/overlap.jsonl" 2>>"$S/overlap.err"
echo "overlap rc=$?"
python3 docs/perf/bwd_overlap_ab.py --table "$S/overlap.jsonl" >"$S/overlap.txt" 2>&1
fi

if want reload; then
step reload
# docs/perf/session_no_tail_2026-11-29/reload_kv.patch, timed: HEAD's causal dK/dV tiles, then
# the same with the patch and K, V read at every step (SAFEATTN_RELOAD_KV), per head dim.
rm -rf /tmp/rk && cp -r /tmp/r /tmp/rk
git -C /tmp/rk apply docs/perf/session_no_tail_2026-11-29/reload_kv.patch || echo "reload: patch rc=$?"
for dc in "256 M64-N32-w4-s2,M32-N64-w8-s2" "128 M64-N64-w4-s2,M64-N128-w8-s2"; do
  set -- $dc
  timeout "${RELOAD_S:-200}" python3 docs/perf/dkdv_tiles_probe.py --label head --head-dim "$1" \
    --causal --configs "$2" --whole >>"$S/reload.jsonl" 2>>"$S/reload.err"
  (cd /tmp/rk && SAFEATTN_RELOAD_KV="$1" timeout "${RELOAD_S:-200}" python3 docs/perf/dkdv_tiles_probe.py \
    --label reload --head-dim "$1" --causal --configs "$2" --whole >>"$S/reload.jsonl" 2>>"$S/reload.err")
  echo "reload d=$1 rc=$?"
done
fi

if want d256; then
step d256
PYTHONPATH=/tmp/r timeout "${D256_S:-240}" python3 docs/perf/tree_ab.py --label head --d256 >"$S/d256.jsonl" 2>"$S/d256.err"
echo "d256 rc=$?"
python3 docs/perf/tree_ab.py --table "$S/d256.jsonl" >"$S/d256.txt" 2>&1
fi

if want softcap; then
step softcap
PROBE_CASES=plain SAFEATTN_AUTOTUNE=0 PROBE_TIMEOUT_S="${SOFTCAP_S:-150}" \
  timeout $((${SOFTCAP_S:-150} + 30)) python3 docs/perf/softcap_fp32_probe.py >"$S/softcap.txt" 2>&1
echo "softcap rc=$?"
fi

if want curve; then
step curve
# shellcheck disable=SC2086  # CURVE_ARGS is a word list
timeout "${CURVE_S:-300}" python3 -m tools.kernel_perf ${CURVE_ARGS:---d 128 --n 1024 2048 4096 8192 16384 --impls safeattn sdpa_cudnn} \
  --json "$S/curve.json" >"$S/curve.log" 2>&1
echo "curve rc=$?"
fi

if want tests; then
step tests
# DEADLINE (epoch seconds): the tests get what is left of the session, less 15 s to pack up.
[ -n "${DEADLINE:-}" ] && TESTS_S=$(( DEADLINE - $(date +%s) - 15 ))
echo "tests: ${TESTS_S:-420} s"
# shellcheck disable=SC2086  # TESTS_ENV and TEST_FILES are word lists
env ${TESTS_ENV:-} timeout "${TESTS_S:-420}" python3 -m pytest -v --gpu -n "${TESTS_N:-12}" \
  ${TEST_FILES:-tests/test_kernels.py tests/test_hopper.py tests/test_dbias.py} >"$S/tests.log" 2>&1
echo "tests rc=$?"
fi
step done
touch "$S/done"
