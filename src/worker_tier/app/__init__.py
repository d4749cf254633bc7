"""App targets: an EB worker app run in-process (``app_adapter``) or over HTTP (``forwarding``), given sqsd's request and answering (``app_target``), judged by sqsd's rules (``sqsd``).

Exports ``target_from_settings``, the target the settings name, which imports a target's module only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker_tier.app.app_target import AppTarget
    from worker_tier.core.settings import Settings

__all__ = ["target_from_settings"]

def target_from_settings(settings: Settings) -> AppTarget | None:
    """The app target the settings name: ``app`` in-process, ``app_port`` over HTTP; None without either.

    Each module is imported only when its target is asked for. An ``app`` that cannot be imported
    raises AppLoadError, naming the setting and its value.

    Examples
    --------
    >>> from worker_tier.core.settings import Settings
    >>> target_from_settings(Settings()) is None
    True
    """
    if settings.app:
        from worker_tier.app.app_adapter import InProcessTarget

        return InProcessTarget.load(settings.app)
    if settings.app_port:
        from worker_tier.app.forwarding import HttpTarget

        return HttpTarget.from_settings(settings)
    return None
