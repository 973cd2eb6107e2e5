"""regress.compare and what it stands on (regress.stats, regress.policy, the commit lookups
of regress.results, regress.gpu_arch, regress.launches, regress.sensitivity): statistics,
policy, commit resolution and verdicts, on the real asv results of the toy project from
test_results.py."""

from __future__ import annotations

import itertools
import json
import math
import random

import pandas as pd
import pytest
from test_results import TOY_MACHINE, toy_results

from regress.compare import COMPARE_COLUMNS, compare
from regress.gpu_arch import machine_arch
from regress.policy import BLOCKING_VERDICTS, VERDICTS, load_policy
from regress.results import LoadedResults, load_results, parent_commit, resolve_commit
from regress.sensitivity import slowdown_sensitivity
from regress.stats import mann_whitney_u, worse_ratio
from safeattn.gpu_limits import ARCHS

SPEED = "suite.SpeedSuite.time_forward"
NONFINITE = "suite.NumericsSuite.track_nonfinite_rate"
WRONG = "suite.NumericsSuite.track_wrong_result_rate"
STATIC_SMEM = "suite.StaticResourceSuite.track_shared_bytes"
LIVE_SMEM = "suite.LiveResourceSuite.track_shared_bytes"
EXTRA = "suite.ExtraSuite.track_registers"


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    results, shas = toy_results(tmp_path_factory)
    return load_results(results), shas


@pytest.fixture(scope="module")
def policy():
    return load_policy()


def _row(frame: pd.DataFrame, benchmark: str, param_key: str = "") -> pd.Series:
    rows = frame[(frame["benchmark"] == benchmark) & (frame["param_key"] == param_key)]
    assert len(rows) == 1, f"{benchmark} [{param_key}]: {len(rows)} rows"
    return rows.iloc[0]


# ---------------------------------------------------------------- statistics


@pytest.mark.parametrize("seed", range(4))
def test_mann_whitney_matches_scipy(seed):
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(seed)
    for _ in range(40):
        n1, n2 = rng.randint(1, 15), rng.randint(1, 30)
        shift = rng.choice([0.0, 0.2, 1.0])
        x = [rng.gauss(0, 1) for _ in range(n1)]
        y = [rng.gauss(shift, 1) for _ in range(n2)]
        u, p = mann_whitney_u(x, y)
        method = "exact" if max(n1, n2) <= 20 else "asymptotic"
        ref = stats.mannwhitneyu(x, y, alternative="two-sided", method=method)
        assert u == pytest.approx(ref.statistic)
        assert p == pytest.approx(ref.pvalue, rel=1e-9), (n1, n2, method)


def test_mann_whitney_with_ties_matches_scipy_asymptotic():
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(7)
    for _ in range(40):
        x = [rng.randint(0, 4) for _ in range(rng.randint(2, 12))]
        y = [rng.randint(1, 5) for _ in range(rng.randint(2, 12))]
        if len(set(x + y)) == 1:
            continue
        u, p = mann_whitney_u(x, y)
        ref = stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic")
        assert (u, p) == (pytest.approx(ref.statistic), pytest.approx(ref.pvalue, rel=1e-9))


def test_mann_whitney_edge_cases():
    assert mann_whitney_u([1.0, 1.0], [1.0, 1.0]) == (2.0, 1.0)
    _, p = mann_whitney_u(list(range(10)), list(range(100, 110)))
    assert p == pytest.approx(2 / math.comb(20, 10))
    with pytest.raises(ValueError, match="non-empty"):
        mann_whitney_u([], [1.0])


def test_ratio_is_direction_aware():
    assert worse_ratio(2.0, 3.0, "lower") == pytest.approx(1.5)
    assert worse_ratio(2.0, 3.0, "higher") == pytest.approx(2 / 3)
    assert worse_ratio(0.0, 0.0, "lower") == 1.0
    assert worse_ratio(0.0, 64.0, "lower") == math.inf  # a first spill is infinitely worse
    assert worse_ratio(64.0, 0.0, "lower") == 0.0


# -------------------------------------------------------------------- policy


def test_default_policy_covers_every_kind(policy):
    assert set(policy.kinds) == {"speed", "memory", "resource", "accuracy", "safety"}
    assert policy.kinds["speed"].max_ratio > 1.0
    assert 0 < policy.kinds["speed"].alpha < 0.1


def test_policy_file_overrides_only_what_it_says(tmp_path, policy):
    path = tmp_path / "p.toml"
    path.write_text("[speed]\nmax_ratio = 1.5\n")
    custom = load_policy(path)
    assert custom.kinds["speed"].max_ratio == 1.5
    assert custom.kinds["speed"].alpha == policy.kinds["speed"].alpha
    assert custom.kinds["memory"] == policy.kinds["memory"]
    assert custom.source == str(path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[sped]\nmax_ratio = 1.5\n", r"unknown section\(s\) \['sped'\]"),
        ("[speed]\nmax_raito = 1.5\n", r"unknown key\(s\) \['max_raito'\]"),
        ("[speed]\nmax_ratio = 0.9\n", "max_ratio must be >= 1.0"),
        ("[speed]\nalpha = 2\n", r"alpha must be in \(0, 1\)"),
        ("[speed\n", "not valid TOML"),
    ],
    ids=["typo-section", "typo-key", "ratio-below-1", "alpha-out-of-range", "bad-toml"],
)
def test_bad_policy_files_are_rejected(tmp_path, text, message):
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_policy(path)


def test_missing_policy_file_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="cannot read policy file"):
        load_policy(tmp_path / "absent.toml")


# ------------------------------------------------------------------- commits


def test_resolve_commit_accepts_full_sha_and_prefix(toy):
    loaded, shas = toy
    sha = shas["slow"]
    assert resolve_commit(loaded, sha) == sha
    assert resolve_commit(loaded, sha[:10].upper(), TOY_MACHINE) == sha


def test_resolve_commit_rejects_unknown_ambiguous_and_non_sha(toy):
    loaded, _ = toy
    with pytest.raises(ValueError, match="no results for commit 'deadbeef'"):
        resolve_commit(loaded, "deadbeef")
    with pytest.raises(ValueError, match="not a commit sha"):
        resolve_commit(loaded, "main")
    with pytest.raises(ValueError, match="no results for commit"):
        resolve_commit(loaded, loaded.commits["commit"].iloc[0], machine="other-machine")
    commits = pd.DataFrame({
        "machine": ["m", "m"],
        "commit": ["abcd1234" + "0" * 32, "abcd5678" + "0" * 32],
        "date": pd.to_datetime([0, 1], unit="s", utc=True),
        "order": [0, 1],
    })
    ambiguous = LoadedResults(table=loaded.table.iloc[:0], commits=commits)
    with pytest.raises(ValueError, match="ambiguous"):
        resolve_commit(ambiguous, "abcd")


def test_parent_commit_follows_commit_order(toy):
    loaded, shas = toy
    names = list(shas)
    assert parent_commit(loaded, shas["base"], TOY_MACHINE) is None
    for before, after in itertools.pairwise(names):
        assert parent_commit(loaded, shas[after], TOY_MACHINE) == shas[before]
    assert parent_commit(loaded, "0" * 40, TOY_MACHINE) is None


@pytest.mark.parametrize(
    "info, arch",
    [
        ({"arch": "x86_64", "sidecars": {"gpu.json": {"compute_capability": "9.0"}}}, "sm90"),
        ({"sidecars": {"env.json": {"gpu": {"capability": [8, 6]}}}}, "sm86"),
        ({"sidecars": {"env.json": {"gpu_arch": "sm_80"}}}, "sm80"),
        ({"cuda_arch": 89, "sidecars": {}}, "sm89"),
        ({"arch": "x86_64", "sidecars": {}}, None),
        # tools/run.py's versions-<sha>.json, on a GPU machine and on a CPU-only one.
        ({"sidecars": {"versions-ab.json": {"gpu": {"name": "NVIDIA H200", "arch": "sm90"},
                                            "cpu": "AMD EPYC"}}}, "sm90"),
        ({"arch": "x86_64", "sidecars": {"versions-ab.json": {"gpu": None}}}, None),
    ],
    ids=["capability-string", "capability-pair", "sm-name", "int", "cpu-only",
         "run-py-sidecar-gpu", "run-py-sidecar-cpu"],
)
def test_machine_arch(info, arch):
    assert machine_arch(info) == arch


# ------------------------------------------------------------------- verdicts


def test_unchanged_head_raises_no_false_alarm(toy, policy):
    loaded, shas = toy
    result = compare(loaded, shas["base"], shas["same"], TOY_MACHINE, policy)
    assert list(result.columns) == list(COMPARE_COLUMNS)
    assert set(result["verdict"]) <= set(VERDICTS)
    assert not result["verdict"].isin(BLOCKING_VERDICTS).any(), result[["benchmark", "reason"]]
    speed = _row(result, SPEED, "impl=safeattn head_dim=64")
    assert speed["test"] == "mann-whitney" and speed["verdict"] == "unchanged"
    assert 0 <= speed["p_value"] <= 1
    # The peer's non-finite rate is 0.5 on both: context, never a failure.
    peer = _row(result, NONFINITE, "impl=flex family=all_masked")
    assert peer["verdict"] == "context" and peer["peer"]


def test_slowdown_is_a_significant_regression(toy, policy):
    loaded, shas = toy
    result = compare(loaded, shas["base"][:8], shas["slow"][:8], TOY_MACHINE, policy)
    speed = _row(result, SPEED, "impl=safeattn head_dim=64")
    assert speed["verdict"] == "regression", speed["reason"]
    assert speed["significant"] is True and speed["p_value"] < policy.kinds["speed"].alpha
    assert 1.6 < speed["ratio"] < 2.4  # 40 ms vs 20 ms sleeps
    blocking = result[result["verdict"].isin(BLOCKING_VERDICTS)]
    assert list(blocking["benchmark"]) == [SPEED]
    # The other way round it is an improvement.
    back = compare(loaded, shas["slow"], shas["base"], TOY_MACHINE, policy)
    assert _row(back, SPEED, "impl=safeattn head_dim=64")["verdict"] == "improvement"


def test_any_nonfinite_rate_above_zero_fails_whatever_the_base(toy, policy):
    loaded, shas = toy
    result = compare(loaded, shas["base"], shas["nan"], TOY_MACHINE, policy)
    failures = result[result["verdict"] == "failure"]
    assert set(failures["benchmark"]) == {NONFINITE}
    assert set(failures["param_key"]) == {
        "impl=safeattn family=left_pad_causal", "impl=safeattn family=all_masked"}
    assert "must be 0" in failures["reason"].iloc[0]
    # Even against itself (the base already had it) it stays a failure.
    same = compare(loaded, shas["nan"], shas["nan"], TOY_MACHINE, policy)
    assert set(same.loc[same["verdict"] == "failure", "benchmark"]) == {NONFINITE}


def test_broken_head_failures_limits_and_vanished_benchmarks(toy, policy):
    loaded, shas = toy
    result = compare(loaded, shas["base"], shas["broken"], TOY_MACHINE, policy)
    crashed = _row(result, WRONG, "impl=safeattn family=all_masked")
    assert crashed["verdict"] == "failure" and "failed on head" in crashed["reason"]
    assert _row(result, WRONG, "impl=flex family=all_masked")["verdict"] == "context"
    # 120000 bytes fit sm80 (an increase: a regression) but not sm86.
    sm80 = _row(result, STATIC_SMEM, "arch=sm80")
    assert sm80["verdict"] == "regression" and sm80["ratio"] == pytest.approx(120_000 / 65_536)
    sm86 = _row(result, STATIC_SMEM, "arch=sm86")
    assert sm86["verdict"] == "failure"
    assert str(ARCHS["sm86"].smem_optin_bytes) in sm86["reason"]
    # The live row has no arch parameter: the machine sidecar says sm86.
    assert _row(result, LIVE_SMEM)["verdict"] == "failure"
    assert _row(result, EXTRA)["verdict"] == "missing"
    # Reversed, the benchmark that only head has is new, not a failure.
    back = compare(loaded, shas["broken"], shas["base"], TOY_MACHINE, policy)
    assert _row(back, EXTRA)["verdict"] == "new"
    assert _row(back, WRONG, "impl=safeattn family=all_masked")["verdict"] == "not_comparable"


def test_skipped_on_both_is_not_comparable_and_nan_on_head_fails(toy, policy):
    loaded, shas = toy
    result = compare(loaded, shas["base"], shas["same"], TOY_MACHINE, policy)
    skipped = _row(result, "suite.SkippedSuite.track_max_rel_error", "impl=flex")
    assert skipped["verdict"] == "context" and "skipped on base" in skipped["reason"]
    # A head whose safeattn row turned NaN (asv's "skipped") while base had a value.
    table = loaded.table.copy()
    mask = ((table["commit"] == shas["same"]) & (table["benchmark"] == SPEED)
            & (table["impl"] == "safeattn"))
    table.loc[mask, "value"] = math.nan
    table.loc[mask, "status"] = "skipped"
    nan_head = LoadedResults(table, loaded.machines, loaded.commits, [])
    result = compare(nan_head, shas["base"], shas["same"], TOY_MACHINE, policy)
    row = _row(result, SPEED, "impl=safeattn head_dim=64")
    assert row["verdict"] == "failure" and "NaN or skipped on head" in row["reason"]


def _without(loaded: LoadedResults, *columns: str) -> LoadedResults:
    table = loaded.table.copy()
    for column in columns:
        table[column] = None if column == "samples" else math.nan
    return LoadedResults(table, loaded.machines, loaded.commits, loaded.problems)


def test_ci_overlap_fallback_without_samples(toy, policy):
    loaded, shas = toy
    no_samples = _without(loaded, "samples")
    result = compare(no_samples, shas["base"], shas["slow"], TOY_MACHINE, policy)
    speed = _row(result, SPEED, "impl=safeattn head_dim=64")
    assert speed["test"] == "ci-overlap" and speed["significant"] is True
    assert speed["verdict"] == "regression"
    same = compare(no_samples, shas["base"], shas["same"], TOY_MACHINE, policy)
    assert _row(same, SPEED, "impl=safeattn head_dim=64")["verdict"] == "unchanged"


def test_ratio_only_without_samples_or_intervals(toy, policy):
    loaded, shas = toy
    bare = _without(loaded, "samples", "ci_low", "ci_high")
    result = compare(bare, shas["base"], shas["slow"], TOY_MACHINE, policy)
    speed = _row(result, SPEED, "impl=safeattn head_dim=64")
    assert speed["test"] == "ratio-only" and speed["significant"] is None
    assert speed["verdict"] == "regression"
    assert str(policy.kinds["speed"].max_ratio_without_stats) in speed["reason"]


def test_not_significant_slowdown_is_not_flagged(toy, tmp_path):
    loaded, shas = toy
    path = tmp_path / "strict.toml"
    path.write_text("[speed]\nalpha = 1e-9\n")  # unreachable with 10 vs 10 samples
    result = compare(loaded, shas["base"], shas["slow"], TOY_MACHINE, load_policy(path))
    speed = _row(result, SPEED, "impl=safeattn head_dim=64")
    assert speed["verdict"] == "unchanged" and "not significant" in speed["reason"]


def test_compare_rejects_unknown_machine_and_commit(toy, policy):
    loaded, shas = toy
    with pytest.raises(ValueError, match="no results for machine 'gpu-x'"):
        compare(loaded, shas["base"], shas["slow"], "gpu-x", policy)
    with pytest.raises(ValueError, match="no results for commit"):
        compare(loaded, shas["base"], "f" * 40, TOY_MACHINE, policy)


def test_slowdown_sensitivity_on_an_a_a_pair(toy, policy):
    loaded, shas = toy
    table = slowdown_sensitivity(loaded, shas["base"], shas["same"], TOY_MACHINE, policy,
                                 factors=(1.0, 1.5))
    assert list(table.columns) == [
        "factor", "rows", "flagged", "fraction", "groups", "groups_flagged", "blocks"
    ]
    unchanged, slowed = table.to_dict("records")
    # One safeattn speed row in the toy suite (the peer is context).
    assert unchanged["rows"] == slowed["rows"] == 1
    assert unchanged["flagged"] == 0  # the A/A pair itself: no false alarm
    assert slowed["flagged"] == 1 and slowed["fraction"] == 1.0


def test_a_head_value_of_zero_is_an_improvement_not_a_crash():
    """CPU-time samples can round to 0: ratio 0 must read as infinitely better."""
    from regress import compare as c

    assert c._inverse(0.0) == float("inf")
    assert c._times(c._inverse(0.0)) == "inf x"
    assert c._inverse(4.0) == 0.25


def _speed_rows(ratios, peer=False):
    return [
        {
            "machine": "m", "benchmark": "speed.S.track_forward_ms", "suite": "speed.S",
            "metric": "forward_ms", "kind": "speed", "peer": peer, "env_name": "e",
            "better": "lower", "ratio": r,
        }
        for r in ratios
    ]


def test_group_row_catches_a_broad_slowdown_that_no_single_row_shows(policy):
    """Every row 4% slower: no row passes max_ratio, the benchmark's geometric mean does."""
    from regress.compare import GROUP_PARAM_KEY, group_rows

    kp = policy.kinds["speed"]
    assert kp.max_group_ratio < 1.04 < kp.max_ratio
    (row,) = group_rows(_speed_rows([1.04] * 16), policy)
    assert row["param_key"] == GROUP_PARAM_KEY and row["verdict"] == "regression"
    assert row["ratio"] == pytest.approx(1.04) and "16 rows" in row["reason"]
    (row,) = group_rows(_speed_rows([1 / 1.04] * 16), policy)
    assert row["verdict"] == "improvement"


def test_group_row_ignores_one_noisy_row_peers_and_small_groups(policy):
    """One row 12% off (an A/A flip seen on the H200) leaves the mean within the limit;
    peers never form a group; fewer than min_group_rows rows give no group verdict."""
    from regress.compare import group_rows

    (row,) = group_rows(_speed_rows([1.12] + [1.0] * 31), policy)
    assert row["verdict"] == "unchanged"
    assert group_rows(_speed_rows([1.5] * 32, peer=True), policy) == []
    few = policy.kinds["speed"].min_group_rows - 1
    assert group_rows(_speed_rows([1.5] * few), policy) == []


def test_aa_report_counts_false_alarms(tmp_path_factory, capsys):
    """``python -m regress.aa`` on real asv output (tests/test_aa.py has the
    rest): the A/A pair passes the gate, but the toy suite's single safeattn speed row
    cannot show a 5 % slowdown (no group verdict under min_group_rows), so it exits 1 and
    says so; a pair with a real slowdown names it as a false alarm; an unknown commit
    exits 2."""
    from regress import aa

    results, shas = toy_results(tmp_path_factory)
    args = ["--results", str(results), "--machine", TOY_MACHINE]
    assert aa.main([*args, shas["base"], shas["same"]]) == 1
    out = capsys.readouterr().out
    assert "gate PASS, 0 false alarm(s)" in out and "gate blocks" in out
    assert "5% every row: NOT CAUGHT - does not block: 0 of 1 rows flagged" in out
    assert "20% one row: CAUGHT" in out and "non-finite rate: CAUGHT" in out
    assert aa.main([*args, shas["base"], shas["slow"]]) == 1
    assert "[false alarm] regression: SpeedSuite.time_forward" in capsys.readouterr().out
    assert aa.main([*args, shas["base"], "f" * 40]) == 2


# ----------------------------------------------------------- launched configs


def _with_launches(loaded: LoadedResults, configs_by_sha: dict[str, dict]) -> LoadedResults:
    """``loaded`` with tools/run.py's ``safeattn_launches`` in the commits' sidecars:
    the configs the safeattn head_dim=64 row of the toy SpeedSuite (and its peer) ran, each
    record as benchmarks/_launches.py writes it (``sort_keys``: its params in name order,
    not the suite's, which is impl, head_dim)."""
    sidecars = {
        f"versions-{sha}.json": {"gpu": None, "safeattn_launches": [
            json.loads(json.dumps(
                {"suite": "suite.SpeedSuite", "params": {"impl": impl, "head_dim": 64},
                 "configs": configs, "sources": {}}, sort_keys=True))
            for impl in ("safeattn", "sdpa_flash")
        ]}
        for sha, configs in configs_by_sha.items()
    }  # fmt: skip
    machines = {m: dict(info) for m, info in loaded.machines.items()}
    machines[TOY_MACHINE]["sidecars"] = {**machines[TOY_MACHINE].get("sidecars", {}), **sidecars}
    return LoadedResults(loaded.table, machines, loaded.commits, loaded.problems)


def test_a_flagged_row_says_when_its_config_changed(toy, policy):
    """A regression whose kernels ran other configs on head says which, from the sidecars;
    a kernel whose config stayed is not named, and without records nothing is said."""
    loaded, shas = toy
    configs = {
        shas["base"]: {"forward": "M128-N64-w4-s3", "bwd_dq": "M64-N64-w4-s2"},
        shas["slow"]: {"forward": "M64-N64-w4-s3", "bwd_dq": "M64-N64-w4-s2"},
    }
    result = compare(_with_launches(loaded, configs), shas["base"], shas["slow"], TOY_MACHINE,
                     policy)  # fmt: skip
    speed = _row(result, SPEED, "impl=safeattn head_dim=64")
    assert speed["verdict"] == "regression"
    assert speed["reason"].endswith("; config changed: forward M128-N64-w4-s3 → M64-N64-w4-s3")
    assert "config changed" not in _row(result, SPEED, "impl=sdpa_flash head_dim=64")["reason"]
    assert speed["config_change"] == "forward M128-N64-w4-s3 → M64-N64-w4-s3"
    plain = compare(loaded, shas["base"], shas["slow"], TOY_MACHINE, policy)
    assert "config changed" not in _row(plain, SPEED, "impl=safeattn head_dim=64")["reason"]
    assert _row(plain, SPEED, "impl=safeattn head_dim=64")["config_change"] is None


def test_an_unflagged_row_is_not_annotated_and_groups_count_changed_rows(toy, policy):
    from regress.compare import group_rows

    loaded, shas = toy
    configs = {shas["base"]: {"forward": "A"}, shas["same"]: {"forward": "B"}}
    result = compare(_with_launches(loaded, configs), shas["base"], shas["same"], TOY_MACHINE,
                     policy)  # fmt: skip
    speed = _row(result, SPEED, "impl=safeattn head_dim=64")
    assert speed["verdict"] == "unchanged" and "config" not in speed["reason"]
    assert speed["config_change"] == "forward A → B"  # the column says it all the same
    rows = _speed_rows([1.04] * 16)
    for row in rows[:5]:
        row["config_change"] = "forward A → B"
    (group,) = group_rows(rows, policy)
    assert group["reason"].endswith("; 5 of 16 rows ran other configs than on base")
    assert group["config_change"] == "5 of 16 rows ran other configs"
    for row in rows[:5]:
        row["config_change"] = ""  # recorded, unchanged
    assert group_rows(rows, policy)[0]["config_change"] == ""
    for row in rows:
        row.pop("config_change", None)  # not recorded
    assert group_rows(rows, policy)[0]["config_change"] is None


def test_a_backward_row_names_every_backward_kernel_that_changed():
    """A backward row depends on every ``bwd_*`` kernel launched, whichever they are: the
    D=256 Hopper dK/dV runs as two (bwd_dv, bwd_dk) where another commit ran one."""
    from regress.launches import _key, note_config_change

    params = {"impl": "safeattn", "head_dim": 256}
    row = dict(peer=None, suite="speed.SpeedSuite", params=params, metric="backward_ms",
               verdict="regression", reason="slower")  # fmt: skip
    key = _key(row["suite"], params)
    base = {key: {"forward": "F1", "bwd_dkdv": "M64-N64-w8-s2", "bwd_dq": "Q"}}
    head = {key: {"forward": "F2", "bwd_dv": "M64-N128-w8-s2", "bwd_dk": "M32-N128-w8-s2",
                  "bwd_dq": "Q"}}  # fmt: skip
    note_config_change(row, base, head)
    assert row["config_change"] == (
        "bwd_dk - → M32-N128-w8-s2, bwd_dkdv M64-N64-w8-s2 → -, bwd_dv - → M64-N128-w8-s2"
    )
    assert row["reason"] == f"slower; config changed: {row['config_change']}"
