"""``python -m dmcsvm``: the same as the ``dmcsvm`` command."""

import sys

from .cli import main

sys.exit(main())
