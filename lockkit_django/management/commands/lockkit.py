"""``manage.py lockkit list|info KEY|release KEY --force|check|run -- COMMAND [ARGS]``.

The core's admin layer on ``settings.LOCKKIT``'s kit. ``run`` is the cron singleton: it
runs another management command while holding a lock, so overlapping runs on any host
(with a shared store) never run it twice at once, and exits with that command's status::

    */5 * * * *  manage.py lockkit run --wait 0 -- clearsessions

A run that finds the lock busy runs nothing, says so on stderr and exits with 75
(``EX_TEMPFAIL``: try again later).
"""

from __future__ import annotations

import json
import logging
from argparse import REMAINDER, ArgumentParser
from typing import Any, Final

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from lockkit_core import BackendUnavailable, LockKitError, LockNotOwned
from lockkit_core.cli import (
    LOCK_HEADERS,
    free_line,
    lock_rows,
    no_locks_line,
    refusal,
    released_line,
    render_table,
)
from lockkit_core.config import check_timeout
from lockkit_core.terminal import printable

from ...conf import get_kit

log = logging.getLogger("lockkit.django")

BUSY_EXIT: Final = 75


class Command(BaseCommand):
    help = "Inspect and force-release lockkit locks, or run a command under a lock."

    def add_arguments(self, parser: ArgumentParser) -> None:
        verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
        listing = verbs.add_parser("list", help="List held locks whose key starts with PREFIX.")
        listing.add_argument("prefix", nargs="?", default="")
        listing.add_argument("--json", action="store_true", help="Print JSON.")
        info = verbs.add_parser("info", help="Show who holds KEY, or that it is free.")
        info.add_argument("key")
        info.add_argument("--json", action="store_true", help="Print JSON (null when free).")
        release = verbs.add_parser("release", help="Free KEY whoever holds it (needs --force).")
        release.add_argument("key")
        release.add_argument("--force", action="store_true", help="Really free the key.")
        release.add_argument("--json", action="store_true", help="Print JSON.")
        verbs.add_parser("check", help="Show the store and check that it answers.")
        run = verbs.add_parser("run", help="Run a management command under a lock.")
        run.add_argument("--key", help="The lock key (default: command:<COMMAND>).")
        run.add_argument(
            "--wait", type=float, default=0.0, help="Seconds to wait for the lock (default 0)."
        )
        run.add_argument("command", nargs=REMAINDER, help="-- COMMAND [ARGS...]")

    def handle(self, *args: Any, **options: Any) -> None:
        verb = options["verb"]
        try:
            if verb == "run":
                self._run(options)
            elif verb == "check":
                self._check()
            else:
                getattr(self, f"_{verb}")(options)
        except LockKitError as exc:
            raise CommandError(printable(str(exc))) from exc

    def _json(self, value: Any) -> None:
        self.stdout.write(json.dumps(value, indent=2, sort_keys=True))

    def _list(self, options: dict[str, Any]) -> None:
        infos = get_kit().admin.list(options["prefix"])
        if options["json"]:
            self._json([info.as_dict() for info in infos])
        elif not infos:
            self.stdout.write(no_locks_line(options["prefix"]))
        else:
            self.stdout.write(render_table(LOCK_HEADERS, lock_rows(infos)))

    def _info(self, options: dict[str, Any]) -> None:
        key = options["key"]
        info = get_kit().admin.info(key)
        if options["json"]:
            self._json(None if info is None else info.as_dict())
        elif info is None:
            self.stdout.write(free_line(key))
        else:
            self.stdout.write(render_table(LOCK_HEADERS, lock_rows([info])))

    def _release(self, options: dict[str, Any]) -> None:
        key = options["key"]
        if not options["force"]:
            raise CommandError(refusal(key, "manage.py lockkit"))
        admin = get_kit().admin
        before = admin.info(key)
        released = admin.force_release(key)
        log.warning("force-released %r from manage.py (was held: %s)", key, released)
        if options["json"]:
            previous = None if before is None or not released else before.as_dict()
            self._json({"key": key, "released": released, "previous": previous})
        else:
            self.stdout.write(released_line(key, before, released))

    def _check(self) -> None:
        kit = get_kit()
        info = kit.admin.backend_info()
        self.stdout.write(f"store:        {info.url}")
        self.stdout.write(f"namespace:    {kit.namespace or '-'}")
        self.stdout.write(f"safety grade: {info.grade}")
        self.stdout.write(f"capabilities: {', '.join(info.capabilities)}")
        kit.admin.info("lockkit-check")  # one round trip: BackendUnavailable if it is down
        self.stdout.write("the store answers")

    def _run(self, options: dict[str, Any]) -> None:
        command = list(options["command"])
        if command[:1] == ["--"]:
            command = command[1:]
        if not command:
            raise CommandError("name the command to run: manage.py lockkit run -- COMMAND")
        wait = check_timeout(options["wait"], "--wait")
        key = options["key"] or f"command:{command[0]}"
        lock = get_kit().lock(key, timeout=wait, reentrant=False)
        try:
            held = lock.acquire(timeout=wait)
        except BackendUnavailable as exc:
            raise CommandError(
                printable(f"{command[0]} not run: the lock store is down: {exc}")
            ) from exc
        if not held:
            log.info("%s not run: %r is held by another run", command[0], key)
            self.stderr.write(f"{command[0]} not run: {key!r} is held by another run")
            raise SystemExit(BUSY_EXIT)
        code = 0
        try:
            call_command(*command)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except CommandError as exc:
            self.stderr.write(f"CommandError: {exc}")
            code = exc.returncode
        finally:
            try:
                lock.release()
            except LockNotOwned as exc:
                log.error("lock %r was lost while %s ran: %s", key, command[0], exc)
                self.stderr.write(f"the lock {key!r} was lost while {command[0]} ran: {exc}")
        if code:
            raise SystemExit(code)
