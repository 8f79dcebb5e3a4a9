"""`tls_server_config` of a --web.config.file as exporter-toolkit reads it (its tls_config.go): the server's
TLS context from Go's names for versions, cipher suites and curves, and the client certificates' SANs allowed."""

from __future__ import annotations

import ipaddress
import ssl
import tempfile
from pathlib import Path

from gpulens.core.config import ConfigError

CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    # Go asks for a certificate and admits every client whatever it sends; nothing uses an unverified
    # certificate here, so it is not asked for: every client is admitted, as there.
    "RequestClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
#: Go's cipher suite names (crypto/tls.CipherSuites(), the ones exporter-toolkit accepts) as OpenSSL's.
#: Like Go, they choose among TLS 1.2 suites only; TLS 1.3's are not configurable.
CIPHER_SUITES = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    # TLS 1.3's: accepted and without effect, as in Go.
    "TLS_AES_128_GCM_SHA256": "",
    "TLS_AES_256_GCM_SHA384": "",
    "TLS_CHACHA20_POLY1305_SHA256": "",
}
#: Go's curve names (crypto/tls.CurveID) as OpenSSL's.
CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}


def server_tls(tls: dict, base: Path, where: str) -> tuple[ssl.SSLContext, frozenset[str]]:
    """The server's TLS context and the client SANs allowed, from a checked tls_server_config."""

    def refuse(problem: str) -> ConfigError:
        return ConfigError(f"{where}: tls_server_config: {problem}")

    for inline, file in (("cert", "cert_file"), ("key", "key_file"), ("client_ca", "client_ca_file")):
        if inline in tls and file in tls:
            raise refuse(f"give {inline} or {file}, not both")
    if not ("cert" in tls or "cert_file" in tls) or not ("key" in tls or "key_file" in tls):
        raise refuse("needs a certificate and its key (cert_file and key_file)")
    auth = tls.get("client_auth_type", "NoClientCert")
    if auth == "RequireAnyClientCert":
        raise refuse(
            "client_auth_type RequireAnyClientCert admits certificates nobody verified, which Python's TLS "
            "cannot do; use RequireAndVerifyClientCert with client_ca_file"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[tls.get("min_version", "TLS12")]
    context.maximum_version = TLS_VERSIONS[tls.get("max_version", "TLS13")]
    if context.minimum_version > context.maximum_version:
        raise refuse(f"min_version {tls['min_version']} is above max_version {tls.get('max_version', 'TLS13')}")
    # gpulens speaks HTTP/1.1; with http2 on, clients agree on it through ALPN as with any HTTP/1.1 server.
    context.set_alpn_protocols(["http/1.1"])
    try:
        _load_chain(context, tls, base)
    except (OSError, ssl.SSLError) as e:
        raise refuse(f"cannot load the certificate and key: {e}") from e
    context.verify_mode = CLIENT_AUTH[auth]
    try:
        if "client_ca_file" in tls:
            context.load_verify_locations(base / tls["client_ca_file"])
        elif "client_ca" in tls:
            context.load_verify_locations(cadata=tls["client_ca"])
    except (OSError, ssl.SSLError) as e:
        raise refuse(f"cannot load the client CA: {e}") from e
    if context.verify_mode != ssl.CERT_NONE and not ("client_ca_file" in tls or "client_ca" in tls):
        raise refuse(f"client_auth_type {auth} needs client_ca_file")
    sans = frozenset(tls.get("client_allowed_sans", []))
    if sans and auth != "RequireAndVerifyClientCert":
        raise refuse("client_allowed_sans needs client_auth_type RequireAndVerifyClientCert")
    suites = [CIPHER_SUITES[s] for s in tls.get("cipher_suites", []) if CIPHER_SUITES[s]]
    try:
        if suites:
            context.set_ciphers(":".join(suites))
    except ssl.SSLError as e:
        raise refuse(f"cipher_suites: this OpenSSL offers none of them ({e})") from e
    if tls.get("prefer_server_cipher_suites", True):
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    curves = tls.get("curve_preferences", [])
    if len(curves) > 1:
        raise refuse("curve_preferences: Python's TLS sets one curve, not an order of several; name the one to use")
    if curves:
        context.set_ecdh_curve(CURVES[curves[0]])
    return context, sans


def _load_chain(context: ssl.SSLContext, tls: dict, base: Path) -> None:
    """Load the server's certificate and key, from their files or inline (PEM text in the web config:
    Python's TLS reads files only, so inline ones pass through a directory only this process can read,
    removed at once)."""
    with tempfile.TemporaryDirectory() as directory:

        def path(inline: str, file: str) -> Path:
            if inline not in tls:
                return base / tls[file]
            written = Path(directory) / inline
            written.write_text(tls[inline])
            return written

        context.load_cert_chain(path("cert", "cert_file"), path("key", "key_file"))


def client_san_allowed(certificate: dict | None, allowed: frozenset[str]) -> bool:
    """Whether a verified client certificate (ssl.getpeercert()) names one of `allowed` among its DNS,
    IP, e-mail or URI subject alternative names, exactly (IP addresses compared as addresses)."""
    if not allowed:
        return True
    addresses = {_ip(a) for a in allowed} - {None}
    for kind, value in (certificate or {}).get("subjectAltName", ()):
        if kind in ("DNS", "email", "URI") and value in allowed:
            return True
        if kind == "IP Address" and _ip(value.strip()) in addresses:
            return True
    return False


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
