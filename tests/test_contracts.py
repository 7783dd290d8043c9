"""One owner per contract: the store address is parsed in ``tracking/address.py`` only, and run tag names are
spelled in ``tracking/tags.py`` only (docs/architecture.md). Every other module imports them.

The check reads the code (``src/`` and ``leaderboard/``) with ``ast``, docstrings left out, and reports:

- a string that *is* a tag name with a ``.`` or ``_`` (``"config_hash"``, ``"countboard.role"``), anywhere;
- a plain-word tag name (``"model"``, ``"task"``, …) used as a tag: a key of a dict given as ``tags`` (or to
  ``set_tags`` / ``find_runs`` / ``create_run`` / ``log_complete_run``), or read with ``.get`` / ``[...]`` / ``in``
  from something named ``*tags*``; a tag name in an MLflow filter (``tags.x = …``) or an SQL ``key = 'x'``;
- an environment variable of the store address, a string starting ``sqlite:``, or ``urlparse`` / ``"://" in``
  applied to something named like a store or a tracker.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from countboard.tracking import address
from countboard.tracking import tags as tg

REPO = Path(__file__).resolve().parents[1]
SCANNED = [REPO / "src", REPO / "leaderboard"]
OWNERS = {REPO / "src" / "countboard" / "tracking" / "address.py", REPO / "src" / "countboard" / "tracking" / "tags.py"}

#: Constants of ``tags`` that are tag *values* (roles, kinds, sources), not names.
_VALUE_PREFIXES = ("ROLE_", "KIND_", "SOURCE_", "EXPERIMENT_KIND_ML")
TAG_NAMES = frozenset(v for k, v in vars(tg).items() if k.isupper() and isinstance(v, str)
                      and not k.startswith(_VALUE_PREFIXES))
DISTINCT = frozenset(n for n in TAG_NAMES if "." in n or "_" in n or n != n.lower())
ENV_NAMES = frozenset({address.STORE_ENV, address.TRACKING_URI_ENV, address.INDEX_DB_ENV})
_TAG_CALLS = {"set_tags", "find_runs", "create_run", "log_complete_run"}
_FILTER = re.compile(r"tags\.`?([\w.]+)`?\s*(?:=|!=|LIKE|IN)")
_SQL_KEY = re.compile(r"key\s*=\s*'([\w.]+)'")
_STOREISH = re.compile(r"store|track", re.I)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _tag_dicts(tree: ast.AST) -> list[ast.Dict]:
    """Dict literals that are run tags: ``tags=…``, ``x_tags = …``, or an argument of a tag-writing call."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg and "tag" in node.arg and isinstance(node.value, ast.Dict):
            out.append(node.value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any("tag" in ast.unparse(t).lower() for t in targets):
                out.append(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _TAG_CALLS:
            out += [a for a in node.args if isinstance(a, ast.Dict)]
    return out


def strays(path: Path) -> list[str]:
    """Where ``path`` spells a tag name or a store-address rule that belongs to its one module."""
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree)
    found = []

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{path}:{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(tree):  # an attribute name is not a tag: hasattr(model, "explainer_method")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr"):
            skip.update(id(a) for a in node.args[1:2])
    for node in ast.walk(tree):
        text = _str(node)
        if text is not None and id(node) not in skip:
            if text in DISTINCT:
                report(node, f"tag name {text!r} (use countboard.tracking.tags)")
            if text in ENV_NAMES:
                report(node, f"environment variable {text!r} (use countboard.tracking.address)")
            if text.startswith("sqlite:"):
                report(node, f"a sqlite URI built or parsed by hand: {text[:40]!r} (use countboard.tracking.address)")
            for name in _FILTER.findall(text) + _SQL_KEY.findall(text):
                if name in TAG_NAMES:
                    report(node, f"tag {name!r} in a query (use the constant of countboard.tracking.tags)")
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name == "urlparse" and node.args and _STOREISH.search(ast.unparse(node.args[0])):
                report(node, f"urlparse of a store URI: {ast.unparse(node)} (use countboard.tracking.address)")
            if (name == "get" and isinstance(node.func, ast.Attribute) and node.args and _str(node.args[0]) in TAG_NAMES
                    and "tag" in ast.unparse(node.func.value).lower()):
                report(node, f"tag {_str(node.args[0])!r} read by name (use countboard.tracking.tags)")
        if isinstance(node, ast.Subscript) and _str(node.slice) in TAG_NAMES and "tag" in ast.unparse(node.value).lower():
            report(node, f"tag {_str(node.slice)!r} read by name (use countboard.tracking.tags)")
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            left, right = _str(node.left), ast.unparse(node.comparators[0])
            if left == "://" and _STOREISH.search(right):
                report(node, f"a URI rule by hand: {ast.unparse(node)} (use countboard.tracking.address)")
            if left in TAG_NAMES and "tag" in right.lower():
                report(node, f"tag {left!r} looked up by name (use countboard.tracking.tags)")
    for d in _tag_dicts(tree):
        for key in d.keys:
            if _str(key) in TAG_NAMES:
                report(key, f"tag {_str(key)!r} written by name (use countboard.tracking.tags)")
    return sorted(set(found))


def scanned_files() -> list[Path]:
    return sorted(p for root in SCANNED for p in root.rglob("*.py") if p not in OWNERS)


def test_tag_names_and_store_address_rules_live_in_their_one_module():
    found = [line for path in scanned_files() for line in strays(path)]
    assert found == [], "\n".join(found)


def test_the_check_catches_planted_strays(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        '"""A docstring may say config_hash and COUNTBOARD_STORE."""\n'
        "import os\n"
        "from urllib.parse import urlparse\n"
        "def f(run, tracker, store_uri, store):\n"
        "    tags = {'model': 'm', 'countboard.role': 'cell'}\n"
        "    tracker.set_tags(run.run_id, {'error': 'x'})\n"
        "    a = run.tags.get('task')\n"
        "    b = run.data.tags['dataset']\n"
        "    c = 'split' in run.tags\n"
        "    d = os.environ.get('COUNTBOARD_STORE')\n"
        "    e = urlparse(store_uri).scheme\n"
        "    g = f'sqlite:///{store}/mlflow.db'\n"
        "    h = '://' in store\n"
        "    q = \"tags.family = 'acs'\"\n"
        "    s = \"SELECT value FROM tags WHERE key = 'generator'\"\n"
        "    cols = {'model': 1, 'dataset': 2}  # a DataFrame's columns, not tags\n"
        "    return tags, a, b, c, d, e, g, h, q, s, cols\n")
    found = strays(planted)
    for line, what in [(5, "'model'"), (5, "'countboard.role'"), (6, "'error'"), (7, "'task'"), (8, "'dataset'"),
                       (9, "'split'"), (10, "'COUNTBOARD_STORE'"), (11, "urlparse"), (12, "sqlite"), (13, "://"),
                       (14, "'family'"), (15, "'generator'")]:
        assert any(f":{line}: " in f and what in f for f in found), (line, what, found)
    assert not any(":1: " in f or ":16: " in f for f in found), found


def test_the_owners_define_what_the_check_looks_for():
    assert {"countboard.role", "config_hash", "mlflow.parentRunId", "model", "partial"} <= TAG_NAMES
    assert "cell" not in TAG_NAMES  # a role is a value of the role tag
    assert {"COUNTBOARD_STORE", "MLFLOW_TRACKING_URI", "COUNTBOARD_INDEX_DB"} == ENV_NAMES
