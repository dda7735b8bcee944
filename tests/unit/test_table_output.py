"""Tables and describe blocks show what a tenant typed, and nothing it could smuggle in."""

from __future__ import annotations

import pytest

from queuemgr.cli.output import print_fields, print_table


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        pytest.param("a\nb", "a\\nb", id="newline"),
        pytest.param("x\x1b[31mred", "x\\x1b[31mred", id="ansi-escape"),
        pytest.param("[bold]loud[/bold]", "[bold]loud[/bold]", id="rich-markup"),
        pytest.param("tab\there", "tab\\there", id="tab"),
        pytest.param("équipe-😀", "équipe-😀", id="unicode-stays"),
    ],
)
def test_a_name_is_one_printable_cell(
    capsys: pytest.CaptureFixture[str], name: str, shown: str
) -> None:
    print_table(None, ["NAME", "GPUS"], [[name, 8], ["other", 1]])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3  # the header and two rows: no row was split
    assert lines[1].split("  ")[0].rstrip() == shown
    assert "\x1b" not in "".join(lines)
    print_fields([("Name", name)])
    (line,) = capsys.readouterr().out.splitlines()
    assert line == f"Name: {shown}"
