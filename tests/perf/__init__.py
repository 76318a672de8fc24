"""Per-row work of the hot paths, counted against the budgets in budgets.json."""
