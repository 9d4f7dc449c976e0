"""Schema snapshots: fingerprints and the differences between two of them."""

from nl2sql.schema.snapshot import SchemaDiff, diff_snapshots, fingerprint

__all__ = ["SchemaDiff", "diff_snapshots", "fingerprint"]
