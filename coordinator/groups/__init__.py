"""Consumer groups: the pure state machines (`state`, `group` for the classic protocol,
`consumer_group` for KIP-848's), migration between them (`migration`), how a generation is
stored (`snapshot`), and the trio runtime that drives them (`manager`).

May import: `assignors`, `store`, `events`, `logs`, `metrics` and `protocol`.
"""
