"""The Textual app: polls a SnapshotSource at 1–2 Hz and hands new snapshots to the screen on top.

`create_app` is the one factory the CLI and the tests use. The app never waits on the network: it reads
`source.snapshot()` (an attribute read on the live engine) and calls the non-blocking setters of what the
source declares it can do (`source.capabilities`: lpxtop/engine/source.py); it looks for nothing else.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from textual.app import App
from textual.binding import Binding
from textual.driver import Driver
from textual.filter import Monochrome
from textual.screen import ModalScreen, Screen
from textual.theme import Theme

from lpxtop.engine import PUBLISH_EVERY_S, Capabilities, Recorder, SnapshotSource
from lpxtop.model.snapshot import Snapshot
from lpxtop.ui.formatting import merge_thresholds
from lpxtop.ui.palette import Palette, monochrome_palette, palette_from_variables
from lpxtop.ui.replay_keys import REPLAY_BINDINGS, ReplayActions
from lpxtop.ui.screens.base import LpxtopScreen, SnapshotScreen
from lpxtop.ui.screens.help import HelpScreen
from lpxtop.ui.screens.main import MainScreen
from lpxtop.ui.textual_fixes import mend_styles_cache_leak
from lpxtop.ui.theming import DEFAULT_THEME, ThemeCatalog, discover_themes, load_theme, variable_defaults

if TYPE_CHECKING:
    from lpxtop.record.compare import Comparison

INTERVAL_STEP = 1.5
INTERVAL_MIN_S, INTERVAL_MAX_S = 0.25, 60.0
# Every 2 s, as nvitop (htop: 1.5 s), locally and over SSH (where it must be 1 Hz or slower). A
# probe of each endpoint also comes every 2 s, so each repaint shows every endpoint's newest probe. A
# repaint is the UI's main cost: ~6 ms of CPU on a 2-core VM, so 1 s instead of 2 s adds ~0.25 % of a
# core (`--refresh 1` asks for it). Keys repaint at once either way.
REFRESH_S = 2.0
# After `r`, the reset figures show as soon as the engine publishes them rather than at the next refresh:
# the snapshot is read every POLL_AFTER_COMMAND_S for COMMAND_POLLS reads (a read is an attribute read; a
# repaint happens only for a new snapshot). The window is several of the engine's publishing periods, so a
# busy machine that runs the engine's loop late still shows the reset within it.
POLL_AFTER_COMMAND_S = 0.1
COMMAND_POLLS = int(4 * PUBLISH_EVERY_S / POLL_AFTER_COMMAND_S)



# Until the first figures are on screen, the snapshot is read this often (a read is an attribute read; a
# repaint happens only for a new snapshot), for at most FIRST_FIGURES_POLL_MAX_S: see `_poll_first_figures`.
# Every 20 ms: the figures wait 10 ms for their poll on average, not 25.
FIRST_FIGURES_POLL_S = 0.02
FIRST_FIGURES_POLL_MAX_S = 10.0

# Seconds after the first frame when the objects made at start-up (modules, widgets, styles: ~50,000)
# are set aside from the garbage collector; see _freeze_startup_objects.
FREEZE_AFTER_S = 3.0


def _freeze_startup_objects() -> None:
    """Move what start-up made out of the collector's sight (gc.freeze): those objects live as long as the
    app, and each full collection walked all of them (~20 ms, several a minute on a busy dashboard)."""
    gc.collect()
    gc.freeze()

class LpxtopApp(ReplayActions, App):
    """lpxtop's terminal interface. Build it with `create_app`."""

    CSS_PATH = "lpxtop.tcss"
    TITLE = "lpxtop"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "quit", "quit"),
        # As htop and nvitop (and `lpxtop load`): Ctrl+C quits, not Textual's "press ctrl+q" notice. A
        # priority binding, so that it also quits from the filter field and from dialogs.
        Binding("ctrl+c", "interrupt", "quit", show=False, priority=True),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("p", "pause", "pause"),
        Binding("r", "reset", "reset"),
        Binding("plus,equals_sign", "interval(1)", "slower", key_display="+"),
        Binding("minus", "interval(-1)", "faster", key_display="-"),
        Binding("t", "cycle_theme", "theme"),
        Binding("g", "surge", "surge"),
        Binding("b", "bookmark", "bookmark", show=False),
        # Replay only (hidden and inert on a live source): see lpxtop/ui/replay_keys.py
        *REPLAY_BINDINGS,
    ]

    def __init__(
        self,
        source: SnapshotSource,
        *,
        catalog: ThemeCatalog,
        theme_name: str,
        refresh_s: float,
        ssh: bool,
        readonly: bool,
        thresholds: Mapping[str, tuple[float, float]],
        poll: bool,
        capabilities: Capabilities,
        surge: Callable[[bool], None] | None = None,
        comparison: Comparison | None = None,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self._on_ready_callback = on_ready
        self.source = source
        self.capabilities = capabilities  # what the source can do, with what the command line attached
        self.catalog = catalog
        self.ssh = ssh
        self.refresh_s = refresh_s
        self.readonly = readonly
        self.thresholds = thresholds
        self._surge = surge
        self.is_demo = surge is not None
        self.timeline = capabilities.timeline  # a replay's clock: the replay keys and the time bar
        self.recorder = capabilities.recorder  # a live recording: REC, `b`
        self.comparison = comparison  # `lpxtop replay A --compare B`: shown on top at start
        self.poll_enabled = poll
        self.snapshot: Snapshot | None = None
        self.paused = False
        self.interval_s = 2.0
        self.surge = False
        self._palettes: dict[str, Palette] = {}
        self._poll_error: str | None = None
        for theme in catalog.themes.values():
            self.register_theme(theme)
        self.theme = theme_name
        if ssh:
            self.animation_level = "none"  # no animation over a remote link

    # Theme support

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """Every custom $variable in lpxtop.tcss has a default, so a minimal user theme still loads."""
        return variable_defaults(self.current_theme)

    @property
    def palette(self) -> Palette:
        """Rich styles for the current theme's status colours (cached per theme); attributes, not colours,
        under NO_COLOR (`monochrome_palette`)."""
        name = self.theme
        if name not in self._palettes:
            theme = self.current_theme
            variables = {**variable_defaults(theme), **theme.to_color_system().generate(), **theme.variables}
            palette = palette_from_variables(variables)
            self._palettes[name] = monochrome_palette(palette.chart) if self.no_color else palette
        return self._palettes[name]

    @property
    def lpxtop_themes(self) -> list[str]:
        """The themes `t` cycles through: lpxtop's and the user's, not Textual's built-ins."""
        return list(self.catalog.themes)

    def _on_theme_changed(self, theme: Theme) -> None:
        self._rerender_screen(force=True)

    # Polling

    def on_mount(self) -> None:
        self.theme_changed_signal.subscribe(self, self._on_theme_changed)
        if self.catalog.errors:
            # Every broken theme file, in one notification (posting's habit).
            self.notify("\n".join(str(e) for e in self.catalog.errors), title="Theme files skipped",
                        severity="warning", timeout=15)
        self.poll()
        if self.snapshot is not None:
            self.paused = self.snapshot.paused
            self.interval_s = self.snapshot.interval_s
            self._rerender_screen()
        if self.poll_enabled:
            self.set_interval(self.refresh_s, self.poll, name="snapshot-poll")
            if self.capabilities.warming_up is not None:
                self._first_figures_until = time.monotonic() + FIRST_FIGURES_POLL_MAX_S
                self._first_figures_timer = self.set_interval(FIRST_FIGURES_POLL_S, self._poll_first_figures,
                                                              name="first-figures-poll")
        if self.comparison is not None:
            self.action_compare()

    def _poll_first_figures(self) -> None:
        """Read snapshots often while the source is still warming up (the live engine: until every endpoint's
        first probe is in), so the first figures show within a poll of being measured, not a refresh later.
        The source is asked before the poll, not after: figures published between the two would otherwise end
        the polling unread and wait for the next refresh (a minute with `--refresh 60`)."""
        warming_up = self.capabilities.warming_up
        done = warming_up is None or not warming_up() or time.monotonic() > self._first_figures_until
        self.poll()
        if done:
            self._first_figures_timer.stop()

    def on_ready(self) -> None:
        """The first frame is on screen: the caller may now start work that must not compete with start-up."""
        if self._on_ready_callback is not None:
            self._on_ready_callback()
        if not self.is_headless:  # a test process runs many apps: it keeps its collector as it is
            self.set_timer(FREEZE_AFTER_S, _freeze_startup_objects, name="gc-freeze")

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver for this platform, except Linux/macOS terminals get one whose input thread
        does not poll (see ui/quiet_driver.py). TEXTUAL_DRIVER, when set, still decides."""
        driver = super().get_driver_class()
        if sys.platform == "win32":
            return driver
        from textual.drivers.linux_driver import LinuxDriver  # imports termios: not on Windows

        from lpxtop.ui.quiet_driver import QuietLinuxDriver

        return QuietLinuxDriver if driver is LinuxDriver else driver

    def get_default_screen(self) -> Screen:
        if self.capabilities.load is not None:  # `lpxtop load`: the load test's own screen
            from lpxtop.ui.screens.load import LoadScreen

            return LoadScreen()
        return MainScreen()

    def poll(self) -> None:
        """Read the newest snapshot and give it to the screen on top, unless nothing changed."""
        try:
            snap = self.source.snapshot()
        except Exception as exc:  # a broken source must not kill the UI; say so once
            message = f"cannot read the engine's snapshot: {type(exc).__name__}: {exc}"
            if message != self._poll_error:
                self._poll_error = message
                self.notify(message, severity="error", timeout=10)
            return
        self._poll_error = None
        if self.snapshot is not None and snap is self.snapshot:
            return
        self.snapshot = snap
        screen = self.screen
        if not screen.is_attached:
            return  # the app is closing
        if isinstance(screen, ModalScreen):
            return  # nothing visible changes under a dialog; the screen catches up on resume
        if isinstance(screen, SnapshotScreen):
            screen.show_snapshot(snap)

    def _rerender_screen(self, force: bool = False) -> None:
        for screen in self.screen_stack:
            if not isinstance(screen, LpxtopScreen):
                continue
            if screen is self.screen:
                screen.rerender(force=force)
            elif force:
                # Screens underneath redraw in the new theme when they come back.
                screen.call_later(screen.rerender, force)

    # Actions

    def action_interrupt(self) -> None:
        """Ctrl+C: what `q` does on the screen on top (a load test stops and writes its report), else quit."""
        for screen in reversed(self.screen_stack):
            if isinstance(screen, SnapshotScreen) and screen.interrupt():
                return
        self.exit()

    def action_help(self) -> None:
        """The help of the screen on top: its own keys (each screen says what they are: `help_page`)."""
        if isinstance(self.screen, HelpScreen):
            return
        page = self.screen.help_page() if isinstance(self.screen, LpxtopScreen) else None
        if page is not None:
            self.push_screen(HelpScreen(page))

    def _controls(self, action: str):
        """The source's controls for `action`; None (and says why) when it has none (the fleet view has no
        probing to steer)."""
        controls = self.capabilities.controls
        reason = self.capabilities.refusals.get(action)
        if controls is None and not reason:
            reason = f"{action} does nothing here: this view does not steer probing"
        if reason:
            self.notify(reason, severity="warning", timeout=5)
            return None
        return controls

    def action_pause(self) -> None:
        if self.timeline is not None:
            self.action_replay_play()
            return
        controls = self._controls("pause")
        if controls is None:
            return
        self.paused = not self.paused
        controls.set_paused(self.paused)
        self.notify("probing paused (p resumes)" if self.paused else "probing resumed", timeout=2)
        self._rerender_screen()

    def action_reset(self) -> None:
        if self.timeline is not None:
            self.notify("a replay shows the recording's statistics: r (reset) does nothing here", timeout=3)
            return
        controls = self._controls("reset")
        if controls is None:
            return
        controls.reset()
        self.notify("statistics reset", timeout=2)
        if self.poll_enabled:
            self.set_interval(POLL_AFTER_COMMAND_S, self.poll, repeat=COMMAND_POLLS, name="poll-after-reset")

    def action_interval(self, direction: int) -> None:
        if self.timeline is not None:  # as the footer says: + slower, - faster
            self.action_replay_speed(-direction)
            return
        controls = self._controls("interval")
        if controls is None:
            return
        factor = INTERVAL_STEP if direction > 0 else 1 / INTERVAL_STEP
        new = round(min(INTERVAL_MAX_S, max(INTERVAL_MIN_S, self.interval_s * factor)), 3)
        if new == self.interval_s:
            self.notify(f"probe interval already at its {'maximum' if direction > 0 else 'minimum'} ({new:g} s)",
                        timeout=2)
            return
        self.interval_s = new
        controls.set_interval(new)
        self._rerender_screen()

    def action_cycle_theme(self) -> None:
        names = self.lpxtop_themes
        if not names:
            return
        index = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(index + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2)

    def action_surge(self) -> None:
        if self._surge is None:
            self.notify("g (load surge) only works in `lpxtop demo`", timeout=3)
            return
        self.surge = not self.surge
        self._surge(self.surge)
        self.notify("demo surge on: watch TTFT and the queue grow" if self.surge else "demo surge off", timeout=3)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action.startswith("replay_"):
            return self.timeline is not None
        if action == "compare":
            return self.comparison is not None
        if action in ("pause", "reset", "interval") and self.capabilities.load is not None:
            return False  # a load test runs no probes: nothing to pause, reset or pace
        return action != "surge" or self.is_demo  # g is hidden from the footer outside the demo


def create_app(
    source: SnapshotSource,
    *,
    theme: str | None = None,
    refresh_s: float | None = None,
    ssh: bool | None = None,
    no_color: bool | None = None,
    readonly: bool = False,
    thresholds: Mapping[str, tuple[float, float]] | None = None,
    poll: bool = True,
    on_ready: Callable[[], None] | None = None,
    recorder: Recorder | None = None,
    demo: Callable[[bool], None] | None = None,
    comparison: Comparison | None = None,
) -> LpxtopApp:
    """Build the app (the CLI and the tests use this one factory).

    theme: a theme name (built-in or from the user themes directory); raises UnknownThemeError
        listing the available ones, or ThemeFileError when that theme's file is broken.
    refresh_s: how often the UI reads the snapshot and repaints (default 2 s).
    ssh: treat the terminal as remote (default: SSH_CONNECTION is set): no animation, no blink.
    no_color: monochrome output (default: the NO_COLOR environment variable, which Textual honours).
    readonly: refuse process signals (also when the source declares itself read-only).
    thresholds: (warning, critical) limits overriding formatting.DEFAULT_THRESHOLDS.
    poll: False keeps the poll timer off (one read at start): for snapshot tests.
    on_ready: called once the first frame is displayed (the CLI starts the engine there, so that
        start-up work does not delay the first probes' timestamps).
    recorder: the live recording beside the source (the header shows REC, `b` bookmarks).
    demo: `lpxtop demo`'s load surge switch (`g`); None elsewhere.
    comparison: `lpxtop replay A --compare B`'s figures, shown on top at start (`c` brings them back).
    """
    mend_styles_cache_leak()  # or each closed screen's widgets stay in memory (lpxtop/ui/textual_fixes.py)
    catalog = discover_themes()
    theme_name = theme or DEFAULT_THEME
    if theme_name not in catalog.themes:
        load_theme(theme_name)  # raises the right error: unknown, or the file's problems
    if ssh is None:
        ssh = bool(os.environ.get("SSH_CONNECTION"))
    if refresh_s is None:
        refresh_s = REFRESH_S
    capabilities = source.capabilities
    if recorder is not None:
        capabilities = replace(capabilities, recorder=recorder)
    app = LpxtopApp(
        source,
        catalog=catalog,
        theme_name=theme_name,
        refresh_s=max(0.1, refresh_s),
        ssh=ssh,
        readonly=bool(readonly or capabilities.readonly),
        thresholds=merge_thresholds(thresholds),
        poll=poll,
        capabilities=capabilities,
        surge=demo,
        comparison=comparison,
        on_ready=on_ready,
    )
    if no_color and not app.no_color:
        # Same effect as NO_COLOR in the environment, which Textual reads in App.__init__.
        app.no_color = True
        app._filters.append(Monochrome())
    return app
