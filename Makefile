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
	python -m pytest -q -p no:cacheprovider -n auto tests

lint:
	yamllint -s .
	ruff check .
	ruff format --check .
	ansible-lint --offline

# Molecule's state (is the lab created? converged?) lives in the clone and
# starts empty on every run, so a lab removed since, or a bare machine, gets
# the lab created again instead of assumed.
molecule: export MOLECULE_EPHEMERAL_DIRECTORY := $(CURDIR)/.cache/molecule
molecule:
	rm -rf $(MOLECULE_EPHEMERAL_DIRECTORY)
	molecule test --all
