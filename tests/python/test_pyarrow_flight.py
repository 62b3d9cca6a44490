"""The README walk-through, done with pyarrow.flight against a running hotgate.

The Rust test `pyarrow_client` starts the server and sets HOTGATE_FLIGHT, HOTGATE_HTTP and
HOTGATE_TOKEN.
"""

import datetime as dt
import decimal
import json
import os

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import hotgate_client
from hotgate_client import FLIGHT

TOKEN = os.environ["HOTGATE_TOKEN"]


def options(token=TOKEN):
    return hotgate_client.options(token)


def http(method, path, body=None):
    return hotgate_client.http(method, path, TOKEN, body)


ORDERS = hotgate_client.log_table(
    "sales.orders",
    ["order_id string!", "customer_id int64!", "amount decimal(12,2)", "ts timestamp_us!"],
    "customer_id", 8, hot_retention="1h",
)


@pytest.fixture(scope="module")
def client():
    hotgate_client.create_table(ORDERS, TOKEN)
    return flight.FlightClient(FLIGHT)


def orders(n):
    start = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.timezone.utc)
    return pa.table(
        {
            "order_id": pa.array([f"o-{i}" for i in range(n)], pa.string()),
            "customer_id": pa.array([i % 13 for i in range(n)], pa.int64()),
            "amount": pa.array([decimal.Decimal(i) + decimal.Decimal("0.25") for i in range(n)], pa.decimal128(12, 2)),
            "ts": pa.array([start + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("us", tz="UTC")),
        }
    )


def test_put_then_get_with_projection_and_filter(client):
    results = hotgate_client.put(client, flight.FlightDescriptor.for_path("sales", "orders"), orders(100), TOKEN)
    assert sum(r["rows"] for r in results) == 100

    ticket = {"table": "sales.orders", "columns": ["order_id", "amount"], "filter": "amount > 90"}
    got = client.do_get(flight.Ticket(json.dumps(ticket).encode()), options()).read_all()
    assert got.column_names == ["order_id", "amount"]
    assert sorted(got["order_id"].to_pylist()) == sorted(f"o-{i}" for i in range(90, 100))
    assert got["amount"].type == pa.decimal128(12, 2)

    ticket = {"table": "sales.orders", "columns": ["order_id"], "since": "2026-11-30T09:00:10Z", "until": "2026-11-30T09:00:20Z"}
    got = client.do_get(flight.Ticket(json.dumps(ticket).encode()), options()).read_all()
    assert sorted(got["order_id"].to_pylist()) == sorted(f"o-{i}" for i in range(10, 20))

    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps({"table": "sales.orders"})), options())
    assert info.schema.names == ["order_id", "customer_id", "amount", "ts"]
    rows = sum(client.do_get(e.ticket, options()).read_all().num_rows for e in info.endpoints)
    assert rows == 100


def test_errors_reach_pyarrow_as_flight_errors(client):
    with pytest.raises(flight.FlightUnauthenticatedError):
        client.do_get(flight.Ticket(b'{"table":"sales.orders"}')).read_all()
    # pyarrow raises InvalidArgument statuses as ArrowInvalid.
    with pytest.raises(pa.ArrowInvalid, match="filter"):
        ticket = {"table": "sales.orders", "filter": "amount >"}
        client.do_get(flight.Ticket(json.dumps(ticket).encode()), options()).read_all()
    bad = pa.table({"order_id": pa.array(["x"]), "ts": pa.array([dt.datetime.now(dt.timezone.utc)], pa.timestamp("us", tz="UTC"))})
    writer, reader = client.do_put(flight.FlightDescriptor.for_path("sales", "orders"), bad.schema, options())
    with pytest.raises(pa.ArrowInvalid, match="customer_id"):
        writer.write_table(bad)
        writer.done_writing()
        reader.read()
        writer.close()
