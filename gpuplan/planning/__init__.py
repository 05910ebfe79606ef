"""Planning: the catalog, workloads and profiles in; candidate fleets, their wall time and yen,
ranked, out. Imports no cloud SDK and nothing from gpuplan.operating."""
