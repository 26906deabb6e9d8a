"""Hypothesis drives ``mcf run --backend golden``, ``mcf accuracy`` and ``mcf verilog`` with
random argument vectors, and ``mcf accuracy --checkpoint`` with randomly corrupted checkpoint
directories: never a traceback, an exit code in {0, 1, 2}, and on failure a last line
``mcf <cmd>: error: ...`` naming the offending option, file or field.

Sizes stay tiny (the micro model, one layer, prompts of a few dozen tokens) and most random
values are invalid, which fail before any work, so the file runs in about a minute."""
import contextlib
import io
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from mcf_fpga.host.cli import main
from tests.host._checkpoint import CORRUPTIONS, DROP, copy_checkpoint, edit_config, write_checkpoint

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

JUNK = ["0", "-1", "1e9", "1e400", "x", "", "nan", "inf", "-inf", "1.5", "99999999999999999999999", "0x10",
        "--", "true"]


def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _check(argv, rc, out, err, names):
    """The contract: no traceback, exit code 0/1/2, and on failure the last stderr line is the
    error and names one of ``names`` (options given, a file)."""
    assert "Traceback" not in out + err, (argv, err)
    assert rc in (0, 1, 2), (argv, rc, err)
    event(f"exit {rc}")
    if rc != 0:
        lines = [l for l in err.splitlines() if l.strip()]
        assert lines, (argv, rc, "no error message")
        last = lines[-1]
        assert last.startswith(f"mcf {argv[0]}: error: ") or "error:" in last, (argv, last)
        variants = set()
        for n in names:
            variants |= {n, n.lstrip("-"), n.lstrip("-").replace("-", "_")}
        assert any(v and v in last for v in variants), (argv, last, sorted(names))


def _opt(name, valid, junk=st.sampled_from(JUNK)):
    """None (option left out), or (name, value) with a valid or a junk value."""
    return st.one_of(st.none(), st.tuples(st.just(name), st.one_of(valid, junk)))


def _argv(options):
    argv = []
    for o in options:
        if o is not None:
            argv += [o[0], o[1]]
    return argv


# ---------------------------------------------------------------- mcf run --backend golden

RUN_OPTIONS = st.tuples(
    _opt("--nodes", st.sampled_from(["2", "3", "1", "65"])),
    _opt("--layers", st.sampled_from(["1", "3"])),
    _opt("--prompt-len", st.integers(1, 24).map(str) | st.sampled_from(["1024", "1e9"])),
    _opt("--max-new-tokens", st.sampled_from(["1", "2", "1000"])),
    _opt("--chunk", st.sampled_from(["8", "16", "4096"])),
    _opt("--block", st.sampled_from(["8", "16", "4096"])),
    _opt("--kv-headroom", st.sampled_from(["1", "1.5", "2", "5"])),
    _opt("--seed", st.sampled_from(["0", "7", str(2 ** 63)])),
    _opt("--schedules", st.sampled_from(["mars", "ring", "pd", "zigzag", "mars,ring", "bogus", ",", "mars,,x"])),
    _opt("--topology", st.sampled_from(["ring", "mesh", "star"])),
    _opt("--model", st.sampled_from(["micro", "nope", ""])),
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(RUN_OPTIONS, st.booleans())
def test_fuzz_run_golden(options, as_json):
    # one layer unless the example sets --layers; a prompt of 24 unless it sets --prompt-len
    given_names = {o[0] for o in options if o is not None}
    argv = ["run", "--backend", "golden", "--no-progress"] + (["--json"] if as_json else [])
    argv += [] if "--layers" in given_names else ["--layers", "1"]
    argv += [] if "--prompt-len" in given_names else ["--prompt-len", "24"]
    argv += [] if "--max-new-tokens" in given_names else ["--max-new-tokens", "1"]
    argv += [] if "--nodes" in given_names else ["--nodes", "2"]
    argv += _argv(options)
    rc, out, err = _cli(argv)
    names = {a for a in argv[1:] if a.startswith("--")}
    _check(argv, rc, out, err, names)
    if rc == 0 and as_json:
        res = json.loads(out)
        assert res["matches_golden"] is True and len(res["tokens"]) >= 1


# ---------------------------------------------------------------- mcf accuracy

TOKEN_FILES = st.one_of(
    st.lists(st.integers(-5, 300), max_size=12).map(lambda t: " ".join(map(str, t))),
    st.lists(st.one_of(st.integers(0, 255), st.booleans(), st.floats(allow_nan=True), st.text(max_size=3),
                       st.none(), st.lists(st.integers(0, 3), max_size=2)), max_size=8).map(json.dumps),
    st.text(max_size=40),
    st.binary(max_size=40),
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.tuples(
    _opt("--model", st.sampled_from(["micro", "nope"])),
    _opt("--layers", st.sampled_from(["1", "2", "3"])),
    _opt("--prompt-len", st.integers(1, 16).map(str) | st.sampled_from(["1024", "1e9"])),
    _opt("--max-new-tokens", st.sampled_from(["0", "1", "2", "1e8"])),
    _opt("--seed", st.sampled_from(["0", "3", str(2 ** 63)])),
    _opt("--kv-bits", st.sampled_from(["4", "8", "3"])),
), st.one_of(st.none(), TOKEN_FILES), st.booleans())
def test_fuzz_accuracy(options, tokens, as_json):
    given_names = {o[0] for o in options if o is not None}
    argv = ["accuracy"] + (["--json"] if as_json else [])
    argv += [] if "--model" in given_names else ["--model", "micro"]
    argv += [] if "--layers" in given_names else ["--layers", "1"]
    argv += [] if "--prompt-len" in given_names else ["--prompt-len", "12"]
    argv += [] if "--max-new-tokens" in given_names else ["--max-new-tokens", "1"]
    argv += _argv(options)
    with tempfile.TemporaryDirectory() as tmp:
        if tokens is not None:
            f = Path(tmp) / "tokens.txt"
            f.write_bytes(tokens if isinstance(tokens, bytes) else tokens.encode())
            argv += ["--prompt-tokens", str(f)]
        rc, out, err = _cli(argv)
    names = {a for a in argv[1:] if a.startswith("--")}
    _check(argv, rc, out, err, names)


# ---------------------------------------------------------------- mcf verilog

PARAMS = {"axis_register_slice": ["data_width", "user_width"], "axil_regfile": ["n_rw", "n_ro", "addr_width"]}


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["axis_register_slice", "axil_regfile", "nosuch", ""]),
       st.one_of(st.none(), st.sampled_from(["top", "my_slice", "_x1"]), st.text(max_size=12)),
       st.lists(st.tuples(st.sampled_from(["data_width", "user_width", "n_rw", "n_ro", "addr_width", "bogus", ""]),
                          st.one_of(st.sampled_from(["0", "8", "16", "32", "64", "12", "3"]),
                                    st.sampled_from(JUNK), st.text(max_size=4))), max_size=3),
       st.booleans())
def test_fuzz_verilog(block, name, params, to_file):
    argv = ["verilog"] + ([block] if block else [])
    for k, v in params:
        argv += [f"--param={k}={v}"] if k else [f"--param={v}"]
    if name is not None:
        argv += [f"--name={name}"]
    with tempfile.TemporaryDirectory() as tmp:
        if to_file:
            argv += ["-o", str(Path(tmp) / "out.v")]
        rc, out, err = _cli(argv)
        if rc == 0 and block:
            text = out if not to_file else (Path(tmp) / "out.v").read_text()
            assert f"module {name or block}" in text or f"module \\{name}" in text
    names = {"--param", "--name", "-o", "block"} | {k for k, _ in params if k}
    if block:
        names.add(block)
    _check(argv, rc, out, err, names)


# ---------------------------------------------------------------- corrupted checkpoints

@pytest.fixture(scope="module")
def base_checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("fuzz_ckpt") / "base")


CONFIG_FIELDS = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "max_position_embeddings", "rope_theta", "rms_norm_eps",
                 "tie_word_embeddings"]
CONFIG_VALUES = st.sampled_from([0, -1, 1, 2, 3, 64, 10 ** 12, None, "x", True, 1.5, float("nan"), [], {}, DROP])


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(corruptions=st.lists(st.sampled_from(sorted(CORRUPTIONS)), max_size=2, unique=True),
       fields=st.lists(st.tuples(st.sampled_from(CONFIG_FIELDS), CONFIG_VALUES), max_size=2),
       flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=3),
       cut=st.one_of(st.none(), st.floats(0, 1)))
def test_fuzz_corrupted_checkpoint(base_checkpoint, corruptions, fields, flips, cut):
    with tempfile.TemporaryDirectory() as tmp:
        d = copy_checkpoint(base_checkpoint, Path(tmp) / "ckpt")
        for c in corruptions + (["fields"] if fields else []):
            try:                     # a corruption may not apply to an already corrupted directory
                if c == "fields":
                    edit_config(d, **dict(fields))
                else:
                    CORRUPTIONS[c][0](d)
            except Exception:
                pass
        st_file = d / "model.safetensors"
        if st_file.exists() and (flips or cut is not None):
            data = bytearray(st_file.read_bytes())
            for where, byte in flips:
                if data:
                    data[int(where * len(data))] = byte
            if cut is not None:
                data = data[:int(cut * len(data))]
            st_file.write_bytes(bytes(data))
        argv = ["accuracy", "--checkpoint", str(d), "--prompt-len", "4", "--max-new-tokens", "1"]
        rc, out, err = _cli(argv)
    _check(argv, rc, out, err, {f"checkpoint {d}"})
    if rc != 0:
        assert rc == 2, err          # a bad checkpoint is the user's input
