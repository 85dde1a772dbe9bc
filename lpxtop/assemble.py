"""Put the engine together from its real parts (no Textual): used by the CLI and the demo."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lpxtop.engine.runner import Engine, EngineSettings
from lpxtop.engine.stats import DEFAULT_MAX_SAMPLES, DEFAULT_WINDOW_S
from lpxtop.model.endpoint import EndpointConfig


def build_engine(
    endpoints: Sequence[EndpointConfig],
    *,
    window_s: float | None = None,
    max_samples: int | None = None,
    scrape_metrics: bool = True,
    discover: bool = False,
    readonly: bool = False,
    include_client_limited: bool = False,
    alert_settings: Mapping[str, object] | None = None,
    gpu=None,
    engine_class: type[Engine] = Engine,
    **engine_kwargs,
) -> Engine:
    """An Engine with the real scrapers, GPUs (NVML, AMD SMI or amdgpu sysfs), host, ports, discovery and alert rules."""
    from lpxtop.engine.accel.collector import AcceleratorCollector
    from lpxtop.engine.alerts import AlertRules, AlertThresholds
    from lpxtop.engine.discovery import discover as discover_servers
    from lpxtop.engine.host import HostCollector
    from lpxtop.engine.ports import PortMonitor
    from lpxtop.engine.servers import ServerScraper

    settings = EngineSettings(
        window_s=window_s or DEFAULT_WINDOW_S,
        max_samples=max_samples or DEFAULT_MAX_SAMPLES,
        scrape_metrics=scrape_metrics,
        discover=discover,
        readonly=readonly,
        include_client_limited=include_client_limited,
    )
    thresholds = AlertThresholds.from_mapping(dict(alert_settings or {}))
    return engine_class(
        endpoints,
        settings,
        scraper_factory=lambda config: ServerScraper(config, window_s=settings.window_s),
        gpu=gpu if gpu is not None else AcceleratorCollector(),
        host=HostCollector(),
        ports=PortMonitor(),
        alerts=AlertRules(thresholds),
        discover=(lambda client: discover_servers(client)) if discover else None,
        **engine_kwargs,
    )
