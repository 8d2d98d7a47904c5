"""Where governance sits in each kind of agent's graph: the rules of :mod:`.middleware`, hooked in.

    llm agent                 ModelCallGovernance   model turn checked inside the model call
    llm agent without tools,  ModelNodeGovernance   model turn checked in nodes around the model
      with a contract or a
      budget that asks
    workflow                  WorkflowGovernance    its answer checked when the run ends

Tool calls are wrapped alike in all three. langchain makes a graph node of each ``before_model``
and ``after_model`` hook, and those two steps around every model call cost more than all the
checks in them; but it routes a model call's ``jump_to`` (a contract retry) only into a tool
node, so an agent without tools keeps the nodes when it has a contract — it makes no tool call
for them to slow down — and when its budget asks for more, whose pauses earlier versions kept in
the ``before_model`` node (a graph without it could not resume them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from langchain.agents.middleware.types import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    hook_config,
)
from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime
from langgraph.types import Command

from framework.compiler.agent import RunContext
from framework.errors import ContractViolation
from framework.runtime.governance.calls import ToolCall
from framework.runtime.governance.contracts import check_output_contract
from framework.runtime.governance.middleware import GovernanceMiddleware, TaskStart, context_of
from framework.runtime.governance.policy import GovernanceState, Policy, policy_for
from framework.spec.agent import AgentSpec, LlmAgent
from framework.spec.project import Project
from framework.spec.tools import BuiltinTool, PythonTool


class ModelCallGovernance(GovernanceMiddleware):
    """An llm agent's governance with the model turn's checks inside the model call (``wrap_model_call``):
    langchain makes a graph node of each ``before_model`` and ``after_model`` hook, and those two
    steps around every model call cost more than all the checks in them."""

    def wrap_model_call(
        self,
        request: ModelRequest[RunContext],
        handler: Callable[[ModelRequest[RunContext]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        context, state = context_of(request.runtime), _state(request)
        gate = self._gate(state, context)
        if gate is not None and "jump_to" in gate:
            return _stopped(gate)
        response = handler(request)
        return _answered(response, gate, self._checked(state, context, response))

    async def awrap_model_call(
        self,
        request: ModelRequest[RunContext],
        handler: Callable[[ModelRequest[RunContext]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        context, state = context_of(request.runtime), _state(request)
        gate = await self._audited(lambda: self._gate(state, context))
        if gate is not None and "jump_to" in gate:
            return _stopped(gate)
        response = await handler(request)
        # A turn that asks for tools: its records go in the transaction of the first call's.
        checked = await self._audited(lambda: self._checked(state, context, response), hold=_wants_tools(response))
        return _answered(response, gate, checked)

    def _checked(self, state: GovernanceState, context: RunContext, response: ModelResponse[Any]) -> dict[str, Any]:
        message = response.result[-1] if response.result else None
        return self._account(state, context, message) if isinstance(message, AIMessage) else {}


def _wants_tools(response: ModelResponse[Any]) -> bool:
    """Whether the model's answer asks for tool calls."""
    message = response.result[-1] if response.result else None
    return isinstance(message, AIMessage) and bool(message.tool_calls)


def _state(request: ModelRequest[RunContext]) -> GovernanceState:
    return cast(GovernanceState, request.state or {})


def _stopped(gate: dict[str, Any]) -> ExtendedModelResponse[Any]:
    """The model not called: the stop's message as its answer, the rest of the stop as a state update."""
    update = {key: value for key, value in gate.items() if key != "messages"}
    return ExtendedModelResponse(ModelResponse(result=list(gate["messages"])), Command(update=update))


def _answered(
    response: ModelResponse[Any], gate: dict[str, Any] | None, checked: dict[str, Any]
) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
    """The model's answer with the state updates of the checks before and after it. The update's
    messages (a withheld answer, then any feedback) follow the model's: the withheld one replaces it."""
    update = {**(gate or {}), **checked}
    if gate and "ca_counts" in gate and "ca_counts" in checked:  # an extension, then a retry: both count
        update["ca_counts"] = {**gate["ca_counts"], **checked["ca_counts"]}
    return ExtendedModelResponse(response, Command(update=update)) if update else response


class ModelNodeGovernance(GovernanceMiddleware):
    """An llm agent's governance with the model turn's checks as graph nodes around the model call: for
    an agent with a contract and without tools, whose graph goes from the model straight to its end
    (langchain routes a model call's ``jump_to`` only where there is a tool node), so a contract retry
    needs a node of its own. Such an agent makes no tool call for the steps to slow down."""

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: GovernanceState, runtime: Runtime[RunContext]) -> dict[str, Any] | None:
        return self._gate(state, context_of(runtime))

    async def abefore_model(self, state: GovernanceState, runtime: Runtime[RunContext]) -> dict[str, Any] | None:
        return await self._audited(lambda: self.before_model(state, runtime))

    @hook_config(can_jump_to=["model", "end"])
    def after_model(self, state: GovernanceState, runtime: Runtime[RunContext]) -> dict[str, Any] | None:
        message = state["messages"][-1] if state["messages"] else None
        return self._account(state, context_of(runtime), message) if isinstance(message, AIMessage) else None

    async def aafter_model(self, state: GovernanceState, runtime: Runtime[RunContext]) -> dict[str, Any] | None:
        return await self._audited(lambda: self.after_model(state, runtime))


class WorkflowGovernance(GovernanceMiddleware):
    """A workflow's governance: its steps' tool calls as for any agent, and its answer checked
    against the contract when the run ends (an llm agent's answer is checked after each model
    call). Only here: langchain adds a graph node for every hook a middleware class defines,
    and for an llm agent this one would be a superstep per run that does nothing."""

    def after_agent(self, state: GovernanceState, runtime: Runtime[RunContext]) -> dict[str, Any] | None:
        """The workflow's answer against its contract."""
        message = state["messages"][-1] if state["messages"] else None
        output = message.text if isinstance(message, AIMessage) else ""
        _, _, _, task_id = self._usage(state)
        calls = [
            ToolCall(c["tool"], c["capability"], c.get("args", {}))
            for c in state.get("ca_calls") or []
            if c.get("task") == task_id
        ]
        problems = check_output_contract(self.policy.agent.contract, output, calls)
        if not problems:
            self._signal("release")
            return None
        self._signal("withhold")
        self.audit(context_of(runtime), "contract", severity="high", violations=problems, retry=0)
        raise ContractViolation("contract violated: " + "; ".join(problems), data={"violations": problems})

    async def aafter_agent(self, state: GovernanceState, runtime: Runtime[RunContext]) -> dict[str, Any] | None:
        return await self._audited(lambda: self.after_agent(state, runtime))


def governance_middleware(
    agent: AgentSpec, project: Project, *, nested: bool = False
) -> list[AgentMiddleware[Any, Any]]:
    """The middleware every agent of a governed bundle gets (a workflow's wraps its tool steps); a
    ``nested`` graph (an agent called as a tool) starts its task itself (:class:`.middleware.TaskStart`)."""
    policy = policy_for(agent, project)
    starts: list[AgentMiddleware[Any, Any]] = [TaskStart()] if nested else []
    if not isinstance(agent, LlmAgent):
        return [*starts, WorkflowGovernance(policy)]
    nodes = not _has_tools(agent) and (_has_contract(agent) or _asks(policy))
    return [*starts, ModelNodeGovernance(policy) if nodes else ModelCallGovernance(policy)]


def _has_tools(agent: LlmAgent) -> bool:
    """Whether the agent's graph surely has a tool node: a builtin or python tool is one tool each
    (an agent selector or an MCP server may come to none)."""
    return any(isinstance(ref, BuiltinTool | PythonTool) for ref in agent.tools)


def _asks(policy: Policy) -> bool:
    """Whether the agent's budget asks a person for more when it is spent (its pause, in a node)."""
    budget = policy.budget
    return budget is not None and budget.on_exceed == "ask"


def _has_contract(agent: LlmAgent) -> bool:
    """Whether the agent has contract rules: only they send a model turn back to the model (a retry),
    which an agent without a tool node needs graph nodes of its own for (:class:`ModelNodeGovernance`)."""
    return bool(agent.contract.must_not or agent.contract.must_always)


__all__ = ["ModelCallGovernance", "ModelNodeGovernance", "WorkflowGovernance", "governance_middleware"]
