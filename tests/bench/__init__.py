"""The benchmarks (`groupkeeper bench ...`), run small for correctness: no figure is asserted."""
