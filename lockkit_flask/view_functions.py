"""``ViewFunctions``: the ``app.view_functions`` of an app with the extension, and how a
``@lock_route`` wrapper is attached to the view it wraps.

A view is stored as registered; looking it up for a request follows it to the wrapper
``@lock_route`` made of it. So a view registered before ``@lock_route`` decorated it (the
decorator written above ``@app.route``, or above several stacked ``@bp.route``) is locked,
stacked ``@lock_route`` decorators all apply, and Flask's check that a second registration of
an endpoint names the same view still compares the views as registered. Everything is kept
on the view functions themselves: nothing outlives a view, however many apps register it.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from flask import Flask

from lockkit_core import ConfigError
from lockkit_core import LockKit as CoreKit
from lockkit_core.guard import RequestRule

__all__ = ["BLUEPRINT_RULES", "RULE", "ViewFunctions", "attach", "check_url_fields", "rules_of"]

#: The rule of a ``@lock_route`` wrapper (also read by tools that list locked routes).
RULE = "lockkit_rule"
#: On a blueprint: its ``lock_blueprint`` rules.
BLUEPRINT_RULES = "lockkit_rules"
#: On a view: the wrapper ``@lock_route`` made of it.
_WRAPPER = "__lockkit_wrapper__"
#: On a view: the (weak) set of the apps' view functions it is registered in, so a rule
#: added by ``@lock_route`` written above ``@app.route`` is checked against their stores.
_REGISTERED = "__lockkit_registered__"


def _down(view: Any) -> Iterator[Any]:
    """The view and what it wraps (``__wrapped__``), outermost first."""
    seen: set[int] = set()
    while view is not None and id(view) not in seen:
        seen.add(id(view))
        yield view
        view = getattr(view, "__wrapped__", None)


def _up(view: Any) -> Any:
    """The outermost ``@lock_route`` wrapper made of ``view`` (the view if none)."""
    while (wrapper := getattr(view, _WRAPPER, None)) is not None:
        view = wrapper
    return view


def rules_of(view: Any) -> list[RequestRule]:
    """Every rule a request served by ``view`` (as registered) runs under."""
    rules: dict[int, RequestRule] = {}
    for level in _down(_up(view)):
        rule = getattr(level, RULE, None)
        if isinstance(rule, RequestRule):
            rules.setdefault(id(rule), rule)
    return list(rules.values())


class ViewFunctions(dict[str, Callable[..., Any]]):
    """``app.view_functions`` that finds each view's ``@lock_route`` wrapper, and checks
    each rule against the app's store when the view is registered (or decorated later)."""

    def __init__(self, app: Flask, kit: CoreKit) -> None:
        super().__init__()
        self.kit = kit
        self._app = weakref.ref(app)
        for endpoint, view in app.view_functions.items():
            self[endpoint] = view

    def __setitem__(self, endpoint: str, view: Callable[..., Any]) -> None:
        for rule in rules_of(view):
            rule.check_store(self.kit, f"route {endpoint!r}")
        app = self._app()
        if app is not None:
            check_url_fields(app, endpoint, view)
        # A builtin or a callable object without a __dict__ is never decorated later.
        with contextlib.suppress(AttributeError, TypeError):
            registered = view.__dict__.get(_REGISTERED)
            if registered is None:
                registered = view.__dict__[_REGISTERED] = weakref.WeakSet()
            registered.add(self)
        super().__setitem__(endpoint, view)

    def __getitem__(self, endpoint: str) -> Callable[..., Any]:
        view: Callable[..., Any] = _up(super().__getitem__(endpoint))
        return view

    __hash__ = object.__hash__  # type: ignore[assignment]  # a WeakSet member, by identity


def check_url_fields(app: Flask, endpoint: str, view: Any) -> None:
    """A ConfigError if a rule over ``endpoint`` (its view's, or its blueprints') names a
    view argument that one of the endpoint's URL rules does not capture: that would be a 500
    at its first request (a view taking ``**kwargs``, a MethodView, a blueprint rule)."""
    rules = rules_of(view)
    name = endpoint
    while "." in name:
        name = name.rpartition(".")[0]
        rules += getattr(app.blueprints.get(name), BLUEPRINT_RULES, [])
    try:
        url_rules = list(app.url_map.iter_rules(endpoint))
    except KeyError:  # registered without a URL rule (app.view_functions[...] = view)
        return
    for url_rule in url_rules:
        given = set(url_rule.arguments) | set(url_rule.defaults or ())
        for rule in rules:
            missing = [f for f in rule.key.url_fields() if f not in given]
            if rule.key.func is None and missing:
                raise ConfigError(
                    f"route {endpoint!r} ({url_rule.rule}) locks on {rule.key.template!r}, "
                    f"which names {', '.join(missing)}: neither one of its URL arguments "
                    f"({', '.join(sorted(given)) or 'none'}) nor a source "
                    f"({', '.join(rule.key.sources)})"
                )


def attach(view: Any, wrapper: Any, rule: RequestRule) -> None:
    """Make ``wrapper`` the locked form of ``view``: requests for ``view`` registered
    already run ``wrapper``, after ``rule`` is checked against those apps' stores."""
    # functools.wraps copied the view's __dict__: the wrapper is neither its own wrapper
    # nor registered anywhere yet.
    wrapper.__dict__.pop(_WRAPPER, None)
    wrapper.__dict__.pop(_REGISTERED, None)
    setattr(wrapper, RULE, rule)
    name = getattr(view, "__qualname__", repr(view))
    for level in _down(view):
        for views in list(getattr(level, "__dict__", {}).get(_REGISTERED, ())):
            rule.check_store(views.kit, f"view {name!r}")
    with contextlib.suppress(AttributeError):  # an object without a __dict__
        setattr(view, _WRAPPER, wrapper)
