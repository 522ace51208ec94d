"""python -m smoke: see smoke/cli.py."""

from smoke.cli import main
from smoke.procs import exit_now

exit_now(main())  # out right after the summary, whatever is left of its own (see smoke/proof.py)
