"""Progress on long work: ``stage`` says a step is still running at least every 30 s, and nothing for a short one."""

from __future__ import annotations

import io
import time

import pytest

from judgetune._progress import stage


def test_a_long_stage_says_it_is_still_running_at_each_interval_and_when_it_is_done():
    out = io.StringIO()
    with stage("tuning: choosing", every=0.05, stream=out):
        time.sleep(0.18)
    lines = out.getvalue().splitlines()
    beats = [line for line in lines if line.startswith("tuning: choosing: still running, ")]
    assert len(beats) >= 2 and lines[-1].startswith("tuning: choosing: done in ")


def test_a_short_stage_prints_nothing_and_an_error_passes_through():
    out = io.StringIO()
    with stage("quick", every=5.0, stream=out):
        pass
    assert out.getvalue() == ""
    with pytest.raises(ValueError), stage("failing", every=5.0, stream=out):
        raise ValueError("bad")
    assert out.getvalue() == ""
    with stage("off", enabled=False, every=0.01, stream=out):
        time.sleep(0.05)
    assert out.getvalue() == ""
