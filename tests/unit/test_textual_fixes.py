"""The mend of Textual's style-cache leak (lpxtop/ui/textual_fixes.py): Textual's own answers, no instance
kept, and nothing touched when the method is not the one it knows. Each test mends a fresh copy of
textual/_styles_cache.py, never the module the app uses."""

from __future__ import annotations

import functools
import gc
import importlib.util
import weakref

import textual._styles_cache
from textual.color import Color

from lpxtop.ui.textual_fixes import mend_styles_cache_leak

COLOURS = [(Color(10, 20, 30), Color(200, 100, 50, 0.5)), (Color(0, 0, 0), Color(255, 255, 255, 0.1)),
           (Color(1, 2, 3, 0.9), Color(4, 5, 6))]


def _fresh_styles_cache() -> type:
    """Textual's StylesCache class from a copy of its module, as Textual defines it."""
    spec = importlib.util.spec_from_file_location("styles_cache_copy", textual._styles_cache.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.StylesCache


def test_the_mended_method_answers_as_textual_s_and_keeps_no_instance():
    styles_cache = _fresh_styles_cache()
    expected = [styles_cache().get_inner_outer(*pair) for pair in COLOURS]  # before: Textual's own
    assert mend_styles_cache_leak(styles_cache)
    instance = styles_cache()
    assert [instance.get_inner_outer(*pair) for pair in COLOURS] == expected
    gone = weakref.ref(instance)
    del instance
    gc.collect()
    assert gone() is None  # Textual's cache held every instance that asked
    assert mend_styles_cache_leak(styles_cache)  # again: already mended, left as it is
    assert styles_cache.get_inner_outer.cache_info().currsize == len(COLOURS)


def test_the_unmended_method_is_what_this_mends():
    """Without the mend, an instance that asked stays alive: the leak the mend exists for is still in the
    release pinned in pyproject.toml (when this fails, Textual has mended it and the mend can go)."""
    styles_cache = _fresh_styles_cache()
    instance = styles_cache()
    instance.get_inner_outer(*COLOURS[0])
    kept = weakref.ref(instance)
    del instance
    gc.collect()
    assert kept() is not None


def test_a_method_of_another_shape_is_left_alone():
    class Plain:
        def get_inner_outer(self, base_background, background):
            return base_background, background

    class OtherParameters:
        @functools.lru_cache(16)  # noqa: B019 - the shape under test
        def get_inner_outer(self, background):
            return background

    class Missing:
        pass

    for cls in (Plain, OtherParameters, Missing):
        before = cls.__dict__.get("get_inner_outer")
        assert not mend_styles_cache_leak(cls), cls
        assert cls.__dict__.get("get_inner_outer") is before
