from mpdoctor.cli import main

raise SystemExit(main())
