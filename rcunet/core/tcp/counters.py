"""Protocol counters under Linux's nstat names (``nstat -az`` spelling).

The engine calls ``counters.add(name)`` while its caller holds the connection's socket
lock; nothing else.  A ``Counters`` shared between connections that run on different
threads would race on ``+=``, so the host passes one per worker (per-CPU in Linux terms)
and sums them when reporting.  Concurrency: not thread-safe; one owner at a time.
"""

from __future__ import annotations

#: Every name the engine may increment (the nstat spelling, MIB prefix included).
NAMES = (
    "TcpActiveOpens", "TcpPassiveOpens", "TcpAttemptFails", "TcpEstabResets",
    "TcpInSegs", "TcpOutSegs", "TcpRetransSegs", "TcpInErrs", "TcpInCsumErrors", "TcpOutRsts",
    "TcpExtTCPChallengeACK", "TcpExtTCPSYNChallenge", "TcpExtTCPACKSkippedChallenge",
    "TcpExtTCPACKSkippedSeq", "TcpExtTCPACKSkippedSynRecv", "TcpExtTCPACKSkippedPAWS",
    "TcpExtPAWSEstab", "TcpExtPAWSActive",
    "TcpExtTCPOFOQueue", "TcpExtTCPOFODrop", "TcpExtTCPOFOMerge", "TcpExtTCPZeroWindowDrop",
    "TcpExtBeyondWindow", "TcpExtTCPWantZeroWindowAdv", "TcpExtTCPToZeroWindowAdv",
    "TcpExtTCPFromZeroWindowAdv",
    "TcpExtTCPDSACKOldSent",
    "TcpExtDelayedACKs", "TcpExtTCPTimeouts", "TcpExtTCPFastRetrans",
    "TcpExtTCPRenoRecovery", "TcpExtTCPSackRecovery", "TcpExtTCPSynRetrans",
    "TcpExtTCPSACKReneging", "TcpExtTCPSACKReorder", "TcpExtTCPSACKDiscard",
    "TcpExtTCPDSACKRecv", "TcpExtTCPDSACKOfoRecv", "TcpExtTCPDSACKIgnoredOld",
    "TcpExtTCPDSACKIgnoredNoUndo", "TcpExtTCPDSACKIgnoredDubious",
    "TcpExtTCPLossProbes", "TcpExtTCPLossProbeRecovery",
    "TcpExtTCPDSACKUndo", "TcpExtTCPFullUndo", "TcpExtTCPLossUndo", "TcpExtTCPSpuriousRTOs",
    "TcpExtTCPWinProbe", "TcpExtTCPKeepAlive", "TcpExtTCPAbortOnTimeout",
    "TcpExtTCPAbortOnData", "TcpExtTCPAbortOnClose",
    "TcpExtSyncookiesSent", "TcpExtSyncookiesRecv", "TcpExtSyncookiesFailed", "TcpExtTW",
    "TcpExtTCPFastOpenActive", "TcpExtTCPFastOpenActiveFail",
    "TcpExtTCPHPHits", "TcpExtTCPHPAcks",  # header prediction (Connection._fast_path)
    # CUBIC's HyStart ending slow start (hystart_update), and the cwnd it ended at
    "TcpExtTCPHystartTrainDetect", "TcpExtTCPHystartTrainCwnd",
    "TcpExtTCPHystartDelayDetect", "TcpExtTCPHystartDelayCwnd",
    # AccECN feedback that cannot be right (rcunet's names: Linux counts none of these):
    # an impossible ACE in the handshake, an option zeroed on the path, byte counters
    # that went backwards or changed in two fields at once, an ACE that may have wrapped
    "TcpExtAccEcnAceFail", "TcpExtAccEcnOptionZeroed", "TcpExtAccEcnAmbiguousBytes",
    "TcpExtAccEcnAceMayHaveWrapped",
)
_KNOWN = frozenset(NAMES)


class Counters:
    """A bag of monotonically increasing counters; unknown names are a programming error."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: dict[str, int] = {}

    def add(self, name: str, n: int = 1) -> None:
        if name not in _KNOWN:
            raise KeyError(f"unknown counter {name!r}")
        values = self.values
        # Subscripts, not dict.get: a connection's counters move between the threads
        # that drive it (rcunet.core.freethreaded, point 2).
        values[name] = values[name] + n if name in values else n

    def __getitem__(self, name: str) -> int:
        if name not in _KNOWN:
            raise KeyError(f"unknown counter {name!r}")
        values = self.values
        return values[name] if name in values else 0

    def take(self) -> dict[str, int]:
        """Return the deltas since the last ``take`` and start again from zero."""
        out, self.values = self.values, {}
        return out
