#!/usr/bin/env python3
"""`python -m rctl.spark` as a file, for spark-submit (which runs files):
rctl dry-run --log on Spark. `--help` for its arguments."""

import sys

from rctl.spark import main

if __name__ == "__main__":
    sys.exit(main())
