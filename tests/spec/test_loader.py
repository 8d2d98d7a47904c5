"""Loading valid projects: interpolation, extends, skills, profiles, defaults."""

from __future__ import annotations

from decimal import Decimal

import pytest

from framework.errors import SpecError
from framework.spec import load_project
from framework.spec.agent import LlmAgent, WorkflowAgent
from framework.spec.tools import AgentTool, BuiltinTool, PythonTool
from tests.conftest import REPO, ProjectFactory


def test_repository_root_is_a_valid_project() -> None:
    project = load_project(REPO, environ={})
    assert sorted(project.agents) == ["assistant", "notetaker", "release", "reviewer", "summarizer"]
    assert sorted(project.profiles) == ["autonomous", "manual", "supervised"]
    assert isinstance(project.agents["release"], WorkflowAgent)
    assert project.default_agent == "assistant"


def test_variables_come_from_environment_then_dotenv_then_default(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            ".env": "FROM_FILE=file-value\nBOTH=file\n",
            "agents/a.yaml": """
                name: a
                description: "${FROM_FILE} ${BOTH} ${MISSING:-fallback} $${LITERAL}"
            """,
        }
    )
    project = load_project(root, environ={"BOTH": "env"})
    assert project.agents["a"].description == "file-value env fallback ${LITERAL}"


def test_numbers_can_come_from_variables(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": "name: a\nbudget: {max_tokens: '${MAX:-1000}', max_cost_usd: $0.25}\n"})
    budget = load_project(root, environ={}).agents["a"].budget
    assert budget is not None
    assert budget.max_tokens == 1000
    assert budget.max_cost_usd == Decimal("0.25")


def test_secret_looking_variables_are_remembered_for_masking(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": "name: a\ndescription: 'key ${SERVICE_API_KEY} for ${USER_NAME}'\n"})
    project = load_project(root, environ={"SERVICE_API_KEY": "sk-123", "USER_NAME": "ann"})
    assert project.secrets == frozenset({"sk-123"})


def test_extends_merges_deeply_and_the_child_wins(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/_base.yaml": """
                instructions: base instructions
                tools: [fs.read, shell]
                budget: {max_tokens: 100, max_turns: 3}
            """,
            "agents/child.yaml": """
                extends: _base.yaml
                name: child
                tools: [fs.list]
                budget: {max_turns: 7}
            """,
        }
    )
    agent = load_project(root, environ={}).agents["child"]
    assert isinstance(agent, LlmAgent)
    assert agent.instructions == "base instructions"
    assert [t.name for t in agent.tools if isinstance(t, BuiltinTool)] == ["fs.list"]  # lists are replaced
    assert agent.budget is not None and (agent.budget.max_tokens, agent.budget.max_turns) == (100, 7)


def test_an_error_inherited_from_a_base_points_into_the_base_file(
    make_project: ProjectFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(
        {
            "agents/_base.yaml": "budget: {max_turns: zero}\n",
            "agents/child.yaml": "extends: _base.yaml\nname: child\n",
        }
    )
    monkeypatch.chdir(root)
    with pytest.raises(SpecError) as info:
        load_project(root, environ={})
    [error] = info.value.errors
    assert (error.file, error.line, error.column) == ("agents/_base.yaml", 1, 21)
    assert error.message == "expected an integer, got 'zero'"


def test_yaml_merge_keys_are_supported(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/a.yaml": """
                name: a
                budget: &limits {max_tokens: 10, max_turns: 2}
                capabilities:
                  fs: {read: ["docs/**"]}
            """,
            "agents/b.yaml": """
                name: b
                shared: &shared {max_tokens: 10, max_turns: 2}
            """,
        }
    )
    with pytest.raises(SpecError) as info:
        load_project(root, environ={})
    assert [e.message for e in info.value.errors] == ["unknown key 'shared'"]
    root2 = make_project(
        {
            "agents/b.yaml": """
                name: b
                budget:
                  <<: {max_tokens: 10, max_turns: 2}
                  max_turns: 5
            """,
        }
    )
    budget = load_project(root2, environ={}).agents["b"].budget
    assert budget is not None and (budget.max_tokens, budget.max_turns) == (10, 5)


def test_tool_references_of_every_kind(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "tools/lint.py": "def lint(path: str) -> str:\n    return path\n",
            "agents/a.yaml": """
                name: a
                tools:
                  - fs.read
                  - python: tools/lint.py:lint
                  - python: json:dumps
                  - agent: b
                  - agent: https://agents.example.com/agents/writer/
                  - agents: {tags: [review]}
            """,
            "agents/b.yaml": "name: b\nskills: [{id: check, tags: [review]}]\n",
        }
    )
    agent = load_project(root, environ={}).agents["a"]
    assert isinstance(agent, LlmAgent)
    kinds = [type(t).__name__ for t in agent.tools]
    assert kinds == ["BuiltinTool", "PythonTool", "PythonTool", "AgentTool", "AgentTool", "AgentSelector"]
    python = agent.tools[1]
    assert isinstance(python, PythonTool) and (python.target, python.function, python.is_file) == (
        "tools/lint.py",
        "lint",
        True,
    )
    remote = agent.tools[4]
    assert isinstance(remote, AgentTool) and remote.is_remote


def test_skills_from_files_and_profile_overriding_a_builtin(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "skills/triage.yaml": "id: triage\ndescription: Sort issues\ntags: [issues]\ntools: [fs.read]\n",
            "profiles/manual.yaml": "name: manual\ndefault: deny\n",
            "agents/a.yaml": "name: a\nskills: [triage]\ntools: [fs.read]\nprofile: manual\n",
        }
    )
    project = load_project(root, environ={})
    assert project.skills["triage"].tags == ["issues"]
    assert project.profiles["manual"].default == "deny"
    assert project.sources["profile:manual"] == root / "profiles" / "manual.yaml"


def test_durations_are_seconds(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "profiles/p.yaml": "name: p\napproval: {timeout: 1h30m}\n",
            "agents/a.yaml": "name: a\nbudget: {max_duration: 500ms}\n",
        }
    )
    project = load_project(root, environ={})
    assert project.profiles["p"].approval.timeout == 5400.0
    budget = project.agents["a"].budget
    assert budget is not None and budget.max_duration == 0.5


def test_workflow_templates_may_use_earlier_steps_and_parallel_outputs(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/w.yaml": """
                name: w
                kind: workflow
                steps:
                  - {id: first, agent: a}
                  - parallel:
                      - {id: left, agent: a, input: "{{ steps.first.output }}"}
                      - {id: right, agent: a, input: "{{ input }}"}
                  - id: pick
                    router:
                      on: left
                      routes:
                        - when: {contains: yes}
                          steps: [{id: yes-branch, agent: a, input: "{{ steps.right.output }}"}]
                  - id: again
                    loop:
                      steps: [{id: try, agent: a}]
                      until: {regex: "done"}
                      max: 3
                output: "{{ steps.try.output }}"
            """,
            "agents/a.yaml": "name: a\n",
        }
    )
    assert isinstance(load_project(root, environ={}).agents["w"], WorkflowAgent)


def test_parallel_branches_cannot_see_each_other(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/w.yaml": """
                name: w
                kind: workflow
                steps:
                  - parallel:
                      - {id: left, agent: a}
                      - {id: right, agent: a, input: "{{ steps.left.output }}"}
            """,
            "agents/a.yaml": "name: a\n",
        }
    )
    with pytest.raises(SpecError) as info:
        load_project(root, environ={})
    assert [e.message for e in info.value.errors] == ["template refers to step 'left', which has not run at this point"]


def test_plain_values_in_flow_mappings_may_hold_a_colon_as_yaml_1_2_allows(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "ca.yaml": "registries:\n  - {name: team, url: https://agents.example.com:8443}\n",
            "tools/lint.py": "def lint(path: str) -> str:\n    return path\n",
            "agents/a.yaml": "name: a\ntools: [{python: tools/lint.py:lint}, {agent: http://127.0.0.1:9/agents/w/}]\n",
        }
    )
    project = load_project(root, environ={})
    assert project.config.registries[0].url == "https://agents.example.com:8443"
    agent = project.agents["a"]
    assert isinstance(agent, LlmAgent)
    python, remote = agent.tools
    assert isinstance(python, PythonTool) and python.python == "tools/lint.py:lint"
    assert isinstance(remote, AgentTool) and remote.agent == "http://127.0.0.1:9/agents/w/"


def test_a_syntax_error_in_a_flow_mapping_with_a_colon_is_still_placed(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": "name: a\ntools: [{python: tools/lint.py:lint]\n"})
    with pytest.raises(SpecError) as info:
        load_project(root, environ={})
    [problem] = info.value.diagnostics
    assert (problem.line, problem.message) == (2, "invalid YAML: expected ',' or '}' here")
