"""``rcunet bench codec``: output shapes and the same-packet cross-check (no timing asserts)."""

from __future__ import annotations

import argparse
import json

import pytest

from rcunet.bench import codec

# dpkt and scapy are test dependencies (pip install '.[test]'); the free-threaded venv
# of scripts/freethreaded has neither, and the bench then measures rcunet alone.
AVAILABLE = [library for library in codec.LIBRARIES if codec.available(library)]


def run_bench(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    codec.configure(parser)
    status = codec.run(parser.parse_args(list(argv)))
    out, err = capsys.readouterr()
    return status, out, err


def test_json_is_one_object_of_rates_per_library_and_packet(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run_bench(capsys, "--json", "--duration", "0.03")
    assert status == 0
    assert len(out.splitlines()) == 1
    result = json.loads(out)
    assert list(result) == AVAILABLE
    assert AVAILABLE[0] == "rcunet"
    for rates in result.values():
        assert list(rates) == ["tcp_data", "syn"]
        assert all(isinstance(rate, float) and rate > 0 for rate in rates.values())


def test_human_report_names_interpreter_and_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run_bench(capsys, "--duration", "0.03")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith("# CPython 3.") or lines[0].startswith("# PyPy")
    assert all(f"{library} " in lines[0] for library in AVAILABLE)
    others = AVAILABLE[1:]
    assert lines[2].split() == ["packet", *AVAILABLE, *(f"rcunet/{lib}" for lib in others)]
    rows = [line.split() for line in lines[3:5]]
    assert [row[0] for row in rows] == ["tcp_data", "syn"]
    assert all(len(row) >= 1 + len(AVAILABLE) + len(others) for row in rows)
    if others:
        assert lines[5].startswith("# targets: rcunet >= 3x dpkt")


def test_missing_libraries_are_reported_and_rcunet_still_measured(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(codec, "available", lambda library: library == "rcunet")
    status, out, err = run_bench(capsys, "--json", "--duration", "0.03")
    assert status == 0
    assert err == ("rcunet bench codec: dpkt and scapy not installed (pip install '.[test]'); "
                   "measuring rcunet only\n")
    assert list(json.loads(out)) == ["rcunet"]


def test_a_library_building_a_different_frame_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("dpkt", reason="dpkt is a test dependency (pip install '.[test]')")
    wrong_window = dict(codec.FIELDS["syn"], window_scale=8)
    real = codec.dpkt_options
    monkeypatch.setattr(
        codec, "dpkt_options", lambda f: real(wrong_window if f["mss"] is not None else f)
    )
    status, out, err = run_bench(capsys, "--json", "--duration", "0.03")
    assert (status, out) == (1, "")
    assert err.startswith("rcunet bench codec: dpkt built a different syn frame")


def test_rcunet_disagreeing_with_its_own_frame_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = codec.rcunet_fields
    monkeypatch.setattr(codec, "rcunet_fields", lambda frame: real(frame)[:-1] + (None,))
    status, out, err = run_bench(capsys, "--duration", "0.03")
    assert (status, out) == (1, "")
    assert err.splitlines()[-1].startswith("rcunet bench codec: rcunet parsed ")


def test_every_library_builds_and_parses_the_reference_packets() -> None:
    for library in AVAILABLE:
        pairs = codec.make_pairs(library)
        assert set(pairs) == set(codec.PACKETS)
        for pair in pairs.values():
            assert pair() == codec.rcunet_build(
                codec.FIELDS["syn" if pair is pairs["syn"] else "tcp_data"])


def test_duration_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_bench(capsys, "--duration", "0")
    assert (status, out) == (2, "")
    assert "--duration must be > 0" in err
