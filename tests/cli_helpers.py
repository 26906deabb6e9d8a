"""Running ``mcf`` in-process from tests: ``cli(*argv)`` captures stdout/stderr itself;
``run(capsys, argv)`` uses pytest's capture and asserts no traceback; ``last_line(err)``."""
import contextlib
import io

from mcf_fpga.host.cli import main


def cli(*argv):
    """``(exit code, stdout, stderr)`` of ``mcf argv``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def run(capsys, argv):
    """``(exit code, stdout, stderr)`` of ``mcf argv`` under pytest's ``capsys``; never a traceback."""
    rc = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def last_line(err):
    lines = [l for l in err.splitlines() if l.strip()]
    return lines[-1] if lines else ""
