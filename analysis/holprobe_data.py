"""Shared reading and saving for the analysis scripts: the documented export columns of a
`probe --out` directory, read with the csv module into numpy arrays, and figures saved as PNG
or SVG. Not a script of its own."""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import signal
import sys
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")  # headless: the scripts only ever write files

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# Output into a closed pipe (`script ... | head`) ends the script quietly, as it does a Unix
# tool, instead of a BrokenPipeError traceback.
if hasattr(signal, "SIGPIPE"):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)

# The exports' file names (docs/exports.md).
PROBES_CSV = "probes.csv"
WRITES_CSV = "writes.csv"
STALLS_CSV = "stalls.csv"
SUMMARY_CSV = "summary.csv"
RUN_JSON = "run.json"
LOAD_TIMELINE_CSV = "load_timeline.csv"
LOAD_WRITES_CSV = "load_writes.csv"
# The column that names a row's node (host:port) in probes.csv, writes.csv, stalls.csv and
# summary.csv of a run over several nodes; absent in runs recorded before them.
NODE_COLUMN = "node"

FORMATS = (".png", ".svg")

# One colour per write op, used by every script that marks writes.
OP_COLOURS = {
    "set": "#1f4e9c",
    "overwrite": "#7b2d8b",
    "delete": "#9c1f1f",
    "command": "#1f7a6d",
}


class InputError(Exception):
    """A bad argument or input file: the script prints one line and exits 2."""


def fail(prog: str, message: str) -> None:
    """Prints `prog: error: message` on one line and exits 2, as the probe binary does."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(2)


def prog() -> str:
    """The script's name as it was run, to start its messages with."""
    return Path(sys.argv[0]).name


def chart_parser(description: str, *inputs: tuple[str, dict]) -> argparse.ArgumentParser:
    """A picture script's arguments: its `inputs` (name, add_argument keywords), then the
    -o/--output every script takes; the script adds its own options, then parse_chart_args."""
    parser = argparse.ArgumentParser(description=description)
    for name, spec in inputs:
        parser.add_argument(name, **spec)
    parser.add_argument("-o", "--output", required=True, help="picture to write: .png or .svg")
    return parser


def parse_chart_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Adds the --title every script takes, last in --help, and parses `argv`."""
    parser.add_argument("--title", help="replace the generated title")
    return parser.parse_args(argv)


def run_chart(render: Callable[[argparse.Namespace], None], args: argparse.Namespace) -> int:
    """A picture script's main: renders, and a bad argument or input is one line and exit 2."""
    try:
        render(args)
    except InputError as err:
        fail(prog(), str(err))
    return 0


def run_dir(path: str, *needed: str) -> Path:
    """The run directory `path`, checked to hold each of the `needed` files."""
    directory = Path(path)
    if not directory.is_dir():
        raise InputError(f"run directory '{path}': no such directory")
    for name in needed:
        if not (directory / name).is_file():
            runs = sorted(p.name for p in directory.iterdir() if (p / name).is_file())
            if runs:
                raise InputError(f"run directory '{path}': no {name} there, but {', '.join(runs)} each hold one (the --out of several --server-bin): name one of them")
            raise InputError(f"run directory '{path}': no {name} there (is it a probe --out directory?)")
    return directory


def output_path(path: str) -> Path:
    """Checks the -o/--output name: its extension picks the format (PNG or SVG)."""
    out = Path(path)
    if out.suffix.lower() not in FORMATS:
        raise InputError(f"-o/--output '{path}': expected a .png or .svg file name")
    if out.parent and not out.parent.exists():
        raise InputError(f"-o/--output '{path}': directory '{out.parent}' does not exist")
    return out


class Table:
    """Columns of one CSV export, by name. Only the columns asked for are read; extra columns
    (added by later versions of the tool) are ignored. With `between=(column, lo, hi)` only the
    rows whose number in that column lies in [lo, hi] are kept, and with `node="host:port"` only
    that node's rows (a file without a `node` column, recorded before runs over several nodes,
    is one server's: every row is kept). Both are decided as each row is read, so a window or a
    node of a probes.csv of millions of rows costs the memory of what is kept only (rows with
    the `between` cell empty are left out)."""

    def __init__(
        self,
        path: Path,
        required: list[str],
        optional: list[str] | None = None,
        between: tuple[str, float, float] | None = None,
        node: str | None = None,
    ):
        self.path = path
        optional = optional or []
        if between is not None and between[0] not in required:
            required = required + [between[0]]
        try:
            with open(path, newline="", encoding="utf-8") as handle:
                reader = csv.reader(handle)
                header = next(reader, None)
                if header is None:
                    raise InputError(f"{path}: empty file (no header row)")
                missing = [c for c in required if c not in header]
                if missing:
                    raise InputError(f"{path}: missing column(s) {', '.join(missing)}")
                wanted = required + [c for c in optional if c in header]
                index = {c: header.index(c) for c in wanted}
                cols: dict[str, list[str]] = {c: [] for c in wanted}
                items = list(index.items())
                width = len(header)
                node_at = header.index(NODE_COLUMN) if node is not None and NODE_COLUMN in header else None
                if between is None:
                    for row in reader:
                        if len(row) < width:
                            continue  # a row cut short by a crash: the exports keep whole rows only
                        if node_at is not None and row[node_at] != node:
                            continue
                        for name, i in items:
                            cols[name].append(row[i])
                else:
                    column, lo, hi = between
                    at = index[column]
                    for row in reader:
                        if len(row) < width or row[at] == "":
                            continue
                        if node_at is not None and row[node_at] != node:
                            continue
                        try:
                            value = float(row[at])
                        except ValueError as err:
                            raise InputError(f"{path}: column {column}: '{row[at]}' is not a number") from err
                        if lo <= value <= hi:
                            for name, i in items:
                                cols[name].append(row[i])
        except OSError as err:
            raise InputError(f"{path}: cannot read ({err.strerror})") from err
        except csv.Error as err:
            raise InputError(f"{path}: not a valid CSV file ({err})") from err
        self.columns = cols

    def __len__(self) -> int:
        first = next(iter(self.columns.values()), [])
        return len(first)

    def has(self, name: str) -> bool:
        return name in self.columns

    def text(self, name: str) -> np.ndarray:
        return np.array(self.columns[name], dtype=object)

    def num(self, name: str) -> np.ndarray:
        """The column as float64; an empty cell is NaN."""
        values = self.columns[name]
        out = np.empty(len(values), dtype=np.float64)
        for i, value in enumerate(values):
            try:
                out[i] = float(value) if value != "" else math.nan
            except ValueError as err:
                raise InputError(f"{self.path}: column {name}: '{value}' is not a number") from err
        return out

    def flag(self, name: str) -> np.ndarray:
        """A `true`/`false` column as bool."""
        return np.array([v.strip().lower() == "true" for v in self.columns[name]], dtype=bool)


def find_write(writes: Table, which: str, flag: str = "--write") -> int:
    """The row index in writes.csv (read with `seq`, `op`, `size_bytes`) of the write `which`
    names: a seq, `largest` (the first set of the largest size) or `largest:OP`."""
    seqs = writes.num("seq")
    if len(seqs) == 0:
        raise InputError(f"{flag}: the run has no writes")
    if which == "largest" or which.startswith("largest:"):
        op = which.partition(":")[2] or "set"
        sizes = writes.num("size_bytes")
        ops = writes.text("op")
        candidates = np.flatnonzero(ops == op)
        if len(candidates) == 0:
            raise InputError(f"{flag} '{which}': the run has no write with op {op}")
        largest = np.nanmax(sizes[candidates])
        return int(candidates[np.flatnonzero(sizes[candidates] == largest)[0]])
    try:
        seq = int(which)
    except ValueError:
        raise InputError(f"{flag} '{which}': expected a write seq, 'largest' or 'largest:OP'") from None
    matches = np.flatnonzero(seqs == seq)
    if len(matches) == 0:
        raise InputError(f"{flag} '{which}': no write with that seq (the run has 1 to {int(np.nanmax(seqs))})")
    return int(matches[0])


def csv_header(path: Path) -> list[str]:
    """The header row of a CSV export ([] when the file is missing or empty)."""
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            return next(csv.reader(handle), [])
    except OSError:
        return []
    except csv.Error as err:
        raise InputError(f"{path}: not a valid CSV file ({err})") from err


def has_node_columns(directory: Path) -> bool:
    """Whether the run's exports name a node per row (runs over several nodes, and every run
    recorded since), by the header of the first of probes.csv, summary.csv, stalls.csv there."""
    for name in (PROBES_CSV, SUMMARY_CSV, STALLS_CSV):
        header = csv_header(directory / name)
        if header:
            return NODE_COLUMN in header
    return False


def written_node(directory: Path, meta: dict | None = None) -> str | None:
    """The node (host:port) the run's writes went to: run.json's `node.node`, else the node of
    summary.csv's rows of role master in the written shard (`same_shard` true), else writes.csv's
    `node`. None for a run without node columns: one server, every row is its (as before).
    The first two are how `probe compare` picks summary.csv's rows (src/compare/load.rs)."""
    meta = read_run_json(directory) if meta is None else meta
    own = meta.get("node")
    if isinstance(own, dict) and own.get("node"):
        return str(own["node"])
    if not has_node_columns(directory):
        return None
    summary_path = directory / SUMMARY_CSV
    if NODE_COLUMN in csv_header(summary_path):
        summary = Table(summary_path, [NODE_COLUMN], ["role", "same_shard"])
        if summary.has("role") and summary.has("same_shard"):
            masters = (summary.text("role") == "master") & summary.flag("same_shard")
            found = [n for n in dict.fromkeys(summary.text(NODE_COLUMN)[masters]) if n]
            if found:
                return found[0]
    writes_path = directory / WRITES_CSV
    if NODE_COLUMN in csv_header(writes_path):
        found = [n for n in dict.fromkeys(Table(writes_path, [NODE_COLUMN]).text(NODE_COLUMN)) if n]
        if found:
            return found[0]
    raise InputError(
        f"run directory '{directory}': its rows name several nodes, but neither run.json's node, summary.csv's "
        "written-shard master nor writes.csv says which one was written"
    )


def run_nodes(directory: Path, meta: dict | None = None) -> list[str]:
    """Every node the run probed, the written one first: run.json's `node` and `nodes`, then any
    other named in summary.csv or stalls.csv (small files; probes.csv is read, for its node
    column only, when none of those name a node). [] for a run without node columns."""
    meta = read_run_json(directory) if meta is None else meta
    if not has_node_columns(directory):
        return []
    found: list[str] = []
    try:
        written = written_node(directory, meta)
    except InputError:
        written = None  # listed all the same, from the files
    if written:
        found.append(written)
    for other in meta.get("nodes") or []:
        if isinstance(other, dict) and other.get("node"):
            found.append(str(other["node"]))
    for name in (SUMMARY_CSV, STALLS_CSV):
        if NODE_COLUMN in csv_header(directory / name):
            found.extend(Table(directory / name, [NODE_COLUMN]).text(NODE_COLUMN))
    if len(set(found)) <= 1 and NODE_COLUMN in csv_header(directory / PROBES_CSV):
        found.extend(Table(directory / PROBES_CSV, [NODE_COLUMN]).text(NODE_COLUMN))
    return [n for n in dict.fromkeys(found) if n]


def pick_node(directory: Path, meta: dict, given: str | None, flag: str = "--node") -> str | None:
    """The node to draw: `given` (checked to be one of the run's), or by default the written
    one; None for a run without node columns, which is drawn whole."""
    if given is None:
        return written_node(directory, meta)
    nodes = run_nodes(directory, meta)
    if not nodes:
        raise InputError(f"{flag} {given}: this run has no node columns (one server, every row is its): leave {flag} out")
    if given not in nodes:
        raise InputError(f"{flag} {given}: not a node of this run (its nodes: {', '.join(nodes)})")
    return given


def node_table(
    directory: Path,
    name: str,
    required: list[str],
    optional: list[str] | None = None,
    node: str | None = None,
    between: tuple[str, float, float] | None = None,
    meta: dict | None = None,
) -> Table:
    """One node's rows of probes.csv, stalls.csv or summary.csv (filtered as they are read):
    `node`, or by default the node the writes went to. A run without node columns is one
    server's: every row. Each node's probes, stalls and summary rows are that server's alone;
    mixed, a cluster's six nodes would read as six repeats of one."""
    if node is None:
        node = written_node(directory, meta)
    return Table(directory / name, required, optional, between=between, node=node)


def node_detail(meta: dict, node: str) -> str:
    """`127.0.0.1:7201 master shard 0` from run.json's `node` and `nodes`, else the node alone."""
    entries = [meta.get("node")] + list(meta.get("nodes") or [])
    for entry in entries:
        if isinstance(entry, dict) and entry.get("node") == node:
            parts = [node, str(entry.get("role") or "")]
            if entry.get("shard") is not None and entry.get("shard") != "":
                parts.append(f"shard {entry['shard']}")
            return " ".join(p for p in parts if p)
    return node


def read_run_json(directory: Path) -> dict:
    """run.json as a dict, or {} when it is missing or unreadable (the pictures only use it for
    labels)."""
    try:
        with open(directory / RUN_JSON, encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def server_label(meta: dict, fallback: str) -> str:
    """`redis 7.0.15` from run.json's server.flavor and server.version, else `fallback`."""
    server = meta.get("server") or {}
    flavor = server.get("flavor") or ""
    version = server.get("version") or ""
    label = f"{flavor} {version}".strip()
    return label or fallback


def probing_label(meta: dict) -> str:
    """`2 probe threads x 1000/s PING` from run.json's options, or ''."""
    options = meta.get("options") or {}
    threads = options.get("probe_threads")
    rate = options.get("probe_rate")
    cmd = str(options.get("probe_cmd") or "").upper()
    if threads is None or rate is None:
        return ""
    return f"{threads} probe thread{'s' if threads != 1 else ''} \u00d7 {rate:g}/s {cmd}".strip()


def size_label(size_bytes: float) -> str:
    """`64M`, `1G`, `512K`, as the probe prints sizes (binary units)."""
    size = int(size_bytes)
    for unit, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if size >= unit and size % unit == 0:
            return f"{size // unit}{suffix}"
    for unit, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if size >= unit:
            return f"{size / unit:.1f}{suffix}"
    return f"{size}B"


def save(fig, out: Path) -> None:
    """Writes the figure in the format its extension names, and closes it."""
    kwargs = {"dpi": 120} if out.suffix.lower() == ".png" else {}
    fig.savefig(out, bbox_inches="tight", **kwargs)
    plt.close(fig)
    print(f"wrote {out} ({os.path.getsize(out)} bytes)", file=sys.stderr)
