"""The driver: Spark's DriverEndpoint and scheduler backend, and ``bin/driver``."""
from .cli import main
from .core import Driver
from .options import DriverOptions, local_manager, local_options

__all__ = ["Driver", "DriverOptions", "local_manager", "local_options", "main"]
