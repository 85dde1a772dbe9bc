"""An early warning, as the alerts bar and JSON show it."""

from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True)
class Alert:
    """`message` says what is wrong and what to do about it."""

    severity: str  # info | warning | critical
    kind: str  # e.g. gpu_memory, gpu_memory_projection, kv_saturated, host_memory, server_exited
    message: str
    subject: str = ""  # what it is about: "gpu0", an endpoint name, "host"

    def to_json(self) -> dict:
        return {"severity": self.severity, "kind": self.kind, "message": self.message, "subject": self.subject}
