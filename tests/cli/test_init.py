"""`ca init`: scaffolds a valid project, never overwrites silently, lists templates."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_ca


def test_init_creates_a_valid_project_and_says_what_next(tmp_path: Path) -> None:
    target = tmp_path / "My Agents"
    result = run_ca("init", str(target))
    assert result.returncode == 0, result.stderr
    assert "created  " in result.stdout
    assert "ca validate" in result.stdout and "ca run assistant" in result.stdout
    assert "name: my-agents" in (target / "ca.yaml").read_text()
    check = run_ca("validate", str(target))
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith("ok: 1 agent (1 llm), 4 profiles")


def test_the_next_lines_quote_a_folder_the_shell_would_split(tmp_path: Path) -> None:
    result = run_ca("init", "My Project", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "  cd 'My Project' && ca validate" in result.stdout.splitlines()[-2]
    plain = run_ca("init", "plain", cwd=tmp_path)
    assert "  cd plain && ca validate" in plain.stdout.splitlines()[-2]


def test_scaffolded_yaml_points_editors_at_local_schemas(tmp_path: Path) -> None:
    assert run_ca("init", str(tmp_path)).returncode == 0
    yaml_files = [
        tmp_path / "ca.yaml",
        *(p for d in ("agents", "profiles", "evals") for p in tmp_path.glob(f"{d}/*.yaml")),
    ]
    assert len(yaml_files) == 4
    for path in yaml_files:
        first = path.read_text().splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema="), path
        schema = (path.parent / first.split("=", 1)[1]).resolve()
        assert schema.is_file(), f"{path.name} points at missing {schema}"


def test_the_scaffolded_eval_passes(tmp_path: Path) -> None:
    assert run_ca("init", str(tmp_path)).returncode == 0
    result = run_ca("test", "-p", str(tmp_path), env={"CA_MODEL": "offline"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed, 0 failed" in result.stdout


def test_init_refuses_to_overwrite_and_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "ca.yaml").write_text("# mine\n")
    result = run_ca("init", str(tmp_path))
    assert result.returncode == 2
    assert "already exist; nothing was written" in result.stderr
    assert "--force" in result.stderr
    assert (tmp_path / "ca.yaml").read_text() == "# mine\n"
    assert not (tmp_path / "agents").exists()


def test_init_force_overwrites(tmp_path: Path) -> None:
    (tmp_path / "ca.yaml").write_text("# mine\n")
    result = run_ca("init", str(tmp_path), "--force")
    assert result.returncode == 0, result.stderr
    assert "replaced " in result.stdout
    assert "default_agent: assistant" in (tmp_path / "ca.yaml").read_text()


def test_init_lists_templates() -> None:
    result = run_ca("init", "--list")
    assert result.returncode == 0
    assert result.stdout.startswith("basic ")


def test_unknown_template_suggests_the_close_one(tmp_path: Path) -> None:
    result = run_ca("init", str(tmp_path), "--template", "basc")
    assert result.returncode == 2
    assert "unknown template 'basc' (did you mean 'basic'?)" in result.stderr
    assert list(tmp_path.iterdir()) == []
