"""``python -m judgetune.cli``."""

import sys

from judgetune.cli import main

sys.exit(main())
