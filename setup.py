"""rcunet's build: the pure-Python package everywhere, and its hot-path modules also
compiled with mypyc from the same source where a C compiler works.

``COMPILED`` is the one list of compiled modules; it grows as modules become type-clean
under ``mypy --strict`` and measure faster compiled (tests/test_build.py checks that every
entry exists and that mypy's strict overrides cover it).  The ``.py`` source of each is
installed beside its extension, and ``import rcunet`` chooses one build for the whole
package (rcunet/build.py): ``RCUNET_PURE=1`` forces the source.

No compiled build (a pure-Python install, and a message saying why) when:
- ``RCUNET_PURE_BUILD=1`` asks for none;
- the interpreter is free-threaded (mypy cannot be installed on 3.13t: build_backend.py);
- mypyc is missing, or the C compiler (``CC``, e.g. ``CC=false``) cannot build a test file.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile

from setuptools import setup

COMPILED = [
    # wire/pretty.py stays pure: it formats packets for people (CLI, captures), off the
    # hot path.
    # The congestion package goes in whole: an interpreted subclass of a compiled class fails.
    "rcunet/wire/checksum.py",
    "rcunet/wire/errors.py",
    "rcunet/wire/tcp_options.py",
    "rcunet/core/tcp/rto.py",
    "rcunet/core/tcp/sack.py",
    "rcunet/core/tcp/buffers.py",
    "rcunet/core/tcp/reassembly.py",
    "rcunet/core/tcp/window.py",
    "rcunet/core/tcp/delack.py",
    "rcunet/core/tcp/timers.py",
    "rcunet/core/tcp/receiver.py",
    "rcunet/core/tcp/sender.py",
    "rcunet/core/tcp/autotune.py",
    "rcunet/core/tcp/undo.py",
    "rcunet/core/tcp/prr.py",
    "rcunet/core/tcp/pacing.py",
    "rcunet/core/tcp/sndbuf.py",
    "rcunet/core/tcp/rack.py",
    "rcunet/core/tcp/recovery.py",
    "rcunet/core/tcp/state.py",
    "rcunet/core/tcp/tcb.py",
    "rcunet/core/tcp/chrono.py",
    "rcunet/core/tcp/stats.py",
    "rcunet/core/tcp/counters.py",
    "rcunet/core/tcp/events.py",
    "rcunet/core/tcp/common.py",
    "rcunet/core/tcp/sack_validity.py",
    "rcunet/core/tcp/challenge.py",
    "rcunet/core/tcp/congestion/base.py",
    "rcunet/core/tcp/congestion/cubic.py",
    "rcunet/core/tcp/congestion/cubic_params.py",
    "rcunet/core/tcp/congestion/hystart.py",
    "rcunet/core/tcp/congestion/newreno.py",
    "rcunet/core/tcp/congestion/__init__.py",
    "rcunet/wire/seqnum.py",
    "rcunet/core/tcp/isn.py",
    "rcunet/core/tcp/listen.py",
    "rcunet/core/tcp/timewait.py",
    "rcunet/core/tcp/fastopen.py",
    "rcunet/core/tcp/syncookies.py",
    "rcunet/core/tcp/accecn.py",
    "rcunet/core/tcp/ecnstate.py",
    "rcunet/core/tcp/sent_log.py",
    "rcunet/core/tcp/idle.py",
    "rcunet/core/tcp/connection.py",
    "rcunet/core/tcp/options.py",
    "rcunet/core/tcp/md5.py",
    "rcunet/core/neigh.py",
    "rcunet/core/route.py",
    "rcunet/wire/_common.py",
    "rcunet/wire/addr.py",
    "rcunet/wire/ecn.py",
    "rcunet/wire/ethernet.py",
    "rcunet/wire/arp.py",
    "rcunet/wire/ipv4.py",
    "rcunet/wire/ipv6.py",
    "rcunet/wire/icmpv4.py",
    "rcunet/wire/icmpv6.py",
    "rcunet/wire/igmp.py",
    "rcunet/wire/tcp.py",
    "rcunet/wire/udp.py",
    # The sync layer, the tables and the host's small hot helpers.  mypyc gives weak
    # references only to classes with a __dict__: the classes weakly referenced (LockClass,
    # rcu's per-thread _Registration, the shard owners) are mypyc_attr(native_class=False),
    # and Lock and ReadSection have none.  Classes subclassed by interpreted code allow it.
    # Lock's instrumented path finds the acquiring site as the first frame outside
    # lock.py; a compiled caller has no frame, so it is reported at its nearest interpreted
    # caller.
    # sync/atomic.py stays pure: AtomicInt is cereggii's C class where installed, and
    # compiled, a word typed LockedInt (a native class) would refuse it.
    # sync/lockarray.py stays pure: LockArray is a list (its slot loads are list's own C
    # code) and mypyc compiles no subclass of list.
    "rcunet/sync/lock.py",
    "rcunet/sync/lockdep.py",
    "rcunet/sync/hooks.py",
    "rcunet/sync/rcu.py",
    "rcunet/sync/refcount.py",
    "rcunet/sync/shards.py",
    "rcunet/sync/deferred.py",
    "rcunet/sync/spin.py",
    "rcunet/tables/__init__.py",
    "rcunet/tables/secret.py",
    "rcunet/tables/ehash.py",
    "rcunet/tables/bind.py",
    "rcunet/tables/listen.py",
    "rcunet/tables/portsel.py",
    "rcunet/tables/udp_reuseport.py",
    "rcunet/tables/udp_mcast.py",
    "rcunet/tables/udp.py",
    "rcunet/host/clock.py",
    "rcunet/host/timers.py",
    "rcunet/host/counters.py",
    "rcunet/host/routecache.py",
    "rcunet/host/socklock.py",
    "rcunet/host/wakeups.py",
    # The host side of TCP (the crr path: socket, demux, transmit, listener, TIME_WAIT,
    # teardown, the Options each connection opens with), with the table entry its
    # sockets subclass (entry.py's classes allow interpreted subclasses:
    # tables/udp_entry.py's UdpEntry may run from source), IP,
    # the Host and Network that poll them, and the in-memory link, and what a connection
    # calls once (the socket options, Fast Open's connect-time check, MD5 key lookup).
    # Still pure: TCP_INFO, the error queue and the poll mirror (host/tcp/info, meminfo,
    # errq, poll: off the crr path), host/icmp.py and host/udp_sock.py (UdpSock
    # subclasses UdpEntry).
    "rcunet/tables/entry.py",
    "rcunet/host/tcp/common.py",
    "rcunet/host/tcp/life.py",
    "rcunet/host/tcp/buffers.py",
    "rcunet/host/tcp/md5.py",
    "rcunet/host/tcp/sockopt.py",
    "rcunet/host/tcp/fastopen_opts.py",
    "rcunet/host/tcp/ipopts.py",
    "rcunet/host/tcp/connopts.py",
    "rcunet/host/tcp/sock.py",
    "rcunet/host/tcp/transmit.py",
    "rcunet/host/tcp/demux.py",
    "rcunet/host/tcp/timewait.py",
    "rcunet/host/tcp/teardown.py",
    "rcunet/host/tcp/listener.py",
    "rcunet/host/tcp/fastopen.py",
    "rcunet/host/tcp/icmp.py",
    "rcunet/host/tcp/layer.py",
    "rcunet/host/ip.py",
    "rcunet/host/interface.py",
    "rcunet/host/host.py",
    "rcunet/host/network.py",
    "rcunet/link/memory.py",
    "rcunet/link/ipc.py",
]


def say(message: str) -> None:
    print(f"rcunet build: {message}", file=sys.stderr)


def compiler_works() -> bool:
    """Compile and link one empty C function with the compiler setuptools would use."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.errors import CCompilerError, DistutilsError
    from setuptools._distutils.sysconfig import customize_compiler

    compiler = new_compiler()
    customize_compiler(compiler)
    with tempfile.TemporaryDirectory() as work:
        source = os.path.join(work, "probe.c")
        with open(source, "w") as file:
            file.write("int rcunet_probe(void) { return 0; }\n")
        try:
            objects = compiler.compile([source], output_dir=work)
            compiler.link_shared_object(objects, os.path.join(work, "probe.so"))
        except (CCompilerError, DistutilsError, OSError) as exc:
            say(f"the C compiler does not work ({exc}): installing pure Python")
            return False
    return True


#: The setup.py commands that build code; metadata steps (egg_info, dist_info: pip's
#: first calls) must not pay for a mypyc run.
BUILDING = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


def extensions() -> list[object]:
    if not BUILDING.intersection(sys.argv[1:]):
        return []
    if os.environ.get("RCUNET_PURE_BUILD", "") not in ("", "0"):
        say("RCUNET_PURE_BUILD is set: installing pure Python")
        return []
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        say("free-threaded interpreter: no mypyc here (build_backend.py), installing pure Python")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        say("mypyc is not installed: installing pure Python")
        return []
    if not compiler_works():
        return []
    # mypy checks the compiled modules strictly (pyproject.toml); the modules they import
    # but that are not compiled are followed for their types, their errors not reported,
    # and the strict overrides of packages none of them imports are no reason to fail.
    modules = mypycify(["--follow-imports=silent", "--no-warn-unused-configs", *COMPILED],
                       opt_level="3", group_name="rcunet")
    for module in modules:
        module.optional = True  # a module that fails to build leaves its source in charge
    return list(modules)


setup(ext_modules=extensions())
