"""Deterministic generator of the ``support`` demo database (SQLite).

The database models the customer-support desk of the Chinook music store in
2010-2011: support ``agents``, the ``tickets`` Chinook customers opened, the
``ticket_messages`` exchanged on each ticket and the ``satisfaction_surveys``
answered after a ticket was solved.  ``tickets.customer_id`` holds a Chinook
``CustomerId``; customers live in the Chinook database, so no foreign key is
declared for it.  The same seed always yields a byte-identical file.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
from calendar import monthrange
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from pathlib import Path

END = datetime(2011, 12, 31, 23, 59, 59)

SCHEMA = """
CREATE TABLE agents (
    agent_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    team TEXT NOT NULL,
    hired_on DATE NOT NULL
);
CREATE TABLE tickets (
    ticket_id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL,
    opened_at DATETIME NOT NULL,
    closed_at DATETIME,
    channel TEXT NOT NULL CHECK (channel IN ('email', 'phone', 'chat')),
    category TEXT NOT NULL CHECK (category IN ('billing', 'refund', 'playback', 'account', 'catalog')),
    priority TEXT NOT NULL CHECK (priority IN ('low', 'normal', 'high', 'urgent')),
    status TEXT NOT NULL CHECK (status IN ('open', 'pending', 'solved', 'closed')),
    agent_id INTEGER REFERENCES agents (agent_id),
    subject TEXT NOT NULL
);
CREATE TABLE ticket_messages (
    message_id INTEGER PRIMARY KEY,
    ticket_id INTEGER NOT NULL REFERENCES tickets (ticket_id),
    sent_at DATETIME NOT NULL,
    author TEXT NOT NULL CHECK (author IN ('customer', 'agent')),
    body TEXT NOT NULL
);
CREATE TABLE satisfaction_surveys (
    survey_id INTEGER PRIMARY KEY,
    ticket_id INTEGER NOT NULL REFERENCES tickets (ticket_id),
    score INTEGER NOT NULL CHECK (score BETWEEN 1 AND 5),
    comment TEXT,
    answered_at DATETIME NOT NULL
);
CREATE INDEX idx_tickets_customer ON tickets (customer_id);
CREATE INDEX idx_messages_ticket ON ticket_messages (ticket_id);
CREATE INDEX idx_surveys_ticket ON satisfaction_surveys (ticket_id);
"""

# (name, team, hired_on, skill): skill shifts survey scores, in tenths of a point.
AGENTS: tuple[tuple[str, str, str, int], ...] = (
    ("Grace Okafor", "Billing", "2008-03-03", 0),
    ("Gary Whitfield", "Billing", "2009-06-15", -14),
    ("Lena Fischer", "Billing", "2010-04-12", 2),
    ("Tom Becker", "Technical", "2008-01-14", 1),
    ("Ana Souza", "Technical", "2008-09-01", 0),
    ("Raj Malhotra", "Technical", "2009-02-02", -2),
    ("Chloe Martin", "Technical", "2010-08-23", 3),
    ("Sofia Rossi", "Catalog", "2008-05-19", 0),
    ("Jonas Berg", "Catalog", "2009-11-30", 0),
    ("Priya Raman", "Tier 2", "2008-02-11", 14),
    ("Marcus Hale", "Tier 2", "2008-10-06", 3),
    ("Elena Petrova", "Tier 2", "2009-04-20", 1),
)
TEAM_OF = {"billing": "Billing", "refund": "Billing", "playback": "Technical",
           "account": "Technical", "catalog": "Catalog"}
CATEGORIES = ("billing", "playback", "account", "refund", "catalog")
CATEGORY_WEIGHTS = (30, 28, 17, 15, 6)
OUTAGE_WEIGHTS = (22, 70, 14, 12, 4)  # March 2011: a streaming outage floods playback
BASE_SCORE = {"billing": 38, "refund": 30, "playback": 33, "account": 40, "catalog": 40}
# Tickets per month, Jan 2010 .. Dec 2011 (relative weights).
MONTH_WEIGHTS = (40, 38, 44, 46, 48, 47, 50, 55, 52, 56, 62, 80,
                 66, 60, 110, 70, 68, 72, 75, 78, 74, 80, 88, 104)
HOUR_WEIGHTS = (1, 1, 1, 1, 1, 2, 3, 5, 8, 10, 11, 11, 10, 10, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2)
PRIORITIES = ("low", "normal", "high", "urgent")
# Minutes to resolve per priority: (shortest, longest, most likely).
RESOLUTION = {"low": (240, 20160, 4320), "normal": (120, 10080, 1440),
              "high": (60, 4320, 480), "urgent": (20, 1080, 180)}

SUBJECTS = {
    "billing": ("Charged twice for invoice #{n}", "Wrong amount on invoice #{n}",
                "Card declined but order went through", "Question about sales tax on my invoice",
                "Cannot download receipt for invoice #{n}"),
    "refund": ("Refund request for invoice #{n}", "Bought the wrong album by mistake",
               "Refund not received yet", "Duplicate purchase, please refund"),
    "playback": ("Track skips halfway through", "Purchased track will not play",
                 "Audio quality is poor on downloaded album", "Player crashes on startup",
                 "Video track stutters"),
    "account": ("Cannot reset my password", "Please change the email on my account",
                "Locked out after too many login attempts", "Delete my account"),
    "catalog": ("Album listed with the wrong artist", "Missing tracks on album",
                "Please add more jazz albums", "Genre tag is wrong for an album"),
}
CUSTOMER_BODIES = {
    "billing": ("Hello, I was billed for invoice #{n} but the total looks wrong. Can you check?",
                "My card statement shows two charges for the same purchase.",
                "Could you explain the extra charge on my last invoice?"),
    "refund": ("I would like a refund for invoice #{n}, I bought it by accident.",
               "It has been two weeks and I still have not received my refund.",
               "Please refund the duplicate order, I only meant to buy it once."),
    "playback": ("The tracks I bought stop playing after a minute.",
                 "Downloaded files will not open in the player.",
                 "Playback keeps buffering even on a fast connection."),
    "account": ("I cannot log in and the reset email never arrives.",
                "Please update the email address on my account.",
                "My account is locked, please help."),
    "catalog": ("The album shows the wrong artist name.",
                "Some tracks are missing from the album I bought.",
                "Are you planning to add more albums in this genre?"),
}
FOLLOW_UPS = ("Thanks, any update on this?", "I tried that but it still does not work.",
              "Here are the details you asked for.", "Sorry for the delay, see my answer below.")
AGENT_BODIES = ("Hi, this is {agent} from Chinook support. Thanks for reaching out, I am looking into it.",
                "Could you send me the invoice number and the device you are using?",
                "I have escalated this to our specialists and will get back to you shortly.",
                "Thanks for the details, we are checking this with the billing system.")
CLOSING_BODIES = ("This is fixed now. Let us know if anything else comes up. - {agent}",
                  "I have processed this for you; it should show within 3-5 business days. - {agent}",
                  "Glad we could sort this out. Enjoy the music! - {agent}")
COMMENTS = {
    1: ("Took forever and nothing was fixed.", "Very unhelpful.", "Still not working."),
    2: ("Slow answers.", "Had to explain the problem twice."),
    3: ("OK in the end.", "Solved, but it took a while."),
    4: ("Good support, thanks.", "Quick and friendly."),
    5: ("Excellent, solved in minutes!", "Best support team ever.", "Very helpful agent."),
}


def _ts(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S")


def _opened_times(rng: random.Random, count: int) -> list[datetime]:
    """Draw ``count`` ticket opening times, sorted, following the monthly volume."""
    months = rng.choices(range(24), weights=MONTH_WEIGHTS, k=count)
    times = []
    for index in months:
        year, month = 2010 + index // 12, index % 12 + 1
        day = rng.randint(1, monthrange(year, month)[1])
        hour = rng.choices(range(24), weights=HOUR_WEIGHTS)[0]
        if (month, day) == (12, 31) and year == 2011:
            hour = min(hour, 20)  # leave room for a conversation before the year ends
        times.append(datetime(year, month, day, hour, rng.randint(0, 59), rng.randint(0, 59)))
    return sorted(times)


def _pick_agent(rng: random.Random, team: str, opened: datetime) -> int:
    """Return the id of a ``team`` member already hired when the ticket opened."""
    day = _ts(opened)[:10]
    eligible = [i + 1 for i, (_, t, hired, _) in enumerate(AGENTS) if t == team and hired <= day]
    return rng.choice(eligible)


def _unresolved_chance(priority: str, opened: datetime) -> float:
    """Probability that a ticket is still open or pending at the end of 2011."""
    urgent = priority == "urgent"
    if opened >= datetime(2011, 10, 1):
        return 0.8 if urgent else 0.2
    if opened >= datetime(2011, 7, 1):
        return 0.3 if urgent else 0.04
    return 0.05 if urgent else 0.005


def _authors(rng: random.Random, count: int, last: str) -> list[str]:
    """Authors of a thread of ``count`` messages: the customer first, ``last`` at the end."""
    authors = ["customer"]
    for _ in range(count - 2):
        authors.append("agent" if authors[-1] == "customer" or rng.random() < 0.2 else "customer")
    if count > 1:
        authors.append(last)
    return authors


def _build(rng: random.Random, customers: Sequence[tuple[int, str]]) -> dict[str, list[tuple]]:
    """Generate all rows, table by table, in primary-key order."""
    agents = [(i + 1, name, team, hired) for i, (name, team, hired, _) in enumerate(AGENTS)]
    customer_ids = [cid for cid, _ in customers]
    activity = [rng.randint(1, 6) for _ in customer_ids]
    tickets: list[tuple] = []
    messages: list[tuple] = []
    surveys: list[tuple] = []
    for ticket_id, opened in enumerate(_opened_times(rng, 1500), start=1):
        outage = (opened.year, opened.month) == (2011, 3)
        category = rng.choices(CATEGORIES, weights=OUTAGE_WEIGHTS if outage else CATEGORY_WEIGHTS)[0]
        priority = rng.choices(PRIORITIES, weights=(40, 50, 9, 1) if category == "catalog" else (25, 50, 17, 8))[0]
        channel = rng.choices(("email", "chat", "phone"),
                              weights=(20, 30, 50) if priority == "urgent" else (50, 30, 20))[0]
        tier2 = {"urgent": 0.7, "high": 0.25}.get(priority, 0.05)
        team = "Tier 2" if rng.random() < tier2 else TEAM_OF[category]
        agent_id: int | None = _pick_agent(rng, team, opened)
        low, high, mode = RESOLUTION[priority]
        closed: datetime | None = opened + timedelta(minutes=int(rng.triangular(low, high, mode)))
        if closed > END or rng.random() < _unresolved_chance(priority, opened):
            closed = None
            status = "pending" if rng.random() < 0.45 else "open"
            if status == "open" and rng.random() < 0.4:
                agent_id = None
        elif closed + timedelta(days=21) <= END and rng.random() < 0.65:
            status = "closed"
        else:
            status = "solved"
        subject = rng.choice(SUBJECTS[category]).format(n=rng.randint(1, 412))
        tickets.append((ticket_id, rng.choices(customer_ids, weights=activity)[0], _ts(opened),
                        _ts(closed) if closed else None, channel, category, priority, status,
                        agent_id, subject))

        # Messages: all strictly after opening and, for resolved tickets, before closing.
        limit = closed or min(END, opened + timedelta(days=14))
        span = int((limit - opened).total_seconds())
        if closed:
            count = rng.choices((2, 3, 4, 5, 6), weights=(40, 32, 16, 8, 4))[0]
        else:
            count = rng.randint(1, 2) if agent_id is None else rng.randint(2, 4)
        first = rng.randint(1, 120)
        offsets = [first, *sorted(rng.sample(range(first + 1, span), count - 1))]
        last = "customer" if status == "open" or agent_id is None else "agent"
        agent_name = AGENTS[agent_id - 1][0].split()[0] if agent_id else ""
        authors = _authors(rng, count, last)
        for position, (offset, author) in enumerate(zip(offsets, authors, strict=True)):
            if author == "customer":
                pool = CUSTOMER_BODIES[category] if position == 0 else FOLLOW_UPS
            elif closed and position == count - 1:
                pool = CLOSING_BODIES
            else:
                pool = AGENT_BODIES[1:] if "agent" in authors[:position] else AGENT_BODIES[:1]
            body = rng.choice(pool).format(n=rng.randint(1, 412), agent=agent_name)
            sent = opened + timedelta(seconds=offset)
            messages.append((len(messages) + 1, ticket_id, _ts(sent), author, body))

        # Surveys: only for resolved tickets, answered after closing.
        if closed and agent_id and rng.random() < 0.52:
            answered = closed + timedelta(seconds=rng.randint(600, 5 * 86400))
            raw = BASE_SCORE[category] + AGENTS[agent_id - 1][3] + rng.randint(-18, 18)
            score = min(5, max(1, (raw + 5) // 10))
            comment = rng.choice(COMMENTS[score]) if rng.random() < 0.5 else None
            if answered <= END:
                surveys.append((len(surveys) + 1, ticket_id, score, comment, _ts(answered)))
    return {"agents": agents, "tickets": tickets, "ticket_messages": messages,
            "satisfaction_surveys": surveys}


def write_support(path: Path, customers: list[tuple[int, str]], seed: int = 20101) -> None:
    """Write the support database to ``path`` (replacing it), deterministically from ``seed``."""
    path = Path(path)
    for stale in (path, path.with_name(path.name + "-journal")):
        stale.unlink(missing_ok=True)
    tables = _build(random.Random(seed), sorted(customers))
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA page_size = 4096")
        con.execute("PRAGMA journal_mode = DELETE")
        con.execute("PRAGMA foreign_keys = ON")
        con.executescript(SCHEMA)
        for table, rows in tables.items():
            marks = ", ".join("?" * len(rows[0]))
            con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()


def _render(value: object) -> str:
    if isinstance(value, datetime | date):
        return repr(value.isoformat())
    return repr(value)


def content_digest(path: Path) -> str:
    """SHA-256 of a canonical dump of the database: tables by name, rows by primary key."""
    digest = hashlib.sha256()
    con = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        for name in names:
            info = con.execute(f'PRAGMA table_info("{name}")').fetchall()
            columns = [row[1] for row in info]
            keys = [row[1] for row in sorted(info, key=lambda r: r[5]) if row[5]] or columns
            digest.update(f"{name!r}\n{columns!r}\n".encode())
            order = ", ".join(f'"{k}"' for k in keys)
            for row in con.execute(f'SELECT * FROM "{name}" ORDER BY {order}'):
                digest.update(("(" + ", ".join(_render(v) for v in row) + ")\n").encode())
    finally:
        con.close()
    return digest.hexdigest()
