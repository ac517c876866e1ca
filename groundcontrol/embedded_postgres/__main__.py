"""`python -m groundcontrol.embedded_postgres start|stop`: the embedded server of VAR_DIR."""

import sys

from groundcontrol.embedded_postgres import main

sys.exit(main(sys.argv[1:]))
