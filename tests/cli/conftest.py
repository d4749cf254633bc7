"""The ``deployment`` fixture (tests.cli.deployment): moto with a work queue, its DLQ and a state table."""

from tests.cli.deployment import deployment

__all__ = ["deployment"]
