"""`python -m nl2sql.cli`: the `nl2sql` command (how the background question desk is started)."""

from nl2sql.cli.main import run

run()
