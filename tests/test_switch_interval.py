"""Every process of the app lets a waiting thread take the interpreter after 1 ms, not Python's
5 ms (memory.threads.SWITCH_INTERVAL_SECONDS, set when the app loads), and never lengthens an
interval someone set shorter."""

import sys

import pytest

from memory.threads import SWITCH_INTERVAL_SECONDS, shorter_switch_interval


@pytest.fixture
def restored_interval():
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_the_loaded_app_runs_with_the_short_switch_interval():
    # Python starts every process at 5 ms; the memory app's ready() lowered it.
    assert SWITCH_INTERVAL_SECONDS < 0.005
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_SECONDS)


def test_pythons_default_interval_is_lowered(restored_interval):
    sys.setswitchinterval(0.005)
    shorter_switch_interval()
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_SECONDS)


def test_an_interval_set_shorter_on_purpose_is_kept(restored_interval):
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS / 4)
    shorter_switch_interval()
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_SECONDS / 4)
