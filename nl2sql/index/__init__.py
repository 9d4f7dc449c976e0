"""The index: entries, the ONNX embedder, FAISS builds in the state store, schema retrieval and routing."""

from nl2sql.index.build import BuildResult, build_datasource
from nl2sql.index.chunks import Entry, build_entries
from nl2sql.index.embed import Embedder
from nl2sql.index.retrieve import RetrievedSchema, Retriever
from nl2sql.index.route import Routing, fuse, route
from nl2sql.index.store import StateStore
from nl2sql.verified.models import VerifiedQuery

__all__ = [
    "BuildResult",
    "Embedder",
    "Entry",
    "RetrievedSchema",
    "Retriever",
    "Routing",
    "StateStore",
    "VerifiedQuery",
    "build_datasource",
    "build_entries",
    "fuse",
    "route",
]
