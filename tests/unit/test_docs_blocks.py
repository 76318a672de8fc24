"""The docs are executed: every fenced block of README.md and docs/**/*.md is checked.

The convention (docs/README.md states it for writers):

- every fence names its language; ``yaml`` is a pipeline file (or a part of one), ``bash`` and
  ``console`` are shell commands (``console``: the commands are the ``$`` lines), anything
  else (``text``, ``json``) is an output or a shape and is not run;
- a ``yaml`` block is validated with ``cdc validate``: a part of a file is merged into a small
  complete pipeline first, every ``${VAR}`` it names is set to a harmless value, and it must be
  valid (exit 0), or invalid (exit 2) when the line before the fence is
  ``<!-- invalid-example: why -->``;
- a shell block says on the line before its fence who runs it: ``<!-- run-by: PATH[::TEST],
  ... -->`` (each named test must exist), or ``<!-- illustrative: why -->`` when no test can run
  it here (no Docker engine, a tool that is not installed, a synopsis with placeholders);
- every shell block, run or illustrative, must still be right: each ``cdc`` command names a
  subcommand and options the CLI has, each ``make`` target exists, and a pipeline file written
  by a heredoc (``cat > x.yaml <<'EOF'``) is validated like a ``yaml`` block;
- a ``python`` or ``toml`` block is whole and parses, or is an excerpt of a file of the
  checkout named on the line before its fence, ``<!-- excerpt-of: PATH -->``: its lines are
  the file's, in order (under one indent), where a line ``...`` stands for lines left out.

A block a doc names plugins in (``my_mask``, ``myco_enrich``) is validated with those plugins
installed the way a user installs one: a distribution on the path declaring the entry points.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdc.cli.main import main as cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SHELL = frozenset({"bash", "sh", "shell", "console"})
PIPELINE = frozenset({"yaml", "yml"})
NOT_RUN = frozenset({"text", "json"})
EXCERPT = frozenset({"python", "toml"})
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
MARKER = re.compile(
    r"^\s*<!--\s*(?P<kind>run-by|illustrative|invalid-example|excerpt-of)\s*:(?P<text>.*)-->"
)
VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}")
HEREDOC = re.compile(r"cat\s*>\s*(?P<file>\S+)\s*<<\s*'?(?P<end>\w+)'?")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and the marker line before it."""

    path: Path
    line: int
    info: str
    text: str
    marker: tuple[str, str] | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info.split() else ""


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, with the marker comment right above each (if any)."""
    lines = path.read_text().splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        body = "\n".join(line[indent:] for line in lines[index + 1 : end])
        before = MARKER.match(lines[index - 1]) if index else None
        marker = (before["kind"], before["text"].strip()) if before else None
        found.append(Block(path, index + 1, opening["info"].strip(), body + "\n", marker))
        index = end + 1
    return found


ALL = [b for path in DOCS for b in blocks(path)]
PIPELINE_BLOCKS = [b for b in ALL if b.language in PIPELINE]
SHELL_BLOCKS = [b for b in ALL if b.language in SHELL]
EXCERPT_BLOCKS = [b for b in ALL if b.language in EXCERPT]


def ids(found: list[Block]) -> list[str]:
    return [b.where for b in found]


# --- pipeline files -----------------------------------------------------------------------

#: What a part of a file is completed with: the smallest valid pipeline of each source type.
BASE_SOURCE = {
    "postgres": {"dsn": "postgresql://cdc@127.0.0.1:5432/shop", "tables": ["public.orders"]},
    "mongodb": {"dsn": "mongodb://127.0.0.1:27017/?replicaSet=rs0", "tables": ["shop.orders"]},
}

#: Plugins the docs name as examples, as modules of a distribution a test puts on the path.
PLUGIN_MODULE = """
from typing import Any, Literal
from cdc.transforms.base import BaseTransform, TransformConfig

def my_mask(options):
    return lambda text: text

class EnrichConfig(TransformConfig):
    type: Literal["myco_enrich"] = "myco_enrich"
    options: dict[str, Any] = {}

class Unchanged(BaseTransform):
    def apply(self, event):
        return event

class Enrich:
    config_model = EnrichConfig

    @staticmethod
    def create(config, context):
        return Unchanged()
"""
ENTRY_POINTS = (
    "[cdc.masks]\nmy_mask = cdc_docs_examples:my_mask\n"
    "[cdc.transforms]\nmyco_enrich = cdc_docs_examples:Enrich\n"
    # The example third-party sink (examples/cdc-sink-sqlite, its source on the path).
    "[cdc.sinks]\nsqlite = cdc_sink_sqlite.plugin:SqliteSinkPlugin\n"
)
EXAMPLE_SINK = ROOT / "examples" / "cdc-sink-sqlite" / "src"


@pytest.fixture(scope="module")
def doc_plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the docs' example plugins, installed as a distribution would be."""
    where = tmp_path_factory.mktemp("plugins")
    (where / "cdc_docs_examples.py").write_text(PLUGIN_MODULE)
    info = where / "cdc_docs_examples-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cdc-docs-examples\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return where


def harmless(name: str) -> str:
    """A value for ``${name}`` that is well formed and reaches nothing."""
    upper = name.upper()
    if any(word in upper for word in ("PASSWORD", "SECRET", "MASK_KEY", "TOKEN")):
        return "docs-example-secret-0123456789abcdef"
    if "REDIS" in upper:
        return "redis://127.0.0.1:6379/0"
    if "MONGO" in upper:
        return "mongodb://127.0.0.1:27017/?replicaSet=rs0"
    if "KAFKA" in upper or "BOOTSTRAP" in upper:
        return "127.0.0.1:9092"
    if "DSN" in upper or "PG" in upper:
        return "postgresql://cdc@127.0.0.1:5432/shop"
    return "docs-example-value-0123456789abcdef"


def completed(text: str) -> str:
    """``text`` as a whole pipeline file: a part is merged into the smallest valid pipeline."""
    document = yaml.safe_load(text)
    assert isinstance(document, dict), "a pipeline block is a YAML mapping"
    if "version" in document:
        return text
    source = document.get("source") or {}
    kind = source.get("type", "postgres")
    base = dict(BASE_SOURCE[kind])
    # The tables a sink of the part names are the source's: a sink cannot name another one.
    # A view's own table (views.<name>) is not; the tables a view joins are the source's too.
    named = [t for sink in document.get("sinks") or [] for t in sink.get("tables") or []]
    named = [t for t in named if not (isinstance(t, str) and t.startswith("views."))]
    for view in document.get("views") or []:
        named += [view["root"], *(embed["from"] for embed in view.get("embed") or [])]
    base["tables"] = sorted(set(base["tables"]) | set(named))
    whole: dict[str, Any] = {
        "version": 1,
        "name": "docs",
        "source": {"type": kind, **base, **source},
        "sinks": [{"name": "out", "type": "jsonl", "path": "out"}],
    }
    whole.update({k: v for k, v in document.items() if k != "source"})
    return yaml.safe_dump(whole, sort_keys=False)


def validate(text: str, tmp_path: Path, plugins: Path) -> subprocess.CompletedProcess[str]:
    """``cdc validate`` of ``text`` (completed), with the variables it names set."""
    path = tmp_path / "pipeline.yaml"
    path.write_text(completed(text))
    env = {name: harmless(name) for name in VARIABLE.findall(text)}
    return subprocess.run(
        [sys.executable, "-m", "cdc.cli.main", "validate", str(path)],
        cwd=tmp_path,
        text=True,
        capture_output=True,
        timeout=60,
        env={**_environ(plugins), **env},
    )


def _environ(plugins: Path) -> dict[str, str]:
    paths = (str(plugins), str(EXAMPLE_SINK), str(ROOT), os.environ.get("PYTHONPATH"))
    path = os.pathsep.join(p for p in paths if p)
    return {**os.environ, "PYTHONPATH": path}


def check_pipeline(text: str, marker: tuple[str, str] | None, tmp: Path, plugins: Path) -> None:
    result = validate(text, tmp, plugins)
    expected = 2 if marker is not None and marker[0] == "invalid-example" else 0
    assert result.returncode == expected, (
        f"exit {result.returncode}\n{result.stdout}{result.stderr}"
    )


@pytest.mark.parametrize("block", PIPELINE_BLOCKS, ids=ids(PIPELINE_BLOCKS))
def test_a_pipeline_block_validates(block: Block, tmp_path: Path, doc_plugins: Path) -> None:
    check_pipeline(block.text, block.marker, tmp_path, doc_plugins)


# --- shell blocks -------------------------------------------------------------------------


def commands(block: Block) -> list[str]:
    """The command lines of a shell block (heredoc bodies left out, continuations joined)."""
    lines = block.text.splitlines()
    if block.language == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    joined: list[str] = []
    ending: str | None = None
    for line in lines:
        if ending is not None:
            ending = None if line.strip() == ending else ending
            continue
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line
        elif line.strip() and not line.lstrip().startswith("#"):
            joined.append(line.strip())
        heredoc = HEREDOC.search(line)
        ending = heredoc["end"] if heredoc else None
    return joined


def heredocs(block: Block) -> list[tuple[str, str]]:
    """``(file, body)`` of each ``cat > file <<'EOF'`` of a shell block."""
    found, lines = [], block.text.splitlines()
    for index, line in enumerate(lines):
        heredoc = HEREDOC.search(line)
        if heredoc is None:
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == heredoc["end"])
        found.append((heredoc["file"], "\n".join(lines[index + 1 : end]) + "\n"))
    return found


def words(command: str) -> list[str]:
    """A command's words, a synopsis's brackets (``[--wait]``) taken off."""
    return [w.strip("[]") for w in shlex.split(command, comments=True)]


def cli_problems(command: str) -> list[str]:
    """What is wrong with a ``cdc`` command line: an unknown subcommand or option."""
    argv = words(command)
    group = {o for p in cli.params for o in p.opts}
    rest = [w for w in argv[1:] if w.split("=")[0] not in group]
    if rest == ["--help"]:
        return []
    if not rest or rest[0] not in cli.commands:
        return [f"{command!r}: no such cdc command {rest[:1]}"]
    options = {o for p in cli.commands[rest[0]].params for o in (*p.opts, *p.secondary_opts)}
    options |= {"--help"}
    return [
        f"{command!r}: cdc {rest[0]} has no option {word.split('=')[0]}"
        for word in rest[1:]
        if word.startswith("--") and word.split("=")[0] not in options
    ]


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9_.-]+):", text, flags=re.MULTILINE))


def make_variables() -> set[str]:
    """The variables the Makefile sets (``NAME ?=``, ``:=`` or ``=``), which a command may
    override."""
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*[?:]?=", text, flags=re.MULTILINE))


def make_problems(command: str, argv: list[str]) -> list[str]:
    """Each argument of a ``make`` command is a target of the Makefile, or ``NAME=value`` for a
    variable it sets."""
    targets, variables = make_targets(), make_variables()
    problems = []
    for arg in argv[1:]:
        name, is_variable, _ = arg.partition("=")
        if is_variable and name not in variables:
            problems.append(f"{command!r}: the Makefile sets no variable {name}")
        elif not is_variable and arg not in targets:
            problems.append(f"{command!r}: no make target {arg}")
    return problems


def command_problems(command: str) -> list[str]:
    argv = words(command)
    if not argv:
        return []
    if argv[0] == "cdc":
        return cli_problems(command)
    if argv[0] == "make":
        return make_problems(command, argv)
    if argv[0] in ("python", "python3") and len(argv) > 1:
        return script_problems(command, argv[1:])
    return []


def script_problems(command: str, argv: list[str]) -> list[str]:
    """A ``python`` command as the docs give it, run from the checkout with ``--help``: a script
    that cannot import what it needs (``No module named 'bench'``) fails here."""
    target = argv[:2] if argv[0] == "-m" else argv[:1]
    if not target[-1].endswith(".py") and argv[0] != "-m":
        return []
    returncode, stderr = help_of(tuple(target))
    if returncode == 0:
        return []
    return [
        f"{command!r}: `python {' '.join(target)} --help` exits {returncode}: "
        f"{stderr.strip().splitlines()[-1:]}"
    ]


@functools.cache
def help_of(target: tuple[str, ...]) -> tuple[int, str]:
    """``python TARGET --help`` run once a session: the docs give one script many times (the
    README names ``bench/pg_stream.py`` with a dozen sets of flags), each a process of its own."""
    result = subprocess.run(
        [sys.executable, *target, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    return result.returncode, result.stderr


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=ids(SHELL_BLOCKS))
def test_a_shell_block_is_run_or_marked_illustrative(block: Block) -> None:
    assert block.marker is not None and block.marker[0] in ("run-by", "illustrative"), (
        f"{block.where}: put <!-- run-by: tests/...py::test_name --> (the test that runs it) "
        "or <!-- illustrative: why --> on the line before the fence"
    )
    kind, text = block.marker
    assert text, f"{block.where}: the marker says nothing ({kind}: what?)"
    if kind == "run-by":
        for target in (t.strip() for t in text.split(",")):
            assert runner_exists(target), f"{block.where}: {target} does not exist"


def runner_exists(target: str) -> bool:
    """``PATH`` exists under the checkout, and defines ``TEST`` when ``PATH::TEST`` is given."""
    path, _, test = target.partition("::")
    file = ROOT / path
    if not file.is_file():
        return False
    return not test or re.search(rf"^def {re.escape(test)}\(", file.read_text(), re.M) is not None


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=ids(SHELL_BLOCKS))
def test_a_shell_block_names_commands_that_exist(block: Block) -> None:
    problems = [p for command in commands(block) for p in command_problems(command)]
    assert not problems, f"{block.where}: " + "; ".join(problems)


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=ids(SHELL_BLOCKS))
def test_a_pipeline_file_written_in_a_shell_block_validates(
    block: Block, tmp_path: Path, doc_plugins: Path
) -> None:
    for name, body in heredocs(block):
        if name.endswith((".yaml", ".yml")):
            check_pipeline(body, None, tmp_path, doc_plugins)


INLINE = re.compile(r"`((?:cdc|make|python3?) [^`\n]+)`")


def inline_commands(path: Path) -> list[str]:
    """Commands in running text: code spans starting with ``cdc``, ``make`` or ``python``."""
    prose, fence = [], ""
    for line in path.read_text().splitlines():
        opening = FENCE.match(line)
        if opening is not None and (not fence or line.strip().startswith(fence)):
            fence = "" if fence else opening["fence"]
        elif not fence:
            prose.append(line)
    return INLINE.findall("\n".join(prose))


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_commands_in_the_text_exist(path: Path) -> None:
    problems = [p for command in inline_commands(path) for p in command_problems(command)]
    assert not problems, "; ".join(problems)


def test_every_fence_names_its_language() -> None:
    known = SHELL | PIPELINE | NOT_RUN | EXCERPT
    unnamed = [f"{b.where} ({b.info or 'no language'})" for b in ALL if b.language not in known]
    assert not unnamed, "name the fence's language (bash, console, yaml, text, json): " + ", ".join(
        unnamed
    )


def test_the_checks_see_the_docs() -> None:
    """The parser finds blocks: a broken fence pattern would make every check above vacuous."""
    assert len(PIPELINE_BLOCKS) >= 10 and len(SHELL_BLOCKS) >= 5
    assert any("cdc validate" in c for b in SHELL_BLOCKS for c in commands(b))
    assert cli_problems("cdc nonsense x.yaml") and cli_problems("cdc run x.yaml --nope")
    assert not cli_problems("cdc snapshot f.yaml --table t [--wait] [--timeout-s S]")
    assert not command_problems("make test PYTEST_WORKERS=0")
    assert command_problems("make tests") and command_problems("make test PYTEST_WORKRS=0")
    assert "cdc --help" in inline_commands(ROOT / "README.md")


# --- excerpts -----------------------------------------------------------------------------


def excerpt_pieces(block: Block) -> list[list[str]]:
    """The runs of lines of an excerpt between its ``...`` lines, blank edges left out."""
    pieces: list[list[str]] = [[]]
    for line in block.text.splitlines():
        if line.strip() == "...":
            pieces.append([])
        else:
            pieces[-1].append(line.rstrip())
    trimmed = ["\n".join(p).strip("\n").splitlines() for p in pieces]
    return [p for p in trimmed if p]


def find_piece(piece: list[str], lines: list[str], start: int) -> int | None:
    """The index after ``piece`` in ``lines``, found at or after ``start`` with every line of it
    under one indent; ``None`` if it is not there."""
    first = piece[0]
    for at in range(start, len(lines) - len(piece) + 1):
        line = lines[at]
        indent = line[: len(line) - len(first)]
        if not line.endswith(first) or indent.strip():
            continue
        if all(lines[at + i] == (indent + p if p else "") for i, p in enumerate(piece)):
            return at + len(piece)
    return None


@pytest.mark.parametrize("block", EXCERPT_BLOCKS, ids=ids(EXCERPT_BLOCKS))
def test_a_code_block_parses_or_is_an_excerpt_of_the_file_it_names(block: Block) -> None:
    if block.marker is None or block.marker[0] != "excerpt-of":
        if block.language == "toml":
            tomllib.loads(block.text)
        else:
            compile(block.text, block.where, "exec")
        return
    source = ROOT / block.marker[1]
    assert source.is_file(), f"{block.where}: no file {block.marker[1]}"
    lines = [line.rstrip() for line in source.read_text().splitlines()]
    at = 0
    for piece in excerpt_pieces(block):
        found = find_piece(piece, lines, at)
        assert found is not None, (
            f"{block.where}: not in {block.marker[1]} (from its line {at + 1}): {piece[0]!r}..."
        )
        at = found
