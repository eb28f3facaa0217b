"""A tiny in-process progress hook: the CLI listens to pages as the harvest stores them."""

from __future__ import annotations

from typing import Callable

_listeners: list[Callable[[dict], None]] = []


def subscribe(listener: Callable[[dict], None]) -> Callable[[], None]:
    _listeners.append(listener)
    return lambda: _listeners.remove(listener)


def notify(event: dict) -> None:
    for listener in list(_listeners):
        listener(event)
