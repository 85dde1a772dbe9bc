"""An early warning, as the alerts bar and JSON show it."""

from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("info", "warning", "critical")
SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Alert:
    """`message` says what is wrong and what to do about it."""

    severity: str  # info | warning | critical
    kind: str  # e.g. gpu_memory, gpu_memory_projection, kv_saturated, host_memory, server_exited
    message: str
    subject: str = ""  # what it is about: "gpu0", an endpoint name, "host"

    @property
    def rank(self) -> int:
        """Higher is worse: info 0, warning 1, critical 2."""
        return SEVERITY_RANK.get(self.severity, 0)

    def to_json(self) -> dict:
        return {
            "severity": self.severity,
            "kind": self.kind,
            "message": self.message,
            "subject": self.subject,
        }
