"""The Ray backend: a batch as a Ray Job on a cluster's head node (runner.py from the client,
engine.py to start Ray over SSH, ray_driver.py + batch_rules.py on the head, containers.py)."""
