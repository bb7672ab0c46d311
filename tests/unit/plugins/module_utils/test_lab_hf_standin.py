"""The lab's stand-in for `hf download --local-dir` (plugins/module_utils/_lab_hf_standin.py)."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.sparkops.vllm.plugins.module_utils import _lab_hf_standin as hf
from ansible_collections.sparkops.vllm.plugins.module_utils import _model_sync_synthetic as synthetic

REPO = "sparkops-lab/tiny-moe"


def _tree(root):
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = path
    return out


def test_a_download_lays_files_out_as_hf_download_local_dir_does(tmp_path):
    local = tmp_path / "m.rev-lab-rev2"
    written = hf.download(REPO, str(local), "lab-rev2", 2, 1)
    names = {"config.json", "generation_config.json", "model.safetensors.index.json"}
    names |= {synthetic.shard_name(i, 2) for i in range(2)}
    assert set(written) == names
    tree = _tree(local)
    for name in names:
        assert not os.path.islink(local / name)  # plain files, nothing behind links
        meta = (local / ".cache" / "huggingface" / "download" / f"{name}.metadata").read_text().splitlines()
        assert meta[0] == hf.commit_hash(REPO, "lab-rev2") and len(meta[0]) == 40
        assert meta[1] == hashlib.sha256((local / name).read_bytes()).hexdigest()
        float(meta[2])
    assert (local / ".cache" / "huggingface" / ".gitignore").read_text() == "*"
    assert not [name for name in tree if name.endswith(".incomplete")]
    assert os.path.getsize(local / synthetic.shard_name(0, 2)) == synthetic.MIB
    assert json.loads((local / "config.json").read_text())["_sparkops_revision"] == "lab-rev2"


def test_a_second_download_writes_nothing(tmp_path):
    hf.download(REPO, str(tmp_path), "lab-rev2", 2, 1)
    assert hf.download(REPO, str(tmp_path), "lab-rev2", 2, 1) == []


def test_a_damaged_file_is_written_again(tmp_path):
    hf.download(REPO, str(tmp_path), "lab-rev2", 2, 1)
    shard = tmp_path / synthetic.shard_name(1, 2)
    shard.write_bytes(b"x")
    os.utime(shard, (1e10, 1e10))  # modified after its metadata
    assert hf.download(REPO, str(tmp_path), "lab-rev2", 2, 1) == [synthetic.shard_name(1, 2)]
    assert os.path.getsize(shard) == synthetic.MIB


@pytest.mark.parametrize("other", ["lab-rev3", "main"])
def test_revisions_differ_in_content_not_in_layout_or_size(tmp_path, other):
    hf.download(REPO, str(tmp_path / "a"), "lab-rev2", 2, 1)
    hf.download(REPO, str(tmp_path / "b"), other, 2, 1)
    for index in range(2):
        name = synthetic.shard_name(index, 2)
        a, b = (tmp_path / "a" / name).read_bytes(), (tmp_path / "b" / name).read_bytes()
        assert len(a) == len(b) and a != b


def test_the_labs_own_model_is_unchanged_by_the_variant():
    plain = b"".join(synthetic.shard_chunks(0, 2, 1))
    assert plain == b"".join(synthetic.shard_chunks(0, 2, 1, variant=""))
    assert "_sparkops_revision" not in json.loads(synthetic.small_files(REPO, 2, 1)["config.json"])


def test_it_runs_as_a_plain_script_with_the_generator_beside_it(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    for module in (hf, synthetic):
        (bundle / os.path.basename(module.__file__)).write_bytes(Path(module.__file__).read_bytes())
    local = tmp_path / "dl"
    env = {"PATH": os.environ.get("PATH", ""), "SPARKOPS_LAB_SHARDS": "2", "SPARKOPS_LAB_SHARD_MIB": "1"}
    done = subprocess.run(
        [
            sys.executable,
            str(bundle / "_lab_hf_standin.py"),
            "download",
            REPO,
            "--local-dir",
            str(local),
            "--revision",
            "lab-rev2",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(local)
    assert (local / "config.json").exists()


def test_a_relative_local_dir_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        hf.main(["download", REPO, "--local-dir", "relative"])
    assert exc.value.code == 2 and "absolute" in capsys.readouterr().err
