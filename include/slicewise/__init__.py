"""Slicewise: a GPU fleet control plane on Apache Airflow."""
