import sys

from pbd_worker.cli import main

sys.exit(main())
