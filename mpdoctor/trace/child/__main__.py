import sys

from mpdoctor.trace.child.main import main

sys.exit(main(sys.argv[1:]))
