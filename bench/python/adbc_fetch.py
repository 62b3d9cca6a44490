"""Part of `hotgate-bench reads`: the wide table fetched by real clients from PyPI, in
one process, interleaved:

- `adbc`: the ADBC Flight SQL driver (DB-API), `SELECT <columns> FROM bench.wide`,
  `cursor.execute` then `fetch_arrow_table` on one open connection;
- `flight_sql_pyarrow`: the same statement as a Flight SQL command sent by
  pyarrow.flight (`GetFlightInfo`, then `DoGet` of each endpoint): hotgate's SQL path
  without the driver, which tells the driver's share;
- `json_ticket`: pyarrow.flight's DoGet of hotgate's JSON ticket of the same columns;
- `bare_flight`: the same ticket from the bench's bare arrow-flight server.

Arguments come from the bench (see `bench/src/sql.rs`): the hotgate and bare Flight
addresses, the column lists as JSON and the runs; the bearer token comes in
HOTGATE_BENCH_TOKEN, not on the command line. Prints JSON lines
with medians per path and the ratios; the bench quotes them.
"""

import argparse
import json
import os
import statistics
import time

import adbc_driver_flightsql.dbapi as flight_sql
import pyarrow.flight as flight
from adbc_driver_flightsql import DatabaseOptions


def _field(number, payload):
    """A protobuf length-delimited field (wire type 2)."""
    key, length, out = (number << 3) | 2, len(payload), bytearray()
    out.append(key)
    while True:
        byte, length = length & 0x7F, length >> 7
        out.append(byte | (0x80 if length else 0))
        if not length:
            return bytes(out) + payload


def statement_command(sql):
    """`Any(CommandStatementQuery{query})`, the descriptor ADBC sends for a statement."""
    query = _field(1, sql.encode())
    type_url = b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery"
    return _field(1, type_url) + _field(2, query)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hotgate", required=True, help="host:port of hotgate's Flight port")
    parser.add_argument("--bare", required=True, help="host:port of the bare Flight server")
    parser.add_argument("--columns", required=True, help="JSON: a list of column lists")
    parser.add_argument("--of", type=int, required=True)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    header = f"Bearer {os.environ['HOTGATE_BENCH_TOKEN']}"
    ours = flight.connect(f"grpc://{args.hotgate}")
    bare = flight.connect(f"grpc://{args.bare}")
    options = flight.FlightCallOptions(headers=[(b"authorization", header.encode())])
    summary = {"bench": "adbc_read_summary", "target_adbc_over_json": 0.9}
    with flight_sql.connect(
        f"grpc://{args.hotgate}",
        db_kwargs={DatabaseOptions.AUTHORIZATION_HEADER.value: header},
    ) as conn:
        for names in json.loads(args.columns):
            sql = "SELECT {} FROM bench.wide".format(", ".join(f'"{c}"' for c in names))
            ticket = flight.Ticket(json.dumps({"table": "bench.wide", "columns": names}))
            command = flight.FlightDescriptor.for_command(statement_command(sql))
            secs = {"adbc": [], "flight_sql_pyarrow": [], "json_ticket": [], "bare_flight": []}
            rows = {}
            # One unmeasured round warms each path's connection.
            for run in range(args.runs + 1):
                started = time.perf_counter()
                with conn.cursor() as cur:
                    cur.execute(sql)
                    rows["adbc"] = cur.fetch_arrow_table().num_rows
                took = {"adbc": time.perf_counter() - started}
                started = time.perf_counter()
                info = ours.get_flight_info(command, options)
                rows["flight_sql_pyarrow"] = sum(
                    ours.do_get(e.ticket, options).read_all().num_rows for e in info.endpoints
                )
                took["flight_sql_pyarrow"] = time.perf_counter() - started
                started = time.perf_counter()
                rows["json_ticket"] = ours.do_get(ticket, options).read_all().num_rows
                took["json_ticket"] = time.perf_counter() - started
                started = time.perf_counter()
                rows["bare_flight"] = bare.do_get(ticket).read_all().num_rows
                took["bare_flight"] = time.perf_counter() - started
                if run > 0:
                    for path, s in took.items():
                        secs[path].append(s)
            if len(set(rows.values())) != 1:
                raise SystemExit(f"row counts differ: {rows}")
            medians = {path: statistics.median(s) for path, s in secs.items()}
            n = rows["adbc"]
            for path, m in medians.items():
                print(json.dumps({"bench": "adbc_read", "path": path, "columns": len(names),
                                  "of": args.of, "rows": n, "median_s": m,
                                  "rows_per_s": n / m}))
            summary[f"adbc_over_json_{len(names)}_of_{args.of}"] = medians["json_ticket"] / medians["adbc"]
            summary[f"flight_sql_pyarrow_over_json_{len(names)}_of_{args.of}"] = (
                medians["json_ticket"] / medians["flight_sql_pyarrow"]
            )
            summary[f"adbc_over_bare_{len(names)}_of_{args.of}"] = medians["bare_flight"] / medians["adbc"]
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
