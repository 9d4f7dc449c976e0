"""Evaluation: comparing result rows, suites, scorers, reports and the gate."""
