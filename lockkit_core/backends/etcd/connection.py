"""How to reach the cluster: members, timeouts, credentials and TLS, from the URL and options."""

from __future__ import annotations

import logging
import math
import ssl
import warnings
from collections.abc import Mapping
from typing import Any

from ...errors import ConfigError, InsecureTransportWarning
from ...store_warnings import outside_lockkit
from ...url import LockURL
from .client import Endpoint, GatewayClient

__all__ = ["DEFAULT_PORT", "gateway_client", "parse_endpoints"]

DEFAULT_PORT = 2379

log = logging.getLogger("lockkit.etcd")


def parse_endpoints(url: LockURL) -> list[Endpoint]:
    """``host[:port]`` pairs from ``etcd://h1:2379,h2:2379``; a bad one is a ConfigError."""
    text = url.host or ""
    if url.port is not None:
        text = f"{text}:{url.port}"
    endpoints: list[Endpoint] = []
    for part in text.split(","):
        host, sep, port_text = part.strip().rpartition(":")
        if not sep:
            host, port_text = port_text, str(DEFAULT_PORT)
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(
                f"bad etcd member {part!r} in {url.redacted()}: write each as host:port, "
                "comma-separated, e.g. etcd://10.0.0.1:2379,10.0.0.2:2379"
            )
        endpoints.append((host.strip("[]"), int(port_text)))
    return endpoints


def _tls_context(url: LockURL, options: Mapping[str, Any]) -> ssl.SSLContext | None:
    files = [options.get(name) for name in ("ca_file", "cert_file", "key_file")]
    if not options.get("tls", any(files)):
        return None
    ca_file, cert_file, key_file = files
    try:
        context = ssl.create_default_context(cafile=ca_file)
        if cert_file is not None:
            context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS files for {url.redacted()}: {exc}") from exc
    return context


def gateway_client(url: LockURL, options: Mapping[str, Any]) -> GatewayClient:
    """A client for the cluster ``url`` names, with its parsed ``options``; bad values are
    ConfigErrors naming the fix."""
    endpoints = parse_endpoints(url)
    timeout = float(options.get("socket_timeout", 5.0))
    connect = float(options.get("connect_timeout", min(timeout, 2.0)))
    if not (math.isfinite(timeout) and timeout > 0 and math.isfinite(connect) and connect > 0):
        raise ConfigError(
            f"socket_timeout and connect_timeout must be positive seconds for "
            f"{url.redacted()}, got {timeout!r} and {connect!r}"
        )
    username = options.get("username", url.username)
    password = options.get("password", url.password)
    if password is not None and not username:
        raise ConfigError(
            f"a password without a username for {url.redacted()}: etcd logs in as a user; "
            "add it as etcd://USER:PASSWORD@host:2379 or ?username=USER"
        )
    tls = _tls_context(url, options)
    if password is not None and tls is None:
        _warn_clear_password(endpoints)
    return GatewayClient(
        endpoints,
        timeout=timeout,
        connect_timeout=connect,
        tls=tls,
        username=username,
        password=password,
        describe=url.redacted(),
    )


def _warn_clear_password(endpoints: list[Endpoint]) -> None:
    """etcd's gateway takes the password in a JSON body (``auth/authenticate``): over plain
    HTTP anyone on the path reads it, and the token it returns. Said on the logger and as a
    :class:`InsecureTransportWarning` pointing at the caller's line."""
    members = ",".join(f"{host}:{port}" for host, port in endpoints)
    message = (
        f"the etcd password is sent to {members} over plain HTTP, readable by anyone on the "
        "network path; add ?tls=1 (and ca_file=PATH for a private CA) to send it over TLS"
    )
    log.warning("%s", message)
    warnings.warn(message, InsecureTransportWarning, stacklevel=outside_lockkit())
