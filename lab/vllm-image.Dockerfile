# The lab's vLLM image: real Ray (2.60, from the pinned wheels in the build context)
# and the stand-in `vllm` program (lab/vllm/vllm: a simulator, there is no GPU in the
# lab). Build it with lab/build-vllm-image, which assembles the context:
#   Dockerfile, vllm/vllm, vllm/requirements-ray.txt, wheels/*.whl
#
# Two stages: the wheels (about 80 MB) and python3-venv stay in the first; the final
# image is the base plus two layers (/opt/ray and /usr/local/bin/vllm). Few layers
# matter in the lab: the nodes' inner Docker engines use the vfs storage driver, which
# keeps a full copy of the file system per layer. The classic builder is used (no
# BuildKit/buildx on the build machines), so no RUN --mount.
FROM local/debian-systemd:12 AS ray
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv \
 && rm -rf /var/lib/apt/lists/*
COPY vllm/requirements-ray.txt /tmp/requirements-ray.txt
COPY wheels/ /tmp/wheels/
COPY vllm/vllm /usr/local/bin/vllm
# The product's RDMA readers (plugins/module_utils), importable by the stand-in and its Ray
# workers: its simulated NCCL takes the GID with the project's port of NCCL's rule.
COPY vllm/_roce.py vllm/_nccl_gid.py /tmp/sparkops/
# --no-index: nothing comes from the network; a wheel missing from the set fails here.
# pip itself is not needed at run time. The last line checks both entrypoints answer.
RUN python3 -m venv /opt/ray \
 && /opt/ray/bin/pip install --no-index --no-cache-dir --find-links /tmp/wheels -r /tmp/requirements-ray.txt \
 && /opt/ray/bin/python -m pip uninstall -q -y pip \
 && cp /tmp/sparkops/_roce.py /tmp/sparkops/_nccl_gid.py /opt/ray/lib/python3.11/site-packages/ \
 && chmod 0755 /usr/local/bin/vllm \
 && PATH=/opt/ray/bin:$PATH vllm --version && /opt/ray/bin/ray --version

FROM local/debian-systemd:12
ARG VLLM_VERSION=0.17.1
COPY --from=ray /opt/ray /opt/ray
COPY --from=ray /usr/local/bin/vllm /usr/local/bin/vllm
ENV PATH=/opt/ray/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    SPARKOPS_LAB_VLLM_VERSION=${VLLM_VERSION}
LABEL io.sparkops.vllm.lab="true" \
      org.opencontainers.image.title="sparkops vllm lab image" \
      org.opencontainers.image.description="Ray 2.60 and a stand-in vllm (simulator, no GPU) for the sparkops.vllm lab"
CMD ["vllm", "--version"]
