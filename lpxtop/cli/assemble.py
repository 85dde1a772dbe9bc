"""Put the engine together from its real parts (no Textual): used by the CLI and the demo."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lpxtop.engine import DEFAULT_MAX_SAMPLES, DEFAULT_WINDOW_S, Engine, EngineSettings
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
    """An Engine with the real scrapers, GPUs (NVML, AMD SMI or amdgpu sysfs), host, ports, discovery and alert rules.

    The GPU, host and port collectors, the scrapers and discovery are built when first used (`Later`):
    their modules (psutil, the NVML and AMD readers, the /metrics readers) are imported after the dashboard's
    first frame, on a worker thread, instead of before it."""
    from lpxtop.engine import AlertRules, AlertThresholds

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
        scraper_factory=lambda config: _scraper(config, settings.window_s),
        gpu=gpu if gpu is not None else Later(_gpu_collector),
        host=Later(_host_collector),
        ports=Later(_port_monitor),
        alerts=AlertRules(thresholds),
        discover=_discover if discover else None,
        **engine_kwargs,
    )


class Later:
    """A collector built on first use. `prepare()` builds it (the engine calls it on a worker thread before
    the first collection); any other attribute builds it too. `close()` before that has nothing to close."""

    def __init__(self, build) -> None:
        self._build = build
        self._made = None

    def prepare(self) -> None:
        if self._made is None:
            self._made = self._build()

    def close(self) -> None:
        if self._made is not None:
            close = getattr(self._made, "close", None)
            if close is not None:
                close()

    def __getattr__(self, name: str):
        self.prepare()
        return getattr(self._made, name)


def _gpu_collector():
    from lpxtop.engine.gpu import AcceleratorCollector

    return AcceleratorCollector()


def _host_collector():
    from lpxtop.engine.system import HostCollector

    return HostCollector()


def _port_monitor():
    from lpxtop.engine.system import PortMonitor

    return PortMonitor()


def _scraper(config: EndpointConfig, window_s: float):
    from lpxtop.engine.scrape import ServerScraper

    return ServerScraper(config, window_s=window_s)


def _discover(client):
    from lpxtop.engine.system import discover

    return discover(client)
