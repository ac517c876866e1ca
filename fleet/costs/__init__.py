"""What the work cost: spend summed on read from reports, and the lanes' budgets."""
