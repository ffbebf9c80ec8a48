"""A primary-backup key-value store over TCP, with threads and blocking sockets: the
kind of program ``rcunet sim`` exists for.

The primary answers ``PUT key value`` and ``GET key`` lines and copies every PUT to the
backup.  With ``sync=True`` it acknowledges a PUT only once the backup has it; with
``sync=False`` (the deliberate bug) it acknowledges at once and copies in the
background, so a crash of the primary can lose a write the client was told was stored.
``tests/sim/test_sim_kv_example.py`` crashes the primary over many seeds, finds a seed
that loses an acknowledged write in the buggy variant, and replays it.

    sim = Simulation(seed)
    ... hosts client, primary, backup on one switch ...
    sim.spawn(backup, serve_backup, daemon=True)
    sim.spawn(primary, serve_primary, "backup", sync, daemon=True)
    writer = sim.spawn(client, write_then_fail_over, "primary", "backup", 200)
    sim.crash(primary, at=0.5)
    sim.run()
    print(writer.result)   # the acknowledged keys the backup does not have
"""

from __future__ import annotations

import queue
import socket
import threading
import time

PORT = 7000


def connect(host: str, port: int = PORT) -> socket.socket:
    """A connection to a server that may not listen yet (it starts beside us); a
    server that stays silent for 3 s (a lost SYN is sent again after 1 s) is gone."""
    for _attempt in range(100):
        try:
            conn = socket.create_connection((host, port), timeout=3.0)
        except ConnectionRefusedError:
            time.sleep(0.01)
            continue
        conn.settimeout(None)
        return conn
    raise ConnectionRefusedError(f"{host}:{port} never listened")


def _lines(conn: socket.socket) -> tuple[object, object]:
    reader = conn.makefile("rb")
    writer = conn.makefile("wb")
    return reader, writer


def serve_backup(port: int = PORT) -> None:
    store: dict[str, str] = {}
    _serve(port, store, replicate=None)


def serve_primary(backup: str, sync: bool, port: int = PORT) -> None:
    store: dict[str, str] = {}
    link = connect(backup, port)
    reader, writer = _lines(link)
    lock = threading.Lock()

    def copy(key: str, value: str) -> None:
        with lock:  # one request at a time on the backup connection
            writer.write(f"PUT {key} {value}\n".encode())  # type: ignore[attr-defined]
            writer.flush()  # type: ignore[attr-defined]
            reader.readline()  # type: ignore[attr-defined]

    if sync:
        _serve(port, store, replicate=copy)
        return
    backlog: queue.Queue[tuple[str, str]] = queue.Queue()

    def replicator() -> None:
        while True:
            copy(*backlog.get())

    threading.Thread(target=replicator, daemon=True).start()
    _serve(port, store, replicate=lambda key, value: backlog.put((key, value)))


def _serve(port: int, store: dict[str, str], replicate: object) -> None:
    with socket.create_server(("0.0.0.0", port)) as listener:
        while True:
            conn, _peer = listener.accept()
            threading.Thread(target=_session, args=(conn, store, replicate),
                             daemon=True).start()


def _session(conn: socket.socket, store: dict[str, str], replicate: object) -> None:
    with conn:
        reader, writer = _lines(conn)
        for line in reader:  # type: ignore[attr-defined]
            command, key, *value = line.decode().split()
            if command == "PUT":
                store[key] = value[0]
                if replicate is not None:
                    replicate(key, value[0])  # type: ignore[operator]
                answer = "OK"
            else:
                answer = store.get(key, "-")
            writer.write(f"{answer}\n".encode())  # type: ignore[attr-defined]
            writer.flush()  # type: ignore[attr-defined]


def write_then_fail_over(primary: str, backup: str, count: int) -> list[str]:
    """PUT ``count`` keys to the primary until it stops answering (0.3 s), then read
    every acknowledged key back from the backup: the ones it lacks (lost writes)."""
    acknowledged: list[str] = []
    try:
        conn = connect(primary)
    except OSError:  # the primary went before we reached it: nothing was acknowledged
        return []
    with conn:
        conn.settimeout(0.3)
        reader, writer = _lines(conn)
        for number in range(count):
            try:
                writer.write(f"PUT k{number} v{number}\n".encode())  # type: ignore[attr-defined]
                writer.flush()  # type: ignore[attr-defined]
                if reader.readline() != b"OK\n":  # type: ignore[attr-defined]
                    break
            except OSError:  # TimeoutError: the primary is gone
                break
            acknowledged.append(f"k{number}")
    lost = []
    with connect(backup) as conn:
        reader, writer = _lines(conn)
        for key in acknowledged:
            writer.write(f"GET {key}\n".encode())  # type: ignore[attr-defined]
            writer.flush()  # type: ignore[attr-defined]
            if reader.readline() == b"-\n":  # type: ignore[attr-defined]
                lost.append(key)
    return lost
