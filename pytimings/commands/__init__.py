"""The subcommands that span layers (load, analyse, then format): ``summary``, ``analyze``,
``export`` and ``report``. Each module has ``add_arguments(parser)`` and ``run(args)``;
``pytimings.cli`` wires them (and the bench and serving commands) up."""
