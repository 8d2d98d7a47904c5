"""Warnings of `ca validate`: what a run would refuse or what depends on the environment, each at its line."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from framework.errors import SpecError
from framework.spec import load_project
from tests.conftest import ProjectFactory


def problems(root: object, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every diagnostic of the project as ``file:line:col: severity: message`` (files relative to it)."""
    try:
        diagnostics = load_project(root, environ=dict(environ or {})).warnings  # type: ignore[arg-type]
    except SpecError as exc:
        diagnostics = tuple(exc.diagnostics)
    return [f"{d.file}:{d.line}:{d.column}: {d.severity}: {d.message}" for d in diagnostics]


@pytest.fixture(autouse=True)
def _in_project(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # diagnostics print paths relative to the current directory


def test_a_tool_the_capabilities_never_allow_is_a_warning(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/a.yaml": """
                name: a
                tools: [fs.read, fs.write, shell, http.get, {python: json:dumps}]
                capabilities: {fs: {write: ["out/**"]}}
            """,
            "agents/b.yaml": "name: b\ntools: [fs.list]\n",
        }
    )
    assert problems(root) == [
        "agents/a.yaml:2:28: warning: tool 'shell' can never run: the agent's capabilities allow no commands",
        "agents/a.yaml:2:35: warning: tool 'http.get' can never run: the agent's capabilities allow no network hosts",
        "agents/b.yaml:2:9: warning: tool 'fs.list' can never run: the agent has no capabilities (nor has ca.yaml "
        "defaults.capabilities), and nothing unlisted is allowed",
    ]


def test_capabilities_from_ca_yaml_defaults_count(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "ca.yaml": "defaults: {capabilities: {shell: {allow: ['pytest *']}}}\n",
            "agents/a.yaml": "name: a\ntools: [shell, fs.read]\n",
        }
    )
    assert problems(root) == [
        "agents/a.yaml:2:16: warning: tool 'fs.read' can never run: ca.yaml's defaults.capabilities allow no file reads"
    ]


def test_an_agent_tool_not_listed_in_capabilities_agents_is_a_warning(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/a.yaml": """
                name: a
                tools: [{agent: b}, {agent: c}]
                capabilities: {agents: [c]}
            """,
            "agents/b.yaml": "name: b\n",
            "agents/c.yaml": "name: c\n",
        }
    )
    assert problems(root) == [
        "agents/a.yaml:2:17: warning: agent 'b' is not in capabilities.agents, so every call to it is denied"
    ]


def test_a_tag_selector_with_registries_that_no_local_agent_matches_is_a_warning(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "ca.yaml": "registries: [{name: team, url: https://agents.example.com}]\n",
            "agents/a.yaml": "name: a\ntools: [{agents: {tags: [review]}}]\n",
        }
    )
    assert problems(root) == [
        "agents/a.yaml:2:25: warning: no other agent of the project has skills tagged [review]; only an agent of "
        "a registry can match, if one lists it when the agent starts"
    ]


def test_a_required_pattern_that_matches_nothing_in_particular_is_a_warning(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": "name: a\ncontract: {must_always: [{output_matches: 'VERDICT.*|'}]}\n"})
    assert problems(root) == [
        "agents/a.yaml:2:44: warning: must_always `output_matches` 'VERDICT.*|' matches an empty text, "
        "so every output satisfies it"
    ]


def test_an_azure_model_without_api_version_is_a_warning_unless_given(make_project: ProjectFactory) -> None:
    files = {
        "agents/a.yaml": "name: a\nmodel: azure_openai:gpt-4o\n",
        "agents/b.yaml": "name: b\nmodel: {provider: azure_openai, name: gpt-4o, params: {api_version: '2024-10-21'}}\n",
    }
    root = make_project(files)
    key = {"AZURE_OPENAI_API_KEY": "k"}
    assert problems(root, key) == [
        "agents/a.yaml:2:8: warning: model 'azure_openai:gpt-4o' has no API version; "
        "Azure OpenAI refuses requests without one"
    ]
    assert problems(root, {**key, "OPENAI_API_VERSION": "2024-10-21"}) == []


def test_a_warning_about_the_model_of_ca_yaml_points_at_ca_yaml(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "ca.yaml": "name: p\ndefaults:\n  model: openai:gpt-4o-mini\n",
            "agents/a.yaml": "name: a\n",
            "agents/b.yaml": "name: b\n",
            "agents/c.yaml": "name: c\nmodel: offline\n",
        }
    )
    assert problems(root) == [
        "ca.yaml:3:10: warning: OPENAI_API_KEY is not set; model 'openai:gpt-4o-mini' will fail at run time"
    ]


def test_an_unset_server_auth_variable_is_a_warning_at_ca_yaml(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "ca.yaml": "server:\n  auth: {bearer_tokens_env: CA_TOKENS, api_keys_env: CA_KEYS}\n",
            "agents/a.yaml": "name: a\n",
        }
    )
    assert problems(root, {"CA_KEYS": "k1"}) == [
        "ca.yaml:2:29: warning: CA_TOKENS is not set; `ca serve` refuses to start until it holds the credentials"
    ]
    assert problems(root, {"CA_KEYS": "k1", "CA_TOKENS": "t1"}) == []


def test_an_unset_credential_variable_is_a_warning_at_its_line(make_project: ProjectFactory) -> None:
    """A named credential's variable unset is what `ca serve` refuses to start with, as the shared forms."""
    root = make_project(
        {
            "ca.yaml": (
                "server:\n  auth:\n    credentials:\n      - {name: team-a, token_env: TEAM_A_TOKEN}\n"
                "      - {name: bot, api_key_env: BOT_KEY}\n"
            ),
            "agents/a.yaml": "name: a\n",
        }
    )
    assert problems(root, {"BOT_KEY": "k1"}) == [
        "ca.yaml:4:35: warning: TEAM_A_TOKEN is not set; `ca serve` refuses to start until it holds the credentials"
    ]
    assert problems(root, {"BOT_KEY": "k1", "TEAM_A_TOKEN": "t1"}) == []


def test_a_workflow_tool_step_its_capabilities_never_allow_is_a_warning(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/flow.yaml": """
                name: flow
                kind: workflow
                capabilities: {fs: {read: ["**"]}}
                steps:
                  - {id: look, tool: fs.list, args: {path: .}}
                  - parallel:
                      - {id: save, tool: fs.write, args: {path: out.txt, content: "{{ steps.look.output }}"}}
                      - {id: other, message: done}
            """,
        }
    )
    assert problems(root) == [
        "agents/flow.yaml:7:26: warning: tool step 'fs.write' can never run: the agent's capabilities allow no "
        "file writes"
    ]


def test_a_workflow_contract_must_name_one_of_its_tool_steps(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/flow.yaml": """
                name: flow
                kind: workflow
                capabilities: {fs: {read: ["**"]}}
                contract: {must_always: [{tool_called: fs.read}]}
                steps:
                  - {id: look, tool: fs.list, args: {path: .}}
            """,
        }
    )
    assert problems(root) == [
        "agents/flow.yaml:4:40: error: the contract requires a call of 'fs.read', a tool the agent does not have, "
        "so every run would break it"
    ]
