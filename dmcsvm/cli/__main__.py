"""``python -m dmcsvm.cli``: the same as the ``dmcsvm`` command."""

import sys

from . import main

sys.exit(main())
