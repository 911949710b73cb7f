"""The ``@kit.locked`` decorator: keys bound to the call's arguments."""

from __future__ import annotations

import threading

import pytest

from ...errors import ConfigError, LockTimeout
from .fixtures import ContractBase, KitFactory

__all__ = ["DecoratorContract"]


class DecoratorContract(ContractBase):
    """A key template is filled from each call, and a bad template fails at decoration."""

    def test_decorator_binds_the_key_to_the_call(self, make_kit: KitFactory) -> None:
        kit = make_kit()
        entered = threading.Event()
        leave = threading.Event()
        ran: list[str] = []

        @kit.locked("report:{day}", timeout=0)
        def build_report(day: str, slow: bool = False) -> str:
            ran.append(day)
            if slow:
                entered.set()
                leave.wait(10)
            return f"report for {day}"

        worker = threading.Thread(target=build_report, args=("mon",), kwargs={"slow": True})
        worker.start()
        try:
            assert entered.wait(5)
            with pytest.raises(LockTimeout) as caught:
                build_report("mon")
            assert caught.value.key == "report:mon"
            assert build_report("tue") == "report for tue"
            assert build_report(day="wed") == "report for wed"
            assert kit.admin.info("report:mon") is not None
        finally:
            leave.set()
            worker.join(10)
        assert ran == ["mon", "tue", "wed"]
        assert build_report("mon") == "report for mon"
        assert build_report.__name__ == "build_report"

    def test_decorator_rejects_a_placeholder_the_function_lacks(self, make_kit: KitFactory) -> None:
        kit = make_kit()
        with pytest.raises(ConfigError) as caught:

            @kit.locked("report:{day}")
            def build_report(date: str) -> None: ...

        assert "day" in str(caught.value)
        assert "date" in str(caught.value)
