"""Progress on long work: ``stage`` says a step is still running at least every 30 s, and nothing for a short one.

The time is driven by the test (``stage``'s ``clock`` and ``wait``), never slept on: the lines do not depend on how
busy the machine is."""

from __future__ import annotations

import io
import threading

import pytest

from judgetune._progress import stage


class Time:
    """A clock that moves only when the heartbeat waits: each wait lets ``beats`` intervals pass (then ``ready`` is
    set), and after them blocks until the stage ends."""

    def __init__(self, beats: int):
        self.now, self.left, self.ready = 1000.0, beats, threading.Event()

    def clock(self) -> float:
        return self.now

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        if self.left:
            self.left -= 1
            self.now += seconds
            return False
        self.ready.set()
        stop.wait()
        return True


def test_a_long_stage_says_it_is_still_running_at_each_interval_and_when_it_is_done():
    out, time = io.StringIO(), Time(beats=2)
    with stage("tuning: choosing", every=30.0, stream=out, clock=time.clock, wait=time.wait):
        assert time.ready.wait(10), "the heartbeat never waited"
    assert out.getvalue().splitlines() == ["tuning: choosing: still running, 30 s",
                                           "tuning: choosing: still running, 60 s", "tuning: choosing: done in 60 s"]


def test_a_short_stage_prints_nothing_and_an_error_passes_through():
    out = io.StringIO()
    time = Time(beats=0)
    with stage("quick", every=30.0, stream=out, clock=time.clock, wait=time.wait):
        pass
    assert out.getvalue() == ""
    time = Time(beats=0)
    with pytest.raises(ValueError), stage("failing", every=30.0, stream=out, clock=time.clock, wait=time.wait):
        raise ValueError("bad")
    assert out.getvalue() == ""
    time = Time(beats=3)
    with stage("off", enabled=False, every=30.0, stream=out, clock=time.clock, wait=time.wait):
        pass
    assert out.getvalue() == "" and time.left == 3  # off: no heartbeat waits at all


def test_a_stage_on_the_real_clock_ends_its_heartbeat_when_the_step_ends():
    """The defaults (``time.monotonic``, ``Event.wait``): a step shorter than the interval prints nothing and the
    heartbeat thread is gone when the stage returns."""
    out = io.StringIO()
    with stage("real", every=3600.0, stream=out):
        pass
    assert out.getvalue() == "" and not [t for t in threading.enumerate() if t.name == "judgetune-heartbeat"]


def test_a_stage_adds_its_wall_time_to_the_record_under_its_key_shown_or_not():
    seconds: dict[str, float] = {"search": 5.0}
    time = Time(beats=2)
    with stage("tuning: choosing", every=30.0, stream=io.StringIO(), clock=time.clock, wait=time.wait,
               seconds=seconds, key="choosing"):
        assert time.ready.wait(10)
    quiet = Time(beats=0)
    for _ in range(2):  # the same key twice adds up; a stage that prints nothing is timed too
        with stage("scoring", enabled=False, clock=quiet.clock, wait=quiet.wait, seconds=seconds, key="scoring"):
            quiet.now += 4.0
    assert seconds == {"search": 5.0, "choosing": 60.0, "scoring": 8.0}
