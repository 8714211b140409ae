#!/bin/bash
# First start of the Postgres volume: a database and a login for MLflow (runs + auth) and one for the rollout
# ledger, besides Airflow's own. Passwords come from the environment (.env), never from this file.
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
CREATE USER mlflow WITH PASSWORD '${MLFLOW_DB_PASSWORD}';
CREATE DATABASE mlflow OWNER mlflow;
CREATE DATABASE mlflow_auth OWNER mlflow;
CREATE USER slicewise WITH PASSWORD '${SLICEWISE_LEDGER_PASSWORD}';
CREATE DATABASE slicewise OWNER slicewise;
SQL
