"""The question's steps in the words a person reads: the CLI's live display, the task runs in the Prefect UI and the
run's log lines use these (the declaration, `pipeline/declaration.py`, keeps the names code uses).

>>> step_words("curated_matcher"), step_words("executor", "sq1", "chinook"), step_words("execute.before")
('verified queries', 'ran · sq1 (chinook)', 'hooks at execute.before')
"""

from __future__ import annotations

#: Each step's words; a hook point reads "hooks at <point>".
STEP_WORDS = {"curated_matcher": "verified queries", "resolver": "routing", "decomposer": "decomposing",
              "schema_retrieval": "schema", "planner": "plan", "validator": "validated", "generator": "SQL",
              "executor": "ran", "sanity": "checked", "refiner": "refined", "aggregator": "combined",
              "synthesizer": "answer"}

#: What the asker's listeners hear when the answer's rows exist, before the sentence about them (never an event of
#: the bus, so no observer or trace holds it: `RunTrace.tell_asker`)
ROWS_READY = "answer.rows"

#: Where a sub-query's SQL came from, in words (a plan the model wrote reads "generated").
SOURCE_WORDS = {"verified": "verified query", "plan_cache": "cached plan"}


def step_words(name: str, sub_query_id: str | None = None, datasource_id: str | None = None) -> str:
    """A step as a person reads it, with its sub-query and datasource when it has one."""
    words = STEP_WORDS.get(name) or (f"hooks at {name}" if "." in name else name)
    if sub_query_id is None:
        return words
    return f"{words} · {sub_query_id}" + (f" ({datasource_id})" if datasource_id else "")
