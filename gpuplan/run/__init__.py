"""Running batches: the RunBackend contract and its registry (backends.py), the batch service
(batches.py), `gpuplan launch` (launcher.py), replacements for lost nodes (recover.py), and one
sub-folder per backend holding its adapter's code: ray/ (runner, engine, driver, containers),
dok/ (高火力 DOK tasks), slurm/ (a Slurm job array)."""
