"""Library packages whose ``__init__`` runs only when a name of the package itself is asked for, and
library models built only when first used.

Three packages under LangChain run an ``__init__`` that imports far more than LangChain uses of them,
on every process that runs an agent:

* ``langsmith.types``: ~150 generated pydantic models of LangSmith's REST API. ``langsmith.run_trees``
  (which ``langchain_core`` imports for its tracers) needs one ``Literal`` from
  ``langsmith.types.run_select_field``, and importing a submodule runs its package's ``__init__``.
* ``langgraph_sdk``: the LangGraph Platform client (httpx, and the rich console httpx's own command
  line pulls in). ``langgraph.runtime`` needs only ``langgraph_sdk.auth.types``.
* ``langchain.agents.middleware``: every middleware LangChain ships (shell, PII, summarisation, …).
  ``create_agent`` needs ``types`` and ``_trace_policy``; ca imports its names from ``types`` too.

Importing ``langchain.agents`` took 14 MiB more and two thirds as much CPU again with them (79
against 65 MiB; 1.4 against 0.85 s on a loaded machine).

One module is deferred the same way with a stand-in for the one name its importer asks for at once
(:data:`STAND_INS`): ``httpx._main``, the ``httpx`` command line, which ``httpx`` imports for its
``main`` and which imports click, rich and pygments when they are installed (typer brings rich).
a2a-sdk imports httpx in every ``ca serve``: 96 modules and 3 MiB of its memory for a command ca
never runs. The stand-in ``main`` runs the module and then its real ``main`` (a plain function
where httpx's is a click command: ``httpx.main()`` works as before, click's own tools do not take it).

One module's pydantic models are built when first used rather than when it is imported
(:data:`BUILT_ON_USE`): ``langsmith.schemas``, the 49 models of LangSmith's REST API, which
``langsmith.run_trees`` imports for ``RunTree`` (a subclass of one of them). Nothing of LangChain
validates one of them unless runs are traced to LangSmith, and building them took 4 % of a cold
``ca run``'s instructions (callgrind: 3.03 against 2.91 billion) and 1.3 MiB. The module runs as
it would, with pydantic's own ``defer_build`` in the configuration its models inherit from
``BaseModel`` while it runs (their subclasses, ``RunTree`` included, inherit it from them): a
model's schema and validator are built at its first validation, exactly as they would have been
at import. A model another thread defines during those milliseconds is built at its first use too,
as is any later subclass of these models: a mistake pydantic reports when it builds one (a
validator naming no field, say) is then raised at its first use rather than at its definition.

:func:`install` puts
a finder first on ``sys.meta_path`` that gives the import system each package's own spec, with a
loader that sets the package up as usual (``__path__`` included, so its submodules import as
before) but runs its ``__init__`` only at the first attribute the package does not have yet:
``from langsmith.types import Run`` still works, the ``__init__`` then having run exactly as an
eager import would have. Nothing of the libraries is replaced; only when their ``__init__`` runs.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType
from typing import Any

DEFERRED = frozenset({"langsmith.types", "langgraph_sdk", "langchain.agents.middleware"})
"""Packages whose ``__init__`` only re-exports their submodules, and which LangChain imports for
one submodule each."""
STAND_INS = {"httpx._main": ("main",)}
"""Modules deferred with a stand-in for each of these functions, which their importer takes at once."""
BUILT_ON_USE = frozenset({"langsmith.schemas"})
"""Modules whose pydantic models are built at their first use (pydantic's ``defer_build``)."""


class _Loader:
    """A module's own loader, but for ``exec_module``."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self._loader.create_module(spec)
        return created

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ...: the real loader's
        return getattr(self._loader, name)


class _DeferredInit(_Loader):
    """The package's own loader, with ``exec_module`` postponed to the first missing attribute."""

    def __init__(self, loader: Any, stand_ins: Sequence[str] = ()) -> None:
        super().__init__(loader)
        self._stand_ins = stand_ins

    def exec_module(self, module: ModuleType) -> None:
        lock = threading.RLock()  # two threads asking at once: one runs the module, the other waits for it
        loaded = False

        def load() -> None:
            nonlocal loaded
            with lock:
                if loaded:
                    return
                del vars(module)["__getattr__"]
                try:
                    self._loader.exec_module(module)  # its own functions replace the stand-ins
                except BaseException:
                    vars(module)["__getattr__"] = __getattr__  # as an eager import would: tried again next time
                    raise
                loaded = True

        def __getattr__(name: str) -> Any:  # PEP 562: asked only for names the module lacks
            if name == "__path__":  # `from module import name` asks whether it is a package: it is not
                raise AttributeError(name)
            load()
            return getattr(module, name)

        def stand_in(name: str) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                load()
                real = getattr(module, name)
                if real is call:
                    raise ImportError(f"{module.__name__} defines no {name}")
                return real(*args, **kwargs)

            call.__name__ = call.__qualname__ = name
            return call

        vars(module)["__getattr__"] = __getattr__
        for name in self._stand_ins:
            vars(module)[name] = stand_in(name)


class _BuiltOnUse(_Loader):
    """A module's own loader, running it with ``defer_build`` in the configuration of pydantic's
    ``BaseModel`` (taken out again after, whatever happens)."""

    def exec_module(self, module: ModuleType) -> None:
        from pydantic import BaseModel

        config = BaseModel.model_config
        if "defer_build" in config:  # set by someone else: theirs stands
            self._loader.exec_module(module)
            return
        config["defer_build"] = True
        try:
            self._loader.exec_module(module)
        finally:
            del config["defer_build"]


class DeferredFinder:
    """Finds the packages of :data:`DEFERRED` and the modules of :data:`STAND_INS` and
    :data:`BUILT_ON_USE` as the path finder does, with :class:`_DeferredInit` or :class:`_BuiltOnUse`."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in DEFERRED and name not in STAND_INS and name not in BUILT_ON_USE:
            return None
        spec = PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or (name in DEFERRED and spec.submodule_search_locations is None):
            return spec
        loader = (
            _BuiltOnUse(spec.loader) if name in BUILT_ON_USE else _DeferredInit(spec.loader, STAND_INS.get(name, ()))
        )
        spec.loader = loader  # type: ignore[assignment]  # a loader by duck typing
        return spec


def install() -> None:
    """Put :class:`DeferredFinder` first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, DeferredFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, DeferredFinder())
