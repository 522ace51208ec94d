#!/usr/bin/env bash
# Free what earlier test runs left behind on a reused machine: test containers,
# dangling images and old test-registry data. Never touches other images.
set -uo pipefail
DOCKER=docker
docker info >/dev/null 2>&1 || DOCKER=/usr/bin/docker
$DOCKER info >/dev/null 2>&1 || exit 0
ids=$($DOCKER ps -aq --filter label=io.proven-torch.role)
# shellcheck disable=SC2086 # one argument per container ID
[[ -n "$ids" ]] && $DOCKER rm -f -v $ids >/dev/null
$DOCKER image prune -f >/dev/null
$DOCKER images --format '{{.Repository}}:{{.Tag}}' | grep -E '^(localhost:5000/)?proven-torch-test' | xargs -r $DOCKER rmi -f >/dev/null 2>&1
exit 0
