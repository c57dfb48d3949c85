#!/usr/bin/env bash
# Installs what the test suite and the demo need on a fresh Debian/Ubuntu machine:
# OpenSSH server and client, tmux, iproute2 and nftables (fault-injection tests), jq (the
# examples in docs/cli.md, run as written by a test).
# Safe to run again: installs only what is missing. Needs root (or sudo) for apt-get.
set -euo pipefail

need=()
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v jq >/dev/null 2>&1 || need+=(jq)   # docs/cli.md examples use it

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${need[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "install-deps: need root to install: ${need[*]} (run: apt-get install -y ${need[*]})" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
