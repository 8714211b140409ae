"""The "GPU fleet" pages of the Airflow UI: data loading (``sources``), shaping (``views``), HTML (``pages``)
and the FastAPI app the plugin mounts (``app``). Only ``mount`` is imported when Airflow loads the plugin."""
