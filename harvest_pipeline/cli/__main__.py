import sys

from harvest_pipeline.cli import main

sys.exit(main())
