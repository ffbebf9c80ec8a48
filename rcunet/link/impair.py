"""Seeded link impairments, in the spirit of Linux ``netem`` and ``tbf``.

An ``Impairment`` processes the frames of one direction of a link.  ``submit(frame,
now)`` returns the frames to deliver now; frames held back (delay, jitter, reordering,
rate limiting) come out of ``release(now)`` once due, and ``next_deadline()`` says
when.  Time is whatever the caller passes (int ns): virtual time in deterministic
tests, the monotonic clock in threaded runs.

Each frame goes through, in order:

1. rate limit (token bucket, ``rate_bps`` with a ``burst``-byte bucket): a frame that
   finds too few tokens waits for them (FIFO); if more than ``rate_queue`` bytes are
   already waiting it is dropped (``rate_dropped``), as ``tbf``'s ``limit`` does;
2. congestion signals, where an ECN-capable queue marks CE instead of dropping (RFC
   3168 §5; ``tc red ... ecn`` with one threshold, the step an L4S or DCTCP queue has):
   a frame that waited longer than ``ce_threshold`` ns for the rate limiter, and with
   probability ``ecn`` any frame, gets CE if it is ECT(0)/ECT(1) (``ce_marked``; one
   already CE stays so) and is dropped if it is Not-ECT (``ecn_dropped``), as the queue
   would drop it; non-IP frames pass;
   then loss with probability ``loss`` (``lost``);
3. duplication with probability ``duplicate`` (one extra copy, ``duplicated``);
4. per copy: corruption with probability ``corrupt`` — one random bit flipped, as
   netem does (``corrupted``);
5. per copy: delay ``delay`` ns plus a uniform jitter in ``[-jitter, +jitter]`` (frames
   are released in time order, so jitter reorders, as in netem), and with probability
   ``reorder`` an extra ``reorder_delay`` so that frames sent within that time overtake
   it (``reordered``).  At most ``limit`` frames are held (netem's ``limit``); beyond
   that a frame is dropped (``overflow``).

Reproducible: every random draw comes from one ``random.Random(seed)`` in a fixed order
per frame, so the same seed, configuration and sequence of (frame, now) calls give the
same output.  Draws happen only for enabled impairments.

Not thread-safe: the owning link calls it under its lock.
"""

from __future__ import annotations

import dataclasses
import heapq
import random

from rcunet.link.ecnmark import Mark, mark_ce

MS = 1_000_000
NS_PER_S = 1_000_000_000

COUNTER_NAMES = (
    "frames", "lost", "duplicated", "corrupted", "reordered", "delayed",
    "rate_delayed", "rate_dropped", "overflow", "ce_marked", "ecn_dropped",
)


@dataclasses.dataclass(frozen=True, slots=True)
class ImpairmentConfig:
    """What to do to the frames of one direction; everything off by default."""

    loss: float = 0.0
    duplicate: float = 0.0
    corrupt: float = 0.0
    reorder: float = 0.0
    reorder_delay: int = 1 * MS
    delay: int = 0
    jitter: int = 0
    rate_bps: int = 0  # 0: no rate limit
    burst: int = 16 * 1024
    rate_queue: int = 256 * 1024
    limit: int = 1000
    seed: int = 0
    #: Probability of a congestion signal per frame: CE for ECT, a drop for Not-ECT.
    ecn: float = 0.0
    #: Queueing delay (ns, behind the rate limiter) beyond which every frame gets a
    #: congestion signal; 0: none.
    ce_threshold: int = 0

    def __post_init__(self) -> None:
        for name in ("loss", "duplicate", "corrupt", "reorder", "ecn"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} probability {value} not in [0, 1]")
        for name in ("reorder_delay", "delay", "jitter", "rate_bps", "burst", "rate_queue",
                     "limit", "ce_threshold"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")

    @property
    def active(self) -> bool:
        """True when the configuration changes anything (a link with an active
        impairment must compute and verify checksums)."""
        return bool(
            self.loss or self.duplicate or self.corrupt or self.reorder or self.delay
            or self.jitter or self.rate_bps or self.ecn
        )


class Impairment:
    """One direction's impairments; see the module docstring.

    Concurrency: none inside; the link calls ``submit``/``release`` under its lock.
    """

    def __init__(self, config: ImpairmentConfig | None = None, *, ethernet: bool = True,
                 **settings: object) -> None:
        if config is None:
            # (ignores: settings are ImpairmentConfig's fields by name, checked there)
            config = ImpairmentConfig(**settings)  # type: ignore[arg-type]
        elif settings:
            config = dataclasses.replace(config, **settings)  # type: ignore[arg-type]
        self.config = config  # immutable
        #: Frames start with an Ethernet header (else bare IP); the link sets it.
        self.ethernet = ethernet
        self._rng = random.Random(config.seed)
        self._held: list[tuple[int, int, bytes]] = []  # heap of (release_at, seq, frame)
        self._seq = 0
        # Token bucket in bit-nanoseconds (bytes * 8 * 1e9), so refill is `elapsed * rate`
        # and every quantity stays an exact integer.
        self._bucket = config.burst * 8 * NS_PER_S
        self._tokens = self._bucket
        self._tokens_at: int | None = None
        self.counters: dict[str, int] = dict.fromkeys(COUNTER_NAMES, 0)

    @property
    def active(self) -> bool:
        return self.config.active

    @property
    def held(self) -> int:
        """Frames waiting for their release time."""
        return len(self._held)

    def submit(self, frame: bytes, now: int) -> list[bytes]:
        """Impair one frame sent at ``now``; returns the frames due now (0, 1 or 2)."""
        cfg = self.config
        counters = self.counters
        counters["frames"] += 1
        depart_at = now
        if cfg.rate_bps:
            rated = self._rate_departure(len(frame), now)
            if rated is None:
                counters["rate_dropped"] += 1
                return []
            if rated > now:
                counters["rate_delayed"] += 1
            depart_at = rated
        rng = self._rng
        signal = bool(cfg.ce_threshold) and depart_at - now > cfg.ce_threshold
        if cfg.ecn and rng.random() < cfg.ecn:
            signal = True
        if signal:
            marked = self._congestion_signal(frame)
            if marked is None:
                return []
            frame = marked
        if cfg.loss and rng.random() < cfg.loss:
            counters["lost"] += 1
            return []
        copies = 1
        if cfg.duplicate and rng.random() < cfg.duplicate:
            counters["duplicated"] += 1
            copies = 2
        due: list[bytes] = []
        for _ in range(copies):
            out = frame
            if cfg.corrupt and frame and rng.random() < cfg.corrupt:
                out = _flip_bit(frame, rng.randrange(len(frame) * 8))
                counters["corrupted"] += 1
            release_at = depart_at + self._delay(rng)
            if release_at <= now:
                due.append(out)
            else:
                self._hold(out, release_at)
        return due

    def release(self, now: int) -> list[bytes]:
        """Frames whose time has come, in release order (ties in submission order)."""
        held = self._held
        out = []
        while held and held[0][0] <= now:
            out.append(heapq.heappop(held)[2])
        return out

    def next_deadline(self) -> int | None:
        return self._held[0][0] if self._held else None

    # -- stages ----------------------------------------------------------------------

    def _congestion_signal(self, frame: bytes) -> bytes | None:
        """CE for an ECT frame, a drop (None) for a Not-ECT one; non-IP frames pass."""
        result, out = mark_ce(frame, self.ethernet)
        if result is Mark.NOT_ECT:
            self.counters["ecn_dropped"] += 1
            return None
        if result is Mark.MARKED or result is Mark.ALREADY_CE:
            self.counters["ce_marked"] += 1
        return out

    def _delay(self, rng: random.Random) -> int:
        cfg = self.config
        delay = cfg.delay
        if cfg.jitter:
            delay = max(0, delay + rng.randint(-cfg.jitter, cfg.jitter))
        if cfg.reorder and rng.random() < cfg.reorder:
            self.counters["reordered"] += 1
            delay += cfg.reorder_delay
        return delay

    def _hold(self, frame: bytes, release_at: int) -> None:
        if len(self._held) >= self.config.limit:
            self.counters["overflow"] += 1
            return
        self.counters["delayed"] += 1
        self._seq += 1
        heapq.heappush(self._held, (release_at, self._seq, frame))

    def _rate_departure(self, size: int, now: int) -> int | None:
        """When a ``size``-byte frame leaves the token bucket, or ``None`` if the queue of
        frames waiting for tokens is full.  Negative tokens are bytes already queued."""
        rate = self.config.rate_bps
        if self._tokens_at is not None and now > self._tokens_at:
            self._tokens = min(self._bucket, self._tokens + (now - self._tokens_at) * rate)
        if self._tokens_at is None or now > self._tokens_at:
            self._tokens_at = now
        cost = size * 8 * NS_PER_S
        after = self._tokens - cost
        if -after > self.config.rate_queue * 8 * NS_PER_S:
            return None
        self._tokens = after
        if after >= 0:
            return now
        debt = -after
        return now + (debt + rate - 1) // rate  # ceil: the tokens are there by then


def _flip_bit(frame: bytes, bit: int) -> bytes:
    out = bytearray(frame)
    out[bit >> 3] ^= 0x80 >> (bit & 7)
    return bytes(out)
