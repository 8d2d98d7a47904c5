"""The repository's own evals (evals/examples.yaml) pass, and its committed cassette is what
recording the case against a local OpenAI-compatible server gives."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import REPO, run_ca
from tests.fake_openai import FakeOpenAI

RECORDED = "assistant-on-a-provider"
CASSETTE = Path("evals/cassettes/examples") / f"{RECORDED}.yaml"


def test_the_example_evals_pass_in_replay() -> None:
    result = run_ca("test", cwd=REPO, env={"CA_MODEL": "offline"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 failed" in result.stdout
    assert not (REPO / "evals" / "cassettes" / "examples" / "release-publishes-after-the-gate.yaml").exists()


def test_the_committed_cassette_is_a_faithful_recording(tmp_path: Path) -> None:
    for folder in ("agents", "profiles", "evals"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    shutil.copy(REPO / "ca.yaml", tmp_path / "ca.yaml")
    evals = tmp_path / "evals" / "examples.yaml"
    with FakeOpenAI({"path": "notes/todo.txt"}) as server:
        evals.write_text(evals.read_text().replace("http://127.0.0.1:8799/v1", server.url))
        result = run_ca("test", "--record", "-k", RECORDED, cwd=tmp_path, env={"CA_MODEL": "offline"})
        assert result.returncode == 0, result.stdout + result.stderr
        assert len(server.requests) == 2
    assert (tmp_path / CASSETTE).read_text() == (REPO / CASSETTE).read_text()
