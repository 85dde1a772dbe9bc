"""The agent probe of one endpoint as the engine runs it: its tool set, its window, and one step at a time."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

from lpxtop.engine.agent import wants_chat
from lpxtop.engine.agent.coze import run_coze_step
from lpxtop.engine.agent.dify import run_dify_step
from lpxtop.engine.agent.difyworkflow import run_dify_workflow_step
from lpxtop.engine.agent.step import run_agent_step
from lpxtop.engine.agent.tools import ToolSet, load_tool_set
from lpxtop.engine.agent.window import AgentWindow
from lpxtop.http import HttpClient
from lpxtop.model.agent import AgentStep, AgentView
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.snapshot import EndpointView

log = logging.getLogger("lpxtop.engine.agent")


# The step of each agent platform (lpxtop.model.endpoint.PLATFORM_APIS): one request, the platform's own tools
PLATFORM_STEPS = {"dify": run_dify_step, "dify-workflow": run_dify_workflow_step, "coze": run_coze_step}


def agent_api(config: EndpointConfig) -> str:
    return config.api if config.is_platform else "chat"


def agent_view(window: AgentWindow, config: EndpointConfig, now: float, in_flight: bool = False) -> AgentView:
    """The agent window summarized at `now`: the engine's and a replay's (record/replay.py) one code path."""
    return window.view(api=agent_api(config), now=now, chain_steps=config.chain_steps, in_flight=in_flight)


def with_agent(view: EndpointView, config: EndpointConfig, agent: AgentView) -> EndpointView:
    """An endpoint's view with its agent probe's summary. An endpoint probed by agent steps alone takes its
    status from them."""
    status = view.status if wants_chat(config) else agent.status
    return replace(view, agent=agent, status=status, in_flight=view.in_flight or agent.in_flight)


class AgentProber:
    """Runs one endpoint's agent steps (never two at once) and keeps their window. Engine loop only."""

    def __init__(self, config: EndpointConfig, window_s: float, max_samples: int, *,
                 include_client_limited: bool = False) -> None:
        self.config = config
        self.window = AgentWindow(window_s, max_samples, include_client_limited=include_client_limited)
        self.include_usage = True
        self.in_flight = False
        self.tools: ToolSet | None = None
        self.tools_error: str | None = None
        try:
            self.tools = load_tool_set(config.tools_file)
        except ValueError as exc:  # the CLI checks the file first; it may have changed since
            self.tools_error = str(exc)

    async def step(self, client: HttpClient, model: str | None) -> AgentStep:
        """One agent step (the model already resolved for a chat endpoint). Never raises but cancellation."""
        self.in_flight = True
        try:
            if self.tools is None:
                return self._failed("other", f"tools file: {self.tools_error}")
            platform = PLATFORM_STEPS.get(self.config.api)
            if platform is not None:
                return await platform(client, self.config, self.tools)
            step = await run_agent_step(client, self.config, self.tools, model, include_usage=self.include_usage)
            if self.include_usage and step.failed_call == 1 and _refused_usage(step):
                self.include_usage = False
                step = await run_agent_step(client, self.config, self.tools, model, include_usage=False)
            return step
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug in one step must not stop the probe
            log.exception("agent step of %s failed unexpectedly", self.config.name)
            return self._failed("other", f"{type(exc).__name__}: {exc}")
        finally:
            self.in_flight = False

    def failed(self, error: str) -> AgentStep:
        """A step that could not start ('<kind>: <message>', as from the model lookup)."""
        kind, _, message = error.partition(": ")
        return self._failed(kind or "other", message or None)

    def _failed(self, kind: str, message: str | None) -> AgentStep:
        return AgentStep(endpoint=self.config.name, api=agent_api(self.config),
                         wall_time=time.time(), start_ns=time.perf_counter_ns(), error_kind=kind,
                         error_message=message, failed_call=1)

    def view(self, now: float) -> AgentView:
        return agent_view(self.window, self.config, now, self.in_flight)


def _refused_usage(step: AgentStep) -> bool:
    """An older server that refuses `stream_options` (HTTP 400/422 naming it): step again without it."""
    return step.http_status in (400, 422) and "stream_options" in (step.error_message or "")
