"""gpuplan: plan, provision, bootstrap and tear down batches of GPU work, priced in yen."""

__version__ = "0.1.0"
