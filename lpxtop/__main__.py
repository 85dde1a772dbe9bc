from lpxtop.cli import main

raise SystemExit(main())
