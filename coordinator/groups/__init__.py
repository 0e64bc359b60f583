"""Consumer groups: the pure state machine (`group`, `state`), how a generation is stored
(`snapshot`), and the trio runtime that drives groups (`manager`)."""
