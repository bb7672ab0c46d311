"""After reclaim: the stale container stopped and stays stopped; nothing else was touched."""

import json

testinfra_hosts = ["ansible://spark-2"]


def _inspect(host, name):
    return json.loads(host.check_output(f"docker inspect {name}"))[0]


def test_stale_container_stopped_and_will_not_restart(host):
    state = _inspect(host, "vllm-embeddings")
    assert state["State"]["Running"] is False
    assert state["HostConfig"]["RestartPolicy"]["Name"] == "no"


def test_other_containers_untouched(host):
    for name, policy in (("lab-own-worker", "always"), ("metrics-exporter", "unless-stopped")):
        state = _inspect(host, name)
        assert state["State"]["Running"] is True, name
        assert state["HostConfig"]["RestartPolicy"]["Name"] == policy, name


def test_stale_pid_no_longer_holds_the_gpu(host):
    state = json.loads(host.file("/etc/sparkops-lab/gpu-state.json").content_string)
    stale_pid = next(p["pid"] for p in state["processes"] if p.get("tag") == "vllm-embeddings")
    apps = host.check_output("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits")
    pids = {int(line.split(",")[0]) for line in apps.splitlines() if line.strip()}
    assert stale_pid not in pids
