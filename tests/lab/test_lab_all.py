"""``rcunet lab all``: the markdown report and the plots (tiny budgets: shape, not speed)."""

from __future__ import annotations

import dataclasses

from rcunet.cli import main
from rcunet.lab import all as lab_all

# The lock-statistics runs of seed001/seed004 are skipped here (tested with those labs).
TINY = {
    "seed000": {"duration": 0.05, "rounds": 1, "ports": 64, "hold": 32},
    "seed001": {"duration": 0.1, "rounds": 1, "lockstat_duration": 0},
    "seed002": {"threads": 2, "duration": 0.05, "rounds": 1},
    "seed003": {"duration": 0.02, "rounds": 1, "n_sockets": 20},
    "seed004": {"duration": 0.1, "rounds": 1, "lockstat_duration": 0},
}


def test_all_quick_writes_markdown_and_pngs(tmp_path, monkeypatch, capsys):
    labs = {seed: dataclasses.replace(lab, quick=TINY[seed])
            for seed, lab in lab_all.LABS.items()}
    monkeypatch.setattr(lab_all, "LABS", labs)
    output = tmp_path / "report.md"
    plots = tmp_path / "img"
    assert main(["lab", "all", "--quick", "--output", str(output),
                 "--plot-dir", str(plots)]) == 0
    text = output.read_text()
    assert text.startswith("# rcunet seed lab")
    table = [line for line in text.splitlines() if line.startswith("| seed0")]
    assert [row.split("|")[1].strip() for row in table] == list(lab_all.SEEDS)
    for seed in lab_all.SEEDS:
        assert f"## {seed}:" in text
        png = plots / f"{seed}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"](img/{seed}.png)" in text  # relative to the report
    assert (plots / "all-changes.png").read_bytes()[:4] == b"\x89PNG"
    assert "The authors' figures, for comparison:" in text
    assert "report written to" in capsys.readouterr().err


def test_markdown_marks_a_missing_lab_and_judges_directions():
    outcome = {
        "interpreter": "CPython 3.11 (GIL)", "quick": True, "cpus": 2, "seconds": 1.0,
        "plots": {},
        "seeds": {
            "seed000": {"missing": "rcunet.lab.seed000 is not in this tree"},
            "seed002": {"result": {"legacy": 100.0, "modern": 130.0}, "report": "r2"},
        },
    }
    text = lab_all.markdown(outcome)
    assert "| seed000 |" in text and "not run: rcunet.lab.seed000 is not in this tree" in text
    row = next(line for line in text.splitlines() if line.startswith("| seed002"))
    assert "+30.0% (1.30x)" in row and "same direction" in row
    assert "Not run: rcunet.lab.seed000 is not in this tree." in text
    assert lab_all.verdict(30.0, 25.0) == "same direction"
    assert lab_all.verdict(-30.0, 25.0) == "opposite direction"
    assert lab_all.verdict(2.0, 25.0) == "flat here"
    assert lab_all.verdict(90.0, None) == "same direction"  # no figure: a fix raises rates


def test_unknown_lab_module_is_reported_missing(monkeypatch):
    labs = dict(lab_all.LABS)
    labs["seed999"] = lab_all.LABS["seed000"]
    monkeypatch.setattr(lab_all, "LABS", labs)
    assert lab_all.run_seed("seed999", quick=True) == {
        "missing": "rcunet.lab.seed999 is not in this tree"}


def test_an_unwritable_report_path_is_refused_before_any_run(tmp_path, monkeypatch, capsys):
    def no_run(**_kwargs):
        raise AssertionError("the seeds ran before the output path was checked")

    monkeypatch.setattr(lab_all, "run_all", no_run)
    assert main(["lab", "all", "--quick", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write the report to {tmp_path}" in err
    assert "Traceback" not in err
