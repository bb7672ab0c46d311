# SPDX-License-Identifier: Apache-2.0
# Copyright: sparkops.vllm contributors
"""ib_write_bw's report, parsed from real captured outputs."""

from __future__ import annotations

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _perftest as perftest

# linux-rdma/perftest issue #273 (2024-08): ib_write_bw -D 60 --report_gbits, RoCE (Link type Ethernet).
GBITS_DURATION = """\
                    RDMA_Write Post List BW Test
 Dual-port       : OFF\t\tDevice         : ib0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 PCIe relax order: Unsupported
 ibv_wr* API     : OFF
 TX depth        : 256
 Post List       : 128
 CQ Moderation   : 128
 Mtu             : 4096[B]
 Link type       : Ethernet
 GID index       : 2
 Max inline data : 0[B]
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 8          224958464        0.00               0.48   \t\t   7.498617
---------------------------------------------------------------------------------------
"""

# openucx/ucx issue #8851 (2023-02): ib_read_bw -a -F (MB/sec, one row per size; the same
# report code as ib_write_bw, perftest_parameters.c print_report_bw).
MBYTES_ALL_SIZES = """\
---------------------------------------------------------------------------------------
                    RDMA_Read BW Test
 Dual-port       : OFF          Device         : mlx5_1
 Number of qps   : 1            Transport type : IB
 Connection type : RC           Using SRQ      : OFF
 PCIe relax order: ON
 ibv_wr* API     : ON
 TX depth        : 128
 CQ Moderation   : 100
 Mtu             : 4096[B]
 Link type       : IB
 Outstand reads  : 16
 rdma_cm QPs     : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 local address: LID 0x06 QPN 0x0d02 PSN 0xc8533e OUT 0x10 RKey 0x080585 VAddr 0x007f41cb03a000
 remote address: LID 0x05 QPN 0x0d24 PSN 0x10b156 OUT 0x10 RKey 0x0805b9 VAddr 0x007f99dfba7000
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 2          1000             4.86               4.67               2.450225
 4          1000             9.72               9.71               2.546339
 8          1000             19.51              19.50              2.556366
 16         1000             38.98              38.95              2.552526
 32         1000             77.87              77.83              2.550328
 64         1000             155.40             155.39             2.545853
 128        1000             310.13             310.05             2.539960
"""

# linux-rdma/perftest issue #234 (2023-12): the server side of ib_write_bw -D 10 -d mlx5_0 on
# RoCE, up to the header; the issue is about the row that followed, cut here.
HEADER_ONLY = """\
************************************
* Waiting for client to connect... *
************************************
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
 PCIe relax order: ON
 ibv_wr* API     : ON
 CQ Moderation   : 1
 Mtu             : 4096[B]
 Link type       : Ethernet
 GID index       : 3
 Max inline data : 0[B]
 rdma_cm QPs\t : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 local address: LID 0000 QPN 0x0108 PSN 0x63ad7d RKey 0x17eedf VAddr 0x007f760c947000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:255:255:05
 remote address: LID 0000 QPN 0x0076 PSN 0xf3810c RKey 0x201600 VAddr 0x007fbb4c981000
 GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:255:255:04
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
"""

# A client that cannot reach its server: perftest v4.5-0.17 src/perftest_communication.c's
# messages ("Couldn't connect to %s:%d", then "Unable to open file descriptor for socket
# connection"), printed before any header.
NO_SERVER = """\
Couldn't connect to 192.168.100.11:18515
Unable to open file descriptor for socket connection"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            GBITS_DURATION,
            {
                "device": "ib0",
                "link_type": "Ethernet",
                "gid_index": 2,
                "mtu": 4096,
                "qps": 1,
                "unit": "Gb/sec",
                "rows": 1,
                "bw_average_gbps": 0.48,
                "bw_peak_gbps": 0.0,
                "last": {"bytes": 8, "iterations": 224958464, "msg_rate_mpps": 7.498617},
            },
        ),
        (
            MBYTES_ALL_SIZES,
            {
                "device": "mlx5_1",
                "link_type": "IB",
                "gid_index": None,
                "mtu": 4096,
                "qps": 1,
                "unit": "MB/sec",
                "rows": 7,
                # 310.05 MB/sec of 2**20 bytes, as Gb/s: 310.05 * 1048576 * 8 / 1e9.
                "bw_average_gbps": 2.6,
                "bw_peak_gbps": 2.6,
                "last": {"bytes": 128, "iterations": 1000, "msg_rate_mpps": 2.53996},
            },
        ),
    ],
)
def test_real_reports(text, expected):
    got = perftest.parse_bw(text)
    for key in ("device", "link_type", "gid_index", "mtu", "qps", "unit", "bw_average_gbps", "bw_peak_gbps"):
        assert got[key] == expected[key], key
    assert len(got["rows"]) == expected["rows"]
    last = got["rows"][-1]
    assert {key: last[key] for key in expected["last"]} == expected["last"]


def test_units_follow_perftest_format_factor():
    assert perftest.to_gbps(1.0, "Gb/sec") == 1.0
    assert perftest.to_gbps(1000.0, "MB/sec") == pytest.approx(8.388608)


@pytest.mark.parametrize(
    ("text", "message"),
    [(HEADER_ONLY, "no result row"), (NO_SERVER, "no ib_write_bw result header"), ("", "no ib_write_bw")],
)
def test_outputs_without_a_result_raise(text, message):
    with pytest.raises(perftest.PerftestError, match=message):
        perftest.parse_bw(text)


def test_argv_is_bounded_server_and_client():
    server = perftest.argv("rocep1s0f1", duration_seconds=5, message_bytes=65536)
    assert server == [
        "ib_write_bw",
        "-d",
        "rocep1s0f1",
        "-D",
        "5",
        "-s",
        "65536",
        "-p",
        "18515",
        "-F",
        "--report_gbits",
    ]
    client = perftest.argv(
        "roceP2p1s0f1",
        duration_seconds=5,
        message_bytes=65536,
        port=18600,
        server="192.168.100.11",
        gid_index=3,
    )
    assert client[-3:] == ["-x", "3", "192.168.100.11"]
    assert client[client.index("-p") + 1] == "18600"


@pytest.mark.parametrize(("duration", "size"), [(0, 65536), (61, 65536), (5, 0), (5, (8 << 20) + 1)])
def test_argv_refuses_unbounded_runs(duration, size):
    with pytest.raises(perftest.PerftestError, match=r"lower it|between"):
        perftest.argv("rocep1s0f1", duration_seconds=duration, message_bytes=size)
