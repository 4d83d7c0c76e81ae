"""Reading state out of snapshots: the canonical rows decoded into state cells (``cells``), the
changes between two checkpoints (``changes``) and the reader over a snapshot's handles
(``snapshot_reader``). Used by the state data source, the CLI and ``statekit.query``."""
