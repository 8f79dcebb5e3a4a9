"""Who may be served: basic auth against bcrypt hashes as exporter-toolkit checks it, kept cheap under a flood
of wrong passwords, and exporter-toolkit's rate_limit."""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections.abc import Callable

#: Requests that may wait for bcrypt at once (one runs, the others queue); more are answered 429.
BCRYPT_WAITING = 4


class Authenticator:
    """Checks basic-auth credentials against bcrypt hashes as exporter-toolkit does, and keeps doing so
    under a flood of wrong ones.

    Timing tells nothing: every first check of a user and password costs one bcrypt run, for a user
    that does not exist too (against a decoy hash of the highest cost), and a check of a cheaper hash
    is padded to the time the slowest cost takes, so users of different costs are not told apart.
    Answers are cached by a hash of user, password and stored hash (bcrypt is slow on purpose, and a
    scraper sends the same credentials every time): good and bad answers apart, so that wrong passwords
    never evict the scraper's good one. bcrypt runs one at a time (a flood costs one core, not all) for
    at most BCRYPT_WAITING requests; more are refused at once (`allowed` is then None)."""

    CACHE_SIZE = 100

    def __init__(
        self,
        users: dict[str, bytes],
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.users = users
        self._good: dict[bytes, None] = {}
        self._bad: dict[bytes, None] = {}
        self._lock = threading.Lock()
        self._bcrypt = threading.Lock()
        self._waiting = 0
        self._clock, self._sleep = clock, sleep
        self._decoy = b""
        #: Seconds the costliest check took (the decoy's, at start): every check lasts at least that.
        self.slowest = 0.0
        if users:
            import bcrypt

            cost = max(int(h.split(b"$")[2]) for h in users.values())
            self._decoy = bcrypt.hashpw(b"decoy", bcrypt.gensalt(rounds=cost))
            started = clock()
            bcrypt.checkpw(b"decoy", self._decoy)
            self.slowest = clock() - started

    def _key(self, header: str | None) -> tuple[bytes, bytes, bytes | None] | None:
        """(cache key, password, stored hash) of a Basic Authorization header; None if it is not one."""
        if not header or not header.startswith("Basic "):
            return None
        try:
            user, _, password_text = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        password = password_text.encode()
        hashed = self.users.get(user)
        return hashlib.sha256(b"\0".join((user.encode(), password, hashed or b""))).digest(), password, hashed

    def known(self, header: str | None) -> bool:
        """True for credentials already verified, without running bcrypt (for the probes)."""
        if not self.users:
            return True
        key = self._key(header)
        with self._lock:
            return key is not None and key[0] in self._good

    def allowed(self, header: str | None) -> bool | None:
        """True for good credentials (or basic auth off), False for others, None when too many checks
        are already waiting for bcrypt (answer 429: try again)."""
        if not self.users:
            return True
        checked = self._key(header)
        if checked is None:
            return False
        key, password, hashed = checked
        with self._lock:
            if key in self._good:
                return True
            if key in self._bad:
                return False
            if self._waiting >= BCRYPT_WAITING:
                return None
            self._waiting += 1
        import bcrypt

        try:
            with self._bcrypt:
                started = self._clock()
                # bcrypt reads 72 bytes at most; a longer password is refused (as Go's bcrypt does) after
                # the same work as any other.
                matches = bcrypt.checkpw(password[:72], hashed or self._decoy)
                spent = self._clock() - started
        finally:
            with self._lock:
                self._waiting -= 1
        if spent < self.slowest:
            self._sleep(self.slowest - spent)  # outside the lock: padding costs no one else time
        good = hashed is not None and matches and len(password) <= 72
        with self._lock:
            cache = self._good if good else self._bad
            if len(cache) >= self.CACHE_SIZE:
                del cache[next(iter(cache))]
            cache[key] = None
        return good


class RateLimit:
    """A token bucket: `rate` requests a second on average, `burst` more at once (exporter-toolkit's
    rate_limit, as golang.org/x/time/rate counts it)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate, max(burst, 1), clock
        self._tokens, self._last = float(self.burst), clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self.clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
            if self._tokens < 1:
                return False
            self._tokens -= 1
            return True
