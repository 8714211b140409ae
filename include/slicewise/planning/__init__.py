"""From forecasts and observed node state to a desired MIG / MPS state per node, with reasons (pure functions)."""
