"""`python -m morkit.cli`, the same as the `morkit` command."""

import sys

from morkit.cli.main import main

sys.exit(main())
