"""Local services of the embedded default (Prometheus, MLflow, Airflow), bound to 127.0.0.1 on free ports."""
