"""``python -m zsched``: the ``zsched`` command (``status``, ``driver``, ``executor``)."""
import sys

from .entry import cannot_start

try:
    from .cli import main
except ImportError as exc:  # nothing built or installed: say how to get it
    sys.exit(cannot_start(exc))

sys.exit(main())
