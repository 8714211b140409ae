"""What-if backtests: replay a real pod trace on a simulated cluster under several partitioning policies, with
Slicewise's own planner making the hourly decisions, and compare utilisation, queueing, fragmentation and cost.
``slicewise backtest`` is the command; docs/backtest.md documents the model."""
