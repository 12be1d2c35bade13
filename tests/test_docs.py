"""The docs stand alone and docs/CLI.md matches the parsers that ship.

The parsers are built from the command modules themselves (``navi_nb.cli.COMMANDS``;
``navi-nb bench`` nests one parser per benchmark), so a flag added, renamed or
given a new default without a matching line in docs/CLI.md fails here, with a
message naming the section, the flag and what is missing.
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from navi_nb.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
CLI_MD = ROOT / "docs" / "CLI.md"


def _section(doc: str, heading: str) -> str | None:
    """The text under ``heading`` (a full heading line such as ``## train``) up to the next heading of the same or a
    higher level; None when the heading is missing."""
    level = heading.split(" ", 1)[0]
    lines = doc.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        return None
    out = []
    for line in lines[start + 1 :]:
        m = re.match(r"^(#+) ", line)
        if m and len(m.group(1)) <= len(level):
            break
        out.append(line)
    return "\n".join(out)


def _own_text(section: str) -> str:
    """A section without its deeper subsections (``## bench`` without its ``### bench NAME`` parts)."""
    return re.split(r"^###+ ", section, maxsplit=1, flags=re.MULTILINE)[0]


def _parsers():
    """(heading, parser) for every subcommand and every `bench` benchmark, built from the shipped modules."""
    out = []
    for name, (module, _help) in COMMANDS.items():
        parser = argparse.ArgumentParser(prog=f"navi-nb {name}")
        importlib.import_module(module).add_arguments(parser)
        out.append((f"## {name}", parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub_parser in action.choices.items():
                    if len(sub_parser._actions) > 1:  # one with no flags is documented by its parent's list
                        out.append((f"### {name} {sub_name}", sub_parser))
    return out


def _default_spellings(value) -> set[str]:
    """Ways a default may be written in the docs: as Python prints it, and for numbers also as `:g` and with
    thousands separators or as a power of ten (``20.0`` -> ``20``, ``1000000`` -> ``1,000,000`` or ``1e6``)."""
    out = {str(value)}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        out |= {f"{value:g}", f"{value:,}"}
        short = f"{value:.0e}".replace("e+0", "e").replace("e+", "e")  # 1000000 -> 1e6
        if float(short) == value:
            out.add(short)
    if isinstance(value, (list, tuple)):
        out.add(",".join(str(v) for v in value))
    return out


def _flag_entry(section: str, flag: str) -> str | None:
    """The lines that document ``flag``: from the first line naming it as a word (in the help listing, where
    option lines start with '-') to the next option line or blank line."""
    lines = section.splitlines()
    pattern = re.compile(rf"(?<![\w-]){re.escape(flag)}(?![\w-])")
    starts = [i for i, line in enumerate(lines) if pattern.search(line)]
    listing = [i for i in starts if lines[i].lstrip().startswith("-")]
    if not starts:
        return None
    i = (listing or starts)[0]
    entry = [lines[i]]
    for line in lines[i + 1 :]:
        if not line.strip() or line.lstrip().startswith(("-", "```")):
            break
        entry.append(line)
    return "\n".join(entry)


def test_cli_md_lists_every_command():
    doc = CLI_MD.read_text()
    intro = doc.split("\n## ", 1)[0]
    missing = [name for name in COMMANDS if f"[`{name}`](#{name})" not in intro]
    assert not missing, f"docs/CLI.md: the command table at the top lacks a row for: {', '.join(missing)}"
    for name, (_module, help_) in COMMANDS.items():
        section = _section(doc, f"## {name}")
        assert section is not None, f"docs/CLI.md has no section '## {name}' for the command `navi-nb {name}`"
        assert help_ in section, (
            f"docs/CLI.md section '## {name}': the command's one-line help {help_!r} "
            f"(navi_nb/cli.py COMMANDS) is not there"
        )


@pytest.mark.parametrize("heading,parser", _parsers(), ids=lambda v: v if isinstance(v, str) else "")
def test_cli_md_documents_every_flag_and_default(heading, parser):
    doc = CLI_MD.read_text()
    section = _section(doc, heading)
    assert section is not None, f"docs/CLI.md has no section '{heading}' (for `{parser.prog}`)"
    own = _own_text(section)
    problems = []
    known = {"--help", "-h"}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name in action.choices:
                if not re.search(rf"(?<![\w-]){re.escape(sub_name)}(?![\w-])", own):
                    problems.append(f"sub-command `{sub_name}` is not named")
            continue
        if isinstance(action, argparse._HelpAction):
            continue
        known.update(action.option_strings)
        if not action.option_strings:  # a positional: its metavar names it
            name = action.metavar or action.dest
            if name not in own:
                problems.append(f"positional argument {name} is not named")
            continue
        for flag in action.option_strings:
            if _flag_entry(own, flag) is None:
                problems.append(f"flag {flag} is not named")
        default = action.default
        shown = re.search(r"\(default ([^)]*)\)", action.help or "")
        if default is None and shown:  # settings flags keep None as their parse default and name the real one in help
            default = shown.group(1)
        if default in (None, False, argparse.SUPPRESS) or isinstance(action, argparse._StoreConstAction):
            continue  # switches (store_true / store_false / store_const) have no default worth writing
        flag = action.option_strings[-1]
        entry = _flag_entry(own, flag) or ""
        spellings = _default_spellings(default)
        if not any(s in entry for s in spellings):
            problems.append(
                f"flag {flag}: its default {default!r} is not in its entry "
                f"(write one of {sorted(spellings)}); the entry reads: {entry.strip()!r}"
            )
    # every flag the section names must exist (catches flags that were renamed or removed)
    for flag in sorted(set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", own))):
        if flag not in known:
            problems.append(f"names {flag}, which `{parser.prog}` does not have")
    assert not problems, f"docs/CLI.md section '{heading}' (`{parser.prog}`):\n  " + "\n  ".join(problems)


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file: lower case, punctuation dropped, spaces to '-'."""
    out = set()
    for line in path.read_text().splitlines():
        m = re.match(r"^#+ (.*)", line)
        if m:
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


@pytest.mark.parametrize("path", sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"], ids=lambda p: p.name)
def test_docs_stand_alone(path):
    """No citation of notes outside the repository; every relative link and its #anchor resolves."""
    full = path.read_text()
    cited = [name for name in ("../shared", "DESIGN.md", "GMDAG.md", "STYLE.md") if name in full]
    assert not cited, f"{path.relative_to(ROOT)} cites {cited}, which are not in the repository"
    text = re.sub(r"```.*?```", "", full, flags=re.DOTALL)  # links are read outside code blocks
    broken = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
        if "://" in target:
            continue
        linked = (path.parent / target) if target else path
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}#{anchor} (no such heading)")
    assert not broken, f"{path.relative_to(ROOT)} has broken links: {broken}"


# --- the import rule docs/ARCHITECTURE.md states ------------------------------------------------------------------

STAGES = ("world", "sense", "env", "learn", "parallel", "train")
CONSOLE = ("commands", "bench", "fuzz", "cli", "__main__")
FUZZ_IMPORTERS = ("navi_nb.commands.fuzz",)  # the one module outside navi_nb/fuzz/ that may import it


def _rank(module: str) -> int:
    """Where a navi_nb module sits: -1 top-level shared modules, 0.. the stages in order, len(STAGES) the console."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    if parts[1] in STAGES:
        return STAGES.index(parts[1])
    if parts[1] in CONSOLE:
        return len(STAGES)
    return -1  # navi_nb.errors, navi_nb.jit_cache, ...: shared top-level modules


def _imports(path: Path):
    """(line, imported navi_nb module, names taken from it) for every import statement in a file, lazy ones too."""
    import ast

    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("navi_nb."):
                    yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("navi_nb"):
            names = [a.name for a in node.names]
            if node.module == "navi_nb":  # `from navi_nb import world` imports a subpackage, or a lazy re-export
                for name in names:
                    yield node.lineno, f"navi_nb.{name}", []
            else:
                yield node.lineno, node.module, names


def test_imports_go_one_way():
    """Each module imports only its own stage, earlier stages and the shared top-level modules
    (world <- sense <- env <- learn <- parallel <- train <- console), and no other module's _private names;
    of the package, only navi_nb/commands/fuzz.py imports the fuzz package (navi_nb/fuzz/)."""
    package = ROOT / "navi_nb"
    problems = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(ROOT)
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        if module == "navi_nb":
            continue  # the package's lazy re-exports
        rank = _rank(module)
        for line, target, names in _imports(path):
            target_rank = _rank(target)
            if rank == -1 and target_rank != -1:
                problems.append(f"{rel}:{line}: the shared top-level module imports {target}, a stage")
            elif target_rank > rank:
                problems.append(f"{rel}:{line}: imports {target}, a later stage than its own")
            fuzz_user = module.startswith("navi_nb.fuzz") or module in FUZZ_IMPORTERS
            if (target == "navi_nb.fuzz" or target.startswith("navi_nb.fuzz.")) and not fuzz_user:
                problems.append(f"{rel}:{line}: imports {target}; only {', '.join(FUZZ_IMPORTERS)} may")
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private and target != module:
                problems.append(f"{rel}:{line}: imports private names {private} from {target}")
    assert not problems, "imports against the rule of docs/ARCHITECTURE.md:\n  " + "\n  ".join(problems)


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _package_modules():
    """(path, module name) of every module of the package but its root (whose re-exports are lazy)."""
    for path in sorted((ROOT / "navi_nb").rglob("*.py")):
        module = _module_name(path)
        if module != "navi_nb":
            yield path, module


def _module_aliases(tree, known):
    """name -> navi_nb module for every name an import statement of ``tree`` binds to a module of ``known``."""
    import ast

    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("navi_nb"):
                    # `import navi_nb.a.b` binds navi_nb; `import navi_nb.a.b as m` binds m to navi_nb.a.b
                    aliases[alias.asname or "navi_nb"] = alias.name if alias.asname else "navi_nb"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("navi_nb"):
            for alias in node.names:
                if f"{node.module}.{alias.name}" in known:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _private_uses(tree, module, known):
    """(line, text) of every ``_private`` name of another navi_nb module that ``tree`` imports or reads as
    an attribute of that module (``gru._weights``, ``navi_nb.learn.gru._weights``)."""
    import ast

    aliases = _module_aliases(tree, known | {"navi_nb"})
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("navi_nb"):
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if private and node.module != module:
                yield node.lineno, f"imports {private} from {node.module}"
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            chain, base = [], node.value
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if not isinstance(base, ast.Name) or base.id not in aliases:
                continue
            owner = ".".join([aliases[base.id], *reversed(chain)])
            if owner in known and owner != module:
                yield node.lineno, f"reads {owner}.{node.attr}"


def test_no_module_uses_another_modules_private_names():
    """A ``_private`` name belongs to its module: no other navi_nb module imports it or reads it through the
    module (``other._name``); what another module needs is public (docs/ARCHITECTURE.md)."""
    import ast

    modules = dict((module, path) for path, module in _package_modules())
    problems = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, what in _private_uses(tree, module, set(modules)):
            problems.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not problems, "private names used across modules:\n  " + "\n  ".join(problems)


def test_imports_make_no_circle():
    """No navi_nb module imports, at load time or lazily inside a function, a module that imports it back
    through any chain of imports."""
    modules = dict((module, path) for path, module in _package_modules())

    def resolve(target):
        while target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]  # a name taken from a module: the module
        return target if target in modules else None

    graph = {}
    for module, path in modules.items():
        edges = set()
        for _line, target, names in _imports(path):
            for full in [f"{target}.{n}" for n in names if f"{target}.{n}" in modules] or [target]:
                found = resolve(full)
                if found and found != module and not module.startswith(found + "."):
                    edges.add(found)  # a module's own package (its __init__) is not a circle
        graph[module] = sorted(edges)
    circles, state = [], {}

    def visit(module, stack):
        state[module] = 1  # on the stack
        stack.append(module)
        for nxt in graph[module]:
            if state.get(nxt) == 1:
                circles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert not circles, "import circles:\n  " + "\n  ".join(circles)


# --- the code's shape: file and signature sizes ---------------------------------------------------------------------

MAX_FILE_LINES = 700
MAX_PARAMETERS = 12
C_SIGNATURES = {
    # cblas_sgemm's and cblas_dgemm's own arguments (order, transposes, sizes, scalars, operands, leading dimensions),
    # declared as the C library declares them
    ("navi_nb/learn/blas.py", "loop_gemm"),
}


def test_package_files_are_at_most_700_lines():
    """No module of the package is longer than 700 lines: a longer one is split where its parts divide."""
    long = []
    for path in sorted((ROOT / "navi_nb").rglob("*.py")):
        n = len(path.read_text().splitlines())
        if n > MAX_FILE_LINES:
            long.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not long, f"modules over {MAX_FILE_LINES} lines:\n  " + "\n  ".join(long)


def test_functions_take_at_most_12_parameters():
    """No function or lambda of the package takes more than 12 parameters (``*args`` and ``**kwargs`` count one
    each), but the C signatures of ``C_SIGNATURES``: more travel together as a tuple or a named tuple."""
    import ast

    wide = []
    for path in sorted((ROOT / "navi_nb").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            a = node.args
            n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
            name = getattr(node, "name", "<lambda>")
            if n > MAX_PARAMETERS and (rel, name) not in C_SIGNATURES:
                wide.append(f"{rel}:{node.lineno}: {name} takes {n} parameters")
    assert not wide, f"functions over {MAX_PARAMETERS} parameters:\n  " + "\n  ".join(wide)


def test_code_cites_only_the_repository():
    """Docstrings and comments point readers to docs/ in this repository, never to notes outside it."""
    cited = []
    for path in sorted((ROOT / "navi_nb").rglob("*.py")) + sorted((ROOT / "examples").glob("*.py")):
        text = path.read_text()
        cited += [
            f"{path.relative_to(ROOT)}: {name}"
            for name in ("../shared", "DESIGN.md", "GMDAG.md", "STYLE.md")
            if name in text
        ]
    assert not cited, f"code cites notes outside the repository: {cited}"


def test_class_names_are_unique():
    """No two classes of the package share a name (two ``RenderError`` classes made ``except`` clauses miss)."""
    import ast
    from collections import defaultdict

    where = defaultdict(list)
    for path in sorted((ROOT / "navi_nb").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, f"classes defined more than once: {twice}"


def test_install_hints_name_the_clone_extra():
    """Hints install an extra from the clone as the README does (``pip install -e ".[image]"``); there is no
    ``navi-nb`` package on the index, so ``pip install navi-nb[...]`` cannot work."""
    bad = []
    for folder in ("navi_nb", "examples", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for lineno, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"navi[-_]nb\[", line):
                    bad.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not bad, "install hints naming a package the index does not have:\n  " + "\n  ".join(bad)


# --- docs/ARCHITECTURE.md names every module ------------------------------------------------------------------


def _architecture_rows() -> dict:
    """folder under navi_nb/ -> the modules cell of its row in the stage table of docs/ARCHITECTURE.md."""
    rows = {}
    for line in (ROOT / "docs" / "ARCHITECTURE.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) >= 3:
            for folder in re.findall(r"`navi_nb/(\w+)/`", cells[1]):
                rows[folder] = cells[2]
    return rows


def test_architecture_names_every_module():
    """Every .py file of the package is named in docs/ARCHITECTURE.md: a module of a stage or console folder in
    that folder's row of the stage table, a top-level module anywhere in the page (sub-package __init__.py files
    are only package markers)."""
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    rows = _architecture_rows()
    missing = []
    for path in sorted((ROOT / "navi_nb").rglob("*.py")):
        parts = path.relative_to(ROOT / "navi_nb").parts
        if len(parts) == 1:
            if f"`{parts[0]}`" not in doc and f"`navi_nb/{parts[0]}`" not in doc:
                missing.append(f"navi_nb/{parts[0]} (a top-level module: name it in the page)")
        elif parts[-1] != "__init__.py":
            row = rows.get(parts[0])
            if row is None:
                missing.append(f"navi_nb/{'/'.join(parts)} (the table has no row for `navi_nb/{parts[0]}/`)")
            elif f"`{parts[-1]}`" not in row and f"`{parts[0]}/{parts[-1]}`" not in row:
                missing.append(f"navi_nb/{'/'.join(parts)} (not in the row of `navi_nb/{parts[0]}/`)")
    assert not missing, "docs/ARCHITECTURE.md does not name:\n  " + "\n  ".join(missing)


# --- docs/API.md: every name it lists imports -------------------------------------------------------------------

API_MD = ROOT / "docs" / "API.md"


def _api_names():
    """(section, name as written, module or None, attribute) for every name in the first column of API.md's
    tables: a bare name is navi_nb's own (module None) unless a dotted name came before it in the same cell,
    whose module it shares; a quoted name is a Gymnasium id (attribute None)."""
    out = []
    section = ""
    for line in API_MD.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        if not line.startswith("| `"):
            continue
        cell = line.strip("|").split("|")[0]
        module = None
        for span in re.findall(r"`([^`]+)`", cell):
            if span.startswith('"'):
                out.append((section, span, "navi_nb.env.gym_adapter", None))
                continue
            m = re.match(r"^([A-Za-z_][\w.]*)(\(.*\))?$", span)
            assert m, f"docs/API.md ({section}): cannot read the name `{span}`"
            name = m.group(1)
            if "." in name:
                module, name = name.rsplit(".", 1)
            out.append((section, span, module, name))
    return out


@pytest.mark.parametrize("section,span,module,name", _api_names(), ids=lambda v: v if isinstance(v, str) else "")
def test_api_md_names_import(section, span, module, name):
    import navi_nb

    if module is None:
        assert name in navi_nb.__all__, (
            f"docs/API.md ({section}): `{span}` is written bare, so it must be importable from navi_nb "
            f"(navi_nb/__init__.py _API), and it is not"
        )
        assert getattr(navi_nb, name) is not None
        return
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith("navi_nb"):
            pytest.fail(f"docs/API.md ({section}): `{span}`: there is no module {module}")
        pytest.skip(f"{module} needs an optional extra: {exc}")
    if name is None:  # a Gymnasium id, registered when the adapter is imported
        import gymnasium

        assert span.strip('"') in gymnasium.registry, f"docs/API.md ({section}): {span} is not a registered id"
        return
    assert hasattr(mod, name), f"docs/API.md ({section}): `{span}`: {module} has no {name}"


def test_api_md_lists_every_top_level_name():
    """The reverse: every name `import navi_nb` exports is in docs/API.md, written bare."""
    import navi_nb

    bare = {name for _section, _span, module, name in _api_names() if module is None}
    missing = sorted(set(navi_nb.__all__) - bare - {"__version__"})
    assert not missing, f"docs/API.md does not list these names of navi_nb.__all__: {missing}"


# --- every `navi-nb ...` command line in the docs' code blocks parses ------------------------------------------

DOC_FILES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
_LAUNCH_WORDS = {"$", "time", "do", "then", "srun", "nice", "exec"}


def _doc_commands(path: Path):
    """(line number, argv after `navi-nb`) for every navi-nb command in a Markdown file's fenced code blocks: a
    segment of a shell line (split at &&, ;, |, parentheses) that starts, after a prompt, `time`, `do`,
    `mpiexec -n N`, `srun` or variable assignments, with `navi-nb` (or `.venv/bin/navi-nb`, or
    `python -m navi_nb`). Lines of help output (`usage: navi-nb ...`, option lists) start otherwise."""
    import shlex

    text = path.read_text()
    for m in re.finditer(r"^```[^\n]*\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE):
        first = text.count("\n", 0, m.start(1)) + 1
        lines = m.group(1).split("\n")
        i = 0
        while i < len(lines):
            lineno, line = first + i, lines[i]
            while line.endswith("\\") and i + 1 < len(lines):  # a continued line
                i += 1
                line = line[:-1] + " " + lines[i]
            i += 1
            if "navi-nb" not in line and "navi_nb" not in line:
                continue
            lex = shlex.shlex(line, posix=True, punctuation_chars=True)
            lex.whitespace_split = True
            try:
                tokens = list(lex)
            except ValueError:  # unbalanced quotes: prose, not a command
                continue
            segment = []
            for token in tokens + [";"]:
                if token and set(token) <= set("();<>|&"):
                    argv = _navi_argv(segment)
                    if argv is not None:
                        yield lineno, argv
                    segment = []
                else:
                    segment.append(token)


def _navi_argv(tokens):
    """The arguments after `navi-nb` when the segment ``tokens`` runs navi-nb, else None."""
    k = 0
    while k < len(tokens):
        t = tokens[k]
        if t in _LAUNCH_WORDS or re.match(r"^[A-Za-z_]\w*=", t):
            k += 1
        elif t in ("mpiexec", "mpirun") and k + 2 < len(tokens) and tokens[k + 1] in ("-n", "-np"):
            k += 3
        else:
            break
    rest = tokens[k:]
    if rest and (rest[0] == "navi-nb" or rest[0].endswith("/navi-nb")):
        return rest[1:]
    if len(rest) >= 3 and re.match(r"^(.*/)?python3?$", rest[0]) and rest[1:3] == ["-m", "navi_nb"]:
        return rest[3:]
    return None


def _parse_problem(argv) -> str | None:
    """Why ``navi-nb ARGV`` does not parse (argparse's message), or None. A synopsis line with ``[optional]``
    parts and placeholders is checked flag by flag instead: each flag must be one of its parser's."""
    import contextlib
    import io

    from navi_nb.cli import build_parser

    parser = build_parser()
    if any(a.startswith("[") or a.endswith("]") for a in argv):
        words = [a.strip("[]") for a in argv]
        sub = parser
        for w in words:  # descend into the sub-command (and `bench NAME`) the line names
            for action in sub._actions:
                if isinstance(action, argparse._SubParsersAction) and w in action.choices:
                    sub = action.choices[w]
                    break
        known = {s for action in sub._actions for s in action.option_strings}
        unknown = [w for w in words if re.match(r"^--?[A-Za-z]", w) and w.split("=")[0] not in known]
        return f"{sub.prog} has no {', '.join(unknown)}" if unknown else None
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            return err.getvalue().strip().splitlines()[-1]
    return None


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.name)
def test_doc_command_lines_parse(path):
    """Every `navi-nb ...` line in the file's code blocks names a real sub-command with flags its parser has and
    values it accepts (argparse only: nothing runs)."""
    problems = []
    for lineno, argv in _doc_commands(path):
        problem = _parse_problem(argv)
        if problem:
            problems.append(f"line {lineno}: navi-nb {' '.join(argv)}\n      {problem}")
    assert not problems, f"{path.relative_to(ROOT)}: command lines that do not parse:\n  " + "\n  ".join(problems)


def test_doc_command_lines_are_found():
    """The finder above sees the docs' commands (a regression in it would pass every file vacuously)."""
    found = {path.name: sum(1 for _ in _doc_commands(path)) for path in DOC_FILES}
    assert found["CLI.md"] >= 10 and found["TRAINING.md"] >= 10 and found["README.md"] >= 5, found
    argvs = [argv for path in DOC_FILES for _line, argv in _doc_commands(path)]
    assert ["train", "--actors", "256", "--actor-block", "16", "--name", "big"] in argvs  # after `mpiexec -n 4`


def test_cli_md_lists_the_settings_a_resume_may_change():
    """docs/CLI.md's sentence on --resume names exactly the run settings a resumed run may change
    (train/config.py RESUME_FIELDS)."""
    from navi_nb.train.config import RESUME_FIELDS

    text = " ".join(_section(CLI_MD.read_text(), "## train").split())
    m = re.search(r"except the run settings (.*?), which may change", text)
    assert m, "docs/CLI.md '## train': the sentence 'except the run settings ..., which may change' is missing"
    named = set(re.findall(r"`(--[\w-]+)`", m.group(1)))
    want = {"--" + f.replace("_", "-") for f in RESUME_FIELDS}
    assert named == want, f"docs/CLI.md names {sorted(named)} as resumable; RESUME_FIELDS has {sorted(want)}"
