"""`devplan COMMAND --help` as a user reads it: rich wraps the prose to the terminal (nothing is
wrapped by hand), every word of every option's help reaches the screen, flags show no type
placeholder, it links what a pip install has; and shell completion offers the values it knows."""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path

import pytest
import typer
from rich.markup import render
from typer.testing import CliRunner

from devplan.cli import app
from testbed.cli import devplan as devplan_cli

COMMANDS = typer.main.get_command(app).commands


def _help(*args: str, width: int) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": str(width), "TERMINAL_WIDTH": str(width)})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_paragraph_of_a_command_help_is_one_line_on_a_wide_terminal(name):
    shown = _help(name, width=400).splitlines()
    for paragraph in inspect.cleandoc(COMMANDS[name].help).split("\n\n"):
        words = " ".join(paragraph.split())
        assert any(words in line for line in shown), f"devplan {name} --help breaks this paragraph:\n{paragraph}"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_help_reaches_the_screen_and_flags_have_no_placeholder(name):
    shown = _help(name, width=100)
    words = set(shown.replace("│", " ").split())
    for param in COMMANDS[name].params:
        assert "\n" not in (param.help or ""), f"{name} {param.name}: help wrapped by hand"
        missing = [word for word in render(param.help or "").plain.split() if word not in words]
        assert not missing, f"devplan {name} --help loses {missing} of {param.name}'s help"
    assert "<bool>" not in shown


def test_the_top_level_help_has_no_placeholders_on_flags():
    assert "<bool>" not in _help(width=100)


def test_no_color_help_has_no_styles_at_all():
    """NO_COLOR (no-color.org): no bold or dim either, in a fresh process as the command runs."""
    from tests.inspection.runner import run_devplan

    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "120"}  # narrower, help is click's plain text
    assert "\x1b[1m" in run_devplan("inspect", "--help", env=env).stdout
    plain = run_devplan("inspect", "--help", env={**env, "NO_COLOR": "1"})
    assert plain.returncode == 0 and "\x1b[" not in plain.stdout and "--json" in plain.stdout


@pytest.mark.parametrize("width", [80, 60])
def test_help_at_80_and_60_columns_shows_every_option_name_whole(width):
    """In a CI log or a pipe (not a terminal) or a narrow terminal, help is click's wrapped
    text: rich's panels cut option names and help below about 100 columns ('--partitio…')."""
    for name in ("compile", "check", "run"):
        shown = devplan_cli(name, "--help", env={**os.environ, "COLUMNS": str(width)}).stdout
        assert "…" not in shown and max(map(len, shown.splitlines())) <= width, shown
        words = set(shown.replace(",", " ").replace("/", " ").split())
        for param in COMMANDS[name].params:
            if param.param_type_name == "option":
                for option in (*param.opts, *param.secondary_opts):
                    assert option in words, (name, option)


def test_devplan_help_lists_the_commands_in_the_order_a_user_meets_them():
    """compile makes the program the others read: it comes first, then inspect, the gates, run."""
    shown = _help(width=80)
    listed = [line.split()[0] for line in shown[shown.index("Commands:") :].splitlines()[1:] if line.strip()]
    assert listed == ["compile", "inspect", "check", "diff", "run", "generate"]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_prints_what_a_shell_takes(name):
    """Issue 55: `pip install "devplan[executorch]"` as help prints it installs the extra; a markup
    escape leaking into the text (devplan\\[executorch]) installs something else."""
    assert "\\[" not in _help(name, width=80)


@pytest.mark.parametrize("width", [80, 140])
def test_compile_help_groups_its_options_in_panels(width):
    """Issue 55: compile's 27 options in the groups a user reaches for, on a narrow terminal (click's
    plain help) and a wide one (rich's panels) alike, no line past the terminal."""
    shown = _help("compile", width=width)
    titles = ["Output", "Memory planning", "Devices, backends and kernels", "Quantization", "Methods and LLMs"]
    titles.append("Diagnostics")
    found = [title for title in titles if f"\n{title}:\n" in shown or f"─ {title} ─" in shown]
    assert found == titles, shown
    if width == 80:  # click's plain help, wrapped by devplan's Command (rich's width is its own)
        assert max(len(line) for line in shown.splitlines()) <= width
    (planning,) = [
        part for part in re.split(r"\n(?=[A-Z][^\n]*:\n)|╭", shown) if part.lstrip("─ ").startswith("Memory planning")
    ]
    assert "--budget" in planning and "--fold" in planning and "--quantize" not in planning


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_help_line_passes_80_columns(name):
    """Issue 55: inspect's --section line was 95 columns at 80 (its choices as a metavar)."""
    shown = _help(name, width=80)
    assert max(len(line) for line in shown.splitlines()) <= 80, shown


def test_completion_offers_the_planners_and_backends():
    command = typer.main.get_command(app).commands["compile"]
    context = command.make_context("compile", [], resilient_parsing=True)

    def offered(option: str, incomplete: str = "") -> list[str]:
        param = next(param for param in command.params if option in param.opts)
        return [item.value for item in param.shell_complete(context, incomplete)]

    assert offered("--planner", "greedy") == ["greedy-order", "greedy-size", "greedy-breadth"]
    assert "hill-climb" in offered("--planner") and "best" in offered("--planner")
    assert offered("--backend") == ["xnnpack"]


def test_help_points_to_what_a_pip_install_has():
    """docs/ is not in the wheel: help names the JSON Schemas the package ships, each a file
    that is there."""
    import devplan

    named = set()
    for command in typer.main.get_command(app).commands.values():
        for param in command.params:
            assert "docs/" not in (param.help or ""), (command.name, param.help)
            named.update(re.findall(r"devplan/schemas/([\w.]+\.json)", param.help or ""))
    shipped = Path(devplan.__file__).parent / "schemas"
    assert named and all((shipped / name).is_file() for name in named), named
