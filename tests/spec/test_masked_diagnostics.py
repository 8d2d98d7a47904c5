"""A config error never shows a secret value: the loader masks every diagnostic it reports.

A value interpolated from a secret-looking variable (``base_url: "${FAKE_KEY}"``), or equal to
any value the runtime would mask (framework.runtime.governance.secrets), is ``***`` in the
message, the hint and the source line; the error keeps its place and its wording.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.errors import SpecError
from framework.spec import load_project
from framework.spec.interpolate import load_dotenv
from tests.conftest import ProjectFactory

SECRET = "sk-supersecret-123456"
TOKEN = "tok-abcdefgh-99999"


def refused(root: Path, environ: dict[str, str]) -> SpecError:
    with pytest.raises(SpecError) as raised:
        load_project(root, environ=environ)
    return raised.value


def shows_nothing_of(error: SpecError, *values: str) -> None:
    everything = "\n".join(
        [str(error), json.dumps(error.data), *(d.render() for d in error.diagnostics), *map(repr, error.diagnostics)]
    )
    for value in values:
        assert value not in everything


def test_a_secret_interpolated_into_an_invalid_value_is_masked_in_its_error(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": 'name: a\nmodel: {provider: openai, name: x, base_url: "${FAKE_KEY}"}\n'})
    error = refused(root, {"FAKE_KEY": SECRET, "OPENAI_API_KEY": "sk-the-real-key-0000"})
    [diagnostic] = error.errors
    assert diagnostic.location().endswith("agents/a.yaml:2:8")
    assert diagnostic.message == "base_url must be an http(s) URL, got '***'"
    assert diagnostic.key_path == "model"
    shows_nothing_of(error, SECRET)


def test_a_secret_given_where_a_number_goes_is_masked(make_project: ProjectFactory) -> None:
    root = make_project(
        {"agents/a.yaml": 'name: a\nmodel: {provider: openai, name: x, temperature: "${OTHER_TOKEN}"}\n'}
    )
    error = refused(root, {"OTHER_TOKEN": TOKEN})
    [diagnostic] = error.errors
    assert (diagnostic.line, diagnostic.column) == (2, 50)
    assert diagnostic.message == "expected a number, got '***'"
    assert diagnostic.key_path == "model.temperature"
    shows_nothing_of(error, TOKEN)


def test_a_plain_variable_holding_a_credentials_value_is_masked_too(make_project: ProjectFactory) -> None:
    """The variable's name does not look secret, but its value is that of one the project names
    as a credential (the defaults' api_key_env), or of a secret-looking variable of .env or the
    environment."""
    root = make_project(
        {
            ".env": "FROM_DOTENV_SECRET=dotenv-value-1\n",
            "ca.yaml": "defaults:\n  model: {provider: openai, name: x, api_key_env: PARTNER_CREDS}\n",
            "agents/a.yaml": "name: a\nmodel: {provider: openai, name: x, base_url: '${BASE}'}\n",
            "agents/b.yaml": "name: b\nmodel: {provider: openai, name: x, base_url: '${OTHER}'}\n",
            "agents/c.yaml": "name: c\nmodel: {provider: openai, name: x, base_url: '${THIRD}'}\n",
        }
    )
    environ = {
        "PARTNER_CREDS": "partner-value-7",
        "BASE": "partner-value-7",
        "SERVICE_PASSWORD": "ambient-value-8",
        "OTHER": "ambient-value-8",
        "THIRD": "dotenv-value-1",
    }
    error = refused(root, environ)
    assert [d.message for d in error.errors] == ["base_url must be an http(s) URL, got '***'"] * 3
    shows_nothing_of(error, "partner-value-7", "ambient-value-8", "dotenv-value-1")


def test_the_source_line_and_the_hint_are_masked(make_project: ProjectFactory) -> None:
    # The secret written out in the file: the line shown under the error masks it as well.
    line = f'model: {{provider: openai, name: x, base_url: "{SECRET}"}}'
    root = make_project({"agents/a.yaml": f"name: a\n{line}\n"})
    error = refused(root, {"FAKE_KEY": SECRET})
    [diagnostic] = error.errors
    assert diagnostic.source_line == line.replace(SECRET, "***")
    shows_nothing_of(error, SECRET)


def test_an_error_without_a_secret_is_unchanged(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": "name: a\nmodel: {provider: openai, name: x, base_url: ftp://h}\n"})
    error = refused(root, {"FAKE_KEY": SECRET})
    assert [d.message for d in error.errors] == ["base_url must be an http(s) URL, got 'ftp://h'"]


def test_a_projects_secrets_come_from_every_source_the_rule_names(make_project: ProjectFactory) -> None:
    """The one rule (the loader masks its diagnostics with it, the runtime fills KNOWN with it), for a
    project using every source of secrets; short ambient values and plain variables are not secrets."""
    from framework.spec.secret_values import secret_values

    root = make_project(
        {
            ".env": "DOTENV_KEY=from-dotenv-file\nPLAIN=not-a-secret-value\n",
            "ca.yaml": """
                defaults:
                  model: {provider: openai, name: x, api_key_env: DEFAULT_MODEL_VAR}
                server:
                  auth:
                    credentials:
                      - {name: ci, token_env: CI_VAR}
                      - {name: partner, api_key_env: PARTNER_VAR}
                registries:
                  - {name: hub, url: "https://hub.example", headers_env: {X-Auth: HUB_VAR}}
                mcp_servers:
                  web: {url: "https://mcp.example/mcp", headers_env: {Authorization: MCP_HEADER_VAR}}
                  local: {command: srv, env: {SRV_TOKEN: "${MCP_ENV_VAR}", MODE: fast-and-loud}}
            """,
            "agents/a.yaml": """
                name: a
                description: "${INTERPOLATED_SECRET}"
                model: {provider: anthropic, name: y, api_key_env: AGENT_MODEL_VAR}
            """,
        }
    )
    environ = {
        "DEFAULT_MODEL_VAR": "default-model-key",
        "CI_VAR": "ci-token-1, ci-token-2",
        "PARTNER_VAR": "partner-api-key",
        "HUB_VAR": "hub-header-value",
        "MCP_HEADER_VAR": "Bearer mcp-header",
        "MCP_ENV_VAR": "mcp-env-value",
        "INTERPOLATED_SECRET": "interpolated-value",
        "AGENT_MODEL_VAR": "agent-model-key",
        "AMBIENT_TOKEN": "ambient-token-value",
        "SHORT_TOKEN": "short",
        "NOT_NAMED": "plain-environment-value",
    }
    project = load_project(root, environ=environ)
    dotenv = load_dotenv(root)
    assert secret_values(project, {**dotenv, **environ}, dotenv) == {
        "from-dotenv-file",  # .env, secret-looking name
        "default-model-key",  # defaults.model.api_key_env
        "ci-token-1, ci-token-2",  # server.auth token_env: the whole value and each of the list
        "ci-token-1",
        "ci-token-2",
        "partner-api-key",  # server.auth api_key_env
        "hub-header-value",  # a registry's headers_env
        "Bearer mcp-header",  # an MCP server's headers_env
        "mcp-env-value",  # an MCP server's secret-named env
        "interpolated-value",  # ${VAR} of a secret-looking name
        "agent-model-key",  # an agent's model api_key_env
        "ambient-token-value",  # the environment, secret-looking name, 8 characters or more
    }
