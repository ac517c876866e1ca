"""The wrk block (bench/wrk.py): pgbench runs the engine's own renewal for each client, wrk's script
gives each thread its own client, and both tools' outputs are read as they print them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection

from bench import wrk
from leases import services as lease_services

WRK_OUTPUT = """Running 8s test @ http://127.0.0.1:40000/api/v1/leases/renew
  16 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    13.52ms   10.01ms 118.20ms   80.12%
    Req/Sec    66.10     20.33   130.00     68.00%
  Latency Distribution
     50%   11.10ms
     75%   16.02ms
     90%   24.40ms
     99%   48.90ms
  8421 requests in 8.01s, 4.40MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:   1051.31
Transfer/sec:    562.18KB
"""


def _fixtures(workspace_id: int, clients: int) -> dict[str, object]:
    return {
        "workspace_id": workspace_id,
        "clients": [
            {
                "hand": f"bench-{i}",
                "key": f"gc_key{i}.secret{i}",
                "process_id": f"bench:{i}",
                "resource": f"bench/renew/{i}",
                "fence": 1,
            }
            for i in range(clients)
        ],
    }


def test_wrk_output_is_read_with_its_units_and_every_kind_of_error() -> None:
    figure = wrk.parse_wrk(WRK_OUTPUT)
    assert figure.ops_per_s == pytest.approx(1051.31)
    assert figure.p50_ms == pytest.approx(11.10) and figure.p99_ms == pytest.approx(48.90)
    assert figure.errors == 4 + 2 + 1 and figure.requests == 8421
    slow = WRK_OUTPUT.replace("48.90ms", "1.20s").replace("11.10ms", "900.00us")
    assert wrk.parse_wrk(slow).p99_ms == pytest.approx(1200.0)
    assert wrk.parse_wrk(slow).p50_ms == pytest.approx(0.9)


def test_each_wrk_thread_takes_its_own_clients_key_and_lease() -> None:
    script = wrk.lua(_fixtures(7, 3), 3)
    for i in range(3):
        assert f'key = "gc_key{i}.secret{i}"' in script
        assert f'\\"resource\\": \\"bench/renew/{i}\\"' in script
    assert 'thread:set("me", taken)' in script


def test_pgbench_log_lines_give_the_percentiles(tmp_path: Path) -> None:
    log = tmp_path / "pgbench_log.1"
    # client_id transaction_no latency_us script_no epoch epoch_us, as pgbench -l writes them
    log.write_text("".join(f"0 {n} {1000 * (n + 1)} 0 1700000000 {n}\n" for n in range(100)))
    output = "tps = 2500.5 (without initial connection time)\nnumber of failed transactions: 0"
    figure = wrk.parse_pgbench(output, [log])
    assert figure.ops_per_s == pytest.approx(2500.5) and figure.errors == 0
    assert figure.p50_ms == pytest.approx(51.0) and figure.p99_ms == pytest.approx(99.0)


@pytest.mark.django_db
def test_the_pgbench_script_is_the_engines_renewal_of_each_clients_own_lease(workspace) -> None:  # noqa: ANN001
    fixtures = _fixtures(workspace.pk, 3)
    for me in fixtures["clients"]:  # type: ignore[union-attr]
        lease_services.lease_acquire(
            workspace_id=workspace.pk,
            resource=me["resource"],
            holder=me["hand"],
            process_id=me["process_id"],
            ttl_s=3600,
        )
    script = wrk.pgbench_script(fixtures, 3)
    assert script.count(":client_id") == 3  # the node, the holder and the process
    for client in range(3):
        # What pgbench sends for this client, with its :client_id in place.
        sql = script.replace(":client_id", str(client)).rstrip().rstrip(";")
        with connection.cursor() as cursor:
            cursor.execute(sql)
            row = cursor.fetchone()
            columns = [column.name for column in cursor.description or []]
        assert row is not None, client
        renewed = dict(zip(columns, row, strict=True))
        assert renewed["resource"] == f"bench/renew/{client}"
        assert renewed["holder"] == f"bench-{client}"
    # Another client's process does not renew it: each client renews only its own lease.
    stranger = re.sub(
        r"CAST\('bench:' AS text\) \|\| CAST\(:client_id AS text\)", "'bench:9'", script
    )
    with connection.cursor() as cursor:
        cursor.execute(stranger.replace(":client_id", "0").rstrip().rstrip(";"))
        assert cursor.fetchone() is None


def test_a_value_pgbench_cannot_derive_from_its_client_number_is_refused() -> None:
    with pytest.raises(ValueError, match="client_id"):
        wrk._per_client(["a", "b", "c"])
    assert wrk._per_client([5, 5, 5]) == "5"
    assert wrk._per_client(["o'k", "o'k"]) == "'o''k'"
