"""Evidence, before any model call, that a question needs records the caller may not read.

A small model shown only the tables a caller may read answers a question about sales from whatever it is
shown ("Which genres sell best in Germany?" becomes a sum of track sizes for a role that sees the catalog
only). Sales are kept in transaction tables (`SchemaFacts.table_kinds`: a quantity, or an amount and a
date); when the question speaks of sales, the datasource has such tables, and the caller may read none of
them, the question needs data outside the caller's scope, and the engine refuses with the generic refusal
(which names nothing) instead of answering a different question.

The words are stricter than retrieval's sales cue (`retrieve._SALES`): a refusal must be right where a
retrieval bonus may only be useful, so words with other common readings are left out ("order" of a sort
order, "paid" of a salary, "price" of a catalog), as are "we sell" and "do we sell" (what a catalog
offers), and a word that a table, column or profiled value the caller may read explains.
"""

from __future__ import annotations

import re
from collections.abc import Set

from nl2sql.index.retrieve import SchemaFacts, read_question, singular

#: Words that speak of sales made: the records of them are transactions.
SALES_WORDS = re.compile(
    r"\b(?:revenue\w*|sales?|sold|sell\w*|outsell\w*|spen[dt]\w*|earn\w*|bought|buy\w*|purchas\w*|turnover|"
    r"invoiced|billed)\b")
#: What a catalog offers, not what it sold.
_OFFERED = re.compile(r"\b(?:do|does|did)?\s*we\s+(?:sell|offer)\b")


def sales_words(question: str) -> set[str]:
    """The words of a question that speak of sales made (singular, lower case).

    >>> sorted(sales_words("Which genres sell best in Germany?")), sorted(sales_words("How many songs do we sell?"))
    (['sell'], [])
    >>> sorted(sales_words("List customers in alphabetical order")), sorted(sales_words("How much is Jane paid?"))
    ([], [])
    """
    lower = _OFFERED.sub(" ", question.lower())
    return {singular(w) for w in SALES_WORDS.findall(lower)}


def needs_unreadable_records(question: str, facts: SchemaFacts, visible: Set[str]) -> bool:
    """Whether the question speaks of sales that only tables outside `visible` (the caller's) record.

    False when the datasource has no transaction table (nothing to refuse: the planner decides), when the caller
    may read one, when the question asks about prices and the caller may read an amount, or when every sales word
    of the question is a word of a table, column or profiled value the caller may read.
    """
    words = sales_words(question)
    if not words:
        return False
    transactions = {t for t, kinds in facts.table_kinds.items() if "transaction" in kinds}
    if not transactions or transactions & visible:
        return False
    if "price" in read_question(question).asks and any(
            "money" in kinds for t in visible for kinds in facts.column_kinds.get(t, {}).values()):
        return False
    readable = set().union(*(facts.table_words.get(t, frozenset()) for t in visible))
    readable |= {w for (t, _), spelled in facts.column_words.items() if t in visible for w in spelled}
    readable |= {w for w in words if any(t in visible for t, _ in facts.value_words.get(w, ()))}
    return bool(words - readable)
