"""The result model (model.py) and its renderers: terminal, JSON, JUnit XML, Prometheus textfile."""
