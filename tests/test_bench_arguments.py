"""manage.py bench refuses a count of samples that would leave a phase without figures."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.parametrize("option", ["--jobs", "--holds"])
@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_bench_refuses_a_count_of_samples_below_one_before_running(option, value, tmp_path):
    with pytest.raises(CommandError, match=rf"argument {option}: .*(at least 1|whole number)"):
        call_command("bench", option, value, "--json", str(tmp_path / "bench.json"))
    assert not (tmp_path / "bench.json").exists()
