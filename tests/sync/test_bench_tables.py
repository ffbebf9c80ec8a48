"""``rcunet bench tables``: the aggregator's contract (JSON keys, missing seeds, usage
errors) and seed 002's invariants (counts back to base, rcuref never retries).  Rates are
printed, never asserted."""

from __future__ import annotations

import json

import pytest

from rcunet import cli
from rcunet.bench import tables, tables_seed002


def run_cli(argv, capsys):
    code = cli.main(["bench", "tables", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_seed002_json_has_rates_ratio_and_counts(capsys):
    code, out, _ = run_cli(["--seeds", "seed002", "--duration", "0.05", "--json"], capsys)
    assert code == 0
    payload = json.loads(out)
    assert list(payload) == ["seed002"]
    r = payload["seed002"]
    assert r["legacy"] > 0 and r["modern"] > 0
    assert r["ratio"] == pytest.approx(r["modern"] / r["legacy"])
    assert r["modern_cas_retries"] == 0
    assert r["final_refs"] == {"legacy": 1, "modern": 1, "modern_rcusafe": 1}
    forced = r["forced_window"]
    assert forced["modern"]["cas_retries"] == 0
    assert forced["legacy"]["final_refs"] == forced["modern"]["final_refs"] == 1


@pytest.mark.parametrize("threads", [1, 2])
def test_seed002_get_rates_give_every_reference_back(threads):
    """The gets-only runs take references they never put inside the timed loop: both
    counts are back at 1 after them, and rcuref's get never retries."""
    gets = tables_seed002.get_rates(0.05, threads)
    for name in ("legacy", "modern"):
        assert gets[name]["rate"] > 0
        assert gets[name]["final_refs"] == 1
    assert gets["modern"]["cas_retries"] == 0
    assert gets["ratio"] == pytest.approx(gets["modern"]["rate"] / gets["legacy"]["rate"])


def test_missing_seed_module_is_reported_not_fatal(monkeypatch, capsys):
    real = tables.importlib.import_module

    def fake_import(name):
        if name == "rcunet.bench.tables_seed003":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name)

    monkeypatch.setattr(tables.importlib, "import_module", fake_import)
    monkeypatch.setattr(tables_seed002, "measure", lambda duration, threads: {
        "legacy": 1.0, "modern": 2.0, "ratio": 2.0})
    code, out, err = run_cli(["--seeds", "seed002,seed003", "--json"], capsys)
    assert code == 1
    payload = json.loads(out)
    assert payload["seed003"]["available"] is False and payload["seed003"]["ratio"] is None
    assert payload["seed002"]["ratio"] == 2.0
    assert "seed003 is not available" in err


def test_text_report_has_the_robot_summary_line(monkeypatch, capsys):
    monkeypatch.setattr(tables_seed002, "measure", lambda duration, threads: {
        "legacy": 1000.0, "modern": 1500.0, "ratio": 1.5, "legacy_cas_retries": 7})
    code, out, _ = run_cli(["--seeds", "seed002"], capsys)
    assert code == 0
    summary = [ln for ln in out.splitlines() if "seed002.ops_per_sec" in ln]
    assert summary and summary[0].split()[:3] == ["1,000", "+50.0%", "1,500"]
    assert "legacy_cas_retries=7" in out


@pytest.mark.parametrize("argv", [["--seeds", "seed001"], ["--duration", "0"],
                                  ["--threads", "0"]])
def test_usage_errors_exit_2(argv, capsys):
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and err.startswith("rcunet bench:")


def test_seed_result_missing_core_keys_is_an_error(monkeypatch):
    monkeypatch.setattr(tables_seed002, "measure", lambda duration, threads: {"legacy": 1.0})
    with pytest.raises(RuntimeError, match="lacks"):
        tables.measure_seed("seed002", 0.01, 1)


def test_lock_overhead_microbenchmark_reports_every_mode_and_restores_modes():
    from rcunet.sync import lock as lock_mod
    from rcunet.sync import lockbench

    before = (lock_mod.stats_enabled(), lock_mod.checks_enabled())
    result = lockbench.lookup_overhead(iterations=500, rounds=1)
    assert (lock_mod.stats_enabled(), lock_mod.checks_enabled()) == before
    assert set(result["ns_per_lookup"]) == {"bare", "off", "stats", "lockdep"}
    for forms in result["ns_per_lookup"].values():
        assert set(forms) == {"with", "acquire"} and all(v > 0 for v in forms.values())
    assert "fast mode vs bare threading.Lock" in lockbench.format_overhead(result)
