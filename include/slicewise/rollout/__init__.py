"""Gradual rollout of a partition plan: waves, apply/verify/analyse/rollback, and the durable ledger."""
