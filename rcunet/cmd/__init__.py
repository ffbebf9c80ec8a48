"""Subcommands of the ``rcunet`` command, one module each."""
