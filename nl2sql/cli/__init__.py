"""The `nl2sql` command line."""
