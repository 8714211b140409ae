#!/bin/sh
# Writes MLflow's basic-auth config from the environment (no secret in the image), then starts the server.
# --allowed-hosts: inside compose, Airflow reaches MLflow as "mlflow:5000", a Host header MLflow refuses by default.
set -eu
cat > /tmp/basic_auth.ini <<INI
[mlflow]
default_permission = READ
database_uri = ${MLFLOW_AUTH_DB_URI}
admin_username = ${MLFLOW_ADMIN_USER}
admin_password = ${MLFLOW_ADMIN_PASSWORD}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
INI
export MLFLOW_AUTH_CONFIG_PATH=/tmp/basic_auth.ini
exec mlflow server \
  --host 0.0.0.0 --port 5000 \
  --backend-store-uri "${MLFLOW_BACKEND_STORE_URI}" \
  --artifacts-destination /mlartifacts --serve-artifacts \
  --app-name basic-auth \
  --allowed-hosts "mlflow,mlflow:5000,localhost,localhost:5000,127.0.0.1:5000"
