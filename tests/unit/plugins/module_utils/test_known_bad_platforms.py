"""plugins/module_utils/_known_bad_platforms.py: each row decided both ways on real captured outputs."""

import re

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _known_bad_platforms as table
from ansible_collections.sparkops.vllm.plugins.module_utils._meminfo import memory_from_meminfo
from conftest import FIXTURES, ROOT

KNOWN_BAD = FIXTURES / "known_bad"


def text(name):
    """A fixture without its source header, its `$ command` line and its `rc=N` line."""
    lines = (KNOWN_BAD / name).read_text().splitlines()
    assert lines[0].startswith("#"), name
    return (
        "\n".join(
            line for line in lines if not line.startswith(("#", "$ ")) and not re.fullmatch(r"rc=\d+", line)
        )
        + "\n"
    )


def real_nvidia_smi_driver(name):
    """The driver version a real nvidia-smi capture shows (tests/fixtures/real)."""
    return re.search(r"Driver Version: (\S+)", (FIXTURES / "real" / name).read_text()).group(1)


H200_MEMINFO = text("h200_meminfo.txt")
H200_KERNEL = text("h200_proc_version.txt").split()[2]
OPEN = text("h200_proc_driver_nvidia_version.txt")
PROPRIETARY = text("field_nvrm_proprietary_aarch64.txt")


def node(driver, **kwargs):
    kwargs.setdefault("unified_memory", True)
    return {row["id"]: row for row in table.evaluate_node("spark-2", driver_version=driver, **kwargs)}


# --- driver branch ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("driver", "row", "status"),
    [
        # A GB10's own capture (fixture 01, 580.95.05): the known-good branch.
        (
            real_nvidia_smi_driver("01_gb10_nvidia-smi_table_processes_obrienlabs.txt"),
            "driver_branch",
            "pass",
        ),
        # The lent H200 (580.159.04) and the reports' 580.173.02.
        ("580.159.04", "driver_branch", "pass"),
        ("580.173.02", "driver_branch", "pass"),
        # Newer branches DGX OS updates ship (open-gpu-kernel-modules #1358: 595.84 -> 595.91.07): a warning.
        ("595.84", "driver_branch", "warn"),
        ("595.91.07", "driver_branch", "warn"),
        # Older than the minimum: the GH200 capture's 535 and fixture 51a's 570 message.
        (
            real_nvidia_smi_driver("07_gh200_nvidia-smi_and_free-h_warp-ik.txt"),
            "driver_below_minimum",
            "fail",
        ),
        ("570.124.06", "driver_below_minimum", "fail"),
        ("", "driver_branch", "fail"),
    ],
)
def test_driver_branch(driver, row, status):
    rows = node(driver)
    assert rows[row]["status"] == status
    if status != "pass":
        assert rows[row]["message"].startswith("spark-2: ")
        assert rows[row]["fix"] and rows[row]["source"]


def test_an_unknown_newer_branch_warns_and_names_the_branch():
    row = node("595.91.07")["driver_branch"]
    assert "branch 595 has not been validated" in row["message"]
    assert row["value"] == "driver 595.91.07 (branch 595)"


def test_below_the_minimum_can_be_accepted_on_the_operators_responsibility():
    rows = node("570.124.06", accept=["driver_below_minimum"])
    assert rows["driver_below_minimum"]["status"] == "accepted"
    assert "operator's responsibility" in rows["driver_below_minimum"]["message"]
    assert table.failures(list(rows.values())) == []


def test_an_unknown_row_to_accept_is_refused():
    with pytest.raises(ValueError, match="unknown rows \\['driver_590'\\]"):
        node("580.95.05", accept=["driver_590"])


def test_discrete_gpus_are_not_judged_by_the_gb10_rows():
    rows = node("535.183.01", unified_memory=False)
    assert rows["driver_branch"]["status"] == "not_applicable"
    assert rows["driver_proprietary_flavour"]["status"] == "not_applicable"


# --- driver flavour -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("proc", "flavour"),
    [(OPEN, "open"), (PROPRIETARY, "proprietary"), ("", None), ("GCC version: gcc 12\n", None)],
)
def test_flavour_from_proc_driver_nvidia_version(proc, flavour):
    assert table.driver_flavour(proc) == flavour


@pytest.mark.parametrize(
    ("driver", "proc", "status"),
    [
        ("580.159.04", OPEN, "pass"),  # the H200's real line
        ("580.173.02", PROPRIETARY, "fail"),  # Start9 PR #3693: the GPU never initializes
        ("595.91.07", PROPRIETARY, "fail"),
        ("580.159.03", PROPRIETARY, "warn"),  # the same PR: 580.159.03 worked proprietary
        ("580.95.05", None, "not_applicable"),  # the lab: no NVIDIA kernel module
        ("580.95.05", "garbage\n", "not_applicable"),
    ],
)
def test_driver_flavour(driver, proc, status):
    row = node(driver, proc_driver_version=proc)["driver_proprietary_flavour"]
    assert row["status"] == status
    assert row["message"].startswith("spark-2: ")


def test_the_proprietary_fail_names_the_open_package_of_its_branch():
    row = node("580.173.02", proc_driver_version=PROPRIETARY)["driver_proprietary_flavour"]
    assert "nvidia-driver-580-open" in row["fix"]
    assert "preflight_known_bad_accept: [driver_proprietary_flavour]" in row["fix"]


# --- the kernel's CMA accounting (KHO) ------------------------------------------------------


def meminfo_with(name):
    memory, _warnings = memory_from_meminfo(H200_MEMINFO + text(name))
    return memory


@pytest.mark.parametrize(
    ("memory", "status"),
    [
        (meminfo_with("field_miaai-259_cmatotal0_cmafree.txt"), "fail"),  # 7.0.0-1019-nvidia, KHO on
        (meminfo_with("field_miaai-259_cma32m_kho.txt"), "fail"),  # 7.0.0-31-generic: CmaTotal 32 MiB only
        (meminfo_with("field_nv-kernels-591_kho_off.txt"), "pass"),  # kho=off: 0 and 0
        (memory_from_meminfo(H200_MEMINFO)[0], "not_applicable"),  # the H200's kernel has no CMA
    ],
)
def test_kernel_kho_cma(memory, status):
    row = node("580.173.02", memory=memory, kernel_release="7.0.0-1019-nvidia")["kernel_kho_cma"]
    assert row["status"] == status
    assert "7.0.0-1019-nvidia" in row["message"]


def test_the_cma_failure_names_host_values_and_the_fix():
    row = node(
        "580.173.02",
        memory=meminfo_with("field_miaai-259_cmatotal0_cmafree.txt"),
        kernel_release="7.0.0-1019-nvidia",
    )["kernel_kho_cma"]
    assert row["value"] == "kernel 7.0.0-1019-nvidia, CmaTotal 0 kB, CmaFree 940604 kB"
    assert row["message"].startswith("spark-2: /proc/meminfo shows CmaFree (940604 kB) above CmaTotal (0 kB)")
    assert "kho=off" in row["fix"] and "update-grub" in row["fix"]
    assert "NV-Kernels/pull/591" in row["source"]


def test_h200_kernel_release_is_read_from_its_proc_version():
    assert H200_KERNEL == "6.18.44-fc-v1147-gpu"


# --- the image's NCCL --------------------------------------------------------------------------


H200_PROBE = table.image_nccl(table.parse_probe(text("h200_nccl_probe.txt")))
NO_NCCL = table.image_nccl(table.parse_probe(text("field_probe_no_nccl.txt")))


def test_the_h200_probe_reads_torchs_nccl_and_both_libraries():
    assert H200_PROBE["loaded_version"] == "2.28.9"
    assert H200_PROBE["loaded_by"] == "torch"
    assert H200_PROBE["loaded_paths"] == [
        "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
    ]
    assert [(lib["package"], lib["version"]) for lib in H200_PROBE["pip"]] == [("nvidia-nccl-cu13", "2.28.9")]
    # ldconfig lists libnccl.so and libnccl.so.2, one file: counted once.
    assert [(lib["version"], lib["path"]) for lib in H200_PROBE["system"]] == [
        ("2.28.3", "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3")
    ]


def image(nccl, cuda_graphs=True, tp=2, gpus_per_node=1):
    rows = table.evaluate_image(
        "spark-1", nccl, cuda_graphs=cuda_graphs, tensor_parallel_size=tp, gpus_per_node=gpus_per_node
    )
    return {row["id"]: row for row in rows}


@pytest.mark.parametrize(
    ("kwargs", "status", "says"),
    [
        ({}, "warn", "older than 2.30.4"),  # NCCL 2.28.9, graphs on, TP across two Sparks
        ({"cuda_graphs": False}, "pass", "CUDA graphs are off"),
        ({"tp": 1}, "pass", "within a node"),
        ({"tp": 8, "gpus_per_node": 8}, "pass", "within a node"),
    ],
)
def test_nccl_graph_cross_node_on_the_h200_image(kwargs, status, says):
    row = image(H200_PROBE, **kwargs)["nccl_graph_cross_node"]
    assert row["status"] == status
    assert says in row["message"]


def test_nccl_graph_cross_node_passes_from_the_fixed_release():
    fixed = dict(H200_PROBE, loaded_version="2.30.4")
    assert image(fixed)["nccl_graph_cross_node"]["status"] == "pass"
    assert image(dict(H200_PROBE, loaded_version="2.30.3"))["nccl_graph_cross_node"]["status"] == "warn"


def test_the_h200_image_holds_two_nccl_builds_and_torch_loads_the_pip_one():
    row = image(H200_PROBE)["nccl_pip_system_pair"]
    assert row["status"] == "warn"
    assert "nvidia-nccl-cu13 2.28.9" in row["value"] and "system 2.28.3" in row["value"]
    assert "ln -sf /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3 " in row["fix"]
    assert "vllm-project/vllm/issues/42354" in row["source"]


def test_nccl_pair_passes_when_torch_loads_the_system_library_or_one_file_is_both():
    system = H200_PROBE["system"][0]["path"]
    assert image(dict(H200_PROBE, loaded_paths=[system]))["nccl_pip_system_pair"]["status"] == "pass"
    same = dict(H200_PROBE, system=[dict(H200_PROBE["system"][0], sha256=H200_PROBE["pip"][0]["sha256"])])
    assert image(same)["nccl_pip_system_pair"]["status"] == "pass"
    assert image(dict(H200_PROBE, system=[]))["nccl_pip_system_pair"]["status"] == "pass"


def test_an_image_without_nccl_reports_both_rows_not_applicable():
    rows = image(NO_NCCL)
    assert NO_NCCL["loaded_version"] is None
    assert {row["status"] for row in rows.values()} == {"not_applicable"}
    assert "not applicable: no NCCL in the image" in rows["nccl_graph_cross_node"]["message"]


@pytest.mark.parametrize("output", ["", "python3: not found", "{not json", "[1, 2]"])
def test_a_probe_without_json_is_an_error(output):
    with pytest.raises(table.ProbeError):
        table.parse_probe(output)


@pytest.mark.parametrize(
    ("code", "version"), [(22809, "2.28.9"), (23004, "2.30.4"), (2804, "2.8.4"), (0, None)]
)
def test_nccl_version_codes(code, version):
    assert table.nccl_version_from_code(code) == version


def test_report_lines_carry_fix_and_source_for_problems_only():
    rows = list(image(H200_PROBE, cuda_graphs=False).values())
    lines = table.report_lines(rows)
    assert lines[0].startswith("nccl_graph_cross_node pass: spark-1: CUDA graphs are off.")
    assert "Source:" not in lines[0]
    assert "Fix: in the image, point the wheel's library" in lines[1]
    assert "Source: https://github.com/vllm-project/vllm/issues/42354" in lines[1]


def test_every_row_id_is_documented():
    doc = (ROOT / "docs" / "known-bad-platforms.md").read_text()
    for row in table.ROW_IDS:
        assert f"`{row}`" in doc, row
