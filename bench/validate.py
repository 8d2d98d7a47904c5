"""Wall time of `ca validate` as a whole process on a generated project of 200 agents and 20 profiles.

    python bench/validate.py [--agents 200] [--profiles 20] [--runs 7]

Prints the median and the spread; the target on the reference machine (2 cores) is <= 1.0 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

AGENT = """\
version: 1
name: agent-{i}
description: Generated agent number {i}
model: ${{CA_MODEL:-offline}}
instructions: |
  You are agent {i}. Answer briefly and cite the files you read.
skills:
  - id: task-{i}
    name: Task {i}
    description: Does task {i}
    tags: [generated, group-{group}]
    examples: ["Do task {i}"]
tools:
  - fs.read
  - fs.search
  - shell
  - agent: agent-{callee}
profile: profile-{profile}
budget: {{max_tokens: 20000, max_cost_usd: 0.25, max_tool_calls: 10, max_turns: 8, max_duration: 5m, on_exceed: ask}}
capabilities:
  fs: {{read: ["src/**", "docs/**"], write: ["out/{i}/**"]}}
  shell: {{allow: ["pytest *", "ruff check *"]}}
  network: {{allow: ["api.github.com"]}}
  agents: [agent-{callee}]
contract:
  must_not:
    - {{tool: shell, args: {{command: "git push*"}}}}
    - {{output_matches: '(?i)(api[_-]?key|password)\\s*[:=]'}}
  must_always:
    - {{output_matches: '\\S'}}
"""

PROFILE = """\
version: 1
name: profile-{i}
description: Generated profile {i}
rules:
  - {{match: {{capability: fs.read}}, action: allow}}
  - {{match: {{capability: fs.write}}, action: ask}}
  - {{match: {{tool: shell, args: {{command: "pytest*"}}}}, action: allow}}
  - {{match: {{capability: network}}, action: deny, reason: offline project}}
  - {{match: {{cost_usd_over: 0.10}}, action: ask}}
default: ask
approval: {{timeout: 30m, on_timeout: reject}}
"""


def generate(root: Path, agents: int, profiles: int) -> None:
    (root / "agents").mkdir(parents=True)
    (root / "profiles").mkdir()
    for i in range(profiles):
        (root / "profiles" / f"profile-{i}.yaml").write_text(PROFILE.format(i=i))
    for i in range(agents):
        # agent i calls agent i+1: a long chain, no cycle (the last calls nobody new).
        callee = i + 1 if i + 1 < agents else i - 1
        text = AGENT.format(i=i, group=i % 10, callee=callee, profile=i % profiles)
        if i == agents - 1:
            text = text.replace(f"  - agent: agent-{callee}\n", "").replace(f"agents: [agent-{callee}]", "agents: []")
        (root / "agents" / f"agent-{i}.yaml").write_text(text)
    (root / "ca.yaml").write_text("version: 1\nname: bench\ndefault_agent: agent-0\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--profiles", type=int, default=20)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate(root, args.agents, args.profiles)
        command = [sys.executable, "-m", "framework", "validate", str(root)]
        first = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if first.returncode != 0:
            sys.exit(f"generated project did not validate:\n{first.stderr[-2000:]}")
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run(command, env=env, capture_output=True, check=True)
            times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(f"ca validate: {args.agents} agents, {args.profiles} profiles, {args.runs} runs (whole process)")
    print(f"  median {median:.3f} s   min {min(times):.3f} s   max {max(times):.3f} s   target <= 1.000 s")
    print(f"  {first.stdout.strip()}")


if __name__ == "__main__":
    main()
