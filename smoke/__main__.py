"""python -m smoke: see smoke/cli.py."""

import sys

from smoke.cli import main

sys.exit(main())
