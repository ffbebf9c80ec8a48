"""rcunet drill: packetdrill scripts against one rcunet Host on the virtual clock.

The script plays the remote host (packetdrill's model): ``<`` lines are injected into
the Host under test, ``>`` lines are matched against what it sends, system calls run
on its sockets.  No root, no kernel, no wall clock: every run is exact and repeatable.

* ``lexer``/``parser``: the packetdrill language as google/packetdrill's ``lexer.l`` and
  ``parser.y`` read it, into the event list of ``script``.
* ``frames``: inbound packets built from script lines, outbound frames decoded, both
  printed as packetdrill prints them.
* ``syscalls``: the system calls on rcunet's sockets, with packetdrill's argument,
  return-value and errno checks.
* ``runner``: the event loop (times, tolerance, blocking calls, sequence mapping).
"""

from rcunet.drill.errors import DrillError, DrillFailure, DrillUnsupported

__all__ = ["DrillError", "DrillFailure", "DrillUnsupported"]
