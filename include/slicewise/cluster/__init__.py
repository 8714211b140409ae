"""Observed cluster state and the few changes Slicewise makes, behind one interface (see :mod:`.base`)."""
