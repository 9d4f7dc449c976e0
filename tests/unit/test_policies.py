"""Scopes from the demo's policies (DESIGN.md section 10) and the pattern rules."""

from __future__ import annotations

import pytest

from nl2sql.config import Config
from nl2sql.config.models import PoliciesConfig
from nl2sql.errors import GENERIC_REFUSAL, UnknownNameError
from nl2sql.policies import reachable_datasources, scope

CHINOOK = ["Album", "Artist", "Customer", "Employee", "Genre", "Invoice", "InvoiceLine", "MediaType",
           "Playlist", "PlaylistTrack", "Track"]
CATALOG = ["Album", "Artist", "Genre", "MediaType", "Playlist", "PlaylistTrack", "Track"]


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        ("admin", CHINOOK),
        ("analyst", [t for t in CHINOOK if t != "Employee"]),
        ("viewer", CATALOG),
        ("support", ["Customer"]),
    ],
)
def test_demo_roles_on_chinook(demo_config: Config, role: str, allowed: list[str]) -> None:
    assert scope(demo_config.policies, role, "chinook").allowed(CHINOOK) == allowed


def test_demo_reachability(demo_config: Config) -> None:
    ids = ["chinook", "support", "webanalytics"]
    assert reachable_datasources(demo_config.policies, "viewer", ids) == ["chinook"]
    assert reachable_datasources(demo_config.policies, "support", ids) == ["chinook", "support"]
    assert reachable_datasources(demo_config.policies, "analyst", ids) == ids
    assert scope(demo_config.policies, "support", "support").allows("tickets")
    assert not scope(demo_config.policies, "support", "webanalytics").allows("sessions")


def test_default_role_and_several_roles(demo_config: Config) -> None:
    assert scope(demo_config.policies, None, "chinook").allowed(CHINOOK) == CATALOG
    both = scope(demo_config.policies, ["viewer", "support"], "chinook")
    assert both.allowed(CHINOOK) == sorted([*CATALOG, "Customer"])


def test_patterns_globs_case_and_schemas() -> None:
    policies = PoliciesConfig.model_validate({
        "default_role": "r",
        "roles": {"r": {"allow": ["dw.sales.*", "dw.Invoice*", "lake"], "deny": ["dw.sales.secret_*", "lake.hr"]}},
    })
    dw = scope(policies, "r", "dw")
    assert dw.allows("orders", schema="sales") and not dw.allows("orders", schema="hr")
    assert dw.allows("invoiceline") and dw.allows("INVOICE")
    assert not dw.allows("secret_pay", schema="sales")
    lake = scope(policies, "r", "lake")
    assert lake.allows("events") and not lake.allows("HR")
    assert scope(policies, "r", "other").reachable is False


def test_deny_of_a_whole_datasource_makes_it_unreachable() -> None:
    policies = PoliciesConfig.model_validate(
        {"default_role": "r", "roles": {"r": {"allow": ["*"], "deny": ["vault"]}}})
    assert reachable_datasources(policies, "r", ["app", "vault"]) == ["app"]


def test_unknown_role_names_the_known_ones(demo_config: Config) -> None:
    with pytest.raises(UnknownNameError, match="Did you mean 'viewer'"):
        scope(demo_config.policies, "viewr", "chinook")


def test_generic_refusal_names_nothing() -> None:
    for name in [*CHINOOK, "chinook", "support", "webanalytics"]:
        assert name.lower() not in GENERIC_REFUSAL.lower()
