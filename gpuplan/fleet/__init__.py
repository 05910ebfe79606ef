"""The fleet: the provider contract and registry (provider.py, tags.py), provision and teardown
(lifecycle.py, provision.py, preflight.py, checks.py), locks, captured images, idle stop and
`status --refresh` (reconcile.py). Machines only: what runs on them is gpuplan/run."""
