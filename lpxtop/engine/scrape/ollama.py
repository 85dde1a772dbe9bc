"""Ollama has no /metrics: its server-side view is the list of loaded models from GET /api/ps.

Response shape (docs.ollama.com/api/ps): ``{"models": [{"name", "model", "size", "digest",
"details": {...}, "expires_at", "size_vram", "context_length"}]}``. `size` is the whole model in
memory, `size_vram` the part of it in GPU memory; a model partly in system RAM runs much slower.
"""

from __future__ import annotations

from typing import Any

from lpxtop.model.server import ModelServerMetrics, ServerMetrics


def looks_like_ps(payload: Any) -> bool:
    """True for a JSON body shaped like Ollama's /api/ps answer."""
    return isinstance(payload, dict) and isinstance(payload.get("models"), list)


def ollama_metrics(payload: Any, wall: float | None = None) -> ServerMetrics:
    """ServerMetrics from a parsed /api/ps body; a body of another shape gives an error status."""
    if not looks_like_ps(payload):
        return ServerMetrics(kind="ollama", status='error: /api/ps did not answer {"models": [...]}')
    per_model = []
    for m in payload["models"]:
        if not isinstance(m, dict):
            continue
        name = m.get("name") or m.get("model")
        if not isinstance(name, str) or not name:
            continue
        per_model.append(
            ModelServerMetrics(
                model=name,
                vram_bytes=_number(m.get("size_vram")),
                size_bytes=_number(m.get("size")),
            )
        )
    vram = [m.vram_bytes for m in per_model if m.vram_bytes is not None]
    return ServerMetrics(
        kind="ollama",
        status="ok",
        models=tuple(m.model for m in per_model),
        models_loaded=len(per_model),
        vram_bytes=sum(vram) if vram else None,
        per_model=tuple(per_model),
        scraped_at=wall,
    )


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x)
