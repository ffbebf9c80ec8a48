"""The five neper workloads end to end on ``--target mem`` (rcunet Hosts) and ``--target
kernel`` (Linux sockets): every key neper prints, exact transaction counts, the CSV, the
client/server pair over a control connection, and the failure paths (unreachable host,
vanishing peer, Ctrl-C).  Runs are bounded by a transaction count or ``-l 1``; nothing
here asserts a rate."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rcunet.cli import main

# LNST's neper parser
KEY_VALUE = re.compile(r"^(?P<key>.*)=(?P<value>.*)$", re.M)
RUSAGE_KEYS = ["invalid_secret_count", "time_start"] + [
    f"{name}_{edge}" for name in ("utime", "stime", "maxrss", "minflt", "majflt", "nvcsw",
                                  "nivcsw") for edge in ("start", "end")]
RR_KEYS = ["num_transactions", "latency_min", "latency_max", "latency_mean",
           "latency_stddev", "latency_p50", "latency_p99.9", "num_samples", "time_end",
           "correlation_coefficient", "throughput"]
STREAM_KEYS = ["num_samples", "time_end", "correlation_coefficient", "throughput",
               "throughput_units"]
TAIL_KEYS = ["local_throughput", "remote_throughput"]
REPO = Path(__file__).resolve().parents[2]


def values_of(out: str) -> dict[str, str]:
    return {m.group("key"): m.group("value") for m in KEY_VALUE.finditer(out)}


def bench(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, str], str]:
    status = main(["bench", *argv, "--nolog"])
    out, err = capsys.readouterr()
    return status, values_of(out), err


RUNS = [("udp_rr", "mem"), ("udp_rr", "kernel"), ("tcp_rr", "kernel"), ("tcp_rr", "mem"),
        ("tcp_crr", "kernel"), ("tcp_crr", "mem")]


@pytest.mark.parametrize(("workload", "target"), RUNS)
def test_rr_prints_every_neper_key_and_runs_exactly_the_transactions_asked(
        workload: str, target: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, values, err = bench(capsys, workload, "--target", target, "-l", "-120",
                                "-F", "2", "-T", "2", "-Q", "300", "-R", "700",
                                "-p", "50,99.9")
    assert status == 0, err
    for key in RUSAGE_KEYS + RR_KEYS + TAIL_KEYS:
        assert key in values, key
    assert values["total_transactions"] == "120"
    assert int(values["num_transactions"]) == 120
    assert float(values["throughput"]) > 0
    assert int(values["num_samples"]) >= 2
    assert 0 < float(values["latency_min"]) <= float(values["latency_p50"]) \
        <= float(values["latency_max"])
    assert re.fullmatch(r"\d+\.\d{9}", values["latency_mean"])
    assert re.fullmatch(r"\d+\.\d{9}", values["time_end"])
    assert re.fullmatch(r"\d+\.\d{6}", values["utime_end"])
    if workload == "tcp_crr":
        assert values["remote_throughput"] == "0"  # the crr server collects no stats
    else:
        assert int(values["remote_throughput"]) > 0  # the server counted them too


@pytest.mark.parametrize("target", ["mem", "kernel"])
@pytest.mark.parametrize("workload", ["tcp_rr", "udp_rr", "tcp_crr"])
def test_threads_with_several_flows_wait_in_a_selector(
        workload: str, target: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, values, err = bench(capsys, workload, "--target", target, "-F", "5", "-T", "2",
                                "-l", "-90", "-p", "50")
    assert status == 0, err
    assert int(values["num_transactions"]) == 90
    assert 0 < float(values["latency_min"]) <= float(values["latency_p50"])


@pytest.mark.parametrize(("workload", "target"), [
    ("udp_stream", "mem"), ("udp_stream", "kernel"), ("tcp_stream", "kernel"),
    ("tcp_stream", "mem")])
def test_stream_reader_block_has_throughput_in_mbits(
        workload: str, target: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, values, err = bench(capsys, workload, "--target", target, "-l", "1",
                                "-F", "2", "-B", "1000")
    assert status == 0, err
    for key in RUSAGE_KEYS + STREAM_KEYS + TAIL_KEYS:
        assert key in values, key
    assert values["throughput_units"] == "Mbit/s"
    assert float(values["throughput"]) > 0
    # local_throughput is bits/s, throughput Mbit/s
    assert int(values["local_throughput"]) == pytest.approx(
        float(values["throughput"]) * 1e6, rel=0.01)
    assert int(values["num_samples"]) >= 5  # -l 1 takes a snapshot every 0.2 s per flow


@pytest.mark.parametrize("target", ["mem", "kernel"])
def test_tcp_maerts_client_reads_and_reports(
        target: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, values, err = bench(capsys, "tcp_stream", "-M", "--no-delay", "--target", target,
                                "-l", "1", "-F", "2", "-T", "2")
    assert status == 0, err
    assert values["enable_tcp_maerts"] == "1" and values["no_delay"] == "1"
    for key in RUSAGE_KEYS + STREAM_KEYS + TAIL_KEYS:
        assert key in values, key
    assert float(values["throughput"]) > 0 and values["remote_throughput"] == "0"


@pytest.mark.parametrize("target", ["mem", "kernel"])
def test_tcp_stream_read_and_write_on_both_ends(target: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    status, values, err = bench(capsys, "tcp_stream", "--target", target, "-l", "1", "-r")
    assert status == 0, err
    assert values["enable_read"] == "1" and values["enable_write"] == "1"
    # the client reads what the server writes and reports it; the server's bits/s
    # (what it read) come back as remote_throughput
    assert int(values["local_throughput"]) > 0 and int(values["remote_throughput"]) > 0


@pytest.mark.parametrize("workload", ["tcp_crr", "udp_rr"])
def test_legacy_tuning_runs_the_same_workload(
        workload: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, values, err = bench(capsys, workload, "--tuning", "legacy", "-F", "2", "-T", "2",
                                "-l", "-40")
    assert status == 0, err
    assert values["num_transactions"] == "40"


def test_ipv6_udp_rr_on_both_targets(capsys: pytest.CaptureFixture[str]) -> None:
    for target in ("mem", "kernel"):
        status, values, err = bench(capsys, "udp_rr", "-6", "--target", target, "-l", "-50")
        assert status == 0, err
        assert values["ipv6"] == "1" and values["num_transactions"] == "50"


def test_tcp_num_ports_spreads_flows_over_listeners(capsys: pytest.CaptureFixture[str]) -> None:
    status, values, err = bench(capsys, "tcp_rr", "--target", "kernel", "--num-ports", "3",
                                "-F", "3", "-l", "-60")
    assert status == 0, err
    assert values["num_ports"] == "3" and values["num_transactions"] == "60"


def test_all_samples_csv_has_a_row_per_snapshot(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "rr.csv"
    status, values, err = bench(capsys, "udp_rr", "--target", "mem", "-l", "1",
                                f"--all-samples={csv}", "-p", "50,90")
    assert status == 0, err
    lines = csv.read_text().splitlines()
    assert lines[0] == ("tid,flow_id,time,transactions,transactions/s,utime,stime,maxrss,"
                        "minflt,majflt,nvcsw,nivcsw,latency_min,latency_mean,latency_max,"
                        "latency_stddev,latency_p50,latency_p90")
    assert len(lines) - 1 == int(values["num_samples"])
    last = lines[-1].split(",")
    assert len(last) == 18
    assert last[2] == values["time_end"]
    assert int(last[3]) == int(values["num_transactions"])


def test_tcp_crr_time_wait_closes_gracefully(capsys: pytest.CaptureFixture[str]) -> None:
    status, values, err = bench(capsys, "tcp_crr", "--target", "kernel", "--time-wait",
                                "-l", "-30")
    assert status == 0, err
    assert values["time_wait"] == "1" and values["num_transactions"] == "30"


@pytest.mark.parametrize("target", ["mem", "kernel"])
def test_delay_waits_after_each_send(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, values, err = bench(capsys, "udp_rr", "-D", "2ms", "--target", target,
                                "-l", "-20")
    assert status == 0, err
    assert values["delay"] == "2000000"
    assert float(values["latency_min"]) >= 0.002  # the wait sits inside each transaction


def test_suicide_length_ends_a_run_that_would_go_on() -> None:
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "rcunet", "bench", "udp_rr", "--target", "kernel", "-s", "1",
         "-l", "30", "--nolog"], capture_output=True, text=True, timeout=30,
        env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 1
    assert "suicide timeout after 1 s" in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - began < 20
    assert "num_transactions" not in proc.stdout


def test_a_timed_run_is_never_cut_short_by_the_stall_watchdog(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from rcunet.bench import targets

    monkeypatch.setattr(targets, "STALL_SECONDS", 0.3)  # only for -l -N counts
    status, values, err = bench(capsys, "tcp_stream", "--target", "kernel", "-l", "2")
    assert status == 0, err
    start, end = float(values["time_start"]), float(values["time_end"])
    assert end - start >= 1.5


def test_log_file_is_written_unless_nolog(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "udp_rr", "--target", "kernel", "-l", "-20"]) == 0
    logs = list(tmp_path.glob("udp_rr.*.log"))
    assert len(logs) == 1 and "udp_rr on --target kernel" in logs[0].read_text()
    capsys.readouterr()


# ------------------------------------------------------------------------------ client/server
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_server(*argv: str) -> subprocess.Popen[str]:
    """A ``--server`` process, returned once it listens (its log line on stderr says so)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "rcunet", "bench", *argv, "--server",
                             "--target", "kernel", "--logtostderr"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    for line in proc.stderr:
        if "listening on" in line:
            return proc
    raise AssertionError(f"server exited without listening: {proc.wait()}")


def test_client_and_server_processes_swap_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    control, data = free_port(), free_port()
    server = start_server("tcp_rr", "-C", str(control), "-P", str(data), "-H", "127.0.0.1")
    try:
        status, values, err = bench(capsys, "tcp_rr", "--target", "kernel", "-c", "-H",
                                    "127.0.0.1", "-C", str(control), "-P", str(data),
                                    "-l", "-200")
        assert status == 0, err
        out, server_err = server.communicate(timeout=30)
    finally:
        server.kill()
    assert server.returncode == 0, server_err
    server_values = values_of(out)
    assert values["num_transactions"] == "200" and server_values["num_transactions"] == "200"
    assert server_values["latency_max"] == "0.000000000"  # neper's server: all zero
    assert values["remote_throughput"] == server_values["local_throughput"]
    assert server_values["remote_throughput"] == values["local_throughput"]


def test_a_server_for_another_workload_counts_an_invalid_secret_and_serves_the_next(
        capsys: pytest.CaptureFixture[str]) -> None:
    # neper's ctrl_accept: another test's secret is an incident; the server closes that
    # connection and waits for the next client
    control, data = free_port(), free_port()
    server = start_server("udp_rr", "-C", str(control), "-P", str(data), "-H", "127.0.0.1")
    try:
        status, _values, err = bench(capsys, "tcp_rr", "--target", "kernel", "-c", "-H",
                                     "127.0.0.1", "-C", str(control), "-l", "1")
        assert status == 1
        assert "without SER_ACK: it does not run tcp_rr" in err
        assert len(err.strip().splitlines()) == 1
        status, values, err = bench(capsys, "udp_rr", "--target", "kernel", "-c", "-H",
                                    "127.0.0.1", "-C", str(control), "-P", str(data),
                                    "-l", "-50")
        assert status == 0, err
        out, server_err = server.communicate(timeout=30)
    finally:
        server.kill()
    assert values["num_transactions"] == "50"
    assert server.returncode == 0 and "Traceback" not in server_err
    assert values_of(out)["invalid_secret_count"] == "1"


def test_a_magic_mismatch_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    control, data = free_port(), free_port()
    server = start_server("tcp_rr", "-C", str(control), "-P", str(data), "-H", "127.0.0.1")
    try:
        status, _values, err = bench(capsys, "tcp_rr", "--target", "kernel", "-c", "-H",
                                     "127.0.0.1", "-C", str(control), "-P", str(data),
                                     "-l", "1", "--magic", "43")
        _out, server_err = server.communicate(timeout=30)
    finally:
        server.kill()
    assert status == 1
    assert err.strip() == ("tcp_rr: control connection: the server's magic is 42, ours 43 "
                           "(--magic must match on both sides)")
    assert "Traceback" not in server_err


def test_unreachable_server_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    status, _values, err = bench(capsys, "tcp_rr", "--target", "kernel", "-c", "-H",
                                 "127.0.0.1", "-C", str(free_port()), "-l", "1")
    assert status == 1
    assert "cannot reach 127.0.0.1 port" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


#: The progress line a bench run longer than 3 s prints on a tty (``targets._drive``).
PROGRESS = re.compile(r"\w+ --target [\w-]+: +[\d.]+ s, (\d+) transactions")


def _sigint_as_on_a_terminal() -> None:
    """A run started from a terminal has SIGINT at its default; one started by a
    background job of a non-interactive shell (a CI runner may be one) inherits it
    ignored, and Python then installs no KeyboardInterrupt handler: the Ctrl-C these
    tests send would be lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class BenchOnTty:
    """``rcunet bench`` in a child process with its stderr on a pseudo-terminal, so that
    it shows its progress line: a test acts once the run has counted a transaction (a
    condition, however long a loaded machine takes to get there), not after a sleep."""

    def __init__(self, *argv: str) -> None:
        master, slave = pty.openpty()
        self.master = master
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rcunet", "bench", *argv, "--nolog"],
            stdout=subprocess.PIPE, stderr=slave, text=True,
            env=dict(os.environ, PYTHONPATH=str(REPO)), preexec_fn=_sigint_as_on_a_terminal)
        os.close(slave)
        self.err = ""

    def _read(self, timeout: float) -> bool:
        """Read what stderr has within ``timeout``; False at its end."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 4096)
        except OSError:  # EIO: the child closed the terminal (it exited)
            return False
        self.err += chunk.decode(errors="replace")
        return bool(chunk)

    def wait_counting(self, limit: float = 120.0) -> None:
        """Until the progress line counts a transaction (``limit``: a failure, not a
        wait)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            counts = PROGRESS.findall(self.err)
            if counts and int(counts[-1]) > 0:
                return
            if not self._read(0.2) or self.proc.poll() is not None:
                break
        raise AssertionError(f"the run counted no transaction: {self.err!r}")

    def finish(self, timeout: float = 60.0) -> tuple[str, str]:
        """(stdout, stderr without the progress line) once the child has exited."""
        deadline = time.monotonic() + timeout
        while self._read(0.2) and time.monotonic() < deadline:
            pass
        out, _ = self.proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        os.close(self.master)
        lines = [line for line in re.split(r"[\r\n]+", self.err)
                 if line.strip() and not PROGRESS.fullmatch(line.strip())]
        return out, "\n".join(lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_a_vanishing_server_is_reported_not_a_traceback() -> None:
    control = free_port()
    data = free_port()
    server = start_server("tcp_rr", "-C", str(control), "-P", str(data), "-H", "127.0.0.1")
    client = None
    try:
        client = BenchOnTty("tcp_rr", "--target", "kernel", "-c", "-H", "127.0.0.1",
                            "-C", str(control), "-P", str(data), "-l", "30")
        client.wait_counting()  # connected and measuring: the server vanishes mid-run
        server.kill()
        _out, err = client.finish()
    finally:
        server.kill()
        if client is not None:
            client.kill()
    assert client.proc.returncode == 1, err
    assert "vanished" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("workload", "target"), [("udp_rr", "kernel"), ("tcp_rr", "mem")])
def test_ctrl_c_still_prints_what_was_measured(workload: str, target: str) -> None:
    run = BenchOnTty(workload, "--target", target, "-l", "30")
    try:
        run.wait_counting()  # Ctrl-C once something was measured, however long that took
        run.proc.send_signal(signal.SIGINT)
        out, err = run.finish()
    finally:
        run.kill()
    values = values_of(out)
    assert run.proc.returncode == 130, err
    assert int(values["num_transactions"]) > 0 and float(values["throughput"]) > 0
    assert "Traceback" not in err


def test_pin_cpu_pins_each_worker_thread_and_prints_the_cpuset(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # neper --pin-cpu: worker thread i on the i-th allowed CPU, client and server alike
    from rcunet.bench import neper

    pinned: list[tuple[str, set[int]]] = []
    real_pin = neper.pin_thread

    def recording_pin(cpus: list[int] | None, index: int) -> None:
        real_pin(cpus, index)
        import threading
        pinned.append((threading.current_thread().name, os.sched_getaffinity(0)))

    monkeypatch.setattr("rcunet.bench.workloads.pin_thread", recording_pin)
    status, values, err = bench(capsys, "tcp_crr", "--target", "mem", "-l", "-30",
                                "-T", "2", "-F", "2", "--pin-cpu")
    assert status == 0, err
    allowed = neper.allowed_cpus()
    assert values["pin_cpu"] == "1" and values["allowed_core_num"] == str(len(allowed))
    assert int(values["num_transactions"]) == 30
    by_name = dict(pinned)
    assert by_name["neper-client-0"] == {allowed[0]}
    assert by_name["neper-client-1"] == {allowed[1 % len(allowed)]}
    assert by_name["neper-accept-0"] == {allowed[0]}
    assert os.sched_getaffinity(0) == set(allowed)  # the calling thread is left alone


def test_cpuset_lines_spell_runs_as_ranges() -> None:
    from rcunet.bench import neper

    assert neper.cpuset_lines([0, 1, 2, 3, 6]) == ["allowed_core_num=5",
                                                   "allowed_cores=0-3,6"]
    assert neper.cpuset_lines([1]) == ["allowed_core_num=1", "allowed_cores=1"]
