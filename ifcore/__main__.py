import sys

from ifcore.cli import main

sys.exit(main())
