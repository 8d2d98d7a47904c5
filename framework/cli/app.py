"""The ``ca`` command line. Commands stay thin: parse options, call a layer, print.

Heavy modules are imported inside the commands that need them, so ``ca --help``
and ``ca validate`` start quickly.

Exit codes: 0 success; 1 a run failed; 2 invalid project or wrong usage;
70 internal error (a bug: please report it); 130 interrupted.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from framework import __version__
from framework.cli.agents import agents_app  # the command groups: each module imports only typer at first
from framework.cli.db import db_app
from framework.cli.mcp import mcp_app
from framework.cli.options import AgentArg, ProjectArg, ProjectOpt, project_dir
from framework.cli.tasks import tasks_app
from framework.errors import CAError, SpecError

if TYPE_CHECKING:
    from framework.spec.project import LogFormat

app = typer.Typer(
    name="ca",
    help="CleverAgents: declare AI agents in YAML, validate them, and serve them over open agent protocols.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ca {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """CleverAgents."""


@app.command()
def validate(
    project: ProjectArg = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print problems as a JSON list for editors and CI.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also list each agent with its tools (the names a model calls).")
    ] = False,
    project_option: ProjectOpt = None,
) -> None:
    """Check every file of a project; print each problem as path:line:col.

    Exit 0 when valid (warnings allowed), 2 when not.
    """
    from framework.spec import load_project

    try:
        loaded = load_project(project_dir(project_option, project))
    except SpecError as exc:
        _print_diagnostics(exc, as_json)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps([w.to_json() for w in loaded.warnings], indent=2))
        return
    for warning in loaded.warnings:
        typer.echo(warning.render(), err=True)
    if verbose:
        from framework.cli.agents import agent_lines

        for line in agent_lines(loaded):
            typer.echo(line)
    typer.echo(f"ok: {loaded.summary()} in {_shown(loaded.root)}")


def _print_diagnostics(exc: SpecError, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps([d.to_json() for d in exc.diagnostics], indent=2))
        return
    for diagnostic in exc.diagnostics:
        typer.echo(diagnostic.render(), err=True)
    errors = len(exc.errors)
    warnings = len(exc.diagnostics) - errors
    tail = f", {warnings} warning{'s' if warnings != 1 else ''}" if warnings else ""
    typer.echo(f"invalid: {errors} error{'s' if errors != 1 else ''}{tail}", err=True)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd())) or "."
    except ValueError:
        return str(path)


@app.command()
def schema(
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write agent/profile/skill/project/eval .schema.json files into this folder."),
    ] = None,
) -> None:
    """Print (or write) JSON Schemas of the YAML files, for editors (yaml-language-server)."""
    from framework.errors import UsageError
    from framework.spec.schema import schemas, write_schemas

    if out is None:
        typer.echo(json.dumps(schemas(), indent=2))
        return
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; --out takes a folder to write the .schema.json files into")
    try:
        written = write_schemas(out)
    except OSError as exc:
        raise UsageError(f"cannot write the schemas into {out}: {exc.strerror or exc}") from exc
    for path in written:
        typer.echo(f"wrote {_shown(path)}")


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="Folder to create the project in.")] = Path(),
    template: Annotated[str, typer.Option("--template", "-t", help="Template to use (see --list).")] = "basic",
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that already exist.")] = False,
    list_templates: Annotated[bool, typer.Option("--list", help="List the templates and exit.")] = False,
    name: Annotated[str | None, typer.Option("--name", help="Project name (default: the folder's name).")] = None,
) -> None:
    """Scaffold an agent project from a template."""
    from framework.cli.scaffold import available_templates, scaffold

    if list_templates:
        for tpl in available_templates():
            typer.echo(f"{tpl.name:<12} {tpl.description}")
        return
    result = scaffold(directory, template, force=force, name=name)
    for path in result.created:
        typer.echo(f"created  {_shown(path)}")
    for path in result.overwritten:
        typer.echo(f"replaced {_shown(path)}")
    where = _shown(directory)
    cd = f"cd {shlex.quote(where)} && " if where != "." else ""  # a line to paste: quoted as a shell needs
    typer.echo("")
    typer.echo("Next:")
    typer.echo(f"  {cd}ca validate        # check the project")
    typer.echo(f"  {cd}ca run {result.agent} 'hello'   # talk to the agent on the offline model")


@app.command()
def run(
    agent: Annotated[
        str | None,
        typer.Argument(help="The agent's name (default: ca.yaml's default_agent; the message then comes on stdin)."),
    ] = None,
    prompt: Annotated[str | None, typer.Argument(help="The message; read from standard input when omitted.")] = None,
    session: Annotated[
        str | None, typer.Option("--session", "-s", help="Continue (or start) this conversation by name.")
    ] = None,
    skill: Annotated[str | None, typer.Option("--skill", help="Ask for one of the agent's skills.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print run events as JSON lines.")] = False,
    stdio: Annotated[
        bool,
        typer.Option(
            "--stdio",
            help="Serve the agent on stdin/stdout: the Agent Client Protocol when the first message is "
            "'initialize' (IDEs), else A2A JSON-RPC, one message per line.",
        ),
    ] = False,
    protocol: Annotated[
        str, typer.Option("--protocol", help="With --stdio: acp or a2a instead of choosing from the first request.")
    ] = "auto",
    reload: Annotated[bool, typer.Option("--reload", help="With --stdio: reload when the project changes.")] = False,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format", help="With --stdio: human or json logs on stderr (default: CA_LOG_FORMAT, human)."
        ),
    ] = None,
    project: ProjectOpt = None,
) -> None:
    """Send one message to an agent and stream its reply; or, with --stdio, serve it to a program.

    Exit codes: 0 completed, 1 failed, 2 invalid project or usage (an unknown agent or skill too),
    3 waiting for a decision, 4 stopped by a budget, 130 interrupted.
    """
    import asyncio

    if stdio or protocol != "auto" or reload or log_format is not None:
        # Valid `--stdio` command lines never get here (framework.cli.entry takes a fast path):
        # a bad value is named first, as `ca serve` names it; anything else is the wrong mix of options.
        if protocol not in ("auto", "acp", "a2a"):
            raise typer.BadParameter(f"{protocol!r} is not a protocol: use acp or a2a", param_hint="--protocol")
        if log_format not in (None, "human", "json"):
            raise typer.BadParameter(
                f"{log_format!r} is not a log format: use human or json", param_hint="--log-format"
            )
        raise typer.BadParameter(
            "use --stdio with only [AGENT], --protocol acp|a2a, -p PROJECT, --reload and --log-format human|json:"
            " requests come on stdin"
        )
    from framework.cli.run import RunOptions, run_command

    options = RunOptions(project_dir(project), agent, prompt, session, skill, as_json)
    try:
        code = asyncio.run(run_command(options))
    except KeyboardInterrupt:
        typer.echo("\ninterrupted", err=True)
        raise typer.Exit(130) from None
    raise typer.Exit(code)


@app.command("test")
def test_command(
    project: ProjectOpt = None,
    pattern: Annotated[
        str | None,
        typer.Option("-k", help="Run only the cases whose FILE::CASE contains PATTERN (or matches it as a glob)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as one JSON document.")] = False,
    junit_xml: Annotated[Path | None, typer.Option("--junit-xml", help="Write a JUnit XML report to FILE.")] = None,
    record: Annotated[
        bool, typer.Option("--record", help="Run on the real models and (re)write each case's cassette.")
    ] = False,
    update: Annotated[bool, typer.Option("--update", help="Replay; re-record the cases that fail.")] = False,
    jobs: Annotated[
        int | None, typer.Option("--jobs", "-j", help="Cases run at once (default: the number of CPUs).")
    ] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep each case's scratch copy of the project.")] = False,
) -> None:
    """Run the eval cases of evals/*.yaml, each in a scratch copy of the project.

    Provider models replay their cassettes (evals/cassettes/FILE/CASE.yaml) with no network;
    offline and scripted models run as they are. Exit 0 when every case passed, 1 when one
    failed, 2 for an invalid project, eval file or usage.
    """
    from framework.cli.evals import TestOptions
    from framework.cli.evals import test_command as run_tests

    root = project_dir(project)
    options = TestOptions(root, pattern, as_json, junit_xml, record, update, jobs or os.cpu_count() or 2, keep)
    try:
        code = run_tests(options)
    except KeyboardInterrupt:
        typer.echo("\ninterrupted", err=True)
        raise typer.Exit(130) from None
    raise typer.Exit(code)


@app.command()
def graph(agent: AgentArg, project: ProjectOpt = None) -> None:
    """Print an agent's compiled graph as Mermaid."""
    from framework.compiler.bundle import build_bundle
    from framework.spec import load_project

    bundle = build_bundle(load_project(project_dir(project)))
    typer.echo(bundle.graph(agent).get_graph().draw_mermaid())


@app.command()
def card(
    agent: AgentArg,
    project: ProjectOpt = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="Server URL the card advertises (default: ca.yaml server).")
    ] = None,
) -> None:
    """Print an agent's A2A Agent Card as JSON."""
    from framework.compiler.bundle import build_bundle
    from framework.compiler.card import card_to_json
    from framework.protocols.a2a.platform import declare_methods
    from framework.spec import load_project

    bundle = build_bundle(load_project(project_dir(project)), base_url=base_url)
    typer.echo(json.dumps(card_to_json(declare_methods(bundle.card(agent))), indent=2))


@app.command("serve")
def serve_command(
    project: ProjectArg = None,
    host: Annotated[str | None, typer.Option("--host", help="Address to bind (default: ca.yaml, 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option("--port", min=0, max=65535, help="Port (default: ca.yaml, 8765).")] = None,
    public_url: Annotated[
        str | None, typer.Option("--public-url", help="The URL clients use, when behind a proxy.")
    ] = None,
    insecure: Annotated[
        bool, typer.Option("--insecure", help="Allow a non-loopback address without authentication.")
    ] = False,
    reload: Annotated[
        bool, typer.Option("--reload", help="Reload when the project's YAML, tools or .env change.")
    ] = False,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format", help="human, or json: one JSON object per line on stderr (default: CA_LOG_FORMAT, human)."
        ),
    ] = None,
    project_option: ProjectOpt = None,
) -> None:
    """Serve every agent of the project over A2A (JSON-RPC and HTTP+JSON) until Ctrl-C or SIGTERM.

    Either lets the running tasks finish for up to server.shutdown_timeout; a second Ctrl-C
    cancels them at once. Exit codes: 0 after SIGTERM, 130 after Ctrl-C, 2 usage.

    Settings from the environment win over ca.yaml; a flag wins over both (docs/deploy.md):

    \b
      CA_STORE_URL         store.url: sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DB
      CA_HOST              server.host (--host)
      CA_PORT              server.port (--port)
      CA_PUBLIC_URL        server.public_url (--public-url)
      CA_SHUTDOWN_TIMEOUT  server.shutdown_timeout, e.g. 30s
      CA_TASK_LEASE        store.task_lease: a running task's lease on PostgreSQL (15s)
      CA_LOG_FORMAT        human or json (--log-format)
      OTEL_*               traces (docs/observability.md)

    Probes: GET /healthz (alive), GET /readyz (ready: the store answers; 503 while draining).
    """
    import asyncio

    from framework.cli.serve import INTERRUPTED, ServeOptions, event_loop, serve

    if log_format not in (None, "human", "json"):
        raise typer.BadParameter(f"{log_format!r} is not a log format: use human or json", param_hint="--log-format")
    chosen = cast("LogFormat | None", log_format)
    options = ServeOptions(project_dir(project_option, project), host, port, public_url, insecure, reload, chosen)
    try:
        with asyncio.Runner(loop_factory=event_loop()) as runner:
            code = runner.run(serve(options))
    except KeyboardInterrupt:  # Ctrl-C before the server took its signals over (or after it let them go)
        code = INTERRUPTED
    raise typer.Exit(code)


@app.command("call")
def call_command(
    target: Annotated[
        str, typer.Argument(help="An A2A agent URL, or the name of an agent of this project or of its registries.")
    ],
    message: Annotated[str | None, typer.Argument(help="The message; read from standard input when omitted.")] = None,
    context: Annotated[str | None, typer.Option("--context", help="Continue this A2A contextId.")] = None,
    task: Annotated[
        str | None,
        typer.Option("--task", help="Send to this task (with its --context), e.g. 'approve' to a waiting task."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print every A2A event as a JSON line.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for an answer.")] = 300.0,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", "-H", help="'Name: value' sent with every request to the agent (repeatable)."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="CA_CALL_TOKEN",
            help="Bearer token for the agent (or set CA_CALL_TOKEN).",
            show_envvar=False,
        ),
    ] = None,
    project: ProjectOpt = None,
) -> None:
    """Talk to any A2A agent (v1.0 or v0.3): discover its card, stream the reply, answer input-required.

    Requests carry --header/--token and the headers_env of a ca.yaml registry on the agent's origin,
    and go to that origin only. Exit codes: 0 completed, 1 failed, 2 usage, 3 waiting for input.
    """
    import asyncio

    from framework.cli.call import CallOptions, call, parse_headers

    if task and not context:
        raise typer.BadParameter("--task needs the task's --context (A2A requires both)", param_hint="--task")
    headers = parse_headers(header or [], token)
    options = CallOptions(target, message, context, as_json, timeout, project_dir(project), task, headers)
    raise typer.Exit(asyncio.run(call(options)))


app.add_typer(agents_app, name="agents")
app.add_typer(mcp_app, name="mcp")
app.add_typer(tasks_app, name="tasks")


@app.command()
def approve(
    task: Annotated[str, typer.Argument(help="The task id (or a unique prefix), from `ca tasks list`.")],
    reject: Annotated[bool, typer.Option("--reject", help="Reject instead of approving.")] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="Why (the agent sees it when rejected).")] = None,
    always: Annotated[bool, typer.Option("--always", help="Approve, and always allow this tool here.")] = False,
    answer: Annotated[
        str | None, typer.Option("--answer", help="The answer to a workflow's `ask` step (free text).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the resumed run's events as JSON lines.")] = False,
    project: ProjectOpt = None,
) -> None:
    """Decide on a task waiting for approval (or answer its question), then run it on from there
    (in this process).

    Exit codes as for `ca run`: 2 also for an unknown or ambiguous TASK (as `ca tasks cancel`).
    """
    import asyncio

    from framework.cli.run import approve_command

    if reject and always:
        raise typer.BadParameter("--reject and --always contradict each other")
    if answer is not None and (reject or always):
        raise typer.BadParameter("--answer answers a question; it goes with neither --reject nor --always")
    if reason is not None and not reject:
        # A reason without --reject used to approve: a person who meant to refuse would not notice.
        raise typer.BadParameter("--reason goes with --reject (it tells the agent why); add --reject or drop it")
    choice = "reject" if reject else ("always" if always else "approve")
    decision = {"decision": "answer", "text": answer} if answer is not None else {"decision": choice, "reason": reason}
    code = asyncio.run(approve_command(project_dir(project), task, decision, as_json))
    raise typer.Exit(code)


@app.command()
def audit(
    task: Annotated[str | None, typer.Option("--task", help="Only this task's records.")] = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Check the hash chain; exit 1 if it was tampered with.")
    ] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="The newest N records (oldest first).")] = 1000,
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="Only records from then on: an ISO time (2026-05-01T09:00) or an age (30m, 2h, 7d)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the records as one JSON list.")] = False,
    project: ProjectOpt = None,
) -> None:
    """Print the audit log (every task transition, tool call, decision, denial, budget and contract event).

    `--verify` needs the key of a keyed chain in the variable `ca.yaml` `audit.key_env` names.
    """
    from framework.cli.audit import AuditOptions, audit_command

    raise typer.Exit(audit_command(AuditOptions(project_dir(project), task, verify, limit, since, as_json)))


@app.command()
def usage(
    by: Annotated[str, typer.Option("--by", help="Group by agent, model, caller or day (UTC).")] = "agent",
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="Only calls from then on: an ISO time (2026-05-01T09:00) or an age (30m, 2h, 7d)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    project: ProjectOpt = None,
) -> None:
    """Sum model calls, tokens, cost (USD) and tool calls from the audit log, with a totals row.

    A cost is "unknown" when a model has no price (genai-prices' table, or `ca.yaml` `prices:`).
    """
    from framework.cli.usage import UsageOptions, usage_command

    raise typer.Exit(usage_command(UsageOptions(project_dir(project), by, since, as_json)))


app.add_typer(db_app, name="db")


def _masked(text: str) -> str:
    """``text`` with the secrets this process knows masked (imported here: it is off the start-up path)."""
    from framework.runtime.governance.secrets import KNOWN

    return KNOWN.text(text)


def _only_invoked(argv: list[str]) -> None:
    """Keep registered only the command or command group that ``argv`` names first, when it names
    one: Typer turns every registered command into a click command before parsing (about 15 ms for
    all of them, 3 for one), and a run needs only its own. Anything else (no command, an option
    first, a misspelt command) keeps them all, so ``ca --help`` lists them and a mistake is
    answered with the usual suggestions."""
    from typer.main import get_command_name
    from typer.models import CommandInfo

    def name(command: CommandInfo) -> str:
        return command.name or get_command_name(getattr(command.callback, "__name__", ""))

    first = argv[0] if argv else ""
    commands = [c for c in app.registered_commands if name(c) == first]
    groups = [g for g in app.registered_groups if g.name == first]
    if commands or groups:
        app.registered_commands = commands
        app.registered_groups = groups


def main() -> None:
    """Console entry point: maps the error tree to messages and exit codes; no tracebacks for users.

    Typer (standalone mode) already turns usage mistakes into a message and exit 2.
    """
    _only_invoked(sys.argv[1:])
    try:
        app()
    except SpecError as exc:
        _print_diagnostics(exc, as_json=False)
        sys.exit(exc.exit_code)
    except CAError as exc:
        typer.echo(f"error: {_masked(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:  # a bug in ca: say so plainly, keep the details one variable away
        if os.environ.get("CA_DEBUG"):
            traceback.print_exc()
        typer.echo(
            f"internal error: {type(exc).__name__}: {_masked(str(exc))}\n"
            "This is a bug in ca; rerun with CA_DEBUG=1 for the traceback and please report it.",
            err=True,
        )
        sys.exit(70)
