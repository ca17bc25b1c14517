import sys

from pbd_worker.runtime import main

sys.exit(main())
