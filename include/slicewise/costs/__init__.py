"""GPU cost reports that follow MIG and MPS: who held which share of which GPU, what they used, what it cost.

Pure modules over plain data: ``pricing`` (the price table), ``sharing`` (node layouts over time, MPS
replicas), ``samples`` (every GPU-minute attributed), ``allocation`` (OpenCost-style rows and totals), ``idle``
(why allocated GPUs sat idle), ``savings`` (what applied changes saved, an estimate), ``accuracy`` (the
planner's forecasts vs what happened), ``window``, ``plots``, ``report`` and ``page`` (the published files). ``sources``
reads storage and the ledger; ``run`` holds the steps the ``gpu_cost_report`` DAG calls.
"""
