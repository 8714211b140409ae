# The Slicewise Airflow image: apache/airflow (the Airflow version pinned in requirements.txt) with the pinned
# stack and the project installed; no _PIP_ADDITIONAL_REQUIREMENTS at start-up. The compose stack runs every
# Airflow component and the simulator from it.
FROM apache/airflow:3.3.2-python3.11
COPY --chown=airflow:root requirements.txt constraints.txt pyproject.toml README.md /opt/slicewise/
COPY --chown=airflow:root include /opt/slicewise/include
COPY --chown=airflow:root models /opt/slicewise/models
RUN pip install --no-cache-dir -r /opt/slicewise/requirements.txt -c /opt/slicewise/constraints.txt \
 && pip install --no-cache-dir --no-deps -e /opt/slicewise
COPY --chown=airflow:root dags /opt/airflow/dags
COPY --chown=airflow:root plugins /opt/airflow/plugins
