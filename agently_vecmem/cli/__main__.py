"""``python -m agently_vecmem.cli ...``: the same as the ``agently-vecmem`` command."""

from . import main

raise SystemExit(main())
