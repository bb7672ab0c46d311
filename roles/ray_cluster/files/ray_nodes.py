# Prints the Ray cluster's alive nodes as JSON: address and GPU count.
# Runs inside the head's Ray container (docker exec), connected as a driver.
import json
import logging
import signal

import ray

# ray.init can block for minutes when the GCS is half up (seen under load);
# SIGALRM's default action ends the process, so each caller's retry or
# report comes instead of a hang.
signal.alarm(45)
ray.init(address="auto", logging_level=logging.ERROR, log_to_driver=False)
nodes = [
    {"ip": node["NodeManagerAddress"], "gpus": node["Resources"].get("GPU", 0), "id": node["NodeID"]}
    for node in ray.nodes()
    if node["Alive"]
]
print(json.dumps(sorted(nodes, key=lambda node: node["ip"])))
