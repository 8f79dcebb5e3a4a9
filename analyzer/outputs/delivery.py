"""Where each team's digest goes, and taking it there: e-mail over SMTP (STARTTLS or implicit TLS, credentials
from a file such as a mounted Secret), Slack and Microsoft Teams incoming webhooks (their URLs, which are
credentials, from files or the settings). A delivery that fails is retried, then logged; the others are made
all the same (docs/showback.md, "The weekly digest").

The settings file (`gpulens digest --digest.config FILE`; deploy/kubernetes/digest.example.yaml):

    smtp: {server: smtp.example.com:587, tls: starttls, from: gpulens@example.com,
           username: gpulens, password_file: /etc/gpulens/smtp/password}
    teams:                                     # by the team's name as the analyzer reads it (--team-label)
      search: {email: [search-leads@example.com], slack_url_file: /etc/gpulens/webhooks/search}
    default: {email: [gpu-platform@example.com]}   # the teams not listed
"""

from __future__ import annotations

import email.policy
import logging
import re
import smtplib
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from functools import partial
from typing import Any

from gpulens.analyzer.outputs.digest import TeamDigest
from gpulens.core.config import ConfigError, read_secret, read_yaml
from gpulens.core.schema import ListOf, MapOf, Record, Text, validate

log = logging.getLogger(__name__)

TLS_MODES = ("starttls", "tls", "none")
#: The ports each TLS mode is served on where the server names none (RFC 8314: 465 for implicit TLS, 587 for
#: submission with STARTTLS; 25 for a relay).
DEFAULT_PORTS = {"starttls": 587, "tls": 465, "none": 25}
#: Seconds an SMTP exchange or a webhook's POST may take before it is an attempt failed.
TIMEOUT_SECONDS = 30.0
CHANNELS = ("email", "slack", "msteams")


@dataclass(frozen=True)
class Smtp:
    """An SMTP server to submit the digests through."""

    host: str
    port: int
    tls: str
    sender: str
    username: str = ""
    password_file: str = ""
    #: The CA (PEM) its certificate is checked against, where not one the system trusts.
    ca_file: str = ""


@dataclass(frozen=True)
class Recipients:
    """Where one team's digest goes: e-mail addresses, and the webhooks' URLs (or the files holding them)."""

    email: tuple[str, ...] = ()
    slack_url: str = ""
    slack_url_file: str = ""
    msteams_url: str = ""
    msteams_url_file: str = ""


@dataclass(frozen=True)
class DigestSettings:
    """Where the digests go: the SMTP server, and each team's recipients (`default` for the teams not named)."""

    smtp: Smtp | None = None
    teams: dict[str, Recipients] = field(default_factory=dict)
    default: Recipients | None = None

    def recipients(self, team: str) -> Recipients | None:
        return self.teams.get(team, self.default)

    @classmethod
    def load(cls, path: str) -> DigestSettings:
        """The settings in `path` (none when ""); ConfigError naming the file, the key and the fix."""
        if not path:
            return cls()
        source = f"--digest.config {path}"
        document = validate(read_yaml(path, "--digest.config"), _schema(), source, empty={})
        smtp = None
        if "smtp" in document:
            smtp = _smtp(document["smtp"], source)
        teams = {
            name: _recipients(entry, f"{source}: teams.{name}") for name, entry in document.get("teams", {}).items()
        }
        default = _recipients(document["default"], f"{source}: default") if "default" in document else None
        for where, r in [*((f"teams.{n}", r) for n, r in teams.items()), ("default", default)]:
            if r is not None and r.email and smtp is None:
                raise ConfigError(f"{source}: {where}.email: e-mail needs an smtp server: add smtp (server, from)")
        return cls(smtp, teams, default)


def _schema() -> Record:
    email = Text(valid=lambda s: "@" in s and " " not in s, what="an e-mail address")
    recipients = Record(
        {
            "email": ListOf(email, single=True),
            **{key: Text(what="a file's path") for key in ("slack_url_file", "msteams_url_file")},
            # Not held to URL_PATTERN's 256 characters: a Teams Workflows URL with its signature is longer.
            **{key: Text(valid=_is_webhook, what="an http(s) URL") for key in ("slack_url", "msteams_url")},
        },
        what="recipients",
    )
    smtp = Record(
        {
            "server": Text(what="host:port"),
            "tls": Text(choices=TLS_MODES),
            "from": email,
            "username": Text(),
            "password_file": Text(what="a file's path"),
            "ca_file": Text(what="a file's path"),
        },
        required=("server", "from"),
        what="an SMTP server",
    )
    return Record({"smtp": smtp, "teams": MapOf(recipients), "default": recipients})


def _is_webhook(text: str) -> bool:
    return re.fullmatch(r"https?://[^\s/?#]+\S*", text) is not None and len(text) <= MAX_WEBHOOK_URL


#: The longest webhook URL taken: a Teams Workflows URL with its signature is about 300 characters.
MAX_WEBHOOK_URL = 2048


def _smtp(entry: dict, source: str) -> Smtp:
    tls = entry.get("tls", "starttls")
    host, _, port = entry["server"].rpartition(":")
    if not host or not port.isdigit():
        host, port = entry["server"], str(DEFAULT_PORTS[tls])
    if tls == "none" and entry.get("username"):
        raise ConfigError(
            f"{source}: smtp.username with tls none would send the password in clear: use tls starttls or tls"
        )
    if bool(entry.get("username")) != bool(entry.get("password_file")):
        raise ConfigError(f"{source}: smtp.username and smtp.password_file go together: give both")
    for key in ("password_file", "ca_file"):
        if entry.get(key):
            read_secret(entry[key], f"{source}: smtp.{key}")
    return Smtp(
        host,
        int(port),
        tls,
        entry["from"],
        entry.get("username", ""),
        entry.get("password_file", ""),
        entry.get("ca_file", ""),
    )


def _recipients(entry: dict, where: str) -> Recipients:
    for channel in ("slack", "msteams"):
        if entry.get(f"{channel}_url") and entry.get(f"{channel}_url_file"):
            raise ConfigError(f"{where}: {channel}_url and {channel}_url_file: give one")
        if entry.get(f"{channel}_url_file"):
            read_secret(entry[f"{channel}_url_file"], f"{where}.{channel}_url_file")
    return Recipients(
        tuple(entry.get("email", [])),
        entry.get("slack_url", ""),
        entry.get("slack_url_file", ""),
        entry.get("msteams_url", ""),
        entry.get("msteams_url_file", ""),
    )


@dataclass(frozen=True)
class Delivery:
    """One digest taken (or not) to one channel of one team."""

    team: str
    #: "email to a@example.com, b@example.com", "slack", "msteams".
    channel: str
    delivered: bool
    attempts: int
    #: Why the last attempt failed ("" where delivered).
    error: str = ""


@dataclass(frozen=True)
class Retry:
    """How often a failed delivery is tried again, and how long it waits first (doubling each time)."""

    retries: int = 3
    wait_seconds: float = 5.0
    sleep: Callable[[float], None] = time.sleep


class Refused(Exception):
    """A delivery the far end refused in a way another attempt will not change (a 4xx but 429, a bad login)."""


def deliver(digest: TeamDigest, settings: DigestSettings, retry: Retry) -> list[Delivery]:
    """`digest` sent to every channel its team has (none where the settings name none), each retried alone."""
    to = settings.recipients(digest.team)
    if to is None:
        return []
    sends: list[tuple[str, Callable[[], None]]] = []
    if to.email and settings.smtp is not None:
        smtp = settings.smtp
        sends.append((f"email to {', '.join(to.email)}", lambda: send_email(digest, smtp, to.email)))
    for channel, payload in (("slack", digest.slack), ("msteams", digest.msteams)):
        url, url_file = getattr(to, f"{channel}_url"), getattr(to, f"{channel}_url_file")
        if url or url_file:
            sends.append((channel, partial(_post, url, url_file, f"{channel} of {digest.team}", payload)))
    return [_attempted(digest.team, channel, send, retry) for channel, send in sends]


def _post(url: str, url_file: str, where: str, payload: Callable[[], dict]) -> None:
    """POST the payload to the webhook's URL, read from its file at each attempt (a rotated Secret is read anew)."""
    post_webhook(url or read_secret(url_file, f"the webhook URL of {where}: its file"), payload())


def _attempted(team: str, channel: str, send: Callable[[], None], retry: Retry) -> Delivery:
    wait = retry.wait_seconds
    for attempt in range(1, retry.retries + 2):
        try:
            send()
        except (Refused, ConfigError, OSError, smtplib.SMTPException) as e:
            error = str(e) or type(e).__name__
            final = isinstance(e, Refused | ConfigError) or attempt > retry.retries
            log.warning(
                "digest of %s, %s: attempt %d failed: %s%s",
                team,
                channel,
                attempt,
                error,
                "" if final else f"; trying again in {wait:g} s",
            )
            if final:
                return Delivery(team, channel, False, attempt, error)
            retry.sleep(wait)
            wait *= 2
        else:
            log.info("digest of %s delivered by %s (attempt %d)", team, channel, attempt)
            return Delivery(team, channel, True, attempt)
    raise AssertionError("unreachable: the last attempt returns")


def send_email(digest: TeamDigest, smtp: Smtp, to: tuple[str, ...]) -> None:
    """The digest as one message (Markdown as its text part, the page as its HTML part) submitted to `smtp`."""
    # Headers folded past 200 characters, not RFC 5322's advised 78: Python folds a subject of 80 characters
    # before its first word, and its own parser then reads the subject with a leading space.
    message = EmailMessage(policy=email.policy.SMTP.clone(max_line_length=200))
    message["Subject"] = digest.subject
    message["From"] = smtp.sender
    message["To"] = ", ".join(to)
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = make_msgid(domain=smtp.sender.rpartition("@")[2] or None)
    message.set_content(digest.markdown())
    message.add_alternative(digest.html(), subtype="html")
    context = ssl.create_default_context(cafile=smtp.ca_file or None)
    client: smtplib.SMTP
    if smtp.tls == "tls":
        client = smtplib.SMTP_SSL(smtp.host, smtp.port, timeout=TIMEOUT_SECONDS, context=context)
    else:
        client = smtplib.SMTP(smtp.host, smtp.port, timeout=TIMEOUT_SECONDS)
    with client:
        if smtp.tls == "starttls":
            client.starttls(context=context)
        if smtp.username:
            try:
                client.login(smtp.username, read_secret(smtp.password_file, "smtp.password_file"))
            except smtplib.SMTPAuthenticationError as e:
                raise Refused(f"the SMTP server refused the login of {smtp.username}: {e.smtp_code}") from None
        try:
            client.send_message(message)
        except smtplib.SMTPRecipientsRefused as e:
            raise Refused(f"the SMTP server refused every recipient: {', '.join(e.recipients)}") from None


def post_webhook(url: str, payload: dict[str, Any]) -> None:
    """POST `payload` as JSON; Refused on a 4xx answer but 429 (the URL or the message is wrong), OSError on a
    connection that failed, a 429 or a 5xx (worth trying again)."""
    import requests

    try:
        answer = requests.post(url, json=payload, timeout=TIMEOUT_SECONDS, allow_redirects=False)
    except requests.RequestException as e:
        raise OSError(f"cannot reach the webhook: {type(e).__name__}") from None
    said = answer.text[:200].strip()
    if answer.status_code == 429 or answer.status_code >= 500:
        raise OSError(f"the webhook answered {answer.status_code}: {said}")
    if answer.status_code >= 300:
        raise Refused(f"the webhook answered {answer.status_code}: {said}")
