"""Deployment settings from the environment (``CA_*``) over ``ca.yaml``, flags over both."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from framework.errors import SpecError
from framework.spec import load_project
from framework.spec.project import SETTINGS_FIELDS, sets_deployment
from framework.spec.settings import Deployment, overrides, variable
from tests.conftest import CA, REPO, ProjectFactory, free_port, run_ca

CA_YAML = """
default_agent: echo
server: {host: 127.0.0.1, port: 8765, shutdown_timeout: 30s}
store: {url: "sqlite:///.ca/state.db"}
"""
FILES = {"ca.yaml": CA_YAML, "agents/echo.yaml": "name: echo\n"}


def test_variables_win_over_ca_yaml(make_project: ProjectFactory) -> None:
    environ = {
        "CA_STORE_URL": "postgresql://ca:pw@db:5432/ca",
        "CA_HOST": "0.0.0.0",
        "CA_PORT": "9000",
        "CA_PUBLIC_URL": "https://agents.example.com/",
        "CA_SHUTDOWN_TIMEOUT": "1m30s",
        "CA_TASK_LEASE": "3s",
    }
    config = load_project(make_project(FILES), environ=environ).config
    assert config.store.url == "postgresql://ca:pw@db:5432/ca"
    assert (config.server.host, config.server.port) == ("0.0.0.0", 9000)
    assert config.server.public_url == "https://agents.example.com"  # as ca.yaml's: no trailing slash
    assert config.server.shutdown_timeout == 90.0
    assert config.store.task_lease == 3.0


def test_unset_or_empty_variables_leave_ca_yaml_values(make_project: ProjectFactory) -> None:
    config = load_project(make_project(FILES), environ={"CA_PORT": "", "CA_MODEL": "offline"}).config
    assert config.server.port == 8765
    assert config.store.url == "sqlite:///.ca/state.db"
    assert config.server.shutdown_timeout == 30.0
    assert config.store.task_lease == 15.0  # the default lease


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("CA_PORT", "abc", "CA_PORT='abc': Input should be a valid integer"),
        ("CA_PORT", "70000", "CA_PORT='70000': Input should be less than or equal to 65535"),
        ("CA_LOG_FORMAT", "xml", "CA_LOG_FORMAT='xml': Input should be 'human' or 'json'"),
        ("CA_STORE_URL", "ftp://u:hunter2@h/x", "CA_STORE_URL='ftp://u:***@h/x': unsupported store URL"),
        ("CA_SHUTDOWN_TIMEOUT", "45", "CA_SHUTDOWN_TIMEOUT='45': invalid duration '45'"),
        ("CA_TASK_LEASE", "soon", "CA_TASK_LEASE='soon': invalid duration 'soon'"),
        ("CA_PUBLIC_URL", "agents.example.com", "CA_PUBLIC_URL='agents.example.com': expected an http(s) URL"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    make_project: ProjectFactory, name: str, value: str, message: str
) -> None:
    root = make_project(FILES)
    with pytest.raises(SpecError) as raised:
        load_project(root, environ={name: value})
    [diagnostic] = raised.value.diagnostics
    assert diagnostic.render().startswith(f"environment: error: {message}")
    assert diagnostic.render().endswith(f"; fix or unset {name}")
    assert "hunter2" not in diagnostic.render()


@pytest.mark.parametrize("command", [["validate"], ["serve"]])
def test_the_cli_reports_a_bad_variable_and_exits_2(make_project: ProjectFactory, command: list[str]) -> None:
    root = make_project(FILES)
    done = run_ca(*command, str(root), env={"CA_PORT": "abc"})
    assert done.returncode == 2, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("environment: error: CA_PORT='abc': Input should be a valid integer"), done.stderr
    assert "Traceback" not in done.stderr


def test_ca_port_is_served_and_a_flag_wins_over_it(make_project: ProjectFactory) -> None:
    root = make_project(FILES)
    from_env, from_flag = free_port(), free_port()
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "CA_PORT": str(from_env), "CA_HOST": "127.0.0.1"}
    for args, port in (([], from_env), (["--port", str(from_flag)], from_flag)):
        proc = subprocess.Popen(
            [*CA, "serve", str(root), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # "serving N agents at URL" once it listens
            assert line.startswith(f"serving 1 agent at http://127.0.0.1:{port}"), line + proc.stdout.read()
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
        finally:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.mark.parametrize("environ", [{}, {"CA_MODEL": "offline"}], ids=["no variable", "a CA_ variable of ${...}"])
def test_loading_without_settings_variables_does_not_import_pydantic_settings(environ: dict[str, str]) -> None:
    """``ca validate`` and the stdio start stay as fast as before: the model loads only when needed."""
    code = (
        "import sys; from framework.spec import load_project; "
        f"load_project({str(REPO)!r}, environ={environ!r}); "
        "assert 'pydantic_settings' not in sys.modules, 'imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_loader_knows_every_settings_field() -> None:
    """The loader decides from SETTINGS_FIELDS whether to read the settings at all."""
    assert set(SETTINGS_FIELDS) == set(Deployment.model_fields)


@pytest.mark.parametrize("name", ["CA_PORT", "ca_port", "Ca_Log_Format"])
def test_a_settings_variable_in_any_case_is_read(name: str) -> None:
    assert sets_deployment({name: "1"})


def test_every_setting_has_its_variable_and_help() -> None:
    """``ca serve --help`` lists every variable of the model, with the ca.yaml key it overrides."""
    done = run_ca("serve", "--help")
    for field in Deployment.model_fields:
        line = next((x for x in done.stdout.splitlines() if x.strip().startswith(variable(field) + " ")), None)
        assert line is not None, f"{variable(field)} is not in ca serve --help"
        key = overrides(field)
        assert key is None or key in line, (field, line)
