"""The fleet's writes, one module per aggregate: the plan (`plan`), attempts (`attempts`) and
their reports (`reports`). Reads are `fleet.selectors`."""
