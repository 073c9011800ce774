"""``python -m zsched.executor``: the same as ``bin/executor``."""
import sys

from . import main

sys.exit(main())
