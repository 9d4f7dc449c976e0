"""Models: provider wires, structured output, usage, prices and budgets. No Prefect here."""
