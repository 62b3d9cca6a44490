"""Shared helpers of the Python client tests: where the server is, call options with a
bearer token, and JSON over HTTP. The Rust test `pyarrow_client` sets the environment."""

import json
import os
import urllib.error
import urllib.request

import pyarrow.flight as flight

FLIGHT = os.environ["HOTGATE_FLIGHT"]
HTTP = os.environ["HOTGATE_HTTP"]


def options(token):
    return flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])


def http(method, path, token, body=None):
    request = urllib.request.Request(
        HTTP + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
