import sys

from servingbench.emulator.cli import main

sys.exit(main())
