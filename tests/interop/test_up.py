"""``rcunet up`` as a real process inside a namespace: it creates the device, serves,
stops cleanly on SIGTERM/SIGINT with status 0, and exits 1 with a clear message when the
device is deleted under it or when it lacks CAP_NET_ADMIN."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from iop_support import KERNEL, RCUNET, need_tool, tshark_problems, unique_names, used

from rcunet.link.netns import Namespace

READY = "rcunet up: ready"


class Daemon:
    """``rcunet up`` in ``ns``, its output collected line by line."""

    def __init__(self, ns: Namespace, args: list[str]) -> None:
        self.process = ns.spawn([sys.executable, "-m", "rcunet", "up", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.output: list[str] = []
        self._pumping = threading.Thread(target=self._pump, daemon=True)
        self._pumping.start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.output.append(line)
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if text in self.lines.get(timeout=0.2):
                    return
            except queue.Empty:
                if self.process.poll() is not None:
                    break
        raise AssertionError(f"no {text!r} from rcunet up:\n" + "\n".join(self.output))

    def finish(self, timeout: float = 20.0) -> tuple[int, str]:
        code = self.process.wait(timeout)
        self._pumping.join(timeout)  # the pump has taken the last lines at EOF
        return code, "\n".join(self.output)


def _configure_kernel_side(ns: Namespace, ifname: str) -> None:
    ns.add_address(ifname, f"{KERNEL[4]}/24")
    ns.add_address(ifname, f"{KERNEL[6]}/64")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_up_serves_and_stops_cleanly(sig: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    need_tool("curl")
    ns_name, ifname = unique_names()
    pcap = str(tmp_path / "up.pcap")
    with Namespace(ns_name) as ns:
        daemon = Daemon(ns, ["--tap", ifname, "--address", f"{RCUNET[4]}/24",
                             "--address", f"{RCUNET[6]}/64", "--route", "default", "via",
                             KERNEL[4], "--serve", "echo:7,udp-echo:7,http:80",
                             "--queues", "2", "--pcap", pcap, "--lockstat"])
        daemon.wait_for(READY)
        _configure_kernel_side(ns, ifname)
        page = ns.run(["curl", "-sS", "-m", "20", f"http://{RCUNET[4]}/"]).stdout
        assert page == b"rcunet http responder\n"
        page6 = ns.run(["curl", "-sS", "-g", "-m", "20", f"http://[{RCUNET[6]}]/"]).stdout
        assert page6 == page
        echoed = ns.run(["nc", "-N", "-w", "5", RCUNET[4], "7"], input=b"via up\n").stdout
        assert echoed == b"via up\n"
        udp = ns.run(["socat", "-t", "1", "-", f"UDP4:{RCUNET[4]}:7"], input=b"dgram\n").stdout
        assert udp == b"dgram\n"
        # an open idle connection must not keep the daemon from stopping
        idle = ns.spawn(["nc", "-w", "30", RCUNET[4], "7"], stdout=subprocess.DEVNULL,
                        stdin=subprocess.PIPE)
        time.sleep(0.5)
        os.killpg(daemon.process.pid, sig)
        code, output = daemon.finish()
        idle.kill()
        assert code == 0, output
        assert "rcunet up: stopped" in output
        assert "tap " + ifname in output and "queues=2" in output
        assert "class name" in output or "lock_stat" in output  # --lockstat printed
        assert not ns.link_exists(ifname)  # our non-persistent device went with us
    frames, problems = tshark_problems(pcap)
    assert frames > 20 and problems == [], "\n".join(problems[:20])
    used("rcunet up")


def test_up_attaches_to_an_existing_tun(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ns_name, ifname = unique_names()
    with Namespace(ns_name) as ns:
        ns.add_tuntap(ifname, mode="tun")
        daemon = Daemon(ns, ["--tun", ifname, "--address", "10.77.1.2/24",
                             "--serve", "udp-echo:7"])
        daemon.wait_for(READY)
        ns.add_address(ifname, "10.77.1.1/24")
        udp = ns.run(["socat", "-t", "1", "-", "UDP4:10.77.1.2:7"], input=b"tun up\n").stdout
        assert udp == b"tun up\n"
        os.killpg(daemon.process.pid, signal.SIGTERM)
        code, output = daemon.finish()
        assert code == 0, output
        assert ns.link_exists(ifname)  # a persistent device outlives us


def test_up_reports_a_deleted_device_and_exits_1() -> None:
    ns_name, ifname = unique_names()
    with Namespace(ns_name) as ns:
        daemon = Daemon(ns, ["--tap", ifname, "--address", f"{RCUNET[4]}/24"])
        daemon.wait_for(READY)
        ns.run(["ip", "link", "del", ifname])
        code, output = daemon.finish()
    assert code == 1, output
    assert f"tap device '{ifname}' lost" in output
    assert "Traceback" not in output


def test_up_without_cap_net_admin_says_so() -> None:
    capsh = need_tool("capsh")
    _ns_name, ifname = unique_names()
    argv = [sys.executable, "-m", "rcunet", "up", "--tap", ifname,
            "--address", f"{RCUNET[4]}/24"]
    result = subprocess.run([capsh, "--drop=cap_net_admin", "--", "-c",
                             " ".join(argv)], capture_output=True, timeout=30)
    assert result.returncode == 1
    assert b"CAP_NET_ADMIN" in result.stderr and b"root" in result.stderr
    assert b"Traceback" not in result.stderr


def test_up_rejects_bad_arguments() -> None:
    result = subprocess.run([sys.executable, "-m", "rcunet", "up", "--tap", "x",
                             "--address", "10.77.0.2/24", "--serve", "gopher:70"],
                            capture_output=True, timeout=30)
    assert result.returncode == 2
    assert b"unknown service 'gopher'" in result.stderr


def test_up_answers_ss_nstat_and_lockstat_on_its_control_socket(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ns_name, ifname = unique_names()
    control = str(tmp_path / "up.sock")
    with Namespace(ns_name) as ns:
        daemon = Daemon(ns, ["--tap", ifname, "--address", f"{RCUNET[4]}/24",
                             "--serve", "echo:7,udp-echo:7", "--lockstat",
                             "--control", control])
        daemon.wait_for(f"rcunet up: control socket {control}")
        daemon.wait_for(READY)
        assert oct(os.stat(control).st_mode & 0o777) == "0o600"  # root only
        _configure_kernel_side(ns, ifname)
        cli = [sys.executable, "-m", "rcunet"]
        ss = subprocess.run([*cli, "ss", "-l", "--control", control], capture_output=True,
                            text=True, timeout=30, check=True).stdout
        assert "tcp   LISTEN 0      128          0.0.0.0:7" in ss
        assert "udp   UNCONN" in ss
        echoed = ns.run(["nc", "-N", "-w", "5", RCUNET[4], "7"], input=b"seen\n").stdout
        assert echoed == b"seen\n"
        nstat = subprocess.run([*cli, "nstat", "-a", "-s", "--control", control],
                               capture_output=True, text=True, timeout=30, check=True).stdout
        assert re.search(r"^TcpPassiveOpens +1 +0\.0$", nstat, re.M)
        lock_stat = subprocess.run([*cli, "lockstat", "--control", control],
                                   capture_output=True, text=True, timeout=30,
                                   check=True).stdout
        assert lock_stat.startswith("lock_stat version 0.4\n")
        garbage = subprocess.run(["socat", "-", f"UNIX-CONNECT:{control}"], input=b"HELO\n",
                                 capture_output=True, timeout=30).stdout
        assert garbage == (b"error: unknown request 'HELO' (known: ss, nstat, lockstat, "
                       b"tracemalloc)\n")
        daemon.process.send_signal(signal.SIGTERM)
        code, output = daemon.finish()
        assert code == 0, output
        assert not os.path.exists(control)  # removed at exit
    used("socat")
