import sys

from servingbench.pipelines.cli import main

sys.exit(main())
