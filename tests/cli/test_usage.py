"""`ca usage`: tokens, cost and tool calls from the audit, checked against the audit's own records.

Real `ca run` processes drive scripted agents (tool calls allowed and denied) and a real provider
integration (langchain-openai) against the local OpenAI-compatible server of tests/fake_openai.py,
priced by genai-prices or by `ca.yaml` `prices:`; then `ca usage --json` must equal what
`ca audit --json` records, group by group.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import genai_prices
import pytest

from tests.conftest import CA, REPO, run_ca, write_project
from tests.fake_openai import USAGE, FakeOpenAI

# Each test runs a few `ca` processes (about 10 s each on two busy cores); the module's runs come first.
pytestmark = pytest.mark.timeout(600)
Json = dict[str, Any]
READER = """
    name: reader
    profile: autonomous
    capabilities: {fs: {read: ['*.txt']}}
    tools: [fs.read]
    model:
      provider: scripted
      replies:
        - tool_calls: [{name: fs.read, args: {path: notes.txt}}]
        - tool_calls: [{name: fs.read, args: {path: secret.key}}]
        - done reading
"""


def provider_agent(name: str, model: str, url: str) -> str:
    return f"""
        name: {name}
        model: {{provider: openai, name: {model}, base_url: '{url}', api_key_env: FAKE_KEY}}
    """


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, fake: FakeOpenAI) -> Path:
    """Runs of four agents: scripted with tools, offline, gpt-4o-mini (genai-prices), an unpriced
    model, and gpt-4.1 priced by ca.yaml (its table wins over genai-prices)."""
    root = write_project(
        tmp_path_factory.mktemp("usage"),
        {
            "ca.yaml": """
                name: usage
                prices:
                  "openai:gpt-4.1": {input_per_mtok: 1000, output_per_mtok: 2000}
            """,
            "notes.txt": "remember the milk\n",
            "secret.key": "nope\n",
            "agents/reader.yaml": READER,
            "agents/local.yaml": "name: local\nmodel: offline\n",
            "agents/mini.yaml": provider_agent("mini", "gpt-4o-mini", fake.url),
            "agents/mystery.yaml": provider_agent("mystery", "no-such-model-anywhere", fake.url),
            "agents/pricy.yaml": provider_agent("pricy", "gpt-4.1", fake.url),
        },
    )
    for agent in ("reader", "local", "mini", "mystery", "pricy"):
        done = run_ca("run", agent, "hello", cwd=root, env={"FAKE_KEY": "sk-test"})
        assert done.returncode == 0, done.stderr
    return root


def usage(root: Path, *args: str) -> Json:
    result = run_ca("usage", "--json", *args, cwd=root)
    assert result.returncode == 0, result.stderr
    report: Json = json.loads(result.stdout)
    return report


def audit(root: Path) -> list[Json]:
    result = run_ca("audit", "--json", cwd=root)
    assert result.returncode == 0, result.stderr
    records: list[Json] = json.loads(result.stdout)
    return records


def expected(records: list[Json], key: str) -> dict[str, Json]:
    """The sums ``ca usage --by KEY`` must show, straight from the audit records."""
    model_of: dict[str, str] = {}
    groups: dict[str, Json] = {}
    for record in records:
        kind, data = record["kind"], record["data"]
        if kind not in ("model.call", "tool.call", "denial"):
            continue
        if kind == "model.call":
            model_of[record["task_id"]] = data["model"]
        group = {
            "agent": record["agent"],
            "model": model_of.get(record["task_id"], "-"),
            "caller": data["caller"],
            "day": record["ts"][:10],
        }[key]
        sums = groups.setdefault(group, {"tasks": set(), "calls": 0, "in": 0, "out": 0, "cost": [], "tools": 0})
        sums["tasks"].add(record["task_id"])
        if kind == "model.call":
            sums["calls"] += 1
            sums["in"] += data["input_tokens"]
            sums["out"] += data["output_tokens"]
            sums["cost"].append(data["cost_usd"])
        else:
            sums["tools"] += 1
    return groups


def assert_matches(report: Json, sums: dict[str, Json]) -> None:
    assert [g["group"] for g in report["groups"]] == sorted(sums)
    for group in report["groups"]:
        want = sums[group["group"]]
        assert group["runs"] == len(want["tasks"])
        assert (group["model_calls"], group["input_tokens"], group["output_tokens"]) == (
            want["calls"],
            want["in"],
            want["out"],
        )
        assert group["tool_calls"] == want["tools"]
        if None in want["cost"]:
            assert group["cost_usd"] is None
        else:
            assert group["cost_usd"] == pytest.approx(sum(want["cost"]), abs=1e-12)
    total = report["total"]
    assert total["model_calls"] == sum(s["calls"] for s in sums.values())
    assert total["input_tokens"] == sum(s["in"] for s in sums.values())
    assert total["output_tokens"] == sum(s["out"] for s in sums.values())
    assert total["tool_calls"] == sum(s["tools"] for s in sums.values())
    assert total["runs"] == len(set().union(*(s["tasks"] for s in sums.values())))


def test_usage_totals_equal_the_sum_over_the_audit_records(project: Path) -> None:
    records = audit(project)
    for by in ("agent", "model", "caller", "day"):
        report = usage(project, "--by", by)
        assert report["by"] == by
        assert_matches(report, expected(records, by))
        assert report["total"]["model_calls"] == 3 + 1 + 3 * 1  # reader's 3 turns, local's 1, three provider runs
        assert report["total"]["runs"] == 5
        assert report["total"]["cost_usd"] is None  # the unpriced model makes the whole total unknown
        assert report["total"]["unknown_prices"] == ["openai:no-such-model-anywhere"]


def test_prices_come_from_genai_prices_with_ca_yaml_over_them(project: Path) -> None:
    groups = {g["group"]: g for g in usage(project, "--by", "model")["groups"]}
    tokens_in, tokens_out = USAGE["prompt_tokens"], USAGE["completion_tokens"]
    mini = groups["openai:gpt-4o-mini"]
    assert (mini["runs"], mini["model_calls"], mini["input_tokens"], mini["output_tokens"]) == (
        1,
        1,
        tokens_in,
        tokens_out,
    )
    listed = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=tokens_in, output_tokens=tokens_out), "gpt-4o-mini", provider_id="openai"
    )
    assert listed.total_price > 0
    assert mini["cost_usd"] == pytest.approx(float(listed.total_price))
    # ca.yaml's table wins: 1000 $/Mtok in, 2000 $/Mtok out.
    override = (Decimal(1000) * tokens_in + Decimal(2000) * tokens_out) / Decimal(1_000_000)
    assert groups["openai:gpt-4.1"]["cost_usd"] == pytest.approx(float(override))
    # Local models cost nothing, and that is known.
    assert groups["scripted"]["cost_usd"] == 0 and groups["offline"]["cost_usd"] == 0
    assert groups["scripted"]["unknown_prices"] == []
    unknown = groups["openai:no-such-model-anywhere"]
    assert unknown["cost_usd"] is None and unknown["unknown_prices"] == ["openai:no-such-model-anywhere"]
    assert unknown["input_tokens"] == tokens_in  # its tokens still count


def test_tool_calls_are_counted_by_tool_and_decision(project: Path) -> None:
    [reader] = [g for g in usage(project, "--by", "agent")["groups"] if g["group"] == "reader"]
    assert reader["tool_calls"] == 2
    assert reader["tools"] == {"fs.read": {"allowed": 1, "denied": 1}}


def test_the_table_says_unknown_and_which_models_lack_a_price(project: Path) -> None:
    result = run_ca("usage", "--by", "model", cwd=project)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["model", "runs"]
    rows = {line.split()[0]: line.split() for line in lines[1:-1]}
    assert rows["openai:no-such-model-anywhere"][-2] == "unknown"
    assert rows["total"][-2] == "unknown"
    assert rows["scripted"][-2] == "0.000000"
    assert float(rows["openai:gpt-4o-mini"][-2]) > 0
    assert lines[-1].startswith("unknown: no price for openai:no-such-model-anywhere; add them to ca.yaml prices:")


def test_since_keeps_only_the_calls_from_then_on(project: Path) -> None:
    before = usage(project)["total"]
    assert usage(project, "--since", "1h")["total"] == before  # everything ran in the last hour
    time.sleep(0.01)
    mark = datetime.now(UTC).isoformat()
    done = run_ca("run", "local", "again", cwd=project)
    assert done.returncode == 0, done.stderr
    after = usage(project, "--since", mark)
    assert [(g["group"], g["runs"], g["model_calls"]) for g in after["groups"]] == [("local", 1, 1)]
    assert usage(project)["total"]["model_calls"] == before["model_calls"] + 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--by", "week"), "error: --by 'week' is not a grouping: use one of agent, model, caller, day"),
        (("--since", "yesterday"), "error: --since 'yesterday' is neither an ISO time"),
    ],
)
def test_a_bad_flag_gets_one_line_and_exit_2(project: Path, args: tuple[str, ...], says: str) -> None:
    result = run_ca("usage", *args, cwd=project)
    assert result.returncode == 2
    assert result.stderr.startswith(says)
    assert len(result.stderr.splitlines()) == 1


PROBE = (
    "import atexit, runpy, sys; "
    "atexit.register(lambda: sys.stderr.write(f'\\ngenai_prices imported: {\"genai_prices\" in sys.modules}\\n')); "
    "sys.argv = ['ca', *sys.argv[1:]]; runpy.run_module('framework', run_name='__main__')"
)


def imported_prices(root: Path, *args: str, stdin: str = "") -> bool:
    import os
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO), "FAKE_KEY": "sk-test"},
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        check=False,
    )
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("genai_prices imported: "), result.stderr
    return last.endswith("True")


def test_start_up_paths_and_local_turns_never_import_genai_prices(project: Path) -> None:
    assert CA[-2:] == ["-m", "framework"]  # the probe runs ca the way the tests do
    initialize = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}}
    )
    assert not imported_prices(project, "--help")
    assert not imported_prices(project, "validate")
    assert not imported_prices(project, "run", "local", "hi")
    assert not imported_prices(project, "run", "reader", "hi")
    assert not imported_prices(project, "run", "--stdio", "--protocol", "acp", "local", stdin=initialize + "\n")
    assert imported_prices(project, "run", "mini", "hi")  # a priced call is the cost path: it loads the table
