"""The typed plan: PlanModel (the AST a model emits), its validator, the SQL generator and its inverse."""

from nl2sql.plan.from_sql import plan_from_sql
from nl2sql.plan.generate import DIALECTS, generate_sql, plan_to_expression
from nl2sql.plan.model import PlanModel
from nl2sql.plan.validate import PlanIssue, PlanValidationError, ValidatedPlan, iter_plans, validate_plan

__all__ = [
    "DIALECTS",
    "PlanIssue",
    "PlanModel",
    "PlanValidationError",
    "ValidatedPlan",
    "generate_sql",
    "iter_plans",
    "plan_from_sql",
    "plan_to_expression",
    "validate_plan",
]
