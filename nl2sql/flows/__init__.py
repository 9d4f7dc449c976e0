"""Prefect flows: composition only (the steps are in nl2sql/tasks, the work in the domain packages)."""
