"""statekit benchmarks: each compares statekit with a peer in the same run and reports ratios."""
