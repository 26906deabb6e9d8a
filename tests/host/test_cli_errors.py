"""Every bad command-line input gives one clear line naming the option, file or field and
the limit — exit 2 for the user's input, 1 for a runtime failure, 130 for Ctrl-C — and never a
traceback (``host.cli.main``, ``host.errors``)."""
import json
import os

import pytest

from mcf_fpga.host.cli import main
from tests.host._checkpoint import CORRUPTIONS, copy_checkpoint, write_checkpoint
from tests.cli_helpers import last_line as _last, run as _run

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


GOLDEN = ["run", "--backend", "golden", "--layers", "1", "--nodes", "2", "--prompt-len", "24",
          "--max-new-tokens", "1", "--no-progress"]


@pytest.mark.parametrize("extra, message", [
    (["--nodes", "0"], "argument --nodes: 0 must be in 2..64"),
    (["--nodes", "1"], "argument --nodes: 1 must be in 2..64"),
    (["--nodes", "65"], "argument --nodes: 65 must be in 2..64"),
    (["--chunk", "0"], "argument --chunk: 0 must be >= 1"),
    (["--block", "0"], "argument --block: 0 must be >= 1"),
    (["--chunk", "2000"], "--chunk=2000 exceeds model micro's max_position=1024"),
    (["--prompt-len", "1e9"], "--prompt-len=1000000000 + --max-new-tokens=1 = 1000000001 exceeds model "
                              "micro's max_position=1024"),
    (["--prompt-len", "1000000000000"], "exceeds model micro's max_position=1024"),
    (["--prompt-len", "1.5"], "argument --prompt-len: '1.5' is not an integer"),
    (["--max-new-tokens", "1024"], "--max-new-tokens=1024 = 1048 exceeds model micro's max_position=1024"),
    (["--max-new-tokens", "0"], "argument --max-new-tokens: 0 must be >= 1"),
    (["--kv-headroom", "inf"], "argument --kv-headroom: 'inf' must be a finite number"),
    (["--kv-headroom", "nan"], "argument --kv-headroom: 'nan' must be a finite number"),
    (["--kv-headroom", "0.5"], "argument --kv-headroom: 0.5 must be >= 1"),
    (["--kv-headroom", "3"], "--kv-headroom=3 must be in [1, --nodes=2]"),
    (["--kv-headroom", "x"], "argument --kv-headroom: 'x' is not a number"),
    (["--layers", "0"], "argument --layers: 0 must be >= 1"),
    (["--layers", "-1"], "argument --layers: -1 must be >= 1"),
    (["--layers", "3"], "--layers=3 must be in 1..2 (model micro has 2 layers)"),
    (["--seed", "-1"], "argument --seed: -1 must be in 0.."),
    (["--seed", str(2 ** 64)], "argument --seed: 18446744073709551616 must be in 0.."),
    (["--model", "nope"], "--model='nope' unknown, expected one of micro, qwen2.5-0.5b"),
    (["--schedules", ","], "--schedules=[]: expected names from mars, ring, zigzag, pd"),
    (["--topology", "star"], "argument --topology: invalid choice: 'star'"),
    (["--boards", "h:1,h:2"], "--boards needs --backend board"),
    (["--sim-threads", "0"], "argument --sim-threads: 0 must be >= 1"),
    (["--sim-threads", "2"], "--sim-threads needs --backend rtl, got --backend golden"),
    (["--backend", "rtl", "--sim-threads", "3"], "--sim-threads=3 must be in 1..2 (--nodes): one node per thread"),
])
def test_run_refuses_bad_options(capsys, extra, message):
    rc, out, err = _run(capsys, GOLDEN + extra)
    assert rc == 2, err
    assert message in _last(err) and _last(err).startswith("mcf run: error:"), err
    assert out == ""


def test_run_layers_takes_exactly_n_layers(capsys):
    """``--layers N`` runs N layers (``--layers 0`` used to run all, ``-1`` to drop one)."""
    rc, out, err = _run(capsys, GOLDEN + ["--json", "--schedules", "mars"])
    assert rc == 0, err
    rc, out2, err = _run(capsys, GOLDEN[:3] + GOLDEN[5:] + ["--layers", "2", "--json", "--schedules", "mars"])
    assert rc == 0, err
    assert json.loads(out)["prompt"] == json.loads(out2)["prompt"]


def test_accuracy_length_checked_before_generation(capsys):
    rc, out, err = _run(capsys, ["accuracy", "--model", "micro", "--max-new-tokens", "1e8"])
    assert rc == 2 and "--max-new-tokens=100000000" in err and "max_position=1024" in err
    assert "[mcf accuracy]" not in err          # refused before the model was built


@pytest.mark.parametrize("content, message", [
    ("[true, false, 3]", "token true is not an integer token id"),
    ("[1, 2.0]", "token 2.0 is not an integer token id"),
    ("[[1], 2]", "token [1] is not an integer token id"),
    ('{"a": 1}', "expected a JSON list of integer token ids"),
    ("[1, 2", "not valid JSON"),
    ("1 2 x", "'x' is not an integer token id"),
    ("1 -2", "token id -2 at position 1 outside [0, 256) (vocab_size=256)"),
    ("", "expected a non-empty list"),
    ("[]", "expected a non-empty list"),
    (b"\xff\xfe", "not UTF-8 text"),
    ("[" * 100000, "not valid JSON"),
])
def test_accuracy_prompt_tokens_refused(capsys, tmp_path, content, message):
    f = tmp_path / "toks"
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    rc, out, err = _run(capsys, ["accuracy", "--model", "micro", "--prompt-tokens", str(f)])
    assert rc == 2, err
    assert f"--prompt-tokens {f}" in _last(err) and message in _last(err), err


def test_accuracy_prompt_tokens_missing_file(capsys, tmp_path):
    rc, out, err = _run(capsys, ["accuracy", "--model", "micro", "--prompt-tokens", str(tmp_path / "no")])
    assert rc == 2 and "--prompt-tokens" in err and "No such file" in err
    rc, out, err = _run(capsys, ["accuracy", "--model", "micro", "--prompt-tokens", str(tmp_path)])
    assert rc == 2 and "--prompt-tokens" in err and "directory" in err.lower()


def test_accuracy_prompt_tokens_length_vs_max_position(capsys, tmp_path):
    f = tmp_path / "toks"
    f.write_text(" ".join(["1"] * 1020))
    rc, out, err = _run(capsys, ["accuracy", "--model", "micro", "--prompt-tokens", str(f),
                                 "--max-new-tokens", "8"])
    assert rc == 2 and "--prompt-tokens (1020 tokens) + --max-new-tokens=8 = 1028 exceeds" in err


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "base")


def test_accuracy_valid_checkpoint(capsys, checkpoint):
    rc, out, err = _run(capsys, ["accuracy", "--checkpoint", str(checkpoint), "--prompt-len", "8",
                                 "--max-new-tokens", "1", "--layers", "1", "--json"])
    assert rc == 0, err
    assert len(json.loads(out)["hidden_cos"]) == 1
    rc, out, err = _run(capsys, ["accuracy", "--checkpoint", str(checkpoint), "--layers", "3"])
    assert rc == 2 and f"--layers=3 must be in 1..2 (checkpoint {checkpoint} has 2 layers)" in err
    rc, out, err = _run(capsys, ["accuracy", "--checkpoint", str(checkpoint), "--prompt-len", "256"])
    assert rc == 2 and f"= 264 exceeds checkpoint {checkpoint}'s max_position=256" in err


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_accuracy_corrupt_checkpoint(capsys, checkpoint, tmp_path, corruption):
    corrupt, message = CORRUPTIONS[corruption]
    d = copy_checkpoint(checkpoint, tmp_path / "c")
    corrupt(d)
    rc, out, err = _run(capsys, ["accuracy", "--checkpoint", str(d), "--prompt-len", "8",
                                 "--max-new-tokens", "1"])
    assert rc == 2, err
    line = _last(err)
    assert line.startswith(f"mcf accuracy: error: checkpoint {d}") and message in line, err


def test_accuracy_checkpoint_not_a_directory(capsys, tmp_path):
    rc, out, err = _run(capsys, ["accuracy", "--checkpoint", str(tmp_path / "nowhere")])
    assert rc == 2 and f"checkpoint {tmp_path / 'nowhere'}: not a directory" in err


@pytest.mark.parametrize("name, message", [
    ("a b;", "--name 'a b;' is not a Verilog identifier"),
    ("1abc", "--name '1abc' is not a Verilog identifier"),
    ("a$b", "is not a Verilog identifier"),
    ("", "--name '' is not a Verilog identifier"),
    ("module", "--name 'module' is a Verilog reserved word"),
    ("x" * 2000, "is not a Verilog identifier"),
])
def test_verilog_name_must_be_an_identifier(capsys, name, message):
    rc, out, err = _run(capsys, ["verilog", "axis_register_slice", "--name", name])
    assert rc == 2 and message in err and "letter or _" in err and out == ""


@pytest.mark.parametrize("argv, message", [
    (["verilog", "nosuch"], "unknown block 'nosuch'"),
    (["verilog", "axis_register_slice", "--param", "data_width=0"], "with --param data_width=0: data_width"),
    (["verilog", "axis_register_slice", "--param", "data_width=-8"], "--param data_width=-8: integer"),
    (["verilog", "axis_register_slice", "--param", "data_width"], "must be written key=value"),
    (["verilog", "axis_register_slice", "--param", "nope=1"], "has no parameter 'nope'"),
    (["verilog", "axis_register_slice", "-o", "/nonexistent-dir/x.v"], "-o /nonexistent-dir/x.v: cannot write"),
])
def test_verilog_bad_input(capsys, argv, message):
    rc, out, err = _run(capsys, argv)
    assert rc == 2 and message in err and err.count("\n") == 1, err


@pytest.mark.filterwarnings("ignore:.*created but never used")
def test_verilog_toolchain_failure_is_a_runtime_error(capsys, monkeypatch):
    from mcf_fpga.hdl import verilog

    class YosysError(Exception):
        pass

    def fail(*a, **k):
        raise YosysError("ERROR: Parser error in line 3: syntax error")
    monkeypatch.setattr(verilog, "to_verilog", fail)
    rc, out, err = _run(capsys, ["verilog", "axis_register_slice"])
    assert rc == 1 and "Yosys failed to export block 'axis_register_slice'" in err and "syntax error" in err


MANIFESTS = [
    ("[]", "expected a JSON object with fields app"),
    ("{}", "missing field 'app'"),
    ('{"app": 3, "axil_size": 65536}', "field 'app' is 3, expected a string"),
    ('{"app": "mcf", "axil_size": true}', "field 'axil_size' is true"),
    ('{"app": "mcf", "axil_size": 1000}', "field 'axil_size' is 1000, expected a power of two"),
    ('{"app": "../x", "axil_size": 65536}', "no path characters"),
    ("{", "not valid JSON"),
]


@pytest.mark.parametrize("command, manifest, message",
                         [("package", m, e) for m, e in MANIFESTS]
                         + [("flash", m, e) for m, e in MANIFESTS if "axil_size" not in e])   # flash reads app only
def test_package_and_flash_check_the_manifest(capsys, tmp_path, command, manifest, message):
    (tmp_path / "manifest.json").write_text(manifest)
    argv = [command, "-d", str(tmp_path)] + (["--host", "u@h", "--dry-run"] if command == "flash" else [])
    rc, out, err = _run(capsys, argv)
    assert rc == 2 and message in err and err.count("\n") == 1, err
    if "app" not in message and "JSON" not in message and "path" not in message:
        assert "manifest.json" in err


def test_ctrl_c_exits_130_quietly(capsys, monkeypatch):
    import mcf_fpga.host.commands.verilog as v

    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(v, "run", interrupted)
    rc, out, err = _run(capsys, ["verilog", "--list"])
    assert rc == 130 and err == "mcf verilog: interrupted\n" and out == ""


def test_unexpected_error_is_one_line_with_a_hint(capsys, monkeypatch):
    import mcf_fpga.host.commands.verilog as v

    def broken(args):
        return 1 // 0
    monkeypatch.setattr(v, "run", broken)
    rc, out, err = _run(capsys, ["verilog", "--list"])
    assert rc == 1 and err.count("\n") == 1
    assert "mcf verilog: internal error: ZeroDivisionError" in err and "MCF_TRACEBACK=1" in err
    monkeypatch.setenv("MCF_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        main(["verilog", "--list"])


@pytest.mark.parametrize("exc, code", [
    (ValueError("x"), 2), (OSError("x"), 1), (RuntimeError("x"), 1), (MemoryError(), 1),
])
def test_exit_code_classes(capsys, monkeypatch, exc, code):
    import mcf_fpga.host.commands.verilog as v

    def fail(args):
        raise exc
    monkeypatch.setattr(v, "run", fail)
    rc, out, err = _run(capsys, ["verilog", "--list"])
    assert rc == code and err.startswith("mcf verilog: error:") and err.count("\n") == 1


def test_usage_errors_from_argparse_are_one_line(capsys):
    rc, out, err = _run(capsys, ["run", "--no-such-option"])
    assert rc == 2 and err.count("\n") == 1 and "--no-such-option" in err
    rc, out, err = _run(capsys, [])
    assert rc == 2 and err.count("\n") == 1
    rc, out, err = _run(capsys, ["run", "--help"])
    assert rc == 0 and "--kv-headroom" in out


def test_sigint_in_a_real_process_exits_130_quietly():
    """Ctrl-C during the work of a real ``mcf`` process: exit 130, one line, no traceback."""
    import signal
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root)
    env.pop("MCF_TRACEBACK", None)
    proc = subprocess.Popen([sys.executable, "-m", "mcf_fpga.host.cli", "accuracy", "--model", "tiny", "--prompt-len", "2000",
                             "--max-new-tokens", "2000"], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()         # the banner: the model is built, work under way
        assert first.startswith("[mcf accuracy]"), first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert err == "mcf accuracy: interrupted\n" and "Traceback" not in out


def test_run_refuses_a_kv_pool_larger_than_the_simulated_node_before_building(capsys):
    rc, out, err = _run(capsys, ["run", "--prompt-len", "1000", "--kv-headroom", "4", "--nodes", "4",
                                 "--no-progress"])
    assert rc == 2 and "the KV pool needs 128 slots per node, the simulated node has 48" in err
    assert "--prompt-len" in _last(err) and "[mcf run]" not in err


def test_accuracy_huge_prompt_refused_by_memory_before_allocation(capsys, checkpoint, tmp_path):
    """A checkpoint claiming 10^12 positions: --prompt-len 1e9 passes max_position but not the
    machine's memory (the causal mask alone), and is refused before anything is allocated."""
    from tests.host._checkpoint import edit_config
    d = copy_checkpoint(checkpoint, tmp_path / "c")
    edit_config(d, max_position_embeddings=10 ** 12)
    rc, out, err = _run(capsys, ["accuracy", "--checkpoint", str(d), "--prompt-len", "1e9"])
    assert rc == 2 and "--prompt-len + --max-new-tokens = 1000000008 tokens" in err and "GiB" in err


def _project_errors():
    from mcf_fpga.host.board.node_hw import BoardError
    from mcf_fpga.host.board.remote import BoardConnectionError
    from mcf_fpga.host.executors.runtime import ExecError
    from mcf_fpga.sim.cocotb_runner import CocotbBuildError
    from mcf_fpga.sim.verilator import VerilatorBuildError
    return [ExecError, BoardError, BoardConnectionError, VerilatorBuildError, CocotbBuildError]


@pytest.mark.parametrize("cls", _project_errors(), ids=lambda c: c.__name__)
def test_project_runtime_errors_are_one_line_exit_1(capsys, monkeypatch, cls):
    """The project's own failure classes, raised where the work happens: one line, exit 1."""
    import mcf_fpga.host.executors as executors

    def fail(*a, **k):
        raise cls(f"{cls.__name__} planted\nsecond line of detail")
    monkeypatch.setattr(executors, "run", fail)
    rc, out, err = _run(capsys, ["run", "--backend", "rtl", "--layers", "1", "--nodes", "2", "--prompt-len", "24",
                                 "--max-new-tokens", "1", "--no-progress", "--schedules", "mars"])
    line = _last(err)
    assert rc == 1 and line.startswith("mcf run: error:") and f"{cls.__name__} planted" in line, err
    assert "[1 more line: MCF_TRACEBACK=1 shows them]" in line and "second line" not in err
    assert "internal error" not in err
