import sys

from pibctl.cli import main

sys.exit(main(sys.argv[1:]))
