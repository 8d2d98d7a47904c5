"""JSON Schemas for editors: generated from the models, committed under docs/schemas, usable."""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator

from framework.spec.loader import LMap
from framework.spec.schema import SCHEMA_FILES, schemas
from framework.spec.source import parse
from tests.conftest import REPO, run_ca


def test_committed_schemas_match_the_models() -> None:
    for kind, schema in schemas().items():
        committed = json.loads((REPO / "docs" / "schemas" / SCHEMA_FILES[kind]).read_text())
        assert committed == schema, f"docs/schemas is stale: run `ca schema --out docs/schemas` ({kind})"


def test_every_schema_is_valid_json_schema() -> None:
    for schema in schemas().values():
        Draft202012Validator.check_schema(schema)


def _plain(data: object) -> object:
    if isinstance(data, LMap | dict):
        return {k: _plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_plain(v) for v in data]
    return data


def test_example_files_satisfy_the_schemas() -> None:
    """What an editor would check: every example agent, profile and eval file passes its schema."""
    all_schemas = schemas()
    for folder, kind in (("agents", "agent"), ("profiles", "profile"), ("evals", "eval")):
        validator = Draft202012Validator(all_schemas[kind])
        for path in sorted((REPO / folder).glob("*.yaml")):
            data = _plain(parse(path, path.read_text(), lambda v, _loc, _raw: v.replace("${CA_MODEL:-offline}", "x")))
            errors = [e.message for e in validator.iter_errors(data)]
            assert errors == [], f"{path.name}: {errors}"


def test_schema_flags_an_unknown_key() -> None:
    validator = Draft202012Validator(schemas()["agent"])
    assert list(validator.iter_errors({"name": "a", "instuctions": "x"}))


def test_schema_command_writes_files(tmp_path: Path) -> None:
    result = run_ca("schema", "--out", str(tmp_path / "s"))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == sorted(SCHEMA_FILES.values())


def test_schema_command_prints_all_kinds() -> None:
    result = run_ca("schema")
    assert sorted(json.loads(result.stdout)) == ["agent", "eval", "profile", "project", "skill"]
