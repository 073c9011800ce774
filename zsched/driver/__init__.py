"""The driver: Spark's DriverEndpoint and scheduler backend, and ``bin/driver``.

Its names are imported on first use: ``python -m zsched.driver`` in a checkout with
nothing built says how to build it, rather than failing in this import."""
from ..entry import lazy_exports

_SOURCES = {"Driver": "core", "DriverOptions": "options", "local_manager": "options",
            "local_options": "options", "main": "cli"}
__all__ = ["Driver", "DriverOptions", "local_manager", "local_options", "main"]
__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
