"""A search index a killed process left behind opens and takes the same changes again.

Tantivy names a delete file ``<segment>.<opstamp>.del``, and the opstamp restarts from the last
commit recorded in ``meta.json``. A process killed after writing such a file but before
recording its commit leaves the file on disk; the restarted sink applies the same changes
again, writes the same name, and without a clean-up its commit fails (``FileAlreadyExists``,
seen in CI after a SIGKILL). The test builds that state exactly: the index as of the last
recorded commit, plus the files the next commit wrote.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sinks.search.index import TableIndex, live_rows, open_reader, row_document

HEAP = 15_000_000
A, B, C = '{"id":"a"}', '{"id":"b"}', '{"id":"c"}'  # document keys: the record key's JSON


def _apply_second_commit(path: Path) -> None:
    """Replace ``A``'s row and delete ``B``: a commit that writes a delete file."""
    index = TableIndex(path, HEAP)
    index.delete_keys([A, B])
    index.add(row_document(A, (20, 0), 3, {"id": "a", "v": 2}, "two"))
    index.commit()
    index.close()


def _killed_after_writing(path: Path, aside: Path) -> set[str]:
    """Leave ``path`` as a process killed inside the second commit would: the first commit
    recorded (its ``meta.json``), the second one's new files written and listed as managed, but
    not recorded. Returns those files."""
    index = TableIndex(path, HEAP)
    for n, key in enumerate((A, B, C)):
        index.add(row_document(key, (10, n), n, {"id": key, "v": 1}, "one"))
    index.commit()
    index.close()
    shutil.copytree(path, aside)  # the state as of the first commit
    before = {p.name for p in path.iterdir()}
    _apply_second_commit(path)
    leftovers = {p.name for p in path.iterdir()} - before
    # Tantivy lists a file in .managed.json before it writes it; meta.json records a commit.
    for name in [*leftovers, ".managed.json"]:
        shutil.copy(path / name, aside / name)
    shutil.rmtree(path)
    shutil.move(aside, path)
    return leftovers


def test_unrecorded_delete_file_does_not_stop_the_same_changes_applied_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "orders"
    leftovers = _killed_after_writing(path, tmp_path / "aside")
    assert any(name.endswith(".del") for name in leftovers), leftovers  # the case at hand

    _apply_second_commit(path)  # the restarted sink: same changes, same opstamp

    rows = sorted((key["id"], row["v"]) for key, row in live_rows(open_reader(path)))
    assert rows == [("a", 2), ("c", 1)]
