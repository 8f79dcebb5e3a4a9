"""Flags and their environment mirror: a bad value is an error naming where it came from, for the command
that takes it only; durations as every Prometheus tool writes them."""

import argparse
import os
import re
import subprocess
import sys

import pytest

from gpulens import cli
from gpulens.core import flags


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("900", 900.0), ("2.5", 2.5), ("30s", 30.0), ("10m", 600.0), ("1h30m", 5400.0), ("100ms", 0.1), ("1d", 86400.0)],
)
def test_durations_in_prometheus_style_or_plain_seconds(text, seconds):
    assert flags.duration(text) == seconds


@pytest.mark.parametrize("text", ["10x", "1m30", "", "0", "-5", "nan", "inf"])
def test_a_bad_duration_names_the_accepted_forms(text):
    with pytest.raises(argparse.ArgumentTypeError, match="is not a duration: give seconds|must be a positive, finite"):
        flags.duration(text)


def test_a_mistyped_source_in_the_environment_is_refused_not_simulated(monkeypatch, capsys):
    monkeypatch.setenv("GPULENS_SOURCE", "nvlm")
    with pytest.raises(SystemExit) as exit:
        cli.main(["exporter", "--once"])
    assert exit.value.code == 2
    assert (
        "gpulens: error: environment variable GPULENS_SOURCE='nvlm': not one of nvml, dcgm, simulated"
        in capsys.readouterr().err
    )


def test_a_bad_environment_value_spares_other_commands_and_the_flag_wins(monkeypatch, capsys):
    monkeypatch.setenv("GPULENS_SOURCE", "nvlm")
    monkeypatch.setenv("GPULENS_ANALYSIS_WINDOW", "10 minutes")
    with pytest.raises(SystemExit) as exit:
        cli.main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out == "gpulens 0.1.0\n"
    args = cli.build_parser().parse_args(["exporter", "--source", "simulated"])
    flags.check(cli.build_parser(), args)  # given on the command line: the environment is not used
    assert args.source == "simulated"
    with pytest.raises(SystemExit):
        cli.main(["analyzer"])
    assert "GPULENS_ANALYSIS_WINDOW='10 minutes': '10 minutes' is not a duration" in capsys.readouterr().err


def test_environment_durations_and_switches_are_read_as_the_flags_are(monkeypatch, capsys):
    monkeypatch.setenv("GPULENS_ANALYSIS_WINDOW", "10m")
    monkeypatch.setenv("GPULENS_SAMPLER_INTERVAL", "500ms")
    assert cli.build_parser().parse_args(["analyzer"]).window == 600.0
    assert cli.build_parser().parse_args(["exporter"]).interval == 0.5
    monkeypatch.setenv("GPULENS_ONCE", "maybe")
    with pytest.raises(SystemExit):
        cli.main(["exporter"])
    assert "GPULENS_ONCE='maybe': expected true or false" in capsys.readouterr().err
    # A collector switched off by its variable, as --no-collector.xid would; the flag still wins.
    monkeypatch.setenv("GPULENS_COLLECTOR_XID", "false")
    assert cli.build_parser().parse_args(["exporter"]).collector_xid is False
    assert cli.build_parser().parse_args(["exporter", "--collector.xid"]).collector_xid is True
    assert cli.build_parser().parse_args(["exporter"]).collector_gpm is True


def test_help_shows_each_default_and_its_environment_variable(capsys):
    with pytest.raises(SystemExit):
        cli.main(["exporter", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert (
        "seconds between samples; busy and idle seconds are integrated at this rate "
        "(default 1.0) [env GPULENS_SAMPLER_INTERVAL]" in help_text
    )


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["--log.level", "debug", "alerts", "--out", "x"], "debug"),
        (["alerts", "--out", "x", "--log.level", "error"], "error"),
        (["alerts", "--log.level", "warning", "--out", "x"], "warning"),
        (["alerts", "--out", "x"], "info"),
    ],
)
def test_global_flags_are_accepted_anywhere_on_the_line(argv, level):
    from gpulens.cli import build_parser

    assert build_parser().parse_args(argv).log_level == level


def test_every_command_is_registered_by_the_module_cli_commands_names():
    # The command line imports only the module of the command it runs, found in cli.COMMANDS: a command
    # missing there, or listed under the wrong module, would fail to parse.
    def registered(parser):
        [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return set(commands.choices)

    assert registered(cli.build_parser()) == set(cli.COMMANDS)
    for command in cli.COMMANDS:
        assert command in registered(cli.build_parser(command)), command


def _command_help(command: str) -> argparse.ArgumentParser:
    [choices] = [a for a in cli.build_parser(command)._actions if isinstance(a, argparse._SubParsersAction)]
    return choices.choices[command]


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_command_says_what_it_does_and_shows_each_default_once(command):
    parser = _command_help(command)
    assert parser.description, f"gpulens {command} --help has no description"
    flags_help = re.split(r"\n  (?=-)", parser.format_help())[1:]
    assert [block for block in flags_help if " ".join(block.split()).count("(default") > 1] == []


def test_defaults_of_plain_flags_are_shown():
    words = " ".join(_command_help("eval").format_help().split())
    assert "(thresholds were tuned on seeds 0-7) (default 1000)" in words
    assert "comma-separated (default 1,15,30,60)" in words


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval", "--per-class", "99999999999999999999"], "gpulens eval: --per-class must be from 1 to 1000"),
        (["eval", "--noise", "nan"], "gpulens eval: --noise must be a ratio from 0 to 1, got nan"),
        (
            ["exporter", "--source", "simulated", "--simulate.gpus", "100000000", "--once"],
            "--simulate.gpus must be from 1 to 64 (one node's GPUs), got 100000000",
        ),
    ],
)
def test_flag_values_that_would_run_for_ever_are_refused_at_once(capsys, argv, message):
    """Each of these ran until killed (a hundred million simulated GPUs, 10^20 scenarios), or judged noise
    that is not a number."""
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["report", "--fromat", "json", "x.csv"],
            "gpulens report: error: unrecognized arguments: --fromat (did you mean --format?)",
        ),
        (
            ["exporter", "--web.listen-adress=:9"],
            "gpulens exporter: error: unrecognized arguments: --web.listen-adress=:9 "
            "(did you mean --web.listen-address?)",
        ),
        (["analyzer", "--zzz"], "gpulens analyzer: error: unrecognized arguments: --zzz"),
    ],
)
def test_a_misspelt_flag_gets_its_commands_usage_and_the_flag_it_is_closest_to(argv, said, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2
    assert err.startswith(f"usage: gpulens {argv[0]} ") and err.rstrip("\n").endswith(said)


def _flags_of_every_command():
    parser = cli.build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in commands.choices.items():
        for action in command._actions:
            long = [o for o in action.option_strings if o.startswith("--") and not o.startswith("--no-")]
            if long and action.help != argparse.SUPPRESS and long[0] not in ("--help", "--log.level"):
                yield name, long[0], action


def test_every_dotted_flag_names_its_environment_variable_and_no_one_word_flag_of_a_report_does():
    """As docs/analyzer.md says: a dotted flag can be set from the environment (its help names its variable:
    flags.add, which reads it); a report's, an eval's and the reference's one-word flags but --thresholds and
    --prices cannot (GPULENS_FORMAT and GPULENS_WINDOW were said to work, and were ignored), and claim none."""
    for command, flag, action in _flags_of_every_command():
        claims = re.search(r"\[env (GPULENS_\w+)\]", action.help or "")
        if "." in flag:
            assert claims and claims[1] == flags.env_name(flag), (command, flag, action.help)
        elif command in ("report", "analyze", "eval", "metrics-reference") and flag not in ("--thresholds", "--prices"):
            assert not claims, (command, flag, action.help)


def test_a_flags_variable_is_read_where_its_help_names_one(monkeypatch, capsys):
    """The claim holds where it is made: each string flag's variable becomes its default."""
    for command, flag, action in _flags_of_every_command():
        if (
            "[env " not in (action.help or "")
            or action.type not in (None, str)
            or action.choices
            or action.nargs not in (None, "?")
        ):
            continue
        if isinstance(action, (argparse._StoreTrueAction, argparse.BooleanOptionalAction, argparse._AppendAction)):
            continue
        monkeypatch.setenv(flags.env_name(flag), "from-the-environment")
        parser = cli.build_parser(command)
        [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = commands.choices[command]._actions
        others = [o.option_strings[0] for o in chosen if o.required and o.option_strings and o is not action]
        try:
            args, _ = parser.parse_known_args([command, *(word for other in others for word in (other, "x"))])
        except SystemExit:
            raise AssertionError((command, flag, capsys.readouterr().err)) from None
        assert getattr(args, action.dest) == "from-the-environment", (command, flag)
        monkeypatch.delenv(flags.env_name(flag))


@pytest.mark.parametrize(("given", "hugepages"), [(None, False), ("1", True)])
def test_a_gpulens_process_asks_numpy_for_small_pages_unless_told_otherwise(given, hugepages):
    """numpy reads NUMPY_MADVISE_HUGEPAGE once, when it is imported: gpulens.cli sets it before any command imports
    numpy (cli.NUMPY_ENVIRONMENT), and keeps what the environment says. Asked of numpy itself, in a fresh process
    started as `gpulens` starts one (the command's module imported by its parser)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if given is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = given
    code = (
        "from gpulens import cli; cli.build_parser('report'); import numpy; "
        "print(numpy._core.multiarray._get_madvise_hugepage())"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(hugepages)
