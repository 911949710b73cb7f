"""A cron job for the tests: note when it runs, take a while (or until a file appears), exit
with the given status."""

from __future__ import annotations

import os
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--log", required=True)
        parser.add_argument("--seconds", type=float, default=0.0)
        parser.add_argument("--until", default=None, help="wait (at most 60 s) for this file")
        parser.add_argument("--exit", type=int, default=0)

    def handle(self, *args: Any, **options: Any) -> None:
        log = Path(options["log"])
        with log.open("a") as out:
            out.write(f"start {os.getpid()} {time.monotonic()}\n")
        time.sleep(options["seconds"])
        if options["until"]:
            deadline = time.monotonic() + 60
            while not Path(options["until"]).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        with log.open("a") as out:
            out.write(f"end {os.getpid()} {time.monotonic()}\n")
        if options["exit"]:
            raise CommandError(f"exit {options['exit']}", returncode=options["exit"])
