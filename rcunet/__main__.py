from rcunet.cli import main

raise SystemExit(main())
