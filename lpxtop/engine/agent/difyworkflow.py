"""One step against a Dify workflow: `POST /v1/workflows/run`, `response_mode: streaming`, timed node by node.

The request carries the workflow's `inputs` (the endpoint's `inputs`, from the config file's `inputs`
table or `--inputs-file`): a string value that is exactly `"{prompt}"` becomes the agent step's question
with its random prefix; without inputs, `{"query": <question>}` is sent. The stream is read by the
workflow sink (engine/probe/difyworkflow.py). The step keeps:

- every node run (lpxtop/model/platform.py): its offset, the client's time between its `node_started`
  and `node_finished`, and the platform's own `elapsed_time`;
- the answer's TTFT and E2E (its first and last `text_chunk`), and the **step**: the client's time to
  `workflow_finished`, when the workflow's outputs are complete, beside the platform's own
  `workflow_finished.data.elapsed_time` (`app_latency_ms`; the difference is the network, the gateway,
  and Dify's time before its workflow timer starts);
- the first Tool node as the step's tool (engine/agent/platform.py `tool_node_fields`); a workflow
  without a Tool node, or one that streams no text, is no error here.
"""

from __future__ import annotations

from lpxtop.engine.agent.platform import (
    USER,
    base_fields,
    failed_step,
    ms,
    nodes_of,
    prompt,
    tool_node_fields,
)
from lpxtop.engine.agent.tools import ToolSet
from lpxtop.engine.probe.difyworkflow import DifyWorkflowSink
from lpxtop.engine.probe.stream import measured_stream
from lpxtop.http import HttpClient
from lpxtop.model.agent import AgentStep
from lpxtop.model.endpoint import EndpointConfig

PROMPT_PLACEHOLDER = "{prompt}"


def workflow_url(endpoint: EndpointConfig) -> str:
    return endpoint.api_url("/workflows/run")


def workflow_body(endpoint: EndpointConfig, tools: ToolSet) -> dict:
    question = prompt(endpoint, tools)
    if not endpoint.inputs:
        inputs: dict = {"query": question}
    else:
        inputs = {key: question if value == PROMPT_PLACEHOLDER else value for key, value in endpoint.inputs}
    return {"inputs": inputs, "response_mode": "streaming", "user": USER}


async def run_dify_workflow_step(client: HttpClient, endpoint: EndpointConfig, tools: ToolSet) -> AgentStep:
    """One Dify workflow step; never raises (except CancelledError)."""
    events = DifyWorkflowSink()
    outcome = await measured_stream(client, endpoint, workflow_url(endpoint), workflow_body(endpoint, tools), events)
    start = outcome.start_ns
    timeline = events.nodes
    nodes, left_out = nodes_of(timeline, start)
    fields: dict = {
        **base_fields(endpoint, outcome),
        "call1_response_id": timeline.workflow_run_id,
        "nodes": nodes, "nodes_left_out": left_out,
        "answer_ttft_ms": ms(events.answer_first_ns, start),
        "total_tokens": timeline.total_tokens,
        **tool_node_fields(nodes),
    }
    if timeline.workflow_elapsed_s is not None:
        fields["app_latency_ms"] = timeline.workflow_elapsed_s * 1000.0
        fields["client_latency_ms"] = ms(timeline.workflow_finished_ns, start)
    if not outcome.ok:
        return failed_step(fields, outcome)
    fields["answer_e2e_ms"] = ms(events.answer_last_ns, start)
    fields["client_latency_ms"] = ms(timeline.workflow_finished_ns, start)
    fields["step_ms"] = fields["client_latency_ms"]
    return AgentStep(**fields)
