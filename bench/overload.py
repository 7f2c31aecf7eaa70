"""Above capacity, seen from outside: how fast refusals come back, and what the admitted get.

    python bench/overload.py [--runs 1000] [--rates 250,500] [--seconds 8] [--variants edge]
    python bench/overload.py --quick             # 300 runs, 4 s at 250/s

Parks N runs (`wait "go"` -> task -> `wait "go"` ..., `signal_latency.WORKFLOW`) through the
API, then sends signals to random runs open loop (`rawclient.py`, 2 client processes, plain
sockets) at each rate, well above what the server can serve, and prints per rate: offered and
accepted (2xx) per second, refused (429/503, with Retry-After) and their latency p50/p99 from
the send, the accepted answers' p50/p99 from the scheduled send, client timeouts and
connection errors, accepted signals whose task push never reached the handler (lost work),
the server's CPU per answer (2xx and refusals, all threads, from `/proc`),
and the deepest accept queue seen. Variants (the same server restarted on the same database
with other settings): `edge` (as configured: the event loop refuses at the ASGI edge,
foliot/http/edge.py) and `nopeer` (no per-peer request bound). The front door (a thread
refusing before the loop) was removed in issue 20; its figures are in bench/README.md. The floor is the bare
quart-trio signal endpoint (`floor_app.py`) loaded closed-loop with `wrk` in the same run.
Target (issue 9): refusals p99 well under 1 s (<= 100 ms) at 2-4x capacity, admitted answers
bounded, no client timeouts, nothing accepted lost.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common as c
from bench import rawclient
from bench.signal_latency import WORKFLOW, drain, seed, send_open

VARIANTS: dict[str, dict[str, str]] = {"edge": {}, "nopeer": {"FOLIOT_PEER_MAX_REQUESTS": "0"}}


def phase(server: c.Foliot, key: str, run_ids: list[str], rate: float, args: Any, n: int) -> dict[str, Any]:
    targets = c.random_targets(run_ids, max(1, int(rate * args.seconds)), n)
    requests = [["POST", "/apps/bench/signals", {"runId": r, "name": "go"}, r] for r in targets]
    cpu0 = c.cpu_seconds(server.pid)
    results, wall, accept_q = send_open(server, key, requests, rate, args)
    cpu = c.cpu_seconds(server.pid) - cpu0
    if args.dump:
        Path(args.dump).mkdir(parents=True, exist_ok=True)
        (Path(args.dump) / f"phase{n}.json").write_text(json.dumps(results))
    s = c.summarize(results, wall)
    refused = [r[2] for r in results if r[3] in (429, 503)]
    s.update(
        rate=rate,
        refused=len(refused),
        refused_p50=c.pct(refused, 50),
        refused_max=max(refused, default=float("nan")),
        cpu_ms=1000 * cpu / max(1, s["ok"] + len(refused)),
        accept_q=accept_q,
        results=results,
    )
    return s


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--runs", type=int, default=1000, help="parked runs (started through the API)")
    parser.add_argument("--rates", default="250,500", help="offered signals/s, open loop")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each rate's timetable")
    parser.add_argument(
        "--variants", default="edge", help="edge (as configured), nopeer (FOLIOT_PEER_MAX_REQUESTS=0)"
    )
    parser.add_argument("--procs", type=int, default=2, help="client processes")
    parser.add_argument("--timeout", type=float, default=30.0, help="client timeout per signal, s")
    parser.add_argument("--lag-ms", type=int, default=0, help="FOLIOT_ADMISSION_LAG_MS for the server")
    parser.add_argument("--dump", default="", help="directory: write each phase's client results (JSON)")
    parser.add_argument("--quick", action="store_true", help="300 runs, 4 s at 250/s")
    args = c.parse_args(parser, runs=300, seconds=4.0, rates="250")
    rates = [float(r) for r in str(args.rates).split(",")]
    c.header(f"signals above capacity, open loop ({args.backend})", args)
    work = c.tmpdir("overload")
    cluster = c.pg_cluster() if args.backend == "postgres" else None
    handler = c.Handler(work)
    server = c.Foliot(
        c.database_url(args.backend, work, cluster),
        work,
        FOLIOT_PASSIVATE_AFTER_MS=3_600_000,
        FOLIOT_ADMISSION_LAG_MS=args.lag_ms,
    )
    server.start()
    key = server.setup_app([WORKFLOW], handler_url=handler.url)
    run_ids, took = seed(server, key, args.runs)
    notes = [f"{len(run_ids)} runs parked through the API in {took:.1f}s"]
    floor = c.Floor(work, key)
    body = {"runId": run_ids[0], "name": "go"}
    f = None
    if c.have_wrk():
        f = c.wrk_post(f"{floor.url}/apps/bench/signals", body, key, seconds=5, connections=16)
    floor_rps = f["rps"] if f else float("nan")
    # The machine's own noise: the bare floor answering open loop at half its closed-loop rate.
    half = floor_rps / 2 if floor_rps == floor_rps else rates[0] / 4
    count = max(1, int(half * args.seconds))
    floor_requests = [["POST", "/apps/bench/signals", body, i] for i in range(count)]
    fr, fwall = rawclient.run_open(
        floor.url, c.bearer(key), floor_requests, rate=half, procs=args.procs, timeout=args.timeout
    )
    fs = c.summarize(fr, fwall)
    floor.child.stop()
    rows = []
    n = 0
    for variant in args.variants.split(","):
        server.stop()
        for name in ("FOLIOT_PEER_MAX_REQUESTS",):
            server.env.pop(name, None)
        server.env.update(VARIANTS[variant])
        server.start()
        for rate in rates:
            n += 1
            load = f"{os.getloadavg()[0]:.1f}"
            s = phase(server, key, run_ids, rate, args, n)
            drain(handler, 30)
            _, s["no_push"] = c.to_task(s.pop("results"), handler.stats(arrivals=True)["arrivals"])
            rows.append(
                [
                    variant,
                    f"{rate:.0f}",
                    f"{s['ok'] / max(s['span'], 1e-9):.0f}",
                    f"{c.ratio(rate, floor_rps)}",
                    s["sent"],
                    s["ok"],
                    s["refused"],
                    f"{s['retry_after']}/{s['refused']}",
                    c.ms(s["refused_p50"]),
                    c.ms(s["refused_p99"]),
                    c.ms(s["refused_max"]),
                    c.ms(s["p50"]),
                    c.ms(s["p99"]),
                    s["timeouts"],
                    s["conn_errors"],
                    s["other"] + s["client_overrun"],
                    s["no_push"],
                    f"{s['cpu_ms']:.2f}",
                    f"{s['accept_q']:.0f}",
                    load,
                ]
            )
            if not server.alive():
                notes.append(f"{variant}: {server.death()}")
                break
    m = server.metrics()
    notes.append(
        f"floor: bare quart-trio signal endpoint, closed loop (wrk, 16 connections) {floor_rps:.0f}/s;"
        f" open loop at {half:.0f}/s (half that): p50 {c.ms(fs['p50'])} ms, p99 {c.ms(fs['p99'])} ms"
        f" ({fs['ok']} of {len(fr)} 2xx): the machine's own latency at this load;"
        f" handler duplicates {handler.stats()['duplicates']}"
    )
    notes.append(
        "refused by the latency gate (last variant's server): "
        f"{c.metric_sum(m, 'foliot_admission_refused_total')}"
    )
    server.stop()
    handler.child.stop()
    print(
        c.table(
            f"signals above capacity ({args.backend}; refusal ms from the send, accepted ms from the"
            " scheduled send; cpu = server CPU ms per answer (2xx or refusal), all threads)",
            [
                "variant",
                "offered/s",
                "accepted/s",
                "offered/floor",
                "sent",
                "2xx",
                "refused",
                "retry-after",
                "refused p50",
                "refused p99",
                "refused max",
                "2xx p50",
                "2xx p99",
                "timeout",
                "connerr",
                "other",
                "2xx no push",
                "cpu ms/answer",
                "accept q",
                "load avg",
            ],
            rows,
        )
    )
    for note in notes:
        print(" ", note)
    print("  target: refusals p99 <= 100 ms at 2-4x capacity, accepted bounded, no timeouts, no push lost")


if __name__ == "__main__":
    main()
