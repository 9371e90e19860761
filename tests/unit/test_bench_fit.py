from __future__ import annotations

import math

import numpy as np
import pytest

from pytimings.bench.fit import fit_alpha_beta


def test_recovers_alpha_and_beta_from_exact_data() -> None:
    sizes = np.array([8 << i for i in range(20)], dtype=float)
    alpha, beta = 12.5, 48.0  # us, GB/s
    times = alpha + sizes / (beta * 1e3)
    fit = fit_alpha_beta(sizes, times)
    assert fit is not None
    assert fit.alpha_us == pytest.approx(alpha, rel=1e-9)
    assert fit.beta_gbps == pytest.approx(beta, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.n_points == 20


def test_noisy_data_matches_numpy_polyfit_and_r2_drops() -> None:
    rng = np.random.default_rng(7)
    sizes = np.array([1 << i for i in range(10, 30)], dtype=float)
    times = 30 + sizes / 200e3
    noisy = times * (1 + rng.normal(0, 0.05, times.size))
    fit = fit_alpha_beta(sizes, noisy)
    assert fit is not None
    slope, intercept = np.polyfit(sizes, noisy, 1)  # independent computation
    assert fit.alpha_us == pytest.approx(intercept, rel=1e-6)
    assert fit.beta_gbps == pytest.approx(1e-3 / slope, rel=1e-6)
    assert 0.9 < fit.r2 < 1.0


def test_degenerate_inputs() -> None:
    assert fit_alpha_beta([4096, 4096], [1.0, 2.0]) is None
    flat = fit_alpha_beta([1, 2, 4, 8], [5.0, 5.0, 5.0, 5.0])
    assert flat is not None and math.isinf(flat.beta_gbps) and flat.alpha_us == pytest.approx(5)
    with pytest.raises(ValueError, match="differ in length"):
        fit_alpha_beta([1, 2], [1.0])


def test_a_negative_intercept_is_held_at_zero_and_kept_to_be_said() -> None:
    """A host copy whose small sizes run relatively faster (cache) fitted alpha -0.40 µs
    (issue 46): the latency is constrained to >= 0, the line then goes through 0."""
    sizes = np.array([4096.0, 65536.0, 1 << 20, 16 << 20])
    times = sizes / 10e3 - 0.4  # 10 GB/s, 0.4 µs "saved" per copy
    fit = fit_alpha_beta(sizes, times)
    assert fit is not None and fit.alpha_us == 0.0
    assert fit.free_alpha_us == pytest.approx(-0.4)
    assert fit.beta_gbps == pytest.approx(1e-3 / float(sizes @ times / (sizes @ sizes)))
    positive = fit_alpha_beta(sizes, sizes / 10e3 + 2.0)
    assert positive is not None and positive.free_alpha_us is None
    assert positive.alpha_us == pytest.approx(2.0)


def test_the_report_says_the_latency_was_held() -> None:
    from pytimings.bench.report import BenchReport, add_fits

    report = BenchReport("copy", {}, [])
    report.rows = [{"path": "host", "size_bytes": s, "time_us": s / 10e3 - 0.4}
                   for s in (4096, 65536, 1 << 20)]  # fmt: skip
    add_fits(report, ["path"])
    assert report.fits[0]["alpha_us"] == 0.0
    assert report.notes == [
        "path=host: latency below what this sweep resolves (the free fit's -0.40 µs is "
        "negative): fitted through 0, alpha 0"
    ]
