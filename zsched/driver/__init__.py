"""The driver: Spark's DriverEndpoint and scheduler backend, and ``bin/driver``."""
from .cli import main
from .core import Driver

__all__ = ["Driver", "main"]
