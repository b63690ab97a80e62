import sys

from tests.support.sim.explore import main

sys.exit(main())
