"""``python -m zsched.driver``: the same as ``bin/driver``."""
import sys

from .cli import main

sys.exit(main())
