"""An echo server, a thread per connection: the server half of the two-hour run in
docs/SIMULATION.md ("What it costs")."""

import socket
import threading


def handle(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


def serve(port: int = 9000) -> None:
    with socket.create_server(("0.0.0.0", port)) as listener:
        while True:
            conn, _peer = listener.accept()
            threading.Thread(target=handle, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    serve()
