"""The GPU load forecaster: windows and features, baselines, metrics, the Keras LSTM, training."""
