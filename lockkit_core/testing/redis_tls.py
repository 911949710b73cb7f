"""A TLS redis-server for tests: a throwaway CA, server and client certificates made with the
``openssl`` command, and an ACL user, on free loopback ports.

``with TlsRedisServer() as server: LockKit(server.tls_url, options=server.client_options)``.
The server requires a client certificate signed by the test CA (``--tls-auth-clients yes``),
as a managed Redis with mutual TLS does. It also keeps a plain port on loopback for the test's
own checks (``plain_port``), which the lock clients never use.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from .process import Closing
from .servers import RedisServer, free_port

__all__ = ["TlsRedisServer", "make_test_ca"]

_HOST = "127.0.0.1"


def _openssl(*args: str, cwd: Path) -> None:
    found = shutil.which("openssl")
    if found is None:
        raise RuntimeError(
            "making test certificates needs the openssl command: sudo apt-get install openssl"
        )
    subprocess.run([found, *args], cwd=cwd, check=True, capture_output=True)


def _signed(directory: Path, name: str, subject: str, extensions: str) -> None:
    """``<name>.key`` and ``<name>.crt``, signed by ``ca.key``, valid for a day."""
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
        cwd=directory,
    )  # fmt: skip
    (directory / f"{name}.ext").write_text(extensions + "\n")
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext",
        cwd=directory,
    )  # fmt: skip


def make_test_ca(directory: Path) -> None:
    """Write ``ca.crt``/``ca.key``, ``server.crt``/``server.key`` (for 127.0.0.1 and
    localhost) and ``client.crt``/``client.key`` into ``directory``."""
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=lockkit test CA",
        cwd=directory,
    )  # fmt: skip
    _signed(
        directory,
        "server",
        "/CN=127.0.0.1",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth",
    )
    _signed(directory, "client", "/CN=lockkit test client", "extendedKeyUsage=clientAuth")


class TlsRedisServer(Closing):
    """A redis-server whose clients speak TLS with a client certificate, and log in as the
    ACL user ``user`` (password ``password``) allowed only lockkit's keys and channels."""

    user = "locker"
    password = "s3cret-pass"  # noqa: S105 (a throwaway test server's)

    def __init__(self) -> None:
        self.tls_port = free_port()
        self._tmp = tempfile.TemporaryDirectory(prefix="lockkit-tls-")
        self.certs = Path(self._tmp.name)
        make_test_ca(self.certs)
        self.server = RedisServer(
            extra_args=[
                "--tls-port", str(self.tls_port),
                "--tls-cert-file", str(self.certs / "server.crt"),
                "--tls-key-file", str(self.certs / "server.key"),
                "--tls-ca-cert-file", str(self.certs / "ca.crt"),
                "--tls-auth-clients", "yes",
                # lockkit's keys and its notice channels, nothing else
                "--user", self.user, "on", f">{self.password}", "~lockkit:*", "&lockkit:*",
                "+@all", "-monitor", "-slowlog",
            ],
        )  # fmt: skip

    @property
    def plain_port(self) -> int:
        """The server's plain-text loopback port, for a test's own checks."""
        return self.server.port

    @property
    def tls_url(self) -> str:
        """``rediss://user:password@127.0.0.1:TLS_PORT/0``."""
        return f"rediss://{self.user}:{self.password}@{_HOST}:{self.tls_port}/0"

    @property
    def client_options(self) -> dict[str, str]:
        """The OPTIONS a client needs: the test CA and the client's certificate and key."""
        return {
            "ssl_ca_certs": str(self.certs / "ca.crt"),
            "ssl_certfile": str(self.certs / "client.crt"),
            "ssl_keyfile": str(self.certs / "client.key"),
            "ssl_cert_reqs": "required",
        }

    def close(self) -> None:
        self.server.close()
        self._tmp.cleanup()
