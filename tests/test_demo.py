"""``rcunet demo`` (the README's main job) really moves traffic between Hosts."""

from __future__ import annotations

from rcunet.cli import main


def test_demo_echoes_pings_and_refuses(capsys, tmp_path):
    pcap = tmp_path / "demo.pcap"
    assert main(["demo", "--pcap", str(pcap)]) == 0
    out = capsys.readouterr().out
    assert out.count("echoed intact") == 3
    assert "2 of 2 replies" in out
    assert "ConnectionRefusedError" in out
    assert "IpForwDatagrams=" in out
    assert pcap.stat().st_size > 24
