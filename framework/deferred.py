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

The pydantic models that LangChain and LangSmith define on import are built when first used
rather than when defined: those defined while the modules of :data:`BUILT_ON_USE` run, which
between them import nearly all of langchain_core's (messages, runnables, chat models, tools,
output parsers, prompt values) and LangSmith's REST API (``langsmith.schemas``, which
``langsmith.run_trees`` imports for ``RunTree``). Most are bases no one validates —
``BaseChatModel``, ``BaseTool``, and each ``RunnableSerializable[Input, Output]`` a subclass
names, a model class of its own — or classes a run never uses: a cold ``ca run`` validates 20 of
langchain_core's 65 and one of LangSmith's 51 (tracing to LangSmith validates more). Each such
module runs as it would, with pydantic's own ``defer_build`` in the configuration models inherit
from ``BaseModel``; the models defined meanwhile then lose it again (:class:`_Window`; not one
that asks for it itself), so a subclass defined later (ca's own chat models, langchain-openai's,
a project's tools) is built at its definition as before, and a mistake in it (a validator
naming no field, say) is reported there. A model is built at its first validation, exactly as it
would have been at its definition; one that another thread defines during those milliseconds is
built at its first use too. A cold ``ca run`` executes 6.4 % fewer instructions (callgrind, whole
process: 3.03 against 2.84 billion).

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
BUILT_ON_USE = frozenset(
    {
        "langsmith.schemas",
        "langsmith.run_trees",
        "langchain_core.load.serializable",
        "langchain_core.language_models.base",
        "langchain_core.language_models.chat_models",
        "langchain_core.runnables.base",
        "langchain_core.runnables.passthrough",
        "langchain_core.prompt_values",
        "langchain_core.output_parsers.openai_tools",
        "langchain_core.tools.base",
    }
)
"""Modules whose pydantic models, and those of the modules they import, are built at their first use
(pydantic's ``defer_build``)."""


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
    ``BaseModel`` (see :data:`_WINDOW`)."""

    def exec_module(self, module: ModuleType) -> None:
        with _WINDOW:
            self._loader.exec_module(module)


class _Window:
    """While any module of :data:`BUILT_ON_USE` runs, in any thread: ``defer_build`` in the
    configuration of pydantic's ``BaseModel``, which the models defined meanwhile inherit. Its value
    is this object (true, as any object is), so that when the last such module has run (or failed)
    it is taken out of ``BaseModel``'s configuration and of every model that inherited it, and of
    no model that asks for ``defer_build`` itself (LangSmith's own base does): subclasses defined
    later are built as they are defined. The lock guards the count, never a module's run (the
    import system's own locks are held meanwhile)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0

    def __enter__(self) -> None:
        from pydantic import BaseModel

        with self._lock:
            self._open += 1
            if self._open == 1:
                BaseModel.model_config.setdefault("defer_build", self)  # type: ignore[typeddict-item]

    def __exit__(self, *exc: object) -> None:
        from pydantic import BaseModel

        with self._lock:
            self._open -= 1
            if self._open:
                return
            models: list[type[BaseModel]] = [BaseModel, *_models(BaseModel)]
            for model in models:
                given: object = model.model_config.get("defer_build")
                if given is self:
                    del model.model_config["defer_build"]


_WINDOW = _Window()


def _models(base: type[Any]) -> set[type[Any]]:
    """Every subclass of ``base``, at any depth."""
    found: set[type[Any]] = set()
    todo = [base]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


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
