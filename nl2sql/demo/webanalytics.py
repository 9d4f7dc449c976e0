"""Deterministic generator of the ``webanalytics`` demo database (DuckDB).

The database holds the 2010-2011 web analytics of the Chinook online music
store: marketing ``campaigns``, site ``visitors`` (about 40% of them logged-in
Chinook customers, ``customer_id`` being a Chinook ``CustomerId``), their
``sessions``, the ``page_views`` of each session and the ``web_orders`` placed
during a session.  ``sessions.utm_campaign`` joins to ``campaigns.campaign_id``.
DuckDB files embed a random database id, so reproducibility is checked with
:func:`content_digest` rather than on the file bytes.
"""

from __future__ import annotations

import hashlib
import random
from calendar import monthrange
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import duckdb
import pandas as pd

SCHEMA = """
CREATE TABLE campaigns (
    campaign_id VARCHAR PRIMARY KEY,
    channel VARCHAR NOT NULL,
    started_on DATE NOT NULL,
    ended_on DATE NOT NULL,
    budget_usd DECIMAL(10, 2) NOT NULL
);
CREATE TABLE visitors (
    visitor_id INTEGER PRIMARY KEY,
    customer_id INTEGER,
    first_seen DATE NOT NULL,
    country VARCHAR NOT NULL,
    device VARCHAR NOT NULL
);
CREATE TABLE sessions (
    session_id INTEGER PRIMARY KEY,
    visitor_id INTEGER NOT NULL REFERENCES visitors (visitor_id),
    started_at TIMESTAMP NOT NULL,
    duration_s INTEGER NOT NULL,
    landing_page VARCHAR NOT NULL,
    referrer VARCHAR NOT NULL,
    utm_campaign VARCHAR REFERENCES campaigns (campaign_id)
);
CREATE TABLE page_views (
    view_id INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions (session_id),
    viewed_at TIMESTAMP NOT NULL,
    path VARCHAR NOT NULL,
    seconds_on_page INTEGER NOT NULL
);
CREATE TABLE web_orders (
    order_id INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions (session_id),
    customer_id INTEGER NOT NULL,
    ordered_at TIMESTAMP NOT NULL,
    amount DECIMAL(10, 2) NOT NULL,
    items INTEGER NOT NULL,
    coupon_code VARCHAR
);
"""
TABLE_ORDER = ("campaigns", "visitors", "sessions", "page_views", "web_orders")

# (id, channel, started_on, ended_on, budget, landing page, share of in-window traffic %, conversion ‰).
CAMPAIGNS: tuple[tuple[str, str, str, str, str, str, int, int], ...] = (
    ("spring_rock_2010", "email", "2010-03-01", "2010-04-30", "4500.00", "/store/genre/rock", 30, 180),
    ("summer_jazz_2010", "social", "2010-06-01", "2010-08-31", "9000.00", "/store/genre/jazz", 25, 100),
    ("back_to_school_2010", "ads", "2010-08-15", "2010-09-30", "7500.00", "/store", 30, 120),
    ("holiday_gifts_2010", "ads", "2010-11-15", "2010-12-31", "15000.00", "/store", 30, 250),
    ("new_year_classics_2011", "email", "2011-01-01", "2011-01-31", "3000.00", "/store/genre/classical", 30, 200),
    ("metal_mania_2011", "social", "2011-04-01", "2011-05-31", "25000.00", "/store/genre/metal", 60, 3),
    ("summer_sale_2011", "ads", "2011-06-15", "2011-08-15", "12000.00", "/store", 30, 150),
    ("holiday_gifts_2011", "ads", "2011-11-15", "2011-12-31", "18000.00", "/store", 40, 400),
)
COUNTRIES = ("USA", "United Kingdom", "Germany", "Canada", "France", "Brazil", "India", "Australia",
             "Netherlands", "Spain", "Japan", "Mexico", "Sweden", "Italy", "Poland")
COUNTRY_WEIGHTS = (34, 11, 9, 8, 7, 6, 5, 4, 3, 3, 3, 2, 2, 2, 1)
DEVICES = ("desktop", "mobile", "tablet")
REFERRERS = ("search", "direct", "social", "email", "ads")
GENRES = ("rock", "metal", "jazz", "latin", "blues", "classical", "pop", "alternative")
# Visitors first seen per month, Jan 2010 .. Dec 2011 (traffic grows over time).
MONTH_WEIGHTS = (50, 48, 60, 62, 64, 66, 70, 72, 75, 80, 95, 120,
                 100, 92, 105, 110, 112, 115, 118, 120, 122, 128, 150, 175)
HOUR_WEIGHTS = (3, 2, 1, 1, 1, 2, 3, 5, 7, 8, 9, 9, 10, 10, 9, 9, 9, 10, 12, 14, 15, 13, 9, 5)
COUPONS = (("WELCOME10", 10), ("MUSIC15", 15), ("SPRING10", 10), ("HOLIDAY20", 20))
CENT = Decimal("0.01")


def _page(rng: random.Random) -> str:
    """A random page of the site map for browsing."""
    kind = rng.choices(("album", "genre", "artist", "store", "search", "home", "help", "account", "cart"),
                       weights=(34, 16, 12, 10, 10, 6, 4, 4, 4))[0]
    if kind == "album":
        return f"/album/{rng.randint(1, 347)}"
    if kind == "artist":
        return f"/artist/{rng.randint(1, 275)}"
    if kind == "genre":
        return f"/store/genre/{rng.choice(GENRES)}"
    return {"store": "/store", "search": "/search", "home": "/", "help": "/help",
            "account": "/account", "cart": "/cart"}[kind]


def _landing(rng: random.Random, referrer: str, campaign: tuple | None) -> str:
    """Landing page for a session arriving from ``referrer``."""
    if campaign is not None:
        return campaign[5]
    if referrer == "direct":
        return rng.choices(("/", "/store", "/account"), weights=(70, 20, 10))[0]
    if referrer == "search":
        return "/" if rng.random() < 0.25 else _page(rng)
    return rng.choices(("/", "/store", f"/album/{rng.randint(1, 347)}"), weights=(30, 40, 30))[0]


def _day(rng: random.Random) -> date:
    """A day drawn from the monthly traffic curve."""
    index = rng.choices(range(24), weights=MONTH_WEIGHTS)[0]
    year, month = 2010 + index // 12, index % 12 + 1
    return date(year, month, rng.randint(1, monthrange(year, month)[1]))


def _dwell(rng: random.Random) -> int:
    """Seconds spent on one page of a multi-page session (mostly short, some long reads)."""
    return rng.randint(5, 60) if rng.random() < 0.6 else rng.randint(30, 590)


def _amount(rng: random.Random, items: int, discount: int) -> Decimal:
    """Order total: tracks at 0.99, a few videos at 1.99, minus a coupon discount."""
    total = sum((Decimal("1.99") if rng.random() < 0.08 else Decimal("0.99") for _ in range(items)),
                Decimal("0"))
    return (total * (100 - discount) / 100).quantize(CENT, rounding=ROUND_HALF_UP)


def _build(rng: random.Random, customers: Sequence[tuple[int, str]]) -> dict[str, list[tuple]]:
    """Generate all rows, table by table, in primary-key order."""
    campaigns = [(c[0], c[1], c[2], c[3], c[4]) for c in CAMPAIGNS]
    draws = []
    for draw in range(3000):
        customer = rng.choice(customers) if rng.random() < 0.4 else None
        country = customer[1] if customer else rng.choices(COUNTRIES, weights=COUNTRY_WEIGHTS)[0]
        device = rng.choices(DEVICES, weights=(55, 35, 10))[0]
        draws.append((_day(rng), draw, customer[0] if customer else None, country, device))
    draws.sort()
    visitors = [(i, cid, seen, country, device)
                for i, (seen, _, cid, country, device) in enumerate(draws, start=1)]

    planned = []  # (started_at, visitor_id, customer_id)
    for visitor_id, cid, seen, _, _ in visitors:
        extra = rng.choices(range(11), weights=(5, 7, 9, 11, 10, 10, 8, 6, 4, 3, 2))[0] if cid \
            else rng.choices((0, 1, 2, 3), weights=(65, 20, 10, 5))[0]
        days_left = (date(2011, 12, 31) - seen).days
        for day in [seen] + [seen + timedelta(days=rng.randint(0, days_left)) for _ in range(extra)]:
            hour = rng.choices(range(24), weights=HOUR_WEIGHTS)[0]
            if day == date(2011, 12, 31):
                hour = min(hour, 21)  # sessions last under two hours and must end within 2011
            start = datetime(day.year, day.month, day.day, hour, rng.randint(0, 59), rng.randint(0, 59))
            planned.append((start, visitor_id, cid))
    planned.sort()

    sessions, views, orders = [], [], []
    for session_id, (start, visitor_id, cid) in enumerate(planned, start=1):
        active = [c for c in CAMPAIGNS if c[2] <= start.date().isoformat() <= c[3]]
        campaign = None
        if active:
            candidate = rng.choices(active, weights=[c[6] for c in active])[0]
            campaign = candidate if rng.random() * 100 < candidate[6] else None
        referrer = campaign[1] if campaign else rng.choices(REFERRERS, weights=(40, 28, 14, 8, 10))[0]
        pages = [_landing(rng, referrer, campaign)]
        if rng.random() >= 0.25:  # about a quarter of the sessions bounce after one page
            pages += [_page(rng) for _ in range(rng.choices(range(1, 9), weights=(40, 27, 14, 8, 5, 3, 2, 1))[0])]
        conversion = campaign[7] if campaign else 190
        if cid is not None and len(pages) > 1 and rng.random() * 1000 < conversion:
            pages += ["/cart", "/checkout", "/checkout/complete"]
        seconds = [rng.randint(3, 40) if len(pages) == 1 else _dwell(rng) for _ in pages]
        sessions.append((session_id, visitor_id, start, sum(seconds), pages[0], referrer,
                         campaign[0] if campaign else None))
        offset = 0
        for path, spent in zip(pages, seconds, strict=True):
            views.append((len(views) + 1, session_id, start + timedelta(seconds=offset), path, spent))
            offset += spent
        if pages[-1] == "/checkout/complete":
            items = rng.choices((1, 2, 3, 4, 5, 8, 10, 12, 15), weights=(40, 18, 10, 7, 6, 6, 5, 4, 4))[0]
            coupon = rng.choice(COUPONS) if rng.random() < 0.15 else None
            amount = _amount(rng, items, coupon[1] if coupon else 0)
            orders.append((len(orders) + 1, session_id, cid, views[-1][2], amount, items,
                           coupon[0] if coupon else None))
    return {"campaigns": campaigns, "visitors": visitors, "sessions": sessions,
            "page_views": views, "web_orders": orders}


def write_webanalytics(path: Path, customers: list[tuple[int, str]], seed: int = 20102) -> None:
    """Write the web analytics database to ``path`` (replacing it), deterministically from ``seed``."""
    path = Path(path)
    for stale in (path, path.with_name(path.name + ".wal")):
        stale.unlink(missing_ok=True)
    tables = _build(random.Random(seed), sorted(customers))
    con = duckdb.connect(str(path))
    try:
        con.execute(SCHEMA)
        for table in TABLE_ORDER:
            columns = [row[0] for row in con.execute(f"DESCRIBE {table}").fetchall()]
            frame = pd.DataFrame.from_records(
                [tuple(None if v is None else str(v) for v in row) for row in tables[table]],
                columns=columns)
            con.register("frame", frame)
            con.execute(f"INSERT INTO {table} SELECT * FROM frame")
            con.unregister("frame")
        con.execute("CHECKPOINT")
    finally:
        con.close()


def _render(value: object) -> str:
    if isinstance(value, Decimal):
        return repr(str(value))
    if isinstance(value, datetime | date):
        return repr(value.isoformat())
    return repr(value)


def content_digest(path: Path) -> str:
    """SHA-256 of a canonical dump of the database: tables by name, rows by primary key."""
    digest = hashlib.sha256()
    con = duckdb.connect(str(path), read_only=True)
    try:
        names = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY table_name").fetchall()]
        for name in names:
            columns = [r[0] for r in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ? "
                "ORDER BY column_index", [name]).fetchall()]
            keys = con.execute(
                "SELECT constraint_column_names FROM duckdb_constraints() WHERE schema_name = 'main' "
                "AND table_name = ? AND constraint_type = 'PRIMARY KEY'", [name]).fetchall()
            order = ", ".join(f'"{k}"' for k in (keys[0][0] if keys else columns))
            digest.update(f"{name!r}\n{columns!r}\n".encode())
            for row in con.execute(f'SELECT * FROM "{name}" ORDER BY {order}').fetchall():
                digest.update(("(" + ", ".join(_render(v) for v in row) + ")\n").encode())
    finally:
        con.close()
    return digest.hexdigest()
