"""The audit trail through pyarrow.flight: an auditor reads `_system.audit` and finds
the analyst's reads, while the analyst is denied the audit table. The Rust test
`pyarrow_client` sets HOTGATE_AUDITOR_TOKEN (principal `ann`, whose only grant is
TABLE_READ_DATA on `_system.audit`), HOTGATE_ANALYST_TOKEN (`py_analyst`, who may read
namespace `gov`) and HOTGATE_ADMIN_TOKEN.
"""

import datetime as dt
import json
import os
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pytest

from hotgate_client import FLIGHT, create_table, get, put, table

ADMIN = os.environ["HOTGATE_ADMIN_TOKEN"]
ANALYST = os.environ["HOTGATE_ANALYST_TOKEN"]
AUDITOR = os.environ["HOTGATE_AUDITOR_TOKEN"]

PROBE = table("gov", "audit_probe", ["id int64!", "ts timestamp_us!"], time_column="ts", bucket_key="id", buckets=1)


@pytest.fixture(scope="module")
def client():
    create_table(PROBE, ADMIN)
    c = flight.FlightClient(FLIGHT)
    start = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.timezone.utc)
    rows = pa.table(
        {
            "id": pa.array(range(7), pa.int64()),
            "ts": pa.array([start + dt.timedelta(seconds=i) for i in range(7)], pa.timestamp("us", tz="UTC")),
        }
    )
    put(c, flight.FlightDescriptor.for_path("gov", "audit_probe"), rows, ADMIN)
    return c


def test_auditor_finds_the_analysts_reads_and_the_analyst_is_denied_the_audit(client):
    assert get(client, ANALYST, {"table": "gov.audit_probe", "columns": ["id"]}).num_rows == 7

    with pytest.raises(flight.FlightUnauthorizedError, match="TABLE_READ_DATA"):
        get(client, ANALYST, {"table": "_system.audit"})

    # The analyst's records: the scan (allowed), its completion, the denied audit read.
    # Denials and completions are written as the call ends, so look until they show.
    deadline = time.monotonic() + 20
    while True:
        rows = get(client, AUDITOR, {"table": "_system.audit", "filter": "principal = 'py_analyst'"}).to_pylist()
        scans = [r for r in rows if r["action"] == "scan" and r["table"] == "gov.audit_probe" and r["decision"] == "allow"]
        ends = [r for r in rows if scans and r["action"] == "end" and r["query_id"] == scans[0]["query_id"]]
        denied = [r for r in rows if r["table"] == "_system.audit" and r["decision"] == "deny"]
        if (scans and ends and denied) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(scans) == 1 and json.loads(scans[0]["columns_returned"]) == ["id"], rows
    assert len(ends) == 1 and ends[0]["rows"] == 7, rows
    assert denied and denied[0]["reason"].startswith("permission_denied"), rows
    # Each record is chained to the one before it.
    assert all(len(r["hash"]) == 64 and len(r["prev_hash"]) == 64 for r in rows)

    # The auditor's own read is on record too, and the auditor can read nothing else.
    mine = get(client, AUDITOR, {"table": "_system.audit", "filter": "principal = 'ann' AND action = 'scan'"})
    assert mine.num_rows >= 1
    assert pc.all(pc.equal(mine["table"], "_system.audit")).as_py()
    with pytest.raises(flight.FlightUnauthorizedError):
        get(client, AUDITOR, {"table": "gov.audit_probe"})
