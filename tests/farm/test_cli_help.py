"""The command line explains itself: every option of every command has help, and --version answers."""
import click

from farm.cli import cli
from tests.helpers.farm_cases import farm_cli


def test_every_option_of_every_command_has_help():
    missing = [f"{name} {param.opts[0]}" for name, command in cli.commands.items()
               for param in command.params if isinstance(param, click.Option) and not param.help]
    assert not missing, missing
    undocumented = [name for name, command in cli.commands.items() if not command.help]
    assert not undocumented, undocumented


def test_version():
    result = farm_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("farm, version "), result.stdout + result.stderr
