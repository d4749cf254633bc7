"""Thin Lambda entry points: each adapts its event and calls the library."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class PerProcess(Generic[T]):
    """One object per Lambda execution environment, built from the environment on first use."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._value: T | None = None

    def get(self) -> T:
        """The object, built now if this is the first call since start or reset."""
        if self._value is None:
            self._value = self._factory()
        return self._value

    def reset(self) -> None:
        """Rebuild on next use (the local environment changes the variables it reads)."""
        self._value = None
