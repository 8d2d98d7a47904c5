"""What replaying evals costs: wall time of `ca test` over N recorded provider cases.

    python bench/evals.py [--cases 50] [--jobs 2 4]

A project with one agent on an OpenAI-compatible model (a local fake server) and N cases,
each a tool call and an answer (two model exchanges). The cases are recorded once
(`ca test --record`), the server is stopped, then `ca test` replays them: the figure is the
whole process, start-up to exit, for each --jobs value (median of --runs).
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
sys.path.insert(0, str(REPO))

from tests.fake_openai import FakeOpenAI  # noqa: E402 - after the path is set

AGENT = """\
name: reader
instructions: Read the file you are asked about, then answer.
profile: autonomous
model:
  provider: openai
  name: fake-model
  base_url: "{url}"
  params: {{max_retries: 0, timeout: 5}}
tools: [fs.read]
capabilities:
  fs: {{read: ["**"]}}
"""

CASE = """\
  - name: case-{n}
    agent: reader
    files: {{notes.txt: "note number {n}"}}
    input: What does note {n} say?
    expect:
      tools_called: [{{tool: fs.read, args: {{path: notes.txt}}, count: 1}}]
      output_contains: "note number {n}"
"""


def ca(project: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "framework", "test", *args], cwd=project, env=env, capture_output=True, text=True
    )
    return time.perf_counter() - start, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=50)
    parser.add_argument("--jobs", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        (project / "agents").mkdir()
        (project / "evals").mkdir()
        with FakeOpenAI({"path": "notes.txt"}) as server:
            (project / "agents" / "reader.yaml").write_text(AGENT.format(url=server.url))
            cases = "".join(CASE.format(n=n) for n in range(options.cases))
            (project / "evals" / "bench.yaml").write_text("cases:\n" + cases)
            seconds, done = ca(project, "--record", "-j", "4")
            if done.returncode != 0:
                sys.exit(f"recording failed:\n{done.stdout}\n{done.stderr}")
        print(f"recorded {options.cases} cases ({len(server.requests)} model requests) in {seconds:.2f}s")
        for jobs in options.jobs:
            times = []
            for _ in range(options.runs):
                seconds, done = ca(project, "-j", str(jobs))
                if done.returncode != 0:
                    sys.exit(f"replay failed:\n{done.stdout}\n{done.stderr}")
                times.append(seconds)
            print(
                f"replay of {options.cases} cases, --jobs {jobs}: {statistics.median(times):.2f}s wall "
                f"(median of {options.runs}; {os.cpu_count()} cores)"
            )


if __name__ == "__main__":
    main()
