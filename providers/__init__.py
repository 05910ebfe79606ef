"""Built-in provider plugins, installed as gpuplan.providers.<name>."""
