"""Cross-reference checks over a whole project: names that must exist, cycles, warnings."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator, Mapping, Set
from pathlib import Path
from typing import Any

from framework.errors import Diagnostic, Severity
from framework.spec import agent_checks
from framework.spec.agent import AgentSpec, LlmAgent, WorkflowAgent
from framework.spec.capabilities import Capabilities
from framework.spec.common import did_you_mean
from framework.spec.mcp_lock import LOCK_FILE, read_lock
from framework.spec.project import Project
from framework.spec.salvage import Salvaged, original_path
from framework.spec.shell_risks import shell_risk
from framework.spec.source import LMap, format_path, locate
from framework.spec.tools import BUILTIN_TOOLS, AgentTool, McpTool, PythonTool
from framework.spec.validation import shift
from framework.spec.workflow import (
    REQUEST_FIELD,
    STEP_OUTPUT,
    TEMPLATE,
    AgentStep,
    ArtifactStep,
    AskStep,
    GateStep,
    LoopStep,
    MessageStep,
    ParallelStep,
    RouterStep,
    ToolStep,
    is_template,
    part_templates,
)

Path_ = tuple[str | int, ...]


class _Checker:
    def __init__(
        self,
        project: Project,
        data: Mapping[str, LMap],
        environ: Mapping[str, str],
        texts: Mapping[Path, str],
        invalid: Mapping[str, Set[str]],
        partial: Mapping[str, Salvaged[Any]],
    ) -> None:
        self.project = project
        self.data = data
        self.environ = environ
        self.texts = texts
        self.invalid = invalid
        self.partial = partial
        self.files: dict[str, bytes] = {}
        """The python tool files read, by their path as written (``Project.tool_files``)."""
        self.out: list[Diagnostic] = []
        self.step_ids: set[str] = set()
        """Every step id of the workflow being checked (to tell "later" from "unknown")."""
        self.lost_ids: frozenset[str] = frozenset()
        """Ids of steps left out of the workflow being checked (its file has errors there)."""

    def lost(self, owner: str, key: str) -> bool:
        """Whether something under top-level ``key`` of ``owner``'s file was left out for its errors."""
        saved = self.partial.get(owner)
        return saved is not None and key in saved.dropped

    def report(
        self,
        owner: str,
        path: Path_,
        message: str,
        *,
        hint: str = "",
        key: bool = False,
        severity: Severity = "error",
        offset: int = 0,
    ) -> None:
        data = self.data.get(owner)
        if data is None:
            self.out.append(Diagnostic(str(self.project.root), 0, 0, message, hint=hint, severity=severity))
            return
        where, _ = locate(data, path, key=key)
        where = shift(where or data.loc, offset, self.texts)
        self.out.append(
            Diagnostic(
                str(where.file),
                where.line,
                where.column,
                message,
                key_path=format_path(original_path(data, path)),
                hint=hint,
                severity=severity,
            )
        )

    def unknown(self, owner: str, path: Path_, what: str, name: str, known: Mapping[str, Any] | list[str]) -> None:
        broken = self.invalid.get(what, set())
        if name in broken:
            return  # it exists, but its own file has errors, reported there
        names = sorted({*known, *broken})
        hint = did_you_mean(name, names)
        if not hint:
            hint = f"known {what}s: {', '.join(names)}" if names else f"the project has no {what}s"
        self.report(owner, path, f"unknown {what} {name!r}", hint=hint)

    # -- project file ----------------------------------------------------------

    def check_config(self) -> None:
        config = self.project.config
        if config.default_agent and config.default_agent not in self.project.agents:
            self.unknown("project", ("default_agent",), "agent", config.default_agent, self.project.agents)
        if config.defaults.profile and config.defaults.profile not in self.project.profiles:
            self.unknown("project", ("defaults", "profile"), "profile", config.defaults.profile, self.project.profiles)
        self.check_shell_patterns("project", ("defaults", "capabilities"), config.defaults.capabilities)
        agent_checks.check_auth(self, self.project, self.environ)
        for name, agent in self.project.agents.items():
            self.check_agent(f"agent:{name}", agent)
        self.check_mcp_lock()

    def check_mcp_lock(self) -> None:
        """Warn when the MCP servers agents use are not pinned by ``ca.mcp.lock``."""
        used = sorted(
            {
                t.mcp
                for a in self.project.agents.values()
                if isinstance(a, LlmAgent)
                for t in a.tools
                if isinstance(t, McpTool) and t.mcp in self.project.config.mcp_servers
            }
        )
        if not used:
            return
        lock = read_lock(self.project.root)
        missing = [name for name in used if name not in lock.servers]
        if not missing:
            return
        if not lock.present:
            message = f"no {LOCK_FILE}: the tools of MCP servers {', '.join(map(repr, missing))} are not pinned"
            hint = f"run `ca mcp lock` and commit {LOCK_FILE}, so a tool that changes later is refused"
        else:
            message = f"{LOCK_FILE} does not list MCP servers {', '.join(map(repr, missing))}: their tools are refused"
            hint = "run `ca mcp lock` to review and pin them"
        for name in missing:
            self.report("project", ("mcp_servers", name), message, hint=hint, key=True, severity="warning")

    def check_shell_patterns(self, owner: str, base: Path_, caps: Capabilities | None) -> None:
        """Warn about each allow pattern that lets a program run others or leave the project."""
        for i, pattern in enumerate(caps.shell.allow if caps else []):
            if risk := shell_risk(pattern):
                path = (*base, "shell", "allow", i)
                self.report(owner, path, risk.message, hint=risk.hint, severity="warning", offset=risk.offset)

    # -- one agent -------------------------------------------------------------

    def check_agent(self, owner: str, agent: AgentSpec) -> None:
        if agent.profile and agent.profile not in self.project.profiles:
            self.unknown(owner, ("profile",), "profile", agent.profile, self.project.profiles)
        for i, skill in enumerate(agent.skills):
            if isinstance(skill, str) and skill not in self.project.skills:
                self.unknown(owner, ("skills", i), "skill", skill, self.project.skills)
        caps = agent.capabilities
        for i, name in enumerate(caps.agents if caps else []):
            if name not in self.project.agents:
                self.unknown(owner, ("capabilities", "agents", i), "agent", name, self.project.agents)
        # An agent without capabilities uses the project's defaults, checked once in check_config.
        self.check_shell_patterns(owner, ("capabilities",), caps)
        agent_checks.check_skill_ids(self, owner, agent)
        if isinstance(agent, LlmAgent):
            self.check_tools(owner, agent)
            agent_checks.check_model(self, owner, agent, self.project, self.environ)
            names = None if self.lost(owner, "tools") else agent_checks.tool_names(agent)
            agent_checks.check_contract(self, owner, agent, names)
            agent_checks.check_selectors(self, owner, agent, self.project, self.all_skills_known())
            in_force = caps or self.project.config.defaults.capabilities
            if not (self.lost(owner, "capabilities") or (caps is None and self.lost("project", "defaults"))):
                agent_checks.check_capabilities(self, owner, agent, in_force, self.project.agents)
        else:
            tool_steps = list(_tool_steps(agent.steps, ("steps",)))
            names = None if self.lost(owner, "steps") else {step.tool for _, step in tool_steps}
            agent_checks.check_contract(self, owner, agent, names)
            self.check_steps(owner, agent)
            in_force = caps or self.project.config.defaults.capabilities
            if not (self.lost(owner, "capabilities") or (caps is None and self.lost("project", "defaults"))):
                for path, step in tool_steps:
                    if step.tool in BUILTIN_TOOLS:
                        agent_checks.check_builtin(
                            self, owner, (*path, "tool"), step.tool, in_force, own=caps is not None, what="tool step"
                        )

    def all_skills_known(self) -> bool:
        """Whether every agent and skill file validated in full (so every skill tag is known)."""
        if self.invalid.get("agent") or self.invalid.get("skill"):
            return False
        return not any(self.lost(owner, "skills") or owner.startswith("skill:") for owner in self.partial)

    def check_tools(self, owner: str, agent: LlmAgent) -> None:
        names = set()
        for i, tool in enumerate(agent.tools):
            if isinstance(tool, PythonTool):
                names.add(tool.name or tool.function)
                if tool.is_file:
                    self.check_python_file(owner, ("tools", i, "python"), tool)
            elif isinstance(tool, AgentTool):
                names.add(tool.name or tool.agent)
                if not tool.is_remote and tool.agent not in self.project.agents:
                    self.unknown(owner, ("tools", i, "agent"), "agent", tool.agent, self.project.agents)
            elif isinstance(tool, McpTool):
                servers = self.project.config.mcp_servers
                # A server left out of ca.yaml for its own errors is reported there, not as unknown here.
                if tool.mcp not in servers and not (self.invalid.get("project") or self.lost("project", "mcp_servers")):
                    hint = (
                        did_you_mean(tool.mcp, servers)
                        or f"declare it in ca.yaml under `mcp_servers: {{{tool.mcp}: ...}}`"
                    )
                    self.report(owner, ("tools", i, "mcp"), f"unknown MCP server {tool.mcp!r}", hint=hint)
            elif hasattr(tool, "builtin"):
                names.add(tool.builtin)
        for i, skill in enumerate(agent.skills):
            path: Path_ = ("skills", i)
            if isinstance(skill, str):
                resolved = self.project.skills.get(skill)
                narrowed = resolved.tools if resolved else None
            else:
                narrowed, path = skill.tools, (*path, "tools")
            for tool_name in [] if self.lost(owner, "tools") else narrowed or []:
                if tool_name not in names:
                    self.report(
                        owner,
                        path,
                        f"skill narrows to tool {tool_name!r}, which the agent does not have",
                        hint=did_you_mean(tool_name, names)
                        or f"the agent's tools: {', '.join(sorted(names)) or 'none'}",
                    )

    def check_python_file(self, owner: str, path: Path_, tool: PythonTool) -> None:
        root = self.project.root
        file = (root / tool.target).resolve()
        if not file.is_relative_to(root):
            self.report(owner, path, f"python tool file {tool.target!r} is outside the project")
            return
        if not file.is_file():
            self.report(
                owner,
                path,
                f"python tool file {tool.target!r} not found",
                hint=f"create {tool.target} with `def {tool.function}(...)`",
            )
            return
        source = self.files[tool.target] = file.read_bytes()
        try:
            tree = ast.parse(source, filename=str(file))
        except SyntaxError as exc:
            where = f" at line {exc.lineno}" if exc.lineno else ""
            self.report(owner, path, f"python tool file {tool.target!r} has a syntax error{where}: {exc.msg}")
            return
        except ValueError as exc:  # e.g. null bytes
            self.report(owner, path, f"python tool file {tool.target!r} cannot be parsed: {exc}")
            return
        functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        if tool.function not in functions:
            self.report(
                owner,
                path,
                f"function {tool.function!r} not found in {tool.target}",
                hint=did_you_mean(tool.function, functions) or f"functions there: {', '.join(functions) or 'none'}",
            )

    # -- workflows -------------------------------------------------------------

    def check_steps(self, owner: str, agent: WorkflowAgent) -> None:
        seen: dict[str, Path_] = {}
        self.step_ids = set(_step_ids(agent.steps))
        saved = self.partial.get(owner)
        self.lost_ids = saved.lost_ids if saved is not None else frozenset()
        self.walk_steps(owner, agent.steps, ("steps",), seen, set())
        if agent.output:
            self.check_template(owner, ("output",), agent.output, set(seen))

    def walk_steps(
        self,
        owner: str,
        steps: list[Any],
        base: Path_,
        seen: dict[str, Path_],
        before: set[str],
        *,
        offset: int = 0,
    ) -> set[str]:
        """Check steps in order; ``before`` holds ids whose output is available. Returns it, grown."""
        available = set(before)
        for i, step in enumerate(steps, start=offset):
            path = (*base, i)
            if step.id is not None:
                if step.id in seen:
                    first, _ = locate(self.data.get(owner), (*seen[step.id], "id"))
                    line = f", line {first.line}" if first else ""
                    self.report(
                        owner,
                        (*path, "id"),
                        f"duplicate step id {step.id!r}",
                        hint=f"first used at {format_path(seen[step.id])}{line}; give each step its own id",
                    )
                seen.setdefault(step.id, path)
            if isinstance(step, AgentStep):
                if step.agent not in self.project.agents:
                    self.unknown(owner, (*path, "agent"), "agent", step.agent, self.project.agents)
                if step.input:
                    self.check_template(owner, (*path, "input"), step.input, available)
            elif isinstance(step, ToolStep):
                if step.tool not in BUILTIN_TOOLS:
                    self.report(
                        owner,
                        (*path, "tool"),
                        f"unknown builtin tool {step.tool!r}",
                        hint=did_you_mean(step.tool, BUILTIN_TOOLS) or f"builtin tools: {', '.join(BUILTIN_TOOLS)}",
                    )
                for key, value in step.args.items():
                    if isinstance(value, str):
                        self.check_template(owner, (*path, "args", key), value, available)
            elif isinstance(step, GateStep):
                self.check_template(owner, (*path, "gate", "message"), step.gate.message, available)
            elif isinstance(step, AskStep):
                self.check_template(owner, (*path, "ask", "message"), step.ask.message, available)
            elif isinstance(step, MessageStep):
                self.check_template(owner, (*path, "message"), step.message, available)
            elif isinstance(step, ArtifactStep):
                for j, part in enumerate(step.artifact.parts):
                    where = (*path, "artifact", "parts", j)
                    for at, text in part_templates(part):
                        self.check_template(owner, (*where, *at), text, available)
            elif isinstance(step, ParallelStep):
                # Branches run side by side: each sees only what came before the block.
                outputs = [
                    self.walk_steps(owner, [branch], (*path, "parallel"), seen, available, offset=j)
                    for j, branch in enumerate(step.parallel)
                ]
                available = available.union(*outputs)
            elif isinstance(step, RouterStep):
                if is_template(step.router.on):
                    self.check_template(owner, (*path, "router", "on"), step.router.on, available)
                elif step.router.on not in available and step.router.on not in self.lost_ids:
                    on = step.router.on
                    later = on in self.step_ids
                    self.report(
                        owner,
                        (*path, "router", "on"),
                        f"router tests step {on!r}, which runs after it"
                        if later
                        else f"router tests unknown step {on!r}",
                        hint=(
                            f"a router tests the output of an earlier step; move the router after {on!r}"
                            if later
                            else did_you_mean(on, available) or self.earlier(available)
                        ),
                    )
                for j, route in enumerate(step.router.routes):
                    available |= self.walk_steps(
                        owner, route.steps, (*path, "router", "routes", j, "steps"), seen, available
                    )
                available |= self.walk_steps(owner, step.router.default, (*path, "router", "default"), seen, available)
            elif isinstance(step, LoopStep):
                inner = self.walk_steps(owner, step.loop.steps, (*path, "loop", "steps"), seen, available)
                if step.loop.on is not None and is_template(step.loop.on):
                    self.check_template(owner, (*path, "loop", "on"), step.loop.on, available | inner)
                elif step.loop.on is not None and step.loop.on not in inner and step.loop.on not in self.lost_ids:
                    self.report(
                        owner,
                        (*path, "loop", "on"),
                        f"loop tests {step.loop.on!r}, which is not a step of the loop",
                        hint=did_you_mean(step.loop.on, inner) or f"steps of the loop: {', '.join(sorted(inner))}",
                    )
                available |= inner
            if step.id is not None:
                available.add(step.id)
        return available

    def earlier(self, available: set[str]) -> str:
        if self.lost_ids:  # steps with errors of their own are not in `available`
            return f"earlier valid steps: {', '.join(sorted(available)) or 'none'} (steps with errors are left out)"
        return f"earlier steps: {', '.join(sorted(available))}" if available else "there is no earlier step"

    def check_template(self, owner: str, path: Path_, text: str, available: set[str]) -> None:
        for match in TEMPLATE.finditer(text):
            expr = match.group(1)
            if expr == "input" or REQUEST_FIELD.match(expr):
                continue
            ref = STEP_OUTPUT.match(expr)
            if ref is None:
                self.report(
                    owner,
                    path,
                    f"unknown template expression {{{{ {expr} }}}}",
                    hint=(did_you_mean(expr, ["request.message_id"]) if expr.startswith("request.") else "")
                    or "use {{ input }}, {{ steps.ID.output }}, {{ request.message_id }} or {{ request.metadata.KEY }}",
                    offset=match.start(),
                )
            elif ref.group(1) not in available and ref.group(1) not in self.lost_ids:
                step_id = ref.group(1)
                if step_id in self.step_ids:
                    message = f"template refers to step {step_id!r}, which has not run at this point"
                    hint = f"only the output of earlier steps can be used here; {self.earlier(available)}"
                else:
                    message = f"template refers to unknown step {step_id!r}"
                    hint = did_you_mean(step_id, available) or self.earlier(available)
                self.report(owner, path, message, hint=hint, offset=match.start())

    # -- cycles ----------------------------------------------------------------

    def check_cycles(self) -> None:
        edges: dict[str, list[tuple[str, Path_]]] = {
            name: list(_calls(agent)) for name, agent in self.project.agents.items()
        }
        state: dict[str, int] = {}  # 1 = on the stack, 2 = done
        stack: list[str] = []

        def visit(name: str) -> None:
            state[name] = 1
            stack.append(name)
            for callee, path in edges.get(name, []):
                if callee not in edges:
                    continue
                if state.get(callee) == 1:
                    cycle = [*stack[stack.index(callee) :], callee]
                    self.report(
                        f"agent:{name}",
                        path,
                        f"agent call cycle: {' -> '.join(cycle)}",
                        hint="an agent cannot (indirectly) call itself; remove one of these calls",
                    )
                elif state.get(callee) is None:
                    visit(callee)
            stack.pop()
            state[name] = 2

        for name in sorted(edges):
            if name not in state:
                visit(name)


def _step_ids(steps: list[Any]) -> Iterator[str]:
    """Every step id in ``steps``, nested ones included."""
    for step in steps:
        if step.id is not None:
            yield step.id
        if isinstance(step, ParallelStep):
            yield from _step_ids(step.parallel)
        elif isinstance(step, RouterStep):
            for route in step.router.routes:
                yield from _step_ids(route.steps)
            yield from _step_ids(step.router.default)
        elif isinstance(step, LoopStep):
            yield from _step_ids(step.loop.steps)


def _calls(agent: AgentSpec) -> Iterator[tuple[str, Path_]]:
    """(callee, key path of the reference) for every local agent this agent calls."""
    if isinstance(agent, LlmAgent):
        for i, tool in enumerate(agent.tools):
            if isinstance(tool, AgentTool) and not tool.is_remote:
                yield tool.agent, ("tools", i, "agent")
        return
    yield from _step_calls(agent.steps, ("steps",))


def _tool_steps(steps: list[Any], base: Path_) -> Iterator[tuple[Path_, ToolStep]]:
    """(key path, step) of every tool step, nested ones included."""
    for i, step in enumerate(steps):
        path = (*base, i)
        if isinstance(step, ToolStep):
            yield path, step
        elif isinstance(step, ParallelStep):
            yield from _tool_steps(step.parallel, (*path, "parallel"))
        elif isinstance(step, RouterStep):
            for j, route in enumerate(step.router.routes):
                yield from _tool_steps(route.steps, (*path, "router", "routes", j, "steps"))
            yield from _tool_steps(step.router.default, (*path, "router", "default"))
        elif isinstance(step, LoopStep):
            yield from _tool_steps(step.loop.steps, (*path, "loop", "steps"))


def _step_calls(steps: list[Any], base: Path_) -> Iterator[tuple[str, Path_]]:
    for i, step in enumerate(steps):
        path = (*base, i)
        if isinstance(step, AgentStep):
            yield step.agent, (*path, "agent")
        elif isinstance(step, ParallelStep):
            yield from _step_calls(step.parallel, (*path, "parallel"))
        elif isinstance(step, RouterStep):
            for j, route in enumerate(step.router.routes):
                yield from _step_calls(route.steps, (*path, "router", "routes", j, "steps"))
            yield from _step_calls(step.router.default, (*path, "router", "default"))
        elif isinstance(step, LoopStep):
            yield from _step_calls(step.loop.steps, (*path, "loop", "steps"))


def check_project(
    project: Project,
    data: Mapping[str, LMap],
    environ: Mapping[str, str] | None = None,
    *,
    texts: Mapping[Path, str] | None = None,
    invalid: Mapping[str, Set[str]] | None = None,
    partial: Mapping[str, Salvaged[Any]] | None = None,
) -> tuple[list[Diagnostic], dict[str, bytes]]:
    """Every cross-reference problem and warning among the files that validated, and the python
    tool files as read for the checks (the project's ``tool_files``).

    ``texts`` (file -> source) places problems inside a value exactly; ``invalid`` maps
    "agent" / "profile" / "skill" to names whose files have errors: references to those
    are not reported as unknown a second time; ``partial`` maps owners (``agent:NAME`` …) of
    files with errors to what of them validated, checked too (``data`` holds that part).
    """
    environ = os.environ if environ is None else environ
    checker = _Checker(project, data, environ, texts or {}, invalid or {}, partial or {})
    checker.check_config()
    checker.check_cycles()
    return checker.out, checker.files
