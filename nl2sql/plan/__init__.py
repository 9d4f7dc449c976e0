"""The typed plan: PlanModel (the AST a model emits), its validator, and the SQL generator."""

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
    "plan_to_expression",
    "validate_plan",
]
