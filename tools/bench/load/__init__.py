"""`groupkeeper bench load`: a load generator, a framing-only reference server, and the
loads the coordinator is held to (`suite`)."""
