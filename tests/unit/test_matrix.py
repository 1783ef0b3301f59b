"""tests/matrix.py rewrites COMPATIBILITY.md's table and keeps the record of verified rebases below it."""

from __future__ import annotations

from pathlib import Path

from tests import matrix


def test_a_rewrite_updates_the_table_and_keeps_the_verified_rebases(tmp_path: Path) -> None:
    output = tmp_path / "COMPATIBILITY.md"
    row = matrix.Row("keras 3.15.1", "V4", "yes", "pass: 3 passed", 12.0, {"callspec-fast-path": "applied"})
    matrix.write([row], output)
    assert matrix.REBASES not in output.read_text()
    record = f"{matrix.REBASES}\n\n- keras 3.15.1 -> keras-nightly 3.16.0.dev1: exit 0, pin moved\n"
    output.write_text(output.read_text() + "\n" + record)
    newer = matrix.Row("keras 3.15.1", "V4", "yes", "pass: 4 passed", 10.0, {"callspec-fast-path": "applied"})
    matrix.write([newer], output)
    text = output.read_text()
    assert text.endswith(record) and text.count(matrix.REBASES) == 1
    assert "pass: 4 passed" in text and "pass: 3 passed" not in text
    assert [r.equivalence for r in matrix.read(output)] == ["pass: 4 passed"]
