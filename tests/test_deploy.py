"""The deployment files (Dockerfile, docker-compose.yml, deploy/) and docs/deploy.md, checked
against the code so that they cannot drift: the variables they set are the settings model's,
the probe paths are the server's, the port is the one the image serves on. ``docker compose
config`` validates the compose file where Docker Compose is installed (images cannot be pulled
in CI, so nothing is started)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from framework.protocols.a2a.probes import HEALTH_PATH, READY_PATH
from framework.spec import load_project
from framework.spec.settings import Deployment, overrides, read, variable
from tests.conftest import REPO

SETTINGS = {variable(field) for field in Deployment.model_fields}
TOKENS = {"OPS_TOKEN": "ops-token", "TEAM_TOKEN": "team-token"}


def _yaml(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of each instruction of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (REPO / "Dockerfile").read_text(encoding="utf-8"))
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def _instructions(name: str) -> list[str]:
    return [args for instruction, args in _dockerfile() if instruction == name]


def _image_env() -> dict[str, str]:
    return dict(pair.split("=", 1) for args in _instructions("ENV") for pair in shlex.split(args))


def _compose_env() -> dict[str, str]:
    replica = _yaml(REPO / "docker-compose.yml")["x-replica"]
    return {k: str(v) for k, v in replica["environment"].items()}


def test_the_image_sets_only_real_settings_with_valid_values() -> None:
    env = _image_env()
    ours = {k: v for k, v in env.items() if k.startswith("CA_")}
    assert set(ours) <= SETTINGS, set(ours) - SETTINGS
    settings = read(ours)  # every value valid
    assert (settings.host, settings.log_format) == ("0.0.0.0", "json")
    assert _instructions("EXPOSE") == [str(settings.port)]
    assert _instructions("ENTRYPOINT") == ['["ca", "serve"]']


def test_the_image_checks_health_installs_the_lock_and_runs_as_a_user() -> None:
    [check] = _instructions("HEALTHCHECK")
    assert f"+ '{HEALTH_PATH}'" in check, check  # http://127.0.0.1:$CA_PORT/healthz
    syncs = [args for args in _instructions("RUN") if args.startswith("uv sync")]
    assert syncs and all("--locked" in s and "--extra postgres" in s and "--no-dev" in s for s in syncs)
    [user] = _instructions("USER")
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) != 0, user  # numeric: runAsNonRoot can check it
    copied = [args.split()[-2] for args in _instructions("COPY") if not args.startswith("--from")]
    ignored = (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
    for source in copied:  # each file the image copies is let through .dockerignore
        assert f"!{source}" in ignored or f"!{source}/" in ignored, source


def test_every_locked_package_installs_from_a_wheel() -> None:
    """Nothing is compiled where the project is installed: a package built there is built for that
    CPU (ruamel.yaml.clibz, which Zig compiles with AVX-512 where the CPU has it), and the venv or
    image then dies with SIGILL on a machine whose CPU lacks it."""
    lock = tomllib.loads((REPO / "uv.lock").read_text(encoding="utf-8"))
    built_here = [
        f"{package['name']} {package['version']}"
        for package in lock["package"]
        if "registry" in package.get("source", {}) and not package.get("wheels")
    ]
    assert built_here == []


def test_the_image_project_is_valid_and_requires_auth(tmp_path: Path) -> None:
    """deploy/ca.yaml with the example agents, as the image lays them out, in the image's environment."""
    for name in ("agents", "tools"):
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.copy(REPO / "ca.mcp.lock", tmp_path / "ca.mcp.lock")
    shutil.copy(REPO / "deploy" / "ca.yaml", tmp_path / "ca.yaml")
    project = load_project(tmp_path, environ={**_image_env(), **TOKENS})
    assert project.config.server.host == "0.0.0.0"
    assert project.config.server.auth is not None
    assert {i.env for i in project.config.server.auth.identities()} == set(TOKENS)
    example = load_project(REPO, environ={}).config
    assert project.config.defaults == example.defaults  # the same project as the repository's
    assert project.config.mcp_servers.keys() == example.mcp_servers.keys()


def test_the_replicas_share_postgresql_and_the_balancer_checks_readiness() -> None:
    compose = _yaml(REPO / "docker-compose.yml")
    env = _compose_env()
    assert set(k for k in env if k.startswith("CA_")) <= SETTINGS
    assert set(TOKENS) <= set(env)
    replicas = [name for name, service in compose["services"].items() if "build" in service]
    assert len(replicas) == 2 and all(compose["services"][r]["depends_on"]["postgres"] for r in replicas)
    assert env["CA_STORE_URL"].startswith("postgresql://") and "@postgres:5432/" in env["CA_STORE_URL"]
    assert compose["services"]["postgres"]["image"].startswith("postgres:")
    assert compose["services"]["lb"]["image"].startswith("haproxy:")
    port = _image_env()["CA_PORT"]
    haproxy = (REPO / "deploy" / "haproxy.cfg").read_text(encoding="utf-8")
    assert f"http-check send meth GET uri {READY_PATH}" in haproxy
    assert sorted(re.findall(r"^\s*server (\S+) (\S+)$", haproxy, re.M)) == [(r, f"{r}:{port}") for r in replicas]


def test_docker_compose_config_accepts_the_file() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("docker is not installed: docker-compose.yml is checked against the code only")
    version = subprocess.run([docker, "compose", "version"], capture_output=True, text=True)
    if version.returncode != 0:
        said = (version.stderr.strip() or version.stdout.strip()).splitlines()[:1]
        pytest.skip(f"docker has no compose plugin here ({said[0] if said else version.returncode})")
    done = subprocess.run(
        [docker, "compose", "-f", str(REPO / "docker-compose.yml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", **TOKENS},
    )
    assert done.returncode == 0, done.stderr


# -- docs/deploy.md ----------------------------------------------------------------------------


DOC = REPO / "docs" / "deploy.md"
ROW = re.compile(r"^\| `(CA_[A-Z_]+)` \| (?:`([a-z_.]+)`|—) \|", re.M)


def test_the_settings_table_is_the_model() -> None:
    rows = {m[1]: m[2] or None for m in ROW.finditer(DOC.read_text(encoding="utf-8"))}
    assert rows == {variable(field): overrides(field) for field in Deployment.model_fields}


def test_the_kubernetes_example_probes_the_real_paths_and_port() -> None:
    text = DOC.read_text(encoding="utf-8")
    manifests = [YAML(typ="safe").load(block) for block in re.findall(r"```yaml partial\n(.*?)```", text, re.S)]
    kinds = {m["kind"]: m for m in manifests}
    assert set(kinds) == {"Secret", "Deployment", "Service"}
    deployment = kinds["Deployment"]["spec"]
    assert deployment["replicas"] == 2
    [container] = deployment["template"]["spec"]["containers"]
    assert container["ports"] == [{"name": "http", "containerPort": int(_image_env()["CA_PORT"])}]
    assert container["livenessProbe"]["httpGet"]["path"] == HEALTH_PATH
    assert container["readinessProbe"]["httpGet"]["path"] == READY_PATH
    secret = kinds["Secret"]["stringData"]
    assert set(TOKENS) <= set(secret)
    assert {k for k in secret if k.startswith("CA_")} | {e["name"] for e in container["env"]} <= SETTINGS
    read({k: v for k, v in secret.items() if k.startswith("CA_")})  # valid values
    assert deployment["template"]["spec"]["terminationGracePeriodSeconds"] > 30  # > CA_SHUTDOWN_TIMEOUT
