"""main() of plugins/modules/image_archive_info.py with patched exit_json/fail_json."""

import io
import json
import tarfile

from ansible_collections.sparkops.vllm.plugins.modules import image_archive_info
from test_meminfo_module import run_module

HEX = "a6e5f41634985e96860735c0382d071470cc88161427488d0b439800010da373"


def _save(path, manifest):
    with tarfile.open(path, "w") as archive:
        for name, data in [(HEX + ".json", b"{}"), ("manifest.json", json.dumps(manifest).encode())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return str(path)


def test_returns_the_id_of_the_referenced_image(monkeypatch, tmp_path):
    path = _save(
        tmp_path / "lab.tar", [{"Config": HEX + ".json", "RepoTags": ["sparkops/vllm-lab:cc9f594b5600"]}]
    )
    result = run_module(
        monkeypatch,
        {"path": path, "reference": "sparkops/vllm-lab:cc9f594b5600"},
        main=image_archive_info.main,
    )
    assert result["changed"] is False
    assert result["image"] == {
        "image_id": "sha256:" + HEX,
        "repo_tags": ["sparkops/vllm-lab:cc9f594b5600"],
        "layers": 0,
    }
    assert result["size_bytes"] == (tmp_path / "lab.tar").stat().st_size
    assert len(result["images"]) == 1


def test_missing_archive_says_how_to_write_it(monkeypatch, tmp_path):
    result = run_module(
        monkeypatch, {"path": str(tmp_path / "nope.tar")}, expect="fail_json", main=image_archive_info.main
    )
    assert "no such archive" in result["msg"]
    assert "docker save -o" in result["msg"]


def test_wrong_reference_lists_the_archive_tags(monkeypatch, tmp_path):
    path = _save(tmp_path / "lab.tar", [{"Config": HEX + ".json", "RepoTags": ["sparkops/vllm-lab:1"]}])
    result = run_module(
        monkeypatch,
        {"path": path, "reference": "vllm/vllm-openai:v0.17.1"},
        expect="fail_json",
        main=image_archive_info.main,
    )
    assert "no image tagged vllm/vllm-openai:v0.17.1 (its tags: sparkops/vllm-lab:1)" in result["msg"]
