# The lab's vLLM image: real Ray (2.60, from the pinned wheels in the build context)
# and the stand-in `vllm` program (lab/vllm/vllm: a simulator, there is no GPU in the
# lab). Build it with lab/build-vllm-image, which assembles the context:
#   Dockerfile, vllm/vllm, vllm/requirements-ray.txt, wheels/*.whl
# Two stages, so the wheels (about 80 MB) stay out of the final image's layers; the
# classic builder (no BuildKit/buildx here) supports that, RUN --mount it does not.
FROM local/debian-systemd:12 AS ray
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv \
 && rm -rf /var/lib/apt/lists/*
COPY vllm/requirements-ray.txt /tmp/requirements-ray.txt
COPY wheels/ /tmp/wheels/
# --no-index: nothing comes from the network; a wheel missing from the set fails here.
RUN python3 -m venv /opt/ray \
 && /opt/ray/bin/pip install --no-index --no-cache-dir --find-links /tmp/wheels -r /tmp/requirements-ray.txt \
 && /opt/ray/bin/ray --version

FROM local/debian-systemd:12
ARG VLLM_VERSION=0.17.1
LABEL io.sparkops.vllm.lab="true" \
      org.opencontainers.image.title="sparkops vllm lab image" \
      org.opencontainers.image.description="Ray 2.60 and a stand-in vllm (simulator, no GPU) for the sparkops.vllm lab"
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=ray /opt/ray /opt/ray
COPY vllm/vllm /usr/local/bin/vllm
RUN chmod 0755 /usr/local/bin/vllm
ENV PATH=/opt/ray/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    SPARKOPS_LAB_VLLM_VERSION=${VLLM_VERSION}
# Ray's own check that the image is usable: `vllm --version` and `ray --version` both answer.
RUN vllm --version && ray --version
CMD ["vllm", "--version"]
