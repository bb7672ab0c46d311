"""NCCL's GID choice per device (ncclIbGetGidIndex, NCCL v2.28.9-1) and the pinned-index check.

The GID tables are those of public reports (each row names its source), as sysfs lists
them: ``(gid, type)`` by index, None for an empty slot.
"""

import hypothesis.strategies as st
import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _nccl_gid
from hypothesis import given

V1, V2 = "IB/RoCE v1", "RoCE v2"


def port(table, number=1):
    return {
        "port": number,
        "gids": [
            {"index": i, "gid": gid, "type": kind}
            for i, entry in enumerate(table)
            if entry
            for gid, kind in [entry]
        ],
        "gid_table_len": len(table),
    }


def device(name, table):
    return {"name": name, "ports": [port(table)]}


# IBM/SpectrumScale_NETWORK_READINESS PR #4: `show_gids mlx5_0` on a ConnectX-6, two
# link-local pairs before the IPv4 pair.
CX6_TWO_LINK_LOCALS = [
    ("fe80::e42:a1ff:fe5d:4db8", V1),
    ("fe80::e42:a1ff:fe5d:4db8", V2),
    ("fe80::1186:a6b1:3f0b:c441", V1),
    ("fe80::1186:a6b1:3f0b:c441", V2),
    ("::ffff:172.19.0.60", V1),
    ("::ffff:172.19.0.60", V2),
]
# kvcache-ai/Mooncake #1617: `show_gids` rocep105s0, RoCE v2 only, IPv6 only.
V2_IPV6_ONLY = [
    ("fe80::690:81ff:fe39:e3e8", V2),
    ("fd93:16d3:59b6:10d:690:81ff:fe39:e3e8", V2),
]
# A Spark's cabled port in mlx5's layout: link-local v1/v2 at 0/1, the IPv4 pair at 2/3
# ("GID3=RoCEv2 ::ffff" on rocep1s0f1: MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks PR #103).
SPARK_PRIMARY = [
    ("fe80::3", V1),
    ("fe80::3", V2),
    ("::ffff:192.168.200.12", V1),
    ("::ffff:192.168.200.12", V2),
    None,
]
# Its twin: netplan addresses ib_interface only, so no IPv4 pair.
SPARK_TWIN = [("fe80::4", V1), ("fe80::4", V2), None, None, None]
# The same port after a second link-local address arrived before the IPv4 one (the
# 3 -> 4 index drift of FujitsuPolycom/sparkring #186; here it moves to 5).
SPARK_PRIMARY_DRIFTED = [
    ("fe80::3", V1),
    ("fe80::3", V2),
    ("fe80::33", V1),
    ("fe80::33", V2),
    ("::ffff:192.168.200.12", V1),
    ("::ffff:192.168.200.12", V2),
]


@pytest.mark.parametrize(
    ("table", "kwargs", "index"),
    [
        (CX6_TWO_LINK_LOCALS, {}, 5),
        (V2_IPV6_ONLY, {}, 0),
        # NCCL_IB_ADDR_FAMILY=AF_INET6: the global address beats the link-local one.
        (V2_IPV6_ONLY, {"family": "AF_INET6"}, 1),
        (SPARK_PRIMARY, {}, 3),
        (SPARK_TWIN, {}, 0),
        (SPARK_PRIMARY_DRIFTED, {}, 5),
        # NCCL_IB_ROCE_VERSION_NUM=1: the IPv4 entry of version 1.
        (SPARK_PRIMARY, {"roce_version": 1}, 2),
        # NCCL_IB_ADDR_RANGE that the address is not in: index 0 stays.
        (SPARK_PRIMARY, {"addr_range": "10.0.0.0/8"}, 0),
        (SPARK_PRIMARY, {"addr_range": "192.168.200.0/24"}, 3),
        ([], {}, 0),
    ],
)
def test_nccl_gid_index_on_real_tables(table, kwargs, index):
    assert _nccl_gid.nccl_gid_index(port(table), **kwargs) == index


@pytest.mark.parametrize(
    ("gid", "family", "valid"),
    [
        ("::ffff:192.168.200.12", "AF_INET", True),
        ("ff0e::ffff:e000:1", "AF_INET", True),
        ("fe80::3", "AF_INET6", False),
        ("fe80::", "AF_INET6", False),
        ("fd00::12", "AF_INET6", True),
        ("::", "AF_INET6", False),
        (None, "AF_INET6", False),
    ],
)
def test_gid_family_and_validity_follow_nccl(gid, family, valid):
    assert _nccl_gid.gid_family(gid) == family
    assert _nccl_gid.gid_valid(gid) is valid


ENTRY = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(["fe80::1", "fe80::2", "fd00::5", "::ffff:10.0.0.1", "::ffff:10.0.0.2"]),
        st.sampled_from([V1, V2]),
    ),
)


@given(st.lists(ENTRY, max_size=8))
def test_an_ipv4_roce_v2_gid_is_taken_wherever_the_table_has_one(table):
    index = _nccl_gid.nccl_gid_index(port(table))
    assert 0 <= index < max(1, len(table))
    has_v4_v2 = any(e and e[0].startswith("::ffff:") and e[1] == V2 for e in table)
    if has_v4_v2:
        assert table[index][0].startswith("::ffff:") and table[index][1] == V2


def test_the_twin_is_named_when_one_index_is_pinned_for_both():
    devices = [device("rocep1s0f1", SPARK_PRIMARY), device("roceP2p1s0f1", SPARK_TWIN)]
    problems = _nccl_gid.pinned_gid_problems(devices, "rocep1s0f1,roceP2p1s0f1", 3, {"rocep1s0f1": 3})
    assert problems == [
        "roceP2p1s0f1 port 1: index 3 is empty, not a RoCE v2 GID (its RoCE v2 GIDs: 1 (fe80::4))"
    ]


def test_a_pin_at_a_roce_v1_entry_is_refused():
    devices = [device("rocep1s0f1", SPARK_PRIMARY)]
    assert _nccl_gid.pinned_gid_problems(devices, None, 2) == [
        "rocep1s0f1 port 1: index 2 is IB/RoCE v1 ::ffff:192.168.200.12, not a RoCE v2 GID "
        "(its RoCE v2 GIDs: 1 (fe80::3), 3 (::ffff:192.168.200.12))"
    ]


def test_a_pin_the_table_moved_away_from_is_reported():
    devices = [device("rocep1s0f1", SPARK_PRIMARY_DRIFTED)]
    assert _nccl_gid.pinned_gid_problems(devices, None, 3, {"rocep1s0f1": 5}) == [
        "rocep1s0f1 port 1: index 3 is RoCE v2 fe80::33, but ib_address is at index 5 on this device"
    ]


def test_a_pin_that_holds_everywhere_passes():
    both = [device("rocep1s0f1", SPARK_PRIMARY), device("roceP2p1s0f1", SPARK_PRIMARY)]
    assert _nccl_gid.pinned_gid_problems(both, "rocep1s0f1,roceP2p1s0f1", 3, {"rocep1s0f1": 3}) == []
    # Only the primary listed: the twin is not NCCL's, so not checked.
    twins = [device("rocep1s0f1", SPARK_PRIMARY), device("roceP2p1s0f1", SPARK_TWIN)]
    assert _nccl_gid.pinned_gid_problems(twins, "rocep1s0f1", 3, {"rocep1s0f1": 3}) == []


@pytest.mark.parametrize(
    ("hca", "index", "expected"),
    [
        ("mlx5_9", 3, ["mlx5_9 is in NCCL_IB_HCA but is no RDMA device of ib_interface"]),
        ("=rocep1s0f1:1", 3, []),
        (None, -1, ["-1 is no GID index (NCCL reads a negative NCCL_IB_GID_INDEX as unset)"]),
        (None, None, []),
    ],
)
def test_pin_edge_cases(hca, index, expected):
    assert _nccl_gid.pinned_gid_problems([device("rocep1s0f1", SPARK_PRIMARY)], hca, index) == expected


def test_a_pin_on_a_node_without_rdma_devices_is_refused():
    # The lab's nodes, or an ib_interface that is not the RoCE port.
    assert _nccl_gid.pinned_gid_problems([], "", 3)[0].startswith("no RDMA device is behind ib_interface")
    assert _nccl_gid.pinned_gid_problems([], "", None) == []


def test_summary_says_which_device_has_no_ipv4_gid():
    devices = [device("rocep1s0f1", SPARK_PRIMARY), device("roceP2p1s0f1", SPARK_TWIN)]
    assert _nccl_gid.gid_summary(_nccl_gid.nccl_gids(devices)) == (
        "NCCL picks per device: rocep1s0f1:1 GID 3 RoCE v2 ::ffff:192.168.200.12; "
        "roceP2p1s0f1:1 GID 0 IB/RoCE v1 fe80::4 (no IPv4 RoCE v2 GID on this device)"
    )
