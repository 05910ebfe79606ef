"""The store: the state (state.py, the only module that knows SQL) and the cost ledger read as
yen per cluster and month (costs.py)."""
