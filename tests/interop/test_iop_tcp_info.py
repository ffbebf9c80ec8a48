"""TCP_INFO beside the kernel's: the same exchange seen from both ends, rcunet's client
and a Linux server in a namespace, read through one struct layout.  The kernel's struct
has rcunet's size, and the totals one end counts sending the other counts receiving."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time

from iop_support import Peer, used

from rcunet.host.tcp.info import LAYOUT, SIZE

PORT = 9210
UPLOAD, DOWNLOAD = 300_000, 200_000

#: The kernel's side: accept, take UPLOAD bytes, send DOWNLOAD, wait for the client's FIN
#: (so every byte it sent is acknowledged), then print its TCP_INFO in hex.
SERVER = """
import socket, sys
host, port, upload, download = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
srv = socket.socket(socket.AF_INET)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((host, port))
srv.listen(1)
conn, _ = srv.accept()
got = 0
while got < upload:
    got += len(conn.recv(65536))
conn.sendall(bytes(download))
while conn.recv(65536):
    pass
print(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1024).hex(), flush=True)
"""


def _fields(raw: bytes) -> dict[str, int]:
    values, offset = {}, 0
    for name, code in LAYOUT:
        values[name] = int(struct.unpack_from("=" + code, raw, offset)[0])
        offset += struct.calcsize("=" + code)
    return values


def _connect(peer: Peer) -> socket.socket:
    deadline = time.monotonic() + 10
    while True:
        sock = peer.host.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(10)
        try:
            sock.connect((peer.kernel[4], PORT))
            return sock  # type: ignore[no-any-return]
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_tcp_info_totals_agree_with_the_kernels(peer: Peer) -> None:
    server = peer.ns.spawn([sys.executable, "-c", SERVER, peer.kernel[4], str(PORT),
                            str(UPLOAD), str(DOWNLOAD)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sock = _connect(peer)
    sock.sendall(bytes(UPLOAD))
    got = 0
    while got < DOWNLOAD:
        chunk = sock.recv(65536)
        assert chunk, "the kernel closed early"
        got += len(chunk)
    ours = _fields(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, SIZE))
    sock.close()
    out, err = server.communicate(timeout=30)
    assert server.returncode == 0, err.decode(errors="replace")
    raw = bytes.fromhex(out.decode().strip())
    assert len(raw) == SIZE  # Linux copies min(len, sizeof(struct tcp_info))
    kernel = _fields(raw)
    used("python socket TCP_INFO")
    # what one end sent and had acknowledged, the other received; sequence space, as
    # Linux counts it (tcp_snd_una_update, tcp_rcv_nxt_update): the active end's SYN is
    # in its bytes_acked, our FIN in the kernel's bytes_received
    assert ours["bytes_acked"] == UPLOAD + 1 and kernel["bytes_received"] == UPLOAD + 1
    assert kernel["bytes_acked"] == ours["bytes_received"] == DOWNLOAD
    assert ours["bytes_sent"] - ours["bytes_retrans"] == UPLOAD
    assert kernel["bytes_sent"] - kernel["bytes_retrans"] == DOWNLOAD
    # both count the handshake's segment as delivered besides the data's
    for info in (ours, kernel):
        assert info["delivered"] >= info["data_segs_out"] - info["total_retrans"] + 1 > 1
    assert kernel["data_segs_in"] > 0 and ours["data_segs_in"] > 0
    assert (ours["sacked"], ours["lost"], ours["retrans"]) == (0, 0, 0)
    assert 0 < ours["min_rtt"] < 1_000_000 and 0 < kernel["min_rtt"] < 1_000_000
