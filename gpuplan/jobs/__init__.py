"""Reference jobs (PyTorch, optional extra gpuplan[bench])."""
