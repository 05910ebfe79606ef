"""Planning: workloads and profiles with the market's offers in; candidate fleets, their wall
time and yen, ranked, out. Imports no cloud SDK and nothing that makes machines or runs batches."""
