"""python -m smoke: see smoke/cli.py."""

from common.procs import exit_now
from smoke.cli import main

exit_now(main())  # out right after the summary, whatever is left of its own (see smoke/proof.py)
