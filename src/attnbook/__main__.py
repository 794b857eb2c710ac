"""``python -m attnbook`` — the ``attnbook`` command line (see :mod:`attnbook.cli`)."""

import sys

from attnbook.cli import main

sys.exit(main())
