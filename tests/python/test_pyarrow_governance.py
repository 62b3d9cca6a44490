"""Governed reads through pyarrow.flight: an analyst sees filtered, masked rows; an
admin sees everything. The Rust test `pyarrow_client` sets HOTGATE_ADMIN_TOKEN (root,
principal role admin) and HOTGATE_ANALYST_TOKEN (a principal whose catalog role
`py_reader` may read namespace `gov`).
"""

import datetime as dt
import os

import pyarrow as pa
import pyarrow.flight as flight
import pytest

import hotgate_client
from hotgate_client import FLIGHT, create_table, get, options, put, table

ADMIN = os.environ["HOTGATE_ADMIN_TOKEN"]
ANALYST = os.environ["HOTGATE_ANALYST_TOKEN"]


def http(method, path, body=None, token=ADMIN):
    return hotgate_client.http(method, path, token, body)


PATIENTS = table(
    "gov",
    "patients",
    ["id int64!", "region string!", "email string #pii", "phone string #pii", "ts timestamp_us!"],
    time_column="ts",
    bucket_key="id",
    buckets=2,
)


@pytest.fixture(scope="module")
def client():
    create_table(PATIENTS, ADMIN)
    for policy in [
        {"id": "eu_only", "scope": {"table": "gov.patients"}, "to": ["py_reader"], "kind": "row_filter", "expr": "region = 'eu'"},
        {"id": "hash_email", "scope": {"tag": "pii"}, "to": ["py_reader"], "kind": "column_mask", "column": "email", "mask": "hash"},
        {"id": "phone_last4", "scope": {"namespace": "gov"}, "to": ["py_reader"], "kind": "column_mask", "column": "phone", "mask": "show_last_4"},
    ]:
        status, body = http("POST", "/v1/policies", policy)
        assert status == 201, body
    c = flight.FlightClient(FLIGHT)
    start = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.timezone.utc)
    rows = pa.table(
        {
            "id": pa.array(range(6), pa.int64()),
            "region": pa.array(["eu", "us"] * 3),
            "email": pa.array([f"p{i}@clinic.example" for i in range(6)]),
            "phone": pa.array([f"+1-555-01{i:02d}" for i in range(6)]),
            "ts": pa.array([start + dt.timedelta(seconds=i) for i in range(6)], pa.timestamp("us", tz="UTC")),
        }
    )
    put(c, flight.FlightDescriptor.for_path("gov", "patients"), rows, ADMIN)
    return c


def read(c, token, **extra):
    return get(c, token, {"table": "gov.patients", **extra}).sort_by("id")


def test_analyst_sees_masked_filtered_rows_and_admin_sees_all(client):
    analyst = read(client, ANALYST)
    assert analyst["id"].to_pylist() == [0, 2, 4]
    assert set(analyst["region"].to_pylist()) == {"eu"}
    emails = analyst["email"].to_pylist()
    assert all(len(e) == 64 and "@" not in e for e in emails)
    assert analyst["phone"].to_pylist() == ["****0100", "****0102", "****0104"]
    assert analyst.schema.field("email").type == pa.string()

    admin = read(client, ADMIN)
    assert admin["id"].to_pylist() == list(range(6))
    assert admin["email"].to_pylist()[0] == "p0@clinic.example"
    assert admin["phone"].to_pylist()[1] == "+1-555-0101"


def test_analyst_filters_see_masked_values(client):
    # The clear value is not an oracle: it matches nothing once masked.
    assert read(client, ANALYST, filter="email = 'p0@clinic.example'").num_rows == 0
    assert read(client, ANALYST, filter="phone = '****0102'")["id"].to_pylist() == [2]


def test_analyst_cannot_write_or_administer(client):
    table = pa.table({"id": pa.array([9], pa.int64())})
    writer, reader = client.do_put(flight.FlightDescriptor.for_path("gov", "patients"), table.schema, options(ANALYST))
    with pytest.raises(flight.FlightUnauthorizedError, match="TABLE_WRITE_DATA"):
        writer.write_table(table)
        writer.done_writing()
        reader.read()
        writer.close()
    status, body = http("GET", "/v1/policies", token=ANALYST)
    assert status == 403, body
