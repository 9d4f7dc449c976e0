"""Reading untrusted text safely: UTF-8 files, YAML and JSON with bounded nesting and alias expansion.

Configuration files, suites, plan files and model answers are all parsed here, so every reader
refuses the same hostile shapes cheaply and in the same words: text that is not UTF-8, nesting
deeper than `MAX_DEPTH`, and YAML aliases that expand past `MAX_ALIAS_NODES` (a "billion laughs"
file) or refer to themselves.

>>> load_yaml("a: [1, 2]")
{'a': [1, 2]}
>>> loads_json('{"a": [[[]]]}', max_depth=2)
Traceback (most recent call last):
  ...
json.decoder.JSONDecodeError: nested deeper than 2 levels: line 1 column 8 (char 7)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode

#: How deep lists and mappings may nest in a configuration, suite, plan or model answer.
MAX_DEPTH = 100
#: How many nodes YAML aliases may add to a document beyond the ones written out.
MAX_ALIAS_NODES = 100_000

_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class NotUTF8(ValueError):
    """A file that is not UTF-8 text; `line` and `column` (1-based) point at the first bad byte."""

    def __init__(self, path: Path, line: int, column: int, byte: int) -> None:
        super().__init__(f"not UTF-8 text (byte 0x{byte:02x} at line {line}, column {column})")
        self.path, self.line, self.column, self.byte = path, line, column, byte


#: What to do about a file that is not UTF-8.
UTF8_FIX = "save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8 FILE`)"


def read_text(path: Path) -> str:
    """A file's text, decoded as UTF-8 (a leading byte-order mark dropped); NotUTF8 names the first bad byte."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        raise NotUTF8(path, line, column, data[exc.start]) from None


class YAMLTooComplex(yaml.MarkedYAMLError):
    """A YAML document nested too deep, or whose aliases expand too far (or into themselves)."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, counting nesting as it composes and noting whether aliases are used."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self.uses_aliases = False

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            self.uses_aliases = True
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YAMLTooComplex(problem=f"nested deeper than {MAX_DEPTH} levels", problem_mark=mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError) as exc:  # a date that does not exist, an int too long…
            raise ConstructorError(
                problem=f"the value cannot be read ({exc})", problem_mark=node.start_mark) from None


def _check_aliases(root: Node) -> None:
    """Refuse a node graph whose aliases nest past MAX_DEPTH, expand past MAX_ALIAS_NODES or contain themselves."""
    seen: dict[int, tuple[int, int]] = {}  # node → (nodes it expands to, levels below and including it)
    open_nodes: set[int] = set()

    def visit(node: Node, depth: int) -> tuple[int, int]:
        key = id(node)
        if key in open_nodes:
            raise YAMLTooComplex(problem="an alias refers to the node that contains it", problem_mark=node.start_mark)
        if key not in seen:
            if depth > MAX_DEPTH:
                raise YAMLTooComplex(problem=f"aliases nest deeper than {MAX_DEPTH} levels",
                                     problem_mark=node.start_mark)
            open_nodes.add(key)
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = node.value
            elif isinstance(node, MappingNode):
                children = [part for pair in node.value for part in pair]
            size, height = 1, 0
            for child in children:
                child_size, child_height = visit(child, depth + 1)
                size, height = size + child_size, max(height, child_height)
            open_nodes.discard(key)
            seen[key] = (size, height + 1)
            if size - len(seen) > MAX_ALIAS_NODES:
                raise YAMLTooComplex(problem=f"aliases expand to more than {MAX_ALIAS_NODES:,} extra nodes",
                                     problem_mark=node.start_mark)
        size, height = seen[key]
        if depth + height - 1 > MAX_DEPTH:
            raise YAMLTooComplex(problem=f"aliases nest deeper than {MAX_DEPTH} levels", problem_mark=node.start_mark)
        return size, height

    visit(root, 1)


def load_yaml(text: str) -> Any:
    """Parse one YAML document with the safe loader, bounded in depth and alias expansion.

    Every failure is a `yaml.YAMLError` (values the safe constructor cannot build, such as a date
    that does not exist or an integer too long to convert, included).
    """
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if loader.uses_aliases:
            _check_aliases(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def yaml_problem(exc: yaml.YAMLError) -> tuple[str, str]:
    """What is wrong with a YAML text, and what to do about it, as one message and one fix.

    >>> yaml_problem(YAMLTooComplex(problem="an alias refers to the node that contains it"))
    ('an alias refers to the node that contains it', 'write the repeated part out instead of aliasing it')
    """
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    reason = getattr(exc, "problem", None) or "invalid YAML"
    if isinstance(exc, YAMLTooComplex):
        fix = ("write the repeated part out instead of aliasing it" if "alias" in reason
               else f"nest lists and mappings at most {MAX_DEPTH} levels deep")
        return f"{reason}{where}", fix
    if isinstance(exc, ConstructorError):
        return f"not valid YAML{where}: {reason}", "quote the value there to keep it as text, or correct it"
    return f"not valid YAML{where}: {reason}", "fix the YAML syntax there"


def json_depth_error(text: str, max_depth: int = MAX_DEPTH) -> int | None:
    """The offset where `text` (JSON) first nests deeper than `max_depth`, or None.

    >>> json_depth_error('[[["]]]]]"]]]', max_depth=3) is None
    True
    """
    depth = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > max_depth:
                return match.start()
        elif token in "]}":
            depth -= 1
    return None


def loads_json(text: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads`, refusing nesting deeper than `max_depth`; every failure is a `json.JSONDecodeError`."""
    where = json_depth_error(text, max_depth)
    if where is not None:
        raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", text, where)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:  # e.g. an integer longer than Python converts
        raise json.JSONDecodeError(f"a value cannot be read ({exc})", text, 0) from None
