"""Has pytest rewrite the contract modules' asserts, as it does for test modules, so that a
failure shows the values compared. Imported before those modules, which it must precede."""

import pytest

_SUBJECTS = (
    "admin",
    "batches",
    "decorator",
    "exclusion",
    "fixtures",
    "fork",
    "leases",
    "ownership",
    "reentrancy",
    "waiting",
    "workers",
)

pytest.register_assert_rewrite(*(f"{__package__}.{name}" for name in _SUBJECTS))
