"""``python -m tegrad check FILE.py``: the same as the ``tegrad`` command."""

from .cli import main

raise SystemExit(main())
