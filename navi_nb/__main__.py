import sys

from navi_nb.cli import main

sys.exit(main())
