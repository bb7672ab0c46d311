# One lab node: a stand-in for one DGX Spark. Everything in it is real
# (systemd as PID 1, sshd, its own Docker engine, rsync, iproute2) except the
# GPU: /usr/bin/nvidia-smi is the simulator in lab/nvidia-smi, which prints the
# real GB10 formats from a state file that tests can write.
FROM local/debian-systemd:12

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      docker.io openssh-server iputils-ping iptables procps curl kmod \
      python3-docker python3-requests python3-yaml \
 && rm -rf /var/lib/apt/lists/* \
 # Host keys are made per node at first boot (sparkops-lab-hostkeys.service),
 # so two nodes never share one and known_hosts stays meaningful.
 && rm -f /etc/ssh/ssh_host_* \
 && mkdir -p /root/.ssh /etc/sparkops-lab \
 && chmod 0700 /root/.ssh \
 # A container has no consoles or udev; these units only fail there.
 && systemctl mask getty.target systemd-udevd.service systemd-udev-trigger.service \
      systemd-logind.service console-getty.service \
 && systemctl enable docker.service ssh.service

COPY node/sshd_config /etc/ssh/sshd_config.d/10-sparkops-lab.conf
COPY node/sparkops-lab-hostkeys.service /etc/systemd/system/sparkops-lab-hostkeys.service
COPY node/daemon.json /etc/docker/daemon.json
COPY node/sparkops-lab-ifnames /usr/local/sbin/sparkops-lab-ifnames
COPY node/sparkops-lab-ifnames.service /etc/systemd/system/sparkops-lab-ifnames.service
# The simulated ConnectX-7 (lab/node/sparkops-lab-rdma says what it simulates and from where).
COPY node/sparkops-lab-rdma /usr/local/sbin/sparkops-lab-rdma
COPY node/sparkops-lab-rdma.service /etc/systemd/system/sparkops-lab-rdma.service
COPY nvidia-smi /usr/bin/nvidia-smi
RUN chmod 0755 /usr/bin/nvidia-smi /usr/local/sbin/sparkops-lab-rdma \
 && systemctl enable sparkops-lab-hostkeys.service sparkops-lab-ifnames.service sparkops-lab-rdma.service

STOPSIGNAL SIGRTMIN+3
CMD ["/lib/systemd/systemd"]
