"""The statistics of hpcprof.compare against answers known without the code: Student's t table, the
detectable-change formula worked by hand, and simulated replicate runs whose run-to-run and
step-to-step noise (and true change) are set by the test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpcprof.compare import noise as rtr
from hpcprof.compare.stats import NO_CHANGE, NOISE_UNKNOWN, MetricRuns
from hpcprof.compare.student import t_ppf

# Student's t quantiles as printed in any table (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2)
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 6: 2.447, 8: 2.306, 10: 2.228, 30: 2.042, 100: 1.984}
T_80 = {1: 1.376, 2: 1.061, 4: 0.941, 10: 0.879, 30: 0.854}


def test_t_quantiles_equal_the_printed_table():
    for df, q in T_975.items():
        assert t_ppf(0.975, df) == pytest.approx(q, abs=5e-4)
        assert t_ppf(0.025, df) == pytest.approx(-q, abs=5e-4)
    for df, q in T_80.items():
        assert t_ppf(0.80, df) == pytest.approx(q, abs=5e-4)
    assert t_ppf(0.975, math.inf) == pytest.approx(1.960, abs=5e-4)


def simulated_arm(rng, level: float, runs: int, sd_run: float, sd_step: float, steps: int = 20) -> list[np.ndarray]:
    """`runs` runs of one configuration: each run's level is off the arm's by a log-normal
    run-to-run factor (SD sd_run), and each step off its run's level by a step-to-step one."""
    return [level * math.exp(rng.normal(0, sd_run)) * np.exp(rng.normal(0, sd_step, steps)) for _ in range(runs)]


def hierarchical_bootstrap_covers(base, test, true_change_pct, rng, n_boot=1000) -> bool:
    """The alternative the noise module rejects: resample runs, then steps within each run."""
    def arm_stats(arm):
        a = np.stack(arm)  # runs x steps
        runs, steps = a.shape
        pick = rng.integers(0, runs, size=(n_boot, runs))
        step = rng.integers(0, steps, size=(n_boot, runs, steps))
        return np.exp(np.log(np.median(a[pick[:, :, None], step], axis=2)).mean(axis=1))

    rel = 100 * (arm_stats(test) / arm_stats(base) - 1)
    lo, hi = np.percentile(rel, [2.5, 97.5])
    return lo <= true_change_pct <= hi


def test_replicate_interval_holds_run_to_run_noise_at_its_stated_level():
    """600 simulated pairs of arms, 3 runs each, run-to-run SD 6% (this VM's healthy runs differ by
    up to 14%), step-to-step SD 8%, and a true change of 0 or -20%. The t interval on the runs'
    medians covers the true change in about 95% of pairs and gives a false verdict in about 5%;
    the bootstrap over runs then steps covers a true 0 in about 87% of pairs (its 3-run resamples
    are too alike: 80% at 2 runs, 92% at 5 in a longer simulation), so it would give 2-3 times as
    many false verdicts. The within-run interval of one run each calls most healthy pairs faster or
    slower."""
    rng = np.random.default_rng(7)
    n, covered, false_verdicts, boot_covered, within_verdicts, power = 600, 0, 0, 0, 0, 0
    for k in range(n):
        true = 0.0 if k % 2 == 0 else -20.0
        base = simulated_arm(rng, 100.0, 3, 0.06, 0.08)
        test = simulated_arm(rng, 100.0 * (1 + true / 100), 3, 0.06, 0.08)
        mr = MetricRuns("samples_per_s", [base, test], ["a", "b"])
        c = mr.change(1, 0, min_change_pct=0.0)
        assert c.basis == "replicates" and c.runs == [3, 3] and c.noise["df"] == 4
        covered += c.ci_pct[0] <= true <= c.ci_pct[1]
        if true == 0.0:
            false_verdicts += c.verdict != NO_CHANGE
            boot_covered += hierarchical_bootstrap_covers(base, test, true, rng)
            if k < 200:
                single = MetricRuns("samples_per_s", [[base[0]], [test[0]]], ["a", "b"]).change(1, 0, min_change_pct=0.0)
                within_verdicts += single.within_run_verdict != NO_CHANGE
        else:
            power += c.verdict == "slower"
    coverage, false_rate, boot_coverage = covered / n, false_verdicts / (n / 2), boot_covered / (n / 2)
    print(f"t coverage {coverage:.3f}, false verdicts {false_rate:.3f}, power at -20% {power / (n / 2):.3f}, "
          f"hierarchical bootstrap coverage {boot_coverage:.2f}, within-run verdicts on healthy single runs {within_verdicts}/100")
    assert 0.93 <= coverage <= 0.98
    assert false_rate <= 0.075
    assert boot_coverage <= 0.91 and boot_coverage <= coverage - 0.03
    assert within_verdicts >= 50


def test_detectable_change_and_runs_needed_match_the_hand_computed_figures():
    """A calibration of 5% (given, so z quantiles): one run each sees (1.960 + 0.842) * ln(1.05) *
    sqrt(2) = 19.35%, i.e. +21.3%; 3 runs each see (1.960 + 0.842) * ln(1.05) * sqrt(2/3) = 11.16% ->
    +11.8%; a 6% change needs n >= 2 * ((2.802 * ln 1.05) / ln 1.06)^2 = 11.7 -> 12 runs per arm."""
    cal = rtr.load_noise("5")
    sd = math.log(1.05)
    assert cal["samples_per_s"].sd == pytest.approx(sd)
    z = 1.959964 + 0.841621
    one = MetricRuns("samples_per_s", [[np.full(10, 100.0)], [np.full(10, 106.0)]], ["a", "b"], calibration=cal).change(1)
    assert one.basis == "calibration" and one.runs == [1, 1]
    assert one.detectable_pct == pytest.approx(100 * math.expm1(z * sd * math.sqrt(2)), abs=0.01)
    assert one.verdict == NO_CHANGE and one.runs_needed == 12
    assert "run 12 per arm" in one.note and "given, not measured" in one.note
    assert rtr.runs_needed(sd, math.inf, 6.0, "log", 0.0) == 12
    d3 = rtr.detectable(sd * math.sqrt(2 / 3), math.inf)
    assert 100 * math.expm1(d3) == pytest.approx(100 * math.expm1(z * sd * math.sqrt(2 / 3)), abs=1e-6)


def test_one_run_each_without_noise_gives_no_verdict_and_says_why():
    rng = np.random.default_rng(3)
    base, test = [100 + rng.normal(0, 2, 25)], [80 + rng.normal(0, 2, 25)]
    c = MetricRuns("samples_per_s", [base, test], ["a", "b"]).change(1)
    assert c.basis == "within-run" and c.verdict == NOISE_UNKNOWN
    assert c.within_run_verdict == "slower" and c.ci_pct[1] < 0 and c.detectable_pct is None
    assert "run-to-run noise unknown" in c.note and "--repeat" in c.note
    # with a calibration larger than the change: no verdict, and the note names the noise and its source
    cal = rtr.load_noise("15%")
    c2 = MetricRuns("samples_per_s", [base, test], ["a", "b"], calibration=cal).change(1)
    assert c2.basis == "calibration" and c2.verdict == NO_CHANGE and c2.ci_pct[0] < 0 < c2.ci_pct[1]
    assert "SD of 15.0%" in c2.note and "--noise 15%" in c2.note
    assert c2.within_run_verdict == "slower"  # kept, labelled, for the curious


@pytest.mark.parametrize("bad", ["nan", "inf", "-5", "0", "100", "no-such-file.json"])
def test_bad_noise_values_are_refused_in_one_line(bad):
    with pytest.raises(rtr.NoiseError, match="--noise"):
        rtr.load_noise(bad)
