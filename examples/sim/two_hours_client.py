"""Two hours of TCP life against two_hours_server.py on host b: one idle connection
kept alive by keepalive probes every 10 s, and a 20 kB echo connection every 30 s (each
leaves a TIME_WAIT that expires 60 s later).  Under rcunet sim it takes seconds."""

import socket
import threading
import time

SERVER = ("10.0.0.2", 9000)
DURATION = 7200.0


def idle_keepalive() -> None:
    with socket.create_connection(SERVER) as conn:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 10)
        time.sleep(DURATION)


def churn() -> None:
    end = time.monotonic() + DURATION
    count = 0
    while time.monotonic() < end:
        with socket.create_connection(SERVER) as conn:
            conn.sendall(b"x" * 20000)
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(65536):
                pass
        count += 1
        time.sleep(30)
    print("connections", count)


if __name__ == "__main__":
    threads = [threading.Thread(target=idle_keepalive), threading.Thread(target=churn)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
