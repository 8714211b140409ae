"""Test doubles shared across the test suites (the Kubernetes API stand-in and its object builders)."""
