"""The plan: work packages in lanes, their runs and the runs' slots."""
