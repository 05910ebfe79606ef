"""The market: what machines cost, where and when: the dated, sourced catalog (catalog.py and its
refresh), regions, consumption tax, the one billing rule, and spot interruption risk. Pure data
and arithmetic: imports no cloud SDK and nothing that makes machines."""
