from callgate.cli.main import main

raise SystemExit(main())
