"""plugins/module_utils/_meminfo.py: real and constructed /proc/meminfo texts."""

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils._meminfo import (
    MeminfoError,
    memory_from_meminfo,
    parse_meminfo,
)
from conftest import FIXTURES
from test_nvidia_smi import real

KIB = 1024


def own(name):
    lines = (FIXTURES / "meminfo" / name).read_text().splitlines()
    assert lines[0].startswith("# Constructed")
    return "\n".join(lines[1:]) + "\n"


def test_real_593gb_host_fixture_73():
    memory, warnings = memory_from_meminfo(real("73", start="$ cat /proc/meminfo"))
    assert memory["total_bytes"] == 593026380 * KIB
    assert memory["available_bytes"] == 34258672 * KIB
    assert memory["free_bytes"] == 22093964 * KIB
    assert memory["cached_bytes"] == 13545432 * KIB
    assert memory["buffers_bytes"] == 333600 * KIB
    assert memory["swap_total_bytes"] == memory["swap_free_bytes"] == 500106236 * KIB
    assert memory["available_estimated"] is False
    # the excerpt ends in a bare "SUnreclaim:" and has no HugePages_* lines
    assert warnings == ["/proc/meminfo line not understood: 'SUnreclaim:'"]
    assert memory["hugepages"] == {
        "total": None,
        "free": None,
        "page_size_bytes": None,
        "reserved_bytes": None,
    }


def test_real_gb10_excerpt_fixture_04_lacks_memfree():
    text = real("04", start="--- block 1", stop="--- block 2")
    fields, skipped = parse_meminfo(text)
    assert (fields["MemTotal"], fields["MemAvailable"]) == (127600748, 118566368)
    assert len(skipped) == 4  # the NVML lines around them
    with pytest.raises(MeminfoError, match="lacks MemFree"):
        memory_from_meminfo(text)


def test_real_h200_vm():
    lines = (FIXTURES / "real_h200" / "meminfo.txt").read_text().splitlines()
    memory, warnings = memory_from_meminfo("\n".join(lines[2:]))
    fields, _ = parse_meminfo("\n".join(lines[2:]))
    assert memory["total_bytes"] == fields["MemTotal"] * KIB
    assert memory["available_bytes"] == fields["MemAvailable"] * KIB
    assert warnings == []


def test_gb10_dgx_spark():
    memory, warnings = memory_from_meminfo(own("gb10_dgx_spark.txt"))
    assert memory == {
        "total_bytes": 127600748 * KIB,
        "free_bytes": 116063972 * KIB,
        "available_bytes": 118566368 * KIB,
        "buffers_bytes": 333600 * KIB,
        "cached_bytes": 3750868 * KIB,
        "swap_total_bytes": 16777212 * KIB,
        "swap_free_bytes": 16777212 * KIB,
        "shmem_bytes": 28432 * KIB,
        "sreclaimable_bytes": 782220 * KIB,
        "cma_total_bytes": None,
        "cma_free_bytes": None,
        "available_estimated": False,
        "hugepages": {"total": 0, "free": 0, "page_size_bytes": 2048 * KIB, "reserved_bytes": 0},
    }
    assert warnings == []


def test_old_kernel_estimates_available_and_warns():
    memory, warnings = memory_from_meminfo(own("old_kernel_no_memavailable.txt"))
    # MemFree + Buffers + Cached + SReclaimable - Shmem
    assert memory["available_bytes"] == (1021400 + 204800 + 3072000 + 307200 - 102400) * KIB
    assert memory["available_estimated"] is True
    assert len(warnings) == 1
    assert "no MemAvailable" in warnings[0]


def test_hugepages_reservation_from_page_count():
    memory, _ = memory_from_meminfo(own("hugepages_1g_reserved.txt"))
    assert memory["hugepages"] == {
        "total": 512,
        "free": 40,
        "page_size_bytes": 1024**3,
        "reserved_bytes": 512 * 1024**3,
    }


def test_free_is_not_meminfo():
    # fixture 72: old procps `free -b` output is refused, not half-read
    with pytest.raises(MeminfoError):
        memory_from_meminfo(real("72", start="free -b:"))
