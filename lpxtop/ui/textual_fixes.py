"""A memory leak in Textual that the dashboard met, mended when the app is built (`create_app`).

Textual's `textual._styles_cache.StylesCache.get_inner_outer` (8.2.8) is an instance method under
`functools.lru_cache(1024)`: the cache's keys hold the instance, so each widget's `StylesCache`, and with it
every line the widget last rendered, lives on after the widget is gone, until 1,024 newer (widget, colour)
pairs push it out. Each time the detail screen opened and closed, ~13,000 objects stayed behind: in 150 s
of opening it every 3 s on the demo, the dashboard's heap grew from 147,000 to 809,000 objects and a full
garbage collection with nothing to free from 88 to 434 ms, on its way to over a million objects. A full
collection holds the interpreter lock: the probes' reads wait behind it and come out client-limited. With
the cache below, the same 150 s went from 48,000 to 56,000 objects and 26 to 55 ms (docs/performance.md,
"The dashboard's heap"; `python benchmarks/ui_heap.py`).

The method never reads its instance: it maps two colours to two styles. The mend caches on the two colours
alone, the same size as before, so the answers are Textual's own and no instance is kept. It applies only
to the method it knows (an lru_cache over a function of `(cls, base_background, background)`) and leaves
anything else alone, so a Textual that mends it, or changes it, is used as it is.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

_MENDED = "_lpxtop_mended"
_KNOWN_PARAMETERS = ["cls", "base_background", "background"]


def mend_styles_cache_leak(styles_cache: Any = None) -> bool:
    """Give `StylesCache.get_inner_outer` a cache keyed on its two colours only. True when it is mended
    (now or before), False when the method is not the one this mends (nothing changed)."""
    if styles_cache is None:
        try:
            from textual._styles_cache import StylesCache as styles_cache
        except ImportError:
            return False
    current = styles_cache.__dict__.get("get_inner_outer")
    if isinstance(current, staticmethod) and getattr(current.__func__, _MENDED, False):
        return True
    wrapped = getattr(current, "__wrapped__", None)
    if not (callable(current) and hasattr(current, "cache_parameters") and callable(wrapped)):
        return False
    try:
        parameters = list(inspect.signature(wrapped).parameters)
    except (TypeError, ValueError):
        return False
    if parameters != _KNOWN_PARAMETERS:
        return False

    @functools.lru_cache(current.cache_parameters()["maxsize"])
    def get_inner_outer(base_background: Any, background: Any) -> Any:
        return wrapped(None, base_background, background)

    setattr(get_inner_outer, _MENDED, True)
    styles_cache.get_inner_outer = staticmethod(get_inner_outer)
    return True
