"""`python -m sqlenv ...`: the same command line as the `sqlenv` console script."""

import sys

from sqlenv.cli import main

sys.exit(main())
