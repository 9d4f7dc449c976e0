"""Verified queries: reviewed SQL with typed parameters, matched to a question by meaning."""

from nl2sql.verified.params import ParameterError, bind_parameters, coerce_value

__all__ = ["ParameterError", "bind_parameters", "coerce_value"]
