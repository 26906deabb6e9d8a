"""``mcf serve-board``: serve this node board to a coordinator's ``mcf run --backend board
--boards host:port,...`` (run it on every board of the cluster).

It opens the board it runs on (the ``mcf`` UIO register window of the loaded overlay, DMA
buffers, a clock of elapsed time) and serves its ``hw`` interface over TCP
(``host.board.board_server``; wire format ``host.board.rpc``) until interrupted. It listens on
127.0.0.1 unless ``--bind`` says otherwise; on any other address it refuses to start unless the
environment's ``MCF_BOARD_KEY`` (the same on every host) has at least 16 bytes
(docs/boards.md: running the server across boards safely). With ``--simulate-boards N`` it
serves N simulated boards (Verilated board tops linked as a ring) on ports P..P+N-1 instead, to
try a multi-board run on one machine.
"""
from __future__ import annotations

NAME = "serve-board"
HELP = "serve this node board to a coordinator (mcf run --backend board --boards ...)"


def add_arguments(p):
    from mcf_fpga.host.board.board_server import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CYCLES
    from mcf_fpga.host.board.rpc import DEFAULT_PORT, MIN_KEY_BYTES, Limits
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    p.add_argument("--bind", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; any other address "
                        f"needs MCF_BOARD_KEY of at least {MIN_KEY_BYTES} bytes)")
    p.add_argument("--simulate-boards", type=int, metavar="N",
                   help="serve N simulated boards (a ring) on ports PORT..PORT+N-1 instead of this board")
    p.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT,
                   help=f"drop a coordinator silent for this many seconds (default {DEFAULT_IDLE_TIMEOUT:g})")
    p.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
                   help=f"connections open at once per board; more are closed at once (default {DEFAULT_MAX_CONNECTIONS})")
    p.add_argument("--message-timeout", type=float, default=Limits.message_timeout,
                   help=f"seconds to receive or send one whole message (default {Limits.message_timeout:g})")
    p.add_argument("--max-cycles", type=int, default=DEFAULT_MAX_CYCLES,
                   help=f"cycles one step/tick request may ask for (default {DEFAULT_MAX_CYCLES}; "
                        f"the coordinator splits longer steps)")


def run(args) -> int:
    from mcf_fpga.host.board.board_server import BoardServer, SimBoardHost, log_stderr, open_local_endpoint
    from mcf_fpga.host.board.rpc import board_key
    n = 1 if args.simulate_boards is None else args.simulate_boards
    if not 1 <= args.port <= 65535 - (n - 1):
        raise ValueError(f"--port={args.port} must be in 1..{65535 - (n - 1)}")
    for name in ("idle_timeout", "message_timeout"):
        if not getattr(args, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)} must be > 0")
    for name in ("max_connections", "max_cycles"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 1")
    if args.simulate_boards is not None and args.simulate_boards < 2:
        raise ValueError(f"--simulate-boards={args.simulate_boards} must be >= 2 (a ring)")
    limits = dict(bind=args.bind, idle_timeout=args.idle_timeout, max_connections=args.max_connections,
                  message_timeout=args.message_timeout, max_cycles=args.max_cycles, log=log_stderr)
    BoardServer.check_key(board_key(), args.bind)        # before opening (or building) any board
    if args.simulate_boards is not None:
        from mcf_fpga.host.executors.rtl import sim_node_config
        endpoints = SimBoardHost(n, "ring", sim_node_config("ring")).endpoints
    else:
        endpoints = [open_local_endpoint()]
    server = BoardServer(endpoints, ports=range(args.port, args.port + n), **limits)
    if not board_key():
        log_stderr(f"MCF_BOARD_KEY is not set: any local user can drive the board (allowed on the "
                   f"loopback address {args.bind} only)")
    for ep, (host, port) in zip(endpoints, server.addresses):
        log_stderr(f"board {ep.name} ({ep.clock_kind} clock) listening on {host}:{port}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
