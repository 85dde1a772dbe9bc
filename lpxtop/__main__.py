from lpxtop.cli.entry import main

raise SystemExit(main())
