"""``mcf bench NAME [ARGS]``: runs the checkout's scripts by name, passes their arguments and
exit code through, and refuses an unknown name (or a wheel without scripts) in one line."""
from pathlib import Path

from mcf_fpga.host.commands import bench
from tests.cli_helpers import cli, last_line, run

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"


def test_list_names_every_benchmark_script_of_the_checkout():
    rc, out, err = cli("bench", "--list")
    assert rc == 0, err
    listed = {line.split()[0] for line in out.splitlines()}
    on_disk = {p.stem.removeprefix("bench_") for p in SCRIPTS.glob("bench_*.py")}
    assert len(on_disk) >= 10
    assert on_disk <= listed
    assert {"calibrate_perf", "check_kr260_costs", "measure_kr260"} <= listed
    assert "mutation_profile" not in listed           # a helper module, not a script


def test_unknown_name_is_one_line_naming_the_choices(capsys):
    rc, out, err = run(capsys, ["bench", "no_such_bench"])
    assert rc == 2
    line = last_line(err)
    assert "NAME 'no_such_bench'" in line and "kv" in line and "paper" in line


def test_arguments_and_exit_code_are_the_scripts(capfd):
    from mcf_fpga.host.cli import main
    assert main(["bench", "numerics", "--", "--help"]) == 0
    out = capfd.readouterr().out
    assert "bench_numerics.py" in out and "--prompt-len" in out
    assert main(["bench", "numerics", "--no-such-option"]) == 2      # the script's argparse
    assert "unrecognized arguments: --no-such-option" in capfd.readouterr().err


def test_without_a_checkout_it_says_the_scripts_ship_with_the_source(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench, "scripts_dir", lambda: tmp_path / "nowhere")
    rc, out, err = run(capsys, ["bench", "kv"])
    assert rc == 2
    assert "not the wheel" in last_line(err)
