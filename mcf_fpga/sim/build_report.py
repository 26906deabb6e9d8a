"""Who is told about Verilator builds that are not in the cache (no imports: the ``mcf``
command installs a reporter without loading the simulator).

``reporter(phase, done, total)``: phase "export" (the Verilog export starts), "verilate"
(Verilator translates), "compile" (``done`` of about ``total`` C++ objects built; polled twice a
second) and "done". None: silent.
"""
_reporter = None


def set_build_reporter(fn):
    """Install ``fn`` as the build reporter (None: none); returns the previous one."""
    global _reporter
    prev, _reporter = _reporter, fn
    return prev


def report(phase, done=0, total=0):
    if _reporter is not None:
        _reporter(phase, done, total)
