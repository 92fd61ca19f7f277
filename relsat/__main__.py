import sys

from relsat.cli import main

sys.exit(main())
