"""`python -m robolearn ...` is the `robolearn` command."""

import sys

from robolearn.commands.cli import main

sys.exit(main())
