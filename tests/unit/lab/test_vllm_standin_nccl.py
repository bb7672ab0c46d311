"""The stand-in vLLM's NCCL (lab/vllm/vllm, "NCCL's network choice"), read back by the product.

The stand-in decides each rank's network with NCCL's checks on the lab's simulated RDMA tree
(lab/node/sparkops-lab-rdma) and prints NCCL's lines; the product's parser
(_nccl_transport.serve_transport, used by serve's readiness) must read them as it reads
real NCCL logs: both branches, and the pinned-GID failure.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._nccl_transport import serve_transport

ROOT = Path(__file__).resolve().parents[3]


def _load(name, path):
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


standin = _load("sparkops_lab_vllm_standin", ROOT / "lab" / "vllm" / "vllm")
sim = _load("sparkops_lab_rdma_for_nccl", ROOT / "lab" / "node" / "sparkops-lab-rdma")
HCA = "rocep1s0f1,roceP2p1s0f1"
MACS = {"spark-1": "02:42:c0:a8:c8:0c", "spark-2": "02:42:c0:a8:c8:0d"}
ADDRESSES = {"spark-1": "192.168.200.12", "spark-2": "192.168.200.13"}


def _node_tree(root, host, twin_address=None):
    for device in sim.spark_layout("enp1s0f1np1"):
        addresses = []
        if device["netdev"] == "enp1s0f1np1":
            addresses = [ADDRESSES[host]]
        elif device["netdev"] == "enP2p1s0f1np1" and twin_address:
            addresses = [twin_address]
        defaults, extra = sim.wanted_entries(device["netdev"], MACS[host], addresses)
        table = sim.next_table([None] * sim.TABLE_LEN, defaults, extra)
        sim.write_device(str(root), device, table, active=device["cabled"])
        (root / "dev").mkdir(exist_ok=True)
        (root / "dev" / f"uverbs{device['uverbs']}").write_text("")


def _nets(tmp_path, monkeypatch, env, uverbs=True):
    nets = []
    for host in ("spark-1", "spark-2"):
        root = tmp_path / host
        _node_tree(root, host)
        monkeypatch.setattr(standin, "RDMA_CDEV_DIR", str(root / "dev") if uverbs else str(root / "nodev"))
        environ = {"SYSFS_PATH": str(root), "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", **env}
        net = standin.nccl_net_choice(environ)
        net["socket_if"] = ("enp1s0f1np1", ADDRESSES[host])  # the test host has no such interface
        nets.append(net)
    return nets


def _log(nets, hosts=("spark-1", "spark-2")):
    text, failure = [], None
    for rank, host in enumerate(hosts):
        lines, failed = standin.nccl_rank_lines(rank, 2, 2, nets, f"0x{rank}")
        failure = failure or failed
        prefix = f"(EngineCore_DP0 pid=7) (RayWorkerWrapper pid={100 + rank}, ip={ADDRESSES[host]}) "
        header = f"{host}:{100 + rank}:{100 + rank} [0] "
        text += [prefix + header + (line if " NCCL WARN " in line else "NCCL " + line) for line in lines]
    return "\n".join(text), failure


def test_both_twins_listed_every_rank_runs_over_net_ib(tmp_path, monkeypatch):
    nets = _nets(tmp_path, monkeypatch, {"NCCL_IB_HCA": HCA})
    assert [d["name"] for d in nets[0]["devices"]] == ["rocep1s0f1", "roceP2p1s0f1"]
    assert nets[0]["devices"][0]["gid_index"] == 3
    text, failure = _log(nets)
    assert failure is None
    result = serve_transport(text, HCA.split(","), 2, True)
    assert result["verdict"] == "rdma" and result["ok"], result["problems"]
    assert [r["ib_devices_used"] for r in result["ranks"]] == [HCA.split(",")] * 2
    assert "rank 0 spark-1: NET/IB on rocep1s0f1,roceP2p1s0f1" in result["summary"]


def test_no_uverbs_nodes_fall_back_to_sockets_and_readiness_names_the_cause(tmp_path, monkeypatch):
    nets = _nets(tmp_path, monkeypatch, {"NCCL_IB_HCA": HCA}, uverbs=False)
    assert nets[0]["listed"] == [] and nets[0]["devices"] == []
    text, failure = _log(nets)
    assert failure is None  # NCCL falls back quietly: that is the danger
    result = serve_transport(text, HCA.split(","), 2, True)
    assert result["verdict"] == "socket_fallback" and not result["ok"]
    assert any("No device found" in p and "--device=/dev/infiniband" in p for p in result["problems"]), (
        result["problems"]
    )


def test_an_hca_list_naming_the_uncabled_port_finds_no_active_device(tmp_path, monkeypatch):
    nets = _nets(tmp_path, monkeypatch, {"NCCL_IB_HCA": "rocep1s0f0,roceP2p1s0f0"})
    text, _ = _log(nets)
    result = serve_transport(text, ["rocep1s0f0", "roceP2p1s0f0"], 2, True)
    assert result["verdict"] == "socket_fallback"
    assert any("NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0 matches no RDMA device" in p for p in result["problems"])


def test_a_pinned_gid_index_the_twin_lacks_fails_init_with_nccls_warn(tmp_path, monkeypatch):
    nets = _nets(tmp_path, monkeypatch, {"NCCL_IB_HCA": HCA, "NCCL_IB_GID_INDEX": "3"})
    assert nets[0]["devices"][1]["gid"] is None  # the twin has no IPv4 GID at 3
    text, failure = _log(nets)
    assert failure and "ibv_modify_qp" in failure
    assert "misc/ibvwrap.cc:307 NCCL WARN Call to ibv_modify_qp failed with 22 Invalid argument" in text
    result = serve_transport(text, HCA.split(","), 2, True)
    assert not result["ok"]
    assert any("ibv_modify_qp" in p for p in result["problems"])


def test_without_nccl_debug_there_are_no_lines_and_readiness_says_so(tmp_path, monkeypatch):
    nets = _nets(tmp_path, monkeypatch, {"NCCL_IB_HCA": HCA, "NCCL_DEBUG": ""})
    assert not nets[0]["logs"]
    result = serve_transport("no nccl here", HCA.split(","), 2, True)
    assert not result["ok"] and any("no NCCL line" in p for p in result["problems"])
    assert serve_transport("no nccl here", [], 2, False)["ok"]


@pytest.mark.parametrize(
    ("name", "port", "spec", "want"),
    [
        ("rocep1s0f1", 1, "rocep1s0f1,roceP2p1s0f1", True),
        ("rocep1s0f1", 1, "rocep1", True),
        ("rocep1s0f1", 1, "=rocep1", False),
        ("rocep1s0f1", 1, "^rocep1s0f0", True),
        ("rocep1s0f1", 1, "^rocep1s0f1", False),
        ("rocep1s0f1", 1, "rocep1s0f1:2", False),
        ("rocep1s0f1", 1, None, True),
    ],
)
def test_hca_list_matching_follows_nccl(name, port, spec, want):
    assert standin.nccl_if_list_match(name, port, spec) is want


def test_nccl_debug_levels():
    assert standin.nccl_logs_info({"NCCL_DEBUG": "INFO"})
    assert standin.nccl_logs_info({"NCCL_DEBUG": "info", "NCCL_DEBUG_SUBSYS": "NET"})
    assert not standin.nccl_logs_info({"NCCL_DEBUG": "WARN"})
    assert not standin.nccl_logs_info({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "COLL"})
    assert not standin.nccl_logs_info({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "^INIT,NET"})


def test_a_rerun_whose_journal_lost_the_lines_reports_instead_of_failing():
    result = serve_transport("", HCA.split(","), 2, True, started=False)
    assert result["ok"] and not result["enforced"] and not result["problems"]
    assert "no longer in the journal" in result["summary"]
    # A start of this run must have logged them.
    assert not serve_transport("", HCA.split(","), 2, True, started=True)["ok"]


def test_a_restart_that_did_not_detect_the_network_takes_the_rule_from_the_log(tmp_path, monkeypatch):
    nets = _nets(tmp_path, monkeypatch, {"NCCL_IB_HCA": HCA}, uverbs=False)
    text, _ = _log(nets)
    result = serve_transport(text, [], 2, None)
    assert result["enforced"] and not result["ok"]  # every rank logged the HCA list, on two nodes
    nets = _nets(tmp_path, monkeypatch, {})
    text, _ = _log(nets)
    assert not serve_transport(text, [], 2, None)["enforced"]  # no HCA list: no RDMA was deployed
