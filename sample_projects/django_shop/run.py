"""Run django_shop under gunicorn, double-click every pay button, and print what happened.

python sample_projects/django_shop/run.py       # locks on lockkit's default file:// store
LOCKKIT_URL=redis://127.0.0.1:6379/0 python sample_projects/django_shop/run.py
python sample_projects/django_shop/run.py --redis   # starts its own redis-server
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

HERE = Path(__file__).resolve().parent


def call(port: int, method: str, path: str) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def call_raw(
    port: int, method: str, path: str, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def at_once(port: int, paths: list[str]) -> list[tuple[int, dict[str, object]]]:
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(lambda p: call(port, "POST", p), paths))


def manage(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "manage.py"), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def gunicorn(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--chdir", str(HERE), "--bind", f"127.0.0.1:{port}",
         "--workers", "2", "--threads", "4", "--worker-class", "gthread",
         "--log-level", "warning", "shop.wsgi:application"],
        env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return server, port
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("gunicorn did not start")


def double_clicks(port: int, env: dict[str, str], prefix: str) -> tuple[int, int]:
    """Every order's pay button clicked 4 times at once: (orders paid twice, stock < 0)."""
    manage(env, "seed").wait()
    _, state = call(port, "GET", "/state")
    orders = [o["pk"] for o in state["orders"]]  # type: ignore[attr-defined]
    at_once(port, [f"{prefix}/orders/{pk}/pay/" for pk in orders for _ in range(4)])
    _, state = call(port, "GET", "/state")
    twice = sum(o["payments"] > 1 for o in state["orders"])  # type: ignore[attr-defined]
    negative = sum(s < 0 for s in state["stock"].values())  # type: ignore[attr-defined]
    return twice, negative


def idempotent_clicks(port: int, env: dict[str, str]) -> tuple[int, list[int], bool]:
    """One order's pay button clicked 4 times at once with one Idempotency-Key, then retried:
    (payments, statuses of the clicks, every 200 answer and the retry byte-identical)."""
    manage(env, "seed").wait()
    _, state = call(port, "GET", "/state")
    order = state["orders"][0]["pk"]  # type: ignore[index]
    headers = {"Idempotency-Key": f'"pay-{order}-{uuid.uuid4()}"', "X-Customer": "c-17"}
    with ThreadPoolExecutor(4) as pool:
        clicks = list(pool.map(
            lambda _: call_raw(port, "POST", f"/orders/{order}/pay/", headers), range(4)
        ))  # fmt: skip
    retry = call_raw(port, "POST", f"/orders/{order}/pay/", headers)
    _, state = call(port, "GET", "/state")
    payments = int(state["orders"][0]["payments"])  # type: ignore[index]
    answers = {body for status, _, body in [*clicks, retry] if status == 200}
    replayed = retry[1].get("Idempotency-Replayed") == "true"
    return payments, sorted(status for status, _, _ in clicks), len(answers) == 1 and replayed


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--redis", action="store_true", help="start a redis-server for locks")
    args = parser.parse_args()
    with ExitStack() as stack:
        data = stack.enter_context(tempfile.TemporaryDirectory(prefix="django-shop-"))
        env = {**os.environ, "SHOP_DATA_DIR": data, "PYTHONPATH": str(HERE)}
        if args.redis:
            from lockkit_core.testing import RedisServer

            env["LOCKKIT_URL"] = stack.enter_context(RedisServer()).url
        subprocess.run([sys.executable, str(HERE / "manage.py"), "migrate", "-v", "0"],
                       env=env, check=True)  # fmt: skip
        server, port = gunicorn(env)
        stack.callback(lambda: (server.send_signal(signal.SIGTERM), server.wait(10)))
        store = env.get("LOCKKIT_URL", "lockkit's default file:// store")
        print(f"gunicorn: 2 workers x 4 threads, locks on {store}")

        twice, negative = double_clicks(port, env, "/unlocked")
        print(f"20 orders x 4 clicks, unlocked:        {twice} paid twice, {negative} stock < 0")
        locked = double_clicks(port, env, "")
        print(f"20 orders x 4 clicks, LockMiddleware:  {locked[0]} paid twice, "
              f"{locked[1]} stock < 0")  # fmt: skip

        _, state = call(port, "GET", "/state")
        last = max(int(pk) for pk in state["stock"])  # type: ignore[attr-defined]
        bought = at_once(port, [f"/products/{last}/buy/"] * 30)
        _, state = call(port, "GET", "/state")
        sold = sum(status == 201 for status, _ in bought)
        left = state["stock"][str(last)]  # type: ignore[index]
        print(f"30 buyers, 10 units, @lock_view + fenced_update: {sold} sold, {left} left")

        runs = [manage(env, "lockkit", "run", "--", "nightly_report") for _ in range(2)]
        codes = sorted(run.wait(60) for run in runs)
        print(f"lockkit run -- nightly_report, twice at once: exit codes {codes} "
              "(0 ran it, 75 found it running)")  # fmt: skip
        payments, statuses, same = idempotent_clicks(port, env)
        print(f"1 order x 4 clicks, one Idempotency-Key: {payments} payment, answers {statuses}, "
              f"retry replayed the same bytes: {same}")  # fmt: skip
        ok = locked == (0, 0) and sold == 10 and left == 0 and codes == [0, 75]
        ok = ok and payments == 1 and same
        print("all guarantees held" if ok else "A GUARANTEE FAILED")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
