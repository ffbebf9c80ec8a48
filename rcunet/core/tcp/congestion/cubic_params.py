"""The parameters of Linux's tcp_cubic module (/sys/module/tcp_cubic/parameters), with
Linux's defaults.  Linux reads them module-wide; rcunet keeps one set per Host (its
``Tuning.tcp_cubic``) and a connection takes the set in force when it opens."""

from __future__ import annotations

from dataclasses import dataclass

#: hystart_detect bits (HYSTART_ACK_TRAIN, HYSTART_DELAY).
ACK_TRAIN = 0x1
DELAY = 0x2

#: BICTCP_BETA_SCALE: beta is a fraction of 1024.
BETA_SCALE = 1024


@dataclass(frozen=True, slots=True)
class CubicParams:
    #: Release bandwidth faster when the window before a loss keeps shrinking.
    fast_convergence: int = 1
    #: The multiplicative decrease, /1024 (717: 0.7).
    beta: int = 717
    #: ssthresh of a new connection in segments when HyStart is off (0: "infinite").
    initial_ssthresh: int = 0
    #: C of the cubic function, /1024 (41: 0.04); read-only in Linux (0444).
    bic_scale: int = 41
    #: The Reno-friendly region: never grow slower than Reno would.
    tcp_friendliness: int = 1
    #: HyStart on/off.
    hystart: int = 1
    #: Which HyStart detectors run: 1 ACK train, 2 delay increase, 3 both.
    hystart_detect: int = ACK_TRAIN | DELAY
    #: HyStart only looks once cwnd reaches this many segments.
    hystart_low_window: int = 16
    #: ACKs at most this far apart (µs) make a train.
    hystart_ack_delta_us: int = 2000

    def __reduce__(self) -> tuple[type[CubicParams], tuple[int, ...]]:
        """Pickled as its constructor's arguments: a Host in a process receives its
        Tuning by pickle, and neither CPython 3.11 (a frozen slotted dataclass) nor mypyc
        (a frozen native class) can restore the fields one by one."""
        return (CubicParams, (self.fast_convergence, self.beta, self.initial_ssthresh,
                              self.bic_scale, self.tcp_friendliness, self.hystart,
                              self.hystart_detect, self.hystart_low_window,
                              self.hystart_ack_delta_us))


#: The parameters a write to /sys/module/tcp_cubic/parameters may change (module_param
#: 0644); bic_scale is 0444.
WRITABLE = frozenset({"fast_convergence", "beta", "initial_ssthresh", "tcp_friendliness",
                      "hystart", "hystart_detect", "hystart_low_window",
                      "hystart_ack_delta_us"})

DEFAULT_PARAMS = CubicParams()
