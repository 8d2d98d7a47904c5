"""The packages of framework/deferred.py run their ``__init__`` at the first name asked of them, not before.

Each check runs in a fresh interpreter: the test process has long imported both packages.
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
