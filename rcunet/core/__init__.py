"""Sans-IO protocol machines: no threads, clocks, sockets or randomness; time and random values
come in as arguments.

Layer map (``api -> host -> tables/sync -> core -> wire``):

* ``core.route``, ``core.neigh``, ``core.ip`` -- routing, neighbour discovery, IP fragments.
* ``core.tcp`` -- the TCP connection engine (RFC 9293 and the RFCs it leans on).  A
  ``Connection`` is driven by three things: segments from the peer (``on_segment``), the
  clock (``on_timer``) and the application (``send``/``recv``/``shutdown_write``/``close``/
  ``abort``).  Every entry point takes ``now`` (int nanoseconds); afterwards the caller
  collects ``take_segments()``, ``take_events()`` and ``next_deadline()``.

Everything random (ISN secrets, timestamp offsets) and every clock reading comes in as an
argument; ``tests/core/test_import_ban.py`` keeps ``core`` from importing threading, time,
socket, random or os.  Concurrency: none here -- the host serialises calls on one
connection with that socket's lock (reference §5.1).
"""
