"""A client of the Prometheus HTTP API that every store speaks: Prometheus, Thanos Query, Mimir,
VictoriaMetrics, Grafana Cloud. The live analyzer and `gpulens report --prometheus` both read through it.

What it takes care of, so that its callers see series or one clear error:
- Credentials (`StoreAuth`): a bearer token file (re-read when it changes, as projected service-account
  tokens rotate), basic auth, extra headers (Mimir's `X-Scope-OrgID` tenant), a CA file and a client
  certificate. They never appear in an error or a log line: errors name the store by its URL, redacted.
- Range queries past a store's limit per query: Prometheus refuses more than 11,000 points per series
  (`exceeded maximum resolution`), VictoriaMetrics more than `-search.maxPointsPerTimeseries` (30,000
  by default) or `-search.maxSamplesPerQuery` samples, Mimir more than `max_fetched_samples_per_query`
  or chunks, Prometheus more than `--query.max-samples`. A range is cut to MAX_POINTS_PER_SERIES
  points beforehand, and halved again when the store still refuses it for size.
- Failures that pass: 429, 502, 503 and 504 answers, time-outs, refused or broken connections, and a JSON
  answer cut short (a proxy such as vmauth or nginx that ends an answer it has begun cannot change its
  HTTP 200 any more) are retried with a doubling backoff (RETRIES times, honouring Retry-After up to
  --prometheus.timeout: a store cannot make a report or a cycle wait longer than a request may take).
  Thanos is asked for `partial_response=false` so that a store behind it that fails makes the query fail
  rather than answer in part, and an answer that still carries warnings (an incomplete result) is retried
  and then refused.
- Answers bounded in size and requests in time: an answer is read as it arrives, at most
  MAX_ANSWER_BYTES once decoded (past it a range is asked again in halves, an instant query refused, so
  that a store answering millions of series cannot take the analyzer's memory), and a request ends
  --prometheus.timeout after it began however slowly the store trickles its answer. Compressed answers
  are inflated only as far as that bound, so a small gzip bomb costs no more than a large answer.
- Answers compressed where that saves more than it costs (`--prometheus.compression`, `accept_encoding`):
  gzip over links that are slow or metered, none on this host or the cluster's network, where the store
  would spend more CPU compressing than the bytes take to cross.
- Redirects are not followed: the credentials and headers (an API key) would go with them to whatever
  host the store names. A redirect is an error naming where it points, so the URL can be given instead.
"""

from __future__ import annotations

import email.utils
import gc
import ipaddress
import math
import os
import re
import socket
import threading
import time
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import numpy as np
import orjson
import requests
import urllib3

from gpulens.core.config import ConfigError, read_secret, redact

#: Prometheus' limit of points per series in one range query (promql: "exceeded maximum resolution of
#: 11,000 points per timeseries"); VictoriaMetrics' default is 30,000, Thanos and Mimir pass Prometheus'.
MAX_POINTS_PER_SERIES = 11_000
#: Bytes of one answer, decoded, that the client reads (about ten times that once parsed): past it a range
#: query is asked again in halves, an instant query refused. 10,000 GPUs' ten-minute window is about 15 MB.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: Times a failure that may pass (429, 502-504, a time-out, a refused connection) is retried by a report.
#: The live analyzer retries once: its next cycle is the next try.
RETRIES = 3
#: --prometheus.compression: how answers are asked for (accept_encoding).
COMPRESSIONS = ("auto", "gzip", "none")
#: Seconds before the first retry; each next one waits twice as long.
RETRY_SECONDS = 1.0
#: Words of the errors with which stores refuse a query for its size, in Prometheus (422 "exceeded
#: maximum resolution", "query processing would load too many samples into memory"), VictoriaMetrics
#: ("cannot select more than -search.maxSamplesPerQuery", "too many points", "exceeds
#: -search.maxPointsPerTimeseries"), Mimir and Thanos ("the query exceeded the maximum number of chunks",
#: "fetched samples", "exceeded ... max_fetched").
_TOO_BIG = re.compile(
    r"maximum resolution|too many samples|maxSamplesPerQuery|maxPointsPerTimeseries|too many points|"
    r"exceeded the maximum number of|max.fetched|maximum number of samples|max_samples|exceeds the limit",
    re.IGNORECASE,
)
_RAISE_THE_LIMIT = (
    "Raise the store's limit of samples per query (Prometheus --query.max-samples, VictoriaMetrics "
    "-search.maxSamplesPerQuery, Mimir max_fetched_samples_per_query), or select fewer GPUs "
    "(--prometheus.selector, --prometheus.dcgm-selector)"
)
_RETRY_STATUS = {429, 502, 503, 504}
_NOT_THE_API = (
    "is this the Prometheus HTTP API? (Thanos Query, Mimir's /prometheus prefix and VictoriaMetrics serve it)"
)
#: Refusals of the credentials by a store that does not answer 401 or 403 for them: vmauth answers 400
#: "cannot find the provided auth token"; Mimir answers 401 "no org id" without a tenant.
_AUTH_REFUSED = re.compile(r"auth token|unauthori[sz]ed|invalid credentials|no org id", re.IGNORECASE)


class StoreError(Exception):
    """The store could not answer; the message names the store, the query and what to do."""


@dataclass(frozen=True)
class StoreAuth:
    """How to reach a store behind authentication, from the `--prometheus.*` flags."""

    bearer_token_file: str = ""
    basic_auth_username: str = ""
    basic_auth_password_file: str = ""
    #: Extra headers, as (name, value): Mimir's tenant (`X-Scope-OrgID`), a proxy's key.
    headers: tuple[tuple[str, str], ...] = ()
    #: PEM file of the CA that signed the store's certificate; "" trusts the system's CAs.
    ca_file: str = ""
    #: PEM files of a client certificate and its key, for stores that require mutual TLS.
    cert_file: str = ""
    key_file: str = ""

    @staticmethod
    def parse_header(text: str) -> tuple[str, str]:
        """'Name: value' (a --prometheus.header flag) as (name, value); ConfigError when it is not one."""
        name, sep, value = text.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
            raise ConfigError(f"--prometheus.header {text!r} is not 'Name: value' (e.g. 'X-Scope-OrgID: team-a')")
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            raise ConfigError(f"--prometheus.header {name}: HTTP header values must be Latin-1 text") from None
        if "\r" in value or "\n" in value:
            raise ConfigError(f"--prometheus.header {name}: a value may not contain a line break")
        return name, value

    def check(self) -> None:
        """Refuse, at start, settings that could never work: files that cannot be read, a certificate
        without its key, a password without a user. The messages name the flag and the fix."""
        if bool(self.basic_auth_username) != bool(self.basic_auth_password_file):
            raise ConfigError(
                "--prometheus.basic-auth.username and --prometheus.basic-auth.password-file go together: give both"
            )
        if self.bearer_token_file and self.basic_auth_username:
            raise ConfigError("give either a bearer token file or basic auth for Prometheus, not both")
        if bool(self.cert_file) != bool(self.key_file):
            raise ConfigError("--prometheus.cert-file and --prometheus.key-file go together: give both")
        for flag, path in (
            ("--prometheus.bearer-token-file", self.bearer_token_file),
            ("--prometheus.basic-auth.password-file", self.basic_auth_password_file),
            ("--prometheus.ca-file", self.ca_file),
            ("--prometheus.cert-file", self.cert_file),
            ("--prometheus.key-file", self.key_file),
        ):
            if path:
                read_secret(path, flag)


def _not_connected(error: BaseException) -> str:
    """What kept a connection from being made ("connection refused: nothing listens there", "its host name does
    not resolve"), from the chain of causes requests and urllib3 wrap it in; "" where a connection was made (it
    broke or timed out later) or the cause is another."""
    seen: set[int] = set()
    causes = [error]
    while causes:
        cause = causes.pop()
        if id(cause) in seen:
            continue
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused: nothing listens there"
        if isinstance(cause, socket.gaierror):
            return f"its host name does not resolve ({cause.strerror})"
        linked = (cause.__cause__, cause.__context__, getattr(cause, "reason", None), *cause.args)
        causes += [c for c in linked if isinstance(c, BaseException)]
    return ""


class Store:
    """One store's HTTP API, with its credentials. `read_bytes` counts every answer read, inflated;
    `wire_bytes` the same answers as they crossed the network (compressed, where the store compressed them)."""

    def __init__(
        self,
        url: str,
        auth: StoreAuth | None = None,
        timeout: float = 30.0,
        max_points: int = MAX_POINTS_PER_SERIES,
        retries: int = RETRIES,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        sleep: Callable[[float], None] | None = None,
        compression: str = "auto",
    ):
        self.url = url.rstrip("/")
        self.auth = auth or StoreAuth()
        self.timeout = timeout
        self.max_points = max_points
        self.retries = retries
        self.max_answer_bytes = max_answer_bytes
        #: Set by interrupt(): waits between retries end at once, and no further attempt is made.
        self._interrupted = threading.Event()
        self.sleep = sleep or self._interrupted.wait
        self.read_bytes = 0
        self.wire_bytes = 0
        self._counting = threading.Lock()  # queries are answered two at a time (series.QUERIES_IN_FLIGHT)
        self.session = requests.Session()
        encoding = accept_encoding(self.url, compression)
        self.session.headers.update({"Accept-Encoding": encoding, **dict(self.auth.headers)})
        # Given with each request, not set on the session: requests lets REQUESTS_CA_BUNDLE (set on many
        # systems) override a session's CA, and the store's own CA would be silently ignored.
        self._verify: str | bool = self.auth.ca_file or True
        self._cert = (self.auth.cert_file, self.auth.key_file) if self.auth.cert_file else None
        if self.auth.basic_auth_username:
            password = read_secret(self.auth.basic_auth_password_file, "--prometheus.basic-auth.password-file")
            self.session.auth = (self.auth.basic_auth_username, password)
        self._token: tuple[float, str] | None = None  # (the file's mtime, its token)
        #: Whether the store has answered a request (any status): until it has, a connection it refuses is
        #: not retried, as a store that went down during a report is.
        self._answered = False

    @property
    def name(self) -> str:
        """The store as errors name it: its URL, without credentials."""
        return f"Prometheus at {redact(self.url)}"

    def close(self) -> None:
        self.interrupt()
        self.session.close()

    def interrupt(self) -> None:
        """End a wait between retries now and make no further attempt (a shutdown): the query under way
        raises StoreError once its request ends."""
        self._interrupted.set()

    def query(self, expr: str, at: float) -> list[dict]:
        """An instant query's series at unix time `at`."""
        try:
            return self._api("query", {"query": expr, "time": _time(at)})
        except _TooBig as e:
            raise StoreError(f"{self.name} refuses {expr!r}: {e.reason}. {e.fix}") from None

    def samples(self, selector: str, at: float) -> list[dict]:
        """The raw samples of a range selector (`x[10m]`) to unix time `at`: each series with its samples at
        the times they were scraped (an instant query's matrix), not on a step grid."""
        try:
            return self._api("query", {"query": selector, "time": _time(at)}, kind="matrix")
        except _TooBig as e:
            raise StoreError(f"{self.name} refuses {selector!r}: {e.reason}. {e.fix}") from None

    def label_values(self, label: str, selector: str, start: float, end: float) -> list[str]:
        """The values `label` takes in the series of `selector` between `start` and `end` (unix seconds):
        the store answers from its index, reading no sample (/api/v1/label/<name>/values, with match[]:
        Prometheus 2.24+, Thanos, Mimir and VictoriaMetrics)."""
        params = {"match[]": selector, "start": _time(start), "end": _time(end)}
        what = f"the values of {label} in {selector}"
        try:
            values = self._api(f"label/{label}/values", params, what=what)
        except _TooBig as e:
            raise StoreError(f"{self.name} refuses {what!r}: {e.reason}") from None
        if not all(type(v) is str for v in values):
            raise StoreError(f"{self.name} answered the values of {label} with some that are not strings")
        return cast(list[str], values)

    def series(self, selector: str, start: float, end: float) -> list[dict[str, str]]:
        """The label sets of the series `selector` matches between `start` and `end` (unix seconds), from
        the store's index without reading a sample (/api/v1/series: every Prometheus HTTP API)."""
        params = {"match[]": selector, "start": _time(start), "end": _time(end)}
        what = f"the series of {selector}"
        try:
            found = self._api("series", params, what=what)
        except _TooBig as e:
            raise StoreError(f"{self.name} refuses {what!r}: {e.reason}") from None
        if not all(isinstance(s, dict) and all(type(v) is str for v in s.values()) for s in found):
            raise StoreError(f"{self.name} answered {what} with label sets that are not of strings: {_NOT_THE_API}")
        return cast(list[dict[str, str]], found)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        """A range query's series from `start` to `end` (unix seconds, on the step grid), cut into ranges
        of at most max_points points per series, and halved again while the store refuses one for its
        size. The series of the pieces are joined by their labels, in time order."""
        result: list[dict] = []
        span = (self.max_points - 1) * step
        at = start
        while at <= end:
            until = min(end, at + span)
            piece = self._range(expr, at, until, step)
            result = _joined(result, piece) if result else piece  # one piece (a cycle's new steps): as it came
            at = until + step
        return result

    def _range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        params = {"query": expr, "start": _time(start), "end": _time(end), "step": f"{step:g}"}
        try:
            return self._api("query_range", params)
        except _TooBig as e:
            steps = round((end - start) / step)
            if steps < 1:
                raise StoreError(f"{self.name} refuses {expr!r} even for a single step: {e.reason}. {e.fix}") from None
            middle = start + (steps // 2) * step
            return _joined(self._range(expr, start, middle, step), self._range(expr, middle + step, end, step))

    def _api(self, endpoint: str, params: dict[str, str], what: str = "", kind: str = "") -> list:
        """The series of /api/v1/<endpoint> (or, for label values, its list), retried while the failure may
        pass. `what` names the request in errors (default: its query); `kind` the result type expected (default:
        a range query's matrix, an instant query's vector)."""
        # Thanos answers in part when a store behind it fails, unless told not to; the others ignore it.
        params = {**params, "partial_response": "false"}
        expr = what or params["query"]
        for attempt in range(self.retries + 1):
            if self._interrupted.is_set():
                raise StoreError(f"{self.name}: stopped before {expr!r} was answered (gpulens is shutting down)")
            wait = RETRY_SECONDS * 2**attempt
            try:
                deadline = time.monotonic() + self.timeout
                # Queries are form POSTs (no URL length limit); label values are GET only (Prometheus: 405),
                # and so, for the stores that take nothing else, is the series index.
                get = endpoint.startswith("label/") or endpoint == "series"
                with self.session.request(
                    "GET" if get else "POST",
                    f"{self.url}/api/v1/{endpoint}",
                    params=params if get else None,
                    data=None if get else params,
                    headers=self._bearer(),
                    timeout=self.timeout,
                    verify=self._verify,
                    cert=self._cert,
                    stream=True,
                    allow_redirects=False,
                ) as response:
                    content = read_answer(response, self.max_answer_bytes, deadline)
                    wire = response.raw.tell()  # the body's bytes as they came, before inflating
            except AnswerTooBig as e:
                raise _TooBig(
                    str(e),
                    "Select fewer GPUs (--prometheus.selector, --prometheus.dcgm-selector) or share them "
                    "between analyzers (--shard.count)",
                ) from None
            except (requests.Timeout, AnswerLate):
                problem = f"{self.name} did not answer {expr!r} whole within {self.timeout:g} s"
                fix = (
                    "the store is overloaded or the query too large: raise --prometheus.timeout or read a shorter span"
                )
            except requests.exceptions.SSLError as e:
                raise StoreError(
                    redact(
                        f"cannot reach {self.name} over TLS: {e}. Check --prometheus.ca-file, --prometheus.cert-file"
                    )
                ) from None
            except requests.RequestException as e:
                unreachable = _not_connected(e)
                if unreachable and not self._answered:  # not a store restarting: a wrong URL, or none up yet
                    raise StoreError(
                        redact(f"cannot reach {self.name}: {unreachable}: check the URL and that the store is up")
                    ) from None
                problem = redact(f"cannot reach {self.name}: {unreachable or e}")
                fix = "check the URL and that the store is up"
            else:
                self._answered = True
                with self._counting:
                    self.read_bytes += len(content)
                    self.wire_bytes += wire
                outcome = self._outcome(response, content, expr, endpoint, kind)
                if isinstance(outcome, list):
                    return outcome
                problem, fix, retry_after = outcome
                if retry_after is not None:
                    wait = max(wait, min(retry_after, self.timeout))
            if attempt < self.retries:
                self.sleep(wait)
        tries = f" (tried {self.retries + 1} times)" if self.retries else ""
        raise StoreError(f"{problem}{tries}: {fix}")

    def _outcome(
        self, response: requests.Response, content: bytes, expr: str, endpoint: str, wanted: str = ""
    ) -> list | tuple[str, str, float | None]:
        """The series of a good answer (`content`, its body), or a label's values; _TooBig or StoreError for
        a final refusal; (problem, fix, seconds to wait or None) for one worth retrying."""
        status = response.status_code
        text = content[:300].decode("utf-8", "replace")
        if 300 <= status < 400:
            raise StoreError(
                f"{self.name} redirects {expr!r} (HTTP {status}) to {redact(response.headers.get('Location', '?'))}: "
                "gpulens follows no redirect, since the credentials and headers would go with it to the host it "
                "names; give the URL it points to as the store's URL"
            )
        if status in (401, 403) or (status == 400 and _AUTH_REFUSED.search(text)):
            raise StoreError(
                f"{self.name} refused the credentials (HTTP {status}) for {expr!r}: check "
                "--prometheus.bearer-token-file or --prometheus.basic-auth.*, and the tenant header "
                "(--prometheus.header 'X-Scope-OrgID: ...') where the store has tenants"
            )
        try:
            body = _decoded(content)
        except orjson.JSONDecodeError:
            body = None
        error = self._scrub(str(body.get("error", "")) if isinstance(body, dict) else text.strip())
        if body is not None and not isinstance(body, dict):
            error = "not an object of the Prometheus HTTP API"
        if status in _RETRY_STATUS:
            return (
                f"{self.name} answered HTTP {status} to {expr!r}" + (f" ({error})" if error else ""),
                "the store is overloaded or restarting: try again later, or read a shorter span",
                retry_after_seconds(response.headers.get("Retry-After", "")),
            )
        if _TOO_BIG.search(error):
            raise _TooBig(error, _RAISE_THE_LIMIT)
        if body is None and 200 <= status < 300 and content.lstrip().startswith(b'{"'):
            return (
                f"{self.name} answered {expr!r} with JSON cut short after {len(content):,} bytes",
                "a proxy between gpulens and the store (vmauth, nginx, a load balancer) ended the answer early: "
                "check its response time-out and size limit, or read a shorter span",
                None,
            )
        if body is None:
            raise StoreError(f"{self.name} answered HTTP {status} with no JSON to {expr!r}: {_NOT_THE_API}")
        if not isinstance(body, dict) or body.get("status") != "success":
            raise StoreError(f"{self.name} refused {expr!r}: {error or 'no reason given'} (HTTP {status})")
        warnings = body.get("warnings")
        if warnings:
            return (
                f"{self.name} answered {expr!r} in part: {'; '.join(map(str, warnings))}",
                "a store behind it failed (Thanos: a store or sidecar; Mimir: an ingester); a report would be "
                "silently incomplete, so gpulens stops",
                None,
            )
        data = body.get("data")
        if endpoint.startswith("label/") or endpoint == "series":  # a list of strings or of label sets
            if not isinstance(data, list):
                raise StoreError(f"{self.name} answered {expr} without a list in data: {_NOT_THE_API}")
            return data
        if not isinstance(data, dict):
            data = {}
        result = data.get("result")
        if not isinstance(result, list) or not all(
            isinstance(s, dict) and isinstance(s.get("metric"), dict) for s in result
        ):
            raise StoreError(f"{self.name} answered {expr!r} without a list of series in data.result")
        kind, wanted = data.get("resultType"), wanted or ("matrix" if endpoint == "query_range" else "vector")
        if kind != wanted:
            raise StoreError(
                f"{self.name} answered {expr!r} with a {kind!r} where the Prometheus HTTP API gives a {wanted!r}: "
                f"{_NOT_THE_API}"
            )
        values = "values" if kind == "matrix" else "value"
        for series in result:
            if not isinstance(series.get(values), list | np.ndarray) or not all(
                type(v) is str for v in series["metric"].values()
            ):
                raise StoreError(
                    f"{self.name} answered {expr!r} with a series that is not one of the Prometheus HTTP API "
                    f"(label values that are not strings, or no {values!r}): {_shown(series)}"
                )
        return result

    def _scrub(self, text: str) -> str:
        """A store's own words with any credential it echoes removed (vmauth quotes a token it refuses)."""
        secrets = [self._token[1]] if self._token else []
        if isinstance(self.session.auth, tuple):
            secrets.append(self.session.auth[1])
        secrets.extend(value for _, value in self.auth.headers)
        for secret in secrets:
            if secret:
                text = text.replace(secret, "<redacted>")
        return redact(text)

    def _bearer(self) -> dict[str, str] | None:
        """The Authorization header of the bearer token file, read again whenever the file changes."""
        path = self.auth.bearer_token_file
        if not path:
            return None
        try:
            mtime = os.stat(path).st_mtime
        except OSError as e:
            raise StoreError(f"--prometheus.bearer-token-file {path}: cannot read it ({e.strerror})") from None
        if self._token is None or self._token[0] != mtime:
            self._token = (mtime, read_secret(path, "--prometheus.bearer-token-file"))
        return {"Authorization": f"Bearer {self._token[1]}"}


def accept_encoding(url: str, compression: str) -> str:
    """The Accept-Encoding a store at `url` is sent, for a --prometheus.compression of auto, gzip or none.

    gzip: "gzip, deflate", the encodings read_answer inflates within its bound (requests would also offer
    br and zstd where their modules are installed). none: "identity". auto: none for a store on this host
    (a loopback address or localhost) or on the cluster's own network (a Kubernetes service, `*.svc` or
    `*.svc.<cluster domain>`, or a name without a dot: a service of the same namespace, a Compose service),
    gzip elsewhere. Compressing a range query's answer costs the store more than evaluating it: Debian's
    Prometheus 2.42 spent 21.7 CPU-s answering a day of 1,000 GPUs' report gzipped against 11.5 plain, for
    answers ten times smaller (benchmarks/store_report.py: 59 MB against 610 MB). That is about 50 MB saved
    per CPU-second: on a link of 1 Gbit/s or more the bytes cross faster than they compress."""
    if compression not in COMPRESSIONS:
        raise ConfigError(f"--prometheus.compression {compression!r} is not one of {', '.join(COMPRESSIONS)}")
    if compression == "auto":
        compression = "none" if _on_local_network(urlsplit(url).hostname or "") else "gzip"
    return "identity" if compression == "none" else "gzip, deflate"


def _on_local_network(host: str) -> bool:
    """A host on this machine or the cluster's network, by its name or address (accept_encoding)."""
    host = host.lower().rstrip(".")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost" or "." not in host or host.endswith(".svc") or ".svc." in host


class _TooBig(Exception):
    """A query too big for the store or for gpulens: a smaller range may pass. `fix` for when none does."""

    def __init__(self, reason: str, fix: str):
        super().__init__(reason)
        self.reason, self.fix = reason, fix


def _decoded(content: bytes) -> object:
    """The JSON of an answer: a matrix as _matrix reads it (its values arrays), else decoded with Python's
    cyclic garbage collector paused: an answer is millions of new lists and strings, none cyclic, and each few
    hundred of them set off a collection of the whole heap (a range answer of 10,000 GPUs, 10 MB, decodes four
    times faster without them; a first cycle at that size spent 10 of its 16 s collecting)."""
    fast = _matrix(content)
    if fast is not None:
        return fast
    enabled = gc.isenabled()
    gc.disable()
    try:
        return orjson.loads(content)
    finally:
        if enabled:
            gc.enable()


def series_points(series: dict) -> np.ndarray:
    """A range answer's series' points as an (n, 2) float64 array of (unix seconds, value): _matrix's array as
    it is, or the JSON's [t, "v"] pairs converted."""
    return np.asarray(series["values"], dtype=np.float64).reshape(-1, 2)


def counted_times(series: dict) -> np.ndarray:
    """The times at which a series of a count_over_time() answer counted a sample."""
    points = series_points(series)
    return points[points[:, 1] >= 1, 0]


def series_key(labels: dict[str, str]) -> frozenset[tuple[str, str]]:
    """A series' labels without its name (which functions drop), as a key: the same series in the answers to
    X and to count_over_time(X[...])."""
    return frozenset((name, value) for name, value in labels.items() if name != "__name__")


_RESULT = b'"result":['
_METRIC = b'{"metric":'
_VALUES = b',"values":['


def _matrix(content: bytes) -> dict | None:
    """A matrix answer with each series' values as an (n, 2) float64 array of (unix seconds, value), read
    without the JSON's lists and strings of each point (_numbers): 15.5 hours of 1,000 GPUs' series (35 MB)
    in 0.35 s where decoding the JSON took 1.3 and its 1.9 million [time, "value"] pairs 0.5 more to convert.
    Each series must be exactly `{"metric":{...},"values":[[t,"v"],...]}`, as every store of the Prometheus
    HTTP API writes it (a `"` inside a label value is escaped, so the markers cannot occur in one), and the
    rest of the answer valid JSON; None for anything else, which is then decoded as JSON."""
    head = content[:512]
    if b'"resultType":"matrix"' not in head or (start := content.find(_RESULT)) < 0:
        return None
    at = start + len(_RESULT)
    series: list[dict] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # numpy 1's "could not be read to its end"
        while not content.startswith(b"]", at):
            if series:
                if not content.startswith(b",", at):
                    return None
                at += 1
            values_at = content.find(_VALUES, at)
            if not content.startswith(_METRIC, at) or values_at < 0:
                return None
            try:
                metric = orjson.loads(content[at + len(_METRIC) : values_at])
            except orjson.JSONDecodeError:
                return None
            first = values_at + len(_VALUES)
            end = first if content.startswith(b"]", first) else content.find(b"]]", first) + 1
            if end <= 0 or not content.startswith(b"]}", end) or not isinstance(metric, dict):
                return None
            numbers = _numbers(content[first:end].translate(None, b'[]"'))
            if numbers is None or len(numbers) % 2:
                return None  # a value that is not a number
            series.append({"metric": metric, "values": numbers.reshape(-1, 2)})
            at = end + 2
    try:
        body = orjson.loads(content[:start] + b'"result":[]' + content[at + 1 :])
    except orjson.JSONDecodeError:
        return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, dict) or data.get("result") != []:
        return None
    data["result"] = series
    return body


def _numbers(text: bytes) -> np.ndarray | None:
    """The numbers of `text`, "t,v,t,v,...", as float64; None where one is not a number. orjson reads them
    twice as fast as numpy's text parser (a day of 1,000 GPUs' answers is 800 MB of them), but not NaN and
    infinities, which Prometheus writes as "NaN", "+Inf" and "-Inf": numpy reads an answer holding one. ("-0"
    reads as 0, the same value to every comparison.)"""
    if not text:
        return np.zeros(0)
    # JSON's other words would be read as numbers (null as NaN, true as 1): none is a value.
    if b"l" not in text and b"u" not in text:
        try:
            return np.array(orjson.loads(b"[" + text + b"]"), dtype=np.float64)
        except (orjson.JSONDecodeError, TypeError, ValueError, OverflowError):
            pass
    try:
        numbers = np.fromstring(text, sep=",")
    except ValueError:  # numpy 2: a value that is not a number
        return None
    return numbers if len(numbers) == text.count(b",") + 1 else None


class AnswerTooBig(Exception):
    """An answer larger than its reader takes (read_answer)."""


class AnswerLate(Exception):
    """An answer that did not arrive whole within its request's time (read_answer)."""


def read_answer(response: requests.Response, max_bytes: int, deadline: float) -> bytes:
    """The body of a streamed answer, inflated (gzip or deflate), read as it arrives: AnswerTooBig past
    `max_bytes` once inflated, AnswerLate past `deadline` (time.monotonic()), checked between the server's
    writes however small, so that neither a huge answer, nor a small one that inflates to gigabytes, nor
    one trickled a byte at a time can hold the reader. Inflating is done here, a bounded piece at a time,
    not by urllib3, which inflates each piece it reads whole."""
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", "x-gzip", "deflate", ""):
        raise AnswerTooBig(f"its answer is in the {encoding!r} encoding, which gpulens does not read")
    # wbits 32 + 15: a gzip or zlib stream, as its header says (servers send both as "deflate").
    inflater = None if encoding in ("identity", "") else zlib.decompressobj(32 + zlib.MAX_WBITS)
    parts, size = [], 0
    while raw := _read_some(response):
        while raw:
            if inflater is None:
                chunk, raw = raw, b""
            else:
                chunk, raw = inflater.decompress(raw, max_bytes - size + 1), inflater.unconsumed_tail
            size += len(chunk)
            if size > max_bytes:
                raise AnswerTooBig(f"its answer is larger than the {max_bytes:,} bytes gpulens reads at once")
            parts.append(chunk)
        if time.monotonic() > deadline:
            raise AnswerLate
    if inflater is not None:
        parts.append(inflater.flush())  # what the input already given still holds: at most a few bytes
    return b"".join(parts)


def _read_some(response: requests.Response) -> bytes:
    """The next bytes the server wrote (b"" at the answer's end). urllib3's own errors, which requests
    wraps only in its iter_content, become those of requests: a connection broken mid-answer (the body
    shorter than its Content-Length, or a chunk never ended) is requests.ConnectionError, a read that
    timed out requests.Timeout, so that callers retry them as any other."""
    try:
        return response.raw.read1(1 << 16, decode_content=False)
    except urllib3.exceptions.ReadTimeoutError as e:
        raise requests.Timeout(str(e)) from None
    except urllib3.exceptions.HTTPError as e:
        raise requests.ConnectionError(f"the connection broke before the answer was whole ({e})") from None


def retry_after_seconds(header: str) -> float | None:
    """Seconds a Retry-After header asks to wait (RFC 9110: a number of seconds or an HTTP date); None when
    it is absent or neither."""
    header = header.strip()
    if header.isdigit():
        return float(header)
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError, IndexError):
        return None
    seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _shown(series: dict) -> str:
    """A series of an answer as an error shows it: its first 200 characters."""
    text = repr(series)
    return text if len(text) <= 200 else text[:200] + "..."


def _joined(first: list[dict], second: list[dict]) -> list[dict]:
    """The series of two consecutive ranges of one query, joined by their labels."""
    by_labels = {tuple(sorted(s["metric"].items())): s for s in first}
    for series in second:
        held = by_labels.setdefault(tuple(sorted(series["metric"].items())), series)
        if held is not series:
            held["values"] = np.concatenate([series_points(held), series_points(series)])
    return list(by_labels.values())


def _time(seconds: float) -> str:
    """Unix seconds as the API takes them, exactly: no exponent, no float noise."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".")
