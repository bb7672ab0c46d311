# sparkops.vllm: the two commands of the README, and their parts.
#   make deploy   set up, bring the local two-node lab up, run deploy.yml on it
#   make test     set up, then unit tests, lint, and every Molecule scenario
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export NO_COLOR := 1
export PY_COLORS := 0

.PHONY: deploy test setup lab-up lab-down unit lint molecule

deploy: setup lab-up
	ansible-playbook deploy.yml

test: setup unit lint molecule

setup:
	scripts/setup

lab-up: setup
	ansible-playbook playbooks/lab_up.yml

lab-down: setup
	ansible-playbook playbooks/lab_down.yml

unit:
	python -m pytest -q -p no:cacheprovider tests

lint:
	yamllint -s .
	ruff check .
	ruff format --check .
	ansible-lint --offline

# Molecule keeps scenario state outside the clone; reset it so a lab removed
# since (or a bare machine) is created again rather than assumed.
molecule:
	molecule reset --all
	molecule test --all
