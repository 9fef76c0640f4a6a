"""The confidence map: a fit that follows the data, the calibration error it is judged by, and ties."""
from envbuild.explain.calibrate import Calibration, expected_calibration_error, fit, leads, reliability, tied


def test_fit_learns_that_a_bigger_lead_is_more_often_right():
    pts = [(5.0, 4.0, 1)] * 40 + [(5.0, 4.0, 0)] * 2 + [(2.0, 0.2, 1)] * 10 + [(2.0, 0.2, 0)] * 10
    w = fit(pts)
    cal = Calibration(w["intercept"], w["score"], w["lead"], 0.9, 0.6)
    assert cal.probability(5.0, 4.0) > 0.9 > 0.6 > cal.probability(2.0, 0.2) > 0.4
    assert cal.label(cal.probability(5.0, 4.0)) == "high" and cal.label(cal.probability(2.0, 0.2)) == "low"


def test_expected_calibration_error():
    perfect = [(0.75, 1)] * 3 + [(0.75, 0)]
    assert expected_calibration_error(perfect) == 0.0
    over = [(0.95, 1)] * 5 + [(0.95, 0)] * 5  # says 95 %, right half the time
    assert abs(expected_calibration_error(over) - 0.45) < 1e-9
    assert sum(len(m) for _, _, m in reliability(over)) == 10


def test_leads_and_ties():
    assert leads([5.0, 3.0, 1.0]) == [2.0, -2.0, -4.0]
    assert tied([("M3", 2.5), ("O3", 2.5), ("U2", 1.0)]) == ["M3", "O3"]
    assert tied([("C3", 8.0), ("M4", 4.0)]) == []
