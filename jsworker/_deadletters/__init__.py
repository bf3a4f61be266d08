"""Dead letters you can work with: list, inspect, replay and purge what the workers gave up on.

:class:`DeadLetter` is one stored dead letter (:mod:`.letter`); :class:`DeadLetters` reads,
replays and purges an app's dead-letter stream (:mod:`.store`).
"""

from .admin import REPLAYED_FROM, DeadLetters
from .letter import DeadLetter, DeadLetterNotFound, DeadLetterNotReplayable, ReplayedJob

__all__ = [
    "REPLAYED_FROM",
    "DeadLetter",
    "DeadLetterNotFound",
    "DeadLetterNotReplayable",
    "DeadLetters",
    "ReplayedJob",
]
