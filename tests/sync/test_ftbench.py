"""ftbench measures every case it names (its numbers are for reading, not asserting)."""

from __future__ import annotations

import pytest

from rcunet.sync import ftbench


def test_measure_reports_every_case():
    result = ftbench.measure(50)
    assert set(result) == {"dict.get(k)", "d[k]", "k in d", "slots attribute",
                           "ordinary attribute"}
    assert all(ns > 0 for ns in result.values())


def test_main_prints_a_line_per_case(capsys):
    assert ftbench.main(["-n", "20"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("reads of objects another thread made (")
    assert len(out) == 6 and all(line.endswith("ns/read") for line in out[1:])


def test_bad_count_is_refused():
    with pytest.raises(SystemExit):
        ftbench.main(["-n", "0"])
