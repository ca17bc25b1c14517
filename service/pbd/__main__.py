import sys

from pbd.cli import main

sys.exit(main())
