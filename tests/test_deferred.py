"""The packages of framework/deferred.py run their ``__init__`` at the first name asked of them, not
before; the library models it names are built at their first use, and their later subclasses at
their definition.

Each check runs in a fresh interpreter: the test process has long imported these libraries.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env={"PYTHONPATH": str(REPO)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_langchain_loads_one_module_of_langsmith_types() -> None:
    shown = python(
        "import sys, framework, langchain_core.language_models.chat_models\n"
        "print(sorted(m for m in sys.modules if m.startswith('langsmith.types')))"
    )
    assert shown == "['langsmith.types', 'langsmith.types.run_select_field']"


def test_a_name_of_langsmith_types_runs_its_init() -> None:
    shown = python(
        "import sys, framework, langchain_core.language_models.chat_models\n"
        "from langsmith.types import Run, RunSelectField\n"
        "print(Run.__module__, 'langsmith.types.custom_charts_section' in sys.modules)"
    )
    assert shown == "langsmith.types.run True"


def test_langgraph_loads_no_platform_client_nor_httpx() -> None:
    shown = python(
        "import sys, framework, langgraph.graph\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'rich') or m == 'langgraph_sdk.client'))"
    )
    assert shown == "[]"


def test_a_name_of_langgraph_sdk_runs_its_init() -> None:
    shown = python(
        "import sys, framework, langgraph.graph\n"
        "from langgraph_sdk import get_client\n"
        "print(callable(get_client), 'langgraph_sdk.client' in sys.modules)"
    )
    assert shown == "True True"


def test_create_agent_loads_no_middleware_it_does_not_use() -> None:
    shown = python(
        "import sys, framework, langchain.agents\n"
        "print(sorted(m for m in sys.modules if m.startswith('langchain.agents.middleware')))"
    )
    assert shown == (
        "['langchain.agents.middleware', 'langchain.agents.middleware._trace_policy', 'langchain.agents.middleware.types']"
    )


def test_a_name_of_langchain_agents_middleware_runs_its_init() -> None:
    shown = python(
        "import framework, langchain.agents\n"
        "from langchain.agents.middleware import AgentMiddleware, TodoListMiddleware\n"
        "print(AgentMiddleware.__module__, TodoListMiddleware.__module__)"
    )
    assert shown == "langchain.agents.middleware.types langchain.agents.middleware.todo"


def test_httpx_loads_no_command_line_nor_rich() -> None:
    shown = python(
        "import sys, framework, httpx\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'pygments', 'click')), callable(httpx.main))"
    )
    assert shown == "[] True"


def test_the_httpx_command_line_still_runs() -> None:
    shown = python(
        "import sys, framework, httpx\n"
        "sys.argv = ['httpx', '--help']\n"
        "try:\n"
        "    httpx.main()\n"
        "except SystemExit as exit:\n"
        "    print('exit', exit.code)\n"
    )
    assert "Usage: httpx" in shown and shown.endswith("exit 0"), shown


def test_a_deferred_module_that_fails_to_load_fails_the_same_way_each_time() -> None:
    shown = python(
        "import sys, framework\n"
        "sys.modules['click'] = None  # as if click were not installed: httpx's command line cannot load\n"
        "import httpx\n"
        "for _ in range(2):\n"
        "    try:\n"
        "        httpx.main()\n"
        "    except ImportError as exc:\n"
        "        print(type(exc).__name__)\n"
    )
    assert shown.split() == ["ModuleNotFoundError", "ModuleNotFoundError"], shown


def test_langsmith_models_are_built_at_their_first_use() -> None:
    shown = python(
        "import framework, framework.runtime.runtime, pydantic\n"
        "from langsmith import schemas\n"
        "from langsmith.run_trees import RunTree\n"
        "print(schemas.Run.__pydantic_complete__, RunTree.__pydantic_complete__, dict(pydantic.BaseModel.model_config))\n"
        "class Later(pydantic.BaseModel):\n"
        "    x: int\n"
        "print(Later.__pydantic_complete__)\n"
        "run = RunTree(name='step', run_type='chain', inputs={'q': 1})\n"
        "print(RunTree.__pydantic_complete__, run.name, run.inputs)\n"
        "try:\n"
        "    schemas.Run.model_validate({'name': 'step'})\n"
        "except pydantic.ValidationError as exc:\n"
        "    print(sorted(error['loc'][0] for error in exc.errors()))\n"
    )
    assert shown.splitlines() == [
        "False False {}",
        "True",
        "True step {'q': 1}",
        "['id', 'run_type', 'start_time', 'trace_id']",
    ], shown


def test_langchain_models_are_built_at_their_first_use_and_their_later_subclasses_at_definition() -> None:
    shown = python(
        "import framework, framework.runtime.runtime, pydantic\n"
        "from langchain_core.language_models import BaseChatModel\n"
        "from langchain_core.messages import HumanMessage, ToolMessage\n"
        "print(BaseChatModel.__pydantic_complete__, ToolMessage.__pydantic_complete__, dict(pydantic.BaseModel.model_config))\n"
        "print(ToolMessage('done', tool_call_id='c1').tool_call_id, ToolMessage.__pydantic_complete__)\n"
        "try:\n"
        "    ToolMessage('done', tool_call_id='c1', status='maybe')\n"
        "except pydantic.ValidationError as exc:\n"
        "    print([error['loc'] for error in exc.errors()])\n"
        "class Note(HumanMessage):\n"
        "    sender: str = 'me'\n"
        "print(Note.__pydantic_complete__, 'defer_build' in HumanMessage.model_config, Note('hi').sender)\n"
        "try:\n"
        "    class Wrong(HumanMessage):\n"
        "        @pydantic.field_validator('sender')\n"
        "        @classmethod\n"
        "        def known(cls, value: str) -> str:\n"
        "            return value\n"
        "except pydantic.PydanticUserError as exc:\n"
        "    print('at definition:', exc.code)\n"
    )
    assert shown.splitlines() == [
        "False False {}",
        "c1 True",
        "[('status',)]",
        "True False me",
        "at definition: decorator-missing-field",
    ], shown


def test_a_langchain_model_a_tool_file_defines_wrongly_fails_its_import(tmp_path: Path) -> None:
    """A project's tool file imported as ca imports it, after the runtime: its subclass of a
    LangChain model is built as it is defined, so its mistake fails the import, file and line."""
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "notes.py").write_text(
        "from langchain_core.messages import HumanMessage\n"
        "from pydantic import field_validator\n"
        "\n"
        "class Note(HumanMessage):\n"
        '    @field_validator("sender")\n'
        "    @classmethod\n"
        "    def _known(cls, value: str) -> str:\n"
        "        return value\n"
        "\n"
        "def note(text: str) -> str:\n"
        '    """Note it."""\n'
        "    return Note(text).text\n"
    )
    shown = python(
        "import framework, framework.runtime.runtime\n"
        "from pathlib import Path\n"
        "from framework.compiler.tool_context import ToolContext\n"
        "from framework.compiler.tools import load_python_tool\n"
        "from framework.errors import ToolError\n"
        "from framework.spec.tools import PythonTool\n"
        "from langchain_core.messages import HumanMessage\n"
        "print(HumanMessage.__pydantic_complete__)\n"
        "try:\n"
        f"    load_python_tool(PythonTool(python='tools/notes.py:note'), ToolContext(root=Path({str(tmp_path)!r}), agent='a'))\n"
        "except ToolError as exc:\n"
        "    print(exc)\n"
    )
    first, error = shown.splitlines()[:2]
    assert first == "False", shown  # ca's own imports left HumanMessage to be built at its first use
    assert error.startswith(
        "tools/notes.py:4: importing python tool 'tools/notes.py:note' failed: PydanticUserError"
    ), shown


def test_a_library_model_that_asks_to_be_built_on_use_keeps_it() -> None:
    shown = python(
        "import framework, framework.runtime.runtime\n"
        "from langsmith._models import BaseModel\n"
        "print(BaseModel.model_config.get('defer_build'))\n"
    )
    assert shown == "True"  # LangSmith's own setting (DEFER_PYDANTIC_BUILD), not taken out with ca's


def test_modules_built_on_use_imported_by_two_threads_at_once_leave_nothing_behind(tmp_path: Path) -> None:
    for i in range(150):
        for side in "ab":
            (tmp_path / f"m_{side}{i}.py").write_text(
                "import pydantic\n\nclass M(pydantic.BaseModel):\n    x: int\n\nclass N(M):\n    y: int = 0\n"
            )
    shown = python(
        f"import sys, threading; sys.path.insert(0, {str(tmp_path)!r}); sys.setswitchinterval(1e-6)\n"
        "import framework, importlib, pydantic\n"
        "from framework import deferred\n"
        "deferred.BUILT_ON_USE = frozenset(f'm_{s}{i}' for s in 'ab' for i in range(150))\n"
        "errors = []\n"
        "def load(name):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        errors.append(repr(exc))\n"
        "for i in range(150):\n"
        "    pair = [threading.Thread(target=load, args=(f'm_{s}{i}',)) for s in 'ab']\n"
        "    [t.start() for t in pair]; [t.join() for t in pair]\n"
        "left = [m for m in deferred._models(pydantic.BaseModel) if 'defer_build' in m.model_config]\n"
        "deferred_ones = sum(not sys.modules[f'm_{s}{i}'].M.__pydantic_complete__ for s in 'ab' for i in range(150))\n"
        "print(errors, [m.__module__ for m in left if m.__module__.startswith('m_')], dict(pydantic.BaseModel.model_config), deferred_ones)\n"
    )
    assert shown == "[] [] {} 300", shown


def test_a_module_built_on_use_that_fails_leaves_pydantic_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "broken_models.py").write_text(
        "import pydantic\n\nclass First(pydantic.BaseModel):\n    x: int\n\nraise RuntimeError('broken at import')\n"
    )
    shown = python(
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import framework, pydantic\n"
        "from framework import deferred\n"
        "deferred.BUILT_ON_USE = frozenset({'broken_models'})\n"
        "try:\n"
        "    import broken_models\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
        "print(dict(pydantic.BaseModel.model_config))\n"
    )
    assert shown.splitlines() == ["broken at import", "{}"], shown
