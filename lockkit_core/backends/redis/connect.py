"""How the redis backend reaches its server: the TLS options checked before any connection,
the warning for a password that would cross a network in plain text, and the answers that say
the server cannot serve locks for now.

A bad TLS setting found only at the first connection would surface as ``BackendUnavailable``
in production, looking like an outage; here it is a :class:`ConfigError` naming the option,
when the kit is made.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import ssl
import warnings
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError, InsecureTransportWarning
from ...store_warnings import outside_lockkit
from ...url import LockURL

__all__ = ["TLS_OPTIONS", "check_tls_options", "is_transient", "warn_plain_password"]

log = logging.getLogger("lockkit.redis")

#: the options that configure TLS (redis-py's names); they need a ``rediss://`` URL
TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")
#: schemes that send the password unencrypted over TCP
PLAIN_SCHEMES = ("redis", "redis+sentinel", "redis+cluster")
#: what ``ssl_cert_reqs`` may say: whether the server's certificate is checked
CERT_REQS = ("required", "optional", "none")


def check_tls_options(url: LockURL, options: Mapping[str, Any]) -> None:
    """:class:`ConfigError` naming the first TLS option that cannot work: one given for a
    URL without TLS, an unknown ``ssl_cert_reqs``, a file that is missing, unreadable or not
    PEM, a key without its certificate, or hostname checks without certificate checks."""
    given = [name for name in TLS_OPTIONS if name in options]
    if url.scheme != "rediss" and given:
        raise ConfigError(
            f"option {given[0]!r} configures TLS, but {url.redacted()} is not a TLS URL: "
            f"use rediss://host:port/db (or drop the ssl_* options)"
        )
    reqs = options.get("ssl_cert_reqs")
    if reqs is not None and reqs not in CERT_REQS:
        raise ConfigError(
            f"option 'ssl_cert_reqs' must be one of {', '.join(CERT_REQS)}, got {reqs!r}"
        )
    if options.get("ssl_check_hostname") and reqs == "none":
        raise ConfigError(
            "option 'ssl_check_hostname' is true but 'ssl_cert_reqs' is 'none': a host name "
            "cannot be checked against a certificate that is not checked; set "
            "ssl_cert_reqs to 'required' (or ssl_check_hostname to false)"
        )
    for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        path = options.get(name)
        if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
            raise ConfigError(f"option {name!r}: {path!r} is not a readable file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    certfile, keyfile = options.get("ssl_certfile"), options.get("ssl_keyfile")
    if keyfile is not None and certfile is None:
        raise ConfigError(
            "option 'ssl_keyfile' is given without 'ssl_certfile': give the client "
            "certificate that goes with the key"
        )
    if certfile is not None:
        try:
            context.load_cert_chain(certfile, keyfile)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"option 'ssl_certfile' ({certfile!r}) with 'ssl_keyfile' ({keyfile!r}): not a "
                f"PEM certificate and its matching private key: {exc}"
            ) from exc
    cafile = options.get("ssl_ca_certs")
    if cafile is not None:
        try:
            context.load_verify_locations(cafile=cafile)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"option 'ssl_ca_certs' ({cafile!r}) holds no PEM CA certificate: {exc}"
            ) from exc


def _loopback(host: str | None) -> bool:
    if host is None or host == "localhost":
        return True  # no host: redis-py's default, localhost
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_plain_password(url: LockURL, options: Mapping[str, Any]) -> None:
    """Warn (:class:`InsecureTransportWarning`, and on the log) when ``redis://`` would send a
    password to a host other than this one: anyone on the path can read it, and replay it.
    Loopback is left alone: the password never crosses a network there."""
    if url.scheme not in PLAIN_SCHEMES or options.get("password") is None:
        return
    # several servers ("h1:26379,h2:26379"): any of them on another host
    hosts = [part.rpartition(":")[0] or part for part in (url.host or "").split(",")]
    if url.port is not None or len(hosts) == 1:
        hosts = [url.host or ""]
    if all(_loopback(host or None) for host in hosts):
        return
    message = (
        f"the redis password is sent to {url.redacted()} in plain text, readable by anyone on "
        "the network path; use rediss:// (TLS) for a server on another host"
    )
    log.warning("%s", message)
    warnings.warn(message, InsecureTransportWarning, stacklevel=outside_lockkit())


#: Answers of a server that cannot take writes for now (a failover demoted it, it is loading
#: its data, its primary or cluster is down): unavailable, like a dropped connection. redis-py
#: strips the code from the message of the classes it knows, so both are checked.
_TRANSIENT_CODES = ("READONLY", "LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN")
_TRANSIENT_CLASSES = ("ReadOnlyError", "BusyLoadingError", "MasterDownError", "TryAgainError",
                      "ClusterDownError")  # fmt: skip


def is_transient(errors: Any, exc: Exception) -> bool:
    """Whether ``exc`` (of redis-py's ``errors`` module) is such an answer."""
    classes = tuple(getattr(errors, name) for name in _TRANSIENT_CLASSES if hasattr(errors, name))
    return isinstance(exc, classes) or str(exc).startswith(_TRANSIENT_CODES)
