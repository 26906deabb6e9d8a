"""``mcf serve-board``: serve this node board to a coordinator's ``mcf run --backend board
--boards host:port,...`` (run it on every board of the cluster).

It opens the board it runs on (the ``mcf`` UIO register window of the loaded overlay, DMA
buffers, a clock of elapsed time) and serves its ``hw`` interface over TCP
(``host.board.board_server``; wire format ``host.board.rpc``) until interrupted. The handshake
key is the environment's ``MCF_BOARD_KEY`` (set the same on every host). With
``--simulate-boards N`` it serves N simulated boards (Verilated board tops linked as a ring)
on ports P..P+N-1 instead, to try a multi-board run on one machine.
"""
from __future__ import annotations

NAME = "serve-board"
HELP = "serve this node board to a coordinator (mcf run --backend board --boards ...)"


def add_arguments(p):
    from host.board.rpc import DEFAULT_PORT
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    p.add_argument("--bind", default="0.0.0.0", help="address to listen on (default 0.0.0.0: every interface)")
    p.add_argument("--simulate-boards", type=int, metavar="N",
                   help="serve N simulated boards (a ring) on ports PORT..PORT+N-1 instead of this board")
    p.add_argument("--idle-timeout", type=float, default=600.0,
                   help="drop a coordinator silent for this many seconds (default 600)")


def run(args) -> int:
    from host.board.board_server import BoardServer, SimBoardHost, log_stderr, open_local_endpoint
    from host.board.rpc import board_key
    n = 1 if args.simulate_boards is None else args.simulate_boards
    if not 1 <= args.port <= 65535 - (n - 1):
        raise ValueError(f"--port={args.port} must be in 1..{65535 - (n - 1)}")
    if args.idle_timeout <= 0:
        raise ValueError(f"--idle-timeout={args.idle_timeout} must be > 0")
    if args.simulate_boards is not None:
        from host.executors.rtl import sim_node_config
        if args.simulate_boards < 2:
            raise ValueError(f"--simulate-boards={args.simulate_boards} must be >= 2 (a ring)")
        endpoints = SimBoardHost(n, "ring", sim_node_config("ring")).endpoints
    else:
        endpoints = [open_local_endpoint()]
    server = BoardServer(endpoints, bind=args.bind, ports=range(args.port, args.port + n),
                         idle_timeout=args.idle_timeout, log=log_stderr)
    if not board_key():
        log_stderr("MCF_BOARD_KEY is not set: any host that reaches this port can drive the board")
    for ep, (host, port) in zip(endpoints, server.addresses):
        log_stderr(f"board {ep.name} ({ep.clock_kind} clock) listening on {host}:{port}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
